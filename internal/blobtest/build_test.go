package blobtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// helperDir, in the environment, makes the test binary a process that
// calls ensureBuilt once with fakeBuild and prints the path it got.
const helperDir = "BLOBTEST_ENSURE_BUILT_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDir); dir != "" {
		p, err := ensureBuilt(dir, "prog", fakeBuild(dir))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(p)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeBuild writes a small script, slowly (so that concurrent callers
// overlap), and counts its calls in dir/builds.
func fakeBuild(dir string) func(out string) error {
	return func(out string) error {
		f, err := os.OpenFile(filepath.Join(dir, "builds"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintln(f, os.Getpid())
		_ = f.Close()
		if err := os.WriteFile(out, []byte("#!/bin/sh\n"), 0o755); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		fh, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = fh.WriteString("echo built\n")
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		return err
	}
}

func builds(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "builds"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// Four test processes and four goroutines of this one ask at once: one
// builds, every one gets the whole binary.
func TestEnsureBuiltBuildsOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache", "prog-v1")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		paths []string
		errs  []error
	)
	got := func(p string, err error) {
		mu.Lock()
		defer mu.Unlock()
		paths, errs = append(paths, strings.TrimSpace(p)), append(errs, err)
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperDir+"="+dir)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, stderr.String())
			}
			got(string(out), err)
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got(ensureBuilt(dir, "prog", fakeBuild(dir)))
		}()
	}
	wg.Wait()
	want := filepath.Join(dir, "prog")
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		} else if paths[i] != want {
			t.Errorf("caller %d got %q, want %q", i, paths[i], want)
		}
	}
	if n := builds(t, dir); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
	if out, err := exec.Command(want).Output(); err != nil || string(out) != "built\n" {
		t.Errorf("the binary printed %q (%v), want the whole script's \"built\"", out, err)
	}
	if tmp, _ := filepath.Glob(want + ".tmp*"); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	// Built: later callers only look.
	if _, err := ensureBuilt(dir, "prog", fakeBuild(dir)); err != nil || builds(t, dir) != 1 {
		t.Errorf("a later call: %v, %d builds", err, builds(t, dir))
	}
}

// A failed build leaves nothing behind (not a half-written file, which
// later callers would take for the binary), and the next caller builds.
func TestEnsureBuiltAfterFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prog-v1")
	_, err := ensureBuilt(dir, "prog", func(out string) error {
		_ = os.WriteFile(out, []byte("#!/bin/sh\n"), 0o755)
		return errors.New("compiler crashed")
	})
	if err == nil || !strings.Contains(err.Error(), "compiler crashed") {
		t.Fatalf("a failed build returned %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "prog*")); len(left) > 0 {
		t.Fatalf("a failed build left %v", left)
	}
	// A killed build's temporary file is removed by the next one.
	if err := os.WriteFile(filepath.Join(dir, "prog.tmp12345"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := ensureBuilt(dir, "prog", fakeBuild(dir))
	if err != nil || !executable(p) || builds(t, dir) != 1 {
		t.Fatalf("the build after a failure: %q %v, %d builds", p, err, builds(t, dir))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "prog.tmp*")); len(left) > 0 {
		t.Fatalf("left %v", left)
	}
}

func TestToolsDir(t *testing.T) {
	want, err := filepath.Abs(filepath.Join("..", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	if mainModule() == "" {
		t.Fatal("the test binary does not say its main module")
	}
	for _, module := range []string{mainModule(), ""} {
		if got, err := toolsDir(startDir, module); err != nil || got != want {
			t.Errorf("toolsDir(%s, %q) = %q, %v; want %q", startDir, module, got, err, want)
		}
	}
	if got, err := toolsDir(startDir, "example.com/not-this-one"); err == nil {
		t.Errorf("toolsDir found %q for another module", got)
	}
	key, version, err := toolsKey(want)
	if err != nil || len(key) != 12 || !strings.HasPrefix(version, "v1.") {
		t.Errorf("toolsKey = %q, %q, %v", key, version, err)
	}
}

// The versitygw that internal/tools pins builds (or was built by an
// earlier test process: it is the same binary, in the same place) and
// serves buckets.
func TestBuiltVersitygw(t *testing.T) {
	if Off() {
		t.Skip(Env + "=off: this test builds versitygw")
	}
	bin, err := builtVersitygw()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := builtVersitygw(); err != nil || again != bin {
		t.Fatalf("a second call: %q %v, want %q", again, err, bin)
	}
	if fi2, err := os.Stat(bin); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("a second call built again (%v)", err)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.kill()
		_ = os.RemoveAll(s.dir)
	})
	url := s.Bucket(t)
	bucket := strings.TrimPrefix(url[:strings.Index(url, "?")], "s3://")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil || len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "k" {
		t.Fatalf("list: %+v %v", out, err)
	}
}
