package app

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/taskgraph/taskgraph/internal/auth"
)

// How fast a request body must arrive. http.Server's ReadHeaderTimeout
// bounds the headers; nothing bounded the body, so a client (no
// credentials needed: they are checked after the headers, and a refused
// request's body is still drained) could hold a connection for ever
// sending a byte every few seconds. A body must now keep up a minimum rate
// after a grace period: its read deadline moves on with every byte, so a
// slow upload still arrives, at that rate or better.
const (
	BodyGraceDefault   = 10 * time.Second
	MinBodyRateDefault = 16 << 10 // bytes per second: a 50 MiB upload may take 53 min
)

// readDeadlines applies the body rate to every request with a body (not to
// websockets, whose connections have their own pings and limits).
func readDeadlines(next http.Handler, grace time.Duration, rate int64) http.Handler {
	if grace <= 0 {
		grace = BodyGraceDefault
	}
	if rate <= 0 {
		rate = MinBodyRateDefault
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || auth.IsWebsocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		start := time.Now()
		if err := rc.SetReadDeadline(start.Add(grace)); err != nil {
			next.ServeHTTP(w, r) // not a real connection (a test recorder)
			return
		}
		// On a copy: net/http looks at its own request's Body afterwards
		// to tell whether the handler left part of it unread (and the
		// connection must close rather than be reused).
		r = r.WithContext(r.Context())
		r.Body = &pacedBody{ReadCloser: r.Body, rc: rc, start: start, grace: grace, rate: rate}
		next.ServeHTTP(w, r)
	})
}

// pacedBody moves the connection's read deadline on as the body arrives:
// start + grace + bytes so far / rate.
type pacedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	start   time.Time
	grace   time.Duration
	rate, n int64
	done    bool
}

// ErrSlowBody is the error of a body that arrived too slowly.
var ErrSlowBody = errors.New("the request body arrived too slowly")

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	p.n += int64(n)
	switch {
	case err == io.EOF && !p.done:
		// All in: what the connection does next (an SSE stream waiting
		// for the client to go) has no deadline of ours.
		p.done = true
		_ = p.rc.SetReadDeadline(time.Time{})
	case err != nil:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("%w: %d bytes in %s, under the minimum of %d bytes/s", ErrSlowBody, p.n, time.Since(p.start).Round(time.Millisecond), p.rate)
		}
	case n > 0:
		_ = p.rc.SetReadDeadline(p.start.Add(p.grace + time.Duration(float64(p.n)/float64(p.rate)*float64(time.Second))))
	}
	return n, err
}
