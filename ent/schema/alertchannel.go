package schema

import (
	"entgo.io/contrib/entgql"
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AlertChannel is where alert notices go: a generic JSON webhook or a team
// chat bot (DingTalk, Feishu/Lark, WeCom, Slack-compatible). Its URL (which
// carries the bot's token) and signing secret are stored encrypted and never
// shown again; url_display is the URL without its query.
type AlertChannel struct{ ent.Schema }

// Mixin of AlertChannel.
func (AlertChannel) Mixin() []ent.Mixin { return []ent.Mixin{CreatedAt{}} }

// Fields of AlertChannel.
func (AlertChannel) Fields() []ent.Field {
	return []ent.Field{
		field.String("tenant").
			Default("").
			Immutable(),
		field.String("name"),
		field.Enum("kind").
			Values("WEBHOOK", "DINGTALK", "FEISHU", "WECOM", "SLACK"),
		field.Bytes("url_sealed").
			Sensitive(),
		field.String("url_display"),
		field.Bytes("secret_sealed").
			Optional().
			Sensitive(),
		field.Bool("has_secret").
			Default(false),
		field.String("created_by").
			Default("").
			Immutable(),
		field.Time("updated_at").
			Default(utcNow),
	}
}

// Indexes of AlertChannel.
func (AlertChannel) Indexes() []ent.Index {
	return []ent.Index{index.Fields("tenant", "name").Unique()}
}

// Annotations of AlertChannel.
func (AlertChannel) Annotations() []schema.Annotation {
	return []schema.Annotation{entgql.Skip(entgql.SkipAll)}
}
