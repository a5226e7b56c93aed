package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// The bulk command: the console's bulk actions over a filter. A preview
// says how many tasks the filter matches and how many the action may act
// on; the action must confirm the number matched, and runs in the
// background as a task of its own, followed like any other.

const bulkUsage = `Usage: taskgraph bulk COMMAND [flags]

Commands:
  preview ACTION            how many tasks the filter matches, by state, and which the action (cancel, retry) may take
  cancel --confirm N        cancel every task the filter matches (N: the preview's number matched)
  retry --confirm N         retry every task the filter matches

The filter: --status, --type, --search, --where (as task list).
taskgraph bulk COMMAND -h shows a command's flags.
`

func runBulk(env *Env, args []string) int {
	return group(env, "bulk", bulkUsage, args, map[string]func(*Env, []string) int{
		"preview": bulkPreview, "cancel": bulkAct(TaskAction_CANCEL), "retry": bulkAct(TaskAction_RETRY),
	})
}

// bulkActions are the actions a bulk command takes (a workflow's retry is
// not one: it acts on a workflow, not on a filter's tasks).
var bulkActions = []TaskAction{TaskAction_CANCEL, TaskAction_RETRY}

func bulkPreview(env *Env, args []string) int {
	c := newCmd(env, "bulk preview", "ACTION", "Says how many tasks the filter matches, by state, and how many the action ("+strings.ToLower(enumWords(bulkActions))+") may act on.")
	filter := c.filterFlags()
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		action, err := parseEnum("action", pos[0], bulkActions)
		if err != nil {
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
		resp, err := BulkPreview(env.Ctx, cl.gql, action, w)
		if err != nil {
			return err
		}
		p := resp.BulkPreview
		if c.json {
			return writeJSON(env.Stdout, p)
		}
		if c.quiet {
			_, err := fmt.Fprintln(env.Stdout, p.Matched)
			return err
		}
		fmt.Fprintf(env.Stdout, "%d matched: %s would take %d, %d refused by their state\n", p.Matched, strings.ToLower(string(action)), p.Accepted, p.Refused)
		tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STATUS\tCOUNT\tTAKEN")
		for _, b := range p.ByStatus {
			fmt.Fprintf(tw, "%s\t%d\t%t\n", b.Status, b.Count, b.Accepted)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err = fmt.Fprintf(env.Stdout, "to go on: taskgraph bulk %s --confirm %d (with the same filter)\n", strings.ToLower(string(action)), p.Matched)
		return err
	}())
}

func bulkAct(action TaskAction) func(*Env, []string) int {
	verb := strings.ToLower(string(action))
	return func(env *Env, args []string) int {
		c := newCmd(env, "bulk "+verb, "", "Submits "+verb+" of every task the filter matches, in the background (a task of its own: its id is printed); --confirm must be the number matched now, as bulk preview says.")
		filter := c.filterFlags()
		confirm := c.fs.Int("confirm", -1, "the number of tasks the filter matches (bulk preview's); another number is refused (CONFLICT) and nothing is done")
		reason := c.fs.String("reason", "", "why (cancel only), recorded on each task")
		key := c.fs.String("idempotency-key", "", "submitting again with this key returns the first submission's task")
		wait := c.fs.Bool("wait", false, "follow the bulk task until it ends; the exit code says how")
		return c.finish(func() error {
			if _, err := c.parse(args, 0, 0); err != nil {
				return err
			}
			if *confirm < 0 {
				return usageErrorf("missing --confirm N: run taskgraph bulk preview %s with the same filter, and confirm the number matched", verb)
			}
			if *reason != "" && action != TaskAction_CANCEL {
				return usageErrorf("--reason is for cancel only")
			}
			w, err := filter()
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var r, k *string
			if *reason != "" {
				r = reason
			}
			if *key != "" {
				k = key
			}
			resp, err := BulkTaskAction(env.Ctx, cl.gql, action, w, r, *confirm, k)
			if err != nil {
				return err
			}
			t := &resp.BulkTaskAction
			if *wait {
				if !c.json && !c.quiet {
					fmt.Fprintf(env.Stderr, "task %s %s %s\n", t.Id, t.Code, t.Status)
				}
				return c.follow(cl, t.Id, false, c.json, c.quiet)
			}
			return c.printTask(t, &t.TaskFields)
		}())
	}
}
