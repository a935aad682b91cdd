package engine_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// TestDSLOnKafka runs every data-driven case (testdata/dsl/*.txt; the
// grammar is at the top of datadriven_test.go) on the test's broker, and
// checks what the instance does against the case's own expected lines, the
// ones the driver is held to: the broker run shares no oracle with the
// driver. Each case has topics of its own (dslTopicPrefix), one partition
// each, and runs, in parallel with the others, in two modes:
//
//   - exactly-once: exactly-once without the record cache (CacheBytes < 0),
//     where every update is written and nothing is compacted: expect
//     compares the records exactly, in order, timestamps included, as the
//     driver's nocache mode does; store, skipped and log are compared too.
//   - at-least-once-cached: at least once with the default record cache,
//     for the topologies with a store (for the others the cache changes
//     nothing), unless the case says nocache: the cache and the commits
//     compact a key's updates, so expect compares the latest record of each
//     key (compareLatest, as the driver's cache mode does); store and
//     skipped are compared, log is not.
//
// The piped records are produced in batches, each before the command that
// reads what they caused (expect, store, skipped, log, restart), and the
// test waits until the instance has committed them and what they caused in
// its repartition topics, then reads the outputs, read-committed, to their
// ends. A broker keeps the order of one partition only, so where a case's
// results depend on the order of records of different topics — it pipes
// to several topics, or a sub-topology reads several (a join, a merge with
// a repartitioned stream), or two sub-topologies write one output topic,
// or a global table is read — each record is produced alone and committed
// (a global table's record: is in the table's store) before the next goes.
//
// After the expect halfway through the case's expects (or where the case
// says restart; never if it says norestart) the instance is stopped and a
// new one starts on an empty state directory: the state and the stream
// time come back from the changelogs and the committed offsets, and nothing
// is processed or written twice.
//
// The rules of the other directives on a broker: a build-error case needs
// no broker (Build fails before) and is skipped; a nocache case runs in the
// exactly-once mode only; a bug case (cache-bug: in the cached mode) that
// fails is skipped with the bug's text, as in the driver, and one that
// passes is logged, not failed (the driver decides whether the bug is
// fixed); at a pipe-error the instance must stop, Run returning an error
// that says each indented line (with the case's topic prefix taken out),
// and the case ends there, since the record would stop every instance.
// describe is held to the same lines as in the driver: they describe the
// topology built with the case's own topic names, and the instance's, whose
// topics are prefixed, must be the same but for the names derived from its
// topics (source-<hash>).
func TestDSLOnKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts instances on a broker for every case; not with -short")
	}
	paths, err := filepath.Glob("testdata/dsl/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no files in testdata/dsl: %v", err)
	}
	// The cases wait on the broker far more than they compute: they run
	// *dslKafkaParallel at a time, whatever -parallel says (t.Run may be
	// called from several goroutines at once).
	sem := make(chan struct{}, max(*dslKafkaParallel, 1))
	var files sync.WaitGroup
	for _, file := range paths {
		files.Go(func() {
			t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
				var cases sync.WaitGroup
				for _, c := range loadDSLCases(t, file) {
					cases.Go(func() {
						t.Run(fmt.Sprintf("%d_%s", c.line, c.topology), func(t *testing.T) { runDSLCaseOnKafka(t, file, c, sem) })
					})
				}
				cases.Wait()
			})
		})
	}
	files.Wait()
}

var dslKafkaParallel = flag.Int("dsl.kafka.parallel", 8, "how many runs of TestDSLOnKafka (a case in a mode) go at a time")

// dslKafkaMode is a way TestDSLOnKafka runs a case.
type dslKafkaMode struct {
	name   string
	g      engine.Guarantee
	cached bool
}

var dslKafkaModes = []dslKafkaMode{
	{"exactly-once", engine.ExactlyOnce, false},
	{"at-least-once-cached", engine.AtLeastOnce, true},
}

