package schema

import (
	"fmt"

	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TaskHistory is one row of the task history's compact time series: the
// counts of a bucket of time (a minute, an hour or a day), a task type and
// a tenant, with a log-scale histogram of wait and run times (package
// history has the arithmetic: buckets, roll-up, percentiles).
type TaskHistory struct{ ent.Schema }

// HistoryBuckets is the number of a row's histogram buckets per measure
// (history.Buckets).
const HistoryBuckets = 24

// Fields of TaskHistory.
func (TaskHistory) Fields() []ent.Field {
	fields := []ent.Field{
		field.Time("bucket_start").Comment("The start of the row's bucket of time (UTC)."),
		field.String("resolution").Comment("MINUTE, HOUR or DAY."),
		field.String("task_type"),
		field.String("tenant").Default(""),
	}
	for _, c := range []string{"created", "started", "succeeded", "failed", "cancelled", "retries", "rows_imported", "rows_exported", "run_time_ms", "waiting"} {
		fields = append(fields, field.Int64(c).Default(0))
	}
	for _, m := range []string{"wait", "run"} {
		for i := range HistoryBuckets {
			fields = append(fields, field.Int64(fmt.Sprintf("%s_h%02d", m, i)).Default(0))
		}
	}
	// Added by migration 0016: the bytes of artifacts written in the
	// bucket by tasks of the row's type and tenant.
	fields = append(fields, field.Int64("bytes_stored").Default(0))
	return fields
}

// Indexes of TaskHistory.
func (TaskHistory) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("resolution", "bucket_start", "task_type", "tenant").Unique(),
	}
}

// Annotations of TaskHistory.
func (TaskHistory) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
