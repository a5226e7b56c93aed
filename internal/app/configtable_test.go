package app

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigurationTable holds the flag table of docs/configuration.md
// to the flags declareFlags declares: every flag has its row, with its
// environment variable and its default, and the table has no row for a
// flag that does not exist.
func TestConfigurationTable(t *testing.T) {
	t.Parallel()
	const page = "docs/configuration.md"
	b, err := os.ReadFile("../../" + page)
	require.NoError(t, err)
	section := string(b)
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
			t.Errorf("%s: the configuration table has no row for --%s", page, o.name)
			continue
		}
		require.Equal(t, EnvName(o.name), r[0], "--%s's variable", o.name)
		cell := strings.TrimSpace(r[1])
		switch {
		case o.def == "false":
			require.Equal(t, "off", cell, "--%s's default", o.name)
		case o.def == "":
			require.NotRegexp(t, "^`", cell, "--%s has no default value, yet %s shows one", o.name, page)
		default:
			m := value.FindStringSubmatch(cell)
			require.NotNil(t, m, "--%s's default (%s) is missing from %s", o.name, o.def, page)
			require.Equal(t, o.def, m[1], "--%s's default", o.name)
		}
	}
	for name := range rows {
		require.True(t, declared[name], "%s: --%s is in the configuration table but no such flag exists", page, name)
	}
}