// dslKafkaCase is a case and what its directives say for a broker.
type dslKafkaCase struct {
	file          string
	c             dslCase
	def           dslTopologyDef
	bug, cacheBug string // the texts of bug and cache-bug
	nocache       bool
	stateful      bool             // the topology has a store
	named         *engine.Topology // built with the case's own topic names, as in the driver
}

func runDSLCaseOnKafka(t *testing.T, file string, c dslCase, sem chan struct{}) {
	def, ok := dslTopologies[c.topology]
	if !ok {
		t.Skip("no such topology: TestDSL reports it")
	}
	kc := dslKafkaCase{file: file, c: c, def: def}
	for _, cmd := range c.cmds {
		switch cmd.args[0] {
		case "build-error":
			t.Skip("Build must fail: no broker is involved (TestDSL checks the error)")
		case "bug":
			kc.bug = strings.Join(cmd.args[1:], " ")
		case "cache-bug":
			kc.cacheBug = strings.Join(cmd.args[1:], " ")
		case "nocache":
			kc.nocache = true
		}
	}
	top, err := dslBuild(def, "", func(string, ...any) {})
	if err != nil {
		t.Fatalf("%s:%d: Build: %v", file, c.line, err)
	}
	kc.named, kc.stateful = top, len(top.Stores()) > 0
	var modes sync.WaitGroup
	defer modes.Wait()
	for _, m := range dslKafkaModes {
		modes.Go(func() {
			// Waiting for room before t.Run, so that its time is the run's.
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(m.name, func(t *testing.T) { kc.run(t, m) })
		})
	}
}

// run runs the case in a mode.
func (kc dslKafkaCase) run(t *testing.T, m dslKafkaMode) {
	switch {
	case m.cached && kc.nocache:
		t.Skip("the case runs without the record cache only")
	case m.cached && !kc.stateful:
		t.Skip("the topology has no store: the record cache changes nothing")
	}
	bug := kc.bug
	if m.cached && bug == "" {
		bug = kc.cacheBug
	}
	b := newDSLBroker(t, kc.file, kc.c, kc.def, m)
	b.named = kc.named
	b.run(kc.c)
	switch errs := b.r.errs; {
	case bug != "" && len(errs) > 0:
		t.Skipf("BUG: %s\n%s", bug, strings.Join(errs, "\n"))
	case bug != "":
		t.Logf("%s:%d: the case is marked as a bug (%s) but passes on a broker", kc.file, kc.c.line, bug)
	default:
		for _, e := range errs {
			t.Error(e)
		}
	}
}

// dslBroker runs a case on the test's broker.
type dslBroker struct {
	t     *testing.T
	k     *kt
	r     *dslRun // the case's kinds, compare and errors; r.d is unused
	mode  dslKafkaMode
	top   *engine.Topology // the instance's: the case's topics prefixed
	named *engine.Topology // the same built with the case's own topic names
	cfg   engine.Config
	a     *app

	inputs   []string          // the input topics the group consumes
	internal []string          // the internal topics it consumes
	globals  map[string]string // a global table's topic -> its store
	perPipe  bool              // each record is committed before the next is produced
	pending  []*kgo.Record
	rd       *dslReader

	// skipped adds up the skip counts of the instances replaced so far.
	skipped map[string]int64
	logMu   sync.Mutex
	log     []string
}

