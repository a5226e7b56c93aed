package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Deployment is the one row that says which deployment a database holds
// and where its files live. The blob store holds a marker object with the
// same uid: a node whose blob store lacks it (its own empty data
// directory, another bucket) is not looking at the deployment's files, and
// says so at start and on /readyz instead of failing imports later.
type Deployment struct{ ent.Schema }

// Mixin of Deployment.
func (Deployment) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of Deployment.
func (Deployment) Fields() []ent.Field {
	return []ent.Field{
		field.Int("singleton").
			Unique().
			Immutable().
			Comment("Always 1 (unique): a database holds one deployment, and nodes starting together race to insert it."),
		field.String("uid").
			Immutable().
			Comment("Random id of the deployment, also written in the blob store's marker object."),
		field.String("blob_location").
			Comment("Where the deployment's files were last seen (the blob store URL, without credentials)."),
		field.String("blob_node").
			Comment("The node that last confirmed blob_location."),
	}
}

// Annotations of Deployment.
func (Deployment) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
