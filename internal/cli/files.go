package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/Khan/genqlient/graphql"
)

func runImport(env *Env, args []string) int {
	c := newCmd(env, "import", "FILE", "Uploads an .xlsx or .csv file into an import target (contacts) and prints its task; with --wait, follows it to the end (a progress bar on a terminal) and exits 0 when it succeeded (some rows may still have been refused: see the result's failedCount and taskgraph download ID), 3 when it failed.")
	target := c.fs.String("target", "contacts", "the import target (see the importTargets query)")
	key := c.fs.String("idempotency-key", "", "the same file with the same key again returns the task created first")
	options := c.fs.String("options", "", "the target's options as JSON")
	wait := c.fs.Bool("wait", false, "wait until the import ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		opts, err := jsonValue(env, "options", *options)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		f, err := os.Open(env.path(pos[0]))
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		var keyp *string
		if *key != "" {
			keyp = key
		}
		var optp *json.RawMessage
		if opts != nil {
			optp = &opts
		}
		bar := newProgress(env.Stderr, env.Terminal)
		t, err := cl.importFile(env.Ctx, f, filepath.Base(pos[0]), fi.Size(), *target, optp, keyp, func(done int64) {
			bar.bytes(done, fi.Size(), "upload "+filepath.Base(pos[0]))
		})
		bar.done()
		if err != nil {
			return err
		}
		if !*wait || c.json || c.quiet {
			if err := c.printTask(t, &t.TaskFields); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(env.Stdout, "task %s %s %s\n", t.Id, t.Code, t.Status)
		}
		if !*wait {
			return nil
		}
		if err := c.follow(cl, t.Id, false, c.json, c.quiet); err != nil {
			return err
		}
		if !c.json && !c.quiet {
			// The summary: how many rows were written and refused.
			resp, err := GetTask(env.Ctx, cl.gql, t.Id)
			if err == nil && resp.Task != nil && resp.Task.Result != nil {
				fmt.Fprintf(env.Stdout, "result %s\n", *resp.Task.Result)
			}
		}
		return nil
	}())
}

// importFile sends the importFile mutation as a GraphQL multipart request
// (genqlient has no uploads): the operation genqlient generated, the
// file streamed as part "0", sent reports the bytes sent so far.
func (cl *client) importFile(ctx context.Context, file io.Reader, name string, size int64, target string, options *json.RawMessage, key *string, sent func(int64)) (*ImportFileImportFileTask, error) {
	ops, err := json.Marshal(&graphql.Request{
		OpName: "ImportFile",
		Query:  ImportFile_Operation,
		Variables: map[string]any{
			"file": nil, "target": target, "options": options, "idempotencyKey": key,
		},
	})
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			if err := mw.WriteField("operations", string(ops)); err != nil {
				return err
			}
			if err := mw.WriteField("map", `{"0":["variables.file"]}`); err != nil {
				return err
			}
			part, err := mw.CreateFormFile("0", name)
			if err != nil {
				return err
			}
			sent(0)
			if _, err := io.Copy(part, &counting{r: file, sent: sent}); err != nil {
				return err
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.server+"/query", pr)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	// A web page cannot send this header cross-site: the server requires
	// it on multipart requests (CSRF).
	req.Header.Set("Apollo-Require-Preflight", "true")
	_ = size
	resp, err := cl.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out graphql.BaseResponse[*ImportFileResponse]
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, httpFailure(resp.StatusCode, b)
	}
	if len(out.Errors) > 0 {
		return nil, explain(out.Errors)
	}
	if resp.StatusCode != http.StatusOK || out.Data == nil {
		return nil, httpFailure(resp.StatusCode, b)
	}
	return &out.Data.ImportFile, nil
}

// counting reports how much has been read.
type counting struct {
	r    io.Reader
	n    int64
	sent func(int64)
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 {
		c.sent(c.n)
	}
	return n, err
}

