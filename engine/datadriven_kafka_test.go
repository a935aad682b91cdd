package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
)

// The windowed data-driven cases (testdata/dsl/windows*.txt) again, on a
// broker: an instance with exactly-once and the record cache runs the case's
// topology, and halfway through the case it is stopped and a new one starts
// on an empty state directory (or where the case says "restart"), so the
// windows, and the windows waiting to be emitted, come back from their
// changelogs. Each expect must see what the
// driver saw: the latest record of each key, or, for emit-final topologies
// (whose output the cache does not touch), exactly the records. Before each
// expect the piped records are produced and the test waits until the
// instance has committed them, then reads the output, read-committed, to
// its end. skipped, store and log are the driver's business and not checked
// here.
func TestDSLWindowsOnKafka(t *testing.T) {
	runDSLFilesOnKafka(t, "testdata/dsl/windows*.txt", false, func(c dslCase) []engine.Guarantee {
		// At least once too, where a case shows a late record after the
		// restart: stream time comes back through the plain offset
		// commit's metadata as well as the transaction's.
		if c.topology == "tumbling-count" {
			return []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce}
		}
		return []engine.Guarantee{engine.ExactlyOnce}
	})
}

// TestDSLJoinsOnKafka is TestDSLWindowsOnKafka for the join cases
// (testdata/dsl/joins*.txt). A join's result depends on the order of the
// records of its two inputs, which a broker does not keep across topics, so
// each piped record is produced alone and committed before the next.
func TestDSLJoinsOnKafka(t *testing.T) {
	runDSLFilesOnKafka(t, "testdata/dsl/joins*.txt", true, func(dslCase) []engine.Guarantee {
		return []engine.Guarantee{engine.ExactlyOnce}
	})
}

// runDSLFilesOnKafka runs the cases of the files matching pattern on the
// test's broker, each under the guarantees given for it.
func runDSLFilesOnKafka(t *testing.T, pattern string, perPipe bool, guarantees func(dslCase) []engine.Guarantee) {
	if testing.Short() {
		t.Skip("starts an instance per case; not with -short")
	}
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases match %s: %v", pattern, err)
	}
	for _, file := range files {
		for _, c := range loadDSLCases(t, file) {
			name := fmt.Sprintf("%s/%d_%s", strings.TrimSuffix(filepath.Base(file), ".txt"), c.line, c.topology)
			for i, g := range guarantees(c) {
				if i > 0 {
					name += "/" + map[engine.Guarantee]string{engine.AtLeastOnce: "at-least-once", engine.ExactlyOnce: "exactly-once"}[g]
				}
				t.Run(name, func(t *testing.T) { runDSLCaseOnKafka(t, file, c, g, perPipe) })
			}
		}
	}
}

