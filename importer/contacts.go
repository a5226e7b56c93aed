package importer

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"taskgraph/ent"
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
// index, on SQLite and PostgreSQL alike.
func (w *contactsWriter) Write(ctx context.Context, taskID int, rows []Record) error {
	if len(rows) == 0 {
		return nil
	}
	now := w.now().UTC().Truncate(time.Microsecond)
	var b strings.Builder
	b.WriteString("INSERT INTO contacts (" + strings.Join(contactColumns, ", ") + ") VALUES ")
	args := make([]any, 0, len(rows)*len(contactColumns))
	n := 0
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range contactColumns {
			if j > 0 {
				b.WriteString(", ")
			}
			n++
			if w.postgres {
				b.WriteString("$" + strconv.Itoa(n))
			} else {
				b.WriteByte('?')
			}
		}
		b.WriteByte(')')
		tags, err := json.Marshal(r.Values["tags"])
		if err != nil {
			return fmt.Errorf("contacts: tags of row %d: %w", r.RowNo, err)
		}
		if string(tags) == "null" {
			tags = []byte("[]")
		}
		args = append(args, now, taskID, r.RowNo, str(r.Values["name"]), str(r.Values["phone"]), str(r.Values["email"]),
			str(r.Values["company"]), str(r.Values["city"]), string(tags), str(r.Values["gender"]), str(r.Values["birthday"]))
	}
	b.WriteString(" ON CONFLICT (task_id, row_no) DO NOTHING")
	if err := w.tx(ctx, func(tx *ent.Tx) error {
		_, err := tx.ExecContext(ctx, b.String(), args...)
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
