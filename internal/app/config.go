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
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/nodes"
	"github.com/taskgraph/taskgraph/internal/seal"
	"github.com/taskgraph/taskgraph/worker"
)

// Config is everything a taskgraph process is told at start. Each field
// has a flag and an environment variable (TASKGRAPH_ and the flag's name in
// upper case with - as _); a flag given on the command line wins.
type Config struct {
	Addr             string
	DB               string
	DataDir          string
	Migrate          bool // apply the database's pending schema migrations at start
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
	// NodeRefresh is how often this node refreshes its row in the
	// cluster's registry; NodeLease how long one refresh holds (0: three
	// refreshes) before the node shows GONE.
	NodeRefresh time.Duration
	NodeLease   time.Duration
	// ClockSkew is the offset between this node's wall clock and the
	// database's past which the node says so (log, /readyz, Nodes page,
	// the CLOCK_SKEW alert).
	ClockSkew time.Duration
	// MinScheduleInterval is the deployment's floor on how often a
	// schedule fires (its interval, or its cron's shortest gap), for
	// tenants whose quota sets none (0: none).
	MinScheduleInterval time.Duration
}

// AccessConfig is who may use the server and how hard it is to abuse
// (docs/access.md). With no TokenFile and no JWT key the server is open:
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

// Command is a subcommand of the taskgraph binary, listed by -h.
type Command struct {
	Name    string
	Summary string
}

// ParseFlags reads the command line and the environment (getenv). On -h it
// writes the usage to usage and returns flag.ErrHelp.
func ParseFlags(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	return parseFlags(args, getenv, usage, nil)
}

// ParseSettings reads server settings by flag name, without the dashes
// ("retention": "720h"), as the command line gives them, on top of the
// environment (getenv; nil reads none): the server's defaults for the
// rest, every value checked as the server checks its flags. It is how an
// embedding program configures a node like the server.
func ParseSettings(settings map[string]string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	args := make([]string, len(names))
	for i, name := range names {
		if strings.HasPrefix(name, "-") {
			return Config{}, fmt.Errorf("setting %q: name it without dashes (%s)", name, strings.TrimLeft(name, "-"))
		}
		args[i] = "--" + name + "=" + settings[name]
	}
	return parseFlags(args, getenv, io.Discard, nil)
}

// GivenSettings reads the command line and the environment as ParseFlags
// does, and returns what they set, by flag name: the settings
// ParseSettings turns into the same Config.
func GivenSettings(args []string, getenv func(string) string) (map[string]string, error) {
	var c Config
	f := declareFlags(&c, getenv)
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	given := map[string]string{}
	for _, o := range f.options {
		if set[o.name] || getenv(EnvName(o.name)) != "" {
			given[o.name] = o.raw
		}
	}
	return given, nil
}

func parseFlags(args []string, getenv func(string) string, usage io.Writer, commands []Command) (Config, error) {
	var c Config
	f := declareFlags(&c, getenv)
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usage, f, commands)
		}
		return c, err
	}
	return c, c.check()
}

