package engine_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Batch mode: Run returns by itself once the inputs are processed up to
// their ends at the start — through a repartition, exactly once — and a
// later batch run goes on from there.
func TestBatch(t *testing.T) {
	env := kafkaenv.ForTest(t)
	name := fmt.Sprintf("batch-%d", time.Now().UnixNano())
	in, out := name+"-in", name+"-out"
	env.CreateTopics(t, 3, in, out)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(in))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := engine.NewBuilder()
	// Words by their first letter: a key change, so a repartition topic.
	engine.GroupBy(engine.NewStream(b, in, serde.String, serde.String), func(_ string, w string) string { return w[:1] }).
		Count(engine.Materialized("by-letter")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	produce := func(n int) {
		var recs []*kgo.Record
		for i := range n {
			w := fmt.Sprintf("%c%d", 'a'+i%5, i)
			recs = append(recs, &kgo.Record{Key: []byte(w), Value: []byte(w)})
			want[w[:1]]++
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	runBatch := func() {
		t.Helper()
		app, err := engine.NewApp(top, engine.Config{AppID: name, Brokers: env.Brokers, StateDir: t.TempDir(), Guarantee: engine.ExactlyOnce, Batch: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := app.Run(ctx); err != nil {
			t.Fatalf("batch run: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the batch run did not stop by itself in 2 minutes")
		}
	}
	produce(1000)
	runBatch()
	if got := latest(t, env, out, want); !maps.Equal(got, want) {
		t.Fatalf("after the first batch: %v, want %v", got, want)
	}
	produce(500)
	runBatch()
	if got := latest(t, env, out, want); !maps.Equal(got, want) {
		t.Fatalf("after the second batch: %v, want %v", got, want)
	}
}

// latest reads a topic of counts (read committed) from its start until
// each key's last count is want's, or for a minute: it returns the counts.
func latest(t *testing.T, env *kafkaenv.Env, topic string, want map[string]int64) map[string]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !maps.Equal(got, want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got
		}
		fs.EachRecord(func(r *kgo.Record) {
			v, err := serde.Int64.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			got[string(r.Key)] = v
		})
	}
	return got
}