// runDSLCaseOnKafka runs a case on the test's broker; perPipe: each piped
// record is produced and committed before the next.
func runDSLCaseOnKafka(t *testing.T, file string, c dslCase, g engine.Guarantee, perPipe bool) {
	for _, cmd := range c.cmds {
		switch cmd.args[0] {
		case "bug", "cache-bug", "nocache", "build-error", "pipe-error":
			t.Skipf("%s cases run in the driver only", cmd.args[0])
		}
	}
	k := newKT(t)
	dslTopicPrefix = k.prefix + "-"
	defer func() { dslTopicPrefix = "" }()
	def := dslTopologies[c.topology]
	b := engine.NewBuilder()
	def.build(b, func(string, ...any) {})
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	r := &dslRun{file: file, in: dslKinds(def.in), out: dslKinds(def.out)}
	out := k.topic("out")
	var inputs []string
	for name := range r.in {
		inputs = append(inputs, k.topic(name))
	}
	k.create(1, append(inputs, out)...)
	// Emit-final windows and stream-valued joins give exactly the driver's
	// records (the record cache does not touch them); tables may coalesce.
	exact := strings.HasSuffix(c.topology, "-final") ||
		perPipe && !strings.HasPrefix(c.topology, "table-") && !strings.HasPrefix(c.topology, "fk-")

	reader, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{out: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	next := int64(0) // the reader's position in out, control records included
	readToEnd := func() []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ends, err := k.adm.ListEndOffsets(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup(out, 0)
		var lines []string
		for next < end.Offset {
			fs := reader.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %s to offset %d: at %d after 30s", out, end.Offset, next)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				next = rec.Offset + 1
				if !rec.Attrs.IsControl() {
					lines = append(lines, dslFormat(rec.Key, rec.Value, r.out["out"], rec.Timestamp.UnixMilli()))
				}
			})
		}
		return lines
	}

	cfg := engine.Config{Guarantee: g, CommitInterval: 50 * time.Millisecond}
	a := k.start(top, cfg)
	waitRunning(t, k, a)
	var expects int
	for _, cmd := range c.cmds {
		if cmd.args[0] == "expect" {
			expects++
		}
	}
	restartAfter := (expects + 1) / 2
	explicit := slices.ContainsFunc(c.cmds, func(cmd dslCommand) bool { return cmd.args[0] == "restart" })
	var pending []*kgo.Record
	flush := func() {
		t.Helper()
		if len(pending) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := k.cl.ProduceSync(ctx, pending...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			pending = nil
		}
		waitInputCommitted(t, k, inputs...)
		if g == engine.ExactlyOnce {
			waitInternalCommitted(t, k, inputs)
		} else {
			waitInputCommitted(t, k)
		}
	}
	restart := func() {
		t.Helper()
		flush()
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		a = k.start(top, cfg) // a new, empty state directory
		waitRunning(t, k, a)
	}
	seen := 0
	for _, cmd := range c.cmds {
		switch cmd.args[0] {
		case "pipe":
			ms, err := parseAt(cmd.args[4])
			if err != nil {
				t.Fatalf("%s:%d: %v", file, cmd.line, err)
			}
			kind, ok := r.in[cmd.args[1]]
			if !ok {
				t.Fatalf("%s:%d: the topology declares no input topic %s", file, cmd.line, cmd.args[1])
			}
			v, err := dslEncode(kind, cmd.args[3])
			if err != nil {
				t.Fatalf("%s:%d: %v", file, cmd.line, err)
			}
			var key []byte
			if cmd.args[2] != "~" {
				key = []byte(cmd.args[2])
			}
			pending = append(pending, &kgo.Record{Topic: k.topic(cmd.args[1]), Key: key, Value: v, Timestamp: enginetest.At(ms)})
			if perPipe {
				flush()
			}
		case "expect":
			flush()
			got := readToEnd()
			if exact {
				r.compare(cmd, got)
			} else {
				r.compareLatest(cmd, got)
			}
			if seen++; seen == restartAfter && !explicit {
				restart()
			}
		case "restart":
			restart()
		}
	}
	flush()
	if got := readToEnd(); len(got) > 0 {
		r.errorf(dslCommand{line: c.line, args: []string{"topology", c.topology}}, "output the case does not expect:\n  %s", strings.Join(got, "\n  "))
	}
	for _, e := range r.errs {
		t.Error(e)
	}
}

func parseAt(s string) (int64, error) {
	var ms int64
	if _, err := fmt.Sscanf(s, "@%d", &ms); err != nil {
		return 0, fmt.Errorf("timestamp %q: %v", s, err)
	}
	return ms, nil
}

// waitInternalCommitted waits, once the input is committed, until the
// exactly-once group of k's application has also consumed its internal
// topics (repartitions) to their ends: each one's lag is then one, the
// commit marker after its last record. (The transaction that committed the
// input wrote those records and markers, so a lag of one cannot be a record
// still on its way.)
func waitInternalCommitted(t *testing.T, k *kt, inputs []string) {
	t.Helper()
	wait(t, 30*time.Second, "the internal topics consumed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Every record of the internal topics the instance reads is
		// committed as consumed (all but a transaction marker): a partition
		// the group has not committed yet counts as not consumed.
		topics, err := k.adm.ListTopics(ctx)
		if err != nil {
			return false
		}
		var internal []string
		for _, name := range topics.Names() {
			if strings.HasPrefix(name, k.prefix) && !slices.Contains(inputs, name) &&
				(strings.HasSuffix(name, "-repartition") || strings.HasSuffix(name, "-subscription") || strings.HasSuffix(name, "-response")) {
				internal = append(internal, name)
			}
		}
		if len(internal) == 0 {
			return true
		}
		ends, err := k.adm.ListEndOffsets(ctx, internal...)
		if err != nil || ends.Error() != nil {
			return false
		}
		commits, err := k.adm.FetchOffsets(ctx, k.prefix)
		if err != nil {
			return false
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			c, ok := commits.Lookup(o.Topic, o.Partition)
			if !ok || o.Offset-c.At > 1 {
				done = false
			}
		})
		return done
	})
}
