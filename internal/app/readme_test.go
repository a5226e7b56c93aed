package app

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEConfigurationTable holds the README's configuration table to
// the flags declareFlags declares: every flag has its row, with its
// environment variable and its default, and the table has no row for a
// flag that does not exist.
func TestREADMEConfigurationTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	start := strings.Index(readme, "\n## Configuration\n")
	require.GreaterOrEqual(t, start, 0, "README has a Configuration section")
	section := readme[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| `([A-Z0-9_]+)` \\| *([^|]*?) *\\|")
	rows := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		rows[m[1]] = m[2:]
	}
	var c Config
	f := declareFlags(&c, func(string) string { return "" })
	declared := map[string]bool{}
	value := regexp.MustCompile("`([^`]*)`")
	for _, o := range f.options {
		declared[o.name] = true
		r, ok := rows[o.name]
		if !ok {
			t.Errorf("README: the configuration table has no row for --%s", o.name)
			continue
		}
		require.Equal(t, EnvName(o.name), r[0], "--%s's variable", o.name)
		cell := strings.TrimSpace(r[1])
		switch {
		case o.def == "false":
			require.Equal(t, "off", cell, "--%s's default", o.name)
		case o.def == "":
			require.NotRegexp(t, "^`", cell, "--%s has no default value, yet the README shows one", o.name)
		default:
			m := value.FindStringSubmatch(cell)
			require.NotNil(t, m, "--%s's default (%s) is missing from the README", o.name, o.def)
			require.Equal(t, o.def, m[1], "--%s's default", o.name)
		}
	}
	for name := range rows {
		require.True(t, declared[name], "README: --%s is in the configuration table but no such flag exists", name)
	}
}
