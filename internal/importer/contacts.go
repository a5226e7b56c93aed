package importer

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/internal/access"
)

// Contacts is the contacts target: people with a name and a mobile number,
// written to the contacts table, the target's own (created by the
// migrations of internal/migrate, outside the ent schema; read with
// ContactReader). Its write-once key is (task_id, row_no): the import and
// the source row a contact came from.
//
// tx runs a write transaction (store.Store.Tx, serialized with the
// store's own writes); db reads.
func Contacts(db *sql.DB, tx func(ctx context.Context, fn func(*ent.Tx) error) error, postgres bool, now func() time.Time) *Target {
	return &Target{
		Name:        "contacts",
		Description: "Contacts (name, mobile, e-mail, company, city, tags, gender, birthday) into the contacts table.",
		BusinessKey: []string{"task_id", "row_no"},
		Columns: []Column{
			{Key: "name", Headers: []string{"姓名", "名字", "联系人", "Name", "Full name"}, Required: true, Type: Text, MaxLen: 50},
			{Key: "phone", Headers: []string{"手机", "手机号", "手机号码", "电话", "Mobile", "Phone"}, Required: true, Type: Phone, Sensitive: true},
			{Key: "email", Headers: []string{"邮箱", "电子邮箱", "E-mail", "Mail"}, Type: Email, MaxLen: 254, Sensitive: true},
			{Key: "company", Headers: []string{"公司", "单位", "Company", "Organization"}, Type: Text, MaxLen: 100},
			{Key: "city", Headers: []string{"城市", "City"}, Type: Text, MaxLen: 50},
			{Key: "tags", Headers: []string{"标签", "Tags", "Tag"}, Type: List, MaxLen: 20, MaxItems: 10},
			{Key: "gender", Headers: []string{"性别", "Gender", "Sex"}, Type: Enum, Enum: map[string]string{
				"男": "M", "女": "F", "m": "M", "f": "F", "male": "M", "female": "F"}},
			{Key: "birthday", Headers: []string{"生日", "出生日期", "Birthday", "Date of birth"}, Type: Date},
		},
		Writer: &contactsWriter{db: db, tx: tx, postgres: postgres, now: now},
	}
}

type contactsWriter struct {
	db       *sql.DB
	tx       func(ctx context.Context, fn func(*ent.Tx) error) error
	postgres bool
	now      func() time.Time
}

var contactColumns = []string{"created_at", "task_id", "row_no", "name", "phone", "email", "company", "city", "tags", "gender", "birthday"}

// Write inserts rows in one statement; rows already written by an earlier
// execution of the same import are skipped by the unique (task_id, row_no)
// index, on SQLite and PostgreSQL alike. PostgreSQL gets the rows as one
// array per column (unnest): a dozen parameters instead of thousands.
func (w *contactsWriter) Write(ctx context.Context, taskID int, rows []Record) error {
	if len(rows) == 0 {
		return nil
	}
	now := w.now().UTC().Truncate(time.Microsecond)
	cols := make([][]string, 8) // name, phone, email, company, city, tags, gender, birthday
	rowNos := make([]int64, len(rows))
	for i, r := range rows {
		tags, err := json.Marshal(r.Values["tags"])
		if err != nil {
			return fmt.Errorf("contacts: tags of row %d: %w", r.RowNo, err)
		}
		if string(tags) == "null" {
			tags = []byte("[]")
		}
		rowNos[i] = int64(r.RowNo)
		for j, v := range []string{str(r.Values["name"]), str(r.Values["phone"]), str(r.Values["email"]),
			str(r.Values["company"]), str(r.Values["city"]), string(tags), str(r.Values["gender"]), str(r.Values["birthday"])} {
			cols[j] = append(cols[j], v)
		}
	}
	var query string
	var args []any
	if w.postgres {
		query = `INSERT INTO contacts (` + strings.Join(contactColumns, ", ") + `)
SELECT $1::timestamptz, $2::bigint, u.row_no, u.name, u.phone, u.email, u.company, u.city, u.tags::jsonb, u.gender, u.birthday
FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
	AS u(row_no, name, phone, email, company, city, tags, gender, birthday)
ON CONFLICT (task_id, row_no) DO NOTHING`
		args = []any{now, taskID, pq.Array(rowNos)}
		for _, c := range cols {
			args = append(args, pq.Array(c))
		}
	} else {
		var b strings.Builder
		b.WriteString("INSERT INTO contacts (" + strings.Join(contactColumns, ", ") + ") VALUES ")
		row := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(contactColumns)), ", ") + ")"
		args = make([]any, 0, len(rows)*len(contactColumns))
		for i := range rows {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(row)
			args = append(args, now, taskID, rowNos[i])
			for _, c := range cols {
				args = append(args, c[i])
			}
		}
		b.WriteString(" ON CONFLICT (task_id, row_no) DO NOTHING")
		query = b.String()
	}
	if err := w.tx(ctx, func(tx *ent.Tx) error {
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	}); err != nil {
		return fmt.Errorf("contacts: insert %d rows: %w", len(rows), err)
	}
	return nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// Written counts the contacts an import wrote.
func (w *contactsWriter) Written(ctx context.Context, taskID int) (int, error) {
	q := "SELECT COUNT(*) FROM contacts WHERE task_id = ?"
	if w.postgres {
		q = "SELECT COUNT(*) FROM contacts WHERE task_id = $1"
	}
	var n int
	if err := w.db.QueryRowContext(ctx, q, taskID).Scan(&n); err != nil {
		return 0, fmt.Errorf("contacts: count rows of import %d: %w", taskID, err)
	}
	return n, nil
}

