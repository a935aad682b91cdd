package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/internal/assign"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// kt is a test's handle on a broker: unique topic names, an admin client,
// producing and reading.
type kt struct {
	t      *testing.T
	env    *kafkaenv.Env
	prefix string
	cl     *kgo.Client
	adm    *kadm.Client
	mu     sync.Mutex
	apps   []*app
}

// checkApps fails the test if an instance stopped with an error.
func (k *kt) checkApps() {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, a := range k.apps {
		select {
		case err := <-a.done:
			a.done <- err
			if err != nil {
				k.t.Fatalf("instance %s failed: %v", a.ID(), err)
			}
		default:
		}
	}
}

func newKT(t *testing.T) *kt {
	t.Helper()
	return newKTOn(t, kafkaenv.ForTest(t))
}

// newKTOn is newKT on env's brokers.
func newKTOn(t *testing.T, env *kafkaenv.Env) *kt {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	return &kt{t: t, env: env, prefix: fmt.Sprintf("%s-%x", strings.ToLower(name), rand.Uint32()), cl: cl, adm: kadm.NewClient(cl)}
}

func (k *kt) topic(name string) string { return k.prefix + "-" + name }

var forever = "-1"

func (k *kt) create(partitions int32, names ...string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range names {
		// No retention by age: the tests' records have old event times.
		resp, err := k.adm.CreateTopic(ctx, partitions, -1, map[string]*string{"retention.ms": &forever}, n)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			k.t.Fatalf("create topic %s: %v", n, err)
		}
	}
	await.Until(k.t, 30*time.Second, "the new topics' metadata", func() bool {
		d, err := k.adm.ListTopics(ctx, names...)
		if err != nil {
			return false
		}
		for _, n := range names {
			if t, ok := d[n]; !ok || t.Err != nil || len(t.Partitions) != int(partitions) {
				return false
			}
		}
		return true
	})
}

// passthrough is the topology that copies in to out, strings both.
func passthrough(t *testing.T, in, out string) *engine.Topology {
	t.Helper()
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// produce writes records with Kafka's default partitioning of their keys.
func (k *kt) produce(topic string, recs ...*kgo.Record) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := k.adm.ListTopics(ctx, topic)
	if err != nil {
		k.t.Fatal(err)
	}
	n := int32(len(d[topic].Partitions))
	for _, r := range recs {
		r.Topic = topic
		if r.Key != nil {
			r.Partition = kafkaPartition(r.Key, n)
		}
	}
	if err := k.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		k.t.Fatal(err)
	}
}

// table reads a topic from the start as a changelog (the latest value of each
// key) until cond holds of it, or fails the test after the timeout.
func (k *kt) table(topic string, timeout time.Duration, cond func(map[string]int64) bool) map[string]int64 {
	k.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		k.t.Fatal(err)
	}
	defer cl.Close()
	table := map[string]int64{}
	await.NoError(k.t, timeout, "topic "+topic+" to meet the condition", func() error {
		if !cond(table) {
			k.checkApps()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			fs := cl.PollFetches(ctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Value == nil {
					delete(table, string(r.Key))
					return
				}
				v, err := serde.Int64.Decode(r.Value)
				if err != nil {
					k.t.Errorf("topic %s offset %d: %v", topic, r.Offset, err)
				}
				table[string(r.Key)] = v
			})
		}
		if !cond(table) {
			return fmt.Errorf("table %v", table)
		}
		return nil
	})
	return table
}

// committed returns the offset group has committed for partition 0 of
// topic, -1 if none (or no group yet).
func (k *kt) committed(group, topic string) int64 {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := k.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1
	}
	if err != nil {
		k.t.Fatal(err)
	}
	if o, ok := offs.Lookup(topic, 0); ok {
		return o.At
	}
	return -1
}

