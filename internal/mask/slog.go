package mask

import (
	"context"
	"log/slog"
	"strings"
)

// Handler is a slog.Handler that masks every record before next sees it:
// the message, and each attribute's value (strings as text, other values
// by their JSON form, groups member by member). The process logs what it
// is told — errors quoting a request, a task's title, a handler's panic —
// and none of it reaches a log file unmasked.
type Handler struct {
	next   slog.Handler
	masker *Masker
}

var _ slog.Handler = (*Handler)(nil)

// NewHandler returns next masked by m.
func NewHandler(next slog.Handler, m *Masker) *Handler { return &Handler{next: next, masker: m} }

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle masks r and passes it on.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.masker.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs masks attrs once, when they are attached.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = h.attr(a)
	}
	return &Handler{next: h.next.WithAttrs(masked), masker: h.masker}
}

// WithGroup passes the group on.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), masker: h.masker}
}

func (h *Handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	// A value whose key says it is secret is redacted whole, as in JSON.
	if h.masker.secretKey(a.Key) && v.Kind() != slog.KindGroup {
		return slog.String(a.Key, Redacted)
	}
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.masker.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		masked := make([]any, len(group))
		for i, g := range group {
			masked[i] = h.attr(g)
		}
		return slog.Group(a.Key, masked...)
	case slog.KindInt64, slog.KindUint64:
		// A phone or card number logged as a number is still one; a
		// database id (task_id, artifact_id: ent's global ids run to 11
		// digits and may look like a mobile number) is not.
		if strings.HasSuffix(a.Key, "_id") {
			return slog.Attr{Key: a.Key, Value: v}
		}
		if m := h.masker.Value(v.Any()); m != v.Any() {
			return slog.Any(a.Key, m)
		}
		return slog.Attr{Key: a.Key, Value: v}
	case slog.KindAny:
		return slog.Any(a.Key, h.masker.Value(v.Any()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
