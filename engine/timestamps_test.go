package engine_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// tradeTime reads the event time from values "<unix ms>,<rest>".
func tradeTime(_ string, v string, _ time.Time) (time.Time, error) {
	ms, _, ok := strings.Cut(v, ",")
	if !ok {
		return time.Time{}, fmt.Errorf("value %q has no time field", v)
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(n), nil
}

// A source's timestamp function sets the records' event time: outputs
// carry it, aggregations stamp their results with the latest of it.
func TestTimestampsFromValues(t *testing.T) {
	b := engine.NewBuilder()
	trades := engine.NewStream(b, "trades", serde.String, serde.String, engine.WithTimestamps(tradeTime))
	trades.To("copy")
	trades.GroupByKey().Count().ToStream().To("counts")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "trades", serde.String, serde.String)
	// Recorded times say otherwise; the values' times win.
	in.Pipe("acme", "5000,buy", enginetest.At(1))
	in.Pipe("acme", "3000,sell", enginetest.At(2))
	in.Pipe("zinc", "7000,buy", enginetest.At(3))
	var got []string
	for _, r := range enginetest.NewOutput(d, "copy", serde.String, serde.String).ReadRecords() {
		got = append(got, fmt.Sprintf("%s@%d", r.Value, r.Timestamp.UnixMilli()))
	}
	if want := "5000,buy@5000 3000,sell@3000 7000,buy@7000"; strings.Join(got, " ") != want {
		t.Errorf("copy: %v, want %s", got, want)
	}
	got = nil
	for _, r := range enginetest.NewOutput(d, "counts", serde.String, serde.Int64).ReadRecords() {
		got = append(got, fmt.Sprintf("%s=%d@%d", r.Key, r.Value, r.Timestamp.UnixMilli()))
	}
	// The out-of-order trade keeps the aggregate's latest time.
	if want := "acme=1@5000 acme=2@5000 zinc=1@7000"; strings.Join(got, " ") != want {
		t.Errorf("counts: %v, want %s", got, want)
	}
}

// A record whose timestamp function fails, or gives a negative time, is a
// *TimestampError: it fails the record, and nothing of it is processed.
func TestTimestampErrors(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "trades", serde.String, serde.String, engine.WithTimestamps(tradeTime)).To("copy")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "trades", serde.String, serde.String)
	for _, tc := range []struct {
		value   string
		ts      int64
		message string
	}{
		{"no time field", 0, `value "no time field" has no time field`},
		{"-5,buy", -5, "timestamp -5 is negative"},
	} {
		err := in.TryPipe("acme", tc.value, enginetest.At(1))
		var te *engine.TimestampError
		if !errors.As(err, &te) {
			t.Fatalf("value %q: error %v, want a *TimestampError", tc.value, err)
		}
		if te.Topic != "trades" || te.Timestamp != tc.ts || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("value %q: %+v (%v)", tc.value, te, err)
		}
	}
	if out := enginetest.NewOutput(d, "copy", serde.String, serde.String); !out.Empty() {
		t.Errorf("records with invalid timestamps reached the output: %v", out.ReadRecords())
	}
	// A tombstone keeps its recorded time: the function is not asked.
	in.Delete("acme", enginetest.At(9))
	recs := enginetest.NewOutput(d, "copy", serde.String, serde.String).ReadRecords()
	if len(recs) != 1 || recs[0].Timestamp.UnixMilli() != enginetest.At(9).UnixMilli() {
		t.Errorf("tombstone: %v", recs)
	}
}

// WithWallClockTimestamps stamps records with the wall clock when they are
// processed.
func TestWallClockTimestamps(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "in", serde.String, serde.String, engine.WithWallClockTimestamps()).To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_000_000)
	d := enginetest.New(t, top, enginetest.WallClock(start))
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	in.Pipe("k", "a", enginetest.At(1))
	d.AdvanceWallClock(time.Minute)
	in.Pipe("k", "b", enginetest.At(2))
	var got []int64
	for _, r := range enginetest.NewOutput(d, "out", serde.String, serde.String).ReadRecords() {
		got = append(got, r.Timestamp.UnixMilli())
	}
	if want := []int64{start.UnixMilli(), start.Add(time.Minute).UnixMilli()}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("timestamps %v, want %v", got, want)
	}
}