func runExport(env *Env, args []string) int {
	c := newCmd(env, "export", "", "Creates an export task (contacts, tasks or, for admins, the audit trail; xlsx or CSV, with a filter), waits for it and downloads the file into the current directory (or --output); with --no-wait, only prints the task.")
	source := c.fs.String("source", "contacts", "what to export: contacts, tasks or audit (admins only)")
	format := c.fs.String("format", "xlsx", "the file's format: "+strings.ToLower(enumWords(AllFileFormat)))
	filter := c.fs.String("filter", "", `a filter as JSON: for contacts {"city": "上海", "importTaskId": 1}; for tasks {"type": "noop", "status": ["FAILED"]}; for audit {"actor": "alice", "action": ["CANCEL"], "outcome": "OK", "taskId": 7}`)
	output := c.fs.String("output", "", "where to write the file (- for stdout; default: the server's file name in the current directory)")
	noWait := c.fs.Bool("no-wait", false, "print the task and return at once")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		in := map[string]any{"source": *source, "format": strings.ToLower(*format)}
		if *filter != "" {
			f, err := jsonValue(env, "filter", *filter)
			if err != nil {
				return err
			}
			in["filter"] = f
		}
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		rm := json.RawMessage(raw)
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := CreateTask(env.Ctx, cl.gql, CreateTaskInput{Type: "export", Input: &rm})
		if err != nil {
			return err
		}
		t := &resp.CreateTask
		if *noWait {
			return c.printTask(t, &t.TaskFields)
		}
		if !c.json && !c.quiet {
			fmt.Fprintf(env.Stderr, "task %s %s %s\n", t.Id, t.Code, t.Status)
		}
		if err := c.follow(cl, t.Id, false, false, true); err != nil {
			return err
		}
		f, err := parseEnum("format", *format, AllFileFormat)
		if err != nil {
			return err
		}
		return c.download(cl, t.Id, "EXPORT", &f, *output)
	}())
}

func runDownload(env *Env, args []string) int {
	c := newCmd(env, "download", "TASK", "Downloads a task's file into the current directory (under the server's file name) or --output, and prints where it went.")
	kind := c.fs.String("kind", "ERROR_REPORT", "which file: "+enumWords(AllArtifactKind))
	format := c.fs.String("format", "", strings.ToLower(enumWords(AllFileFormat))+", where the file exists in both (default: xlsx)")
	output := c.fs.String("output", "", "where to write the file (- for stdout)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		var f *FileFormat
		if *format != "" {
			ff, err := parseEnum("format", *format, AllFileFormat)
			if err != nil {
				return err
			}
			f = &ff
		}
		k, err := parseEnum("kind", *kind, AllArtifactKind)
		if err != nil {
			return err
		}
		return c.download(cl, pos[0], k, f, *output)
	}())
}

// download asks for a signed link to a task's file and saves what it
// serves.
func (c *cmd) download(cl *client, taskID string, kind ArtifactKind, format *FileFormat, output string) error {
	taskID, err := c.taskRef(cl, taskID)
	if err != nil {
		return err
	}
	link, err := ArtifactDownloadUrl(c.env.Ctx, cl.gql, taskID, &kind, format)
	if err != nil {
		return err
	}
	where, err := cl.resolve(link.ArtifactDownloadUrl.Url)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(c.env.Ctx, http.MethodGet, where, nil)
	if err != nil {
		return err
	}
	// The link itself is the credential; no token is sent with it.
	resp, err := cl.http.Do(req)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("download: the server answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var w io.Writer = c.env.Stdout
	path := output
	if output != "-" {
		if path == "" {
			_, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Disposition"))
			// Only the base name: the server's word is not a path here.
			path = filepath.Base(params["filename"])
			if path == "." || path == "/" || path == "" {
				path = fmt.Sprintf("task-%s-%s", taskID, strings.ToLower(string(kind)))
			}
		}
		f, err := os.Create(c.env.path(path))
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if output == "-" {
		return nil
	}
	if c.json {
		return writeJSON(c.env.Stdout, map[string]any{"file": path, "size": n})
	}
	_, err = fmt.Fprintf(c.env.Stdout, "%s (%s)\n", path, size(n))
	return err
}
