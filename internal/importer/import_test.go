package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/ent"
	entartifact "github.com/taskgraph/taskgraph/ent/artifact"
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/ent/taskinstance"
	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/apptest"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/dbtest"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/fakeclock"
	"github.com/taskgraph/taskgraph/internal/importer"
	"github.com/taskgraph/taskgraph/internal/importtest"
	"github.com/taskgraph/taskgraph/internal/spreadsheet"
	"github.com/taskgraph/taskgraph/internal/tasktype"
	"github.com/taskgraph/taskgraph/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sysCtx reads what the tests check as the process itself (package access
// lets no viewerless query read anything).
var sysCtx = auth.NewSystemContext(context.Background())

// quickPolicies retry at once, so that retries are tested without waiting.
var quickPolicies = []tasktype.RetryPolicy{
	{Name: tasktype.DefaultPolicyName, MaxAttempts: 3, Backoff: []time.Duration{10 * time.Millisecond}},
	{Name: "none", MaxAttempts: 1},
}

type bundle struct {
	s    *apptest.Server
	subs *events.Subscription[events.TaskChange]
}

// start runs a process on dsn and watches its import tasks.
func start(t *testing.T, dsn string, opts app.Options) *bundle {
	t.Helper()
	if opts.Policies == nil {
		opts.Policies = quickPolicies
	}
	s := apptest.Start(t, dsn, opts)
	sub := s.App.Broker.SubscribeTasks(func(c events.TaskChange) bool { return c.Task.Type == importer.TaskType }, 1<<16)
	t.Cleanup(sub.Close)
	return &bundle{s: s, subs: sub}
}

// wait reads the import tasks' changes until task id satisfies ok, and
// returns every change of that task seen on the way.
func (b *bundle) wait(t *testing.T, id string, what string, ok func(*ent.Task) bool) []events.TaskChange {
	t.Helper()
	want, _ := strconv.Atoi(id)
	var seen []events.TaskChange
	// Generous: a busy machine under -race imports 10,000 rows slowly; a
	// task that never ends still fails the test in bounded time.
	timeout := time.After(3 * time.Minute)
	for {
		select {
		case c, open := <-b.subs.C:
			require.True(t, open, "subscription ended: %v", b.subs.Err())
			if c.Task.ID != want {
				continue
			}
			seen = append(seen, c)
			if ok(c.Task) {
				return seen
			}
		case <-timeout:
			t.Fatalf("timed out waiting for task %s to be %s", id, what)
		}
	}
}

func (b *bundle) waitTerminal(t *testing.T, id string) *ent.Task {
	t.Helper()
	seen := b.wait(t, id, "finished", func(tk *ent.Task) bool { return tk.Status.Terminal() })
	return seen[len(seen)-1].Task
}

func summaryOf(t *testing.T, tk *ent.Task) importer.Summary {
	t.Helper()
	var s importer.Summary
	require.NoError(t, json.Unmarshal(tk.Result, &s), "result %s", tk.Result)
	return s
}

// contactReader reads the process's contacts table.
func contactReader(s *apptest.Server) importer.ContactReader {
	return importer.ContactReader{DB: s.App.Store.DB(), Postgres: s.App.Store.Postgres()}
}

