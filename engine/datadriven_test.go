package engine_test

// Data-driven specs of the DSL's semantics, in the manner of pebble's
// testdata files. Every file in testdata/dsl/*.txt is a sequence of cases;
// each runs one topology of the map below in the in-memory driver, three
// times: without a record cache ("nocache"), where every update is visible;
// the same with fusion off ("unfused"), every node on the generic path (see
// the topo package's doc on fusion), which must give the same results; and
// with a record cache ("cache"), committing before each expect, store,
// skipped and log.
// The cache may compact a key's updates between commits, so there expect
// compares only the latest record of each key (a key that was added and
// deleted since the last commit may be missing), and log is not checked.
//
// Every case runs on a broker too (TestDSLOnKafka, datadriven_kafka_test.go),
// held to the same expected lines, not to what the driver does: exactly-once
// without a record cache, every line exact (expect, store, skipped, log,
// describe);
// and, for topologies with a store, at least once with the default cache,
// as the cache mode here. The topologies name every topic
// dslTopicPrefix+<name> (build them with dslBuild), so that each broker run
// has topics of its own. On a broker a build-error case is skipped, a
// nocache case runs without the cache only, a bug case that passes is
// logged rather than failed, and a pipe-error ends the case: the instance
// must stop with the error. See TestDSLOnKafka.
//
// Grammar. One command a line, at the start of the line; a command's
// expected lines follow it, indented. Lines starting with '#' are comments;
// blank lines are ignored. Tokens are separated by spaces.
//
//	topology <name>        starts a case: builds dslTopologies[name], starts a driver
//	bug <text>             the case shows a known engine bug: if it fails it is
//	                       skipped with the text; if it passes, it fails (on a
//	                       broker: it is logged)
//	cache-bug <text>       the same, with the record cache only
//	nocache <text>         the case runs without the record cache only; the text
//	                       says why its intermediate results are the point
//	build-error            Build must fail; each indented line is a part of the error
//	                       (no broker run)
//	pipe <topic> <key> <value> @<ms>
//	                       writes a record stamped enginetest.At(ms) and processes
//	                       all it causes; key ~ is a null key, value ~ a tombstone,
//	                       "" an empty string
//	pipe-error <topic> <key> <value> @<ms>
//	                       the same, but the pipe must fail; each indented line is
//	                       a part of the error (on a broker: of the error Run
//	                       returns, and the case ends there)
//	expect <topic>         the records written to the topic since the last expect:
//	                       one indented "<key> <value> @<ms>" each, none if none;
//	                       "${app}-<name>" is an internal topic
//	store <name>           the store's entries in key order: "<key> <value> @<ms>"
//	skipped                the skip counts so far: "<node>: <reason> = <n>"
//	log                    the logging user functions' calls since the last log
//	describe               the topology's Describe(): sub-topologies with their
//	                       sources, processors and sinks, then stores and
//	                       internal topics; its lines keep their indentation
//	                       past the first's
//	restart                nothing in the driver; on a broker the instance is
//	                       replaced here by one on an empty state directory
//	                       (without it, after the expect halfway through the
//	                       case's expects)
//	norestart <text>       nothing in the driver; on a broker the instance is
//	                       never replaced: the text says why a restart would
//	                       change what the case shows
//
// Keys are strings. Values are int64 or text (strings, JSON written without
// spaces), as the topology declares for each topic and store. When a case
// ends, each output topic it declares must have been read to its end and the
// log must be empty: a case states everything its input caused. The first
// case of each topology in a file describes it.
//
// Rewriting. go test ./engine -run '^TestDSL$' -rewrite writes what the
// nocache mode gives in place of the expected lines of expect, store,
// skipped, log and describe, and of build-error and pipe-error where the
// error no longer says them all (then the error's lines); the unfused and
// cache modes run against the new lines. Everything else in the file stays
// byte for byte (TestDSLRewriteKeepsFiles), and a command whose output did
// not change keeps its lines as written. A case with bug or cache-bug keeps
// its lines, describe's excepted: it is expected to fail, and rewriting
// would make it pass. TestDSLOnKafka never rewrites. The diff is the change
// of semantics to review.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

func TestDSL(t *testing.T) {
	files, err := filepath.Glob("testdata/dsl/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no files in testdata/dsl")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runDSLFile(t, file, *dslRewriteFlag) })
	}
}

// The first case of each topology in a file describes it, so that a reader
// sees the topology the case runs.
func TestDSLDescribed(t *testing.T) {
	files, err := filepath.Glob("testdata/dsl/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in testdata/dsl: %v", err)
	}
	for _, file := range files {
		seen := map[string]bool{}
		for _, c := range loadDSLCases(t, file) {
			if seen[c.topology] || slices.ContainsFunc(c.cmds, func(cmd dslCommand) bool { return cmd.args[0] == "build-error" }) {
				continue
			}
			seen[c.topology] = true
			if !slices.ContainsFunc(c.cmds, func(cmd dslCommand) bool { return cmd.args[0] == "describe" }) {
				t.Errorf("%s:%d: the first case of topology %s has no describe: add one and run go test ./engine -run '^TestDSL$' -rewrite", file, c.line, c.topology)
			}
		}
	}
}

// runDSLFile runs the cases of a file; with rewrite, it then writes the
// file with the lines the nocache mode gave (see dslRewrite).
func runDSLFile(t *testing.T, file string, rewrite bool) {
	var lines map[int][]string
	if rewrite {
		lines = map[int][]string{}
	}
	for _, c := range loadDSLCases(t, file) {
		t.Run(fmt.Sprintf("%d_%s", c.line, c.topology), func(t *testing.T) { runDSLCase(t, file, c, lines) })
	}
	if rewrite {
		dslRewriteFile(t, file, lines)
	}
}

