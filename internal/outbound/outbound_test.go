package outbound_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/internal/outbound"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClassify(t *testing.T) {
	t.Parallel()
	for addr, rule := range map[string]string{
		"127.0.0.1":                outbound.RuleLoopback,
		"127.255.0.9":              outbound.RuleLoopback,
		"::1":                      outbound.RuleLoopback,
		"::ffff:127.0.0.1":         outbound.RuleLoopback,
		"64:ff9b::7f00:1":          outbound.RuleLoopback, // NAT64 of 127.0.0.1
		"2002:7f00:1::1":           outbound.RuleLoopback, // 6to4 of 127.0.0.1
		"10.1.2.3":                 outbound.RulePrivate,
		"172.16.0.1":               outbound.RulePrivate,
		"172.31.255.255":           outbound.RulePrivate,
		"192.168.1.1":              outbound.RulePrivate,
		"100.64.0.1":               outbound.RulePrivate,
		"fd12:3456::1":             outbound.RulePrivate,
		"::ffff:10.0.0.1":          outbound.RulePrivate,
		"2002:a00:1::":             outbound.RulePrivate, // 6to4 of 10.0.0.1
		"169.254.1.1":              outbound.RuleLinkLocal,
		"fe80::1":                  outbound.RuleLinkLocal,
		"fe80::1%eth0":             outbound.RuleLinkLocal,
		"224.0.0.1":                outbound.RuleMulticast,
		"ff02::1":                  outbound.RuleMulticast,
		"0.0.0.0":                  outbound.RuleUnspecified,
		"0.1.2.3":                  outbound.RuleUnspecified,
		"::":                       outbound.RuleUnspecified,
		"255.255.255.255":          outbound.RuleReserved,
		"240.0.0.1":                outbound.RuleReserved,
		"198.18.0.1":               outbound.RuleReserved,
		"169.254.169.254":          outbound.RuleCloudMetadata,
		"::ffff:169.254.169.254":   outbound.RuleCloudMetadata,
		"64:ff9b::a9fe:a9fe":       outbound.RuleCloudMetadata,
		"fd00:ec2::254":            outbound.RuleCloudMetadata,
		"100.100.100.200":          outbound.RuleCloudMetadata,
		"169.254.170.2":            outbound.RuleCloudMetadata,
		"8.8.8.8":                  "",
		"93.184.216.34":            "",
		"172.32.0.1":               "",
		"2606:4700:4700::1111":     "",
		"::ffff:1.1.1.1":           "",
		"2002:808:808::1":          "", // 6to4 of 8.8.8.8
		"64:ff9b::808:808":         "",
		"100.128.0.1":              "",
		"192.0.2.1":                "", // documentation: unroutable, harmless
		"2001:4860:4860::8888":     "",
		"fe80::a9fe:a9fe%lo":       outbound.RuleLinkLocal,
		"::a9fe:a9fe":              outbound.RuleCloudMetadata, // IPv4-compatible
		"::127.0.0.1":              outbound.RuleLoopback,
		"::ffff:0.0.0.0":           outbound.RuleUnspecified,
		"::ffff:255.255.255.255":   outbound.RuleReserved,
		"::ffff:224.1.1.1":         outbound.RuleMulticast,
		"::ffff:192.168.255.255":   outbound.RulePrivate,
		"::ffff:169.254.255.255":   outbound.RuleLinkLocal,
		"::ffff:100.100.100.200":   outbound.RuleCloudMetadata,
		"2002:6464:64c8::":         outbound.RuleCloudMetadata, // 6to4 of 100.100.100.200
		"64:ff9b:1::1":             outbound.RulePrivate,
		"::ffff:198.19.255.255":    outbound.RuleReserved,
		"::ffff:192.0.0.192":       outbound.RuleCloudMetadata,
		"::ffff:192.0.0.1":         outbound.RuleReserved,
		"fec0::1":                  outbound.RulePrivate,
		"::ffff:172.16.0.0":        outbound.RulePrivate,
		"::ffff:100.127.255.255":   outbound.RulePrivate,
		"::ffff:127.0.0.2":         outbound.RuleLoopback,
		"2001:db8::1":              "",
		"2a00:1450:4001:81b::200e": "",
	} {
		a, err := netip.ParseAddr(addr)
		require.NoError(t, err, addr)
		require.Equal(t, rule, outbound.Classify(a), addr)
	}
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	p, err := outbound.ParsePolicy([]string{" loopback", "10.1.0.0/16", "192.168.7.7", "[fd00::1]", "hooks.internal.", "*.svc.cluster.local", ""})
	require.NoError(t, err)
	for _, c := range []struct {
		host, addr string
		ok         bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"localhost", "::1", true},
		{"x", "10.1.200.3", true},
		{"x", "10.2.0.1", false},
		{"x", "192.168.7.7", true},
		{"x", "192.168.7.8", false},
		{"x", "fd00::1", true},
		{"HOOKS.internal", "10.9.9.9", true},
		{"hooks.internal.evil.com", "10.9.9.9", false},
		{"a.b.svc.cluster.local", "172.20.0.5", true},
		{"svc.cluster.local", "172.20.0.5", false},
		{"hooks.internal", "169.254.169.254", false}, // a name never unlocks metadata
		{"anything", "8.8.8.8", true},
		{"x", "169.254.0.1", false},
	} {
		err := p.Check(c.host, netip.MustParseAddr(c.addr))
		if c.ok {
			require.NoError(t, err, "%+v", c)
			continue
		}
		var d *outbound.DeniedError
		require.ErrorAs(t, err, &d, "%+v", c)
		require.Contains(t, err.Error(), d.Rule)
		require.Contains(t, err.Error(), "--outbound-allow")
	}
	meta, err := outbound.ParsePolicy([]string{"169.254.169.254/32"})
	require.NoError(t, err)
	require.NoError(t, meta.Check("", netip.MustParseAddr("169.254.169.254")), "an explicit address allows even metadata")
	for _, bad := range []string{"10.0.0.0/33", "http://x", "a b", "*.*.x", "x:80", "user@host"} {
		_, err := outbound.ParsePolicy([]string{bad})
		require.Error(t, err, bad)
	}
	var zero *outbound.Policy
	require.Error(t, zero.Check("localhost", netip.MustParseAddr("127.0.0.1")), "nil policy: public only")
	require.NoError(t, zero.Check("example.com", netip.MustParseAddr("93.184.216.34")))
}

