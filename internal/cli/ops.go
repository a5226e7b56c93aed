package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The operators' commands: what the console's Schedules and Nodes pages
// do, with --json and the exit codes of every command.

const scheduleUsage = `Usage: taskgraph schedule COMMAND [args] [flags]

Commands:
  list                      schedules, with their next slot
  create NAME TYPE          a schedule (--cron EXPR or --every SECONDS; --input JSON, --timezone, --paused;
                            --workflow-file F instead of TYPE: a whole workflow at every slot)
  pause ID, resume ID       stop firing, fire again
  delete ID                 delete a schedule (the tasks it created stay)

taskgraph schedule COMMAND -h shows a command's flags.
`

const nodeUsage = `Usage: taskgraph node COMMAND [args] [flags]

Commands:
  list                      the nodes sharing the database (admins)
  drain ID [--undo]         stop a node claiming work (running executions go on); --undo undrains it
  workers                   the external workers (worker protocol) and what they run (admins)
  drain-worker ID [--undo]  stop an external worker: its claims take nothing and tell it to stop; --undo undrains it

taskgraph node COMMAND -h shows a command's flags.
`

// group dispatches a command's sub-commands, with its usage.
func group(env *Env, name, usage string, args []string, sub map[string]func(*Env, []string) int) int {
	if globals, rest := leadingGlobals(args); len(globals) > 0 && len(rest) > 0 {
		args = afterCommand(rest, globals)
	}
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return ExitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		fmt.Fprint(env.Stdout, usage)
		return ExitOK
	}
	run, ok := sub[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "taskgraph %s: %q is not a command\n\n%s", name, args[0], usage)
		return ExitUsage
	}
	return run(env, args[1:])
}

func runSchedule(env *Env, args []string) int {
	return group(env, "schedule", scheduleUsage, args, map[string]func(*Env, []string) int{
		"list": scheduleList, "create": scheduleCreate, "pause": scheduleAct("pause"),
		"resume": scheduleAct("resume"), "delete": scheduleAct("delete"),
	})
}

func (c *cmd) printSchedules(ss ...*ScheduleFields) error {
	if c.json {
		for _, s := range ss {
			if err := writeJSON(c.env.Stdout, s); err != nil {
				return err
			}
		}
		return nil
	}
	if c.quiet {
		for _, s := range ss {
			fmt.Fprintln(c.env.Stdout, s.Id)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tWHEN\tTYPE\tSTATE\tNEXT")
	for _, s := range ss {
		slots := s.Cron + " (" + s.EffectiveTimezone + ")"
		if s.IntervalSeconds != nil {
			slots = "every " + strconv.Itoa(*s.IntervalSeconds) + "s"
		}
		state := "active"
		if s.Paused {
			state = "paused"
		}
		typ := s.TaskType
		if typ == "" {
			typ = "workflow" // a schedule that creates workflows has no task type
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Id, s.Name, slots, typ, state, when(s.NextFireAt))
	}
	return tw.Flush()
}

func scheduleList(env *Env, args []string) int {
	c := newCmd(env, "schedule list", "", "Lists the schedules one may see, with their next slot. --json prints one schedule per line.")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		var all []*ScheduleFields
		page := 500
		var after *string
		for {
			resp, err := Schedules(env.Ctx, cl.gql, &page, after)
			if err != nil {
				return err
			}
			for _, e := range resp.Schedules.Edges {
				if e != nil && e.Node != nil {
					all = append(all, &e.Node.ScheduleFields)
				}
			}
			pi := resp.Schedules.PageInfo
			if !pi.HasNextPage || pi.EndCursor == nil {
				break
			}
			after = pi.EndCursor
		}
		return c.printSchedules(all...)
	}())
}

func scheduleCreate(env *Env, args []string) int {
	c := newCmd(env, "schedule create", "NAME [TYPE]", "Creates a schedule that creates a task of TYPE (or, with --workflow-file, a whole workflow) at every slot of --cron or --every.")
	cron := c.fs.String("cron", "", `a cron expression: five fields, six with seconds first, or @hourly, @daily...`)
	every := c.fs.Int("every", 0, "a fixed interval in seconds instead of --cron")
	tz := c.fs.String("timezone", "", "the IANA zone --cron is read in (default: the server's)")
	input := c.fs.String("input", "", "the tasks' input as JSON, @FILE or - for stdin")
	title := c.fs.String("title", "", "the tasks' title")
	paused := c.fs.Bool("paused", false, "create it paused")
	wfFile := c.fs.String("workflow-file", "", "create this workflow at every slot instead of a task: JSON as workflow create --file takes, without a key (- for stdin)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 2)
		if err != nil {
			return err
		}
		if (*cron == "") == (*every == 0) {
			return usageErrorf("give --cron or --every (one of them)")
		}
		in := CreateScheduleInput{Name: pos[0]}
		if *wfFile != "" {
			if len(pos) > 1 || *input != "" || *title != "" {
				return usageErrorf("--workflow-file replaces TYPE, --input and --title: give the steps in the file")
			}
			wf, err := readWorkflowFile(env, *wfFile)
			if err != nil {
				return err
			}
			in.Workflow = &wf
		} else {
			if len(pos) < 2 {
				return usageErrorf("give a TYPE, or --workflow-file")
			}
			in.Task = &ScheduleTaskInput{Type: pos[1]}
		}
		if *cron != "" {
			in.Cron = cron
		}
		if *every != 0 {
			in.IntervalSeconds = every
		}
		if *tz != "" {
			in.Timezone = tz
		}
		if *title != "" && in.Task != nil {
			in.Task.Title = title
		}
		if *paused {
			in.Paused = paused
		}
		raw, err := jsonValue(env, "input", *input)
		if err != nil {
			return err
		}
		if raw != nil && in.Task != nil {
			in.Task.Input = &raw
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := CreateSchedule(env.Ctx, cl.gql, in)
		if err != nil {
			return err
		}
		return c.printSchedules(&resp.CreateSchedule.ScheduleFields)
	}())
}

