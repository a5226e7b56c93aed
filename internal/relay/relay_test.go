package relay

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/events"
)

func TestEncodeSplitsUnderTheNotificationLimit(t *testing.T) {
	t.Parallel()
	var changes []events.TaskChange
	var logs []*ent.TaskLog
	for i := 1; i <= 2500; i++ {
		changes = append(changes, events.TaskChange{Kind: events.Transitioned, Task: &ent.Task{ID: 1_000_000 + i, Version: int64(i), Status: lifecycle.Executing}})
		logs = append(logs, &ent.TaskLog{ID: 8_589_934_592 + i, TaskID: 1_000_000 + i})
	}
	payloads := encode("node-a", changes, logs)
	require.Greater(t, len(payloads), 1)
	var gotT, gotL int
	for _, p := range payloads {
		require.Less(t, len(p), 8000, "PostgreSQL refuses payloads of 8000 bytes or more")
		m, err := decode(p)
		require.NoError(t, err)
		require.Equal(t, "node-a", m.Node)
		require.True(t, strings.HasPrefix(p, nodePrefix("node-a")), "a node knows its own payloads undecoded")
		require.False(t, strings.HasPrefix(p, nodePrefix("node-")), "nor mistakes another's whose name begins like its own")
		require.False(t, strings.HasPrefix(p, nodePrefix("node-b")))
		for _, x := range m.T {
			c := changes[gotT]
			require.Equal(t, [4]int64{int64(c.Task.ID), c.Task.Version, int64(events.Transitioned), int64(statusIndex(lifecycle.Executing))}, x, "in order")
			gotT++
		}
		for _, x := range m.L {
			require.Equal(t, int64(logs[gotL].ID), x[1])
			gotL++
		}
	}
	require.Equal(t, len(changes), gotT)
	require.Equal(t, len(logs), gotL)
	require.Empty(t, encode("node-a", nil, nil))
}

func TestOwnPayloadsAreKnownByTheWholeNameWhateverItHolds(t *testing.T) {
	t.Parallel()
	change := []events.TaskChange{{Kind: events.Transitioned, Task: &ent.Task{ID: 1, Version: 1, Status: lifecycle.Pending}}}
	for _, node := range []string{`a"b`, `a\b`, "é<>&", "a,b"} {
		p := encode(node, change, nil)[0]
		require.True(t, strings.HasPrefix(p, nodePrefix(node)), p)
		require.False(t, strings.HasPrefix(p, nodePrefix(node[:len(node)-1])), p)
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "{", `{"n":"x","t":[[1,1,2,99]]}`, `{"n":"x","t":[[1,1,2,-1]]}`} {
		_, err := decode(p)
		require.Error(t, err, p)
	}
}