func newDSLBroker(t *testing.T, file string, c dslCase, def dslTopologyDef, m dslKafkaMode) *dslBroker {
	k := newKT(t)
	// Hundreds of cases: their topics go once the instances have stopped
	// (k.start's cleanups, registered later, run first).
	t.Cleanup(func() { k.deleteTopics() })
	b := &dslBroker{t: t, k: k, mode: m, globals: map[string]string{}, skipped: map[string]int64{},
		r: &dslRun{file: file, cached: m.cached, in: dslKinds(def.in), out: dslKinds(def.out), stores: dslKinds(def.stores)}}
	top, err := dslBuild(def, k.prefix+"-", func(format string, args ...any) {
		b.logMu.Lock()
		defer b.logMu.Unlock()
		b.log = append(b.log, dslLogLine(format, args...))
	})
	if err != nil {
		t.Fatalf("%s:%d: Build: %v", file, c.line, err)
	}
	b.top = top

	// The topics: the case's own, created here; the internal ones, which
	// the instance creates.
	var external []string
	writers := map[string]int{} // output topic -> sub-topologies writing it
	multiSource := false
	for _, sub := range engine.SubTopologies(top) {
		for _, s := range sub.Sources {
			if base, ok := strings.CutPrefix(s, "${app}-"); ok {
				b.internal = append(b.internal, k.prefix+"-"+base)
				continue
			}
			external = append(external, s)
			if sub.GlobalStore != "" {
				b.globals[s] = sub.GlobalStore
			} else {
				b.inputs = append(b.inputs, s)
			}
		}
		for _, s := range sub.Sinks {
			writers[s]++
			if !strings.HasPrefix(s, "${app}-") {
				external = append(external, s)
			}
		}
		multiSource = multiSource || len(sub.Sources) > 1 || sub.GlobalStore != ""
	}
	slices.Sort(external)
	external = slices.Compact(external)
	for _, name := range external {
		if !strings.HasPrefix(name, k.prefix+"-") {
			t.Fatalf("topology %s: topic %q is not the case's own: name every topic dslTopicPrefix+<name>", c.topology, name)
		}
	}
	k.create(1, external...)

	piped := map[string]bool{}
	for _, cmd := range c.cmds {
		if (cmd.args[0] == "pipe" || cmd.args[0] == "pipe-error") && len(cmd.args) > 1 {
			piped[cmd.args[1]] = true
		}
	}
	sharedSink := slices.ContainsFunc(slices.Collect(maps.Values(writers)), func(n int) bool { return n > 1 })
	b.perPipe = len(piped) > 1 || multiSource || sharedSink
	switch {
	case len(piped) > 1:
		t.Log("records produced one at a time: the case pipes to several topics")
	case multiSource:
		t.Log("records produced one at a time: a sub-topology reads several topics or a global table")
	case sharedSink:
		t.Log("records produced one at a time: sub-topologies write the same topic")
	default:
		t.Log("records produced in batches")
	}

	b.cfg = engine.Config{Guarantee: m.g, CommitInterval: time.Millisecond, PurgeInterval: time.Hour}
	if !m.cached {
		b.cfg.CacheBytes = -1
	}
	return b
}

// real is the name on the broker of a topic of the case.
func (b *dslBroker) real(topic string) string {
	if base, ok := strings.CutPrefix(topic, "${app}-"); ok {
		return b.k.prefix + "-" + base // the application id is the prefix
	}
	return b.k.prefix + "-" + topic
}

func (b *dslBroker) run(c dslCase) {
	b.a = b.k.start(b.top, b.cfg)
	waitRunning(b.t, b.k, b.a)
	b.rd = newDSLReader(b)

	var cmds []dslCommand
	norestart := false
	for _, cmd := range c.cmds {
		switch cmd.args[0] {
		case "bug", "cache-bug", "nocache":
		case "norestart":
			norestart = true
		default:
			cmds = append(cmds, cmd)
		}
	}
	// Without a restart command, the instance is replaced after the
	// expect halfway through the case's expects, unless the case says
	// norestart.
	restartAfter := -1
	explicit := slices.ContainsFunc(cmds, func(cmd dslCommand) bool { return cmd.args[0] == "restart" })
	if explicit && norestart {
		b.r.errorf(dslCommand{line: c.line, args: []string{"topology", c.topology}}, "a case with norestart has no restart")
		return
	}
	if !explicit && !norestart {
		var expects []int
		for i, cmd := range cmds {
			if cmd.args[0] == "expect" {
				expects = append(expects, i)
			}
		}
		if len(expects) > 0 {
			restartAfter = expects[(len(expects)-1)/2]
		}
	}
	for i, cmd := range cmds {
		if !b.exec(cmd) {
			return // a pipe-error stopped the instance
		}
		if i == restartAfter {
			b.restart()
		}
	}
	b.flush()
	b.rd.readToEnd()
	start := dslCommand{line: c.line, args: []string{"topology", c.topology}}
	for _, topic := range slices.Sorted(maps.Keys(b.r.out)) {
		if got := b.rd.take(b.real(topic)); len(got) > 0 {
			b.r.errorf(start, "the case does not expect this output on %s:\n  %s", topic, strings.Join(got, "\n  "))
		}
	}
	if log := b.takeLog(); len(log) > 0 && !b.mode.cached {
		b.r.errorf(start, "the case does not expect these calls:\n  %s", strings.Join(log, "\n  "))
	}
}

