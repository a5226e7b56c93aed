package app

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"

	"taskgraph/auth"
	"taskgraph/outbound"
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

// registerNetworkFlags adds the flags of NetworkConfig to fs; the function
// it returns checks them once fs is parsed.
func registerNetworkFlags(fs *flag.FlagSet, env func(name, def string) string, c *Config) func() error {
	n := &c.Network
	fs.StringVar(&n.PublicURL, "public-url", env("public-url", ""), "scheme and host clients reach this server by (https://tasks.example.com); download links are built from it (default: http://<addr>)")
	fs.StringVar(&n.MetricsAddr, "metrics-addr", env("metrics-addr", ""), "serve /metrics on this address of its own, without authentication (default: on -addr, to admins only)")
	allow := fs.String("outbound-allow", env("outbound-allow", ""), "comma list of non-public destinations webhooks may call: loopback, private, link-local..., addresses, CIDRs, host names, *.example.com (default: public addresses only; loopback too on an open server)")
	return func() error {
		n.OutboundAllow = splitList(*allow)
		if _, err := outbound.ParsePolicy(n.OutboundAllow); err != nil {
			return fmt.Errorf("-outbound-allow: %w", err)
		}
		if n.PublicURL != "" {
			u, err := url.Parse(n.PublicURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
				return fmt.Errorf("-public-url: %q is not a URL such as https://tasks.example.com", n.PublicURL)
			}
			n.PublicURL = strings.TrimSuffix(n.PublicURL, "/")
		}
		if n.MetricsAddr != "" {
			host, _, err := net.SplitHostPort(n.MetricsAddr)
			if err != nil {
				return fmt.Errorf("-metrics-addr: %q is not host:port", n.MetricsAddr)
			}
			if c.Access.Open() && !auth.LoopbackHost(host) {
				return fmt.Errorf("-metrics-addr: %s is not a loopback address, and no authentication is configured; an open server listens on 127.0.0.1 or localhost only", n.MetricsAddr)
			}
		}
		return nil
	}
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
