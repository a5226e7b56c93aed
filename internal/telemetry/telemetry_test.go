package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// The environment decides, the standard way (no t.Parallel: t.Setenv).
func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		problem string
	}{
		{name: "OffWithoutAnEndpoint"},
		{name: "OnWithAnEndpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "OnWithATracesEndpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "OnOverGRPC", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "OffWhenTheExporterIsNone", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "AnotherExporterIsAnError", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, problem: `OTEL_TRACES_EXPORTER="zipkin": taskgraph exports traces by OTLP only`},
		{name: "OTLPWithoutAnEndpointIsAnError", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, problem: "needs OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "AnotherProtocolIsAnError", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, problem: `"http/json": taskgraph speaks "http/protobuf" or "grpc"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, tc.env[k])
			}
			tp, stop, err := telemetry.FromEnv(context.Background())
			if tc.problem != "" {
				require.ErrorContains(t, err, tc.problem)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, stop(context.Background())) }()
			require.Equal(t, tc.on, telemetry.Tracer(tp) != nil, "a tracer only when tracing is on")
		})
	}
}

func TestTraceParentRoundTrips(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	require.Empty(t, telemetry.TraceParent(context.Background()), "no span, no traceparent")

	ctx, span := telemetry.Tracer(tp).Start(context.Background(), "creator")
	tparent := telemetry.TraceParent(ctx)
	span.End()
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tparent)

	// Elsewhere, later: a child of the span the traceparent names.
	_, child := telemetry.Tracer(tp).Start(telemetry.ContextWithParent(context.Background(), tparent), "execution")
	child.End()
	spans := rec.Ended()
	require.Len(t, spans, 2)
	require.Equal(t, spans[0].SpanContext().TraceID(), spans[1].SpanContext().TraceID())
	require.Equal(t, spans[0].SpanContext().SpanID(), spans[1].Parent().SpanID())
	require.True(t, spans[1].Parent().IsRemote())

	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01"} {
		require.False(t, trace.SpanContextFromContext(telemetry.ContextWithParent(context.Background(), bad)).IsValid(), bad)
	}
}

func TestIncomingAndInject(t *testing.T) {
	t.Parallel()
	const tparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var got trace.SpanContext
	h := telemetry.Incoming(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = trace.SpanContextFromContext(r.Context())
	}))
	req := httptest.NewRequest(http.MethodPost, "/query", nil)
	req.Header.Set("traceparent", tparent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	require.True(t, got.IsValid())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", got.TraceID().String())

	out := http.Header{}
	telemetry.Inject(trace.ContextWithRemoteSpanContext(context.Background(), got), out)
	require.Equal(t, tparent, out.Get("traceparent"))
	require.Nil(t, telemetry.Tracer(nil), "no provider: tracing off")
}
