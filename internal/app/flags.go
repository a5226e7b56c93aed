package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Flags declares typed command-line flags, each with an environment twin
// (TASKGRAPH_ and the flag's name in capitals with - as _). A flag given on
// the command line wins over its variable; a variable wins over the
// default. Every error names the flag or the variable, the value, and the
// shape it should have: `--workers: "many" is not a number between 1 and
// 10000`.
//
// A new flag is one line in ParseFlags:
//
//	f.Int(&c.Workers, "workers", worker.ConcurrencyDefault, 1, 10000, "handlers running at once in this process")
type Flags struct {
	fs      *flag.FlagSet
	getenv  func(string) string
	options []*option
}

// option is one declared flag.
type option struct {
	name  string
	typ   string // shown in the usage: int, duration, size...
	usage string
	def   string
	// secret keeps the value out of error messages.
	secret bool
	value  flag.Value
	err    error // the last Set's error, phrased for the user
	from   string
	// raw is the text it was last set from (GivenSettings).
	raw string
}

// NewFlags starts a set of flags for the program name, reading
// environment variables with getenv.
func NewFlags(name string, getenv func(string) string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Parse's own messages and usage are replaced by Parse's errors and
	// PrintUsage: the usage is printed once, on -h.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Flags{fs: fs, getenv: getenv}
}

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return "TASKGRAPH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// typed is a flag.Value of a Go type: parse turns text into a T or says
// what the text is not ("not a number between 1 and 10"); show prints one.
type typed[T any] struct {
	p      *T
	parse  func(string) (T, error)
	show   func(T) string
	isBool bool
}