// exec runs a command; false: the case ends here.
func (b *dslBroker) exec(cmd dslCommand) bool {
	r, args := b.r, cmd.args
	switch args[0] {
	case "pipe", "pipe-error":
		if len(args) != 5 || !strings.HasPrefix(args[4], "@") {
			r.errorf(cmd, "want: %s <topic> <key> <value> @<ms>", args[0])
			return true
		}
		key, value, ms, err := r.record(args[1], args[2], args[3], args[4], args[0] == "pipe-error")
		if err != nil {
			r.errorf(cmd, "%v", err)
			return true
		}
		rec := &kgo.Record{Topic: b.real(args[1]), Key: key, Value: value, Timestamp: enginetest.At(ms)}
		if args[0] == "pipe-error" {
			b.pipeError(cmd, rec)
			return false
		}
		b.pending = append(b.pending, rec)
		if b.perPipe {
			b.flush()
		}
	case "expect":
		if len(args) != 2 {
			r.errorf(cmd, "want: expect <topic>")
			return true
		}
		if _, ok := r.out[args[1]]; !ok {
			r.errorf(cmd, "the topology declares no output topic %s", args[1])
			return true
		}
		b.flush()
		b.rd.readToEnd()
		got := b.rd.take(b.real(args[1]))
		if b.mode.cached {
			r.compareLatest(cmd, got)
		} else {
			r.compare(cmd, got)
		}
	case "store":
		if len(args) != 2 {
			r.errorf(cmd, "want: store <name>")
			return true
		}
		kind, ok := r.stores[args[1]]
		if !ok {
			r.errorf(cmd, "the topology declares no store %s", args[1])
			return true
		}
		b.flush()
		var got []string
		var err error
		b.eventually(func() bool {
			st, serr := b.a.LocalStore(args[1])
			if err = serr; err != nil {
				return false
			}
			defer st.Close()
			got, err = dslStoreLines(st, kind)
			return err == nil && slices.Equal(got, cmd.body)
		})
		if err != nil {
			r.errorf(cmd, "%v", err)
			return true
		}
		r.compare(cmd, got)
	case "skipped":
		b.flush()
		var got []string
		b.eventually(func() bool {
			got = got[:0]
			all := maps.Clone(b.skipped)
			for k, v := range b.a.Skipped() {
				all[k] += v
			}
			for _, k := range slices.Sorted(maps.Keys(all)) {
				got = append(got, fmt.Sprintf("%s = %d", k, all[k]))
			}
			return slices.Equal(got, cmd.body)
		})
		r.compare(cmd, got)
	case "log":
		b.flush()
		if got := b.takeLog(); !b.mode.cached {
			r.compare(cmd, got)
		}
	case "describe":
		// The instance's topology has the case's topics prefixed, and the
		// names derived from them (source-<hash>) differ: the case's lines
		// describe it built with the case's own names, as in the driver,
		// and the instance's must be the same but for derived names.
		r.compare(cmd, dslDescribe(b.named, ""))
		got, want := dslDescribeShape(dslDescribe(b.top, b.k.prefix+"-")), dslDescribeShape(dslDescribe(b.named, ""))
		if !slices.Equal(got, want) {
			r.errorf(cmd, "the instance's topology differs from the one described in more than derived names (-want +got):\n%s", dslDiff(want, got))
		}
	case "restart":
		b.restart()
	default:
		r.errorf(cmd, "unknown command")
	}
	return true
}

// dslDerivedName is the hash at the end of a derived node name
// (Builder.name).
var dslDerivedName = regexp.MustCompile(`-[0-9a-f]{8}\b`)