// declareFlags declares every server flag, one line each, into c.
func declareFlags(c *Config, getenv func(string) string) *Flags {
	f := NewFlags("taskgraph", getenv)
	Var(f, &c.Addr, "addr", "127.0.0.1:8080", "host:port", "address to listen on", parseAddr, str)
	DatabaseFlags(f, c)
	f.Bool(&c.Migrate, "migrate", false, "apply the database's pending schema migrations at start (without it, a node refuses a database that needs them: taskgraph migrate up applies them)")
	f.Int(&c.Workers, "workers", worker.ConcurrencyDefault, 1, 10000, "handlers running at once in this process (worker role)")
	Var(f, &c.Roles, "role", allRoles, "roles", "what this process does: all, or a comma list of api, worker, watchdog", parseRoles, showRoles)
	f.Secret(&c.SecretKey, "secret-key", "64 hex characters encrypting sensitive input (default: a key file in the data directory; nodes sharing a database must share it)", checkSecretKey)
	Var(f, &c.LogLevel, "log-level", slog.LevelInfo, "level", "debug, info, warn or error", parseLevel, showLevel)
	Var(f, &c.LogFormat, "log-format", "text", "format", "text or json", parseLogFormat, str)
	f.Duration(&c.ShutdownGrace, "shutdown-grace", worker.ShutdownGraceDefault, 0, 0, "how long running tasks may finish at shutdown before they are interrupted")
	f.Duration(&c.HeartbeatTimeout, "heartbeat-timeout", worker.HeartbeatTimeoutDefault, 3*time.Second, 0, "how long an execution may go without a heartbeat before the watchdog recovers it")
	f.Bool(&c.Playground, "playground", false, "serve GraphiQL at /playground and allow introspection")
	f.Duration(&c.Retention, "retention", 0, 0, 0, "purge finished tasks older than this, e.g. 30d or 720h (0: keep forever)")
	ac := &c.Access
	f.String(&ac.TokenFile, "token-file", "", "file of hashed bearer tokens, a line each: <sha256-hex> <user> <role> [tenant] (taskgraph token makes them)")
	f.String(&ac.JWTHS256KeyFile, "jwt-hs256-key-file", "", "file holding the HS256 secret JWTs are signed with (32 bytes or more)")
	f.String(&ac.JWTRS256KeyFile, "jwt-rs256-key-file", "", "PEM public key RS256 JWTs are verified with")
	f.String(&ac.JWTIssuer, "jwt-issuer", "", "required iss of JWTs")
	f.String(&ac.JWTAudience, "jwt-audience", "", "required aud of JWTs")
	f.Duration(&ac.JWTLeeway, "jwt-leeway", 30*time.Second, 0, 10*time.Minute, "clock skew tolerated on a JWT's exp, nbf and iat")
	f.String(&ac.JWTUserClaim, "jwt-user-claim", "sub", "JWT claim naming the user")
	f.String(&ac.JWTRoleClaim, "jwt-role-claim", "role", "JWT claim holding the role: admin, operator or viewer")
	f.String(&ac.JWTTenantClaim, "jwt-tenant-claim", "tenant", "JWT claim holding the tenant (optional)")
	Var(f, &ac.PlatformAdmins, "platform-admins", nil, "list", "comma list of admins who administer every tenant: token:<user>, jwt:<user>, or <source>:<tenant>:<user> for a user of a named tenant", parseIdentities, showIdentities)
	Var(f, &ac.TrustedProxies, "trusted-proxies", nil, "list", "comma list of addresses or CIDRs of reverse proxies whose X-Forwarded-For is believed", parsePrefixes, showPrefixes)
	f.List(&ac.AllowedOrigins, "allowed-origins", "comma list of foreign origins (https://console.example.com) whose pages may call the API; same-origin pages and non-browser clients always may", checkOrigin)
	f.Int(&ac.ComplexityLimit, "gql-complexity", 20000, 100, 10_000_000, "largest cost of a GraphQL operation (each aliased field counts)")
	f.Int(&ac.MaxDepth, "gql-depth", 15, 3, 100, "deepest GraphQL operation")
	f.Int(&ac.WSMaxSubs, "ws-max-subscriptions", 50, 1, 10000, "operations one websocket may run at once")
	f.Int(&ac.WSMaxConnections, "ws-max-connections", 20, 1, 10000, "websockets one user may have open")
	f.Float(&ac.RateLimit, "rate-limit", 10, 0, 1e6, "mutations per second each user may sustain (a bulk action counts one per id); 0 turns the limit off")
	f.Int(&ac.RateBurst, "rate-burst", 100, 1, 1_000_000, "mutations a user may make at once before --rate-limit applies")
	f.List(&ac.MaskKeys, "mask-keys", "comma list of extra JSON key names (case-insensitive substrings) whose values are masked", nil)
	f.String(&ac.MaskFile, "mask-file", "", "JSON file of extra masking rules by key and by pattern (docs/access.md)")
	f.Size(&c.MaxUploadSize, "max-upload-size", 50<<20, 1, "largest file importFile accepts")
	f.Int(&c.ImportMaxRows, "import-max-rows", 1_000_000, 1, 1<<31-1, "most data rows an imported file may have")
	f.Size(&c.ImportUnzipLimit, "import-unzip-limit", 1<<30, 1<<20, "most an imported xlsx may unpack to")
	f.Duration(&c.ArtifactTTL, "artifact-ttl", 7*24*time.Hour, time.Minute, 0, "how long uploaded files, error reports and exports are kept")
	f.Duration(&c.JanitorInterval, "janitor-interval", 10*time.Minute, time.Second, 0, "how often expired artifacts are removed (watchdog role)")
	f.Duration(&c.AlertInterval, "alert-interval", 2*time.Second, 100*time.Millisecond, time.Hour, "how often the alert evaluator checks stalls, backlogs and the watchdog's leader, and sends notices held back by a quiet period (task failures are handled as they come)")
	f.Duration(&c.NodeRefresh, "node-refresh", nodes.RefreshDefault, 100*time.Millisecond, time.Hour, "how often this node refreshes its row in the cluster's node registry (console: Nodes)")
	f.Duration(&c.NodeLease, "node-lease", 0, 0, 0, "how long a node may go without refreshing its row before it shows GONE (default: three refreshes)")
	f.Duration(&c.MinScheduleInterval, "min-schedule-interval", 10*time.Second, 0, 366*24*time.Hour, "the shortest interval (or a cron's shortest gap between two fires) a schedule may have: one created, edited or resumed below it is refused with QUOTA_EXCEEDED, unless its tenant's quota sets a floor of its own (setTenantQuota); 0: none")
	f.Duration(&c.ClockSkew, "clock-skew-threshold", nodes.SkewThresholdDefault, time.Millisecond, 0, "how far this node's wall clock may be from the database's before the node says so (log, /readyz, Nodes page); the cluster runs on the database's clock either way")
	Var(f, &c.BlobURL, "blob-url", "", "url", "where uploads, error reports and exports live, the same on every node: file:///srv/taskgraph/files (a directory every node mounts) or s3://bucket?endpoint=...&region=... (default: the artifacts directory in the data directory, for one node)", parseBlobURL, str)
	Var(f, &c.Network.PublicURL, "public-url", "", "url", "scheme and host clients reach this server by (https://tasks.example.com); download links are built from it (default: http://<addr>)", parsePublicURL, str)
	Var(f, &c.Network.MetricsAddr, "metrics-addr", "", "host:port", "serve /metrics on this address of its own, without authentication (default: on --addr, with authentication)", parseOptionalAddr, str)
	f.List(&c.Network.OutboundAllow, "outbound-allow", "comma list of non-public destinations webhooks may call: loopback, private, link-local..., addresses, CIDRs, host names, *.example.com (default: public addresses only; loopback too on an open server)", checkOutboundRule)
	return f
}