// hits counts requests an httptest server receives.
func hitServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func post(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(`{"n":1}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestClientChecksTheConnectedAddress(t *testing.T) {
	t.Parallel()
	srv, hits := hitServer(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	t.Run("LoopbackIsRefusedByDefaultByAddressAndByName", func(t *testing.T) {
		c := outbound.NewClient(outbound.Config{})
		for _, url := range []string{srv.URL, "http://localhost" + port, "http://[::ffff:127.0.0.1]" + port} {
			_, err := post(t, c, url)
			var d *outbound.DeniedError
			require.ErrorAs(t, err, &d, url)
			require.Equal(t, outbound.RuleLoopback, d.Rule, url)
		}
		require.Zero(t, hits.Load(), "nothing reached the server")
	})
	t.Run("AllowedByRuleAddressOrName", func(t *testing.T) {
		for _, allow := range []string{"loopback", "127.0.0.1", "127.0.0.0/8", "localhost"} {
			c := outbound.NewClient(outbound.Config{Policy: outbound.MustParsePolicy(allow)})
			url := srv.URL
			if allow == "localhost" {
				url = "http://localhost" + port
			}
			resp, err := post(t, c, url)
			require.NoError(t, err, allow)
			require.Equal(t, 204, resp.StatusCode)
		}
	})
}

func TestRedirects(t *testing.T) {
	t.Parallel()
	target, targetHits := hitServer(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	var to atomic.Value
	redirector, _ := hitServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.Load().(string), http.StatusFound)
	})
	to.Store(target.URL)
	allowLoopback := outbound.MustParsePolicy("loopback")
	t.Run("NotFollowedByDefault", func(t *testing.T) {
		resp, err := post(t, outbound.NewClient(outbound.Config{Policy: allowLoopback}), redirector.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusFound, resp.StatusCode)
		require.Zero(t, targetHits.Load())
	})
	t.Run("EveryHopIsChecked", func(t *testing.T) {
		// Only the redirector's address is allowed: its answer points at
		// a metadata address, which is refused before any packet is sent.
		host := strings.TrimPrefix(redirector.URL, "http://")
		host = host[:strings.LastIndex(host, ":")]
		c := outbound.NewClient(outbound.Config{Policy: outbound.MustParsePolicy(host), MaxRedirects: 3})
		r2, _ := hitServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		})
		_, err := post(t, c, r2.URL)
		var d *outbound.DeniedError
		require.ErrorAs(t, err, &d)
		require.Equal(t, outbound.RuleCloudMetadata, d.Rule)
	})
}

// flakyServer is a raw HTTP/1.1 server on loopback: on the first
// connection it answers the first request and then, on the same
// keep-alive connection, reads the next request whole and hangs up
// without answering (as a receiver that crashed after acting would). Every
// later connection is answered normally. It counts the requests it read.
type flakyServer struct {
	ln    net.Listener
	reads atomic.Int32
	conns atomic.Int32
	wg    sync.WaitGroup
}

func newFlakyServer(t *testing.T) *flakyServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &flakyServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := s.conns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, n == 1)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *flakyServer) serve(c net.Conn, hangUpOnSecond bool) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := 1; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.reads.Add(1)
		if hangUpOnSecond && i == 2 {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a polite FIN
			}
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

func (s *flakyServer) url() string { return "http://" + s.ln.Addr().String() + "/hook" }

func TestARequestIsNeverSentTwiceWithinOneCall(t *testing.T) {
	t.Parallel()
	t.Run("GoTransportAloneReSendsAPostWithAnIdempotencyKey", func(t *testing.T) {
		// What this package guards against, as net/http does it.
		t.Parallel()
		s := newFlakyServer(t)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		_, err := post(t, c, s.url())
		require.NoError(t, err)
		_, err = post(t, c, s.url())
		require.NoError(t, err, "the transport re-sent it on a new connection")
		require.Equal(t, int32(3), s.reads.Load(), "the second POST was received twice")
	})
	t.Run("TheOutboundClientSendsItOnce", func(t *testing.T) {
		t.Parallel()
		s := newFlakyServer(t)
		c := outbound.NewClient(outbound.Config{Policy: outbound.MustParsePolicy("loopback")})
		defer c.CloseIdleConnections()
		_, err := post(t, c, s.url())
		require.NoError(t, err)
		_, err = post(t, c, s.url())
		require.Error(t, err, "a broken connection is the call's error")
		require.Equal(t, int32(2), s.reads.Load(), "each POST received once")
		require.Equal(t, int32(1), s.conns.Load(), "no second connection was opened for it")
	})
	t.Run("AnEmptyPostIsNotReSentEither", func(t *testing.T) {
		t.Parallel()
		s := newFlakyServer(t)
		c := outbound.NewClient(outbound.Config{Policy: outbound.MustParsePolicy("loopback")})
		defer c.CloseIdleConnections()
		for i, want := range []bool{true, false} {
			req, err := http.NewRequest(http.MethodPost, s.url(), nil)
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "k")
			resp, err := c.Do(req)
			if want {
				require.NoError(t, err, i)
				_, _ = io.Copy(io.Discard, resp.Body) // so that the connection is reused
				resp.Body.Close()
			} else {
				require.Error(t, err, i)
			}
		}
		require.Equal(t, int32(2), s.reads.Load())
	})
	t.Run("GetsMayStillBeRetried", func(t *testing.T) {
		t.Parallel()
		s := newFlakyServer(t)
		c := outbound.NewClient(outbound.Config{Policy: outbound.MustParsePolicy("loopback")})
		defer c.CloseIdleConnections()
		for range 2 {
			resp, err := c.Get(s.url())
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.True(t, bytes.Equal(b, []byte("ok")))
		}
		require.Equal(t, int32(3), s.reads.Load(), "a GET is safe to repeat")
	})
}

func TestDeniedErrorSurvivesWrapping(t *testing.T) {
	t.Parallel()
	c := outbound.NewClient(outbound.Config{})
	_, err := c.Get("http://127.0.0.1:1/")
	require.True(t, outbound.IsDenied(err))
	require.False(t, outbound.IsDenied(errors.New("x")))
}

// TestAnErrorNamesTheTargetNeverTheResolver: a name that does not resolve
// is reported by name, without the address of the DNS server asked (an
// address of the network the server runs in).
func TestAnErrorNamesTheTargetNeverTheResolver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked []string
	r := &net.Resolver{PreferGo: true, Dial: func(_ context.Context, _, address string) (net.Conn, error) {
		mu.Lock()
		asked = append(asked, address)
		mu.Unlock()
		return nil, errors.New("no answer")
	}}
	c := outbound.NewClient(outbound.Config{Resolver: r})
	defer c.CloseIdleConnections()
	_, err := c.Get("http://target.example.com/hook")
	require.Error(t, err)
	require.Contains(t, err.Error(), "target.example.com")
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, asked, "the resolver was asked")
	for _, a := range asked {
		host, _, _ := net.SplitHostPort(a)
		require.NotContains(t, err.Error(), a)
		require.NotContains(t, err.Error(), " on "+host, "%v", err)
	}
}