// Misused timestamp options are build errors.
func TestTimestampOptionErrors(t *testing.T) {
	for name, build := range map[string]func(b *engine.Builder){
		"wrong types": func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.Int64, engine.WithTimestamps(tradeTime))
		},
		"both": func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.String, engine.WithTimestamps(tradeTime), engine.WithWallClockTimestamps())
		},
		"not a source": func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.String).Filter(func(string, string) bool { return true }, engine.WithWallClockTimestamps())
		},
	} {
		b := engine.NewBuilder()
		build(b)
		_, err := b.Build()
		want := map[string]string{"wrong types": "WithTimestamps is given a", "both": "choose one", "not a source": "does not use the option(s) WithWallClockTimestamps"}[name]
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Build error %v, want one saying %q", name, err, want)
		}
	}
}

// On Kafka, a record with an invalid timestamp follows the
// OnDeserializationError policy: dead-lettered here, the others go on.
func TestAppTimestampErrorDeadLettered(t *testing.T) {
	k := newKT(t)
	in, out, dlq := k.topic("in"), k.topic("out"), k.topic("dlq")
	k.create(1, in, out)
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String, engine.WithTimestamps(tradeTime)).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{OnDeserializationError: engine.DeadLetter, DeadLetterTopic: dlq})
	k.produce(in,
		&kgo.Record{Key: []byte("acme"), Value: []byte("5000,buy")},
		&kgo.Record{Key: []byte("acme"), Value: []byte("no time")},
		&kgo.Record{Key: []byte("acme"), Value: []byte("7000,sell")},
	)
	recs := k.records(out, 2, 60*time.Second)
	if len(recs) != 2 || recs[0].Timestamp.UnixMilli() != 5000 || recs[1].Timestamp.UnixMilli() != 7000 {
		t.Fatalf("output: %v", recs)
	}
	dead := k.records(dlq, 1, 30*time.Second)
	h := map[string]string{}
	for _, x := range dead[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if string(dead[0].Value) != "no time" || h["oxbow.stage"] != "decode" || !strings.Contains(h["oxbow.error"], "invalid timestamp") {
		t.Fatalf("dead letter: value %q, headers %v", dead[0].Value, h)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}

// A task reading several partitions processes their records in event-time
// order, as the sources' timestamp functions give it, not in the order of
// the times Kafka recorded (here the reverse).
func TestAppOrdersPartitionsByEventTime(t *testing.T) {
	k := newKT(t)
	ta, tb, out := k.topic("a"), k.topic("b"), k.topic("out")
	k.create(1, ta, tb, out)
	b := engine.NewBuilder()
	sa := engine.NewStream(b, ta, serde.String, serde.String, engine.WithTimestamps(tradeTime))
	sb := engine.NewStream(b, tb, serde.String, serde.String, engine.WithTimestamps(tradeTime))
	sa.Merge(sb).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	rec := func(v string, recorded int64) *kgo.Record {
		return &kgo.Record{Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(recorded)}
	}
	// Recorded late on a, early on b: by recorded time b's would go first.
	k.produce(ta, rec("1000,a1", 9000), rec("4000,a2", 9001))
	k.produce(tb, rec("2000,b1", 1), rec("3000,b2", 2))
	a := k.start(top, engine.Config{MaxTaskIdle: 5 * time.Second})
	var got []string
	for _, r := range k.records(out, 4, 60*time.Second) {
		_, name, _ := strings.Cut(string(r.Value), ",")
		got = append(got, name)
	}
	if want := "a1 b1 b2 a2"; strings.Join(got, " ") != want {
		t.Errorf("processed %v, want %s", got, want)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}
