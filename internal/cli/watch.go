package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// terminal reports whether a task in status s has ended, or waits for a
// person: no automatic execution follows (a FAILED task may still be
// retried by hand, one in REVIEW_PENDING is decided by a reviewer).
func terminal(s TaskStatus) bool {
	return s == "SUCCESS" || s == "FAILED" || s == "CANCELLED" || s == "REVIEW_PENDING"
}

// outcome is the exit of a command that waited for a task.
func outcome(t *TaskFields) error {
	switch t.Status {
	case "SUCCESS":
		return nil
	case "FAILED":
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("task %s FAILED: %s", t.Id, deref(t.LastError))}
	case "CANCELLED":
		return &exitError{code: ExitCancelled, msg: fmt.Sprintf("task %s was CANCELLED", t.Id)}
	case "REVIEW_PENDING":
		return &exitError{code: ExitReview, msg: fmt.Sprintf("task %s waits for review: %s (taskgraph task review approve|edit|accept|reject %s)", t.Id, deref(t.LastError), t.Id)}
	}
	return nil
}

// follow prints task id's changes until it ends (or, with followOn, until
// interrupted) and returns its outcome. The subscription's first message
// is the task's current state, so a task that has already ended returns
// at once.
func (c *cmd) follow(cl *client, id string, followOn, asJSON, quiet bool) error {
	subs := cl.subscriptions(c.env.Ctx)
	stream, _, err := TaskUpdated(c.env.Ctx, subs, &id, nil)
	if err != nil {
		return err
	}
	defer func() {
		_ = subs.Close()
		for range stream { //nolint:revive // drain until the reader stops
		}
	}()
	bar := newProgress(c.env.Stdout, c.env.Terminal && !asJSON)
	defer bar.done()
	for {
		select {
		case <-c.env.Ctx.Done():
			return c.env.Ctx.Err()
		case err := <-subs.errs:
			return err
		case m, ok := <-stream:
			if !ok {
				return errors.New("the server ended the subscription before the task ended")
			}
			if len(m.Errors) > 0 {
				return explain(m.Errors)
			}
			if m.Data == nil {
				continue
			}
			t := &m.Data.TaskUpdated.TaskFields
			switch {
			case quiet:
			case asJSON:
				if err := writeJSON(c.env.Stdout, &m.Data.TaskUpdated); err != nil {
					return err
				}
			default:
				bar.task(t)
			}
			if terminal(t.Status) && !followOn {
				bar.done()
				return outcome(t)
			}
		}
	}
}

// runWatch is "taskgraph watch": task watch, and the older form with
// -id, or -where to watch every task matching a filter.
func runWatch(env *Env, args []string) int {
	c := newCmd(env, "watch", "[ID]", "Prints a task's changes as they are committed, like taskgraph task watch, and exits when it ends (0 SUCCESS, 3 FAILED, 4 CANCELLED); with --where, the changes of every task matching a filter, until interrupted.")
	idFlag := c.fs.String("id", "", "the task (or give it as the argument)")
	where := c.fs.String("where", "", `watch the tasks matching a TaskWhereInput given as JSON, e.g. {"type":"noop"}`)
	followOn := c.fs.Bool("follow", false, "keep watching after the task ends, until interrupted")
	return c.finish(func() error {
		pos, err := c.parse(args, 0, 1)
		if err != nil {
			return err
		}
		id := *idFlag
		if len(pos) == 1 {
			id = pos[0]
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if id, err = c.taskRef(cl, id); err != nil {
			return err
		}
		switch {
		case id != "" && *where != "":
			return usageErrorf("an ID or --where, not both")
		case id != "":
			return c.follow(cl, id, *followOn, c.json, c.quiet)
		case *where == "":
			return usageErrorf("missing ID (or --where)")
		}
		var w TaskWhereInput
		if err := json.Unmarshal([]byte(*where), &w); err != nil {
			return usageErrorf("--where: not a TaskWhereInput: %v", err)
		}
		subs := cl.subscriptions(env.Ctx)
		stream, _, err := TaskUpdated(env.Ctx, subs, nil, &w)
		if err != nil {
			return err
		}
		defer func() {
			_ = subs.Close()
			for range stream { //nolint:revive // drain until the reader stops
			}
		}()
		for {
			select {
			case <-env.Ctx.Done():
				return nil
			case err := <-subs.errs:
				return err
			case m, ok := <-stream:
				if !ok {
					return errors.New("the server ended the subscription")
				}
				if len(m.Errors) > 0 {
					return explain(m.Errors)
				}
				if m.Data == nil {
					continue
				}
				if c.json {
					err = writeJSON(env.Stdout, &m.Data.TaskUpdated)
				} else {
					err = changeLine(env.Stdout, &m.Data.TaskUpdated.TaskFields)
				}
				if err != nil {
					return err
				}
			}
		}
	}())
}

// changeLine is one change, for people, when the output is not a terminal.
func changeLine(w io.Writer, t *TaskFields) error {
	parts := []string{time.Now().Format("15:04:05"), "task " + t.Id, t.Code, statusText(t)}
	if p := progressText(t); p != "" {
		parts = append(parts, p)
	}
	if deref(t.LastError) != "" && t.Status != "SUCCESS" {
		parts = append(parts, *t.LastError)
	}
	_, err := fmt.Fprintln(w, strings.Join(parts, " "))
	return err
}

// progress shows a task's (or an upload's) progress: a bar redrawn in
// place on a terminal, or a line per change otherwise.
type progress struct {
	w    io.Writer
	live bool
	last string
	drew bool
}

func newProgress(w io.Writer, live bool) *progress { return &progress{w: w, live: live} }

// task shows a task's state.
func (p *progress) task(t *TaskFields) {
	if !p.live {
		line := statusText(t) + " " + progressText(t)
		if line == p.last {
			return
		}
		p.last = line
		_ = changeLine(p.w, t)
		return
	}
	label := fmt.Sprintf("task %s %s", t.Id, statusText(t))
	if deref(t.LastError) != "" && t.Status != "SUCCESS" {
		label += ": " + *t.LastError
	}
	p.draw(int64(t.ProgressDone), int64(t.ProgressTotal), label, "")
	if terminal(t.Status) {
		p.done()
	}
}

// bytes shows an upload's progress.
func (p *progress) bytes(done, total int64, label string) {
	if !p.live {
		// Plain lines: at the start and the end only.
		if done == 0 || done == total {
			line := fmt.Sprintf("%s %s/%s", label, size(done), size(total))
			if line != p.last {
				p.last = line
				fmt.Fprintln(p.w, line)
			}
		}
		return
	}
	p.draw(done, total, label, fmt.Sprintf(" %s/%s", size(done), size(total)))
}

const barWidth = 30

func (p *progress) draw(done, total int64, label, counts string) {
	bar := strings.Repeat("·", barWidth)
	pct := ""
	if total > 0 {
		n := int(min(done, total) * barWidth / total)
		bar = strings.Repeat("█", n) + strings.Repeat("·", barWidth-n)
		pct = fmt.Sprintf(" %3d%%", min(done, total)*100/total)
		if counts == "" {
			counts = fmt.Sprintf(" %d/%d", done, total)
		}
	}
	// \r and erase-line: the bar is redrawn in place.
	fmt.Fprintf(p.w, "\r\033[K[%s]%s%s %s", bar, pct, counts, label)
	p.drew = true
}

// done ends a live bar's line.
func (p *progress) done() {
	if p.live && p.drew {
		fmt.Fprintln(p.w)
		p.drew = false
	}
}