func scheduleAct(verb string) func(*Env, []string) int {
	about := map[string]string{
		"pause":  "Pauses a schedule: no slot fires until it is resumed.",
		"resume": "Resumes a paused schedule from its next slot.",
		"delete": "Deletes a schedule; the tasks it created stay.",
	}[verb]
	return func(env *Env, args []string) int {
		c := newCmd(env, "schedule "+verb, "ID", about)
		return c.finish(func() error {
			pos, err := c.parse(args, 1, 1)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			switch verb {
			case "pause":
				resp, err := PauseSchedule(env.Ctx, cl.gql, pos[0])
				if err != nil {
					return err
				}
				return c.printSchedules(&resp.PauseSchedule.ScheduleFields)
			case "resume":
				resp, err := ResumeSchedule(env.Ctx, cl.gql, pos[0])
				if err != nil {
					return err
				}
				return c.printSchedules(&resp.ResumeSchedule.ScheduleFields)
			default:
				resp, err := DeleteSchedule(env.Ctx, cl.gql, pos[0])
				if err != nil {
					return err
				}
				if c.json {
					return writeJSON(env.Stdout, map[string]string{"deleted": resp.DeleteSchedule})
				}
				_, err = fmt.Fprintf(env.Stdout, "schedule %s deleted\n", resp.DeleteSchedule)
				return err
			}
		}())
	}
}

func runNode(env *Env, args []string) int {
	return group(env, "node", nodeUsage, args, map[string]func(*Env, []string) int{
		"list": nodeList, "drain": nodeDrain, "workers": workerList, "drain-worker": workerDrain,
	})
}

func (c *cmd) printNodes(ns ...*NodeFields) error {
	if c.json {
		for _, n := range ns {
			if err := writeJSON(c.env.Stdout, n); err != nil {
				return err
			}
		}
		return nil
	}
	if c.quiet {
		for _, n := range ns {
			fmt.Fprintln(c.env.Stdout, n.Id)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tHOST\tPID\tROLES\tBUSY\tLEADS\tLAST SEEN")
	for _, n := range ns {
		leads := ""
		if n.Leading {
			leads = "watchdog"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d/%d\t%s\t%s\n", n.Id, n.State, n.Host, n.Pid, joinWords(n.Roles), n.Busy, n.Total, leads, when(&n.LastSeenAt))
	}
	return tw.Flush()
}

func nodeList(env *Env, args []string) int {
	c := newCmd(env, "node list", "", "Lists the nodes sharing the database, by name (admins). --json prints one node per line.")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := ClusterNodes(env.Ctx, cl.gql)
		if err != nil {
			return err
		}
		ns := make([]*NodeFields, len(resp.ClusterNodes))
		for i := range resp.ClusterNodes {
			ns[i] = &resp.ClusterNodes[i].NodeFields
		}
		return c.printNodes(ns...)
	}())
}

func nodeDrain(env *Env, args []string) int {
	c := newCmd(env, "node drain", "ID", "Drains a node: it stops claiming work at its next refresh; what it runs goes on (admins; audited).")
	undo := c.fs.Bool("undo", false, "undrain it: it claims work again")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := DrainClusterNode(env.Ctx, cl.gql, pos[0], !*undo)
		if err != nil {
			return err
		}
		return c.printNodes(&resp.DrainClusterNode.NodeFields)
	}())
}

func joinWords(ws []string) string { return strings.Join(ws, ",") }

func (c *cmd) printWorkers(ws ...*WorkerFields) error {
	if c.json {
		for _, w := range ws {
			if err := writeJSON(c.env.Stdout, w); err != nil {
				return err
			}
		}
		return nil
	}
	if c.quiet {
		for _, w := range ws {
			fmt.Fprintln(c.env.Stdout, w.Id)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tTENANT\tLANGUAGE\tTYPES\tRUNNING\tLAST SEEN")
	for _, w := range ws {
		lang := strings.TrimSpace(w.Language + " " + w.Version)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", w.Id, w.Name, w.State, w.Tenant, lang, joinWords(w.Types), len(w.RunningExecutions), when(&w.LastSeenAt))
	}
	return tw.Flush()
}

func workerList(env *Env, args []string) int {
	c := newCmd(env, "node workers", "", "Lists the external workers (the worker protocol's), by tenant and name, with what each runs (admins). --json prints one worker per line.")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := ExternalWorkers(env.Ctx, cl.gql)
		if err != nil {
			return err
		}
		ws := make([]*WorkerFields, len(resp.ExternalWorkers))
		for i := range resp.ExternalWorkers {
			ws[i] = &resp.ExternalWorkers[i].WorkerFields
		}
		return c.printWorkers(ws...)
	}())
}

func workerDrain(env *Env, args []string) int {
	c := newCmd(env, "node drain-worker", "ID", "Drains an external worker: its claims take nothing and tell it to stop; what it runs goes on (admins; audited).")
	undo := c.fs.Bool("undo", false, "undrain it: its claims take work again")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := DrainWorker(env.Ctx, cl.gql, pos[0], !*undo)
		if err != nil {
			return err
		}
		return c.printWorkers(&resp.DrainWorker.WorkerFields)
	}())
}