func (v *typed[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *typed[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return v.show(*v.p)
}

func (v *typed[T]) IsBoolFlag() bool { return v.isBool }

// Var declares a flag of any type: parse reads the text (its error says
// what the text is not, e.g. "not all, api, worker or watchdog"), show
// prints a value, typ names the shape in the usage. The default is def.
func Var[T any](f *Flags, p *T, name string, def T, typ, usage string, parse func(string) (T, error), show func(T) string) {
	*p = def
	v := &typed[T]{p: p, parse: parse, show: show}
	f.add(name, typ, usage, show(def), v)
}

func (f *Flags) add(name, typ, usage, def string, v flag.Value) *option {
	o := &option{name: name, typ: typ, usage: usage, def: def, value: v}
	f.options = append(f.options, o)
	f.fs.Var(recording{o}, name, usage)
	return o
}

// recording keeps a Set's error, phrased for the user, on its option.
type recording struct{ o *option }

func (r recording) String() string {
	if r.o == nil {
		return ""
	}
	return r.o.value.String()
}

func (r recording) IsBoolFlag() bool {
	b, ok := r.o.value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (r recording) Set(s string) error {
	err := r.o.value.Set(s)
	if err != nil {
		r.o.err = r.o.fail(r.o.from, s, err)
	}
	r.o.raw = s
	return err
}

// fail phrases a bad value: `--workers: "many" is not a number...`.
func (o *option) fail(from, value string, err error) error {
	if o.secret {
		return fmt.Errorf("%s: the value given (%d characters) is %v", from, len(value), err)
	}
	return fmt.Errorf("%s: %q is %v", from, value, err)
}

// String declares a text flag.
func (f *Flags) String(p *string, name, def, usage string) {
	Var(f, p, name, def, "string", usage, func(s string) (string, error) { return s, nil }, func(s string) string { return s })
}

// Secret declares a text flag whose value never appears in messages;
// check says what a value is not (or nil).
func (f *Flags) Secret(p *string, name, usage string, check func(string) error) {
	*p = ""
	v := &typed[string]{p: p, show: func(string) string { return "" }, parse: func(s string) (string, error) {
		if check != nil && s != "" {
			if err := check(s); err != nil {
				return "", err
			}
		}
		return s, nil
	}}
	f.add(name, "string", usage, "", v).secret = true
}

// Bool declares a switch: --name alone turns it on, --name=false off.
func (f *Flags) Bool(p *bool, name string, def bool, usage string) {
	*p = def
	v := &typed[bool]{p: p, isBool: true, show: strconv.FormatBool, parse: func(s string) (bool, error) {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, errors.New("not true or false")
		}
		return b, nil
	}}
	f.add(name, "", usage, strconv.FormatBool(def), v)
}

// Int declares a whole number between min and max.
func (f *Flags) Int(p *int, name string, def, min, max int, usage string) {
	Var(f, p, name, def, "int", usage, func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < min || n > max {
			return 0, fmt.Errorf("not a whole number between %d and %d", min, max)
		}
		return n, nil
	}, strconv.Itoa)
}

// Float declares a number between min and max.
func (f *Flags) Float(p *float64, name string, def, min, max float64, usage string) {
	Var(f, p, name, def, "number", usage, func(s string) (float64, error) {
		n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || n < min || n > max {
			return 0, fmt.Errorf("not a number between %g and %g", min, max)
		}
		return n, nil
	}, func(n float64) string { return strconv.FormatFloat(n, 'g', -1, 64) })
}

// Duration declares a duration between min and max (max 0: no upper
// bound), written as Go writes them (90s, 10m, 1h30m) or in days (7d).
func (f *Flags) Duration(p *time.Duration, name string, def, min, max time.Duration, usage string) {
	shape := "a duration such as 30s, 10m, 72h or 7d"
	switch {
	case max > 0:
		shape += fmt.Sprintf(", between %s and %s", FormatDuration(min), FormatDuration(max))
	case min > 0:
		shape += ", of at least " + FormatDuration(min)
	}
	Var(f, p, name, def, "duration", usage, func(s string) (time.Duration, error) {
		d, err := ParseDuration(s)
		if err != nil || d < min || (max > 0 && d > max) {
			return 0, errors.New("not " + shape)
		}
		return d, nil
	}, FormatDuration)
}

// Size declares a byte count of at least min: a number, or one with KiB,
// MiB, GiB (or KB, MB, GB).
func (f *Flags) Size(p *int64, name string, def, min int64, usage string) {
	shape := "a size such as 512KiB, 50MiB or 1GiB"
	if min > 1 {
		shape += ", of at least " + FormatSize(min)
	}
	Var(f, p, name, def, "size", usage, func(s string) (int64, error) {
		n, err := ParseSize(s)
		if err != nil || n < min {
			return 0, errors.New("not " + shape)
		}
		return n, nil
	}, FormatSize)
}

// List declares a comma-separated list; check (optional) says what one
// item is not.
func (f *Flags) List(p *[]string, name, usage string, check func(string) error) {
	Var(f, p, name, nil, "list", usage, func(s string) ([]string, error) {
		items := splitList(s)
		for _, it := range items {
			if check != nil {
				if err := check(it); err != nil {
					return nil, fmt.Errorf("a list whose item %q is %v", it, err)
				}
			}
		}
		return items, nil
	}, func(l []string) string { return strings.Join(l, ",") })
}

// Parse reads args, then the environment twins of the flags args did not
// set. flag.ErrHelp means -h (or --help) was asked for.
func (f *Flags) Parse(args []string) error {
	for _, o := range f.options {
		o.from = "--" + o.name
	}
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		for _, o := range f.options {
			if o.err != nil {
				return o.err
			}
		}
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
			return fmt.Errorf("--%s: no such flag (taskgraph -h lists them)", strings.TrimLeft(name, "-"))
		}
		if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
			return fmt.Errorf("%s: needs a value", name)
		}
		return err
	}
	if rest := f.fs.Args(); len(rest) > 0 {
		// A value after a switch (--playground false) ends the flags.
		if i := len(args) - len(rest); i > 0 {
			if o := f.option(args[i-1]); o != nil && o.typ == "" {
				return fmt.Errorf("unexpected argument %q after %s, a switch that needs no value: write %s=true or %s=false", rest[0], args[i-1], args[i-1], args[i-1])
			}
		}
		return fmt.Errorf("unexpected argument %q (the server takes only flags; taskgraph -h lists the commands)", rest[0])
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, o := range f.options {
		env := EnvName(o.name)
		if given[o.name] || f.getenv(env) == "" {
			continue
		}
		o.from, o.raw = env, f.getenv(env)
		if err := o.value.Set(f.getenv(env)); err != nil {
			return o.fail(env, f.getenv(env), err)
		}
	}
	return nil
}

// option finds the option an argument such as --name or -name sets.
func (f *Flags) option(arg string) *option {
	name := strings.TrimLeft(arg, "-")
	for _, o := range f.options {
		if o.name == name && strings.HasPrefix(arg, "-") {
			return o
		}
	}
	return nil
}

// PrintDefaults writes one entry per flag: its name and shape, what it is
// for, its default and its variable.
func (f *Flags) PrintDefaults(w io.Writer) {
	for _, o := range f.options {
		head := "  --" + o.name
		if o.typ != "" {
			head += " " + o.typ
		}
		tail := ""
		if o.def != "" && o.def != "false" && !o.secret {
			tail = " (default " + o.def + ")"
		}
		fmt.Fprintf(w, "%s\n      %s%s [$%s]\n", head, o.usage, tail, EnvName(o.name))
	}
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

var sizeUnits = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1000 * 1000 * 1000}, {"MB", 1000 * 1000}, {"KB", 1000}, {"B", 1}}

// ParseSize reads a byte count: a number, optionally with KiB, MiB, GiB,
// KB, MB or GB.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
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

// FormatSize writes n in the largest binary unit that divides it.
func FormatSize(n int64) string {
	for _, u := range sizeUnits[:3] {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseDuration reads a Go duration (90s, 1h30m), a number of days (7d)
// or 0.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, ok := strings.CutSuffix(s, "d"); ok {
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

// FormatDuration writes whole days as 7d and drops Go's zero tails
// (10m, not 10m0s).
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.Itoa(int(d/day)) + "d"
	}
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