func contacts(t *testing.T, s *apptest.Server, taskID int) int {
	t.Helper()
	n, err := contactReader(s).Count(sysCtx, importer.ContactFilter{ImportTaskID: taskID})
	require.NoError(t, err)
	return n
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// download fetches a task's artifact through a signed link.
func download(t *testing.T, s *apptest.Server, taskID, kind, format string) (*http.Response, []byte) {
	t.Helper()
	var out struct {
		ArtifactDownloadURL struct {
			URL       string
			ExpiresAt time.Time
		}
	}
	s.Query(t, `mutation($id: ID!, $kind: ArtifactKind, $format: FileFormat) { artifactDownloadUrl(taskId: $id, kind: $kind, format: $format) { url expiresAt } }`,
		map[string]any{"id": taskID, "kind": kind, "format": format}, &out)
	require.True(t, strings.HasPrefix(out.ArtifactDownloadURL.URL, s.URL+"/download/"), out.ArtifactDownloadURL.URL)
	resp, err := http.Get(out.ArtifactDownloadURL.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func xlsxRows(t *testing.T, b []byte) [][]string {
	t.Helper()
	f, err := excelize.OpenReader(bytes.NewReader(b))
	require.NoError(t, err)
	defer f.Close()
	rows, err := f.GetRows(f.GetSheetList()[0])
	require.NoError(t, err)
	return rows
}

func TestImport(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d dbtest.Driver) {
		t.Run("AnExecutionKilledHalfWayIsRetriedAndWritesEachGoodRowOnce", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{Import: importer.Config{
				ChunkSize: 100,
				ChunkHook: func(ctx context.Context, job *tasktype.Job, chunk int) error {
					if job.Attempt() == 1 && chunk == 6 {
						return errors.New("simulated crash after 5 chunks")
					}
					return nil
				},
			}})
			bad := func(i int) bool { return i%10 == 3 }
			tk := importtest.MustUpload(t, b.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(1000, bad), true), nil, "")
			final := b.waitTerminal(t, tk.ID)
			require.Equal(t, lifecycle.Success, final.Status, "last error: %s", final.LastError)
			insts, err := b.s.App.Store.Client().Task.QueryInstances(final).All(sysCtx)
			require.NoError(t, err)
			require.Len(t, insts, 2, "the first execution failed half-way and was retried")
			sum := summaryOf(t, final)
			require.Equal(t, 900, sum.SuccessCount)
			require.Equal(t, 100, sum.FailedCount)
			requireEachRowOnce(t, b.s, final.ID, 900)
		})

		t.Run("AZombieAndItsRecoveryTogetherWriteEachGoodRowOnce", func(t *testing.T) {
			t.Parallel()
			// The first execution stops sending heartbeats and stalls half-way;
			// the watchdog recovers the task and a second execution imports
			// the file; then the first wakes up and writes on.
			recovered := make(chan struct{})
			b := start(t, d.DSN(t), app.Options{
				// Without heartbeats, a slow (race-detector) machine may see
				// the watchdog recover later executions too: any number of
				// them must still write each row once.
				Policies: []tasktype.RetryPolicy{{Name: tasktype.DefaultPolicyName, MaxAttempts: 10, Backoff: []time.Duration{10 * time.Millisecond}}, {Name: "none", MaxAttempts: 1}},
				Pool:     worker.Config{HeartbeatInterval: time.Hour},
				// Every execution runs without heartbeats, so each must
				// finish within the lease: 3 s was too short for 1,000 rows
				// on a busy machine under -race (10 recoveries, FAILED).
				Watchdog: worker.WatchdogConfig{HeartbeatTimeout: 10 * time.Second},
				Import: importer.Config{
					ChunkSize: 100,
					ChunkHook: func(ctx context.Context, job *tasktype.Job, chunk int) error {
						if job.Attempt() == 1 && chunk == 4 {
							// Deaf to its context, as a stalled worker is.
							select {
							case <-recovered:
							case <-time.After(2 * time.Minute):
							}
						}
						return nil
					},
				},
			})
			var once sync.Once
			release := func() { once.Do(func() { close(recovered) }) }
			t.Cleanup(release) // before the process shuts down
			tk := importtest.MustUpload(t, b.s, "contacts.xlsx", importtest.XLSX(t, importtest.ContactsHeader, importtest.Rows(1000, nil)), nil, "")
			final := b.waitTerminal(t, tk.ID)
			release()
			require.Equal(t, lifecycle.Success, final.Status, "last error: %s", final.LastError)
			insts, err := b.s.App.Store.Client().Task.QueryInstances(final).Order(ent.Asc(taskinstance.FieldInstanceNo)).All(sysCtx)
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(insts), 2)
			require.Equal(t, lifecycle.KindTimeout, *insts[0].ErrorKind, "recovered by the watchdog")
			// Let the zombie finish what it does; its writes change nothing.
			deadline := time.Now().Add(20 * time.Second)
			for b.s.App.Pool.Running() > 0 {
				require.True(t, time.Now().Before(deadline), "the zombie did not stop")
				time.Sleep(10 * time.Millisecond)
			}
			requireEachRowOnce(t, b.s, final.ID, 1000)
			require.Equal(t, 1000, summaryOf(t, final).SuccessCount)
		})

		t.Run("CancelIsHonouredBetweenChunks", func(t *testing.T) {
			t.Parallel()
			reached := make(chan int, 1)
			b := start(t, d.DSN(t), app.Options{Import: importer.Config{
				ChunkSize: 100,
				ChunkHook: func(ctx context.Context, job *tasktype.Job, chunk int) error {
					if chunk == 3 {
						select {
						case reached <- job.Task.ID:
						default:
						}
						<-ctx.Done()
					}
					return nil
				},
			}})
			tk := importtest.MustUpload(t, b.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(1000, nil), false), nil, "")
			select {
			case <-reached:
			case <-time.After(60 * time.Second):
				t.Fatalf("the import never reached its third chunk: %+v", b.waitTerminal(t, tk.ID))
			}
			b.s.Query(t, `mutation($id: ID!) { cancelTask(id: $id, reason: "wrong file") { status } }`, map[string]any{"id": tk.ID}, nil)
			final := b.waitTerminal(t, tk.ID)
			require.Equal(t, lifecycle.Cancelled, final.Status)
			require.Equal(t, 200, contacts(t, b.s, final.ID), "the chunks before the cancel, and none after")
		})

		t.Run("TheSameFileTwiceWithOneKeyIsOneTask", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{})
			file := importtest.XLSX(t, importtest.ContactsHeader, importtest.Rows(50, nil))
			first := importtest.MustUpload(t, b.s, "a.xlsx", file, nil, "upload-1")
			second := importtest.MustUpload(t, b.s, "a (copy).xlsx", file, nil, "upload-1")
			require.Equal(t, first.ID, second.ID)
			final := b.waitTerminal(t, first.ID)
			require.Equal(t, lifecycle.Success, final.Status, "last error: %s", final.LastError)
			require.Equal(t, 50, contacts(t, b.s, final.ID))

			// Another file with the same key is a conflict.
			other := importtest.XLSX(t, importtest.ContactsHeader, importtest.Rows(51, nil))
			r, _ := importtest.Upload(t, b.s, "b.xlsx", other, "contacts", nil, "upload-1")
			require.Len(t, r.Errors, 1)
			require.Equal(t, "CONFLICT", r.Errors[0].Code())
			// One task, one stored source file: the duplicates were removed.
			n, err := b.s.App.Store.Client().Task.Query().Count(sysCtx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			arts, err := b.s.App.Store.Client().Artifact.Query().Where(entartifact.KindEQ(entartifact.KindSOURCE)).All(sysCtx)
			require.NoError(t, err)
			require.Len(t, arts, 1)
			require.Equal(t, final.ID, *arts[0].TaskID)
			require.Equal(t, 1, countFiles(t, b.s))
		})

		t.Run("EveryColumnOfAnErrorReportIsMaskedAndSoIsTheFileName", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{})
			// Secrets in columns other than phone and e-mail, and in a
			// column the target does not know (kept in the report's copy
			// of the row); every row is bad (its phone), so every row is
			// in the report.
			const id18, id15, card, phone = "11010519491231002X", "110105491231002", "6222020200112233446", "13912345678"
			header := append(append([]string{}, importtest.ContactsHeader...), "备注")
			rows := [][]string{
				{"张三 " + id18, "12345", "zs@example.com", "卡 " + card, "上海", "", "男", "", "身份证" + id15},
				{"李四", "tel_" + phone, "ls@example", "示例科技", "北京", "", "女", "", "token=abcdef123"},
			}
			tk := importtest.MustUpload(t, b.s, "客户_"+phone+".csv", importtest.CSV(header, rows, false), nil, "")
			final := b.waitTerminal(t, tk.ID)
			require.Equal(t, "FAILED", string(*final.ResultStatus), "all rows bad")
			_, body := download(t, b.s, tk.ID, "ERROR_REPORT", "CSV")
			report := string(body)
			require.Contains(t, report, "110***********002X", "the report was read")
			for _, secret := range []string{id18, id15, card, phone, "abcdef123", "zs@example.com", "ls@example"} {
				require.NotContains(t, report, secret)
			}
			// The file's name is masked where it is shown: the task's
			// title, the artifact, its download name.
			require.NotContains(t, final.Title, phone)
			require.Contains(t, final.Title, "客户_139****5678.csv")
			arts, err := b.s.App.Store.Client().Artifact.Query().Where(entartifact.KindEQ(entartifact.KindSOURCE)).All(sysCtx)
			require.NoError(t, err)
			require.Len(t, arts, 1)
			require.Equal(t, "客户_139****5678.csv", arts[0].Filename)
		})

		t.Run("AMissingRequiredHeaderFailsWithoutRetryOrRows", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{})
			header := []string{"姓名", "邮箱", "城市"}
			rows := [][]string{{"张三", "a@example.com", "上海"}}
			tk := importtest.MustUpload(t, b.s, "contacts.xlsx", importtest.XLSX(t, header, rows), nil, "")
			final := b.waitTerminal(t, tk.ID)
			require.Equal(t, lifecycle.Failed, final.Status)
			require.Contains(t, final.LastError, "missing required column(s): 手机 (phone)")
			insts, err := b.s.App.Store.Client().Task.QueryInstances(final).All(sysCtx)
			require.NoError(t, err)
			require.Len(t, insts, 1, "not retried")
			require.Equal(t, lifecycle.KindNonRetryable, *insts[0].ErrorKind)
			require.Equal(t, "FAILED", string(*final.ResultStatus))
			require.Equal(t, 0, contacts(t, b.s, final.ID))
		})

		t.Run("GBKAndBOMCSVFilesAreRead", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{})
			rows := importtest.Rows(20, nil)
			for _, file := range [][]byte{
				importtest.GBK(t, importtest.CSV(importtest.ContactsHeader, rows, false)),
				importtest.CSV(importtest.ContactsHeader, rows, true),
			} {
				tk := importtest.MustUpload(t, b.s, "contacts.csv", file, nil, "")
				final := b.waitTerminal(t, tk.ID)
				require.Equal(t, lifecycle.Success, final.Status, final.LastError)
				page, err := contactReader(b.s).Page(sysCtx, importer.ContactFilter{ImportTaskID: final.ID}, 1, 1)
				require.NoError(t, err)
				require.Len(t, page, 1)
				c := page[0]
				require.Equal(t, 2, c.RowNo)
				require.Equal(t, "用户0", c.Name)
				require.Equal(t, "上海", c.City)
				require.Equal(t, []string{"vip", "new"}, c.Tags)
			}
		})

		t.Run("AChunkedUploadIsAccepted", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{})
			pr, pw := io.Pipe()
			mw := multipart.NewWriter(pw)
			go func() {
				_ = mw.WriteField("operations", `{"query":"mutation($f: Upload!) { importFile(file: $f, target: \"contacts\") { id } }","variables":{"f":null}}`)
				_ = mw.WriteField("map", `{"0":["variables.f"]}`)
				fw, _ := mw.CreateFormFile("0", "contacts.csv")
				_, _ = fw.Write(importtest.CSV(importtest.ContactsHeader, importtest.Rows(30, nil), false))
				pw.CloseWithError(mw.Close())
			}()
			req, err := http.NewRequest(http.MethodPost, b.s.URL+"/query", pr)
			require.NoError(t, err)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			req.Header.Set("X-Requested-With", "test")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out struct {
				Data   struct{ ImportFile struct{ ID string } }
				Errors []any
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			require.Empty(t, out.Errors)
			final := b.waitTerminal(t, out.Data.ImportFile.ID)
			require.Equal(t, lifecycle.Success, final.Status, "last error: %s", final.LastError)
			require.Equal(t, 30, contacts(t, b.s, final.ID))
		})

		t.Run("RefusedFilesAreValidationErrorsThatLeaveNothingBehind", func(t *testing.T) {
			t.Parallel()
			b := start(t, d.DSN(t), app.Options{Import: importer.Config{
				MaxUploadSize: 256 << 10,
				Limits:        spreadsheet.Limits{MaxRows: 100, UnzipSizeLimit: 16 << 20},
			}})
			png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), make([]byte, 64)...)
			for _, c := range []struct {
				name, filename string
				content        []byte
				want           string
			}{
				{"Oversized", "big.csv", bytes.Repeat([]byte("姓名,手机\n"), 40000), "limit (max upload size) is 262144 bytes"},
				{"WrongExtension", "contacts.txt", importtest.CSV(importtest.ContactsHeader, importtest.Rows(3, nil), false), "allowed extensions: .xlsx, .csv"},
				{"RenamedCSV", "contacts.xlsx", importtest.CSV(importtest.ContactsHeader, importtest.Rows(3, nil), false), "not an xlsx file"},
				{"RenamedBinary", "contacts.csv", png, "binary data"},
				{"ZipBomb", "bomb.xlsx", importtest.ZipBomb(t, 64<<20), "unzip size limit 16777216 bytes"},
				{"TooManyRows", "contacts.xlsx", importtest.XLSX(t, importtest.ContactsHeader, importtest.Rows(101, nil)), "limit: max rows 100"},
				{"TooManyCSVRows", "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(101, nil), false), "limit: max rows 100"},
			} {
				r, status := importtest.Upload(t, b.s, c.filename, c.content, "contacts", nil, "")
				require.Equal(t, http.StatusOK, status, c.name)
				require.Len(t, r.Errors, 1, c.name)
				require.Equal(t, "VALIDATION", r.Errors[0].Code(), c.name)
				require.Contains(t, r.Errors[0].Message, c.want, c.name)
			}
			// A request far over the limit is refused before it is read.
			r, status := importtest.Upload(t, b.s, "huge.csv", make([]byte, 2<<20), "contacts", nil, "")
			require.Equal(t, http.StatusRequestEntityTooLarge, status)
			require.Equal(t, "VALIDATION", r.Errors[0].Code())
			require.Contains(t, r.Errors[0].Message, "limit (max upload size)")

			// A plain HTML form (no preflight header) cannot upload.
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			_ = mw.WriteField("operations", `{"query":"mutation($f: Upload!) { importFile(file: $f, target: \"contacts\") { id } }","variables":{"f":null}}`)
			_ = mw.WriteField("map", `{"0":["variables.f"]}`)
			fw, _ := mw.CreateFormFile("0", "contacts.csv")
			_, _ = fw.Write(importtest.CSV(importtest.ContactsHeader, importtest.Rows(3, nil), false))
			_ = mw.Close()
			resp, err := http.Post(b.s.URL+"/query", mw.FormDataContentType(), &body)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)

			ctx := sysCtx
			client := b.s.App.Store.Client()
			for what, count := range map[string]func(context.Context) (int, error){
				"tasks":     client.Task.Query().Count,
				"artifacts": client.Artifact.Query().Count,
				"contacts": func(ctx context.Context) (int, error) {
					return contactReader(b.s).Count(ctx, importer.ContactFilter{})
				},
			} {
				n, err := count(ctx)
				require.NoError(t, err)
				require.Zero(t, n, what)
			}
			require.Zero(t, countFiles(t, b.s))
		})

		t.Run("DownloadLinksRefuseTamperingAndExpire", func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(time.Now())
			b := start(t, d.DSN(t), app.Options{Clock: clock.Now})
			tk := importtest.MustUpload(t, b.s, "contacts.csv", importtest.CSV(importtest.ContactsHeader, importtest.Rows(10, func(i int) bool { return i == 0 }), false), nil, "")
			done := b.waitTerminal(t, tk.ID)
			require.Equal(t, lifecycle.Success, done.Status, "last error: %s", done.LastError)
			var out struct{ ArtifactDownloadURL struct{ URL string } }
			b.s.Query(t, `mutation($id: ID!) { artifactDownloadUrl(taskId: $id) { url } }`, map[string]any{"id": tk.ID}, &out)
			link := out.ArtifactDownloadURL.URL
			get := func(u string) int {
				resp, err := http.Get(u)
				require.NoError(t, err)
				resp.Body.Close()
				return resp.StatusCode
			}
			require.Equal(t, http.StatusOK, get(link))
			base, token, ok := strings.Cut(link, "/download/")
			require.True(t, ok)
			parts := strings.Split(token, ".") // id, expiry, user, role, MAC
			require.Len(t, parts, 5)
			with := func(i int, v string) string {
				q := slices.Clone(parts)
				q[i] = v
				return base + "/download/" + strings.Join(q, ".")
			}
			other := with(0, "1")
			later := with(1, parts[1]+"0")
			for _, bad := range []string{
				link[:len(link)-1] + flip(link[len(link)-1]), // MAC
				other, // another artifact id under the same MAC
				later, // another expiry under the same MAC
				strings.Replace(link, "/download/", "/download/..%2F..%2Fsecret.key", 1),
				b.s.URL + "/download/../../secret.key",
			} {
				require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, get(bad), bad)
			}
			require.Equal(t, http.StatusForbidden, get(link[:len(link)-1]+flip(link[len(link)-1])))
			clock.Advance(16 * time.Minute)
			require.Equal(t, http.StatusForbidden, get(link), "expired")
			// Unknown kinds of a task are NOT_FOUND.
			r := b.s.Do(t, `mutation($id: ID!) { artifactDownloadUrl(taskId: $id, kind: EXPORT) { url } }`, map[string]any{"id": tk.ID})
			require.Equal(t, "NOT_FOUND", r.Errors[0].Code())
		})
	})
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// requireEachRowOnce checks that an import wrote want rows, one per source
// row and one per (distinct) phone number.
func requireEachRowOnce(t *testing.T, s *apptest.Server, taskID, want int) {
	t.Helper()
	q := `SELECT COUNT(*), COUNT(DISTINCT row_no), COUNT(DISTINCT phone) FROM contacts WHERE task_id = ?`
	if s.App.Store.Postgres() {
		q = strings.Replace(q, "?", "$1", 1)
	}
	var n, rows, phones int
	require.NoError(t, s.App.Store.DB().QueryRowContext(sysCtx, q, taskID).Scan(&n, &rows, &phones))
	require.Equal(t, want, n)
	require.Equal(t, want, rows)
	require.Equal(t, want, phones)
}

// countFiles counts the files in the process's artifact directory.
func countFiles(t *testing.T, s *apptest.Server) int {
	t.Helper()
	keys, err := s.App.Artifacts.Blobs().Keys(context.Background())
	require.NoError(t, err)
	return len(keys)
}
