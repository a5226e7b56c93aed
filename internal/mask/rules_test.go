package mask_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/mask"
)

func TestRules(t *testing.T) {
	t.Parallel()
	t.Run("ExtraKeysAndPatternsAreApplied", func(t *testing.T) {
		t.Parallel()
		m, err := mask.New(mask.Rules{
			Keys:     []string{" IBAN "},
			Patterns: []mask.PatternRule{{Name: "employee", Regexp: `\bEMP-\d{6}\b`, KeepHead: 4}, {Name: "plate", Regexp: `\b[A-Z]{2}-\d{4}\b`}},
		})
		require.NoError(t, err)
		out, changed, err := m.JSON(json.RawMessage(`{"payeeIban": "DE89370400440532013000", "note": "EMP-123456 drove AB-1234, call 13812345678"}`))
		require.NoError(t, err)
		require.True(t, changed)
		require.JSONEq(t, `{"payeeIban": "******", "note": "EMP-****** drove ******, call 138****5678"}`, string(out))
	})
	t.Run("BadRulesAreRefused", func(t *testing.T) {
		t.Parallel()
		for _, p := range []mask.PatternRule{{Regexp: `(`}, {Regexp: `a*`}, {Regexp: `x`, KeepHead: -1}} {
			_, err := mask.New(mask.Rules{Patterns: []mask.PatternRule{p}})
			require.Error(t, err, "%+v", p)
		}
	})
	t.Run("ARulesFileWithAnUnknownFieldIsRefused", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
		require.NoError(t, os.WriteFile(good, []byte(`{"keys": ["salary"], "patterns": [{"name": "x", "regexp": "X\\d+"}]}`), 0o600))
		require.NoError(t, os.WriteFile(bad, []byte(`{"key": ["salary"]}`), 0o600))
		r, err := mask.LoadRules(good)
		require.NoError(t, err)
		require.Equal(t, []string{"salary"}, r.Keys)
		_, err = mask.LoadRules(bad)
		require.ErrorContains(t, err, "unknown field")
	})
}

func TestWithValuesOf(t *testing.T) {
	t.Parallel()
	m := mask.Default()
	t.Run("ValuesMaskedByKeyAreMaskedEverywhere", func(t *testing.T) {
		t.Parallel()
		in := json.RawMessage(`{"password": "hunter2-long", "auth": {"token": 98765432}, "nested": {"apiKey": ["k-1", "k-22222"]}, "name": "ok"}`)
		v := m.WithValuesOf(in)
		require.Equal(t, "login with ****** and ******, ******; k-1 is too short to track; ok",
			v.String("login with hunter2-long and 98765432, k-22222; k-1 is too short to track; ok"))
		require.Equal(t, "hunter2-long", m.String("hunter2-long"), "the original masker is unchanged")
	})
	t.Run("NothingToTrackReturnsTheSameMasker", func(t *testing.T) {
		t.Parallel()
		require.Same(t, m, m.WithValuesOf(json.RawMessage(`{"name": "x"}`)))
		require.Same(t, m, m.WithValuesOf(json.RawMessage(`not json`)))
	})
}
