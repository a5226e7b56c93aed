package main

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	// mdLink is an inline link or image, [text](target "title"); its
	// text may span lines.
	mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
)

// prose returns a page without its fenced blocks and inline code (each
// replaced by blanks of the same shape, so that line numbers hold).
func prose(page string) string {
	return codeSpan.ReplaceAllStringFunc(withoutFences(page), func(s string) string {
		return strings.Repeat(" ", len(s))
	})
}

// withoutFences returns a page with the lines of its fenced blocks empty.
func withoutFences(page string) string {
	lines := strings.Split(page, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// anchors returns the anchors GitHub gives a page's headings: the
// heading's text in lower case, without its punctuation, spaces as
// hyphens; a repeated one gets -1, -2...
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(withoutFences(page), "\n") {
		h := strings.TrimLeft(l, "#")
		if len(h) == len(l) || len(l)-len(h) > 6 || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.ReplaceAll(h, "`", ""))) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// linkProblems returns what is wrong with the relative links of a page
// named by its path from the module's root: a link to a file or
// directory that does not exist, or to an anchor its markdown page does
// not have. exists says whether a path from the root exists; read
// returns a markdown page's text.
func linkProblems(name, text string, exists func(string) bool, read func(string) (string, bool)) []string {
	var out []string
	clean := prose(text)
	for _, m := range mdLink.FindAllStringSubmatchIndex(clean, -1) {
		target := clean[m[4]:m[5]]
		line := 1 + strings.Count(clean[:m[0]], "\n")
		u, err := url.Parse(target)
		if err != nil {
			out = append(out, fmt.Sprintf("%s:%d: the link %q does not parse: %v", name, line, target, err))
			continue
		}
		if u.Scheme != "" || u.Host != "" {
			continue // absolute: not this repository's business
		}
		file := name
		if u.Path != "" {
			if path.IsAbs(u.Path) {
				out = append(out, fmt.Sprintf("%s:%d: the link %q is absolute; links are relative to the page", name, line, target))
				continue
			}
			file = path.Clean(path.Join(path.Dir(name), u.Path))
			if file == ".." || strings.HasPrefix(file, "../") {
				out = append(out, fmt.Sprintf("%s:%d: the link %q leaves the repository", name, line, target))
				continue
			}
			if !exists(file) {
				out = append(out, fmt.Sprintf("%s:%d: the link %q names %s, which does not exist", name, line, target, file))
				continue
			}
		}
		if u.Fragment == "" {
			continue
		}
		page, ok := read(file)
		if !ok || !strings.HasSuffix(file, ".md") {
			out = append(out, fmt.Sprintf("%s:%d: the link %q has an anchor, but %s is not a markdown page", name, line, target, file))
			continue
		}
		if !anchors(page)[u.Fragment] {
			out = append(out, fmt.Sprintf("%s:%d: the link %q names the anchor #%s, which %s has no heading for", name, line, target, u.Fragment, file))
		}
	}
	return out
}

// TestDocsLinks holds every relative link of README.md, ARCHITECTURE.md
// and docs/*.md to a file or directory of the repository that exists,
// and a link's anchor to a heading of the page it names.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		return err == nil
	}
	read := func(p string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		return string(b), err == nil
	}
	links := 0
	for _, name := range append(pages(t), "ARCHITECTURE.md") {
		text := readPage(t, name)
		links += len(mdLink.FindAllString(prose(text), -1))
		for _, p := range linkProblems(name, text, exists, read) {
			t.Error(p)
		}
	}
	if links < 20 {
		t.Errorf("the pages hold %d links in all: the link pattern no longer reads them", links)
	}
}

func TestDocsLinkChecks(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"README.md":         "# T\n\n## A 60-second tour\n\n## Tests\n",
		"docs/nodes.md":     "# Nodes\n\n### Files on several nodes\n\n## `x` y\n\n## Files on several nodes\n",
		"internal/store":    "",
		"docs/docs_test.go": "",
	}
	exists := func(p string) bool { _, ok := files[p]; return ok }
	read := func(p string) (string, bool) { s, ok := files[p]; return s, ok }
	for _, tc := range []struct {
		page, text string
		problems   int
	}{
		{"README.md", "[tour](#a-60-second-tour), [nodes](docs/nodes.md#files-on-several-nodes), [x](docs/nodes.md#x-y), [again](docs/nodes.md#files-on-several-nodes-1)", 0},
		{"README.md", "[store](internal/store/), <https://example.com>, [go](https://go.dev/#x), `[not](a link)`", 0},
		{"docs/nodes.md", "[up](../README.md#tests), [here](#nodes), [test](docs_test.go)", 0},
		{"README.md", "[tests](#tests-1)", 1},
		{"README.md", "[gone](docs/gone.md)", 1},
		{"docs/nodes.md", "[not relative to the page](docs/nodes.md)", 1},
		{"docs/nodes.md", "[out](../../shared/peers/)", 1},
		{"README.md", "[across\nlines](docs/nodes.md#nowhere)", 1},
		{"README.md", "[anchor in code](internal/store#x)", 1},
		{"README.md", "```sh\n[in a block](nowhere.md)\n```\n", 0},
	} {
		if got := linkProblems(tc.page, tc.text, exists, read); len(got) != tc.problems {
			t.Errorf("%s: %q: %d problems, want %d: %q", tc.page, tc.text, len(got), tc.problems, got)
		}
	}
}
