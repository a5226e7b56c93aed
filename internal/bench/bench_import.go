package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/xuri/excelize/v2"

	"github.com/taskgraph/taskgraph/ent"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/artifact"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/engine"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/exporter"
	"github.com/taskgraph/taskgraph/internal/importer"
)

// RunImport measures an import end to end — the multipart upload to
// a served process, the checks, the task, streaming, validation and writes
// — and then exports of the imported rows, reporting rows per second and
// the process's peak RSS (VmHWM) during the import.
func RunImport(args []string) int {
	fs := flag.NewFlagSet("taskgraph bench-import", flag.ContinueOnError)
	rows := fs.Int("rows", 100000, "data rows in the generated file")
	format := fs.String("format", "xlsx", "xlsx or csv")
	badEvery := fs.Int("bad-every", 0, "make every Nth row invalid (0: none)")
	db := fs.String("db", os.Getenv("TASKGRAPH_DB"), "database: a PostgreSQL URL (the bench runs in a new schema of it) or a SQLite file (default: a new SQLite file in a temporary directory)")
	dryRun := fs.Bool("dry-run", false, "import with dryRun: parse and validate, write no rows (no export follows)")
	blobURL := fs.String("blob-url", os.Getenv("TASKGRAPH_BLOB_URL"), "blob store for the upload, reports and exports (default: a directory in the temporary directory)")
	exportRows := fs.Int("export-rows", 0, "before exporting, add synthetic contacts to the import's until it has this many rows, and export CSV only (a large export: 7,000,000 rows make about 1 GiB)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the import to this file")
	exportProfile := fs.String("export-cpuprofile", "", "write a CPU profile of the exports to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bench-import:", app.OneLine(err))
		return 1
	}
	// A fresh database each run: a new SQLite file, or a new schema of
	// the PostgreSQL database named.
	dir, dsn, cleanup, err := benchDB(*db)
	if err != nil {
		return fail(err)
	}
	defer cleanup()

	file, err := benchFile(*format, *rows, *badEvery)
	if err != nil {
		return fail(err)
	}
	// The upload streams from a file, so that the client's copy is not
	// counted as the server's memory.
	upload := filepath.Join(dir, "bench."+*format)
	if err := os.WriteFile(upload, file, 0o600); err != nil {
		return fail(err)
	}
	size := len(file)
	file = nil
	ctx := context.Background()
	cfg := app.Config{DB: dsn, DataDir: dir, Workers: 16, Roles: []app.Role{app.RoleAPI, app.RoleWorker, app.RoleWatchdog},
		ShutdownGrace: 10 * time.Second, HeartbeatTimeout: 30 * time.Second,
		MaxUploadSize: 200 << 20, ImportMaxRows: max(*rows, 1000000), ImportUnzipLimit: 4 << 30, BlobURL: *blobURL}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := app.New(ctx, cfg, app.Options{Logger: quiet})
	if err != nil {
		return fail(err)
	}
	defer a.Shutdown(context.Background())
	if err := a.Start(ctx); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	go func() { _ = a.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	sub := a.Broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.Status.Terminal() }, 1024)
	defer sub.Close()

	fmt.Printf("bench-import: %s, %d rows (%s, %d bytes), files in %s, GOMAXPROCS=%d\n", a.Store.Dialect(), *rows, *format, size, a.Artifacts.Location(), runtime.GOMAXPROCS(0))
	// Peak RSS from here on: the generated file is not the server's.
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	rssBefore := rss("VmRSS")

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
	}
	start := time.Now()
	id, err := benchUpload(base, upload, *dryRun)
	if err != nil {
		return fail(err)
	}
	uploaded := time.Since(start)
	t, err := benchWait(sub, id)
	if err != nil {
		return fail(err)
	}
	el := time.Since(start)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	var sum importer.Summary
	_ = json.Unmarshal(t.Result, &sum)
	fmt.Printf("import: %s in %s (upload and checks %s) = %.0f rows/s end to end; %d written, %d refused\n",
		sum.Status, el.Round(time.Millisecond), uploaded.Round(time.Millisecond), float64(*rows)/el.Seconds(), sum.SuccessCount, sum.FailedCount)
	fmt.Printf("peak RSS of the process during the import: %d MiB (VmHWM; RSS before the upload %d MiB)\n", rss("VmHWM")>>10, rssBefore>>10)
	if t.Status != lifecycle.Success {
		return fail(fmt.Errorf("import ended %s: %s", t.Status, t.LastError))
	}
	if *dryRun {
		return 0
	}

	if *exportProfile != "" {
		f, err := os.Create(*exportProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	formats := []string{"csv", "xlsx"}
	if *exportRows > *rows {
		start := time.Now()
		if err := addContacts(ctx, a, id, *rows, *exportRows); err != nil {
			return fail(err)
		}
		fmt.Printf("added %d synthetic contacts in %s\n", *exportRows-*rows, time.Since(start).Round(time.Millisecond))
		formats = []string{"csv"}
	}
	for _, f := range formats {
		runtime.GC()
		debug.FreeOSMemory()
		resetPeakRSS()
		start := time.Now()
		in := fmt.Sprintf(`{"source":"contacts","format":%q,"filter":{"importTaskId":%d}}`, f, id)
		// As the upload did over HTTP: the open server's local administrator.
		tk, err := a.Engine.Create(auth.NewContext(ctx, auth.Local), engineRequest(exporter.ExportType, in))
		if err != nil {
			return fail(err)
		}
		done, err := benchWait(sub, tk.ID)
		if err != nil {
			return fail(err)
		}
		el := time.Since(start)
		var res exporter.ExportResult
		_ = json.Unmarshal(done.Result, &res)
		var size int64
		if art, err := a.Artifacts.Latest(auth.NewSystemContext(ctx), tk.ID, artifact.KindExport); err == nil {
			size = art.Size
		}
		fmt.Printf("export %s: %d rows (%d MiB) in %s = %.0f rows/s; peak RSS of the process during the export: %d MiB\n",
			f, res.Rows, size>>20, el.Round(time.Millisecond), float64(res.Rows)/el.Seconds(), rss("VmHWM")>>10)
	}
	return 0
}

// addContacts adds contacts to import task id's, which has from (its
// rows 2 to from+1: the header is row 1), until it has to, in one
// statement (a large export without a large import).
func addContacts(ctx context.Context, a *app.App, id, from, to int) error {
	q := `WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
INSERT INTO contacts (task_id, row_no, name, phone, email, company, city, tags, gender, birthday, created_at)
SELECT $3, i, '用户' || i, '13' || substr('000000000' || i, -9), 'user' || i || '@example.com', '某某科技有限公司', '上海', '["vip","new"]', '男', '1990-01-02', $4 FROM n`
	if a.Store.Postgres() {
		q = `INSERT INTO contacts (task_id, row_no, name, phone, email, company, city, tags, gender, birthday, created_at)
SELECT $3, i, '用户' || i, '13' || lpad(i::text, 9, '0'), 'user' || i || '@example.com', '某某科技有限公司', '上海', '["vip","new"]', '男', '1990-01-02', $4
FROM generate_series($1::bigint, $2::bigint) AS i`
	}
	_, err := a.Store.DB().ExecContext(ctx, q, from+2, to+1, id, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("add contacts: %w", err)
	}
	return nil
}

func benchFile(format string, rows, badEvery int) ([]byte, error) {
	header := []any{"姓名", "手机", "邮箱", "公司", "城市", "标签", "性别", "生日"}
	row := func(i int) []any {
		phone := fmt.Sprintf("13%09d", i)
		if badEvery > 0 && i%badEvery == badEvery-1 {
			phone = "12345"
		}
		return []any{"用户" + strconv.Itoa(i), phone, "user" + strconv.Itoa(i) + "@example.com", "某某科技有限公司", []string{"上海", "北京", "深圳", "杭州"}[i%4], "vip,new", "男", "1990-01-02"}
	}
	if format == "csv" {
		var b bytes.Buffer
		for i := -1; i < rows; i++ {
			cells := header
			if i >= 0 {
				cells = row(i)
			}
			for j, c := range cells {
				if j > 0 {
					b.WriteByte(',')
				}
				v := fmt.Sprint(c)
				if strings.ContainsAny(v, ",\"\n") {
					v = `"` + strings.ReplaceAll(v, `"`, `""`) + `"`
				}
				b.WriteString(v)
			}
			b.WriteByte('\n')
		}
		return b.Bytes(), nil
	}
	f := excelize.NewFile()
	defer f.Close()
	sw, err := f.NewStreamWriter("Sheet1")
	if err != nil {
		return nil, err
	}
	if err := sw.SetRow("A1", header); err != nil {
		return nil, err
	}
	for i := range rows {
		cell, _ := excelize.CoordinatesToCellName(1, i+2)
		if err := sw.SetRow(cell, row(i)); err != nil {
			return nil, err
		}
	}
	if err := sw.Flush(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = f.Write(&buf)
	return buf.Bytes(), err
}

func benchUpload(base, path string, dryRun bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		_ = mw.WriteField("operations", fmt.Sprintf(`{"query":"mutation($f: Upload!) { importFile(file: $f, target: \"contacts\", options: {dryRun: %t}) { id } }","variables":{"f":null}}`, dryRun))
		_ = mw.WriteField("map", `{"0":["variables.f"]}`)
		w, _ := mw.CreateFormFile("0", filepath.Base(path))
		if _, err := io.Copy(w, f); err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(mw.Close())
	}()
	req, err := http.NewRequest(http.MethodPost, base+"/query", pr)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Apollo-Require-Preflight", "true")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			ImportFile struct{ ID string }
		}
		Errors []struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, err
	}
	if len(out.Errors) > 0 {
		return 0, fmt.Errorf("upload refused: %s", out.Errors[0].Message)
	}
	return strconv.Atoi(out.Data.ImportFile.ID)
}

func benchWait(sub *events.Subscription[events.TaskChange], id int) (*ent.Task, error) {
	timeout := time.After(30 * time.Minute)
	for {
		select {
		case c, ok := <-sub.C:
			if !ok {
				return nil, fmt.Errorf("event subscription ended: %v", sub.Err())
			}
			if c.Task.ID == id {
				return c.Task, nil
			}
		case <-timeout:
			return nil, fmt.Errorf("task %d did not finish in 30 minutes", id)
		}
	}
}

// rss reads a field of /proc/self/status in KiB (0 where there is none).
func rss(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// resetPeakRSS resets VmHWM to the current RSS (Linux: clear_refs 5).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func engineRequest(typ, input string) engine.CreateRequest {
	return engine.CreateRequest{Type: typ, Input: json.RawMessage(input)}
}
