package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The workflow commands: what the console's Workflows pages show and do.

const workflowUsage = `Usage: taskgraph workflow COMMAND [args] [flags]

Commands:
  create --file F   create a workflow from a JSON file (a CreateWorkflowInput; - for stdin)
  get ID            a workflow, its status, progress and steps (with what each waits for)
  list              workflows, newest first (--search, --owner, --all)
  watch ID          follow a workflow's steps until it ends (exit 0 SUCCESS, 3 FAILED, 4 CANCELLED)
  cancel ID         cancel every step not finished yet
  retry ID          re-run its FAILED and CANCELLED steps (those that succeeded are kept)

ID is a workflow's id or its code (WF-20261202-7K3Q9D2M).
taskgraph workflow COMMAND -h shows a command's flags.
Exit codes: 0 done (the workflow succeeded), 1 failure, 2 usage error, 3 the workflow FAILED, 4 it was CANCELLED.
`

func runWorkflow(env *Env, args []string) int {
	return group(env, "workflow", workflowUsage, args, map[string]func(*Env, []string) int{
		"create": workflowCreate, "get": workflowGet, "list": workflowList,
		"watch": workflowWatch, "cancel": workflowCancel, "retry": workflowRetry,
	})
}

// workflowRef is the id of the workflow ref names: an id (digits) as it
// is, or a workflow's code, in any case, looked up.
func (c *cmd) workflowRef(cl *client, ref string) (string, error) {
	if strings.Trim(ref, "0123456789") == "" {
		return ref, nil
	}
	code := strings.ToUpper(ref)
	one := 1
	resp, err := ListWorkflows(c.env.Ctx, cl.gql, &one, nil, &WorkflowWhereInput{Code: &code})
	if err != nil {
		return "", err
	}
	for _, e := range resp.Workflows.Edges {
		if e != nil && e.Node != nil {
			return e.Node.Id, nil
		}
	}
	return "", &apiError{Code: "NOT_FOUND", Message: "workflow " + ref + " not found (neither an id nor a workflow's code)"}
}

// workflowOutcome is the exit of a command that waited for a workflow.
func workflowOutcome(w *WorkflowFields) error {
	switch w.Status {
	case "FAILED":
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("workflow %s FAILED (%d/%d steps succeeded)", w.Id, w.StepsDone, w.StepCount)}
	case "CANCELLED":
		return &exitError{code: ExitCancelled, msg: fmt.Sprintf("workflow %s was CANCELLED (%d/%d steps succeeded)", w.Id, w.StepsDone, w.StepCount)}
	}
	return nil
}

// workflowLine is a workflow in one line, for people.
func workflowLine(w *WorkflowFields) string {
	return fmt.Sprintf("workflow %s %s %s %d/%d steps", w.Id, w.Code, w.Status, w.StepsDone, w.StepCount)
}

// printWorkflow prints a workflow a mutation returned: JSON, its id, or
// one line.
func (c *cmd) printWorkflow(v any, w *WorkflowFields) error {
	var err error
	switch {
	case c.quiet:
		_, err = fmt.Fprintln(c.env.Stdout, w.Id)
	case c.json:
		err = writeJSON(c.env.Stdout, v)
	default:
		_, err = fmt.Fprintln(c.env.Stdout, workflowLine(w))
	}
	return err
}

