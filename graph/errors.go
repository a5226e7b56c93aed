package graph

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"regexp"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/access"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/outage"
	"github.com/taskgraph/taskgraph/internal/ratelimit"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Error codes carried in extensions.code.
const (
	CodeNotFound          = "NOT_FOUND"
	CodeValidation        = "VALIDATION"
	CodeInvalidTransition = "INVALID_TRANSITION"
	CodeConflict          = "CONFLICT"
	CodeInternal          = "INTERNAL"
	CodeUnavailable       = "UNAVAILABLE"
	// No, bad or expired credentials (HTTP 401 before GraphQL runs; a
	// refused connection_init on websockets).
	CodeUnauthenticated = "UNAUTHENTICATED"
	// The viewer's role may not do this (or introspection is disabled).
	CodeForbidden = "FORBIDDEN"
	// Too many mutations; extensions.retryAfterSeconds says when to retry.
	CodeRateLimited = "RATE_LIMITED"
	// A limit of the request's shape or of a connection (depth, aliases,
	// subscriptions per connection, connections per user).
	CodeLimitExceeded = "LIMIT_EXCEEDED"
	// A subscription ended because its subscriber missed changes (it fell
	// behind, or an outage lost them): re-read and subscribe again.
	// extensions.reason says which (LAGGED, MISSED_CHANGES).
	CodeResyncRequired = "RESYNC_REQUIRED"
	// A tenant's quota refuses it: the cap of its waiting tasks of a type.
	// extensions say which (type, tenant, limit).
	CodeQuotaExceeded = "QUOTA_EXCEEDED"
)

// CodeUnavailable is the code of an outage (the database unreachable, the
// disk full, the database busy), of a request that timed out, and of a
// server shutting down: the request may be retried as it is.
// extensions.retryable is true and extensions.retryAfterSeconds says when;
// extensions.reason names the outage.

// classify returns the code of a domain error or an outage, and extensions
// worth adding; ok is false for errors that are not the caller's doing
// (and not an outage).
func classify(err error) (code string, ext map[string]any, ok bool) {
	if code, ext, ok := classifyDomain(err); ok {
		return code, ext, ok
	}
	if o := outage.As(err); o != nil {
		return CodeUnavailable, unavailable(o.Kind.RetryAfter(), o.Kind.String()), true
	}
	return "", nil, false
}

// classifyDomain is classify for the caller's errors.
func classifyDomain(err error) (code string, ext map[string]any, ok bool) {
	var te *lifecycle.TransitionError
	var ve *engine.ValidationError
	var ce *store.ConflictError
	var cc *engine.CountChangedError
	var ue *auth.UnauthenticatedError
	var fe *auth.ForbiddenError
	var rl *ratelimit.Error
	var qe *store.QuotaError
	var tq *store.TenantQuotaError
	switch {
	case errors.As(err, &ue), errors.Is(err, access.ErrNoViewer):
		return CodeUnauthenticated, nil, true
	case errors.As(err, &fe):
		return CodeForbidden, nil, true
	case errors.As(err, &rl):
		return CodeRateLimited, map[string]any{"retryAfterSeconds": rl.RetryAfterSeconds()}, true
	case errors.As(err, &qe):
		return CodeQuotaExceeded, map[string]any{"type": qe.Type, "tenant": qe.Tenant, "limit": qe.Limit}, true
	case errors.As(err, &tq):
		return CodeQuotaExceeded, map[string]any{"tenant": tq.Tenant, "quota": tq.Quota, "limit": tq.Limit, "count": tq.Count}, true
	case errors.As(err, &te):
		return CodeInvalidTransition, map[string]any{"from": te.From, "to": te.To}, true
	case errors.As(err, &ve):
		return CodeValidation, map[string]any{"problems": ve.Problems}, true
	case errors.As(err, &cc):
		return CodeConflict, map[string]any{"matched": cc.Matched, "confirmed": cc.Confirmed}, true
	case errors.As(err, &ce):
		ext := map[string]any{}
		if ce.TaskID != 0 {
			ext["taskId"] = ce.TaskID
		}
		return CodeConflict, ext, true
	case emptyWhere(err):
		return CodeValidation, map[string]any{"problems": []engine.Problem{{Field: "where", Message: "an empty filter ({}) inside not, and or or filters nothing: leave it out"}}}, true
	case errors.Is(err, store.ErrNotFound), ent.IsNotFound(err):
		return CodeNotFound, nil, true
	case errors.Is(err, errPageTooLarge):
		// A limit like the others (docs/access.md, "Limits"): the caller may ask
		// again for smaller pages.
		return CodeLimitExceeded, map[string]any{"limit": "page", "max": MaxPageSize}, true
	case hasMessage(err, "introspection disabled"): // gqlgen's, unexported
		return CodeForbidden, nil, true
	case errors.Is(err, errShuttingDown):
		return CodeUnavailable, unavailable(time.Second, "SHUTTING_DOWN"), true
	}
	return "", nil, false
}

