package engine_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// A bad configuration is refused by NewApp with every problem named.
func TestNewAppReportsEveryConfigProblem(t *testing.T) {
	top := countByKey("in", "out")
	_, err := engine.NewApp(top, engine.Config{
		AppID:                 "bad name!",
		OnProcessingError:     engine.DeadLetter,
		OnProductionError:     engine.DeadLetter,
		Guarantee:             engine.Guarantee(7),
		Workers:               -1,
		DeadLetterLateRecords: true,
	})
	if err == nil {
		t.Fatal("NewApp accepted the configuration")
	}
	for _, want := range []string{"AppID", "Brokers is empty", "DeadLetterTopic is empty", "OnProductionError cannot be DeadLetter", "unknown Guarantee", "Workers", "DeadLetterLateRecords needs a DeadLetterTopic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not mention %q:\n%v", want, err)
		}
	}
	if _, err := engine.NewApp(top, engine.Config{AppID: "x", Brokers: []string{"b"}, Guarantee: engine.ExactlyOnce, OnProductionError: engine.Skip}); err == nil || !strings.Contains(err.Error(), "cannot be skipped") {
		t.Errorf("ExactlyOnce with OnProductionError Skip: %v", err)
	}
	if _, err := engine.NewApp(top, engine.Config{AppID: "x", Brokers: []string{"b"}, Guarantee: engine.ExactlyOnce, CommitInterval: 30 * time.Second}); err == nil || !strings.Contains(err.Error(), "not below TransactionTimeout") {
		t.Errorf("ExactlyOnce with a commit interval over the transaction timeout: %v", err)
	}
	if _, err := engine.NewApp(nil, engine.Config{AppID: "x", Brokers: []string{"b"}}); err == nil {
		t.Error("NewApp accepted a nil topology")
	}
}