// readWorkflowFile reads a CreateWorkflowInput from a JSON file (- for
// stdin); an unknown field is an error, not silently dropped.
func readWorkflowFile(env *Env, name string) (CreateWorkflowInput, error) {
	var in CreateWorkflowInput
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(env.Stdin)
	} else {
		b, err = os.ReadFile(env.path(name))
	}
	if err != nil {
		return in, usageErrorf("--file: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, usageErrorf("--file %s: not a workflow (a JSON CreateWorkflowInput: {\"title\": ..., \"steps\": [{\"key\": \"a\", \"type\": \"noop\", \"dependsOn\": [...]}]}): %v", name, err)
	}
	if dec.More() {
		return in, usageErrorf("--file %s: more than one JSON document", name)
	}
	return in, nil
}

func workflowCreate(env *Env, args []string) int {
	c := newCmd(env, "workflow create", "", "Creates a workflow and all its steps in one transaction, from a JSON file: {\"title\": \"nightly\", \"key\": \"nightly-2026-12-02\", \"onParentFailure\": \"CANCEL_DEPENDENTS\", \"steps\": [{\"key\": \"a\", \"type\": \"noop\"}, {\"key\": \"b\", \"type\": \"noop\", \"dependsOn\": [\"a\"]}]}. The same key again returns the workflow created first.")
	file := c.fs.String("file", "", "the workflow as JSON (- for stdin)")
	key := c.fs.String("key", "", "the workflow's idempotency key (instead of the file's)")
	title := c.fs.String("title", "", "its title (instead of the file's)")
	policy := c.fs.String("on-parent-failure", "", "what a failed parent does to the steps that name no policy: "+enumWords(AllParentFailurePolicy)+" (instead of the file's)")
	watch := c.fs.Bool("watch", false, "then follow it until it ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		if *file == "" {
			return usageErrorf("missing --file")
		}
		in, err := readWorkflowFile(env, *file)
		if err != nil {
			return err
		}
		if *key != "" {
			in.Key = key
		}
		if *title != "" {
			in.Title = title
		}
		if *policy != "" {
			p, err := parseEnum("on-parent-failure", *policy, AllParentFailurePolicy)
			if err != nil {
				return err
			}
			in.OnParentFailure = &p
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := CreateWorkflow(env.Ctx, cl.gql, in)
		if err != nil {
			return err
		}
		w := &resp.CreateWorkflow
		if err := c.printWorkflow(w, &w.WorkflowFields); err != nil {
			return err
		}
		if *watch {
			return c.followWorkflow(cl, w.Id, &w.WorkflowFields)
		}
		return nil
	}())
}

func workflowGet(env *Env, args []string) int {
	c := newCmd(env, "workflow get", "ID", "Shows a workflow: its status (derived from its steps), its progress, and each step with the steps it waits for.")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		id, err := c.workflowRef(cl, pos[0])
		if err != nil {
			return err
		}
		resp, err := WorkflowSteps(env.Ctx, cl.gql, id)
		if err != nil {
			return err
		}
		w := resp.Workflow
		if w == nil {
			return &apiError{Code: "NOT_FOUND", Message: "workflow " + id + " not found"}
		}
		if c.json {
			return writeJSON(env.Stdout, w)
		}
		row := func(k, v string) {
			if v != "" {
				fmt.Fprintf(env.Stdout, "%-19s%s\n", k, v)
			}
		}
		row("ID", w.Id)
		row("Code", w.Code)
		row("Title", w.Title)
		row("Status", string(w.Status))
		row("Progress", fmt.Sprintf("%d/%d steps succeeded", w.StepsDone, w.StepCount))
		row("Owner", w.Owner)
		row("On parent failure", string(w.OnParentFailure))
		row("Created", when(&w.CreatedAt))
		actions := make([]string, len(w.AvailableActions))
		for i, a := range w.AvailableActions {
			actions[i] = string(a)
		}
		row("Actions", strings.Join(actions, ", "))
		fmt.Fprintln(env.Stdout, "\nSteps:")
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tTASK\tTYPE\tSTATUS\tWAITS FOR\tERROR")
		for _, s := range w.Steps {
			var parents []string
			for _, p := range s.Parents {
				parents = append(parents, deref(p.StepKey))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", deref(s.StepKey), s.Id, s.Type, s.Status, strings.Join(parents, ","), deref(s.LastError))
		}
		return tw.Flush()
	}())
}

func workflowList(env *Env, args []string) int {
	c := newCmd(env, "workflow list", "", "Lists workflows, newest first, with their status and progress. --json prints one workflow per line.")
	first := c.fs.Int("first", 20, "workflows to show (at most 500 a page)")
	all := c.fs.Bool("all", false, "every matching workflow, page after page")
	search := c.fs.String("search", "", "only those whose code or title contains this (any case)")
	owner := c.fs.String("owner", "", "only this owner's")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		var w WorkflowWhereInput
		if s := strings.TrimSpace(*search); s != "" {
			w.Or = []WorkflowWhereInput{{CodeContainsFold: &s}, {TitleContainsFold: &s}}
		}
		if *owner != "" {
			w.Owner = owner
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		page := min(max(*first, 1), 500)
		if *all {
			page = 500
		}
		var tw *tabwriter.Writer
		if !c.json && !c.quiet {
			tw = tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCODE\tSTATUS\tSTEPS\tCREATED\tTITLE")
		}
		var after *string
		shown := 0
		for {
			resp, err := ListWorkflows(env.Ctx, cl.gql, &page, after, &w)
			if err != nil {
				return err
			}
			for _, e := range resp.Workflows.Edges {
				if e == nil || e.Node == nil {
					continue
				}
				n := &e.Node.WorkflowFields
				switch {
				case c.quiet:
					fmt.Fprintln(env.Stdout, n.Id)
				case c.json:
					if err := writeJSON(env.Stdout, e.Node); err != nil {
						return err
					}
				default:
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", n.Id, n.Code, n.Status, n.StepsDone, n.StepCount, when(&n.CreatedAt), n.Title)
				}
				shown++
			}
			pi := resp.Workflows.PageInfo
			if !*all || !pi.HasNextPage || pi.EndCursor == nil {
				if tw != nil {
					tw.Flush()
					if resp.Workflows.TotalCount > shown {
						fmt.Fprintf(env.Stdout, "(%d of %d; --all for every one)\n", shown, resp.Workflows.TotalCount)
					}
				}
				return nil
			}
			after = pi.EndCursor
		}
	}())
}