// DatabaseFlags declares --db and --data-dir into c as the server declares
// them (the same checks, defaults and environment twins), for commands that
// open the server's database (taskgraph migrate): c.DSN() is then the
// database the server would open.
func DatabaseFlags(f *Flags, c *Config) {
	Var(f, &c.DB, "db", "", "database", "a PostgreSQL URL (postgres://user@host:5432/name) or key=value DSN (host=... dbname=...), or a SQLite file path or file: URL (default: taskgraph.db in the data directory)", parseDB, str)
	f.String(&c.DataDir, "data-dir", "./data", "directory for the SQLite file, the secret key and artifacts")
}

// check validates what no single flag can: combinations.
func (c Config) check() error {
	host, _, _ := net.SplitHostPort(c.Addr)
	// Without authentication whoever reaches the server administers it:
	// it may only be reachable from this machine. Refusing (rather than
	// quietly binding to 127.0.0.1) keeps what was asked and what runs
	// the same: a health check or a proxy pointed at the address asked
	// for fails now, not mysteriously later.
	if c.Access.Open() && !auth.LoopbackHost(host) {
		return fmt.Errorf("--addr: %s is not a loopback address, and no authentication is configured (--token-file, --jwt-hs256-key-file or --jwt-rs256-key-file); an open server listens on 127.0.0.1 or localhost only", c.Addr)
	}
	if c.NodeLease != 0 && c.NodeLease <= c.NodeRefresh {
		return fmt.Errorf("--node-lease: %s must be longer than --node-refresh (%s)", c.NodeLease, c.NodeRefresh)
	}
	return c.checkNetwork()
}

