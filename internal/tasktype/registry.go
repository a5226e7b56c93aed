package tasktype

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	invjs "github.com/invopop/jsonschema"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Type is a registered kind of task: its name, the schema of its input,
// its defaults, and the handler that runs it.
type Type struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the input, generated from the Go
	// type the handler takes; launch forms are built from it.
	InputSchema json.RawMessage
	// Timeout is the default for tasks that do not set one.
	Timeout time.Duration
	// RetryPolicy is the default policy name.
	RetryPolicy string
	// Concurrency caps the executions of this type running at once on one
	// node (0: only the pool's concurrency applies).
	Concurrency int
	// StallAfter is how long an execution's progress and logs may stand
	// still, while its heartbeats go on, before the watchdog flags it as
	// stalled (0: never). A task may set its own.
	StallAfter time.Duration
	// Internal types are created by the process itself only (alert
	// deliveries): the API neither lists them nor lets a user create one.
	Internal bool
	// StallAction is what follows a flag: StallFlag (the default) only
	// flags, StallCancel also stops the execution as a STALLED error for
	// the retry policy to decide on.
	StallAction StallAction
	// External types are declared through the API (NewExternal) and run
	// by workers outside the process over the worker protocol; the
	// in-process pool never claims them.
	External bool
	// Review, when set, is the type's review policy: which business
	// failures wait for a person (REVIEW_PENDING) instead of ending.
	Review *ReviewPolicy
	// FinishWithin, when set, gives each task of the type that names no
	// deadline of its own the deadline "FinishWithin after it may first
	// run" (its runAt, or its creation): the deadlines loop flags it at
	// risk, then missed, and its finish records met or missed.
	FinishWithin time.Duration

	schema      *jsonschema.Schema
	schemaPatch func(map[string]any)
	decode      func(json.RawMessage) (any, error)
	handle      func(ctx context.Context, job *Job, in any) error
}

// Validate checks an input against the type's schema and its Go type
// (including the type's own Validate method, if any). The error is a
// *InputError listing what is wrong.
func (t *Type) Validate(input json.RawMessage) error {
	_, err := t.Decode(input)
	return err
}

