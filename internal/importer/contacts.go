package importer

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/taskgraph/taskgraph/ent"
)

// Contacts is the contacts target: people with a name and a mobile number,
// written to the contacts table. Its write-once key is (task_id, row_no):
// the import and the source row a contact came from.
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
