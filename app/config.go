package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"taskgraph/auth"
)

// Config is everything a taskgraph process is told at start. Each field
// has a flag and an environment variable (TASKGRAPH_ and the flag's name in
// upper case with - as _); a flag given on the command line wins.
type Config struct {
	Addr             string
	DB               string
	DataDir          string
	Workers          int
	Roles            []Role
	SecretKey        string
	LogLevel         slog.Level
	LogFormat        string
	ShutdownGrace    time.Duration
	HeartbeatTimeout time.Duration
	Playground       bool
	// Retention purges finished tasks older than this (0: keep forever).
	Retention time.Duration
	Access    AccessConfig
	// Imports, exports and artifacts.
	MaxUploadSize    int64
	ImportMaxRows    int
	ImportUnzipLimit int64
	ArtifactTTL      time.Duration
	JanitorInterval  time.Duration
	// BlobURL is where files live (artifact.OpenBucket): file:///dir or
	// s3://bucket?...; empty: the artifacts directory in DataDir.
	BlobURL string
	// Network: public URL, metrics listener, outbound destinations.
	Network NetworkConfig
	// AlertInterval paces the alert evaluator's periodic checks.
	AlertInterval time.Duration
}

// AccessConfig is who may use the server and how hard it is to abuse
// (README "Access"). With no TokenFile and no JWT key the server is open:
// it listens on loopback only and everyone who reaches it is admin.
type AccessConfig struct {
	TokenFile       string
	JWTHS256KeyFile string
	JWTRS256KeyFile string
	JWTIssuer       string
	JWTAudience     string
	JWTLeeway       time.Duration
	JWTUserClaim    string
	JWTRoleClaim    string
	JWTTenantClaim  string
	TrustedProxies  []netip.Prefix
	AllowedOrigins  []string
	// PlatformAdmins administer every tenant (see auth.Config).
	PlatformAdmins []auth.Identity

	ComplexityLimit  int
	MaxDepth         int
	WSMaxSubs        int
	WSMaxConnections int
	RateLimit        float64 // mutations per second per user; 0: none
	RateBurst        int

	MaskKeys []string
	MaskFile string
}

// Open reports whether no authentication is configured.
func (c AccessConfig) Open() bool {
	return c.TokenFile == "" && c.JWTHS256KeyFile == "" && c.JWTRS256KeyFile == ""
}

// Role is a part a process plays.
type Role string

// Roles. "all" is api, worker and watchdog together.
const (
	RoleAPI      Role = "api"      // serves GraphQL
	RoleWorker   Role = "worker"   // runs tasks
	RoleWatchdog Role = "watchdog" // recovers stuck executions
)

// Has reports whether c includes role r.
func (c Config) Has(r Role) bool { return slices.Contains(c.Roles, r) }

// Blobs is the blob store to open: BlobURL, or the artifacts directory in
// the data directory.
func (c Config) Blobs() (string, error) {
	if c.BlobURL != "" {
		return c.BlobURL, nil
	}
	dir, err := filepath.Abs(filepath.Join(c.DataDir, "artifacts"))
	if err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return "file://" + filepath.ToSlash(dir), nil
}

// DSN is the database to open: DB, or the SQLite file in the data directory.
func (c Config) DSN() string {
	if c.DB != "" {
		return c.DB
	}
	return filepath.Join(c.DataDir, "taskgraph.db")
}

