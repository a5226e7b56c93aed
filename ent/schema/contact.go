package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Contact is a row written by the contacts import target. (task_id, row_no)
// is its write-once key: the import that wrote it and the row of the
// source file it came from, so that re-running an import never writes a
// row twice (ARCHITECTURE.md, invariant 6).
type Contact struct{ ent.Schema }

// Mixin of Contact.
func (Contact) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of Contact.
func (Contact) Fields() []ent.Field {
	return []ent.Field{
		field.Int("task_id").
			Immutable().
			Comment("The import task that wrote the row."),
		field.Int("row_no").
			Immutable().
			Comment("Row number in the source file (the header is row 1)."),
		field.String("name"),
		field.String("phone"),
		field.String("email").Default(""),
		field.String("company").Default(""),
		field.String("city").Default(""),
		field.JSON("tags", []string{}).Optional(),
		field.String("gender").Default(""),
		field.String("birthday").Default("").Comment("YYYY-MM-DD, or empty."),
	}
}

// Indexes of Contact.
func (Contact) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("task_id", "row_no").Unique(),
		index.Fields("phone"),
		index.Fields("city"),
	}
}

// Annotations of Contact.
func (Contact) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
