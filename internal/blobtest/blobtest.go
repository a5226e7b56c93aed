// Package blobtest gives tests a fresh blob store of every supported kind:
// a directory in the test's temporary directory (file://), and a bucket of
// its own on a real S3 server (s3://), versitygw in its posix mode — not an
// in-process fake, so that what the tests see is what S3 clients see.
//
// The S3 server is TASKGRAPH_TEST_S3 (http://ACCESS:SECRET@host:port), if
// set. Unset, each test process starts a versitygw of its own on a free
// loopback port: TASKGRAPH_VERSITYGW names the binary, else the one in
// PATH, else the version internal/tools pins, which the first test process
// that needs it builds with `go build` (build.go: once per machine, into
// the user's cache directory), so that `go test ./...` needs nothing
// installed but Go. S3 is not optional: without a server the test fails,
// saying why. TASKGRAPH_TEST_S3=off runs the directory half alone (on a
// laptop that should not build versitygw, say); CI refuses it.
//
// Tests that stop the server (an outage mid-import) start a Server of
// their own.
package blobtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Env is the variable naming the S3 server tests use.
const Env = "TASKGRAPH_TEST_S3"

// The credentials of the servers tests start. The nodes under test read
// credentials where production nodes do, from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, which this package sets for the test process.
const (
	testAccess = "taskgraph"
	testSecret = "taskgraph-test-secret"
	region     = "us-east-1"
)

// Backend is one kind of blob store.
type Backend struct {
	Name string
	// URL returns the --blob-url of a new, empty store for t.
	URL func(t testing.TB) string
}

// Off reports whether TASKGRAPH_TEST_S3=off.
func Off() bool { return os.Getenv(Env) == "off" }

// Backends returns the directory and, unless TASKGRAPH_TEST_S3=off, S3.
func Backends() []Backend {
	bs := []Backend{{Name: "File", URL: Dir}}
	if !Off() {
		bs = append(bs, Backend{Name: "S3", URL: S3})
	}
	return bs
}

// Each runs fn as a parallel sub-test once per backend.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// Dir returns the URL of a new directory.
func Dir(t testing.TB) string {
	return "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "files"))
}

// S3 returns the URL of a new bucket on the shared server, removed with
// its objects when the test ends.
func S3(t testing.TB) string {
	t.Helper()
	return shared(t).Bucket(t)
}

// S3Only returns the URL of a new bucket for a test that is about S3
// itself; with TASKGRAPH_TEST_S3=off the test is skipped, saying why.
func S3Only(t *testing.T) string {
	t.Helper()
	if Off() {
		t.Skip(Env + "=off: this test needs an S3 server")
	}
	return S3(t)
}

// Server is an S3 server: the shared one, or one a test started.
type Server struct {
	Endpoint string // http://127.0.0.1:port
	access   string
	secret   string

	// Of a server this process started.
	bin  string
	dir  string
	addr string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

var (
	sharedOnce   sync.Once
	sharedServer *Server
	sharedErr    error
)

func shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		raw := os.Getenv(Env)
		switch raw {
		case "off":
			sharedErr = errors.New(Env + "=off")
		case "":
			var bin string
			if bin, sharedErr = Binary(); sharedErr == nil {
				sharedServer, sharedErr = start(bin)
			}
		default:
			u, err := url.Parse(raw)
			if err != nil || u.User == nil || u.Host == "" {
				sharedErr = fmt.Errorf("%s=%q is not http://ACCESS:SECRET@host:port", Env, raw)
				return
			}
			secret, _ := u.User.Password()
			sharedServer = &Server{Endpoint: u.Scheme + "://" + u.Host, access: u.User.Username(), secret: secret}
		}
		if sharedErr == nil {
			sharedErr = sharedServer.setCredentials()
		}
	})
	if sharedErr != nil {
		t.Fatalf("blobtest: no S3 server: %v. Set %s=http://ACCESS:SECRET@host:port to use a server of your own, or %s=off to run only the directory half.", sharedErr, Env, Env)
	}
	return sharedServer
}

var credOnce sync.Once