// ParseFlags reads the command line and the environment (getenv).
func ParseFlags(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	fs := flag.NewFlagSet("taskgraph", flag.ContinueOnError)
	fs.SetOutput(usage)
	var c Config
	var roles, level string
	env := func(name, def string) string {
		if v := getenv("TASKGRAPH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&c.Addr, "addr", env("addr", "127.0.0.1:8080"), "address to listen on")
	fs.StringVar(&c.DB, "db", env("db", ""), "database: postgres://... or a SQLite file (default: taskgraph.db in the data directory)")
	fs.StringVar(&c.DataDir, "data-dir", env("data-dir", "./data"), "directory for the SQLite file, the secret key and artifacts")
	workers := fs.String("workers", env("workers", "256"), "handlers running at once in this process")
	fs.StringVar(&roles, "role", env("role", "all"), "what this process does: all, or a comma list of api, worker, watchdog")
	fs.StringVar(&c.SecretKey, "secret-key", env("secret-key", ""), "64 hex characters encrypting sensitive input (default: a key file in the data directory; nodes sharing a database must share it)")
	fs.StringVar(&level, "log-level", env("log-level", "info"), "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", env("log-format", "text"), "text or json")
	grace := fs.String("shutdown-grace", env("shutdown-grace", "10s"), "how long running tasks may finish at shutdown before they are interrupted")
	hb := fs.String("heartbeat-timeout", env("heartbeat-timeout", "30s"), "how long an execution may go without a heartbeat before the watchdog recovers it")
	playground := fs.String("playground", env("playground", "false"), "serve GraphiQL at /playground and allow introspection")
	retention := fs.String("retention", env("retention", "0"), "purge finished tasks older than this, e.g. 30d or 720h (0: keep forever)")
	ac := &c.Access
	fs.StringVar(&ac.TokenFile, "token-file", env("token-file", ""), "file of hashed bearer tokens: <sha256-hex> <user> <role> [tenant] per line (see `taskgraph token`)")
	fs.StringVar(&ac.JWTHS256KeyFile, "jwt-hs256-key-file", env("jwt-hs256-key-file", ""), "file holding the HS256 secret JWTs are signed with (32 bytes or more)")
	fs.StringVar(&ac.JWTRS256KeyFile, "jwt-rs256-key-file", env("jwt-rs256-key-file", ""), "PEM public key RS256 JWTs are verified with")
	fs.StringVar(&ac.JWTIssuer, "jwt-issuer", env("jwt-issuer", ""), "required iss of JWTs")
	fs.StringVar(&ac.JWTAudience, "jwt-audience", env("jwt-audience", ""), "required aud of JWTs")
	leeway := fs.String("jwt-leeway", env("jwt-leeway", "30s"), "clock skew tolerated on a JWT's exp, nbf and iat")
	fs.StringVar(&ac.JWTUserClaim, "jwt-user-claim", env("jwt-user-claim", "sub"), "JWT claim naming the user")
	fs.StringVar(&ac.JWTRoleClaim, "jwt-role-claim", env("jwt-role-claim", "role"), "JWT claim holding the role: admin, operator or viewer")
	fs.StringVar(&ac.JWTTenantClaim, "jwt-tenant-claim", env("jwt-tenant-claim", "tenant"), "JWT claim holding the tenant (optional)")
	platformAdmins := fs.String("platform-admins", env("platform-admins", ""), "comma list of admins who administer every tenant: token:<user>, jwt:<user>, or <source>:<tenant>:<user> for a user of a named tenant")
	proxies := fs.String("trusted-proxies", env("trusted-proxies", ""), "comma list of addresses or CIDRs of reverse proxies whose X-Forwarded-For is believed")
	origins := fs.String("allowed-origins", env("allowed-origins", ""), "comma list of foreign origins (https://console.example.com) whose pages may call the API; same-origin pages and non-browser clients always may")
	complexity := fs.String("gql-complexity", env("gql-complexity", "20000"), "largest cost of a GraphQL operation (each aliased field counts)")
	depth := fs.String("gql-depth", env("gql-depth", "15"), "deepest GraphQL operation")
	wsSubs := fs.String("ws-max-subscriptions", env("ws-max-subscriptions", "50"), "operations one websocket may run at once")
	wsConns := fs.String("ws-max-connections", env("ws-max-connections", "20"), "websockets one user may have open")
	rateLimit := fs.String("rate-limit", env("rate-limit", "10"), "mutations per second each user may sustain (a bulk action counts one per id); 0 turns the limit off")
	rateBurst := fs.String("rate-burst", env("rate-burst", "100"), "mutations a user may make at once before -rate-limit applies")
	maskKeys := fs.String("mask-keys", env("mask-keys", ""), "comma list of extra JSON key names (case-insensitive substrings) whose values are masked")
	fs.StringVar(&ac.MaskFile, "mask-file", env("mask-file", ""), "JSON file of extra masking rules by key and by pattern (README)")
	maxUpload := fs.String("max-upload-size", env("max-upload-size", "50MiB"), "largest file importFile accepts (bytes, or with KiB, MiB, GiB)")
	maxRows := fs.String("import-max-rows", env("import-max-rows", "1000000"), "most data rows an imported file may have")
	unzipLimit := fs.String("import-unzip-limit", env("import-unzip-limit", "1GiB"), "most an imported xlsx may unpack to (bytes, or with KiB, MiB, GiB)")
	ttl := fs.String("artifact-ttl", env("artifact-ttl", "7d"), "how long uploaded files, error reports and exports are kept (a duration such as 72h, or days such as 7d)")
	janitor := fs.String("janitor-interval", env("janitor-interval", "10m"), "how often expired artifacts are removed (by the watchdog role)")
	fs.StringVar(&c.BlobURL, "blob-url", env("blob-url", ""), "where uploads, error reports and exports live, the same on every node: file:///srv/taskgraph/files (a directory every node mounts) or s3://bucket?endpoint=...&region=... (default: the artifacts directory in the data directory, for one node)")
	checkNetwork := registerNetworkFlags(fs, env, &c)
	checkAlerts := registerAlertFlags(fs, env, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := checkNetwork(); err != nil {
		return c, err
	}
	if err := checkAlerts(); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.Workers, err = strconv.Atoi(*workers); err != nil || c.Workers < 1 || c.Workers > 10000 {
		return c, fmt.Errorf("-workers: %q is not a number between 1 and 10000", *workers)
	}
	if c.ShutdownGrace, err = time.ParseDuration(*grace); err != nil || c.ShutdownGrace < 0 {
		return c, fmt.Errorf("-shutdown-grace: %q is not a duration such as 10s", *grace)
	}
	if c.HeartbeatTimeout, err = time.ParseDuration(*hb); err != nil || c.HeartbeatTimeout < 3*time.Second {
		return c, fmt.Errorf("-heartbeat-timeout: %q is not a duration of at least 3s", *hb)
	}
	if c.Retention, err = parseDays(*retention); err != nil || c.Retention < 0 {
		return c, fmt.Errorf("-retention: %q is not a duration such as 30d or 720h", *retention)
	}
	if c.Playground, err = strconv.ParseBool(*playground); err != nil {
		return c, fmt.Errorf("-playground: %q is not true or false", *playground)
	}
	if c.MaxUploadSize, err = parseSize(*maxUpload); err != nil || c.MaxUploadSize < 1 {
		return c, fmt.Errorf("-max-upload-size: %q is not a size such as 50MiB", *maxUpload)
	}
	if c.ImportMaxRows, err = strconv.Atoi(*maxRows); err != nil || c.ImportMaxRows < 1 {
		return c, fmt.Errorf("-import-max-rows: %q is not a positive number", *maxRows)
	}
	if c.ImportUnzipLimit, err = parseSize(*unzipLimit); err != nil || c.ImportUnzipLimit < 1<<20 {
		return c, fmt.Errorf("-import-unzip-limit: %q is not a size of at least 1MiB", *unzipLimit)
	}
	if c.ArtifactTTL, err = parseDays(*ttl); err != nil || c.ArtifactTTL < time.Minute {
		return c, fmt.Errorf("-artifact-ttl: %q is not a duration of at least 1m (such as 72h or 7d)", *ttl)
	}
	if c.BlobURL != "" && !strings.HasPrefix(c.BlobURL, "file://") && !strings.HasPrefix(c.BlobURL, "s3://") {
		return c, fmt.Errorf("-blob-url: %q is not file:///dir or s3://bucket?...", c.BlobURL)
	}
	if c.JanitorInterval, err = time.ParseDuration(*janitor); err != nil || c.JanitorInterval < time.Second {
		return c, fmt.Errorf("-janitor-interval: %q is not a duration of at least 1s", *janitor)
	}
	if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
		return c, fmt.Errorf("-log-level: %q is not debug, info, warn or error", level)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return c, fmt.Errorf("-log-format: %q is not text or json", c.LogFormat)
	}
	if c.Roles, err = parseRoles(roles); err != nil {
		return c, err
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return c, fmt.Errorf("-addr: %q is not host:port", c.Addr)
	}
	if ac.JWTLeeway, err = time.ParseDuration(*leeway); err != nil || ac.JWTLeeway < 0 || ac.JWTLeeway > 10*time.Minute {
		return c, fmt.Errorf("-jwt-leeway: %q is not a duration between 0s and 10m", *leeway)
	}
	if ac.TrustedProxies, err = parsePrefixes(*proxies); err != nil {
		return c, fmt.Errorf("-trusted-proxies: %w", err)
	}
	ac.AllowedOrigins = splitList(*origins)
	for _, o := range ac.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return c, fmt.Errorf("-allowed-origins: %q is not an origin such as https://console.example.com", o)
		}
	}
	for _, n := range []struct {
		name     string
		raw      string
		into     *int
		min, max int
	}{
		{"gql-complexity", *complexity, &ac.ComplexityLimit, 100, 10_000_000},
		{"gql-depth", *depth, &ac.MaxDepth, 3, 100},
		{"ws-max-subscriptions", *wsSubs, &ac.WSMaxSubs, 1, 10000},
		{"ws-max-connections", *wsConns, &ac.WSMaxConnections, 1, 10000},
		{"rate-burst", *rateBurst, &ac.RateBurst, 1, 1_000_000},
	} {
		if *n.into, err = strconv.Atoi(n.raw); err != nil || *n.into < n.min || *n.into > n.max {
			return c, fmt.Errorf("-%s: %q is not a number between %d and %d", n.name, n.raw, n.min, n.max)
		}
	}
	if ac.RateLimit, err = strconv.ParseFloat(*rateLimit, 64); err != nil || ac.RateLimit < 0 || ac.RateLimit > 1e6 {
		return c, fmt.Errorf("-rate-limit: %q is not a number of mutations per second (0 for no limit)", *rateLimit)
	}
	ac.MaskKeys = splitList(*maskKeys)
	for _, p := range splitList(*platformAdmins) {
		id, err := auth.ParseIdentity(p)
		if err != nil {
			return c, fmt.Errorf("-platform-admins: %w", err)
		}
		ac.PlatformAdmins = append(ac.PlatformAdmins, id)
	}
	// Without authentication whoever reaches the server administers it:
	// it may only be reachable from this machine. Refusing (rather than
	// quietly binding to 127.0.0.1) keeps what was asked and what runs
	// the same: a health check or a proxy pointed at the address asked
	// for fails now, not mysteriously later.
	if ac.Open() && !auth.LoopbackHost(host) {
		return c, fmt.Errorf("-addr: %s is not a loopback address, and no authentication is configured (-token-file, -jwt-hs256-key-file or -jwt-rs256-key-file); an open server listens on 127.0.0.1 or localhost only", c.Addr)
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parsePrefixes reads a comma list of CIDRs and single addresses.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range splitList(s) {
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or a CIDR", part)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func parseRoles(s string) ([]Role, error) {
	var out []Role
	for _, part := range strings.Split(s, ",") {
		switch r := Role(strings.TrimSpace(part)); r {
		case "all":
			out = append(out, RoleAPI, RoleWorker, RoleWatchdog)
		case RoleAPI, RoleWorker, RoleWatchdog:
			out = append(out, r)
		default:
			return nil, fmt.Errorf("-role: %q is not all, api, worker or watchdog", part)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil, errors.New("-role: empty")
	}
	return out, nil
}

// parseSize reads a byte count: a number, optionally with KiB, MiB or GiB.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return 0, errors.New("not a size")
	}
	return n * mult, nil
}

// parseDays reads a Go duration or a number of days such as 7d.
func parseDays(s string) (time.Duration, error) {
	if v, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3650 {
			return 0, errors.New("not a number of days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
