package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

const taskUsage = `Usage: taskgraph task COMMAND [args] [flags]

Commands:
  create TYPE    create a task (--input JSON, --wait...), or many from a JSON-lines file (--file)
  get ID         a task, its executions and files
  list           tasks, newest first (--status, --type, --search, --all...)
  cancel ID      cancel a task (a running one stops when its handler sees it)
  retry ID       run a FAILED task again (a new execution; the failed one is kept)
  review approve|edit|accept|reject ID
                 decide on a task waiting for review (REVIEW_PENDING)
  watch ID       follow a task's changes until it ends (--follow: until interrupted)
  logs ID        a task's log lines (--follow: and the new ones as they come)

taskgraph task COMMAND -h shows a command's flags.
Exit codes: 0 done (the task succeeded), 1 failure, 2 usage error, 3 the task FAILED, 4 the task was CANCELLED, 5 the task waits for review.
`

func runTask(env *Env, args []string) int {
	if globals, rest := leadingGlobals(args); len(globals) > 0 && len(rest) > 0 {
		args = afterCommand(rest, globals) // task --server URL get 1
	}
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, taskUsage)
		return ExitUsage
	}
	sub := map[string]func(*Env, []string) int{
		"create": taskCreate, "get": taskGet, "list": taskList, "cancel": taskCancel,
		"retry": taskRetry, "watch": taskWatch, "logs": taskLogs, "review": taskReview,
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		fmt.Fprint(env.Stdout, taskUsage)
		return ExitOK
	}
	run, ok := sub[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "taskgraph task: %q is not a command\n\n%s", args[0], taskUsage)
		return ExitUsage
	}
	return run(env, args[1:])
}

// jsonValue reads a JSON flag: the JSON itself, @FILE, or - for stdin.
func jsonValue(env *Env, flagName, v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	var b []byte
	switch {
	case v == "-":
		var err error
		if b, err = io.ReadAll(env.Stdin); err != nil {
			return nil, err
		}
	case strings.HasPrefix(v, "@"):
		var err error
		if b, err = os.ReadFile(env.path(v[1:])); err != nil {
			return nil, usageErrorf("--%s: %v", flagName, err)
		}
	default:
		b = []byte(v)
	}
	if !json.Valid(b) {
		return nil, usageErrorf("--%s: not JSON (give the JSON itself, @FILE or - for stdin)", flagName)
	}
	return json.RawMessage(b), nil
}

func taskCreate(env *Env, args []string) int {
	c := newCmd(env, "task create", "TYPE", "Creates a task of a registered type (see the console's Launch page, or the taskTypes query), or with --file one task per line of a JSON-lines file, each line a CreateTaskInput ({\"type\": \"noop\", \"input\": {...}}).")
	title := c.fs.String("title", "", "a title, shown in lists")
	input := c.fs.String("input", "", "the task's input: JSON, @FILE or - (stdin)")
	bizID := c.fs.String("biz-id", "", "your business key (an order number...)")
	priority := c.fs.Int("priority", -1, "0..100, smaller runs first (default: 5)")
	maxAttempts := c.fs.Int("max-attempts", 0, "1..25 (default: the retry policy's)")
	policy := c.fs.String("retry-policy", "", "a retry policy name (default: the type's)")
	timeout := c.fs.Duration("timeout", 0, "how long one execution may run (default: the type's)")
	key := c.fs.String("idempotency-key", "", "the same key again returns the task created first")
	runAt := c.fs.String("run-at", "", "do not run before this time (RFC 3339)")
	file := c.fs.String("file", "", "create one task per line of this JSON-lines file (- for stdin)")
	wait := c.fs.Bool("wait", false, "wait until the task ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		maxPos := 1
		if *file != "" {
			maxPos = 0
		}
		pos, err := c.parse(args, 0, maxPos)
		if err != nil {
			return err
		}
		if *file != "" {
			if len(pos) > 0 {
				return usageErrorf("--file and a TYPE: the types are in the file")
			}
			return createMany(c, *file, *wait)
		}
		if len(pos) == 0 {
			return usageErrorf("missing TYPE")
		}
		in := CreateTaskInput{Type: pos[0]}
		raw, err := jsonValue(env, "input", *input)
		if err != nil {
			return err
		}
		if raw != nil {
			in.Input = &raw
		}
		set := func(s string) *string {
			if s == "" {
				return nil
			}
			return &s
		}
		in.Title, in.BizId, in.RetryPolicy, in.IdempotencyKey = set(*title), set(*bizID), set(*policy), set(*key)
		if *priority >= 0 {
			in.Priority = priority
		}
		if *maxAttempts > 0 {
			in.MaxAttempts = maxAttempts
		}
		if *timeout > 0 {
			s := int(timeout.Seconds())
			in.TimeoutSeconds = &s
		}
		if *runAt != "" {
			t, err := time.Parse(time.RFC3339, *runAt)
			if err != nil {
				return usageErrorf("--run-at: %q is not a time such as 2026-12-01T09:00:00Z", *runAt)
			}
			in.RunAt = &t
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := CreateTask(env.Ctx, cl.gql, in)
		if err != nil {
			return err
		}
		t := &resp.CreateTask
		if !*wait || c.json || c.quiet {
			if err := c.printTask(t, &t.TaskFields); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(env.Stdout, "task %s %s %s\n", t.Id, t.Code, t.Status)
		}
		if *wait {
			return c.follow(cl, t.Id, false, c.json, c.quiet)
		}
		return nil
	}())
}

