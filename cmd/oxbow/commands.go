package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/hanging"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/versions"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	exitRefused = 3
)

// env is what a command runs with.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	json   bool
	ctl    func() (*versions.Control, error)
	client func() (*kgo.Client, error) // a plain client to the brokers
}

type command struct {
	name, usage, help string
	flags             func(fs *flag.FlagSet) func(e *env, args []string) int
}

var commands = []command{
	{"versions", "versions --app APP", "lists an application's registered versions: group state, instances, lag and which is active", cmdVersions},
	{"lag", "lag --app APP [--version V] [--watch] [--interval D]", "shows a version's lag on its inputs (the active version's unless --version), with a progress bar; --watch follows it (rate, ETA) until it has caught up", cmdLag},
	{"promote", "promote --app APP --version V [--force] [--max-lag N]", "makes a version the one readers are served; refused (exit 3) if it has not caught up, unless --force", cmdPromote},
	{"rollback", "rollback --app APP", "makes the previously active version active again", cmdRollback},
	{"retire", "retire --app APP --version V [--yes] [--dry-run] [--state-dir DIR]...", "deletes a version's consumer group, internal topics, local state and registration, after confirmation", cmdRetire},
	{"delete", "delete --app APP [--yes] [--dry-run] [--state-dir DIR]...", "deletes an application, after confirmation: every version's consumer group, internal topics, local state and registration (the active one's too), and its promotion", cmdDelete},
	{"reset", "reset --app APP --version V [--to-earliest | --to-datetime T] [--yes] [--dry-run] [--state-dir DIR]...", "makes a stopped version process its inputs again: offsets to the earliest or a time, internal topics deleted, local state wiped", cmdReset},
	{"transactions", "transactions find-hanging|repair [--topic T]... [--yes] [--dry-run]", "finds the transactions Kafka left open on a partition after their coordinator ended them (find-hanging), and ends them with the marker the coordinator decided (repair; exit 3 if any is refused)", cmdTransactions},
	{"describe", "describe --url URL", "prints the topology of a running instance (its HTTP API's /topology)", cmdDescribe},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: oxbow COMMAND [FLAGS]")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.help)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --brokers (default $KAFKA_BROKERS), --control-topic, --json and, for a secured")
	fmt.Fprintln(w, "Kafka, the --kafka-tls* and --kafka-sasl-* flags (or their OXBOW_KAFKA_* variables); oxbow COMMAND --help says more.")
}