// dslDescribeShape is describe's lines with the derived node names' hashes
// blanked out.
func dslDescribeShape(lines []string) []string {
	shape := make([]string, len(lines))
	for i, l := range lines {
		shape[i] = dslDerivedName.ReplaceAllString(l, "-<hash>")
	}
	return shape
}

// eventually polls cond for a few seconds, until it holds: the figures an
// instance publishes (skip counts, queryable stores) may lag its commit by
// a round.
func (b *dslBroker) eventually(cond func() bool) {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() && time.Now().Before(deadline) {
		b.k.checkApps()
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *dslBroker) takeLog() []string {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	log := b.log
	b.log = nil
	return log
}

// flush produces the pending records and waits until the instance has
// committed them and what they caused in its internal topics; a record of
// a global table, until its store holds it.
func (b *dslBroker) flush() {
	b.t.Helper()
	if len(b.pending) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.k.cl.ProduceSync(ctx, b.pending...).FirstErr(); err != nil {
			b.t.Fatal(err)
		}
		for _, rec := range b.pending {
			if store, ok := b.globals[rec.Topic]; ok {
				b.waitGlobal(store, rec)
			}
		}
		b.pending = nil
	}
	await.Until(b.t, 30*time.Second, "the input committed", func() bool {
		b.k.checkApps()
		return b.committed()
	})
}

// committed reports whether the group has committed its input topics to
// their ends and its internal topics too (under exactly-once, up to the
// commit marker after their last record: the transaction that committed
// the input wrote them, so a lag of one cannot be a record still coming).
func (b *dslBroker) committed() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics := append(slices.Clone(b.inputs), b.internal...)
	if len(topics) == 0 {
		return true
	}
	// The commits first: the records a commit of the input caused in the
	// internal topics are written before it, so the ends read after it
	// have them.
	commits, err := b.k.adm.FetchOffsets(ctx, b.k.prefix)
	if err != nil || commits.Error() != nil {
		return false
	}
	ends, err := b.k.adm.ListEndOffsets(ctx, topics...)
	if err != nil || ends.Error() != nil {
		return false
	}
	done := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		slack := int64(0)
		if b.mode.g == engine.ExactlyOnce && slices.Contains(b.internal, o.Topic) {
			slack = 1
		}
		c, ok := commits.Lookup(o.Topic, o.Partition)
		if !ok || o.Offset-c.At > slack {
			done = false
		}
	})
	return done
}

// waitGlobal waits until a global table's store reflects rec.
func (b *dslBroker) waitGlobal(store string, rec *kgo.Record) {
	if rec.Key == nil {
		return // a table skips it
	}
	await.Until(b.t, 30*time.Second, "the global table's record in store "+store, func() bool {
		b.k.checkApps()
		st, err := b.a.LocalStore(store)
		if err != nil {
			return false
		}
		defer st.Close()
		e, ok, err := st.Get(rec.Key)
		switch {
		case err != nil:
			return false
		case rec.Value == nil:
			return !ok
		}
		return ok && bytes.Equal(e.Value, rec.Value) && e.Timestamp == rec.Timestamp.UnixMilli()
	})
}

// pipeError produces the record of a pipe-error after the pending ones
// are committed, and checks that the instance stops with the error.
func (b *dslBroker) pipeError(cmd dslCommand, rec *kgo.Record) {
	b.flush()
	b.pending = []*kgo.Record{rec}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.k.cl.ProduceSync(ctx, b.pending...).FirstErr(); err != nil {
		b.t.Fatal(err)
	}
	b.pending = nil
	select {
	case err := <-b.a.done:
		b.a.done <- err
		if err == nil {
			b.r.errorf(cmd, "the instance stopped without an error")
			return
		}
		msg := strings.ReplaceAll(err.Error(), b.k.prefix+"-", "")
		for _, want := range cmd.body {
			if !strings.Contains(msg, want) {
				b.r.errorf(cmd, "the error does not say %q:\n%v", want, msg)
			}
		}
	case <-ctx.Done():
		b.r.errorf(cmd, "the instance did not stop in 30s")
	}
}