// Contact is a row of the contacts table.
type Contact struct {
	ID        int
	CreatedAt time.Time
	TaskID    int // the import that wrote it
	RowNo     int // its row in the source file (the header is row 1)
	Name      string
	Phone     string
	Email     string
	Company   string
	City      string
	Tags      []string
	Gender    string
	Birthday  string // YYYY-MM-DD, or empty
}

// ContactFilter selects contacts: each field set narrows.
type ContactFilter struct {
	City         string
	ImportTaskID int
	// created_at in [CreatedAfter, CreatedBefore).
	CreatedAfter, CreatedBefore *time.Time
}

// Querier runs a query: a *sql.DB, or an ent client (through its driver).
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ContactReader reads the contacts table, which is the contacts target's
// own (internal/migrate creates it; it is not in the ent schema), with SQL,
// as the viewer in each call's context may see it: the rows written by the
// imports whose tasks the viewer may see (access.TaskRule, the rule of
// every read of tasks). A context without a viewer reads nothing
// (access.ErrNoViewer).
type ContactReader struct {
	DB       Querier
	Postgres bool
}

var contactFields = []string{"id", "created_at", "task_id", "row_no", "name", "phone", "email", "company", "city", "tags", "gender", "birthday"}

// selectContacts starts a query over the contacts the viewer of ctx may
// see, matching f.
func (r ContactReader) selectContacts(ctx context.Context, f ContactFilter, columns ...string) (*entsql.Selector, error) {
	rule, err := access.TaskRule(ctx)
	if err != nil {
		return nil, err
	}
	d := dialect.SQLite
	if r.Postgres {
		d = dialect.Postgres
	}
	c := entsql.Table("contacts")
	s := entsql.Dialect(d).Select().From(c)
	if len(columns) > 0 {
		s.Select(columns...)
	}
	if rule != nil {
		t := entsql.Table("tasks")
		visible := entsql.Select(t.C("id")).From(t)
		rule(visible)
		s.Where(entsql.In(c.C("task_id"), visible))
	}
	if f.City != "" {
		s.Where(entsql.EQ(c.C("city"), f.City))
	}
	if f.ImportTaskID != 0 {
		s.Where(entsql.EQ(c.C("task_id"), f.ImportTaskID))
	}
	if f.CreatedAfter != nil {
		s.Where(entsql.GTE(c.C("created_at"), f.CreatedAfter.UTC()))
	}
	if f.CreatedBefore != nil {
		s.Where(entsql.LT(c.C("created_at"), f.CreatedBefore.UTC()))
	}
	return s, nil
}

// Count counts the contacts matching f.
func (r ContactReader) Count(ctx context.Context, f ContactFilter) (int, error) {
	s, err := r.selectContacts(ctx, f)
	if err != nil {
		return 0, err
	}
	s.Select(entsql.Count("*"))
	query, args := s.Query()
	var n int
	if err := r.queryRows(ctx, query, args, func(rows *sql.Rows) error { return rows.Scan(&n) }); err != nil {
		return 0, fmt.Errorf("count contacts: %w", err)
	}
	return n, nil
}

// Page reads up to limit contacts matching f after the key after, in key
// order: by source row for one import (f.ImportTaskID, the unique
// (task_id, row_no) index), by id otherwise. Either way a page is one
// index range (keyset pagination: pass the last row's key, 0 first).
func (r ContactReader) Page(ctx context.Context, f ContactFilter, after, limit int) ([]Contact, error) {
	s, err := r.selectContacts(ctx, f)
	if err != nil {
		return nil, err
	}
	c := entsql.Table("contacts")
	cols := make([]string, len(contactFields))
	for i, name := range contactFields {
		cols[i] = c.C(name)
	}
	s.Select(cols...)
	key := "id"
	if f.ImportTaskID != 0 {
		key = "row_no"
	}
	s.Where(entsql.GT(c.C(key), after)).OrderBy(c.C(key)).Limit(limit)
	query, args := s.Query()
	var out []Contact
	err = r.queryRows(ctx, query, args, func(rows *sql.Rows) error {
		var ct Contact
		var tags []byte
		if err := rows.Scan(&ct.ID, &ct.CreatedAt, &ct.TaskID, &ct.RowNo, &ct.Name, &ct.Phone, &ct.Email, &ct.Company, &ct.City, &tags, &ct.Gender, &ct.Birthday); err != nil {
			return err
		}
		if len(tags) > 0 {
			if err := json.Unmarshal(tags, &ct.Tags); err != nil {
				return fmt.Errorf("tags of contact %d: %w", ct.ID, err)
			}
		}
		out = append(out, ct)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read contacts: %w", err)
	}
	return out, nil
}

// CityCount is how many contacts name a city ("" for none).
type CityCount struct {
	City  string
	Count int
}

// CountByCity counts the contacts per city, in no order.
func (r ContactReader) CountByCity(ctx context.Context) ([]CityCount, error) {
	s, err := r.selectContacts(ctx, ContactFilter{})
	if err != nil {
		return nil, err
	}
	c := entsql.Table("contacts")
	s.Select(c.C("city"), entsql.Count("*")).GroupBy(c.C("city"))
	query, args := s.Query()
	var out []CityCount
	err = r.queryRows(ctx, query, args, func(rows *sql.Rows) error {
		var cc CityCount
		if err := rows.Scan(&cc.City, &cc.Count); err != nil {
			return err
		}
		out = append(out, cc)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count contacts by city: %w", err)
	}
	return out, nil
}

func (r ContactReader) queryRows(ctx context.Context, query string, args []any, row func(*sql.Rows) error) error {
	rows, err := r.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
