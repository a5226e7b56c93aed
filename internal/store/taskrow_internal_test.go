package store

import (
	"slices"
	"testing"

	"github.com/taskgraph/taskgraph/ent/schema"
)

// TestChangingColumnsAreTheMutableOnes holds changingTaskColumns to the
// schema: a field that may change after the insert and is missing from the
// list would be published stale by every finish.
func TestChangingColumnsAreTheMutableOnes(t *testing.T) {
	fields := schema.Task{}.Fields()
	for _, m := range (schema.Task{}).Mixin() {
		fields = append(fields, m.Fields()...)
	}
	for _, f := range fields {
		d := f.Descriptor()
		if slices.Contains(editedTaskColumns, d.Name) {
			if d.Immutable {
				t.Errorf("field %q is immutable, but edits write it", d.Name)
			}
			continue
		}
		if d.Immutable == slices.Contains(changingTaskColumns, d.Name) {
			t.Errorf("field %q: immutable=%v, but it is %s changingTaskColumns", d.Name, d.Immutable, map[bool]string{true: "in", false: "not in"}[!d.Immutable])
		}
	}
}