// Without an InstanceID, an instance keeps the id it made up in its state
// directory, so that a restart is the same instance to the group (and to
// the broker's transactions).
func TestInstanceIDKeptInStateDir(t *testing.T) {
	dir := t.TempDir()
	top := countByKey("in", "out")
	cfg := engine.Config{AppID: "x", Brokers: []string{"b"}, StateDir: dir}
	a, err := engine.NewApp(top, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := engine.NewApp(top, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() == "" || a.ID() != b.ID() {
		t.Errorf("ids %q and %q: want the same, not empty", a.ID(), b.ID())
	}
	c, err := engine.NewApp(top, engine.Config{AppID: "x", Brokers: []string{"b"}, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID() == a.ID() {
		t.Errorf("another state dir got the same id %q", c.ID())
	}
	d, err := engine.NewApp(top, engine.Config{AppID: "x", Brokers: []string{"b"}, StateDir: dir, InstanceID: "given"})
	if err != nil {
		t.Fatal(err)
	}
	if d.ID() != "given" {
		t.Errorf("InstanceID given: id %q", d.ID())
	}
}

// run starts an instance and returns what Run returns, failing the test if
// it does not return in time.
func (k *kt) runUntilStopped(top *engine.Topology, cfg engine.Config) error {
	k.t.Helper()
	a := k.start(top, cfg)
	select {
	case err := <-a.done:
		a.done <- err
		return err
	case <-time.After(60 * time.Second):
		k.t.Fatal("Run did not return")
		return nil
	}
}

// Missing user topics and co-partitioned inputs with different partition
// counts stop the instance at start, saying what to do.
func TestAppStartupErrors(t *testing.T) {
	k := newKT(t)
	in, out, other := k.topic("in"), k.topic("out"), k.topic("other")
	k.create(2, in)
	k.create(3, other)

	err := k.runUntilStopped(countByKey(in, out), engine.Config{})
	if err == nil || !strings.Contains(err.Error(), out) || !strings.Contains(err.Error(), "do not exist") {
		t.Errorf("missing output topic: %v", err)
	}

	k.create(2, out)
	b := engine.NewBuilder()
	g1 := engine.NewStream(b, in, serde.String, serde.Int64).GroupByKey()
	g2 := engine.NewStream(b, other, serde.String, serde.Int64).GroupByKey()
	sum := func(_ string, v, agg int64) int64 { return agg + v }
	engine.CogroupWith(engine.Cogroup(g1, sum), g2, sum).Aggregate(func() int64 { return 0 }).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = k.runUntilStopped(top, engine.Config{AppID: k.prefix + "-cogroup"})
	if err == nil || !strings.Contains(err.Error(), "differ in partition count") || !strings.Contains(err.Error(), in+" (2)") || !strings.Contains(err.Error(), other+" (3)") {
		t.Errorf("co-partitioning: %v", err)
	}
}

// A processing error follows the policy: dead-lettered with its origin, or
// the instance stops with it (and nothing of the failed interval is
// committed).
func TestAppProcessingErrorPolicies(t *testing.T) {
	k := newKT(t)
	in, out, dlq := k.topic("in"), k.topic("out"), k.topic("dlq")
	k.create(1, in, out)
	failing := func() *engine.Topology {
		b := engine.NewBuilder()
		s := engine.NewStream(b, in, serde.String, serde.String)
		engine.Process(s, func() engine.Processor[string, string, string, string] {
			return engine.ProcessorFunc[string, string, string, string](func(ctx *engine.ProcessorContext[string, string], r engine.Record[string, string]) error {
				if r.Value == "poison" {
					return errors.New("cannot digest poison")
				}
				return ctx.Forward(r)
			})
		}).To(out)
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}()
	k.produce(in, &kgo.Record{Key: []byte("a"), Value: []byte("ok")}, &kgo.Record{Key: []byte("b"), Value: []byte("poison")}, &kgo.Record{Key: []byte("c"), Value: []byte("ok")})

	a := k.start(failing, engine.Config{OnProcessingError: engine.DeadLetter, DeadLetterTopic: dlq})
	outRecs := k.records(out, 2, 60*time.Second)
	if string(outRecs[0].Key) != "a" || string(outRecs[1].Key) != "c" {
		t.Errorf("output keys %q %q, want a c", outRecs[0].Key, outRecs[1].Key)
	}
	dead := k.records(dlq, 1, 30*time.Second)[0]
	if string(dead.Key) != "b" || !bytes.Equal(dead.Value, []byte("poison")) || header(dead, "oxbow.stage") != "process" || !strings.Contains(header(dead, "oxbow.error"), "cannot digest poison") || header(dead, "oxbow.offset") != "1" {
		t.Errorf("dead letter %q=%q headers %v", dead.Key, dead.Value, dead.Headers)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// Another application with the default policy stops at the poison record.
	err := k.runUntilStopped(failing, engine.Config{AppID: k.prefix + "-fail"})
	if err == nil || !strings.Contains(err.Error(), "cannot digest poison") || !strings.Contains(err.Error(), in+"[0]@1") {
		t.Fatalf("Run returned %v, want the processing error with its origin", err)
	}
	// Its offsets were not committed past the poison record.
	if at := k.committed(k.prefix+"-fail", in); at > 1 {
		t.Errorf("committed offset %d is past the failed record", at)
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// hugeValues copies in to out, but a value "huge" becomes 2 MiB of random
// bytes: over the broker's default 1 MiB limit, even compressed.
func hugeValues(t *testing.T, in, out string) *engine.Topology {
	t.Helper()
	b := engine.NewBuilder()
	engine.MapValues(engine.NewStream(b, in, serde.String, serde.String), func(_ string, v string) string {
		if v == "huge" {
			b := make([]byte, 2<<20)
			rand.Read(b)
			return string(b)
		}
		return v
	}).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// A record the broker refuses (too large) follows the production policy:
// Skip counts it and goes on; Fail stops the instance without committing.
func TestAppProductionErrorPolicies(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	top := hugeValues(t, in, out)
	k.produce(in, &kgo.Record{Key: []byte("a"), Value: []byte("small")}, &kgo.Record{Key: []byte("b"), Value: []byte("huge")}, &kgo.Record{Key: []byte("c"), Value: []byte("small")})

	err := k.runUntilStopped(top, engine.Config{AppID: k.prefix + "-fail"})
	if err == nil || !strings.Contains(err.Error(), "produce to "+out) {
		t.Fatalf("Fail policy: Run returned %v, want the production error", err)
	}

	if at := k.committed(k.prefix+"-fail", in); at > 0 {
		t.Errorf("Fail policy: input offset committed at %d", at)
	}

	// The failed run may have written a, c or both (produced, never
	// committed: at least once). What the Skip run writes comes after.
	before := k.end(out, 0)
	group := k.prefix + "-skip"
	a := k.start(top, engine.Config{AppID: group, OnProductionError: engine.Skip})
	await.Until(t, 60*time.Second, "the Skip run's commit of the whole input", func() bool {
		return k.committed(group, in) == 3
	})
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	recs := k.records(out, int(k.end(out, 0)), 30*time.Second)
	keys := ""
	for _, r := range recs[before:] {
		keys += string(r.Key)
	}
	for _, r := range recs {
		if len(r.Value) > 100 {
			t.Fatalf("the huge record was written")
		}
	}
	if keys != "ac" {
		t.Errorf("the Skip run wrote keys %q, want a, c", keys)
	}
}

// With exactly-once, a record the broker refuses aborts the whole
// transaction and stops the instance: nothing of it reaches a
// read-committed reader and the input offsets stay where they were, even
// though the records before it were produced fine. (franz-go's End alone
// would have committed: the engine checks every produce before it.)
func TestAppExactlyOnceProductionErrorAborts(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	top := hugeValues(t, in, out)
	k.produce(in, &kgo.Record{Key: []byte("a"), Value: []byte("small")}, &kgo.Record{Key: []byte("b"), Value: []byte("huge")}, &kgo.Record{Key: []byte("c"), Value: []byte("small")})
	group := k.prefix + "-eos"
	err := k.runUntilStopped(top, engine.Config{AppID: group, Guarantee: engine.ExactlyOnce})
	if err == nil || !strings.Contains(err.Error(), "produce to "+out) {
		t.Fatalf("Run returned %v, want the production error", err)
	}
	if at := k.committed(group, in); at > 0 {
		t.Errorf("input offset committed at %d", at)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Everything up to the last stable offset, read committed: the aborted
	// "a" must not be there.
	ends, err := k.adm.ListCommittedOffsets(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	// Whether "a" reached the broker before the abort depends on timing;
	// either way a read-committed reader must not see it.
	end, _ := ends.Lookup(out, 0)
	t.Logf("the output's last stable offset: %d", end.Offset)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{out: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for pos := int64(0); pos < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("output read to %d of %d", pos, end.Offset)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos = r.Offset + 1
			if !r.Attrs.IsControl() {
				t.Errorf("a read-committed reader sees %q at offset %d", r.Key, r.Offset)
			}
		})
	}
}

// Two instances started with the same InstanceID share a transactional id:
// the second fences the first, which stops with an error that says so,
// while the second carries on.
func TestAppExactlyOnceSameInstanceIDFenced(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	top := passthrough(t, in, out)
	cfg := engine.Config{InstanceID: "same", Guarantee: engine.ExactlyOnce}
	first := k.start(top, cfg)
	await.Until(t, 60*time.Second, "the first instance to run its task", func() bool { return len(first.Tasks()) == 1 })
	second := k.start(top, cfg)
	// Input keeps the first one producing until it learns it was fenced.
	var ferr error
	await.Until(t, 60*time.Second, "the first instance to stop", func() bool {
		k.produce(in, &kgo.Record{Key: []byte("k"), Value: []byte("v")})
		select {
		case ferr = <-first.done:
			first.done <- ferr
			return true
		default:
			return false
		}
	})
	if ferr == nil || !strings.Contains(ferr.Error(), `InstanceID "same"`) {
		t.Fatalf("the fenced instance stopped with %v; want an error naming the shared InstanceID", ferr)
	}
	select {
	case err := <-second.done:
		t.Fatalf("the second instance stopped too: %v", err)
	default:
	}
}

// A serde that cannot reach what it needs (serde.ErrUnavailable) is not the
// record's fault: whatever the policies, the instance stops with the error,
// dead-letters nothing, and leaves the record uncommitted, on decode and on
// encode alike.
func TestAppUnavailableSerdeStopsWhateverThePolicy(t *testing.T) {
	k := newKT(t)
	in, out, dlq := k.topic("in"), k.topic("out"), k.topic("dlq")
	k.create(1, in, out, dlq)
	unreachable := fmt.Errorf("schema 7: registry down: %w", serde.ErrUnavailable)
	flaky := serde.Func(serde.String.Encode, func(b []byte) (string, error) {
		if string(b) == "needs-registry" {
			return "", unreachable
		}
		return string(b), nil
	})
	cantEncode := serde.Func(func(v string) ([]byte, error) {
		if v == "needs-registry" {
			return nil, unreachable
		}
		return []byte(v), nil
	}, serde.String.Decode)
	for _, c := range []struct {
		name    string
		in, out serde.Serde[string]
	}{{"decode", flaky, serde.String}, {"encode", serde.String, cantEncode}} {
		b := engine.NewBuilder()
		engine.NewStream(b, in, serde.String, c.in).WithSerdes(serde.String, c.out).To(out)
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		group := k.prefix + "-" + c.name
		if c.name == "decode" {
			k.produce(in, &kgo.Record{Key: []byte("a"), Value: []byte("ok")}, &kgo.Record{Key: []byte("b"), Value: []byte("needs-registry")})
		}
		err = k.runUntilStopped(top, engine.Config{AppID: group, OnDeserializationError: engine.DeadLetter, OnProcessingError: engine.DeadLetter, DeadLetterTopic: dlq})
		if !errors.Is(err, serde.ErrUnavailable) || !strings.Contains(err.Error(), "registry down") {
			t.Errorf("%s: Run returned %v, want the serde's error", c.name, err)
		}
		if at := k.committed(group, in); at > 1 {
			t.Errorf("%s: committed offset %d is past the record the serde could not handle", c.name, at)
		}
		if n := k.end(dlq, 0); n != 0 {
			t.Errorf("%s: %d dead letters, want none", c.name, n)
		}
	}
}