// restart replaces the instance by one on an empty state directory once
// the input is committed.
func (b *dslBroker) restart() {
	b.t.Helper()
	b.flush()
	for k, v := range b.a.Skipped() {
		b.skipped[k] += v
	}
	if err := b.a.stop(); err != nil {
		b.t.Fatal(err)
	}
	b.a = b.k.start(b.top, b.cfg) // k.start gives it a new state directory
	waitRunning(b.t, b.k, b.a)
}

// dslReader reads the output topics of a case, read-committed.
type dslReader struct {
	b      *dslBroker
	cl     *kgo.Client
	kinds  map[string]dslKind // by topic name on the broker
	next   map[string]int64   // the offset after the last record read, control records included
	unread map[string][]string
}

func newDSLReader(b *dslBroker) *dslReader {
	rd := &dslReader{b: b, kinds: map[string]dslKind{}, next: map[string]int64{}, unread: map[string][]string{}}
	parts := map[string]map[int32]kgo.Offset{}
	for topic, kind := range b.r.out {
		name := b.real(topic)
		rd.kinds[name] = kind
		parts[name] = map[int32]kgo.Offset{0: kgo.NewOffset().AtStart()}
	}
	if len(parts) == 0 {
		return rd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := b.k.adm.ListTopics(ctx, slices.Collect(maps.Keys(parts))...)
	if err != nil {
		b.t.Fatal(err)
	}
	for topic := range b.r.out {
		name := b.real(topic)
		d := topics[name]
		switch {
		case strings.HasPrefix(topic, "${app}-") && errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			// The topology has no such internal topic (a case may say
			// that it does not repartition): no records.
			delete(parts, name)
			delete(rd.kinds, name)
		case d.Err != nil || len(d.Partitions) != 1:
			b.t.Fatalf("output topic %s: want one partition, have %v", name, d)
		}
	}
	if len(parts) == 0 {
		return rd
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.k.env.Brokers...), kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	rd.cl = cl
	return rd
}

// readToEnd reads every output topic to the end it has now.
func (rd *dslReader) readToEnd() {
	t := rd.b.t
	t.Helper()
	if rd.cl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := rd.b.k.adm.ListEndOffsets(ctx, slices.Collect(maps.Keys(rd.kinds))...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	behind := func() bool {
		done := true
		ends.Each(func(o kadm.ListedOffset) { done = done && rd.next[o.Topic] >= o.Offset })
		return !done
	}
	for behind() {
		fs := rd.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the output to its end (%v): at %v after 30s", ends, rd.next)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(rec *kgo.Record) {
			rd.next[rec.Topic] = rec.Offset + 1
			if !rec.Attrs.IsControl() && !isPositionMarker(rec) {
				rd.unread[rec.Topic] = append(rd.unread[rec.Topic], dslFormat(rec.Key, rec.Value, rd.kinds[rec.Topic], rec.Timestamp.UnixMilli()))
			}
		})
	}
}

// take returns the lines of a topic's records read and not taken yet.
func (rd *dslReader) take(topic string) []string {
	lines := rd.unread[topic]
	delete(rd.unread, topic)
	return lines
}

// deleteTopics deletes the topics of k's test, its internal ones included,
// without waiting for the broker to have removed them.
func (k *kt) deleteTopics() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := k.adm.ListTopics(ctx)
	if err != nil {
		k.t.Logf("list the topics to delete: %v", err)
		return
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, k.prefix+"-") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	if _, err := k.adm.DeleteTopics(ctx, names...); err != nil {
		k.t.Logf("delete topics %v: %v", names, err)
	}
}

// isPositionMarker reports whether a record of a repartition topic is one
// of the engine's position markers rather than data.
func isPositionMarker(rec *kgo.Record) bool {
	if rec.Key != nil || rec.Value != nil {
		return false
	}
	for _, h := range rec.Headers {
		if h.Key == engine.PositionHeader {
			return true
		}
	}
	return false
}
