package app

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/outbound"
)

// NetworkConfig is how the process is reached and what it may reach: the
// address its links name, where /metrics is served, and which non-public
// destinations requests made on a task's behalf may call.
type NetworkConfig struct {
	// PublicURL is the scheme and host (and path prefix, if any) clients
	// reach the server by: download links are built from it, never from
	// a request's Host header. Default: http://<addr> when --addr names a
	// host; links are relative (/download/...) when it does not (0.0.0.0).
	PublicURL string
	// MetricsAddr serves /metrics on a listener of its own, without
	// authentication (for a Prometheus inside the network). Empty: /metrics
	// is served on --addr to admins only (to everyone on an open server).
	MetricsAddr string
	// OutboundAllow lists the non-public destinations tasks may call
	// (package outbound: rule names, addresses, CIDRs, host names). An open
	// server adds "loopback": whoever uses it is on this machine already.
	OutboundAllow []string
}

// parsePublicURL reads --public-url: a scheme and a host, without query,
// fragment or credentials, kept without its trailing slash.
func parsePublicURL(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("not a URL such as https://tasks.example.com")
	}
	return strings.TrimSuffix(s, "/"), nil
}

// parseOptionalAddr reads an address that may be left empty.
func parseOptionalAddr(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	return parseAddr(s)
}

// checkOutboundRule says what an item of --outbound-allow is not.
func checkOutboundRule(s string) error {
	_, err := outbound.ParsePolicy([]string{s})
	return err
}

// checkNetwork validates the network flags together with the others: an
// open server serves its metrics on loopback only, as it does the API.
func (c Config) checkNetwork() error {
	if n := c.Network; n.MetricsAddr != "" {
		host, _, _ := net.SplitHostPort(n.MetricsAddr)
		if c.Access.Open() && !auth.LoopbackHost(host) {
			return fmt.Errorf("--metrics-addr: %s is not a loopback address, and no authentication is configured; an open server listens on 127.0.0.1 or localhost only", n.MetricsAddr)
		}
	}
	return nil
}

// outboundPolicy is the policy of requests made on a task's behalf.
func (c Config) outboundPolicy() (*outbound.Policy, error) {
	allow := c.Network.OutboundAllow
	if c.Access.Open() {
		allow = append([]string{outbound.RuleLoopback}, allow...)
	}
	return outbound.ParsePolicy(allow)
}

// PublicURL is what links are built from: Network.PublicURL, else
// http://<addr> when addr names a host, else "" (relative links).
func (c Config) PublicURL() string {
	if c.Network.PublicURL != "" {
		return c.Network.PublicURL
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return ""
	}
	return "http://" + net.JoinHostPort(host, port)
}
