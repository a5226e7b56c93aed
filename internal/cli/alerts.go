package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// The alert command: the console's Alerts page (rules and channels).

const alertUsage = `Usage: taskgraph alert COMMAND [args] [flags]

Commands:
  rules                       the alert rules
  rule create NAME KIND       a rule (--type, --threshold, --window, --quiet, --channel ID...)
  rule delete ID
  channels                    where alerts go
  channel create NAME KIND    a channel (--url, --secret)
  channel delete ID

taskgraph alert COMMAND -h shows a command's flags.
`

func runAlert(env *Env, args []string) int {
	if globals, rest := leadingGlobals(args); len(globals) > 0 && len(rest) > 0 {
		args = afterCommand(rest, globals)
	}
	if len(args) >= 2 && (args[0] == "rule" || args[0] == "channel") {
		args = append([]string{args[0] + " " + args[1]}, args[2:]...)
	}
	return group(env, "alert", alertUsage, args, map[string]func(*Env, []string) int{
		"rules": alertRules, "rule create": alertRuleCreate, "rule delete": alertDelete("rule"),
		"channels": alertChannels, "channel create": alertChannelCreate, "channel delete": alertDelete("channel"),
	})
}

func (c *cmd) printRules(rs ...*AlertRuleFields) error {
	if c.json {
		for _, r := range rs {
			if err := writeJSON(c.env.Stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	if c.quiet {
		for _, r := range rs {
			fmt.Fprintln(c.env.Stdout, r.Id)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKIND\tTYPE\tTHRESHOLD\tWINDOW\tENABLED\tCHANNELS")
	for _, r := range rs {
		var chans []string
		for _, ch := range r.Channels {
			chans = append(chans, ch.Name)
		}
		typ := r.TaskType
		if typ == "" {
			typ = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%ds\t%t\t%s\n", r.Id, r.Name, r.Kind, typ, r.Threshold, r.WindowSeconds, r.Enabled, strings.Join(chans, ","))
	}
	return tw.Flush()
}

func (c *cmd) printChannels(cs ...*AlertChannelFields) error {
	if c.json {
		for _, ch := range cs {
			if err := writeJSON(c.env.Stdout, ch); err != nil {
				return err
			}
		}
		return nil
	}
	if c.quiet {
		for _, ch := range cs {
			fmt.Fprintln(c.env.Stdout, ch.Id)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKIND\tURL\tSECRET")
	for _, ch := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", ch.Id, ch.Name, ch.Kind, ch.UrlDisplay, ch.HasSecret)
	}
	return tw.Flush()
}

func alertRules(env *Env, args []string) int {
	c := newCmd(env, "alert rules", "", "Lists the alert rules. --json prints one rule per line.")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := AlertRules(env.Ctx, cl.gql)
		if err != nil {
			return err
		}
		rs := make([]*AlertRuleFields, len(resp.AlertRules))
		for i := range resp.AlertRules {
			rs[i] = &resp.AlertRules[i].AlertRuleFields
		}
		return c.printRules(rs...)
	}())
}

func alertChannels(env *Env, args []string) int {
	c := newCmd(env, "alert channels", "", "Lists where alerts go. --json prints one channel per line.")
	return c.finish(func() error {
		if _, err := c.parse(args, 0, 0); err != nil {
			return err
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := AlertChannels(env.Ctx, cl.gql)
		if err != nil {
			return err
		}
		cs := make([]*AlertChannelFields, len(resp.AlertChannels))
		for i := range resp.AlertChannels {
			cs[i] = &resp.AlertChannels[i].AlertChannelFields
		}
		return c.printChannels(cs...)
	}())
}

// stringsFlag is a flag given several times.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, splitList(v)...); return nil }

func alertRuleCreate(env *Env, args []string) int {
	c := newCmd(env, "alert rule create", "NAME KIND", "Creates an alert rule of KIND: "+enumWords(AllAlertRuleKind)+".")
	typ := c.fs.String("type", "", "only tasks of this type (default: every type)")
	threshold := c.fs.Int("threshold", 0, "how many (failures, waiting tasks, percent...) open an incident (default: the kind's)")
	window := c.fs.Int("window", 0, "the window in seconds the threshold counts in (default: the kind's)")
	quiet := c.fs.Int("quiet", 0, "seconds between two notifications of one incident (default: the kind's)")
	errorKind := c.fs.String("error-kind", "", "only failures of this kind: "+enumWords(AllErrorKind))
	disabled := c.fs.Bool("disabled", false, "create it disabled")
	var channels stringsFlag
	c.fs.Var(&channels, "channel", "a channel's id to notify (repeat it, or a comma list)")
	return c.finish(func() error {
		pos, err := c.parse(args, 2, 2)
		if err != nil {
			return err
		}
		kind, err := parseEnum("kind", pos[1], AllAlertRuleKind)
		if err != nil {
			return err
		}
		in := AlertRuleInput{Name: pos[0], Kind: kind, ChannelIds: channels}
		if *typ != "" {
			in.TaskType = typ
		}
		for _, p := range []struct {
			v   *int
			dst **int
		}{{threshold, &in.Threshold}, {window, &in.WindowSeconds}, {quiet, &in.QuietSeconds}} {
			if *p.v != 0 {
				*p.dst = p.v
			}
		}
		if *errorKind != "" {
			ek, err := parseEnum("error-kind", *errorKind, AllErrorKind)
			if err != nil {
				return err
			}
			in.ErrorKind = &ek
		}
		if *disabled {
			f := false
			in.Enabled = &f
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := CreateAlertRule(env.Ctx, cl.gql, in)
		if err != nil {
			return err
		}
		return c.printRules(&resp.CreateAlertRule.AlertRuleFields)
	}())
}

func alertChannelCreate(env *Env, args []string) int {
	c := newCmd(env, "alert channel create", "NAME KIND", "Creates a channel of KIND: "+enumWords(AllAlertChannelKind)+".")
	u := c.fs.String("url", "", "where to send (the webhook's or the robot's URL)")
	secret := c.fs.String("secret", "", "the signing secret, where the kind has one")
	return c.finish(func() error {
		pos, err := c.parse(args, 2, 2)
		if err != nil {
			return err
		}
		kind, err := parseEnum("kind", pos[1], AllAlertChannelKind)
		if err != nil {
			return err
		}
		in := AlertChannelInput{Name: pos[0], Kind: kind}
		if *u != "" {
			in.Url = u
		}
		if *secret != "" {
			in.Secret = secret
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		resp, err := CreateAlertChannel(env.Ctx, cl.gql, in)
		if err != nil {
			return err
		}
		return c.printChannels(&resp.CreateAlertChannel.AlertChannelFields)
	}())
}

func alertDelete(what string) func(*Env, []string) int {
	return func(env *Env, args []string) int {
		c := newCmd(env, "alert "+what+" delete", "ID", "Deletes an alert "+what+".")
		return c.finish(func() error {
			pos, err := c.parse(args, 1, 1)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var ok bool
			if what == "rule" {
				resp, err := DeleteAlertRule(env.Ctx, cl.gql, pos[0])
				if err != nil {
					return err
				}
				ok = resp.DeleteAlertRule
			} else {
				resp, err := DeleteAlertChannel(env.Ctx, cl.gql, pos[0])
				if err != nil {
					return err
				}
				ok = resp.DeleteAlertChannel
			}
			if !ok {
				return &apiError{Code: "NOT_FOUND", Message: what + " " + pos[0] + " not found"}
			}
			if c.json {
				return writeJSON(env.Stdout, map[string]string{"deleted": pos[0]})
			}
			_, err = fmt.Fprintf(env.Stdout, "%s %s deleted\n", what, pos[0])
			return err
		}())
	}
}
