package tg

import (
	"context"
	"time"

	"github.com/taskgraph/taskgraph/internal/exporter"
)

// ExportSource is something of the program's own that the export task
// type writes to an xlsx or CSV file (the console's and the API's export,
// `taskgraph export --source NAME`): a table of its, say. The file is the
// export's owner's to download; its text cells are masked and escaped
// against formula injection.
type ExportSource struct {
	// Name is what an export names as its source, lower case.
	Name        string
	Description string
	// Columns is the file's header row.
	Columns []string
	// Rows writes the rows q selects, one call of row each, in the order
	// of the file, reading as it likes (page by page: the file is written
	// as a stream). It must show q.Owner no more than they may see.
	Rows func(ctx context.Context, q ExportQuery, row func(cells ...any) error) error
}

// ExportQuery is what an export asks of an ExportSource: who asks, the
// time range of its filter (zero: none), and its params.
type ExportQuery struct {
	Owner Owner
	// CreatedAfter and CreatedBefore bound what was created in
	// [CreatedAfter, CreatedBefore); zero when the filter gives none.
	CreatedAfter, CreatedBefore time.Time
	// Params are the filter's params, the source's to read.
	Params map[string]string
}

// RegisterExportSource adds s to the sources exports may name, before
// Start: the export type's input schema lists it from then on. A source
// without a name, columns or rows, or a name taken, is a
// *ValidationError.
func RegisterExportSource(c *Client, s ExportSource) error {
	if s.Rows == nil {
		return &ValidationError{Problems: []Problem{{Field: "Rows", Message: "a source needs Rows"}}}
	}
	src := exporter.Source{Name: s.Name, Description: s.Description, Columns: s.Columns,
		Rows: func(ctx context.Context, q exporter.SourceQuery, row func(cells ...any) error) error {
			eq := ExportQuery{Owner: Owner{Source: q.Owner.Source, Tenant: q.Owner.Tenant, User: q.Owner.User}, Params: q.Params}
			if q.CreatedAfter != nil {
				eq.CreatedAfter = *q.CreatedAfter
			}
			if q.CreatedBefore != nil {
				eq.CreatedBefore = *q.CreatedBefore
			}
			return s.Rows(ctx, eq, row)
		}}
	return c.beforeStart(func() error {
		if err := c.app.Exporter.AddSource(src); err != nil {
			return &ValidationError{Problems: []Problem{{Field: "source", Message: err.Error()}}}
		}
		return nil
	})
}