func taskGet(env *Env, args []string) int {
	c := newCmd(env, "task get", "ID", "Shows a task: its state, progress, result, executions (newest first) and files.")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if pos[0], err = c.taskRef(cl, pos[0]); err != nil {
			return err
		}
		resp, err := GetTask(env.Ctx, cl.gql, pos[0])
		if err != nil {
			return err
		}
		t := resp.Task
		if t == nil {
			return &apiError{Code: "NOT_FOUND", Message: "task " + pos[0] + " not found"}
		}
		if c.json {
			return writeJSON(env.Stdout, t)
		}
		c.printFields(&t.TaskFields)
		if len(t.Instances) > 0 {
			fmt.Fprintln(env.Stdout, "\nExecutions:")
			tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  #\tSTATUS\tATTEMPT\tWORKER\tSTARTED\tFINISHED\tERROR")
			for _, in := range t.Instances {
				fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s\t%s\n", in.InstanceNo, in.Status, in.Attempt, deref(in.WorkerID),
					when(in.StartedAt), when(in.FinishedAt), strings.TrimSpace(deref((*string)(in.ErrorKind))+" "+deref(in.LastError)))
			}
			tw.Flush()
		}
		if len(t.Artifacts) > 0 {
			fmt.Fprintln(env.Stdout, "\nFiles (taskgraph download ID --kind KIND):")
			tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
			for _, a := range t.Artifacts {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", a.Kind, a.Filename, size(int64(a.Size)))
			}
			tw.Flush()
		}
		return nil
	}())
}

func taskList(env *Env, args []string) int {
	c := newCmd(env, "task list", "", "Lists tasks, newest first. --json prints one task per line.")
	filter := c.filterFlags()
	first := c.fs.Int("first", 20, "tasks to show (at most 500 a page)")
	all := c.fs.Bool("all", false, "every matching task, page after page")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		w, err := filter()
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		page := min(*first, 500)
		if *all {
			page = 500
		}
		var tw *tabwriter.Writer
		if !c.json && !c.quiet {
			tw = tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCODE\tTYPE\tSTATUS\tPROGRESS\tCREATED\tTITLE")
		}
		var after *string
		shown := 0
		for {
			resp, err := ListTasks(env.Ctx, cl.gql, &page, after, &w, []TaskOrder{{Field: "CREATED_AT", Direction: "DESC"}})
			if err != nil {
				return err
			}
			for _, e := range resp.Tasks.Edges {
				if e == nil || e.Node == nil {
					continue
				}
				t := &e.Node.TaskFields
				if c.quiet {
					fmt.Fprintln(env.Stdout, t.Id)
				} else if c.json {
					if err := writeJSON(env.Stdout, e.Node); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Id, t.Code, t.Type, statusText(t), progressText(t), t.CreatedAt.Local().Format("2006-01-02 15:04:05"), t.Title)
				}
				shown++
			}
			pi := resp.Tasks.PageInfo
			if !*all || !pi.HasNextPage || pi.EndCursor == nil {
				if tw != nil {
					tw.Flush()
					if resp.Tasks.TotalCount > shown {
						fmt.Fprintf(env.Stdout, "(%d of %d; --all for every one)\n", shown, resp.Tasks.TotalCount)
					}
				}
				return nil
			}
			after = pi.EndCursor
		}
	}())
}

