package graph

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"taskgraph/engine"
	"taskgraph/ent"
	"taskgraph/lifecycle"
	"taskgraph/store"
)

// Error codes carried in extensions.code.
const (
	CodeNotFound          = "NOT_FOUND"
	CodeValidation        = "VALIDATION"
	CodeInvalidTransition = "INVALID_TRANSITION"
	CodeConflict          = "CONFLICT"
	CodeInternal          = "INTERNAL"
	CodeUnavailable       = "UNAVAILABLE"
)

// classify returns the code of a domain error, and extensions worth adding;
// ok is false for errors that are not the caller's doing.
func classify(err error) (code string, ext map[string]any, ok bool) {
	var te *lifecycle.TransitionError
	var ve *engine.ValidationError
	var ce *store.ConflictError
	switch {
	case errors.As(err, &te):
		return CodeInvalidTransition, map[string]any{"from": te.From, "to": te.To}, true
	case errors.As(err, &ve):
		return CodeValidation, map[string]any{"problems": ve.Problems}, true
	case errors.As(err, &ce):
		ext := map[string]any{}
		if ce.TaskID != 0 {
			ext["taskId"] = ce.TaskID
		}
		return CodeConflict, ext, true
	case errors.Is(err, store.ErrNotFound), ent.IsNotFound(err):
		return CodeNotFound, nil, true
	case errors.Is(err, errPageTooLarge):
		return CodeValidation, nil, true
	}
	return "", nil, false
}

// resolverError marks an error returned by a resolver, as opposed to one
// gqlgen raised about the request itself (parse, validation, arguments).
type resolverError struct{ err error }

func (e *resolverError) Error() string { return e.err.Error() }
func (e *resolverError) Unwrap() error { return e.err }

// MarkResolverErrors is a field middleware: what a resolver returns is
// classified by the presenter as a domain error or INTERNAL, never as a
// problem with the request.
func MarkResolverErrors(ctx context.Context, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	if err != nil {
		var re *resolverError
		if !errors.As(err, &re) {
			err = &resolverError{err}
		}
	}
	return res, err
}

// ErrorPresenter gives every error an extensions.code. Errors of the
// caller's making keep their message; any other error is logged with a
// reference and shown as INTERNAL with that reference only, so that no
// SQL, path or stack ever reaches a client.
func ErrorPresenter(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		if code, ext, ok := classify(err); ok {
			setCode(gqlErr, code, ext)
			return gqlErr
		}
		var re *resolverError
		var wrapped *gqlerror.Error
		if errors.As(err, &re) {
			// A resolver's own GraphQL error (entgql's unknown node id)
			// carries its code; anything else it returned is internal.
			if errors.As(re.err, &wrapped) && wrapped.Extensions["code"] != nil {
				gqlErr.Message = wrapped.Message
				setCode(gqlErr, wrapped.Extensions["code"].(string), nil)
				return gqlErr
			}
		} else if errors.As(err, &wrapped) {
			// Built by gqlgen about the request: parse and validation
			// errors, arguments of the wrong type.
			if _, has := gqlErr.Extensions["code"]; !has {
				setCode(gqlErr, CodeValidation, nil)
			}
			return gqlErr
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			gqlErr.Message = "the request was cancelled or timed out"
			setCode(gqlErr, CodeUnavailable, nil)
			return gqlErr
		}
		ref := newRef()
		log.ErrorContext(ctx, "internal error", "ref", ref, "path", gqlErr.Path.String(), "err", err)
		gqlErr.Message = "internal error (reference " + ref + ")"
		setCode(gqlErr, CodeInternal, map[string]any{"reference": ref})
		return gqlErr
	}
}

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
		return errors.New("resolver panicked")
	}
}