// records reads n records of a topic from the start.
func (k *kt) records(topic string, n int, timeout time.Duration) []*kgo.Record {
	k.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		k.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			k.t.Fatalf("topic %s: %d of %d records after %v", topic, len(out), n, timeout)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// app is a running instance in a test.
type app struct {
	*engine.App
	done chan error
}

func (k *kt) start(top *engine.Topology, cfg engine.Config) *app {
	k.t.Helper()
	if cfg.AppID == "" {
		cfg.AppID = k.prefix
	}
	if cfg.Brokers == nil {
		cfg.Brokers = k.env.Brokers
	}
	if cfg.StateDir == "" {
		cfg.StateDir = k.t.TempDir()
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = 100 * time.Millisecond
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 6 * time.Second
	}
	if cfg.Logger == nil && os.Getenv("OXBOW_TEST_LOG") == "" {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := engine.NewApp(top, cfg)
	if err != nil {
		k.t.Fatal(err)
	}
	x := &app{App: a, done: make(chan error, 1)}
	go func() { x.done <- a.Run(context.Background()) }()
	k.t.Cleanup(func() { _ = x.stop() })
	k.mu.Lock()
	k.apps = append(k.apps, x)
	k.mu.Unlock()
	return x
}

// stop closes the instance and returns what Run returned.
func (a *app) stop() error {
	if err := a.Close(); err != nil {
		return err
	}
	select {
	case err := <-a.done:
		a.done <- err
		return err
	default:
		return nil
	}
}

// wordCount counts words by re-keying a stream of lines: a repartition and
// a count, the shape the runtime issue names.
func wordCount(in, out string) *engine.Topology {
	b := engine.NewBuilder()
	lines := engine.NewStream(b, in, serde.String, serde.String)
	words := engine.FlatMapValues(lines, func(_ string, l string) []string { return strings.Fields(l) })
	engine.GroupBy(words, func(_ string, w string) string { return w }, engine.Named("by-word")).
		Count(engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

func genLines(seed uint64, n int) []*kgo.Record {
	rng := rand.New(rand.NewPCG(seed, 7))
	words := []string{"ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kiwi", "lark"}
	var recs []*kgo.Record
	for i := range n {
		var ws []string
		for range 1 + rng.IntN(4) {
			ws = append(ws, words[rng.IntN(len(words))])
		}
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "user-%d", rng.IntN(50)), Value: []byte(strings.Join(ws, " ")), Timestamp: enginetest.At(int64(i))})
	}
	return recs
}

// wordCounts is the table wordCount ends with once it has counted recs:
// how often each word occurs in their values, worked out here rather than
// by the engine.
func wordCounts(recs []*kgo.Record) map[string]int64 {
	counts := map[string]int64{}
	for _, r := range recs {
		for _, w := range strings.Fields(string(r.Value)) {
			counts[w]++
		}
	}
	return counts
}

// Two instances run a repartition and a count over four partitions and
// count every word, with either guarantee.
func TestAppTwoInstancesCountWords(t *testing.T) {
	for _, g := range guarantees {
		t.Run(g.name, func(t *testing.T) { testTwoInstancesCountWords(t, g.g) })
	}
}

var guarantees = []struct {
	name string
	g    engine.Guarantee
}{{"at-least-once", engine.AtLeastOnce}, {"exactly-once", engine.ExactlyOnce}}

func testTwoInstancesCountWords(t *testing.T, g engine.Guarantee) {
	k := newKT(t)
	in, out := k.topic("lines"), k.topic("counts")
	k.create(4, in, out)
	top := wordCount(in, out)
	recs := genLines(1, 400)
	want := wordCounts(recs)

	a := k.start(top, engine.Config{InstanceID: "a", Guarantee: g})
	b := k.start(top, engine.Config{InstanceID: "b", Guarantee: g})
	await.Until(t, 60*time.Second, "both instances to have tasks", func() bool {
		k.checkApps()
		return len(a.Tasks()) > 0 && len(b.Tasks()) > 0 && len(a.Tasks())+len(b.Tasks()) == 8
	})
	k.produce(in, recs...)
	got := k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Both instances hold part of the state, and each key is found where the
	// group says it lives.
	for w, n := range want {
		owner, _, err := engine.KeyOwner(a.App, "counts", w, serde.String)
		if err != nil {
			t.Fatal(err)
		}
		host := map[string]*app{"a": a, "b": b}[owner.ID]
		if host == nil {
			t.Fatalf("key %s: owner %q is neither instance", w, owner.ID)
		}
		var v int64
		await.Until(t, 10*time.Second, "the owner's store to be committed", func() bool {
			s, err := engine.QueryKeyValueStore(host.App, "counts", serde.String, serde.Int64)
			if err != nil {
				t.Fatal(err)
			}
			v, _, err = s.Get(w)
			if errors.Is(err, engine.ErrNotReady) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			return v == n
		})
		other := map[string]*app{"a": b, "b": a}[owner.ID]
		s, _ := engine.QueryKeyValueStore(other.App, "counts", serde.String, serde.Int64)
		if _, _, err := s.Get(w); !errors.As(err, new(*engine.NotLocalError)) {
			t.Errorf("key %s from the other instance: err %v, want a NotLocalError", w, err)
		}
	}
	for _, x := range []*app{a, b} {
		if err := x.stop(); err != nil {
			t.Fatalf("instance %s: %v", x.ID(), err)
		}
	}
}

// Undecodable records go to the dead-letter topic with their origin, and the
// application keeps going.
func TestAppDeadLetter(t *testing.T) {
	k := newKT(t)
	in, out, dlq := k.topic("in"), k.topic("out"), k.topic("dlq")
	k.create(2, in, out)
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.Int64).GroupByKey().Count(engine.Materialized("n")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{OnDeserializationError: engine.DeadLetter, DeadLetterTopic: dlq})
	eight, _ := serde.Int64.Encode(8)
	k.produce(in,
		&kgo.Record{Key: []byte("x"), Value: eight},
		&kgo.Record{Key: []byte("x"), Value: []byte("not an int64")},
		&kgo.Record{Key: []byte("y"), Value: eight},
		&kgo.Record{Key: []byte("x"), Value: eight},
	)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return m["x"] == 2 && m["y"] == 1 })
	dead := k.records(dlq, 1, 30*time.Second)
	h := map[string]string{}
	for _, x := range dead[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if string(dead[0].Value) != "not an int64" || h["oxbow.topic"] != in || h["oxbow.offset"] != "1" || h["oxbow.stage"] != "decode" || !strings.Contains(h["oxbow.error"], "int64 needs 8 bytes") {
		t.Fatalf("dead letter: value %q, headers %v", dead[0].Value, h)
	}
	if p := h["oxbow.partition"]; p != fmt.Sprint(dead[0].Partition) && p != fmt.Sprint(kafkaPartition([]byte("x"), 2)) {
		t.Errorf("dead letter partition header %q", p)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}

// kafkaPartition is Kafka's default partitioner for keyed records.
func kafkaPartition(key []byte, n int32) int32 { return assign.Partition(key, n) }
