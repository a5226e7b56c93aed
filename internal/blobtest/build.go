package blobtest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// versitygw comes with Go's own tooling, so that `go test ./...` needs no
// separate install: the nested module internal/tools pins it (a tool
// directive in a go.mod of its own, so that versitygw's nearly eighty
// modules never enter the main go.mod, which library users' builds read),
// and the first test process that needs it builds it with `go build` in
// that directory, from the module cache (the module proxy fills it the
// first time), into the user's cache directory: once per machine and
// version, minutes on a small machine, a stat afterwards. `go tool
// versitygw` would build it too, but caches the binary in GOCACHE, which
// `go clean -cache` and the cache's own trimming empty, and relinks it
// (seconds) on every first use in a process.
const versitygwPkg = "github.com/versity/versitygw/cmd/versitygw"

// startDir is the test's working directory when the process started (go
// test runs a test binary in its package's directory), before any test
// could change it.
var startDir, _ = os.Getwd()

// builtVersitygw returns the versitygw that internal/tools pins, building
// it first if no test process on this machine has.
func builtVersitygw() (string, error) {
	tools, err := toolsDir(startDir, mainModule())
	if err != nil {
		return "", err
	}
	key, version, err := toolsKey(tools)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = filepath.Join(os.TempDir(), "taskgraph-cache-"+strconv.Itoa(os.Getuid()))
	}
	dir := filepath.Join(cache, "taskgraph", "versitygw-"+version+"-"+key)
	return ensureBuilt(dir, "versitygw", func(out string) error {
		fmt.Fprintf(os.Stderr, "blobtest: building versitygw %s from %s into %s (once per machine; minutes on a small one)\n", version, tools, dir)
		cmd := exec.Command("go", "build", "-o", out, versitygwPkg)
		cmd.Dir = tools
		// The tools module alone (no go.work), and none of the flags the
		// test run was given (GOFLAGS=-race, say): versitygw is a server
		// the tests talk to, not code under test.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s in %s: %v: %s", versitygwPkg, tools, err, tail(b))
		}
		return nil
	})
}

// mainModule is the path of the module whose tests this process runs.
func mainModule() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Path
	}
	return ""
}

// toolsDir finds internal/tools of the repository: walking up from dir to
// the go.mod of the main module (or, if the build does not say which that
// is, the first go.mod with internal/tools beside it).
func toolsDir(dir, module string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if m, err := moduleOf(filepath.Join(d, "go.mod")); err == nil && (m == module || module == "") {
			tools := filepath.Join(d, "internal", "tools")
			_, err := os.Stat(filepath.Join(tools, "go.mod"))
			if err == nil {
				return tools, nil
			}
			if module != "" {
				return "", fmt.Errorf("module %s (%s) has no internal/tools/go.mod, which pins versitygw: %v", module, d, err)
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of module %q above %s, whose internal/tools pins versitygw", module, dir)
		}
	}
}

// moduleOf reads the module line of a go.mod.
func moduleOf(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s has no module line", gomod)
}

// toolsKey names a build of the tools module: a hash of its go.mod and
// go.sum (another version, or another dependency, is another build), and
// the version of versitygw it pins, for people reading the cache.
func toolsKey(tools string) (key, version string, err error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(tools, name))
		if err != nil {
			return "", "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
		if name == "go.mod" {
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) > 0 && f[0] == "require" {
					f = f[1:]
				}
				if len(f) >= 2 && f[0] == "github.com/versity/versitygw" {
					version = f[1]
				}
			}
		}
	}
	if version == "" {
		return "", "", fmt.Errorf("%s requires no github.com/versity/versitygw", filepath.Join(tools, "go.mod"))
	}
	return hex.EncodeToString(h.Sum(nil))[:12], version, nil
}

// ensureBuilt returns dir/name, calling build to make it if it is not
// there: once, however many test processes (go test runs several at
// once) and goroutines ask at the same time. The first takes a lock on a
// file in dir (flock: the others wait for it, and a process that dies
// releases it), builds into a temporary name and renames it into place,
// so that nobody ever sees a half-written binary; those that waited find
// it there. A failed build leaves nothing, and the next caller tries
// again.
func ensureBuilt(dir, name string, build func(out string) error) (string, error) {
	path := filepath.Join(dir, name)
	if executable(path) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if executable(path) {
		return path, nil
	}
	// Left by a build whose process was killed.
	stale, _ := filepath.Glob(path + ".tmp*")
	for _, s := range stale {
		_ = os.Remove(s)
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := build(tmp); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if !executable(tmp) {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("the build of %s made no executable %s", name, tmp)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return path, nil
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func tail(b []byte) []byte {
	if i := len(b) - 4000; i > 0 {
		b = b[i:]
	}
	return bytes.TrimSpace(b)
}