func taskCancel(env *Env, args []string) int {
	c := newCmd(env, "task cancel", "ID", "Cancels a waiting task at once; a running one is asked to stop and ends CANCELLED when its handler returns.")
	reason := c.fs.String("reason", "", "why, recorded on the task")
	wait := c.fs.Bool("wait", false, "wait until the task ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if pos[0], err = c.taskRef(cl, pos[0]); err != nil {
			return err
		}
		var r *string
		if *reason != "" {
			r = reason
		}
		resp, err := CancelTask(env.Ctx, cl.gql, pos[0], r)
		if err != nil {
			return err
		}
		if err := c.printTask(&resp.CancelTask, &resp.CancelTask.TaskFields); err != nil {
			return err
		}
		if *wait {
			return c.follow(cl, pos[0], false, c.json, c.quiet)
		}
		return nil
	}())
}

func taskRetry(env *Env, args []string) int {
	c := newCmd(env, "task retry", "ID", "Runs a FAILED task again: a new execution; the failed one is kept, with its error.")
	wait := c.fs.Bool("wait", false, "wait until the task ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if pos[0], err = c.taskRef(cl, pos[0]); err != nil {
			return err
		}
		resp, err := RetryTask(env.Ctx, cl.gql, pos[0])
		if err != nil {
			return err
		}
		if err := c.printTask(&resp.RetryTask, &resp.RetryTask.TaskFields); err != nil {
			return err
		}
		if *wait {
			return c.follow(cl, pos[0], false, c.json, c.quiet)
		}
		return nil
	}())
}

func taskWatch(env *Env, args []string) int {
	c := newCmd(env, "task watch", "ID", "Prints a task's changes as they are committed (a live progress bar on a terminal, a line per change otherwise, or JSON lines with --json) and exits when it ends: 0 SUCCESS, 3 FAILED, 4 CANCELLED.")
	followOn := c.fs.Bool("follow", false, "keep watching after the task ends (a retry may run it again), until interrupted")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if pos[0], err = c.taskRef(cl, pos[0]); err != nil {
			return err
		}
		return c.follow(cl, pos[0], *followOn, c.json, c.quiet)
	}())
}

func taskLogs(env *Env, args []string) int {
	c := newCmd(env, "task logs", "ID", "Prints a task's log lines, oldest first; with --follow, then the new ones as they are committed, until interrupted.")
	followOn := c.fs.Bool("follow", false, "keep printing new lines until interrupted")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if pos[0], err = c.taskRef(cl, pos[0]); err != nil {
			return err
		}
		type line struct {
			ID        string    `json:"id"`
			CreatedAt time.Time `json:"createdAt"`
			Level     string    `json:"level"`
			Message   string    `json:"message"`
			// Fields are the line's structured values (rows: 500, file:
			// x.csv), printed after the message as key=value.
			Fields map[string]any `json:"fields,omitempty"`
		}
		print := func(l line) error {
			if c.json {
				return writeJSON(env.Stdout, l)
			}
			_, err := fmt.Fprintf(env.Stdout, "%s %-5s %s%s\n", l.CreatedAt.Local().Format("2006-01-02 15:04:05.000"), l.Level, l.Message, logFields(l.Fields))
			return err
		}
		// Subscribe first, so that no line falls between the pages and
		// the stream; the stream's lines already paged are skipped.
		var stream chan TaskLogAppendedWsResponse
		var subs *sse
		if *followOn {
			subs = cl.subscriptions(env.Ctx)
			defer subs.Close()
			if stream, _, err = TaskLogAppended(env.Ctx, subs, pos[0]); err != nil {
				return err
			}
			defer func() {
				_ = subs.Close()
				for range stream { //nolint:revive // drain until the reader stops
				}
			}()
		}
		seen := map[string]bool{}
		page := 500
		var after *string
		for {
			resp, err := TaskLogs(env.Ctx, cl.gql, pos[0], &page, after)
			if err != nil {
				return err
			}
			if resp.Task == nil {
				return &apiError{Code: "NOT_FOUND", Message: "task " + pos[0] + " not found"}
			}
			for _, e := range resp.Task.Logs.Edges {
				if e == nil || e.Node == nil {
					continue
				}
				seen[e.Node.Id] = true
				if err := print(line{e.Node.Id, e.Node.CreatedAt, string(e.Node.Level), e.Node.Message, fieldsOf(e.Node.Fields)}); err != nil {
					return err
				}
			}
			pi := resp.Task.Logs.PageInfo
			if !pi.HasNextPage || pi.EndCursor == nil {
				break
			}
			after = pi.EndCursor
		}
		if stream == nil {
			return nil
		}
		for {
			select {
			case <-env.Ctx.Done():
				return nil
			case err := <-subs.errs:
				return err
			case m, ok := <-stream:
				if !ok {
					return errors.New("the server ended the log stream")
				}
				if len(m.Errors) > 0 {
					return explain(m.Errors)
				}
				if m.Data == nil {
					continue
				}
				l := m.Data.TaskLogAppended
				if seen[l.Id] {
					continue
				}
				if err := print(line{l.Id, l.CreatedAt, string(l.Level), l.Message, fieldsOf(l.Fields)}); err != nil {
					return err
				}
			}
		}
	}())
}

