// Package outbound is the HTTP client of every request the server makes on
// a task's behalf (the webhook task type today, alert channels later).
//
// Whoever may create a task may name the URL it calls, so the server must
// not become a way into its own network: destinations on loopback, private,
// link-local, multicast, unspecified and reserved addresses, and the cloud
// metadata services, are refused unless the configuration allows them
// (Config.Allow, --outbound-allow). The check is made on the address
// actually connected to, in the dialer (net.Dialer.Control), after DNS
// resolution: a name that resolves to a public address when validated and
// to 127.0.0.1 when called (DNS rebinding) is refused all the same.
// Redirects are not followed unless asked for, and each hop then goes
// through the same dialer. No proxy from the environment is used: a proxy
// would connect on the server's behalf, past the check.
//
// The client also never sends a request twice within one call: Go's
// transport re-sends a request with an Idempotency-Key header (or a GET)
// by itself when a reused keep-alive connection breaks before the first
// byte of the answer, whether or not the receiver already acted on it
// (see NewClient). A request either reaches the receiver once per call or
// fails, and the caller's retry policy decides what follows.
package outbound

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Rules a destination address can fall under, named in refusals and usable
// as entries of Config.Allow.
const (
	RuleLoopback      = "loopback"       // 127.0.0.0/8, ::1
	RulePrivate       = "private"        // RFC 1918, 100.64.0.0/10, fc00::/7, fec0::/10, local NAT64
	RuleLinkLocal     = "link-local"     // 169.254.0.0/16, fe80::/10
	RuleMulticast     = "multicast"      // 224.0.0.0/4, ff00::/8
	RuleUnspecified   = "unspecified"    // 0.0.0.0/8, ::
	RuleReserved      = "reserved"       // 240.0.0.0/4, broadcast, 192.0.0.0/24, 198.18.0.0/15, 100::/64
	RuleCloudMetadata = "cloud-metadata" // 169.254.169.254, fd00:ec2::254, 100.100.100.200...
)

// Rules lists every rule name, in the order they are checked.
var Rules = []string{RuleCloudMetadata, RuleUnspecified, RuleLoopback, RuleLinkLocal, RuleMulticast, RulePrivate, RuleReserved}

// metadata are the addresses of cloud instance metadata services: they hand
// out credentials to whoever asks from the machine. Checked before the
// ranges they lie in, so that a refusal names them.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("169.254.170.23"),  // AWS EKS pod identity
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"),    // AWS EKS pod identity over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud (classic)
}

var ranges = map[string][]netip.Prefix{
	RuleUnspecified: prefixes("0.0.0.0/8", "::/128"),
	RuleLoopback:    prefixes("127.0.0.0/8", "::1/128"),
	RuleLinkLocal:   prefixes("169.254.0.0/16", "fe80::/10"),
	RuleMulticast:   prefixes("224.0.0.0/4", "ff00::/8"),
	RulePrivate:     prefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fec0::/10", "64:ff9b:1::/48"),
	RuleReserved:    prefixes("240.0.0.0/4", "192.0.0.0/24", "198.18.0.0/15", "100::/64", "2001::/23"),
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// IPv6 ranges that carry an IPv4 address: what they reach is decided by the
// IPv4 address inside (64:ff9b::127.0.0.1 is loopback through NAT64).
var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4  = netip.MustParsePrefix("2002::/16")
	compat4 = netip.MustParsePrefix("::/96") // deprecated IPv4-compatible
)

// Classify returns the rule an address falls under, or "" for a public
// address.
func Classify(a netip.Addr) string {
	a = embeddedIPv4(a.WithZone("").Unmap())
	if slices.Contains(metadata, a) {
		return RuleCloudMetadata
	}
	for _, rule := range Rules[1:] {
		for _, p := range ranges[rule] {
			if p.Contains(a) {
				return rule
			}
		}
	}
	if a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return RuleReserved
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address an IPv6 transition address stands
// for, or a itself.
func embeddedIPv4(a netip.Addr) netip.Addr {
	if !a.Is6() {
		return a
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6]))
	case compat4.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return a
}

// Policy decides which destinations may be connected to. The zero Policy
// allows public addresses only.
type Policy struct {
	rules    map[string]bool // rule names allowed
	prefixes []netip.Prefix  // addresses allowed
	hosts    []string        // host names allowed ("*.example.com" for its subdomains)
}

// ParsePolicy reads allow entries: a rule name (loopback, private,
// link-local...), an address, a CIDR, a host name, or "*.example.com" for
// every name under example.com. A host name allows whatever it resolves to
// except the cloud metadata addresses, which only an address or CIDR entry
// (or the rule name) allows.
func ParsePolicy(allow []string) (*Policy, error) {
	p := &Policy{rules: map[string]bool{}}
	for _, raw := range allow {
		e := strings.TrimSpace(raw)
		switch {
		case e == "":
			continue
		case slices.Contains(Rules, strings.ToLower(e)):
			p.rules[strings.ToLower(e)] = true
		case strings.Contains(e, "/"):
			pre, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("outbound allow %q: not a CIDR: %w", raw, err)
			}
			p.prefixes = append(p.prefixes, pre.Masked())
		default:
			if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				a = a.Unmap()
				p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			h := normalHost(e)
			name := strings.TrimPrefix(h, "*.")
			if name == "" || strings.ContainsAny(name, "*/:@ ") || strings.Count(h, "*") > 1 {
				return nil, fmt.Errorf("outbound allow %q: not a rule (%s), an address, a CIDR or a host name", raw, strings.Join(Rules, ", "))
			}
			p.hosts = append(p.hosts, h)
		}
	}
	return p, nil
}

// MustParsePolicy is ParsePolicy for entries known to be valid.
func MustParsePolicy(allow ...string) *Policy {
	p, err := ParsePolicy(allow)
	if err != nil {
		panic(err)
	}
	return p
}

func normalHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
}

// hostAllowed reports whether a host name of a URL is allowed by name.
func (p *Policy) hostAllowed(host string) bool {
	if p == nil {
		return false
	}
	host = normalHost(host)
	for _, h := range p.hosts {
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// Check returns a *DeniedError when the policy refuses to connect to addr
// for a URL naming host.
func (p *Policy) Check(host string, addr netip.Addr) error {
	// A zone (fe80::1%eth0) would keep the address out of every prefix.
	addr = addr.WithZone("").Unmap()
	rule := Classify(addr)
	if rule == "" {
		return nil
	}
	if p != nil {
		if p.rules[rule] {
			return nil
		}
		for _, pre := range p.prefixes {
			if pre.Contains(addr) {
				return nil
			}
		}
		if rule != RuleCloudMetadata && p.hostAllowed(host) {
			return nil
		}
	}
	return &DeniedError{Host: host, Addr: addr, Rule: rule}
}

// DeniedError is a destination the policy refuses. It is final: asking
// again reaches the same address.
type DeniedError struct {
	Host string     // as the URL names it
	Addr netip.Addr // what it resolved to
	Rule string     // which rule refused it
}

func (e *DeniedError) Error() string {
	dest := e.Addr.String()
	if e.Host != "" && e.Host != dest {
		dest = e.Host + " (" + dest + ")"
	}
	return fmt.Sprintf("outbound policy refuses %s: a %s address (allow it with --outbound-allow)", dest, e.Rule)
}

// IsDenied reports whether err is (or wraps) a *DeniedError.
func IsDenied(err error) bool {
	var d *DeniedError
	return errors.As(err, &d)
}
