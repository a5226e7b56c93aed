package bench

import (
	"bufio"
	"bytes"
	"database/sql"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/serverbin"
)

// TestBench runs `taskgraph bench` as a user does: on the embedded default
// and on PostgreSQL it prints what docs/benchmarks.md says (the insert rate, the
// burn-down, the first and last tenth, and on PostgreSQL the row versions
// per task) and leaves nothing behind: not its SQLite directory, not its
// PostgreSQL schema, whether it ends, is interrupted, or finds its output
// closed (`taskgraph bench | head -1`).
func TestBench(t *testing.T) {
	t.Parallel()
	bin := serverbin.Build(t)
	pg := ""
	if os.Getenv("TASKGRAPH_TEST_PG") != "off" {
		pg = dbtest.PostgresBase()
	}
	// bench starts the bench command with a temporary directory of its own,
	// and returns it with the command.
	bench := func(t *testing.T, args ...string) (*exec.Cmd, string) {
		tmp := t.TempDir()
		cmd := exec.Command(bin, append([]string{"bench", "-every", "0"}, args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		return cmd, tmp
	}
	// schemas lists the bench schemas of the PostgreSQL database.
	schemas := func(t *testing.T) []string {
		if pg == "" {
			return nil
		}
		db, err := sql.Open("postgres", pg)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench\_%'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// leftovers lists what a run left: its directories in tmp, and the
	// bench schemas not in before.
	leftovers := func(t *testing.T, tmp string, before []string) []string {
		t.Helper()
		var left []string
		dirs, _ := filepath.Glob(filepath.Join(tmp, "taskgraph-bench-*"))
		left = append(left, dirs...)
		for _, s := range schemas(t) {
			if !slices.Contains(before, s) {
				left = append(left, "schema "+s)
			}
		}
		return left
	}
	type target struct {
		name string
		args []string
	}
	// SQLite's run spreads its tasks over tenants: the fair share's claim
	// finishes them all as well.
	targets := []target{{"SQLite", []string{"-tenants", "3"}}}
	if pg != "" {
		targets = append(targets, target{"Postgres", []string{"-db", pg}})
	}
	// The runs one after the other: each compares the schemas with those
	// before it.
	for _, tg := range targets {
		t.Run(tg.name+"/ARun", func(t *testing.T) {
			before := schemas(t)
			cmd, tmp := bench(t, append([]string{"-n", "2000"}, tg.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := []string{
				`(?m)^bench: \w+, 2000 noop tasks \(\+0 waiting behind\), 1 node\(s\) x 2000 workers`,
				`(?m)^inserted 2000 tasks in \S+ \(\d+ tasks/s\)$`,
				`(?m)^total: 2000 tasks SUCCESS \(0 failed\) in \S+ = \d+ tasks/s end to end`,
				`(?m)^first 10%: \d+ tasks/s, last 10%: \d+ tasks/s \(first/last [0-9.]+\); the first task was done \d+(\.\d+)?m?s after the start$`,
			}
			if tg.name == "SQLite" {
				want = append(want, `(?m)^bench: the tasks are spread over 3 tenants, in turn`)
			}
			if tg.name == "Postgres" {
				want = append(want, `(?m)^all tables +per task: [0-9.]+ row versions, <= [0-9.]+ index entries$`)
			}
			// The CPU per task where the system tells the process's:
			// PostgreSQL's too when it runs on this machine and /proc
			// shows its processes.
			cpu := `(?m)^cpu per task: taskgraph [0-9.]+ µs \(garbage collection [0-9.]+ µs\); [0-9.]+ of \d+ cores busy with them$`
			if tg.name == "Postgres" && newCPUMeter(true, pg).pg {
				cpu = `(?m)^cpu per task: taskgraph [0-9.]+ µs \(garbage collection [0-9.]+ µs\), postgres [0-9.]+ µs \(every postgres process on this machine\); [0-9.]+ of \d+ cores busy with them$`
			}
			if newCPUMeter(false, "").self {
				want = append(want, cpu)
			}
			for _, re := range want {
				if !regexp.MustCompile(re).Match(out) {
					t.Errorf("the output has no line matching %s:\n%s", re, out)
				}
			}
			if left := leftovers(t, tmp, before); len(left) > 0 {
				t.Errorf("the run left %v", left)
			}
		})
		t.Run(tg.name+"/AnExternalRun", func(t *testing.T) {
			before := schemas(t)
			cmd, tmp := bench(t, append([]string{"-external", "-n", "500", "-rounds", "2", "-clients", "2"}, tg.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, re := range []string{
				`(?m)^bench -external: \w+, 2 rounds of 500 noop tasks in process \(\d+ workers\) then 500 of bench\.external by 2 Go clients`,
				`(?m)^round 1: in process +\d+ tasks/s, external +\d+ tasks/s \(external/in-process [0-9.]+\)$`,
				`(?m)^round 2: `,
				`(?m)^total: in process \d+ tasks/s, external \d+ tasks/s; external/in-process [0-9.]+; 0\.0[0-9]+ requests per external task`,
			} {
				if !regexp.MustCompile(re).Match(out) {
					t.Errorf("the output has no line matching %s:\n%s", re, out)
				}
			}
			if left := leftovers(t, tmp, before); len(left) > 0 {
				t.Errorf("the run left %v", left)
			}
		})
		t.Run(tg.name+"/AnInterruptedRun", func(t *testing.T) {
			before := schemas(t)
			cmd, tmp := bench(t, append([]string{"-n", "1000000"}, tg.args...)...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Interrupted while it inserts its million tasks: the header
			// is printed just before.
			lines := bufio.NewReader(stdout)
			if _, err := lines.ReadString('\n'); err != nil {
				t.Fatalf("no header: %v; %s", err, stderr.String())
			}
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(lines)
			err = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("exit %d (%v), want 130\n%s%s", code, err, rest, stderr.String())
			}
			if !strings.Contains(stderr.String(), "bench: interrupted; removing what it made") {
				t.Errorf("stderr: %s", stderr.String())
			}
			if left := leftovers(t, tmp, before); len(left) > 0 {
				t.Errorf("the interrupted run left %v", left)
			}
		})
		if tg.name == "Postgres" {
			t.Run("Postgres/AKilledRunsSchemaIsDroppedByTheNextRunNotALiveOnes", func(t *testing.T) {
				// start starts a long run and returns it with its schema,
				// once it printed its header (the schema exists by then),
				// and what it wrote to stderr so far (a file the process
				// writes itself, read while it runs).
				start := func() (*exec.Cmd, func() string, string) {
					before := schemas(t)
					cmd, tmp := bench(t, append([]string{"-n", "1000000"}, tg.args...)...)
					stdout, err := cmd.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					errFile, err := os.Create(filepath.Join(tmp, "stderr"))
					if err != nil {
						t.Fatal(err)
					}
					defer errFile.Close()
					cmd.Stderr = errFile
					stderr := func() string {
						b, _ := os.ReadFile(errFile.Name())
						return string(b)
					}
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
					if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
						t.Fatalf("no header: %v; %s", err, stderr())
					}
					var made []string
					for _, s := range schemas(t) {
						if !slices.Contains(before, s) {
							made = append(made, s)
						}
					}
					if len(made) != 1 {
						t.Fatalf("the run made the schemas %v, want one", made)
					}
					return cmd, stderr, made[0]
				}
				killed, _, dead := start()
				if err := killed.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				_ = killed.Wait()
				require.Contains(t, schemas(t), dead, "a killed run cannot drop its schema")
				live, liveErr, alive := start()
				require.Contains(t, liveErr(), "bench: dropped schema "+dead+", left by a bench that did not end")
				require.NotContains(t, schemas(t), dead)

				cmd, _ := bench(t, append([]string{"-n", "200"}, tg.args...)...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				require.NotContains(t, string(out), "dropped schema "+alive)
				require.Contains(t, schemas(t), alive, "a running bench's schema is not taken for abandoned")

				if err := live.Process.Signal(os.Interrupt); err != nil {
					t.Fatal(err)
				}
				_ = live.Wait()
				require.Equal(t, 130, live.ProcessState.ExitCode(), liveErr())
				require.NotContains(t, schemas(t), alive)
			})
		}
		t.Run(tg.name+"/ARunWhoseOutputIsClosed", func(t *testing.T) {
			before := schemas(t)
			cmd, tmp := bench(t, append([]string{"-n", "20000"}, tg.args...)...)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout = w
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			// Like `| head -1`: the first line read, then the pipe closed.
			if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
				t.Fatalf("no header: %v; %s", err, stderr.String())
			}
			r.Close()
			_ = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("killed by %v: its writes to the closed output must fail instead\n%s", ws.Signal(), stderr.String())
			}
			if left := leftovers(t, tmp, before); len(left) > 0 {
				t.Errorf("the run whose output was closed left %v", left)
			}
		})
	}
}