// setCredentials points the AWS SDK of this process at s's credentials.
// Every server a test process uses has the same ones.
func (s *Server) setCredentials() error {
	var err error
	credOnce.Do(func() {
		for k, v := range map[string]string{
			"AWS_ACCESS_KEY_ID": s.access, "AWS_SECRET_ACCESS_KEY": s.secret,
			"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
		} {
			if e := os.Setenv(k, v); e != nil {
				err = e
			}
		}
		_ = os.Unsetenv("AWS_PROFILE")
		_ = os.Unsetenv("AWS_SESSION_TOKEN")
	})
	if err == nil && (os.Getenv("AWS_ACCESS_KEY_ID") != s.access || os.Getenv("AWS_SECRET_ACCESS_KEY") != s.secret) {
		err = errors.New("the S3 servers of one test process must share their credentials")
	}
	return err
}

// Binary finds versitygw: TASKGRAPH_VERSITYGW, else PATH, else the
// version internal/tools pins, built the first time (build.go).
func Binary() (string, error) {
	if p := os.Getenv("TASKGRAPH_VERSITYGW"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	p, err := builtVersitygw()
	if err != nil {
		return "", fmt.Errorf("versitygw is neither in TASKGRAPH_VERSITYGW nor in PATH, and building it failed: %w", err)
	}
	return p, nil
}

// StartServer starts a versitygw of the test's own (stopped when the test
// ends), for tests that stop and restart it. With TASKGRAPH_TEST_S3=off the
// test is skipped; without the binary it fails.
func StartServer(t *testing.T) *Server {
	t.Helper()
	if Off() {
		t.Skip(Env + "=off: this test needs an S3 server")
	}
	shared(t) // the process's credentials
	bin, err := Binary()
	if err != nil {
		t.Fatalf("blobtest: %v", err)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatalf("blobtest: %v", err)
	}
	if err := s.setCredentials(); err != nil {
		t.Fatalf("blobtest: %v", err)
	}
	t.Cleanup(func() {
		s.kill()
		_ = os.RemoveAll(s.dir)
	})
	return s
}

func start(bin string) (*Server, error) {
	removeStale()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, err
	}
	// Whose it is, so that a later process can remove it once this one
	// is gone (the server is killed with it, and cleans nothing up).
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	s := &Server{Endpoint: "http://" + addr, access: testAccess, secret: testSecret, bin: bin, dir: dir, addr: addr}
	if err := os.Mkdir(s.data(), 0o700); err != nil {
		return nil, err
	}
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

const tempPrefix = "taskgraph-versitygw-"

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// removeStale removes the directories of servers whose test process ended.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// run starts the process and waits until it answers.
func (s *Server) run() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, "--access", s.access, "--secret", s.secret, "--region", region,
		"--port", s.addr, "--quiet", "posix", s.data())
	// Dies with the test process, however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("versitygw at %s did not answer within 30s: %v", s.Endpoint, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Stop kills the server: connections are refused until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.bin == "" {
		t.Fatal("blobtest: only a server the test started can be stopped")
	}
	s.kill()
}

// Start starts a stopped server again, on the same port and files.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.run(); err != nil {
		t.Fatalf("blobtest: %v", err)
	}
}

func (s *Server) client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.access, s.secret, ""),
	})
}

// Bucket creates a bucket of the test's own and returns its --blob-url.
// The bucket and its objects are removed when the test ends (if the
// server still runs).
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tg-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("blobtest: create bucket on %s: %v", s.Endpoint, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(name)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return // stopped by the test, or gone with its directory
			}
			for _, o := range page.Contents {
				_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: o.Key})
			}
		}
		_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
	})
	return URL(s.Endpoint, name)
}

// URL is the --blob-url of a bucket on an S3-compatible server.
func URL(endpoint, bucket string) string {
	q := url.Values{"endpoint": {endpoint}, "region": {region}, "use_path_style": {"true"}}
	return "s3://" + bucket + "?" + q.Encode()
}

// ProcessEnv returns the environment a node process started by a test
// needs to reach the S3 servers (the credentials).
func ProcessEnv() []string {
	var env []string
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
