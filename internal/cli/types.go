package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The type command: the console's Types page (flow control per task type).

const typeUsage = `Usage: taskgraph type COMMAND [args] [flags]

Commands:
  list                      every task type's cap, rate, pause and load
  pause TYPE [--until T]    stop every node starting TYPE (until resumed, or until T: RFC 3339)
  resume TYPE               start TYPE again
  cap TYPE N|none           at most N instances of TYPE running at once, across all nodes
  rate TYPE N|none [--per SECONDS]
                            at most N starts of TYPE in any window of --per seconds (default 1)

taskgraph type COMMAND -h shows a command's flags.
`

func runType(env *Env, args []string) int {
	return group(env, "type", typeUsage, args, map[string]func(*Env, []string) int{
		"list": typeList, "pause": typePause, "resume": typeResume, "cap": typeCap, "rate": typeRate,
	})
}

func (c *cmd) printTypes(ts ...*TypeControlFields) error {
	if c.json {
		for _, t := range ts {
			if err := writeJSON(c.env.Stdout, t); err != nil {
				return err
			}
		}
		return nil
	}
	if c.quiet {
		for _, t := range ts {
			fmt.Fprintln(c.env.Stdout, t.Type)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSTATE\tCAP\tRATE\tRUNNING\tWAITING")
	for _, t := range ts {
		state := "running"
		if t.Paused {
			state = "paused"
			if t.PausedUntil != nil {
				state += " until " + when(t.PausedUntil)
			}
		}
		limit := "-"
		if t.MaxRunning != nil {
			limit = strconv.Itoa(*t.MaxRunning)
		}
		rate := "-"
		if t.RateLimit != nil {
			rate = fmt.Sprintf("%d per %ds", *t.RateLimit, t.RatePeriodSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", t.Type, state, limit, rate, t.Running, t.Waiting)
	}
	return tw.Flush()
}

func typeList(env *Env, args []string) int {
	c := newCmd(env, "type list", "", "Lists every task type's flow settings and load. --json prints one type per line.")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := TypeControls(env.Ctx, cl.gql)
		if err != nil {
			return err
		}
		ts := make([]*TypeControlFields, len(resp.TypeControls))
		for i := range resp.TypeControls {
			ts[i] = &resp.TypeControls[i].TypeControlFields
		}
		return c.printTypes(ts...)
	}())
}

func typePause(env *Env, args []string) int {
	c := newCmd(env, "type pause", "TYPE", "Stops every node starting the type, until resumed or --until; running instances go on (operators and admins).")
	until := c.fs.String("until", "", "when the pause ends by itself (RFC 3339, e.g. 2026-12-24T08:00:00Z)")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		var u *time.Time
		if *until != "" {
			t, err := time.Parse(time.RFC3339, *until)
			if err != nil {
				return usageErrorf("--until: %q is not an RFC 3339 time such as 2026-12-24T08:00:00Z", *until)
			}
			u = &t
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := PauseType(env.Ctx, cl.gql, pos[0], u)
		if err != nil {
			return err
		}
		return c.printTypes(&resp.PauseType.TypeControlFields)
	}())
}

func typeResume(env *Env, args []string) int {
	c := newCmd(env, "type resume", "TYPE", "Lets nodes start the type again.")
	return c.finish(func() error {
		pos, err := c.parse(args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := ResumeType(env.Ctx, cl.gql, pos[0])
		if err != nil {
			return err
		}
		return c.printTypes(&resp.ResumeType.TypeControlFields)
	}())
}

// limitArg reads N or "none".
func limitArg(name, v string) (*int, error) {
	if strings.EqualFold(v, "none") {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, usageErrorf("%s: %q is neither a whole number nor none", name, v)
	}
	return &n, nil
}

// setLimits changes one of a type's limits and keeps the other (the API
// removes a limit left out).
func (c *cmd) setLimits(typeName string, change func(in *TypeControlInput)) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	cur, err := TypeControl(c.env.Ctx, cl.gql, typeName)
	if err != nil {
		return err
	}
	t := cur.TypeControl
	in := TypeControlInput{MaxRunning: t.MaxRunning, RateLimit: t.RateLimit}
	if t.RateLimit != nil {
		p := t.RatePeriodSeconds
		in.RatePeriodSeconds = &p
	}
	change(&in)
	resp, err := SetTypeControl(c.env.Ctx, cl.gql, typeName, in)
	if err != nil {
		return err
	}
	return c.printTypes(&resp.SetTypeControl.TypeControlFields)
}

func typeCap(env *Env, args []string) int {
	c := newCmd(env, "type cap", "TYPE N|none", "Sets how many instances of the type may run at once across all nodes (none: no cap); its rate stays.")
	return c.finish(func() error {
		pos, err := c.parse(args, 2, 2)
		if err != nil {
			return err
		}
		n, err := limitArg("cap", pos[1])
		if err != nil {
			return err
		}
		return c.setLimits(pos[0], func(in *TypeControlInput) { in.MaxRunning = n })
	}())
}

func typeRate(env *Env, args []string) int {
	c := newCmd(env, "type rate", "TYPE N|none", "Sets how many instances of the type may start in any window of --per seconds (none: no rate limit); its cap stays.")
	per := c.fs.Int("per", 1, "the window in seconds (1..86400)")
	return c.finish(func() error {
		pos, err := c.parse(args, 2, 2)
		if err != nil {
			return err
		}
		n, err := limitArg("rate", pos[1])
		if err != nil {
			return err
		}
		return c.setLimits(pos[0], func(in *TypeControlInput) {
			in.RateLimit = n
			in.RatePeriodSeconds = nil
			if n != nil {
				in.RatePeriodSeconds = per
			}
		})
	}())
}