// run runs the command line; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == args[0] {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "oxbow: no command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	fs := flag.NewFlagSet("oxbow "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka's seed brokers, comma-separated")
	topic := fs.String("control-topic", versions.DefaultTopic, "the control topic")
	asJSON := fs.Bool("json", false, "print JSON")
	security := kafkasec.Flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: oxbow %s\n\n%s.\n\nflags:\n", cmd.usage, capitalize(cmd.help))
		fs.PrintDefaults()
	}
	runCmd := cmd.flags(fs)
	// A command with subcommands takes its flags after the subcommand:
	// "transactions repair --yes".
	rest, lead := args[1:], []string(nil)
	if hasSubcommands[cmd.name] && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		lead, rest = rest[:1], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, json: *asJSON}
	sec, err := security()
	if err != nil {
		fmt.Fprintln(stderr, "oxbow:", err)
		return exitUsage
	}
	e.ctl = func() (*versions.Control, error) {
		bs := split(*brokers)
		if len(bs) == 0 {
			return nil, errors.New("no brokers: give --brokers or set KAFKA_BROKERS")
		}
		c, err := versions.New(bs, versions.Options{Topic: *topic, KafkaSecurity: sec})
		if err != nil {
			return nil, err
		}
		if err := c.Check(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	e.client = func() (*kgo.Client, error) {
		bs := split(*brokers)
		if len(bs) == 0 {
			return nil, errors.New("no brokers: give --brokers or set KAFKA_BROKERS")
		}
		opts, err := sec.ClientOpts(bs)
		if err != nil {
			return nil, err
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		if err := kafkasec.Check(ctx, cl); err != nil {
			cl.Close()
			return nil, err
		}
		return cl, nil
	}
	return runCmd(e, append(lead, fs.Args()...))
}

// hasSubcommands names the commands whose first argument is a subcommand.
var hasSubcommands = map[string]bool{"transactions": true}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// fail prints an error and returns the exit code.
func (e *env) fail(err error) int {
	fmt.Fprintln(e.stderr, "oxbow:", err)
	var nc *versions.NotCaughtUpError
	if errors.As(err, &nc) {
		return exitRefused
	}
	return exitFailed
}

func (e *env) usageErr(format string, args ...any) int {
	fmt.Fprintf(e.stderr, "oxbow: "+format+"\n", args...)
	return exitUsage
}

func (e *env) printJSON(v any) {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// withControl runs fn with a Control.
func (e *env) withControl(fn func(c *versions.Control) int) int {
	c, err := e.ctl()
	if err != nil {
		return e.fail(err)
	}
	defer c.Close()
	return fn(c)
}

// flagValue is a required flag's name and value, for usable.
type flagValue struct{ name, value string }

// usable reports whether a command got no positional arguments and every
// required flag; if not, it has said what is wrong ("promote needs --app
// and --version").
func (e *env) usable(cmd string, args []string, required ...flagValue) bool {
	if len(args) > 0 {
		e.usageErr("unexpected arguments %q", args)
		return false
	}
	names := make([]string, len(required))
	missing := false
	for i, f := range required {
		names[i] = "--" + f.name
		missing = missing || f.value == ""
	}
	if missing {
		e.usageErr("%s needs %s", cmd, strings.Join(names, " and "))
		return false
	}
	return true
}

func cmdVersions(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application (its AppID)")
	return func(e *env, args []string) int {
		if !e.usable("versions", args, flagValue{"app", *app}) {
			return exitUsage
		}
		return e.withControl(func(c *versions.Control) int {
			a, err := c.App(e.ctx, *app)
			if err != nil {
				return e.fail(err)
			}
			type row struct {
				Version    string    `json:"version"`
				Group      string    `json:"group"`
				Active     bool      `json:"active"`
				State      string    `json:"state"`
				Instances  int       `json:"instances"`
				Lag        int64     `json:"lag"`
				Progress   float64   `json:"progress"`
				Registered time.Time `json:"registered"`
				Waits      string    `json:"waits,omitempty"`
				Error      string    `json:"error,omitempty"`
			}
			var rows []row
			for _, name := range a.Names() {
				v := a.Versions[name]
				r := row{Version: name, Group: v.Group, Active: name == a.Active, Registered: v.Registered, Lag: -1}
				if l, err := c.Lag(e.ctx, *app, name); err != nil {
					r.Error = err.Error()
				} else {
					r.State, r.Instances, r.Lag, r.Progress, r.Waits = l.State, l.Members, l.Total, l.Progress(), l.Waits()
				}
				rows = append(rows, r)
			}
			if e.json {
				e.printJSON(map[string]any{"app": *app, "active": a.Active, "previous": a.Previous, "versions": rows})
				return exitOK
			}
			if len(rows) == 0 {
				fmt.Fprintf(e.stdout, "%s has no registered versions (an instance registers its version when it starts)\n", *app)
				return exitOK
			}
			tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\tVERSION\tGROUP\tSTATE\tINSTANCES\tLAG\tDONE")
			for _, r := range rows {
				mark := ""
				if r.Active {
					mark = "*"
				}
				if r.Error != "" {
					fmt.Fprintf(tw, "%s\t%s\t%s\t?\t?\t?\t%s\n", mark, r.Version, r.Group, r.Error)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.1f%%\n", mark, r.Version, r.Group, r.State, r.Instances, r.Lag, 100*r.Progress)
			}
			_ = tw.Flush()
			for _, r := range rows {
				if r.Waits != "" {
					fmt.Fprintf(e.stdout, "%s %s\n", r.Version, waitsLine(r.Waits))
				}
			}
			if a.Active == "" {
				fmt.Fprintln(e.stdout, "no version is active yet: oxbow promote --app", *app, "--version V")
			}
			return exitOK
		})
	}
}

func cmdLag(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application")
	version := fs.String("version", "", "the version (default: the active one)")
	watch := fs.Bool("watch", false, "follow the lag until the version has caught up (--max-lag)")
	interval := fs.Duration("interval", 2*time.Second, "how often --watch measures")
	maxLag := fs.Int64("max-lag", versions.DefaultMaxLag, "the lag at which --watch stops")
	return func(e *env, args []string) int {
		if !e.usable("lag", args, flagValue{"app", *app}) {
			return exitUsage
		}
		if *interval <= 0 {
			return e.usageErr("--interval must be positive")
		}
		return e.withControl(func(c *versions.Control) int {
			if *version == "" {
				a, err := c.App(e.ctx, *app)
				if err != nil {
					return e.fail(err)
				}
				if a.Active == "" {
					return e.fail(fmt.Errorf("no version of %s is active yet; name one with --version (registered: %s)", *app, strings.Join(a.Names(), ", ")))
				}
				*version = a.Active
			}
			l, err := c.Lag(e.ctx, *app, *version)
			if err != nil {
				return e.fail(err)
			}
			if !*watch {
				if e.json {
					e.printJSON(lagJSON(l, 0, -1))
					return exitOK
				}
				fmt.Fprintln(e.stdout, progressLine(l, 0, -1))
				tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tUNSETTLED\tOFFSET")
				for _, p := range l.Partitions {
					committed := fmt.Sprint(p.Committed)
					if p.Committed < 0 {
						committed = "-"
					}
					offset := "stable"
					if p.Held {
						offset = "held by an open transaction"
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", p.Topic, p.Partition, committed, p.End, p.Lag, p.Unsettled, offset)
				}
				_ = tw.Flush()
				if w := l.Waits(); w != "" {
					fmt.Fprintln(e.stdout, waitsLine(w))
				}
				return exitOK
			}
			// prev was measured at prevAt, l at at.
			prev, prevAt, at := l, time.Time{}, time.Now()
			var still stillness
			for {
				rate, eta := 0.0, time.Duration(-1)
				if !prevAt.IsZero() && !l.CaughtUp(*maxLag) {
					rate, eta = progress(prev, l, at.Sub(prevAt))
				}
				stalled := still.note(prev, l, prevAt, at)
				if e.json {
					out := lagJSON(l, rate, eta)
					if stalled > 0 {
						out["noProgressSeconds"] = stalled.Seconds()
					}
					e.printJSON(out)
				} else {
					line := progressLine(l, rate, eta)
					if stalled > 0 {
						line += fmt.Sprintf("  no progress for %v", stalled.Round(time.Second))
						if w := l.Waits(); w != "" {
							line += ": " + w
						}
					}
					fmt.Fprintln(e.stdout, line)
				}
				if l.CaughtUp(*maxLag) {
					return exitOK
				}
				select {
				case <-e.ctx.Done():
					return exitFailed
				case <-time.After(*interval):
				}
				prev, prevAt = l, at
				if l, err = c.Lag(e.ctx, *app, *version); err != nil {
					return e.fail(err)
				}
				at = time.Now()
			}
		})
	}
}

// progress is the rate at which a version consumed its inputs between two
// measurements dt apart, in records a second, and the time left at the
// rate its lag shrank (-1: it did not shrink).
func progress(prev, now versions.Lag, dt time.Duration) (rate float64, eta time.Duration) {
	if dt <= 0 {
		return 0, -1
	}
	s := dt.Seconds()
	rate = float64(now.Consumed-prev.Consumed) / s
	if shrink := float64(prev.Total-now.Total) / s; shrink > 0 {
		return rate, time.Duration(float64(now.Total) / shrink * float64(time.Second))
	}
	return rate, -1
}

// stalledAfter is how long lag --watch sees a version with lag consume
// nothing before it says so.
const stalledAfter = 30 * time.Second

// stillness follows, measurement after measurement, how long a version
// with lag has consumed nothing.
type stillness struct{ since time.Time }

// note takes the measurement now, at, after prev, at prevAt (zero: the
// first), and returns how long the version has consumed nothing while it
// had lag, once that is stalledAfter or more; else 0.
func (s *stillness) note(prev, now versions.Lag, prevAt, at time.Time) time.Duration {
	switch {
	case prevAt.IsZero() || now.Total == 0 || now.Consumed != prev.Consumed:
		s.since = time.Time{}
		return 0
	case s.since.IsZero():
		s.since = prevAt
	}
	if d := at.Sub(s.since); d >= stalledAfter {
		return d
	}
	return 0
}

// waitsLine says what a version waits on in Kafka, and what to do if it
// lasts.
func waitsLine(waits string) string {
	return "waiting on Kafka: " + waits + " (normal for moments under exactly-once load; lasting past the transaction timeout, see `oxbow transactions find-hanging`)"
}

func lagJSON(l versions.Lag, rate float64, eta time.Duration) map[string]any {
	out := map[string]any{"app": l.App, "version": l.Version, "group": l.Group, "state": l.State, "instances": l.Members,
		"lag": l.Total, "consumed": l.Consumed, "progress": l.Progress(), "partitions": l.Partitions}
	if w := l.Waits(); w != "" {
		out["waits"] = w
	}
	if rate > 0 {
		out["rate"] = rate
	}
	if eta >= 0 {
		out["etaSeconds"] = eta.Seconds()
	}
	return out
}

// progressLine is a progress bar: done, lag, rate and ETA.
func progressLine(l versions.Lag, rate float64, eta time.Duration) string {
	const width = 30
	p := l.Progress()
	n := int(p * width)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	s := fmt.Sprintf("%s %s [%s] %5.1f%%  lag %d", l.App, l.Version, bar, 100*p, l.Total)
	if rate > 0 {
		s += fmt.Sprintf("  %.0f records/s", rate)
	}
	if eta >= 0 {
		s += "  ETA " + eta.Round(time.Second).String()
	}
	return s
}

func cmdPromote(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application")
	version := fs.String("version", "", "the version to make active")
	force := fs.Bool("force", false, "promote it even if it has not caught up")
	maxLag := fs.Int64("max-lag", versions.DefaultMaxLag, "the lag a version may have and be promoted")
	return func(e *env, args []string) int {
		if !e.usable("promote", args, flagValue{"app", *app}, flagValue{"version", *version}) {
			return exitUsage
		}
		return e.withControl(func(c *versions.Control) int {
			if err := c.Promote(e.ctx, *app, *version, versions.PromoteOptions{Force: *force, MaxLag: *maxLag}); err != nil {
				return e.fail(err)
			}
			if e.json {
				e.printJSON(map[string]any{"app": *app, "active": *version, "forced": *force})
			} else {
				fmt.Fprintf(e.stdout, "%s: %s is active\n", *app, *version)
			}
			return exitOK
		})
	}
}

func cmdRollback(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application")
	return func(e *env, args []string) int {
		if !e.usable("rollback", args, flagValue{"app", *app}) {
			return exitUsage
		}
		return e.withControl(func(c *versions.Control) int {
			v, err := c.Rollback(e.ctx, *app)
			if err != nil {
				return e.fail(err)
			}
			if e.json {
				e.printJSON(map[string]any{"app": *app, "active": v})
			} else {
				fmt.Fprintf(e.stdout, "%s: rolled back; %s is active\n", *app, v)
			}
			return exitOK
		})
	}
}

// stateDirs is a repeatable --state-dir.
type stateDirs []string

func (s *stateDirs) String() string     { return strings.Join(*s, ",") }
func (s *stateDirs) Set(v string) error { *s = append(*s, v); return nil }

func (e *env) confirm(what, answer string) bool {
	fmt.Fprintf(e.stderr, "%s\nType %q to go on: ", what, answer)
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && line == "" {
		return false
	}
	return strings.TrimSpace(line) == answer
}

func (e *env) printPlan(p versions.Plan, verb string) {
	if e.json {
		e.printJSON(p)
		return
	}
	state := "would be " + verb
	if p.Done {
		state = verb
	}
	fmt.Fprintf(e.stdout, "%s %s (group %s): %s\n", p.App, p.Version, p.Group, state)
	for _, t := range p.Topics {
		fmt.Fprintf(e.stdout, "  topic     %s\n", t)
	}
	for _, d := range p.Dirs {
		fmt.Fprintf(e.stdout, "  state dir %s\n", d)
	}
	for _, o := range p.Offsets {
		fmt.Fprintf(e.stdout, "  offset    %s[%d] -> %d\n", o.Topic, o.Partition, o.Committed)
	}
}

func cmdRetire(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application")
	version := fs.String("version", "", "the version to retire")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	dry := fs.Bool("dry-run", false, "say what would be deleted, delete nothing")
	var dirs stateDirs
	fs.Var(&dirs, "state-dir", "a directory holding instances' state, by group (repeatable; <tmp>/oxbow is always looked in)")
	return func(e *env, args []string) int {
		if !e.usable("retire", args, flagValue{"app", *app}, flagValue{"version", *version}) {
			return exitUsage
		}
		return e.withControl(func(c *versions.Control) int {
			p, err := c.Retire(e.ctx, *app, *version, versions.RetireOptions{DryRun: true, StateRoots: dirs})
			if err != nil {
				return e.fail(err)
			}
			if *dry {
				e.printPlan(p, "deleted")
				return exitOK
			}
			if !*yes && !e.confirm(fmt.Sprintf("This deletes %s %s: group %s, %d topics, %d state dirs.", *app, *version, p.Group, len(p.Topics), len(p.Dirs)), *version) {
				fmt.Fprintln(e.stderr, "oxbow: not confirmed; nothing deleted")
				return exitRefused
			}
			if p, err = c.Retire(e.ctx, *app, *version, versions.RetireOptions{StateRoots: dirs}); err != nil {
				return e.fail(err)
			}
			e.printPlan(p, "deleted")
			return exitOK
		})
	}
}

func cmdDelete(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application to delete")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	dry := fs.Bool("dry-run", false, "say what would be deleted, delete nothing")
	var dirs stateDirs
	fs.Var(&dirs, "state-dir", "a directory holding instances' state, by group (repeatable; <tmp>/oxbow is always looked in)")
	return func(e *env, args []string) int {
		if !e.usable("delete", args, flagValue{"app", *app}) {
			return exitUsage
		}
		return e.withControl(func(c *versions.Control) int {
			plans, err := c.Delete(e.ctx, *app, versions.DeleteOptions{DryRun: true, StateRoots: dirs})
			if err != nil {
				return e.fail(err)
			}
			show := func(plans []versions.Plan) {
				if e.json {
					e.printJSON(map[string]any{"app": *app, "versions": plans})
					return
				}
				for _, p := range plans {
					e.printPlan(p, "deleted")
				}
			}
			if *dry {
				show(plans)
				return exitOK
			}
			topics, dirsN := 0, 0
			for _, p := range plans {
				topics, dirsN = topics+len(p.Topics), dirsN+len(p.Dirs)
			}
			if !*yes && !e.confirm(fmt.Sprintf("This deletes the application %s: %d versions, their groups, %d topics and %d state dirs.", *app, len(plans), topics, dirsN), *app) {
				fmt.Fprintln(e.stderr, "oxbow: not confirmed; nothing deleted")
				return exitRefused
			}
			plans, err = c.Delete(e.ctx, *app, versions.DeleteOptions{StateRoots: dirs})
			show(plans)
			if err != nil {
				return e.fail(err)
			}
			if !e.json {
				fmt.Fprintf(e.stdout, "%s is deleted\n", *app)
			}
			return exitOK
		})
	}
}

func cmdReset(fs *flag.FlagSet) func(*env, []string) int {
	app := fs.String("app", "", "the application")
	version := fs.String("version", "", "the version to reset")
	earliest := fs.Bool("to-earliest", false, "read the inputs from their earliest offsets (the default)")
	at := fs.String("to-datetime", "", "read the inputs from this time (RFC 3339)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	dry := fs.Bool("dry-run", false, "say what would be done, do nothing")
	var dirs stateDirs
	fs.Var(&dirs, "state-dir", "a directory holding instances' state, by group (repeatable; <tmp>/oxbow is always looked in)")
	return func(e *env, args []string) int {
		if !e.usable("reset", args, flagValue{"app", *app}, flagValue{"version", *version}) {
			return exitUsage
		}
		var to time.Time
		if *at != "" {
			if *earliest {
				return e.usageErr("give --to-earliest or --to-datetime, not both")
			}
			t, err := time.Parse(time.RFC3339, *at)
			if err != nil {
				return e.usageErr("--to-datetime %q: want RFC 3339, like 2026-11-01T00:00:00Z", *at)
			}
			to = t
		}
		return e.withControl(func(c *versions.Control) int {
			o := versions.ResetOptions{To: to, DryRun: true, StateRoots: dirs}
			p, err := c.Reset(e.ctx, *app, *version, o)
			if err != nil {
				return e.fail(err)
			}
			if *dry {
				e.printPlan(p, "reset")
				return exitOK
			}
			if !*yes && !e.confirm(fmt.Sprintf("This resets %s %s: %d input partitions, %d internal topics deleted, %d state dirs wiped.", *app, *version, len(p.Offsets), len(p.Topics), len(p.Dirs)), *version) {
				fmt.Fprintln(e.stderr, "oxbow: not confirmed; nothing done")
				return exitRefused
			}
			o.DryRun = false
			if p, err = c.Reset(e.ctx, *app, *version, o); err != nil {
				return e.fail(err)
			}
			e.printPlan(p, "reset")
			return exitOK
		})
	}
}

func cmdDescribe(fs *flag.FlagSet) func(*env, []string) int {
	u := fs.String("url", "", "an instance's HTTP API, like http://host:8080")
	token := fs.String("token", os.Getenv("OXBOW_TOKEN"), "a bearer token for the API (default $OXBOW_TOKEN)")
	return func(e *env, args []string) int {
		if !e.usable("describe", args, flagValue{"url", *u}) {
			return exitUsage
		}
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(*u, "/")+"/topology", nil)
		if err != nil {
			return e.usageErr("--url: %v", err)
		}
		if *token != "" {
			req.Header.Set("Authorization", "Bearer "+*token)
		}
		if e.json {
			// The graph as data: sub-topologies' nodes with their parents
			// and children, topics, stores, internal topics.
			req.Header.Set("Accept", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return e.fail(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		if err != nil {
			return e.fail(err)
		}
		if resp.StatusCode != http.StatusOK {
			return e.fail(fmt.Errorf("%s: %s: %s", req.URL, resp.Status, strings.TrimSpace(string(body))))
		}
		if e.json {
			var graph engine.TopologyGraph
			if err := json.Unmarshal(body, &graph); err != nil {
				return e.fail(fmt.Errorf("%s: not a topology's graph (an Oxbow API answers one to Accept: application/json): %w", req.URL, err))
			}
			e.printJSON(map[string]any{"url": *u, "version": resp.Header.Get("Oxbow-Version"), "topology": graph})
			return exitOK
		}
		_, _ = e.stdout.Write(body)
		return exitOK
	}
}

func cmdTransactions(fs *flag.FlagSet) func(*env, []string) int {
	var topics stateDirs
	fs.Var(&topics, "topic", "a topic to look at (repeatable; every topic of the cluster, __consumer_offsets included, if none)")
	yes := fs.Bool("yes", false, "repair: do not ask for confirmation")
	dry := fs.Bool("dry-run", false, "repair: say what would be written, write nothing")
	return func(e *env, args []string) int {
		if len(args) == 0 || (args[0] != "find-hanging" && args[0] != "repair") {
			return e.usageErr("transactions needs find-hanging or repair")
		}
		sub := args[0]
		if !e.usable("transactions "+sub, args[1:]) {
			return exitUsage
		}
		cl, err := e.client()
		if err != nil {
			return e.fail(err)
		}
		defer cl.Close()
		found, err := hanging.Find(e.ctx, cl, topics...)
		if denied := (*hanging.NotAllowedError)(nil); errors.As(err, &denied) {
			fmt.Fprintln(e.stderr, "oxbow: warning:", err)
		} else if err != nil {
			return e.fail(err)
		}
		if sub == "find-hanging" || *dry || len(found) == 0 {
			e.printTxns(found, false)
			return exitOK
		}
		decided := 0
		for _, t := range found {
			if t.Decision != hanging.Refuse {
				decided++
			}
		}
		if decided > 0 && !*yes && !e.confirm(fmt.Sprintf("This writes %d transaction markers, each the one its coordinator decided (--dry-run lists them).", decided), "repair") {
			fmt.Fprintln(e.stderr, "oxbow: not confirmed; nothing written")
			return exitRefused
		}
		repaired, rerr := hanging.Repair(e.ctx, cl, found)
		done := map[string]bool{}
		for _, t := range repaired {
			done[fmt.Sprintf("%s[%d]", t.Topic, t.Partition)] = true
		}
		e.printTxns(found, true, done)
		switch {
		case rerr != nil:
			return e.fail(rerr)
		case decided < len(found):
			fmt.Fprintf(e.stderr, "oxbow: %d hanging transactions refused: their coordinator's decision cannot be known\n", len(found)-decided)
			return exitRefused
		}
		return exitOK
	}
}

// txnJSON is a hanging transaction as --json prints it.
type txnJSON struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	ProducerID    int64  `json:"producer_id"`
	ProducerEpoch int16  `json:"producer_epoch"`
	FirstOffset   int64  `json:"first_offset"`
	AgeSeconds    int64  `json:"age_seconds"`
	TxnID         string `json:"transactional_id,omitempty"`
	State         string `json:"coordinator_state,omitempty"`
	Decision      string `json:"decision"`
	Reason        string `json:"reason"`
	Remedy        string `json:"remedy"`
	Repaired      bool   `json:"repaired"`
}

// printTxns prints hanging transactions; after a repair, done names the
// partitions repaired ("topic[partition]").
func (e *env) printTxns(found []hanging.Txn, repair bool, done ...map[string]bool) {
	now := time.Now()
	repaired := func(t hanging.Txn) bool {
		return len(done) > 0 && done[0][fmt.Sprintf("%s[%d]", t.Topic, t.Partition)]
	}
	if e.json {
		out := []txnJSON{}
		for _, t := range found {
			out = append(out, txnJSON{t.Topic, t.Partition, t.ProducerID, t.ProducerEpoch, t.FirstOffset, int64(t.Age(now) / time.Second),
				t.TxnID, t.State, t.Decision.String(), t.Reason, t.Remedy(), repaired(t)})
		}
		e.printJSON(map[string]any{"hanging": out})
		return
	}
	if len(found) == 0 {
		fmt.Fprintln(e.stdout, "no hanging transactions")
		return
	}
	for _, t := range found {
		fmt.Fprintln(e.stdout, t)
		switch {
		case repaired(t):
			fmt.Fprintf(e.stdout, "  repaired: wrote the %s marker\n", t.Decision)
		case !repair || t.Decision == hanging.Refuse:
			fmt.Fprintf(e.stdout, "  remedy: %s\n", t.Remedy())
		default:
			fmt.Fprintf(e.stdout, "  not repaired: the %s marker could not be written (the error follows)\n", t.Decision)
		}
	}
}