// emptyWhere reports ent's error for an empty where input met inside
// another (not: {}, and: [{}]): the caller's filter, not a failure. An
// empty where at the top means every row, and never gets here.
func emptyWhere(err error) bool {
	return errors.Is(err, ent.ErrEmptyTaskWhereInput) || errors.Is(err, ent.ErrEmptyAuditLogWhereInput) ||
		errors.Is(err, ent.ErrEmptyScheduleWhereInput)
}

// normalWhere is where with an empty filter ({}) made nil (every task), or
// a ValidationError when the database would refuse it (an empty filter
// nested in not, and, or).
func normalWhere(where *ent.TaskWhereInput) (*ent.TaskWhereInput, error) {
	if where == nil {
		return nil, nil
	}
	_, err := where.P()
	switch {
	case err == nil:
		return where, nil
	case errors.Is(err, ent.ErrEmptyTaskWhereInput) && err.Error() == ent.ErrEmptyTaskWhereInput.Error():
		return nil, nil
	}
	return nil, &engine.ValidationError{Problems: []engine.Problem{{Field: "where", Message: "an empty filter ({}) inside not, and or or: leave it out (" + err.Error() + ")"}}}
}

// unavailable is the extensions of an UNAVAILABLE error.
func unavailable(retryAfter time.Duration, reason string) map[string]any {
	return map[string]any{"retryable": true, "retryAfterSeconds": max(1, int(retryAfter/time.Second)), "reason": reason}
}

func hasMessage(err error, msg string) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == msg {
			return true
		}
	}
	return false
}

// internalError marks an error that is not the caller's doing (a database
// failure, a bug): the presenter shows a reference to the log, nothing more.
//
// gqlgen wraps every error in a *gqlerror.Error, the caller's (an argument
// that does not parse) and ours alike, so the two are told apart where they
// arise: resolvers' errors pass through InternalErrors, which marks those
// that are neither classified nor messages built for the client.
type internalError struct{ err error }

func (e *internalError) Error() string { return e.err.Error() }
func (e *internalError) Unwrap() error { return e.err }

