package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgraph/taskgraph/internal/blobtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// TestABlobStoreSetupIsSaidTheSameWay: an S3 blob store whose bucket does
// not exist, a node without S3 credentials, and one whose secret the
// server refuses all start the same way: the node starts unready, its log
// says in one line what is wrong and what to set, and /readyz says it
// too, naming the blob store (not the database).
func TestABlobStoreSetupIsSaidTheSameWay(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	bucket := blobtest.S3Only(t) // the shared server, and this process's credentials
	u, err := url.Parse(bucket)
	if err != nil {
		t.Fatal(err)
	}
	missing := *u
	missing.Host = "tg-no-such-bucket"
	base := blobtest.ProcessEnv()
	without := func(env []string, keys ...string) []string {
		var out []string
	next:
		for _, kv := range env {
			for _, k := range keys {
				if strings.HasPrefix(kv, k+"=") {
					continue next
				}
			}
			out = append(out, kv)
		}
		return out
	}
	for _, tc := range []struct {
		name, url string
		env       []string
		want      []string
	}{
		{"NoSuchBucket", missing.String(), base, []string{`the bucket "tg-no-such-bucket" does not exist (NoSuchBucket)`, "create it, or set --blob-url (TASKGRAPH_BLOB_URL)"}},
		{"NoCredentials", bucket, without(base, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), []string{"this node has no S3 credentials", "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"}},
		{"WrongSecret", bucket, append(without(base, "AWS_SECRET_ACCESS_KEY"), "AWS_SECRET_ACCESS_KEY=not-the-secret"), []string{"the S3 server refused this node's credentials", "(SignatureDoesNotMatch)", "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := serverbin.FreeAddr(t)
			cmd := exec.Command(bin, "--addr", addr, "--data-dir", t.TempDir(), "--blob-url", tc.url)
			// Only what the node needs: PATH and HOME, and the case's AWS
			// variables (no AWS_PROFILE, no instance role).
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, tc.env...)
			var log serverbin.Output
			cmd.Stdout, cmd.Stderr = &log, &log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
			})
			deadline := time.Now().Add(60 * time.Second)
			var status int
			var body string
			for {
				resp, err := http.Get("http://" + addr + "/readyz")
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					status, body = resp.StatusCode, string(b)
					if strings.Contains(body, "blob store") {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("no word of the blob store on /readyz within a minute (%d %q); log:\n%s", status, body, log.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			if status != http.StatusServiceUnavailable {
				t.Fatalf("/readyz %d, want 503: %s", status, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("/readyz does not say %q:\n%s", w, body)
				}
				// The text log quotes its message: "..." inside is \"...\".
				if !strings.Contains(strings.ReplaceAll(log.String(), `\"`, `"`), w) {
					t.Errorf("the log does not say %q:\n%s", w, log.String())
				}
			}
			if strings.Contains(body, "database") || strings.Contains(body, "IMDS") {
				t.Errorf("/readyz speaks of the database or the SDK's instance role:\n%s", body)
			}
		})
	}
}
