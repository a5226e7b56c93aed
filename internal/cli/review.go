package cli

import (
	"fmt"
)

const reviewUsage = `Usage: taskgraph task review DECISION ID [flags]

Decisions on a task waiting for review (REVIEW_PENDING):
  approve ID     run it again with the same input (--reason optional)
  edit ID        run it again with an edited input: --input-file FILE (JSON), --reason required
  accept ID      end it SUCCESS as it is, with its partial result (--reason optional)
  reject ID      end it FAILED (--reason required)

Each decision is audited with who decided and why. With a four-eyes review,
the task's submitter may not decide (exit 1, FORBIDDEN); a task decided by
someone else first is exit 1, INVALID_TRANSITION. --wait waits for a retried
task to end (exit codes as task watch's: 0, 3, 4, or 5 when it waits for
review again).
`

func taskReview(env *Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		out, code := env.Stderr, ExitUsage
		if len(args) > 0 {
			out, code = env.Stdout, ExitOK
		}
		fmt.Fprint(out, reviewUsage)
		return code
	}
	decision := args[0]
	switch decision {
	case "approve", "edit", "accept", "reject":
	default:
		fmt.Fprintf(env.Stderr, "taskgraph task review: %q is not a decision\n\n%s", decision, reviewUsage)
		return ExitUsage
	}
	c := newCmd(env, "task review "+decision, "ID", map[string]string{
		"approve": "Approves a task waiting for review: it runs again with the same input.",
		"edit":    "Runs a task waiting for review again with the input in --input-file, validated by its type's schema and kept as a new input version.",
		"accept":  "Accepts a task waiting for review as it is: it ends SUCCESS with its partial result.",
		"reject":  "Rejects a task waiting for review: it ends FAILED.",
	}[decision])
	reason := c.fs.String("reason", "", "why (required to edit or reject); audited, masked")
	var inputFile *string
	if decision == "edit" {
		inputFile = c.fs.String("input-file", "", "the edited input, a JSON file (- for stdin)")
	}
	wait := c.fs.Bool("wait", false, "wait until the task ends (or waits for review again); the exit code says how")
	return c.finish(func() error {
		pos, err := c.parse(args[1:], 1, 1)
		if err != nil {
			return err
		}
		if (decision == "edit" || decision == "reject") && *reason == "" {
			return usageErrorf("--reason is required to %s", decision)
		}
		var input []byte
		if decision == "edit" {
			if *inputFile == "" {
				return usageErrorf("--input-file is required to edit")
			}
			v := "@" + *inputFile
			if *inputFile == "-" {
				v = "-"
			}
			raw, err := jsonValue(env, "input-file", v)
			if err != nil {
				return err
			}
			input = raw
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if pos[0], err = c.taskRef(cl, pos[0]); err != nil {
			return err
		}
		var t *TaskFields
		switch decision {
		case "approve":
			resp, err := ApproveReview(env.Ctx, cl.gql, pos[0], optional(*reason))
			if err != nil {
				return err
			}
			t = &resp.ApproveReview.TaskFields
		case "edit":
			resp, err := EditAndRetry(env.Ctx, cl.gql, pos[0], input, *reason)
			if err != nil {
				return err
			}
			t = &resp.EditAndRetry.TaskFields
		case "accept":
			resp, err := AcceptReview(env.Ctx, cl.gql, pos[0], optional(*reason))
			if err != nil {
				return err
			}
			t = &resp.AcceptReview.TaskFields
		case "reject":
			resp, err := RejectReview(env.Ctx, cl.gql, pos[0], *reason)
			if err != nil {
				return err
			}
			t = &resp.RejectReview.TaskFields
		}
		if err := c.printTask(t, t); err != nil {
			return err
		}
		if *wait {
			return c.follow(cl, pos[0], false, c.json, c.quiet)
		}
		return nil
	}())
}

// optional is s, or nil when it is empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