// forClient reports whether err may be shown as it is: a classified domain
// error, a cancelled request, or a *gqlerror.Error built as a message (by
// gqlgen, gqlparser or entgql) rather than wrapping another error.
func forClient(err error) bool {
	if _, _, ok := classify(err); ok {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var list gqlerror.List
	if errors.As(err, &list) {
		for _, e := range list {
			if !forClient(e) {
				return false
			}
		}
		return true
	}
	var g *gqlerror.Error
	return errors.As(err, &g) && (g.Err == nil || forClient(g.Err))
}

func markInternal(err error) error {
	if err == nil || forClient(err) {
		return err
	}
	return &internalError{err: err}
}

// InternalErrors is the field middleware marking resolvers' errors that
// are not for the client, and their outages as met by a resolver.
func InternalErrors(ctx context.Context, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	if err != nil && outage.As(err) != nil {
		return res, &resolverError{err: err}
	}
	return res, markInternal(err)
}

// resolverError marks an outage a resolver met (the database, the disk,
// the blob store). An error gqlgen wraps without a resolver having run (an
// argument, a cursor or an ID that does not parse) is the request's, never
// an outage, whatever its words (a cursor cut short decodes to an
// unexpected EOF, as a lost connection reads).
type resolverError struct{ err error }

func (e *resolverError) Error() string { return e.err.Error() }
func (e *resolverError) Unwrap() error { return e.err }

// fromResolver reports whether err may be an outage: a resolver's (marked
// by InternalErrors) or an error gqlgen did not wrap (a transport's, a
// subscription's end).
func fromResolver(err error) bool {
	var r *resolverError
	var internal *internalError
	var wrapped *gqlerror.Error
	return errors.As(err, &r) || errors.As(err, &internal) || !errors.As(err, &wrapped)
}

// ErrorCode is the extensions.code the API gives err (INTERNAL for an
// error that is not the caller's doing). The audit log records it.
func ErrorCode(err error) string {
	if code, _, ok := classify(err); ok {
		return code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return CodeUnavailable
	}
	return CodeInternal
}

// ErrorPresenter gives every error an extensions.code. Errors of the
// caller's making keep their message; an outage is UNAVAILABLE with a
// retry hint and a message saying only what happened, counted by outages
// (logged once per outage, not per request); any other error is logged
// with a reference and shown as INTERNAL with that reference only, so that
// no SQL, path or stack ever reaches a client.
func ErrorPresenter(log *slog.Logger, outages *outage.Monitor) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		resolver := fromResolver(err)
		code, ext, ok := classifyDomain(err)
		if !ok && resolver {
			if o := outages.Failed("request", unwrapInternal(err)); o != nil {
				gqlErr.Message = o.Kind.Message()
				setCode(gqlErr, CodeUnavailable, unavailable(o.Kind.RetryAfter(), o.Kind.String()))
				return gqlErr
			}
			code, ext, ok = classify(err)
		}
		if ok {
			setCode(gqlErr, code, ext)
			return gqlErr
		}
		var internal *internalError
		var wrapped *gqlerror.Error
		if errors.As(err, &internal) {
			err = internal.err
		} else if errors.As(err, &wrapped) {
			// Built by gqlgen or entgql: parse and validation errors,
			// arguments of the wrong type, unknown node ids. Their
			// messages are about the request.
			switch gqlErr.Extensions["code"] {
			case errcode.ValidationFailed:
				// gqlgen's SetDisableSuggestion covers two validation
				// rules of several: the schema is not described to whoever
				// cannot introspect it.
				gqlErr.Message = didYouMean.ReplaceAllString(gqlErr.Message, "")
			case nil:
				setCode(gqlErr, CodeValidation, nil)
			case "COMPLEXITY_LIMIT_EXCEEDED": // gqlgen's name for it
				setCode(gqlErr, CodeLimitExceeded, map[string]any{"limit": "complexity"})
			}
			return gqlErr
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			gqlErr.Message = "the request was cancelled or timed out"
			setCode(gqlErr, CodeUnavailable, unavailable(time.Second, "cancelled or timed out"))
			return gqlErr
		}
		ref := newRef()
		log.ErrorContext(ctx, "internal error", "ref", ref, "path", gqlErr.Path.String(), "err", err)
		gqlErr.Message = "internal error (reference " + ref + ")"
		setCode(gqlErr, CodeInternal, map[string]any{"reference": ref})
		return gqlErr
	}
}

// unwrapInternal is the error an internalError marks.
func unwrapInternal(err error) error {
	var internal *internalError
	if errors.As(err, &internal) {
		return internal.err
	}
	return err
}

var didYouMean = regexp.MustCompile(`(?is)\s*did you mean\b.*$`)

func setCode(e *gqlerror.Error, code string, ext map[string]any) {
	if e.Extensions == nil {
		e.Extensions = map[string]any{}
	}
	e.Extensions["code"] = code
	for k, v := range ext {
		e.Extensions[k] = v
	}
}

func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RecoverFunc turns a resolver panic into an INTERNAL error.
func RecoverFunc(log *slog.Logger) graphql.RecoverFunc {
	return func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "resolver panicked", "panic", p)
		return &internalError{err: errors.New("resolver panicked")}
	}
}
