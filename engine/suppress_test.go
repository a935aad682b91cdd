package engine_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// What waits in SuppressUntil's buffer survives the instance: a successor
// with no local state restores the buffer from its changelog and lets the
// waiting counts go when stream time passes their limit.
func TestAppSuppressBufferSurvivesRestart(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).GroupByKey().Count(engine.Named("count")).
		SuppressUntil(time.Hour, engine.Named("suppress"), engine.Materialized("buffer")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	rec := func(key string, ts time.Time) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: []byte("v"), Timestamp: ts}
	}

	a := k.start(top, engine.Config{InstanceID: "a"})
	waitRunning(t, k, a)
	k.produce(in, rec("k1", t0), rec("k1", t0.Add(time.Minute)), rec("k2", t0.Add(2*time.Minute)), rec("k1", t0.Add(3*time.Minute)))
	await.Until(t, 60*time.Second, "the buffer's changelog to hold the waiting counts", func() bool {
		return k.changelogEnd(a.App, "buffer") >= 2
	})
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// B, with a state dir of its own, restores the buffer; a record two
	// hours later lets the waiting counts go, and waits itself.
	bi := k.start(top, engine.Config{InstanceID: "b"})
	waitRunning(t, k, bi)
	// Restored when B took the task, or before as a warm-up copy (the
	// plan shows B the task before its restore has begun: await it).
	await.Until(t, 60*time.Second, "B to restore the buffer", func() bool {
		k.checkApps()
		return bi.RestoredRecords()+bi.StandbyRecords() > 0
	})
	k.produce(in, rec("k3", t0.Add(2*time.Hour)))
	want := map[string]int64{"k1": 3, "k2": 1}
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
	// Nothing left before its hour: the first two records are the final
	// counts (in the order their waits began, which the count's record
	// cache decides).
	got := map[string]int64{}
	for _, r := range k.records(out, 2, 10*time.Second)[:2] {
		n, err := serde.Int64.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[string(r.Key)] = n
	}
	if !maps.Equal(got, want) {
		t.Errorf("the first two output records are %v, want %v: every count must leave once, after its hour", got, want)
	}
}

// An update that leaves the suppression carries the headers of the latest
// update it stands for, as Kafka Streams' suppression forwards the
// buffered record's context.
func TestSuppressUntilKeepsLatestHeaders(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewTable(b, "in", serde.String, serde.String).SuppressUntil(10 * time.Millisecond).ToStream().To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	in.Pipe("a", "1", enginetest.At(0), engine.Header{Key: "n", Value: []byte("first")})
	in.Pipe("a", "2", enginetest.At(5), engine.Header{Key: "n", Value: []byte("second")}, engine.Header{Key: "nil"})
	in.Pipe("b", "1", enginetest.At(20))
	got := enginetest.NewOutput(d, "out", serde.String, serde.String).ReadRecords()
	want := []engine.Header{{Key: "n", Value: []byte("second")}, {Key: "nil"}}
	if len(got) != 1 || got[0].Key != "a" || got[0].Value != "2" || !got[0].Timestamp.Equal(enginetest.At(5)) ||
		!slices.EqualFunc(got[0].Headers, want, func(x, y engine.Header) bool {
			return x.Key == y.Key && string(x.Value) == string(y.Value) && (x.Value == nil) == (y.Value == nil)
		}) {
		t.Errorf("out %+v; want a=2 @5 with headers %v", got, want)
	}
}