// loadDSLCases reads and parses a file of cases.
func loadDSLCases(t *testing.T, file string) []dslCase {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := parseDSLCases(file, string(data))
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// dslKind is how a topic's or store's values are written in a case.
type dslKind int

const (
	dslTxt              dslKind = iota // the bytes as they are: strings, JSON
	dslI64                             // serde.Int64
	dslCountWindowedI64                // serde.Int64 values, count-windowed keys written "<key>#<first record>" (stores only)
)

// dslLogFunc records a call of a user function for the log command.
type dslLogFunc func(format string, args ...any)

type dslTopologyDef struct {
	// Topics and stores with the kind of their values: "name:int name:text …".
	in, out, stores string
	build           func(b *engine.Builder, log dslLogFunc)
}

// dslKinds reads "name:int name:text …".
func dslKinds(spec string) map[string]dslKind {
	m := map[string]dslKind{}
	for _, f := range strings.Fields(spec) {
		name, k, _ := strings.Cut(f, ":")
		m[name] = map[string]dslKind{"int": dslI64, "text": dslTxt, "count-windowed-int": dslCountWindowedI64}[k]
	}
	return m
}

// dslCommand is a command and the indented lines that follow it.
type dslCommand struct {
	line int
	args []string
	// The indented lines, each's tokens joined by one space; describe's
	// keep their indentation past the first line's.
	body   []string
	bodyAt []int // the indexes of the indented lines among the file's lines
}

// dslCase is a topology and the commands run against it.
type dslCase struct {
	line     int
	topology string
	cmds     []dslCommand
}

func parseDSLCases(file, data string) ([]dslCase, error) {
	var cases []dslCase
	lines := strings.Split(data, "\n")
	for i, l := range lines {
		ln := i + 1
		switch {
		case strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#"):
		case l[0] == ' ' || l[0] == '\t':
			if len(cases) == 0 || len(cases[len(cases)-1].cmds) == 0 {
				return nil, fmt.Errorf("%s:%d: an indented line belongs to no command", file, ln)
			}
			c := &cases[len(cases)-1]
			cmd := &c.cmds[len(c.cmds)-1]
			body := strings.Join(strings.Fields(l), " ")
			if cmd.args[0] == "describe" {
				indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
				if len(cmd.bodyAt) > 0 {
					first := lines[cmd.bodyAt[0]]
					indent = first[:len(first)-len(strings.TrimLeft(first, " \t"))]
				}
				rest, ok := strings.CutPrefix(l, indent)
				if !ok {
					return nil, fmt.Errorf("%s:%d: a line of describe is indented less than its first", file, ln)
				}
				body = strings.TrimRight(rest, " \t")
			}
			cmd.body = append(cmd.body, body)
			cmd.bodyAt = append(cmd.bodyAt, i)
		default:
			f := strings.Fields(l)
			if f[0] == "topology" {
				if len(f) != 2 {
					return nil, fmt.Errorf("%s:%d: want: topology <name>", file, ln)
				}
				cases = append(cases, dslCase{line: ln, topology: f[1]})
				continue
			}
			if len(cases) == 0 {
				return nil, fmt.Errorf("%s:%d: %q before the first topology", file, ln, f[0])
			}
			switch f[0] {
			case "bug", "cache-bug", "nocache", "norestart":
				if len(f) < 2 {
					return nil, fmt.Errorf("%s:%d: want: %s <why>", file, ln, f[0])
				}
			}
			c := &cases[len(cases)-1]
			c.cmds = append(c.cmds, dslCommand{line: ln, args: f})
		}
	}
	return cases, nil
}

// dslRun runs a case in one mode and collects its failures, so that a case
// marked as a bug can be skipped rather than failed.
type dslRun struct {
	file    string
	cached  bool
	unfused bool
	in      map[string]dslKind // topic -> kind
	out     map[string]dslKind
	stores  map[string]dslKind
	top     *engine.Topology // as built, fused
	d       *enginetest.Driver
	read    map[string]int // output topic -> records read
	log     []string
	errs    []string

	// With -rewrite, in the nocache mode: the lines each command of
	// dslOutputs gives, by its line number, to be written in place of the
	// expected ones rather than compared with them; in a case marked as a
	// bug, describe's only (describeOnly).
	rewrite      map[int][]string
	describeOnly bool
}

// rewrites reports whether the lines cmd gives are to be written in place
// of its expected ones.
func (r *dslRun) rewrites(cmd dslCommand) bool {
	return r.rewrite != nil && (!r.describeOnly || cmd.args[0] == "describe")
}

func (r *dslRun) errorf(cmd dslCommand, format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf("%s:%d: %s: %s", r.file, cmd.line, strings.Join(cmd.args, " "), fmt.Sprintf(format, args...)))
}

// runDSLCase runs a case in each mode. With rewrite non-nil (-rewrite),
// the nocache mode's lines go to rewrite and, before the other modes run,
// to the case's commands: the other modes compare with the new lines.
func runDSLCase(t *testing.T, file string, c dslCase, rewrite map[int][]string) {
	marked := slices.ContainsFunc(c.cmds, func(cmd dslCommand) bool { return cmd.args[0] == "bug" || cmd.args[0] == "cache-bug" })
	for _, mode := range []string{"nocache", "unfused", "cache"} {
		cached := mode == "cache"
		t.Run(mode, func(t *testing.T) {
			r := &dslRun{file: file, cached: cached, unfused: mode == "unfused", read: map[string]int{}}
			if rewrite != nil && mode == "nocache" {
				r.rewrite, r.describeOnly = map[int][]string{}, marked
				defer func() {
					for i, cmd := range c.cmds {
						if lines, ok := r.rewrite[cmd.line]; ok {
							c.cmds[i].body = lines
							rewrite[cmd.line] = lines
						}
					}
				}()
			}
			bug, cmds := "", c.cmds[:0:0]
			for _, cmd := range c.cmds {
				switch {
				case cmd.args[0] == "nocache":
					if cached {
						t.Skipf("runs without the record cache only: %s", strings.Join(cmd.args[1:], " "))
					}
				case cmd.args[0] == "norestart": // a broker's business
				case cmd.args[0] == "bug" || cmd.args[0] == "cache-bug" && cached:
					bug = strings.Join(cmd.args[1:], " ")
				case cmd.args[0] != "cache-bug":
					cmds = append(cmds, cmd)
				}
			}
			r.run(c.line, c.topology, cmds)
			switch {
			case bug != "" && len(r.errs) > 0:
				t.Skipf("BUG: %s\n%s", bug, strings.Join(r.errs, "\n"))
			case bug != "":
				t.Errorf("%s:%d: the case is marked as a bug (%s) but passes (%s): remove the bug line", file, c.line, bug, mode)
			default:
				for _, e := range r.errs {
					t.Error(e)
				}
			}
		})
	}
}

func (r *dslRun) run(line int, topology string, cmds []dslCommand) {
	start := dslCommand{line: line, args: []string{"topology", topology}}
	defer func() {
		if p := recover(); p != nil {
			r.errorf(start, "panic: %v", p)
		}
	}()
	def, ok := dslTopologies[topology]
	if !ok {
		r.errorf(start, "no such topology; the harness has %v", slices.Sorted(maps.Keys(dslTopologies)))
		return
	}
	r.in, r.out, r.stores = dslKinds(def.in), dslKinds(def.out), dslKinds(def.stores)
	top, buildErr := dslBuild(def, "", func(format string, args ...any) {
		r.log = append(r.log, dslLogLine(format, args...))
	})
	if len(cmds) > 0 && cmds[0].args[0] == "build-error" {
		if buildErr == nil {
			r.errorf(cmds[0], "Build succeeded")
		} else {
			r.compareError(cmds[0], buildErr)
		}
		if len(cmds) > 1 {
			r.errorf(cmds[1], "a case with build-error has no other command")
		}
		return
	}
	if buildErr != nil {
		r.errorf(start, "Build: %v", buildErr)
		return
	}
	r.top = top
	if r.unfused {
		top = engine.Unfused(top)
	}
	var opts []enginetest.Option
	if r.cached {
		opts = append(opts, enginetest.CacheBytes(1<<20))
	}
	d, err := enginetest.Start(top, opts...)
	if err != nil {
		r.errorf(start, "start: %v", err)
		return
	}
	defer func() {
		if err := d.Close(); err != nil {
			r.errorf(start, "close: %v", err)
		}
	}()
	r.d = d
	for _, cmd := range cmds {
		r.exec(cmd)
	}
	if r.cached {
		if err := d.TryCommit(); err != nil {
			r.errorf(start, "commit at the end: %v", err)
		}
		r.log = nil
	}
	for _, topic := range slices.Sorted(maps.Keys(r.out)) {
		if got := r.unread(topic); len(got) > 0 {
			r.errorf(start, "the case does not expect this output on %s:\n  %s", topic, strings.Join(got, "\n  "))
		}
	}
	if len(r.log) > 0 {
		r.errorf(start, "the case does not expect these calls:\n  %s", strings.Join(r.log, "\n  "))
	}
}

func (r *dslRun) exec(cmd dslCommand) {
	args := cmd.args
	if r.cached && slices.Contains([]string{"expect", "store", "skipped", "log"}, args[0]) {
		if err := r.d.TryCommit(); err != nil {
			r.errorf(cmd, "commit: %v", err)
			return
		}
	}
	switch args[0] {
	case "pipe", "pipe-error":
		if len(args) != 5 || !strings.HasPrefix(args[4], "@") {
			r.errorf(cmd, "want: %s <topic> <key> <value> @<ms>", args[0])
			return
		}
		err := r.pipe(args[1], args[2], args[3], args[4], args[0] == "pipe-error")
		switch {
		case args[0] == "pipe" && err != nil:
			r.errorf(cmd, "%v", err)
		case args[0] == "pipe-error" && err == nil:
			r.errorf(cmd, "the pipe succeeded")
		case args[0] == "pipe-error":
			r.compareError(cmd, err)
		}
	case "expect":
		if len(args) != 2 {
			r.errorf(cmd, "want: expect <topic>")
			return
		}
		if _, ok := r.out[args[1]]; !ok {
			r.errorf(cmd, "the topology declares no output topic %s", args[1])
			return
		}
		if r.cached {
			r.compareLatest(cmd, r.unread(args[1]))
		} else {
			r.compare(cmd, r.unread(args[1]))
		}
	case "store":
		if len(args) != 2 {
			r.errorf(cmd, "want: store <name>")
			return
		}
		got, err := r.store(args[1])
		if err != nil {
			r.errorf(cmd, "%v", err)
			return
		}
		r.compare(cmd, got)
	case "skipped":
		var got []string
		skipped := r.d.Skipped()
		for _, k := range slices.Sorted(maps.Keys(skipped)) {
			got = append(got, fmt.Sprintf("%s = %d", k, skipped[k]))
		}
		r.compare(cmd, got)
	case "log":
		got := r.log
		r.log = nil
		if !r.cached {
			r.compare(cmd, got)
		}
	case "describe":
		r.compare(cmd, dslDescribe(r.top, ""))
	case "restart":
		// The driver keeps its state; on a broker (datadriven_kafka_test.go)
		// the instance is replaced here.
	default:
		r.errorf(cmd, "unknown command")
	}
}

