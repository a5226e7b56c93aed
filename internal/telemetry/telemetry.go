// Package telemetry is taskgraph's tracing with OpenTelemetry: the tracer
// provider the environment configures the standard way (OTLP, off when no
// endpoint is set), W3C trace context in and out (traceparent), and the
// names and attributes of taskgraph's spans.
//
// A task remembers the traceparent of the span that created it
// (TraceParent, stored with the task); each execution's span continues that
// trace (ContextWithParent), on whichever node runs it, so one trace goes
// from the request that created a task to its executions and the requests
// they make (Inject, on the outbound client). Attributes name tasks, never
// their input.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of taskgraph's tracers.
const Scope = "github.com/taskgraph/taskgraph"

// Span names.
const (
	SpanCreate   = "taskgraph.create"
	SpanClaim    = "taskgraph.claim"
	SpanExecute  = "taskgraph.execute"
	SpanFlush    = "taskgraph.flush"
	SpanRecover  = "taskgraph.watchdog.recover"
	SpanGraphQL  = "graphql"
	ServiceName  = "taskgraph"
	traceParentH = "traceparent"
)

// Attribute keys of taskgraph's spans.
const (
	AttrTaskID     = attribute.Key("taskgraph.task.id")
	AttrTaskCode   = attribute.Key("taskgraph.task.code")
	AttrTaskType   = attribute.Key("taskgraph.task.type")
	AttrInstanceID = attribute.Key("taskgraph.instance.id")
	AttrAttempt    = attribute.Key("taskgraph.attempt")
	AttrOutcome    = attribute.Key("taskgraph.outcome")
	AttrErrorKind  = attribute.Key("taskgraph.error_kind")
	AttrWorker     = attribute.Key("taskgraph.worker")
	AttrCount      = attribute.Key("taskgraph.count")
	AttrAction     = attribute.Key("taskgraph.action")
	AttrOperation  = attribute.Key("graphql.operation.name")
	AttrOpType     = attribute.Key("graphql.operation.type")
)

// propagator is W3C trace context and baggage, the standard pair.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the propagator taskgraph reads and writes trace
// context with (W3C traceparent, tracestate and baggage).
func Propagator() propagation.TextMapPropagator { return propagator }

// Tracer returns tp's tracer of taskgraph's scope, or nil when tp is nil
// or a no-op provider: tracing is off, and the hot paths that would start
// spans skip them altogether (nothing built, nothing allocated).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(Scope)
}

// FromEnv returns the tracer provider the process's environment configures, and the
// function that flushes and stops it. Tracing is on when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// and OTEL_TRACES_EXPORTER is unset or "otlp"; the exporter speaks
// OTEL_EXPORTER_OTLP_PROTOCOL (TRACES_PROTOCOL): "http/protobuf" (the
// default) or "grpc", and reads the rest of the OTEL_EXPORTER_OTLP_*
// variables itself (headers, timeout, TLS); sampling is
// OTEL_TRACES_SAMPLER and its argument, as the SDK reads them (parent-based,
// always on, by default); the resource is OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, with service.name defaulting to "taskgraph".
// Otherwise the provider is a no-op one and stop does nothing. An exporter
// named that taskgraph does not have is an error naming what is supported.
func FromEnv(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	get := func(k string) string {
		v, _ := os.LookupEnv(k)
		return strings.TrimSpace(v)
	}
	off := func(context.Context) error { return nil }
	exporter := strings.ToLower(get("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp":
	case "none":
		return noop.NewTracerProvider(), off, nil
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: taskgraph exports traces by OTLP only (\"otlp\", or \"none\")", exporter)
	}
	if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		if exporter == "otlp" {
			return nil, nil, errors.New("OTEL_TRACES_EXPORTER=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)")
		}
		return noop.NewTracerProvider(), off, nil
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: taskgraph speaks \"http/protobuf\" or \"grpc\"", protocol)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	tp := NewProvider(exp, get("OTEL_SERVICE_NAME") == "")
	return tp, tp.Shutdown, nil
}

// NewProvider returns a tracer provider that batches spans to exp, with the
// resource the environment describes (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES), named "taskgraph" when defaultName is true,
// and the sampler the environment chooses (OTEL_TRACES_SAMPLER).
func NewProvider(exp sdktrace.SpanExporter, defaultName bool) *sdktrace.TracerProvider {
	res := resource.Environment()
	if defaultName {
		if merged, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName(ServiceName)), res); err == nil {
			res = merged
		}
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// ctx has no valid span context (tracing off, or no span).
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[traceParentH]
}

// ContextWithParent returns ctx with the remote span context traceparent
// names as the parent of the spans started in it; ctx itself when
// traceparent is empty or malformed.
func ContextWithParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{traceParentH: traceparent})
}

// Inject writes the trace context of ctx into h (traceparent, tracestate,
// baggage), for a request made on the span's behalf.
func Inject(ctx context.Context, h http.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract returns ctx with the trace context the request r carries, so that
// the spans of its handling are children of the caller's.
func Extract(r *http.Request) context.Context {
	return propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}

// Incoming wraps next so that each request's handling continues the trace
// its caller sent (traceparent), if any.
func Incoming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(traceParentH) == "" {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(Extract(r)))
	})
}

// End ends span, marked failed with err's message when err is not nil.
// Messages are what the API and the task's history already show (masked);
// never an input.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