func workflowCancel(env *Env, args []string) int {
	c := newCmd(env, "workflow cancel", "ID", "Cancels every step not finished yet (a running one is asked to stop); the steps that succeeded stay.")
	reason := c.fs.String("reason", "", "why, recorded on the steps")
	wait := c.fs.Bool("wait", false, "then follow it until it ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		id, err := c.workflowRef(cl, pos[0])
		if err != nil {
			return err
		}
		var r *string
		if *reason != "" {
			r = reason
		}
		resp, err := CancelWorkflow(env.Ctx, cl.gql, id, r)
		if err != nil {
			return err
		}
		if err := c.printWorkflow(&resp.CancelWorkflow, &resp.CancelWorkflow.WorkflowFields); err != nil {
			return err
		}
		if *wait {
			return c.followWorkflow(cl, id, &resp.CancelWorkflow.WorkflowFields)
		}
		return nil
	}())
}

func workflowRetry(env *Env, args []string) int {
	c := newCmd(env, "workflow retry", "ID", "Re-runs a workflow's FAILED and CANCELLED steps; the steps that succeeded are kept, not run again. Each re-run step waits again for its parents re-run with it.")
	reason := c.fs.String("reason", "", "why, recorded in the audit log")
	wait := c.fs.Bool("wait", false, "then follow it until it ends; the exit code says how (0 SUCCESS, 3 FAILED, 4 CANCELLED)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		id, err := c.workflowRef(cl, pos[0])
		if err != nil {
			return err
		}
		var r *string
		if *reason != "" {
			r = reason
		}
		resp, err := RetryWorkflow(env.Ctx, cl.gql, id, r)
		if err != nil {
			return err
		}
		if err := c.printWorkflow(&resp.RetryWorkflow, &resp.RetryWorkflow.WorkflowFields); err != nil {
			return err
		}
		if *wait {
			return c.followWorkflow(cl, id, &resp.RetryWorkflow.WorkflowFields)
		}
		return nil
	}())
}

func workflowWatch(env *Env, args []string) int {
	c := newCmd(env, "workflow watch", "ID", "Prints a workflow's step changes as they are committed, and the workflow's status and progress after them (a line each, or JSON lines with --json: {\"step\": ...} and {\"workflow\": ...}), and exits when the workflow ends: 0 SUCCESS, 3 FAILED, 4 CANCELLED. A workflow whose failed step holds its dependents (WAIT) has not ended: it goes on once the step is retried.")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		id, err := c.workflowRef(cl, pos[0])
		if err != nil {
			return err
		}
		return c.followWorkflow(cl, id, nil)
	}())
}

// workflowReread is the shortest time between two reads of a workflow's
// status while its steps change, plus rereadPerStep for each of its steps
// (a read derives the status from every step: 10,000 steps are read every
// 1.25 s at most). A burst of step events is one read per interval, and
// the last event is always followed by one.
const (
	workflowReread = 250 * time.Millisecond
	rereadPerStep  = 100 * time.Microsecond
)

// workflowSettle is when, after subscribing, the steps are read once
// more: the stream's headers arrive before the server has registered it,
// so a change committed in between has no event; a read after it has.
const workflowSettle = 500 * time.Millisecond