func (r *dslRun) pipe(topic, key, value, at string, raw bool) error {
	kb, vb, ms, err := r.record(topic, key, value, at, raw)
	if err != nil {
		return err
	}
	return r.d.PipeBytes(topic, kb, vb, enginetest.At(ms))
}

// record encodes the record of a pipe or pipe-error (raw) command.
func (r *dslRun) record(topic, key, value, at string, raw bool) (k, v []byte, ms int64, err error) {
	kind, ok := r.in[topic]
	if !ok {
		return nil, nil, 0, fmt.Errorf("the topology declares no input topic %s", topic)
	}
	if ms, err = strconv.ParseInt(at[1:], 10, 64); err != nil {
		return nil, nil, 0, fmt.Errorf("timestamp %s: %v", at, err)
	}
	if key != "~" {
		k = []byte(key)
	}
	if v, err = dslEncode(kind, value); err != nil {
		if !raw {
			return nil, nil, 0, err
		}
		v = []byte(value) // pipe-error may pipe bytes the topic's serde rejects
	}
	return k, v, ms, nil
}

// unread formats the records of an output topic not read yet.
func (r *dslRun) unread(topic string) []string {
	real := topic
	if base, ok := strings.CutPrefix(topic, "${app}-"); ok {
		real = r.d.InternalTopic(base)
	}
	msgs := r.d.Messages(real)[r.read[topic]:]
	r.read[topic] += len(msgs)
	var lines []string
	for _, m := range msgs {
		lines = append(lines, dslFormat(m.Key, m.Value, r.out[topic], m.Timestamp.UnixMilli()))
	}
	return lines
}

func (r *dslRun) store(name string) ([]string, error) {
	k, ok := r.stores[name]
	if !ok {
		return nil, fmt.Errorf("the topology declares no store %s", name)
	}
	st, err := r.d.LocalStore(name)
	if err != nil {
		return nil, err
	}
	return dslStoreLines(st, k)
}

// dslStoreLines lists a store's entries in key order, formatted as the
// store command's lines.
func dslStoreLines(st topo.KVStore, k dslKind) ([]string, error) {
	var lines []string
	for e, err := range st.Range(nil, nil) {
		if err != nil {
			return nil, err
		}
		lines = append(lines, dslFormat(e.Key, e.Value, k, e.Timestamp))
	}
	return lines, nil
}

func dslEncode(k dslKind, s string) ([]byte, error) {
	switch {
	case s == "~":
		return nil, nil
	case s == `""`:
		return []byte{}, nil
	case k == dslI64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("value %q is not an int64", s)
		}
		return serde.Int64.Encode(n)
	}
	return []byte(s), nil
}

func dslFormat(key, value []byte, k dslKind, unixMilli int64) string {
	ks := "~"
	switch {
	case key == nil:
	case len(key) == 0:
		ks = `""`
	default:
		ks = string(key)
	}
	if k == dslCountWindowedI64 && len(key) >= 8 {
		ks = fmt.Sprintf("%s#%d", key[:len(key)-8], binary.BigEndian.Uint64(key[len(key)-8:]))
	}
	vs := "~"
	switch {
	case value == nil:
	case len(value) == 0 && k == dslTxt:
		vs = `""`
	case k == dslI64 || k == dslCountWindowedI64:
		n, err := serde.Int64.Decode(value)
		if err != nil {
			vs = fmt.Sprintf("<%v>", err)
		} else {
			vs = strconv.FormatInt(n, 10)
		}
	default:
		vs = string(value)
	}
	return fmt.Sprintf("%s %s @%d", ks, vs, unixMilli-enginetest.Epoch.UnixMilli())
}

// compare reports got against the command's expected lines, as a diff.
func (r *dslRun) compare(cmd dslCommand, got []string) {
	if r.rewrites(cmd) {
		r.rewrite[cmd.line] = got
		return
	}
	if slices.Equal(got, cmd.body) {
		return
	}
	r.errorf(cmd, "differs (-want +got):\n%s", dslDiff(cmd.body, got))
}

// compareError reports each expected line of a build-error or pipe-error
// that err does not say. The rewritten lines are the expected ones if err
// says them all, else the lines of err.
func (r *dslRun) compareError(cmd dslCommand, err error) {
	msg := err.Error()
	var missing []string
	for _, want := range cmd.body {
		if !strings.Contains(msg, want) {
			missing = append(missing, want)
		}
	}
	if r.rewrites(cmd) {
		if len(missing) > 0 {
			var lines []string
			for _, l := range strings.Split(msg, "\n") {
				if l = strings.Join(strings.Fields(l), " "); l != "" {
					lines = append(lines, l)
				}
			}
			r.rewrite[cmd.line] = lines
		}
		return
	}
	for _, want := range missing {
		r.errorf(cmd, "the error does not say %q:\n%v", want, err)
	}
}