// Decode validates an input as Validate does and returns it as the Go
// value the handler takes, for Handle.
func (t *Type) Decode(input json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage(`{}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return nil, &InputError{Type: t.Name, Problems: []string{"input is not valid JSON: " + err.Error()}}
	}
	return t.decodeDoc(input, doc)
}

// ValidateDoc validates an input as Validate does, given doc, the input
// already decoded as jsonschema.UnmarshalJSON decodes it (encoding/json
// with UseNumber, nothing after the value): a caller that needs the
// decoded input anyway decodes it once.
func (t *Type) ValidateDoc(input json.RawMessage, doc any) error {
	_, err := t.decodeDoc(input, doc)
	return err
}

func (t *Type) decodeDoc(input json.RawMessage, doc any) (any, error) {
	if err := t.schema.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, &InputError{Type: t.Name, Problems: schemaProblems(ve)}
		}
		return nil, &InputError{Type: t.Name, Problems: []string{err.Error()}}
	}
	v, err := t.decode(input)
	if err != nil {
		return nil, &InputError{Type: t.Name, Problems: []string{err.Error()}}
	}
	return v, nil
}

// DecodeAccepted returns an input the type accepted when its task was
// created (Decode, in the engine's create) as the Go value the handler
// takes: decoded into the handler's type, unknown fields refused, and the
// type's Validate method called, but not validated against the JSON
// Schema again: the schema is reflected from that same Go type, and the
// stored input does not change between executions. Validating it at every
// execution cost a tenth of a worker's CPU (the validator's allocations
// and deep recursion). Of a type that changed since the task was created,
// the decode still refuses a field renamed, removed or retyped; what it
// no longer refuses is an input that misses a field made required since,
// or breaks a bound tightened since: a handler that must be sure of those
// checks them in its Validate method.
func (t *Type) DecodeAccepted(input json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage(`{}`)
	}
	v, err := t.decode(input)
	if err != nil {
		return nil, &InputError{Type: t.Name, Problems: []string{err.Error()}}
	}
	return v, nil
}

// Handle runs the type's handler on in, a value Decode or DecodeAccepted
// returned.
func (t *Type) Handle(ctx context.Context, job *Job, in any) error {
	return t.handle(ctx, job, in)
}

// InputError is an input that a task type refuses.
type InputError struct {
	Type     string
	Problems []string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("invalid input for task type %q: %s", e.Type, strings.Join(e.Problems, "; "))
}

func schemaProblems(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			out = append(out, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(englishPrinter)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(out)
	return out
}

var englishPrinter = message.NewPrinter(language.English)

// Validator is implemented by inputs that check more than their schema says.
type Validator interface{ Validate() error }

// Option configures a registered type.
type Option func(*Type)

// WithDescription sets a type's description.
func WithDescription(d string) Option { return func(t *Type) { t.Description = d } }

// WithTimeout sets a type's default timeout.
func WithTimeout(d time.Duration) Option { return func(t *Type) { t.Timeout = d } }

// MaxFinishWithin is the longest default deadline a type may give.
const MaxFinishWithin = 366 * 24 * time.Hour

// WithFinishWithin gives a type's tasks a default deadline (see
// Type.FinishWithin).
func WithFinishWithin(d time.Duration) Option { return func(t *Type) { t.FinishWithin = d } }

// WithRetryPolicy sets a type's default retry policy.
func WithRetryPolicy(name string) Option { return func(t *Type) { t.RetryPolicy = name } }

// StallAction is what follows when an execution of a type stalls.
type StallAction string

// Stall actions.
const (
	// StallFlag marks the execution (stalledAt) and alerts; it runs on.
	StallFlag StallAction = "FLAG"
	// StallCancel marks it and stops it: its handler's context is
	// cancelled and the execution ends FAILED with error kind STALLED;
	// the retry policy decides what follows. The next attempt starts only
	// once the handler has returned, so the task never runs twice at once.
	StallCancel StallAction = "CANCEL"
)

// WithStallDetection flags executions whose progress and logs stand still
// for after (see Type.StallAfter) and, with StallCancel, stops them.
func WithStallDetection(after time.Duration, action StallAction) Option {
	return func(t *Type) { t.StallAfter, t.StallAction = after, action }
}

// Internal marks a type the process alone creates (see Type.Internal).
func Internal() Option { return func(t *Type) { t.Internal = true } }

// WithConcurrency caps a type's parallel executions per node.
func WithConcurrency(n int) Option { return func(t *Type) { t.Concurrency = n } }

// Registry holds the registered task types.
type Registry struct {
	mu    sync.RWMutex
	types map[string]*Type
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: make(map[string]*Type)} }

var typeName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,62}$`)

// Register adds a task type whose handler takes a typed input In, decoded
// from the task's JSON input (unknown fields are refused) and validated
// against the schema generated from In. It panics on a bad or duplicate
// name, like http.Handle: registration is program structure.
func Register[In any](r *Registry, name string, handle func(ctx context.Context, job *Job, in In) error, opts ...Option) *Type {
	t, err := New(name, handle, opts...)
	if err == nil {
		err = r.Add(t)
	}
	if err != nil {
		panic(err.Error())
	}
	return t
}

// New returns a task type as Register registers it, or an error naming
// what is wrong with its name or its input type's schema.
func New[In any](name string, handle func(ctx context.Context, job *Job, in In) error, opts ...Option) (*Type, error) {
	if !typeName.MatchString(name) {
		return nil, fmt.Errorf("tasktype: task type name %q must match %s", name, typeName)
	}
	t := &Type{
		Name:        name,
		Timeout:     5 * time.Minute,
		RetryPolicy: DefaultPolicyName,
		decode: func(input json.RawMessage) (any, error) {
			var in In
			dec := json.NewDecoder(bytes.NewReader(input))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				return nil, err
			}
			if v, ok := any(&in).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, err
				}
			}
			return in, nil
		},
		handle: func(ctx context.Context, job *Job, in any) error {
			return handle(ctx, job, in.(In))
		},
	}
	for _, o := range opts {
		o(t)
	}
	if t.StallAction == "" {
		t.StallAction = StallFlag
	}
	if t.FinishWithin < 0 || t.FinishWithin > MaxFinishWithin {
		return nil, fmt.Errorf("tasktype: %q: FinishWithin %s must be between 0 and %s", name, t.FinishWithin, MaxFinishWithin)
	}
	ref := invjs.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}
	var zero In
	sch := ref.ReflectFromType(reflect.TypeOf(zero))
	sch.Version = ""
	raw, err := json.Marshal(sch)
	if err != nil {
		return nil, fmt.Errorf("tasktype: schema of %q: %v", name, err)
	}
	if t.schemaPatch != nil {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("tasktype: schema of %q: %v", name, err)
		}
		t.schemaPatch(m)
		if raw, err = json.Marshal(m); err != nil {
			return nil, fmt.Errorf("tasktype: schema of %q: %v", name, err)
		}
	}
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tasktype: schema of %q: %v", name, err)
	}
	url := "mem://taskgraph/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tasktype: schema of %q: %v", name, err)
	}
	if t.schema, err = c.Compile(url); err != nil {
		return nil, fmt.Errorf("tasktype: schema of %q: %v", name, err)
	}
	t.InputSchema = raw
	return t, nil
}

// WithSchemaPatch changes the JSON Schema reflected from a type's input
// before it is compiled: an enum of names known only at run time (the
// export's sources), say. patch gets the schema as decoded JSON.
func WithSchemaPatch(patch func(schema map[string]any)) Option {
	return func(t *Type) { t.schemaPatch = patch }
}

// ErrDuplicate is matched by errors.Is for the error of Add when a type
// of the same name is registered already.
var ErrDuplicate = errors.New("registered twice")

// Add registers t, unless a type of its name is registered already.
func (r *Registry) Add(t *Type) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.types[t.Name]; dup {
		return fmt.Errorf("tasktype: task type %q %w", t.Name, ErrDuplicate)
	}
	r.types[t.Name] = t
	return nil
}

// Replace registers t in the place of the type of its name, registered or
// not (a type whose schema changed: the export's, when a source is added).
func (r *Registry) Replace(t *Type) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.types[t.Name] = t
}

// Lookup returns a registered type.
func (r *Registry) Lookup(name string) (*Type, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[name]
	return t, ok
}

// Types returns every registered type, by name.
func (r *Registry) Types() []*Type {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Type, 0, len(r.types))
	for _, t := range r.types {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the registered type names.
func (r *Registry) Names() []string {
	ts := r.Types()
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// PublicNames returns the names of the types users may create (not
// Internal).
func (r *Registry) PublicNames() []string {
	var out []string
	for _, t := range r.Types() {
		if !t.Internal {
			out = append(out, t.Name)
		}
	}
	return out
}