// followWorkflow prints the changes of workflow id's steps, and the
// workflow after them, until it ends; it returns its outcome. announced
// is the workflow as already printed (nil: nothing printed yet).
//
// The workflow has ended when the server says so (its status is derived
// from its steps) and every step's last change seen here is an end too:
// the read of the workflow can come before the events of the changes it
// counted, which are printed before watch exits.
func (c *cmd) followWorkflow(cl *client, id string, announced *WorkflowFields) error {
	ctx := c.env.Ctx
	var last WorkflowFields
	if announced != nil {
		last = *announced
	}
	steps := map[string]StepFields{}
	open := 0 // steps whose last change seen is not an end
	held := false
	printWF := func(w *WorkflowFields) error {
		switch {
		case c.quiet:
			return nil
		case c.json:
			return writeJSON(c.env.Stdout, map[string]any{"workflow": w})
		}
		_, err := fmt.Fprintln(c.env.Stdout, time.Now().Format("15:04:05")+" "+workflowLine(w))
		return err
	}
	// show prints the workflow when it changed; its end is held until the
	// steps' events have caught up with it, so that it is the last line.
	show := func(w *WorkflowFields) error {
		if w.Status == last.Status && w.StepsDone == last.StepsDone && w.StepCount == last.StepCount {
			return nil
		}
		last = *w
		if terminal(w.Status) && open > 0 {
			held = true
			return nil
		}
		return printWF(w)
	}
	finish := func() error {
		if held {
			if err := printWF(&last); err != nil {
				return err
			}
		}
		return workflowOutcome(&last)
	}
	// step records a step's state, printing it when it is news.
	step := func(s *StepFields, print bool) error {
		cur, seen := steps[s.Id]
		if seen && s.Version <= cur.Version {
			return nil
		}
		if seen && !terminal(cur.Status) {
			open--
		}
		if !terminal(s.Status) {
			open++
		}
		steps[s.Id] = *s
		if print {
			return c.stepLine(s)
		}
		return nil
	}
	readSteps := func(print bool) error {
		r, err := WorkflowStepStates(ctx, cl.gql, id)
		if err != nil {
			return err
		}
		if r.Workflow == nil {
			return &apiError{Code: "NOT_FOUND", Message: "workflow " + id + " not found"}
		}
		for i := range r.Workflow.Steps {
			if err := step(&r.Workflow.Steps[i].StepFields, print); err != nil {
				return err
			}
		}
		return show(&r.Workflow.WorkflowFields)
	}
	if err := readSteps(false); err != nil {
		return err
	}
	ended := func() bool { return terminal(last.Status) && open == 0 }
	if ended() {
		return finish()
	}
	// The steps' id range rather than their list: the server matches each
	// change against the filter, and a list of 10,000 ids is 10,000
	// comparisons a change. Steps are created together: the few other
	// tasks in the range are dropped here.
	var lo, hi int64
	for sid := range steps {
		n, err := strconv.ParseInt(sid, 10, 64)
		if err != nil {
			return fmt.Errorf("step id %q: %w", sid, err)
		}
		if lo == 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	from, to, isStep := strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10), true
	subs := cl.subscriptions(ctx)
	stream, _, err := StepUpdated(ctx, subs, &TaskWhereInput{IdGTE: &from, IdLTE: &to, StepKeyNotNil: &isStep})
	if err != nil {
		return err
	}
	defer func() {
		_ = subs.Close()
		for range stream { //nolint:revive // drain until the reader stops
		}
	}()
	var lastRead time.Time
	every := workflowReread + time.Duration(len(steps))*rereadPerStep
	var reread <-chan time.Time
	settle := time.After(workflowSettle)
	check := func() error {
		lastRead = time.Now()
		r, err := GetWorkflow(ctx, cl.gql, id)
		if err != nil {
			return err
		}
		if r.Workflow == nil {
			return &apiError{Code: "NOT_FOUND", Message: "workflow " + id + " not found"}
		}
		return show(&r.Workflow.WorkflowFields)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-subs.errs:
			return err
		case <-settle:
			lastRead = time.Now()
			err = readSteps(true)
		case <-reread:
			reread = nil
			err = check()
		case m, ok := <-stream:
			if !ok {
				return errors.New("the server ended the subscription before the workflow ended")
			}
			if len(m.Errors) > 0 {
				return explain(m.Errors)
			}
			if m.Data == nil {
				continue
			}
			if _, ours := steps[m.Data.TaskUpdated.Id]; !ours {
				continue
			}
			err = step(&m.Data.TaskUpdated.StepFields, true)
			if reread == nil {
				reread = time.After(max(0, every-time.Since(lastRead)))
			}
		}
		if err != nil {
			return err
		}
		if ended() {
			return finish()
		}
	}
}

// stepLine prints a step's change.
func (c *cmd) stepLine(s *StepFields) error {
	switch {
	case c.quiet:
		return nil
	case c.json:
		return writeJSON(c.env.Stdout, map[string]any{"step": s})
	}
	line := fmt.Sprintf("%s step %s (task %s %s) %s", time.Now().Format("15:04:05"), deref(s.StepKey), s.Id, s.Code, s.Status)
	if e := deref(s.LastError); e != "" && s.Status != "SUCCESS" {
		line += ": " + e
	}
	_, err := fmt.Fprintln(c.env.Stdout, line)
	return err
}