// filterFlags declares the flags that pick tasks (--status, --type,
// --search, --where) and returns what reads them into a filter.
func (c *cmd) filterFlags() func() (TaskWhereInput, error) {
	status := c.fs.String("status", "", "comma list of states: "+enumWords(AllTaskStatus))
	typ := c.fs.String("type", "", "only tasks of this type")
	search := c.fs.String("search", "", "text in the code, title or business key")
	where := c.fs.String("where", "", `a TaskWhereInput as JSON, e.g. {"ownerIn": ["alice"]} (combined with the flags above)`)
	return func() (TaskWhereInput, error) {
		var w TaskWhereInput
		if *where != "" {
			if err := json.Unmarshal([]byte(*where), &w); err != nil {
				return w, usageErrorf("--where: not a TaskWhereInput: %v", err)
			}
		}
		for _, s := range splitList(*status) {
			st, err := parseEnum("status", s, AllTaskStatus)
			if err != nil {
				return w, err
			}
			w.StatusIn = append(w.StatusIn, st)
		}
		if *typ != "" {
			w.Type = typ
		}
		if *search != "" {
			w.Search = search
		}
		return w, nil
	}
}

// plural is "1 attempt", "3 attempts".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func fieldsOf(m *map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return *m
}

// logFields is a log line's fields as " key=value" words, in key order;
// a value that is not a plain word is JSON.
func logFields(f map[string]any) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v, ok := f[k].(string)
		if !ok || v == "" || strings.ContainsAny(v, " \t\n\"=") {
			j, _ := json.Marshal(f[k])
			v = string(j)
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

// printTask prints a task a mutation returned: JSON, or one line.
func (c *cmd) printTask(v any, t *TaskFields) error {
	if c.quiet {
		_, err := fmt.Fprintln(c.env.Stdout, t.Id)
		return err
	}
	if c.json {
		return writeJSON(c.env.Stdout, v)
	}
	_, err := fmt.Fprintf(c.env.Stdout, "task %s %s %s %s\n", t.Id, t.Code, t.Type, statusText(t))
	return err
}

// printFields prints a task as a two-column table.
func (c *cmd) printFields(t *TaskFields) {
	// A fixed first column: the same task prints the same way whichever
	// rows it has.
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(c.env.Stdout, "%-12s%s\n", k, v)
		}
	}
	row("ID", t.Id)
	row("Code", t.Code)
	row("Type", t.Type)
	row("Title", t.Title)
	row("Status", statusText(t))
	row("Progress", progressText(t))
	row("Owner", t.Owner)
	row("Priority", fmt.Sprint(t.Priority))
	row("Retry", fmt.Sprintf("%s, at most %s", t.RetryPolicy, plural(t.MaxAttempts, "attempt")))
	row("Created", when(&t.CreatedAt))
	row("Finished", when(t.FinishedAt))
	row("Last error", deref(t.LastError))
	if t.Result != nil {
		row("Result", string(*t.Result))
	}
	actions := make([]string, len(t.AvailableActions))
	for i, a := range t.AvailableActions {
		actions[i] = string(a)
	}
	row("Actions", strings.Join(actions, ", "))
}

func statusText(t *TaskFields) string {
	s := string(t.Status)
	if t.ResultStatus != nil && string(*t.ResultStatus) != s {
		s += " (" + string(*t.ResultStatus) + ")"
	}
	if t.CancelRequested && t.Status == "EXECUTING" {
		s += " (cancel requested)"
	}
	return s
}

func progressText(t *TaskFields) string {
	if t.ProgressTotal <= 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", t.ProgressDone, t.ProgressTotal)
}

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// size writes a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
