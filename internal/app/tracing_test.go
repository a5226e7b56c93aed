package app_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// otlpReceiver is an OTLP/HTTP trace receiver: what the exporters of the
// nodes under test send, decoded as a collector would.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP trace export", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// provider is a node's own tracer provider exporting to the receiver.
func (r *otlpReceiver) provider(t *testing.T) app.Options {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(r.URL+"/v1/traces"))
	require.NoError(t, err)
	tp := telemetry.NewProvider(exp, true)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return app.Options{TracerProvider: tp}
}

// find returns the spans named name, in the trace traceID.
func (r *otlpReceiver) find(traceID []byte, name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name && string(s.TraceId) == string(traceID) {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			switch v := kv.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_IntValue:
				return strconv.FormatInt(v.IntValue, 10)
			}
		}
	}
	return ""
}

// TestTracing follows one task's trace from the request that created it,
// on one node, to its execution on another and the webhook that execution
// called: one trace, each span the child of the one before.
func TestTracing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		recv := newOTLPReceiver(t)
		hooked := make(chan string, 1)
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case hooked <- r.Header.Get("traceparent"):
			default:
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(hook.Close)
		allowLoopback := func(c *app.Config) { c.Network.OutboundAllow = []string{"loopback"} }

		dsn := d.DSN(t)
		var a, worker *apptest.Server
		if d.Name == "Postgres" {
			// Two nodes: A takes the request, B runs the task.
			a = apptest.Start(t, dsn, recv.provider(t), allowLoopback, apiOnly)
			worker = apptest.Start(t, dsn, recv.provider(t), allowLoopback, workerOnly)
		} else {
			a = apptest.Start(t, dsn, recv.provider(t), allowLoopback)
			worker = a
		}

		const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		traceID, _ := hex.DecodeString(callerTrace)
		callerSpanID, _ := hex.DecodeString(callerSpan)
		h := http.Header{"Content-Type": {"application/json"}, "Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}}
		resp := a.Request(t, h, []byte(`{"query":"mutation Enqueue($url: String!) { createTask(input: {type: \"webhook\", input: {url: $url}}) { id } }","variables":{"url":"`+hook.URL+`/secret-path"}}`))
		require.Empty(t, resp.Errors)

		var sent string
		select {
		case sent = <-hooked:
		case <-time.After(60 * time.Second):
			t.Fatal("the webhook was not called")
		}
		// Every node's spans out (the execution's ends after the call).
		var op, create, exec []*tracepb.Span
		apptest.Eventually(t, 30*time.Second, func() (bool, string) {
			op = recv.find(traceID, "mutation Enqueue")
			create = recv.find(traceID, telemetry.SpanCreate)
			exec = recv.find(traceID, telemetry.SpanExecute)
			return len(op) == 1 && len(create) == 1 && len(exec) == 1, "waiting for the operation's, the create's and the execution's spans"
		})
		require.Equal(t, callerSpanID, op[0].ParentSpanId, "the operation continues the caller's trace")
		require.Equal(t, op[0].SpanId, create[0].ParentSpanId, "the create is the operation's child")
		require.Equal(t, create[0].SpanId, exec[0].ParentSpanId, "the execution continues the trace that created its task")
		require.Equal(t, worker.App.Node, attr(exec[0], string(telemetry.AttrWorker)), "executed on the worker node")
		require.Equal(t, "webhook", attr(exec[0], string(telemetry.AttrTaskType)))
		require.Equal(t, "1", attr(exec[0], string(telemetry.AttrAttempt)))
		require.Equal(t, "SUCCESS", attr(exec[0], string(telemetry.AttrOutcome)))
		require.NotEmpty(t, attr(exec[0], string(telemetry.AttrTaskCode)))
		require.Len(t, exec[0].Links, 1, "linked to the claim that took it")
		require.Equal(t, "00-"+callerTrace+"-"+hex.EncodeToString(exec[0].SpanId)+"-01", sent,
			"the webhook carries the execution's span as its parent")
		// Attributes name the task, never its input.
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for _, s := range recv.spans {
			for _, kv := range s.Attributes {
				require.NotContains(t, kv.Value.String(), "secret-path", "span %s attribute %s", s.Name, kv.Key)
			}
		}
	})
}
