//go:build long

package web

import (
	"os"
	"os/exec"
	"testing"
)

// TestConsoleSuite runs the console's own suite (web/ci.sh): npm ci, the
// Vitest unit and component tests, the check that the committed bundle is
// the one the sources build, and the end-to-end tests in headless Chromium
// against the real server. It is in the long tier (`go test -tags long
// ./...` and CI's long step); it needs Node.js and Debian's chromium
// (.ci/run installs what is missing). TASKGRAPH_TEST_WEB=off leaves it out on a
// machine without them; CI never sets it.
func TestConsoleSuite(t *testing.T) {
	if os.Getenv("TASKGRAPH_TEST_WEB") == "off" {
		t.Log("TASKGRAPH_TEST_WEB=off: console suite not run")
		return
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("the console suite needs Node.js and npm (or TASKGRAPH_TEST_WEB=off to leave it out)")
	}
	cmd := exec.Command("bash", "ci.sh")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("web/ci.sh: %v", err)
	}
}