// dslDescribe is the describe command's lines: the topology's Describe(),
// with prefix taken out of its topics' names.
func dslDescribe(top *engine.Topology, prefix string) []string {
	d := strings.TrimRight(top.Describe(), "\n")
	if prefix != "" {
		d = strings.ReplaceAll(d, prefix, "")
	}
	lines := strings.Split(d, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return lines
}

// compareLatest reports got against the command's expected lines, keeping
// only the latest record of each key; a key whose latest expected record is
// a tombstone may be missing from got. Timestamps are not compared: an
// aggregate's timestamp is that of its latest contributing input, and with
// the cache an input whose contribution was taken back before the flush
// (a row that left the group) never contributed.
func (r *dslRun) compareLatest(cmd dslCommand, got []string) {
	latest := func(lines []string) map[string]string {
		m := map[string]string{}
		for _, l := range lines {
			k, _, _ := strings.Cut(l, " ")
			if i := strings.LastIndex(l, " @"); i >= 0 {
				l = l[:i]
			}
			m[k] = l
		}
		return m
	}
	w, g := latest(cmd.body), latest(got)
	for k, l := range w {
		if _, ok := g[k]; !ok && strings.HasSuffix(l, " ~") {
			delete(w, k)
		}
	}
	want, have := slices.Sorted(maps.Values(w)), slices.Sorted(maps.Values(g))
	if !slices.Equal(want, have) {
		r.errorf(cmd, "the latest record of each key differs (-want +got):\n%s", dslDiff(want, have))
	}
}

// dslDiff is a line diff by longest common subsequence.
func dslDiff(want, got []string) string {
	n, m := len(want), len(got)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if want[i] == got[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && want[i] == got[j]:
			fmt.Fprintf(&b, "   %s\n", want[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			fmt.Fprintf(&b, "  -%s\n", want[i])
			i++
		default:
			fmt.Fprintf(&b, "  +%s\n", got[j])
			j++
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// JSON values of the cases.
type (
	dslEmployee struct {
		Dept   string `json:"dept"`
		Salary int64  `json:"salary"`
	}
	dslJob struct {
		Company string `json:"company"`
		Salary  int64  `json:"salary"`
	}
	dslStats struct {
		Count int64 `json:"count"`
		Sum   int64 `json:"sum"`
	}
	dslActivity struct {
		Clicks int64 `json:"clicks"`
		Views  int64 `json:"views"`
		Buys   int64 `json:"buys"`
	}
)

func dslCustomer(_ string, v string) string {
	c, _, _ := strings.Cut(v, ":")
	return c
}

func dslOrNull(v string, ok bool) string {
	if !ok {
		return "null"
	}
	return v
}

func dslTextTables(b *engine.Builder) (*engine.Table[string, string], *engine.Table[string, string]) {
	return engine.NewTable(b, dslTopicPrefix+"left", serde.String, serde.String, engine.Materialized("left-store")),
		engine.NewTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"))
}

// dslTopicPrefix is put before the name of every topic the topologies
// read and write (not their internal topics): on a broker each case has
// topics of its own (TestDSLOnKafka). It is set only while dslBuild builds.
var dslTopicPrefix string

// dslBuildMu serializes dslBuild, which sets dslTopicPrefix.
var dslBuildMu sync.Mutex

// dslBuild builds a topology of the cases with its topics' names prefixed
// by prefix; log receives the logging user functions' calls.
func dslBuild(def dslTopologyDef, prefix string, log dslLogFunc) (*engine.Topology, error) {
	dslBuildMu.Lock()
	defer dslBuildMu.Unlock()
	dslTopicPrefix = prefix
	defer func() { dslTopicPrefix = "" }()
	b := engine.NewBuilder()
	def.build(b, log)
	return b.Build()
}

// dslLogLine is the line of the log command for a user function's call.
func dslLogLine(format string, args ...any) string {
	return strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
}

func dslInts(b *engine.Builder, topic string) *engine.Stream[string, int64] {
	return engine.NewStream(b, dslTopicPrefix+topic, serde.String, serde.Int64)
}

func dslTexts(b *engine.Builder, topic string) *engine.Stream[string, string] {
	return engine.NewStream(b, dslTopicPrefix+topic, serde.String, serde.String)
}

func dslIntTable(b *engine.Builder, topic string, opts ...engine.Option) *engine.Table[string, int64] {
	return engine.NewTable(b, dslTopicPrefix+topic, serde.String, serde.Int64, opts...)
}

func dslEmployees(b *engine.Builder) *engine.Table[string, dslEmployee] {
	return engine.NewTable(b, dslTopicPrefix+"employees", serde.String, serde.JSON[dslEmployee](), engine.Materialized("employees"))
}

func dslByDept(_ string, e dslEmployee) (string, int64) { return e.Dept, e.Salary }

func dslPositive(_ string, v int64) bool { return v > 0 }
func dslPlus(a, v int64) int64           { return a + v }
func dslMinus(a, v int64) int64          { return a - v }
func dslWords(s string) []string         { return strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) }
func dslFirstLetter(k string, _ int64) string {
	if k == "" {
		return ""
	}
	return k[:1]
}

func dslParity(_ string, v int64) string {
	if v%2 == 0 {
		return "even"
	}
	return "odd"
}

func dslAddStats(_ string, v int64, s dslStats) dslStats { return dslStats{s.Count + 1, s.Sum + v} }

// dslWindowed writes a windowed table's changes to "out" with text keys
// "<key>@<start>-<end>", the window in ms from enginetest.Epoch.
// A retraction (a merged session) is a tombstone.
func dslWindowed(t *engine.Table[engine.Windowed[string], int64]) {
	epoch := enginetest.Epoch.UnixMilli()
	text := serde.Func(func(k engine.Windowed[string]) ([]byte, error) {
		return fmt.Appendf(nil, "%s@%d-%d", k.Key, k.Window.Start.UnixMilli()-epoch, k.Window.End.UnixMilli()-epoch), nil
	}, func([]byte) (engine.Windowed[string], error) {
		return engine.Windowed[string]{}, errors.New("the test's windowed keys are written, not read")
	})
	t.ToStream().WithSerdes(text, serde.Int64).To(dslTopicPrefix + "out")
}

func dslSum(a, v int64) int64 { return a + v }

// dslCountWindowKey writes a count-windowed key "<key>#<start>-<end>".
func dslCountWindowKey(k engine.CountWindowed[string], _ string) string {
	return fmt.Sprintf("%s#%d-%d", k.Key, k.Window.Start, k.Window.End)
}

func dslCountWindowed(t *engine.Table[engine.CountWindowed[string], int64]) {
	engine.SelectKey(t.ToStream(), func(k engine.CountWindowed[string], _ int64) string { return dslCountWindowKey(k, "") }, engine.Named("key")).
		WithSerdes(serde.String, serde.Int64).To(dslTopicPrefix + "out")
}

// dslTopologies are the topologies the cases name.
var dslTopologies = map[string]dslTopologyDef{
	// Windowed aggregations: 10ms windows; hopping ones advance by 5ms.
	"tumbling-count": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.TumblingWindows(10*time.Millisecond)), engine.Named("count")))
	}},
	"tumbling-count-grace": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.TumblingWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count")))
	}},
	"hopping-count": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.HoppingWindows(10*time.Millisecond, 5*time.Millisecond)), engine.Named("count")))
	}},
	"tumbling-count-final": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.TumblingWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count"), engine.EmitFinal(), engine.EmitInterval(0)))
	}},
	"hopping-count-final": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.HoppingWindows(10*time.Millisecond, 5*time.Millisecond)), engine.Named("count"), engine.EmitFinal(), engine.EmitInterval(0)))
	}},
	"tumbling-count-suppress": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.SuppressUntilWindowCloses(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.TumblingWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count")), engine.Named("suppress")))
	}},
	// Count windows: 3 records per key; hopping ones start every 2 records.
	// Sums, so that an output says which records a window holds.
	"count-tumbling-sum": {in: "in:int", out: "out:int", stores: "sum:count-windowed-int sum-seq:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslCountWindowed(engine.CountWindowedReduce(dslInts(b, "in").GroupByKey().WindowedByCount(engine.TumblingCountWindows(3)), dslSum, engine.Named("sum"), engine.Materialized("sum")))
	}},
	"count-tumbling-sum-final": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslCountWindowed(engine.CountWindowedReduce(dslInts(b, "in").GroupByKey().WindowedByCount(engine.TumblingCountWindows(3)), dslSum, engine.Named("sum"), engine.EmitFinal()))
	}},
	"count-hopping-sum": {in: "in:int", out: "out:int", stores: "sum:count-windowed-int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslCountWindowed(engine.CountWindowedReduce(dslInts(b, "in").GroupByKey().WindowedByCount(engine.HoppingCountWindows(3, 2)), dslSum, engine.Named("sum"), engine.Materialized("sum")))
	}},
	"count-hopping-count-final": {in: "in:int", out: "out:int", stores: "count:count-windowed-int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslCountWindowed(engine.CountWindowedCount(dslInts(b, "in").GroupByKey().WindowedByCount(engine.HoppingCountWindows(3, 2).Keep(2)), engine.Named("count"), engine.Materialized("count"), engine.EmitFinal()))
	}},
	"count-regrouped-aggregate": {in: "in:int", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		g := engine.GroupBy(dslInts(b, "in"), dslFirstLetter, engine.Named("by-letter"))
		t := engine.CountWindowedAggregate(g.WindowedByCount(engine.TumblingCountWindows(2)), func() string { return "" },
			func(_ string, v int64, agg string) string { return agg + "[" + strconv.FormatInt(v, 10) + "]" }, engine.Named("list"), engine.ValueSerde(serde.String))
		engine.SelectKey(t.ToStream(), dslCountWindowKey, engine.Named("key")).WithSerdes(serde.String, serde.String).To(dslTopicPrefix + "out")
	}},
	"count-window-errors": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		g := dslInts(b, "in").GroupByKey()
		dslCountWindowed(engine.CountWindowedReduce(g.WindowedByCount(engine.HoppingCountWindows(2, 3)), dslSum, engine.Named("too-far")))
		dslCountWindowed(engine.CountWindowedReduce(g.WindowedByCount(engine.TumblingCountWindows(0).Keep(0)), nil, engine.Named("empty"), engine.Retention(time.Hour)))
	}},
	// Sliding windows: a time difference of 10ms, grace 5ms.
	"sliding-count": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.SlidingWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count")))
	}},
	"sliding-count-final": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.WindowedCount(dslInts(b, "in").GroupByKey().WindowedBy(engine.SlidingWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count"), engine.EmitFinal(), engine.EmitInterval(0)))
	}},
	// Sessions: an inactivity gap of 10ms, grace 5ms.
	"session-count": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.SessionCount(dslInts(b, "in").GroupByKey().SessionWindowedBy(engine.SessionWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count")))
	}},
	"session-count-final": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.SessionCount(dslInts(b, "in").GroupByKey().SessionWindowedBy(engine.SessionWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count"), engine.EmitFinal(), engine.EmitInterval(0)))
	}},
	"session-count-suppress": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslWindowed(engine.SuppressUntilWindowCloses(engine.SessionCount(dslInts(b, "in").GroupByKey().SessionWindowedBy(engine.SessionWindows(10*time.Millisecond).Grace(5*time.Millisecond)), engine.Named("count")), engine.Named("suppress")))
	}},
	// Cogrouped in windows: records of "in" count one each, those of "in2"
	// add a hundred times their value; grace 100ms.
	"windowed-cogroup": {in: "in:int in2:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		c := engine.Cogroup(dslInts(b, "in").GroupByKey(), func(_ string, _ int64, agg int64) int64 { return agg + 1 })
		c = engine.CogroupWith(c, dslInts(b, "in2").GroupByKey(), func(_ string, v int64, agg int64) int64 { return agg + 100*v })
		dslWindowed(engine.WindowedCogroup(c, engine.TumblingWindows(10*time.Millisecond).Grace(100*time.Millisecond), func() int64 { return 0 }, engine.Named("cogroup")))
	}},
	"session-cogroup": {in: "in:int in2:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		c := engine.Cogroup(dslInts(b, "in").GroupByKey(), func(_ string, _ int64, agg int64) int64 { return agg + 1 })
		c = engine.CogroupWith(c, dslInts(b, "in2").GroupByKey(), func(_ string, v int64, agg int64) int64 { return agg + 100*v })
		dslWindowed(engine.SessionCogroup(c, engine.SessionWindows(10*time.Millisecond).Grace(100*time.Millisecond), func() int64 { return 0 },
			func(_ string, a, b int64) int64 { return a + b }, engine.Named("cogroup")))
	}},
	"windowed-sum": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		g := engine.GroupBy(dslInts(b, "in"), dslFirstLetter, engine.Named("by-letter"))
		dslWindowed(engine.WindowedReduce(g.WindowedBy(engine.TumblingWindows(10*time.Millisecond)), func(a, v int64) int64 { return a + v }, engine.Named("sum")))
	}},
	// Joins: a stream or table "left" with a table "right", text values,
	// the results written "<left>+<right>" ("null" for a side not there).
	"stream-table-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		right := engine.NewTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"))
		engine.Join(dslTexts(b, "left"), right, func(_ string, v, tv string) string { return v + "+" + tv }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	"stream-table-left-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		right := engine.NewTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"))
		engine.LeftJoin(dslTexts(b, "left"), right, func(_ string, v, tv string, found bool) string { return v + "+" + dslOrNull(tv, found) }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	// Versioned tables keep 20ms of history; the grace join waits 5ms.
	"versioned-table": {in: "right:text", out: "out:text", stores: "right-store:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.NewTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"), engine.Versioned(20*time.Millisecond), engine.Named("right")).
			ToStream().To(dslTopicPrefix + "out")
	}},
	"stream-table-join-versioned": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		right := engine.NewTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"), engine.Versioned(20*time.Millisecond), engine.Named("right"))
		engine.Join(dslTexts(b, "left"), right, func(_ string, v, tv string) string { return v + "+" + tv }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	"stream-table-left-join-grace": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		right := engine.Map(dslTexts(b, "right"), func(k, v string) (string, string) { return k, v }, engine.Named("rekey")).
			ToTable(engine.Materialized("right-store"), engine.Versioned(20*time.Millisecond), engine.Named("right"))
		engine.LeftJoin(dslTexts(b, "left"), right, func(_ string, v, tv string, found bool) string { return v + "+" + dslOrNull(tv, found) },
			engine.Named("join"), engine.JoinGrace(5*time.Millisecond)).To(dslTopicPrefix + "out")
	}},
	"table-table-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		l, r := dslTextTables(b)
		engine.JoinTables(l, r, func(_ string, lv, rv string) string { return lv + "+" + rv }, engine.Named("join")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-table-left-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		l, r := dslTextTables(b)
		engine.LeftJoinTables(l, r, func(_ string, lv, rv string, found bool) string { return lv + "+" + dslOrNull(rv, found) }, engine.Named("join")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-table-outer-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		l, r := dslTextTables(b)
		engine.OuterJoinTables(l, r, func(_ string, lv string, lok bool, rv string, rok bool) string {
			return dslOrNull(lv, lok) + "+" + dslOrNull(rv, rok)
		}, engine.Named("join")).ToStream().To(dslTopicPrefix + "out")
	}},
	// Joins with a global table: "left" values are "<customer>:<item>",
	// looked up by customer in the global table "right".
	"global-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		right := engine.NewGlobalTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"))
		engine.JoinGlobal(dslTexts(b, "left"), right, dslCustomer, func(_ string, v, tv string) string { return v + "+" + tv }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	"global-left-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		right := engine.NewGlobalTable(b, dslTopicPrefix+"right", serde.String, serde.String, engine.Materialized("right-store"))
		engine.LeftJoinGlobal(dslTexts(b, "left"), right, dslCustomer, func(_ string, v, tv string, found bool) string { return v + "+" + dslOrNull(tv, found) }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	// Stream-stream joins of records at most 10ms apart, without grace. The
	// left and outer joins look for non-joined results on every record
	// (EmitInterval(0), as Kafka Streams' TopologyTestDriver does), not
	// once a second of the wall clock, so that a broker's run gives the
	// driver's results.
	"stream-stream-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.JoinStreams(dslTexts(b, "left"), dslTexts(b, "right"), engine.JoinTimeDifference(10*time.Millisecond),
			func(_ string, lv, rv string) string { return lv + "+" + rv }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	"stream-stream-left-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.LeftJoinStreams(dslTexts(b, "left"), dslTexts(b, "right"), engine.JoinTimeDifference(10*time.Millisecond),
			func(_ string, lv, rv string, found bool) string { return lv + "+" + dslOrNull(rv, found) }, engine.Named("join"), engine.EmitInterval(0)).To(dslTopicPrefix + "out")
	}},
	"stream-stream-outer-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.OuterJoinStreams(dslTexts(b, "left"), dslTexts(b, "right"), engine.JoinTimeDifference(10*time.Millisecond),
			func(_ string, lv string, lok bool, rv string, rok bool) string {
				return dslOrNull(lv, lok) + "+" + dslOrNull(rv, rok)
			}, engine.Named("join"), engine.EmitInterval(0)).To(dslTopicPrefix + "out")
	}},
	// Foreign-key joins: "left" rows are orders "<customer>:<item>", joined
	// with the customer's row in "right".
	"fk-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		l, r := dslTextTables(b)
		engine.JoinForeignKey(l, r, dslCustomer, func(_ string, lv, rv string) string { return lv + "+" + rv }, engine.Named("join")).ToStream().To(dslTopicPrefix + "out")
	}},
	"fk-left-join": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		l, r := dslTextTables(b)
		engine.LeftJoinForeignKey(l, r, dslCustomer, func(_ string, lv, rv string, found bool) string { return lv + "+" + dslOrNull(rv, found) }, engine.Named("join")).ToStream().To(dslTopicPrefix + "out")
	}},
	// Stream-stream joins whose window holds all of a case's records (the
	// left join, as above, looks for non-joined results on every record).
	"stream-stream-join-wide": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.JoinStreams(dslTexts(b, "left"), dslTexts(b, "right"), engine.JoinTimeDifference(100*time.Millisecond),
			func(_ string, lv, rv string) string { return lv + "+" + rv }, engine.Named("join")).To(dslTopicPrefix + "out")
	}},
	"stream-stream-left-join-wide": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.LeftJoinStreams(dslTexts(b, "left"), dslTexts(b, "right"), engine.JoinTimeDifference(100*time.Millisecond),
			func(_ string, lv, rv string, found bool) string { return lv + "+" + dslOrNull(rv, found) }, engine.Named("join"), engine.EmitInterval(0)).To(dslTopicPrefix + "out")
	}},
	// A join with a table kept in no store of its own: the filter's.
	"table-table-join-unmaterialized": {in: "left:text right:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		l, r := dslTextTables(b)
		r = r.Filter(func(_ string, v string) bool { return v != "skip" }, engine.Named("filter"))
		engine.JoinTables(l, r, func(_ string, lv, rv string) string { return lv + "+" + rv }, engine.Named("join")).ToStream().To(dslTopicPrefix + "out")
	}},
	// Stateless stream operations.
	"filter": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslInts(b, "in").Filter(dslPositive, engine.Named("filter")).To(dslTopicPrefix + "out")
	}},
	"filter-not": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslInts(b, "in").FilterNot(dslPositive, engine.Named("filter-not")).To(dslTopicPrefix + "out")
	}},
	// Map swaps key and value, changing both types.
	"map": {in: "in:int", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.Map(dslInts(b, "in"), func(k string, v int64) (string, string) { return strconv.FormatInt(v, 10), k }, engine.Named("map")).To(dslTopicPrefix + "out")
	}},
	"map-values": {in: "in:int", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.MapValues(dslInts(b, "in"), func(k string, v int64) string { return fmt.Sprintf("%s:%d", k, 2*v) }, engine.Named("map-values")).To(dslTopicPrefix + "out")
	}},
	// FlatMap: each comma-separated word of the value becomes a key, with the
	// old key as its value.
	"flat-map": {in: "in:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.FlatMap(dslTexts(b, "in"), func(k, v string) []engine.KeyValue[string, string] {
			var kvs []engine.KeyValue[string, string]
			for _, w := range dslWords(v) {
				kvs = append(kvs, engine.KV(w, k))
			}
			return kvs
		}, engine.Named("flat-map")).To(dslTopicPrefix + "out")
	}},
	"flat-map-values": {in: "in:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.FlatMapValues(dslTexts(b, "in"), func(_, v string) []string { return dslWords(v) }, engine.Named("flat-map-values")).To(dslTopicPrefix + "out")
	}},
	"select-key": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.SelectKey(dslInts(b, "in"), dslParity, engine.Named("select-key")).To(dslTopicPrefix + "out")
	}},
	"peek": {in: "in:int", out: "out:int", build: func(b *engine.Builder, log dslLogFunc) {
		dslInts(b, "in").Peek(func(k string, v int64) { log("peek %s %d", k, v) }, engine.Named("peek")).To(dslTopicPrefix + "out")
	}},
	"foreach": {in: "in:int", build: func(b *engine.Builder, log dslLogFunc) {
		dslInts(b, "in").Foreach(func(k string, v int64) { log("foreach %s %d", k, v) }, engine.Named("foreach"))
	}},
	"merge": {in: "left:int right:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslInts(b, "left").Merge(dslInts(b, "right"), engine.Named("merge")).To(dslTopicPrefix + "out")
	}},
	"to": {in: "in:int", out: "out-1:int out-2:int", build: func(b *engine.Builder, _ dslLogFunc) {
		s := dslInts(b, "in")
		s.To(dslTopicPrefix + "out-1")
		s.Filter(dslPositive).To(dslTopicPrefix + "out-2")
	}},

	// Split: negative, then small (< 10), then the rest.
	"split": {in: "in:int", out: "negative:int small:int large:int", build: func(b *engine.Builder, _ dslLogFunc) {
		sp := dslInts(b, "in").Split(engine.Named("split"))
		sp.Branch("negative", func(_ string, v int64) bool { return v < 0 }).To(dslTopicPrefix + "negative")
		sp.Branch("small", func(_ string, v int64) bool { return v < 10 }).To(dslTopicPrefix + "small")
		sp.Default("large").To(dslTopicPrefix + "large")
	}},
	"split-no-default": {in: "in:int", out: "negative:int small:int", build: func(b *engine.Builder, _ dslLogFunc) {
		sp := dslInts(b, "in").Split(engine.Named("split"))
		sp.Branch("negative", func(_ string, v int64) bool { return v < 0 }).To(dslTopicPrefix + "negative")
		sp.Branch("small", func(_ string, v int64) bool { return v < 10 }).To(dslTopicPrefix + "small")
	}},
	"split-branch-after-default": {build: func(b *engine.Builder, _ dslLogFunc) {
		sp := dslInts(b, "in").Split(engine.Named("split"))
		sp.Default("rest").To(dslTopicPrefix + "rest")
		sp.Branch("late", dslPositive).To(dslTopicPrefix + "late")
	}},

	// Repartitioning.
	"repartition": {in: "in:int", out: "out:int ${app}-by-letter-repartition:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.SelectKey(dslInts(b, "in"), dslFirstLetter, engine.Named("first-letter")).Repartition(engine.Named("by-letter")).To(dslTopicPrefix + "out")
	}},
	"repartition-count": {in: "in:int", out: "out:int ${app}-by-letter-repartition:int", stores: "counts:int", build: func(b *engine.Builder, _ dslLogFunc) {
		rekeyed := engine.Map(dslInts(b, "in"), func(k string, v int64) (string, int64) { return dslFirstLetter(k, v), v }, engine.Named("first-letter"))
		rekeyed.GroupByKey(engine.Named("by-letter")).Count(engine.Named("count"), engine.Materialized("counts")).ToStream().To(dslTopicPrefix + "out")
	}},

	// After an explicit Repartition the key matches the partitioning: the
	// grouping does not repartition again.
	"repartition-then-count": {in: "in:int", out: "out:int ${app}-by-letter-repartition:int ${app}-grouped-repartition:int", stores: "counts:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.SelectKey(dslInts(b, "in"), dslFirstLetter, engine.Named("first-letter")).Repartition(engine.Named("by-letter")).
			GroupByKey(engine.Named("grouped")).Count(engine.Named("count"), engine.Materialized("counts")).ToStream().To(dslTopicPrefix + "out")
	}},
	// A merge with a re-keyed stream is re-keyed: the grouping repartitions
	// the records of both sides.
	"merge-count": {in: "left:int right:int", out: "out:int ${app}-merged-repartition:int", stores: "counts:int", build: func(b *engine.Builder, _ dslLogFunc) {
		left := engine.SelectKey(dslInts(b, "left"), dslFirstLetter, engine.Named("first-letter"))
		left.Merge(dslInts(b, "right"), engine.Named("merge")).GroupByKey(engine.Named("merged")).Count(engine.Named("count"), engine.Materialized("counts")).ToStream().To(dslTopicPrefix + "out")
	}},

	// A stream merged with its own per-letter counts: the merge reads the
	// input topic and the grouping's repartition topic.
	"merge-own-count": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		s := dslInts(b, "in")
		s.Merge(engine.GroupBy(s, dslFirstLetter, engine.Named("by-letter")).Count(engine.Named("count")).ToStream(), engine.Named("merge")).To(dslTopicPrefix + "out")
	}},
	// Split branches merged back: every record comes out once.
	"split-merge": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		sp := dslInts(b, "in").Split(engine.Named("split"))
		neg := sp.Branch("negative", func(_ string, v int64) bool { return v < 0 })
		neg.Merge(sp.Default("rest"), engine.Named("merge")).To(dslTopicPrefix + "out")
	}},

	// Stream aggregations.
	"count": {in: "in:int", out: "out:int", stores: "counts:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslInts(b, "in").GroupByKey().Count(engine.Named("count"), engine.Materialized("counts")).ToStream().To(dslTopicPrefix + "out")
	}},
	"reduce": {in: "in:int", out: "out:int", stores: "sums:int", build: func(b *engine.Builder, log dslLogFunc) {
		dslInts(b, "in").GroupByKey().Reduce(func(a, v int64) int64 { log("reduce %d %d", a, v); return a + v }, engine.Named("reduce"), engine.Materialized("sums")).ToStream().To(dslTopicPrefix + "out")
	}},
	"aggregate": {in: "in:int", out: "out:text", stores: "stats:text", build: func(b *engine.Builder, log dslLogFunc) {
		g := dslInts(b, "in").GroupByKey()
		engine.Aggregate(g, func() dslStats { log("init"); return dslStats{} }, dslAddStats, engine.Named("aggregate"), engine.Materialized("stats")).ToStream().To(dslTopicPrefix + "out")
	}},
	"groupby-count": {in: "in:int", out: "out:int ${app}-parity-repartition:int", stores: "counts:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.GroupBy(dslInts(b, "in"), dslParity, engine.Named("parity")).Count(engine.Named("count"), engine.Materialized("counts")).ToStream().To(dslTopicPrefix + "out")
	}},
	"groupby-reduce": {in: "in:int", out: "out:int ${app}-by-letter-repartition:int", stores: "max:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.GroupBy(dslInts(b, "in"), dslFirstLetter, engine.Named("by-letter")).Reduce(func(a, v int64) int64 { return max(a, v) }, engine.Named("reduce"), engine.Materialized("max")).ToStream().To(dslTopicPrefix + "out")
	}},
	"groupby-aggregate": {in: "in:int", out: "out:text ${app}-by-letter-repartition:int", stores: "stats:text", build: func(b *engine.Builder, _ dslLogFunc) {
		g := engine.GroupBy(dslInts(b, "in"), dslFirstLetter, engine.Named("by-letter"))
		engine.Aggregate(g, func() dslStats { return dslStats{} }, dslAddStats, engine.Named("aggregate"), engine.Materialized("stats")).ToStream().To(dslTopicPrefix + "out")
	}},
	// One grouping, two aggregations of it.
	"groupby-twice": {in: "in:int", out: "counts:int sums:int", build: func(b *engine.Builder, _ dslLogFunc) {
		g := engine.GroupBy(dslInts(b, "in"), dslFirstLetter, engine.Named("by-letter"))
		g.Count(engine.Named("count")).ToStream().To(dslTopicPrefix + "counts")
		g.Reduce(dslPlus, engine.Named("sum")).ToStream().To(dslTopicPrefix + "sums")
	}},

	// Streams into tables.
	"totable": {in: "in:int", out: "out:int", stores: "latest:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslInts(b, "in").ToTable(engine.Named("table"), engine.Materialized("latest")).ToStream().To(dslTopicPrefix + "out")
	}},
	"totable-rekeyed": {in: "in:int", out: "out:int ${app}-by-letter-repartition:int", stores: "latest:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.SelectKey(dslInts(b, "in"), dslFirstLetter, engine.Named("first-letter")).ToTable(engine.Named("by-letter"), engine.Materialized("latest")).ToStream().To(dslTopicPrefix + "out")
	}},

	// Stateless table operations.
	"table-to-stream": {in: "in:int", out: "out:int", stores: "source:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in", engine.Materialized("source")).ToStream().To(dslTopicPrefix + "out")
	}},
	"suppress": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in").SuppressUntil(10*time.Millisecond, engine.Named("suppress")).ToStream().To(dslTopicPrefix + "out")
	}},
	"suppress-count": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslInts(b, "in").GroupByKey().Count(engine.Named("count")).SuppressUntil(10*time.Millisecond, engine.Named("suppress")).ToStream().To(dslTopicPrefix + "out")
	}},
	"suppress-max-records": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in").SuppressUntil(10*time.Millisecond, engine.Named("suppress"), engine.MaxRecords(2)).ToStream().To(dslTopicPrefix + "out")
	}},
	"suppress-shut-down-when-full": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in").SuppressUntil(10*time.Millisecond, engine.Named("suppress"), engine.MaxRecords(1), engine.ShutDownWhenFull()).ToStream().To(dslTopicPrefix + "out")
	}},
	"suppress-bad-options": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in").SuppressUntil(-time.Millisecond, engine.ShutDownWhenFull()).ToStream().To(dslTopicPrefix + "out")
	}},
	"suppress-negative-bound": {in: "in:int", out: "out:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in").SuppressUntil(time.Millisecond, engine.MaxBytes(-1)).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-filter": {in: "in:int", out: "out:int", stores: "source:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in", engine.Materialized("source")).Filter(dslPositive, engine.Named("filter")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-filter-not": {in: "in:int", out: "out:int", stores: "source:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in", engine.Materialized("source")).FilterNot(dslPositive, engine.Named("filter-not")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-filter-materialized": {in: "in:int", out: "out:int ${app}-positive-changelog:int", stores: "positive:int", build: func(b *engine.Builder, _ dslLogFunc) {
		dslIntTable(b, "in", engine.Materialized("source")).Filter(dslPositive, engine.Named("filter"), engine.Materialized("positive")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-map-values": {in: "in:int", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.MapTableValues(dslIntTable(b, "in", engine.Materialized("source")), func(_ string, v int64) string { return "$" + strconv.FormatInt(v, 10) },
			engine.Named("map-values")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-map-values-materialized": {in: "in:int", out: "out:text ${app}-prices-changelog:text", stores: "prices:text", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.MapTableValues(dslIntTable(b, "in", engine.Materialized("source")), func(_ string, v int64) string { return "$" + strconv.FormatInt(v, 10) },
			engine.Named("map-values"), engine.Materialized("prices")).ToStream().To(dslTopicPrefix + "out")
	}},
	// Tombstones through every table operation: source -> filter (positive,
	// materialized) -> mapValues (x10, materialized) -> toStream, and the
	// mapped table re-grouped into one total; plus filterNot and an
	// unmaterialized mapValues of the source.
	"table-pipeline": {
		in:     "in:int",
		out:    "out:int total:int non-positive:int labels:text",
		stores: "source:int positive:int tens:int total:int",
		build: func(b *engine.Builder, _ dslLogFunc) {
			src := dslIntTable(b, "in", engine.Materialized("source"))
			tens := engine.MapTableValues(src.Filter(dslPositive, engine.Named("positive"), engine.Materialized("positive")),
				func(_ string, v int64) int64 { return 10 * v }, engine.Named("tens"), engine.Materialized("tens"))
			tens.ToStream().To(dslTopicPrefix + "out")
			engine.GroupTable(tens, func(_ string, v int64) (string, int64) { return "total", v }, engine.Named("all")).
				Reduce(dslPlus, dslMinus, engine.Named("total"), engine.Materialized("total")).ToStream().To(dslTopicPrefix + "total")
			src.FilterNot(dslPositive, engine.Named("non-positive")).ToStream().To(dslTopicPrefix + "non-positive")
			engine.MapTableValues(src, func(_ string, v int64) string { return "$" + strconv.FormatInt(v, 10) }, engine.Named("labels")).ToStream().To(dslTopicPrefix + "labels")
		},
	},

	// Re-grouped tables: employees (name -> dept and salary) by department.
	"table-groupby-count": {in: "employees:text", out: "out:int", stores: "headcount:int", build: func(b *engine.Builder, _ dslLogFunc) {
		engine.GroupTable(dslEmployees(b), dslByDept, engine.Named("by-dept")).Count(engine.Named("count"), engine.Materialized("headcount")).ToStream().To(dslTopicPrefix + "out")
	}},
	"table-groupby-sum": {in: "employees:text", out: "out:int", stores: "payroll:int", build: func(b *engine.Builder, log dslLogFunc) {
		engine.GroupTable(dslEmployees(b), dslByDept, engine.Named("by-dept")).Reduce(
			func(a, v int64) int64 { log("add %d %d", a, v); return a + v },
			func(a, v int64) int64 { log("sub %d %d", a, v); return a - v },
			engine.Named("sum"), engine.Materialized("payroll")).ToStream().To(dslTopicPrefix + "out")
	}},
	// One grouping of a table, two aggregations.
	"table-groupby-twice": {in: "employees:text", out: "counts:int sums:int", build: func(b *engine.Builder, _ dslLogFunc) {
		g := engine.GroupTable(dslEmployees(b), dslByDept, engine.Named("by-dept"))
		g.Count(engine.Named("count")).ToStream().To(dslTopicPrefix + "counts")
		g.Reduce(dslPlus, dslMinus, engine.Named("sum")).ToStream().To(dslTopicPrefix + "sums")
	}},
	// A grouping nobody aggregates (yet) beside a working path.
	"table-groupby-unused": {in: "employees:text", out: "out:text", build: func(b *engine.Builder, _ dslLogFunc) {
		t := dslEmployees(b)
		engine.GroupTable(t, dslByDept, engine.Named("by-dept"))
		t.ToStream().To(dslTopicPrefix + "out")
	}},
	"table-groupby-aggregate": {in: "employees:text", out: "out:text", stores: "stats:text", build: func(b *engine.Builder, log dslLogFunc) {
		engine.AggregateTable(engine.GroupTable(dslEmployees(b), dslByDept, engine.Named("by-dept")),
			func() dslStats { log("init"); return dslStats{} },
			func(k string, v int64, s dslStats) dslStats {
				log("add %s %d", k, v)
				return dslStats{s.Count + 1, s.Sum + v}
			},
			func(k string, v int64, s dslStats) dslStats {
				log("sub %s %d", k, v)
				return dslStats{s.Count - 1, s.Sum - v}
			},
			engine.Named("aggregate"), engine.Materialized("stats")).ToStream().To(dslTopicPrefix + "out")
	}},

	// Cogroup: clicks and views of each user; buys come keyed by order id
	// with the user as value, and are re-grouped by user.
	"cogroup": {in: "clicks:int views:int", out: "out:text", stores: "activity:text", build: func(b *engine.Builder, _ dslLogFunc) {
		c := engine.Cogroup(dslInts(b, "clicks").GroupByKey(), func(_ string, v int64, a dslActivity) dslActivity { a.Clicks += v; return a })
		c = engine.CogroupWith(c, dslInts(b, "views").GroupByKey(), func(_ string, v int64, a dslActivity) dslActivity { a.Views += v; return a })
		c.Aggregate(func() dslActivity { return dslActivity{} }, engine.Named("activity"), engine.Materialized("activity")).ToStream().To(dslTopicPrefix + "out")
	}},
	"cogroup3": {in: "clicks:int views:int buys:text", out: "out:text ${app}-by-user-repartition:text", stores: "activity:text", build: func(b *engine.Builder, _ dslLogFunc) {
		c := engine.Cogroup(dslInts(b, "clicks").GroupByKey(), func(_ string, v int64, a dslActivity) dslActivity { a.Clicks += v; return a })
		c = engine.CogroupWith(c, dslInts(b, "views").GroupByKey(), func(_ string, v int64, a dslActivity) dslActivity { a.Views += v; return a })
		buys := engine.GroupBy(dslTexts(b, "buys"), func(_, user string) string { return user }, engine.Named("by-user"))
		c = engine.CogroupWith(c, buys, func(_ string, _ string, a dslActivity) dslActivity { a.Buys++; return a })
		c.Aggregate(func() dslActivity { return dslActivity{} }, engine.Named("activity"), engine.Materialized("activity")).ToStream().To(dslTopicPrefix + "out")
	}},

	// The stream–table duality: purchases are a stream (every purchase
	// counts), employment is a table (only the current job counts).
	"duality": {
		in:     "purchases:int employment:text",
		out:    "spent:int payroll:int job-changes:int",
		stores: "spent:int last-purchase:int jobs:text payroll:int job-changes:int",
		build: func(b *engine.Builder, _ dslLogFunc) {
			purchases := dslInts(b, "purchases")
			purchases.GroupByKey().Reduce(dslPlus, engine.Named("spent"), engine.Materialized("spent")).ToStream().To(dslTopicPrefix + "spent")
			purchases.ToTable(engine.Named("last-purchase"), engine.Materialized("last-purchase"))
			jobs := engine.NewTable(b, dslTopicPrefix+"employment", serde.String, serde.JSON[dslJob](), engine.Materialized("jobs"))
			engine.GroupTable(jobs, func(_ string, j dslJob) (string, int64) { return "payroll", j.Salary }, engine.Named("all")).
				Reduce(dslPlus, dslMinus, engine.Named("payroll"), engine.Materialized("payroll")).ToStream().To(dslTopicPrefix + "payroll")
			jobs.ToStream().GroupByKey().Count(engine.Named("job-changes"), engine.Materialized("job-changes")).ToStream().To(dslTopicPrefix + "job-changes")
		},
	},

	// Every stream operation side by side, for the tombstone rules.
	"stream-tombstones": {
		in:     "in:int side:int",
		out:    "filter:int filter-not:int map:int map-values:int flat-map:int flat-map-values:int select-key:int peek:int merge:int split:int repartition:int to:int to-table:int count:int reduce:int aggregate:text group-by:int cogroup:text",
		stores: "to-table:int",
		build: func(b *engine.Builder, log dslLogFunc) {
			s := dslInts(b, "in")
			s.Filter(dslPositive, engine.Named("filter")).To(dslTopicPrefix + "filter")
			s.FilterNot(dslPositive, engine.Named("filter-not")).To(dslTopicPrefix + "filter-not")
			engine.Map(s, func(k string, v int64) (string, int64) { log("map %s %d", k, v); return k + "!", v }, engine.Named("map")).To(dslTopicPrefix + "map")
			engine.MapValues(s, func(_ string, v int64) int64 { return 10 * v }, engine.Named("map-values")).To(dslTopicPrefix + "map-values")
			engine.FlatMap(s, func(k string, v int64) []engine.KeyValue[string, int64] {
				return []engine.KeyValue[string, int64]{engine.KV(k+"1", v), engine.KV(k+"2", v)}
			}, engine.Named("flat-map")).To(dslTopicPrefix + "flat-map")
			engine.FlatMapValues(s, func(_ string, v int64) []int64 { return []int64{v, v + 1} }, engine.Named("flat-map-values")).To(dslTopicPrefix + "flat-map-values")
			engine.SelectKey(s, func(k string, _ int64) string { return k + "!" }, engine.Named("select-key")).To(dslTopicPrefix + "select-key")
			s.Peek(func(k string, v int64) { log("peek %s %d", k, v) }, engine.Named("peek")).To(dslTopicPrefix + "peek")
			s.Foreach(func(k string, v int64) { log("foreach %s %d", k, v) }, engine.Named("foreach"))
			s.Merge(dslInts(b, "side"), engine.Named("merge")).To(dslTopicPrefix + "merge")
			sp := s.Split(engine.Named("split"))
			sp.Branch("split-negative", func(_ string, v int64) bool { return v < 0 })
			sp.Default("split-rest").To(dslTopicPrefix + "split")
			s.Repartition(engine.Named("repartition")).To(dslTopicPrefix + "repartition")
			s.To(dslTopicPrefix + "to")
			s.ToTable(engine.Named("to-table"), engine.Materialized("to-table")).ToStream().To(dslTopicPrefix + "to-table")
			s.GroupByKey().Count(engine.Named("count")).ToStream().To(dslTopicPrefix + "count")
			s.GroupByKey().Reduce(dslPlus, engine.Named("reduce")).ToStream().To(dslTopicPrefix + "reduce")
			engine.Aggregate(s.GroupByKey(), func() dslStats { return dslStats{} }, dslAddStats, engine.Named("aggregate")).ToStream().To(dslTopicPrefix + "aggregate")
			engine.GroupBy(s, func(k string, _ int64) string { return k }, engine.Named("group-by")).Count(engine.Named("group-by-count")).ToStream().To(dslTopicPrefix + "group-by")
			engine.Cogroup(s.GroupByKey(), dslAddStats).Aggregate(func() dslStats { return dslStats{} }, engine.Named("cogroup")).ToStream().To(dslTopicPrefix + "cogroup")
		},
	},
}