// parseBlobURL reads --blob-url: file:///dir or s3://bucket?..., or empty.
func parseBlobURL(s string) (string, error) {
	if s != "" && !strings.HasPrefix(s, "file://") && !strings.HasPrefix(s, "s3://") {
		return "", errors.New("not file:///dir or s3://bucket?...")
	}
	return s, nil
}

// parseIdentities reads --platform-admins: a comma list of identities.
func parseIdentities(s string) ([]auth.Identity, error) {
	var out []auth.Identity
	for _, p := range splitList(s) {
		id, err := auth.ParseIdentity(p)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

func showIdentities(ids []auth.Identity) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id.String()
	}
	return strings.Join(parts, ",")
}

// printUsage is -h: how to run the server, the commands, the flags.
func printUsage(w io.Writer, f *Flags, commands []Command) {
	fmt.Fprint(w, `taskgraph serves the task engine: GraphQL at /query, the console at /, workers
and the watchdog, on an embedded SQLite file unless --db names PostgreSQL.

Usage:
  taskgraph [flags]               serve
`)
	if len(commands) > 0 {
		fmt.Fprint(w, "  taskgraph COMMAND [args]        run a command (taskgraph COMMAND -h for its flags)\n\nCommands:\n")
		width := 0
		for _, c := range commands {
			width = max(width, len(c.Name))
		}
		for _, c := range commands {
			fmt.Fprintf(w, "  %-*s  %s\n", width, c.Name, c.Summary)
		}
	}
	fmt.Fprint(w, "\nFlags (each also read from its environment variable, shown in brackets; a flag wins):\n")
	f.PrintDefaults(w)
}

func str(s string) string { return s }

func parseAddr(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", errors.New("not host:port (such as 127.0.0.1:8080 or 0.0.0.0:8080)")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("not host:port: the port %q is not a number from 0 to 65535", port)
	}
	_ = host
	return s, nil
}

func checkSecretKey(s string) error {
	if _, err := seal.ParseKey(s); err != nil {
		return errors.New("not 64 hex characters (openssl rand -hex 32 makes one)")
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, errors.New("not debug, info, warn or error")
	}
	return l, nil
}

func showLevel(l slog.Level) string { return strings.ToLower(l.String()) }

func parseLogFormat(s string) (string, error) {
	if s != "text" && s != "json" {
		return "", errors.New("not text or json")
	}
	return s, nil
}

func checkOrigin(o string) error {
	if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return errors.New("not an origin such as https://console.example.com")
	}
	return nil
}

var allRoles = []Role{RoleAPI, RoleWatchdog, RoleWorker}

func showRoles(rs []Role) string {
	if slices.Equal(rs, allRoles) {
		return "all"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ",")
}

func showPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
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
			return nil, fmt.Errorf("not a list of addresses or CIDRs (such as 10.0.0.0/8, 192.0.2.1): %q is neither", part)
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
			return nil, fmt.Errorf("not all, or a comma list of api, worker, watchdog (%q is none of them)", strings.TrimSpace(part))
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil, errors.New("not all, or a comma list of api, worker, watchdog")
	}
	return out, nil
}
