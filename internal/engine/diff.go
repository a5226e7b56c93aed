package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/taskgraph/taskgraph/ent"
)

// Field change kinds.
const (
	ChangeAdded   = "ADDED"
	ChangeRemoved = "REMOVED"
	ChangeChanged = "CHANGED"
)

// FieldChange is one field's change between two input versions. A field
// whose value masking touches, on either side, is Masked: its values are
// left out (nil), only the change is said.
type FieldChange struct {
	Path   string // a JSON Pointer
	Kind   string
	Before json.RawMessage
	After  json.RawMessage
	Masked bool
}

// InputVersion is one input a task ran with, as the API shows it: masked,
// with its change from the version before.
type InputVersion struct {
	Version        int
	Input          json.RawMessage
	Author         string
	Reason         string
	CreatedAt      time.Time
	FromInstanceNo int
	Diff           []FieldChange
}

// InputVersions returns every input task tk ran with, oldest first, each
// with its diff from the one before. The diff is taken between the
// unmasked inputs (opened from their seals), so that a secret changed from
// one value to another counts as changed even though both show as masked;
// what it shows of a value is the masked document's, and nothing of a
// value masking touched.
func (e *Engine) InputVersions(ctx context.Context, tk *ent.Task) ([]InputVersion, error) {
	rows, err := e.store.InputVersions(ctx, tk.ID)
	if err != nil {
		return nil, fmt.Errorf("input versions: %w", err)
	}
	if len(rows) == 0 {
		return []InputVersion{{Version: 1, Input: tk.Input, Author: tk.Owner, CreatedAt: tk.CreatedAt, FromInstanceNo: 1, Diff: []FieldChange{}}}, nil
	}
	out := make([]InputVersion, len(rows))
	var prevMasked, prevPlain any
	for i, r := range rows {
		masked, plain, err := e.decodeVersion(r.Input, r.InputSealed)
		if err != nil {
			return nil, fmt.Errorf("input version %d: %w", r.Version, err)
		}
		v := InputVersion{Version: r.Version, Input: r.Input, Author: r.Author, Reason: r.Reason, CreatedAt: r.CreatedAt, FromInstanceNo: r.FromInstanceNo, Diff: []FieldChange{}}
		if i > 0 {
			v.Diff = Diff(prevMasked, prevPlain, masked, plain)
		}
		out[i] = v
		prevMasked, prevPlain = masked, plain
	}
	return out, nil
}

func (e *Engine) decodeVersion(masked json.RawMessage, sealed []byte) (m, p any, err error) {
	if m, err = decodeJSON(masked); err != nil {
		return nil, nil, err
	}
	if len(sealed) == 0 {
		return m, m, nil
	}
	plain, err := e.sealer.Open(sealed)
	if err != nil {
		// A seal of an older key: compare what is shown, masked fields
		// included (a change between two masked values is then unseen).
		return m, m, nil
	}
	if p, err = decodeJSON(plain); err != nil {
		return nil, nil, err
	}
	return m, p, nil
}

func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// Diff lists, field by field, how the document (masked a, unmasked pa)
// became (masked b, unmasked pb): objects are compared key by key, arrays
// and scalars as wholes, paths sorted. A change to a field masking touches
// on either side is Masked, without its values.
func Diff(a, pa, b, pb any) []FieldChange {
	out := []FieldChange{}
	diffAt("", a, pa, b, pb, &out)
	return out
}

func diffAt(path string, a, pa, b, pb any, out *[]FieldChange) {
	oa, okA := pa.(map[string]any)
	ob, okB := pb.(map[string]any)
	if okA && okB {
		ma, _ := a.(map[string]any)
		mb, _ := b.(map[string]any)
		keys := make([]string, 0, len(oa)+len(ob))
		for k := range oa {
			keys = append(keys, k)
		}
		for k := range ob {
			if _, ok := oa[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := path + "/" + pointerEscape(k)
			va, inA := oa[k]
			vb, inB := ob[k]
			switch {
			case inA && !inB:
				*out = append(*out, change(p, ChangeRemoved, ma[k], va, nil, nil))
			case !inA && inB:
				*out = append(*out, change(p, ChangeAdded, nil, nil, mb[k], vb))
			default:
				diffAt(p, ma[k], va, mb[k], vb, out)
			}
		}
		return
	}
	if reflect.DeepEqual(pa, pb) {
		return
	}
	*out = append(*out, change(path, ChangeChanged, a, pa, b, pb))
}

// change is one change, its values left out when masking touched either.
func change(path, kind string, a, pa, b, pb any) FieldChange {
	c := FieldChange{Path: cmpPath(path), Kind: kind}
	if !reflect.DeepEqual(a, pa) || !reflect.DeepEqual(b, pb) {
		c.Masked = true
		return c
	}
	if kind != ChangeAdded {
		c.Before, _ = json.Marshal(a)
	}
	if kind != ChangeRemoved {
		c.After, _ = json.Marshal(b)
	}
	return c
}

func cmpPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

func pointerEscape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
