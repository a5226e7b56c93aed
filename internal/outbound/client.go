package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/taskgraph/taskgraph/internal/telemetry"
)

// Config configures a client.
type Config struct {
	// Policy says which non-public destinations may be reached. Nil: public
	// addresses only.
	Policy *Policy
	// MaxRedirects is how many redirects one request follows; each hop is
	// dialled through the same policy. Default 0: a 3xx is the answer.
	MaxRedirects int
	// DialTimeout bounds connecting to one address. Default 10 s.
	DialTimeout time.Duration
	// Resolver resolves names (nil: the system's). Tests give their own.
	Resolver *net.Resolver
}

// NewClient returns the HTTP client for requests made on a task's behalf:
// it sends the trace context of each request's context (traceparent), every connection it makes is checked against cfg.Policy on the resolved
// address, it follows at most cfg.MaxRedirects redirects, it ignores
// HTTP_PROXY and friends, and it never re-sends a request by itself.
//
// The last point is about net/http's transport (Go 1.26,
// persistConn.shouldRetryRequest): when a request fails on a reused
// keep-alive connection, it is sent again on a new connection if nothing
// of it had been written (and its body can be rewound), or if the request
// is "replayable" and the failure came before the first byte of the answer
// (a reset or EOF while waiting for it: the receiver may well have acted).
// Replayable (Request.isReplayable) is GET, HEAD, OPTIONS and TRACE, and
// also any other method whose body is absent or rewindable (GetBody, which
// http.NewRequest sets for in-memory bodies) when the request carries an
// Idempotency-Key or X-Idempotency-Key header — exactly what the webhook
// sends. For methods other than those four, this client hands the
// transport a copy of the request without GetBody and with a non-nil body,
// so that neither case applies: such a request is written at most once per
// call, and a broken connection is the call's error.
func NewClient(cfg Config) *http.Client {
	d := net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second, Resolver: cfg.Resolver}
	if d.Timeout == 0 {
		d.Timeout = 10 * time.Second
	}
	policy := cfg.Policy
	tr := &http.Transport{
		Proxy: nil, // a proxy would connect past the policy
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("outbound: dial %q: %w", addr, err)
			}
			dd := d
			// Called for every address the name resolved to, after
			// resolution and before the connection is attempted.
			dd.Control = func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("outbound: dial %q: %w", address, err)
				}
				return policy.Check(host, ap.Addr())
			}
			conn, err := dd.DialContext(ctx, network, addr)
			return conn, withoutResolver(err)
		},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: traced{noReplay{tr}},
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) > cfg.MaxRedirects {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
}

// withoutResolver is err without the address of the DNS server that
// failed to resolve the target: the error reaches the task's owner, who
// is told which name did not resolve, never where this network's resolver
// is.
func withoutResolver(err error) error {
	var de *net.DNSError
	if errors.As(err, &de) {
		de.Server = ""
	}
	return err
}

// traced sends the trace context of a request's context with it
// (traceparent, tracestate, baggage; telemetry.Inject): the receiver's
// spans join the trace of the execution that called it.
type traced struct{ next http.RoundTripper }

func (t traced) RoundTrip(req *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(req.Context()).IsValid() {
		return t.next.RoundTrip(req)
	}
	r := *req // a RoundTripper must not change the request it is given
	r.Header = req.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	telemetry.Inject(req.Context(), r.Header)
	return t.next.RoundTrip(&r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t traced) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// noReplay keeps the transport from re-sending non-idempotent requests
// (see NewClient).
type noReplay struct{ next http.RoundTripper }

func (n noReplay) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return n.next.RoundTrip(req)
	}
	r := *req // a RoundTripper must not change the request it is given
	r.GetBody = nil
	if r.Body == nil || r.Body == http.NoBody {
		// A nil body makes a request replayable too; an empty one that
		// cannot be rewound does not (it is still sent with length 0).
		r.Body = emptyBody{}
	}
	return n.next.RoundTrip(&r)
}

type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (n noReplay) CloseIdleConnections() {
	if c, ok := n.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
