package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// WindowedSerde writes the key then the window start, 8 bytes big-endian,
// and reads the window back with its size.
func TestWindowedSerde(t *testing.T) {
	s := engine.WindowedSerde(serde.String, time.Minute)
	w := engine.Windowed[string]{Key: "acme", Window: engine.Window{Start: time.UnixMilli(120_000).UTC(), End: time.UnixMilli(180_000).UTC()}}
	b, err := s.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	if want := "acme\x00\x00\x00\x00\x00\x01\xd4\xc0"; string(b) != want {
		t.Errorf("encoded %q, want %q", b, want)
	}
	got, err := s.Decode(b)
	if err != nil || got != w {
		t.Errorf("decoded %+v, %v; want %+v", got, err, w)
	}
	if _, err := s.Decode([]byte("short")); err == nil {
		t.Error("a key shorter than 8 bytes decoded")
	}
}

// Bad window definitions are build errors.
func TestWindowErrors(t *testing.T) {
	for _, w := range []engine.TimeWindows{
		engine.TumblingWindows(0),
		engine.HoppingWindows(time.Minute, 2*time.Minute),
		engine.TumblingWindows(time.Minute).Grace(-time.Second),
	} {
		b := engine.NewBuilder()
		engine.WindowedCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().WindowedBy(w))
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "WindowedBy") {
			t.Errorf("%+v: Build error %v", w, err)
		}
	}
}

// On Kafka a windowed count keeps its windows in a store with a changelog:
// the output and the store agree, and the store answers for a window.
func TestAppWindowedCount(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	b := engine.NewBuilder()
	counts := engine.WindowedCount(engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		WindowedBy(engine.TumblingWindows(time.Minute)), engine.Materialized("per-minute"))
	counts.ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{})
	base := enginetest.Epoch
	var recs []*kgo.Record
	for i, s := range []int{0, 10, 59, 60, 61, 130} {
		recs = append(recs, &kgo.Record{Key: []byte("acme"), Value: []byte{byte('a' + i)}, Timestamp: base.Add(time.Duration(s) * time.Second)})
	}
	k.produce(in, recs...)
	ws := engine.WindowedSerde(serde.String, time.Minute)
	key := func(minute int) string {
		b, _ := ws.Encode(engine.Windowed[string]{Key: "acme", Window: engine.Window{Start: base.Add(time.Duration(minute) * time.Minute)}})
		return string(b)
	}
	want := map[string]int64{key(0): 3, key(1): 2, key(2): 1}
	k.table(out, 60*time.Second, func(m map[string]int64) bool {
		return len(m) == 3 && m[key(0)] == 3 && m[key(1)] == 2 && m[key(2)] == 1
	})
	store, err := engine.QueryWindowStore(a.App, "per-minute", serde.String, serde.Int64, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for minute, n := range []int64{3, 2, 1} {
		w := engine.Windowed[string]{Key: "acme", Window: engine.Window{Start: base.Add(time.Duration(minute) * time.Minute)}}
		var got int64
		await.Until(t, 10*time.Second, "the window's count to be committed", func() bool {
			v, _, err := store.Get(w.Key, w.Window.Start)
			if errors.Is(err, engine.ErrNotReady) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			got = v
			return v == n
		})
		if got != want[key(minute)] {
			t.Errorf("minute %d: %d", minute, got)
		}
	}
	wstore, err := engine.QueryWindowStore(a.App, "per-minute", serde.String, serde.Int64, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var fetched []int64
	for kv, err := range wstore.Fetch("acme", base, base.Add(2*time.Minute)) {
		if err != nil {
			t.Fatal(err)
		}
		fetched = append(fetched, kv.Value)
	}
	if fmt.Sprint(fetched) != "[3 2 1]" {
		t.Errorf("Fetch(acme, minutes 0 to 2): %v, want [3 2 1]", fetched)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}

// Emit-final on Kafka, exactly once, across a restart that rebuilds the
// state from the changelogs: every window is emitted once, with its full
// count, whether it closed before the restart or after. (It looks for
// closed windows at every record: the records here come within a second.)
func TestAppEmitFinalAcrossRestart(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	b := engine.NewBuilder()
	engine.WindowedCount(engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		WindowedBy(engine.TumblingWindows(time.Minute)), engine.Materialized("per-minute"), engine.EmitFinal(), engine.EmitInterval(0)).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	base := enginetest.Epoch
	at := func(minute int, key string) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: []byte("x"), Timestamp: base.Add(time.Duration(minute) * time.Minute)}
	}
	ws := engine.WindowedSerde(serde.String, time.Minute)
	reader, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	emitted := map[string][]int64{}
	total := 0
	readUntil := func(n int) {
		t.Helper()
		await.NoError(t, 60*time.Second, fmt.Sprintf("%d windows emitted", n), func() error {
			if total < n {
				k.checkApps()
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				fs := reader.PollFetches(ctx)
				cancel()
				fs.EachRecord(func(r *kgo.Record) {
					w, err := ws.Decode(r.Key)
					if err != nil {
						t.Fatal(err)
					}
					c, _ := serde.Int64.Decode(r.Value)
					name := fmt.Sprintf("%s@%d", w.Key, w.Window.Start.Sub(base)/time.Minute)
					emitted[name] = append(emitted[name], c)
					total++
				})
			}
			if total < n {
				return fmt.Errorf("%d of %d windows emitted: %v", total, n, emitted)
			}
			return nil
		})
	}

	// Minutes 0 and 1 close (a record at minute 2 moves stream time); minute
	// 2 stays open across the restart.
	a := k.start(top, engine.Config{Guarantee: engine.ExactlyOnce})
	k.produce(in, at(0, "a"), at(0, "a"), at(0, "b"), at(1, "a"), at(2, "a"))
	readUntil(3)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	// A new instance with empty state restores windows and pending emits.
	a2 := k.start(top, engine.Config{Guarantee: engine.ExactlyOnce})
	k.produce(in, at(2, "b"), at(2, "a"), at(5, "z"))
	readUntil(5)
	if err := a2.stop(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"a@0": {2}, "b@0": {1}, "a@1": {1}, "a@2": {2}, "b@2": {1}}
	if fmt.Sprint(emitted) != fmt.Sprint(want) {
		t.Errorf("emitted %v, want %v", emitted, want)
	}
}

// Windows go from the store a segment at a time, as in Kafka Streams: with
// a retention of 15ms the windows starting in a minute's span (a segment:
// half the retention, at least a minute) go when the latest window written
// starts 15ms after the minute, without a change downstream; with the
// record cache, an update still waiting in it is emitted first.
func TestWindowRetention(t *testing.T) {
	for _, cache := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			b := engine.NewBuilder()
			engine.WindowedCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().
				WindowedBy(engine.TumblingWindows(10*time.Millisecond)), engine.Materialized("counts"), engine.Retention(15*time.Millisecond)).
				ToStream().To("out")
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			var opts []enginetest.Option
			if cache > 0 {
				opts = append(opts, enginetest.CacheBytes(cache))
			}
			d := enginetest.New(t, top, opts...)
			in := enginetest.NewInput(d, "in", serde.String, serde.String)
			ws := engine.WindowedSerde(serde.String, 10*time.Millisecond)
			win := func(key string, start int64) engine.Windowed[string] {
				s := enginetest.At(start).UTC()
				return engine.Windowed[string]{Key: key, Window: engine.Window{Start: s, End: s.Add(10 * time.Millisecond)}}
			}
			const minute = 60_000
			in.Pipe("a", "x", enginetest.At(1))
			in.Pipe("a", "x", enginetest.At(12))
			in.Pipe("a", "x", enginetest.At(14))
			in.Pipe("b", "x", enginetest.At(minute-5)) // the segment's last window
			d.Commit()
			if got := enginetest.WindowStoreContents(d, "counts", serde.String, serde.Int64, 10*time.Millisecond); len(got) != 3 || got[win("a", 0)] != 1 || got[win("a", 10)] != 2 || got[win("b", minute-10)] != 1 {
				t.Fatalf("store at stream time %d: %v", minute-5, got)
			}
			in.Pipe("b", "x", enginetest.At(minute+14)) // starts 10ms after the segment: not yet
			d.Commit()
			if got := enginetest.WindowStoreContents(d, "counts", serde.String, serde.Int64, 10*time.Millisecond); len(got) != 4 {
				t.Fatalf("store at stream time %d: %v", minute+14, got)
			}
			in.Pipe("b", "x", enginetest.At(minute+21)) // starts 20ms after it: the segment goes
			d.Commit()
			got := enginetest.WindowStoreContents(d, "counts", serde.String, serde.Int64, 10*time.Millisecond)
			if len(got) != 2 || got[win("b", minute+10)] != 1 || got[win("b", minute+20)] != 1 {
				t.Errorf("store at stream time %d: %v", minute+21, got)
			}
			latest := map[engine.Windowed[string]]int64{}
			for _, r := range enginetest.NewOutput(d, "out", ws, serde.Int64).ReadRecords() {
				latest[r.Key] = r.Value
			}
			if len(latest) != 5 || latest[win("a", 0)] != 1 || latest[win("a", 10)] != 2 || latest[win("b", minute-10)] != 1 {
				t.Errorf("output (latest per window): %v", latest)
			}
			// c's window expires before any commit: with the cache, its
			// update is still waiting there, and is emitted on expiry.
			in.Pipe("c", "x", enginetest.At(minute+29))
			in.Pipe("c", "x", enginetest.At(2*minute+25))
			d.Commit()
			var c20 []int64
			for _, r := range enginetest.NewOutput(d, "out", ws, serde.Int64).ReadRecords() {
				if r.Key == win("c", minute+20) {
					c20 = append(c20, r.Value)
				}
			}
			if fmt.Sprint(c20) != "[1]" {
				t.Errorf("c's expired window emitted %v, want [1]", c20)
			}
			if got := enginetest.WindowStoreContents(d, "counts", serde.String, serde.Int64, 10*time.Millisecond); len(got) != 1 || got[win("c", 2*minute+20)] != 1 {
				t.Errorf("store at stream time %d: %v", 2*minute+25, got)
			}
		})
	}
}

// A store larger than a record's share of the expiry sweep is swept over
// several records: each record deletes at most that many more due windows,
// the windows of the later segment stay, and once the sweep has passed
// the store holds only them; the expired windows go without a change
// downstream, with and without the record cache.
func TestWindowExpirySweep(t *testing.T) {
	const keys = 10_000 // more than two records' share (sweepBudget)
	for _, cache := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			b := engine.NewBuilder()
			engine.WindowedCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().
				WindowedBy(engine.TumblingWindows(10*time.Millisecond)), engine.Materialized("counts"), engine.Retention(15*time.Millisecond)).
				ToStream().To("out")
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			var opts []enginetest.Option
			if cache > 0 {
				opts = append(opts, enginetest.CacheBytes(cache))
			}
			d := enginetest.New(t, top, opts...)
			in := enginetest.NewInput(d, "in", serde.String, serde.String)
			out := enginetest.NewOutput(d, "out", engine.WindowedSerde(serde.String, 10*time.Millisecond), serde.Int64)
			count := func() int {
				return len(enginetest.WindowStoreContents(d, "counts", serde.String, serde.Int64, 10*time.Millisecond))
			}
			const minute = 60_000
			for k := range keys {
				in.Pipe(fmt.Sprintf("k%05d", k), "x", enginetest.At(5)) // segment 0
			}
			d.Commit()
			if n := count(); n != keys {
				t.Fatalf("%d windows before the segment expires, want %d", n, keys)
			}
			if n := len(out.ReadRecords()); n != keys {
				t.Fatalf("%d records downstream before the expiry, want %d", n, keys)
			}
			// Each record of the next minute's segment, 20ms in: segment 0
			// is due; the sweep goes over it a share at a time.
			var seen []int
			for i := 0; ; i++ {
				in.Pipe(fmt.Sprintf("late%d", i), "x", enginetest.At(minute+20+int64(i)))
				d.Commit()
				n := count()
				seen = append(seen, n)
				if n == i+1 {
					break // only the new segment's windows are left
				}
				if i > 10 {
					t.Fatalf("the store after each record: %v; the expired windows do not go", seen)
				}
			}
			t.Logf("the store after each record: %v", seen)
			if len(seen) < 3 {
				t.Errorf("the store after each record: %v; want the sweep spread over three records at least", seen)
			}
			for i := 1; i < len(seen); i++ {
				if seen[i] >= seen[i-1]+1 {
					t.Errorf("the store after each record: %v; the sweep did not move on", seen)
				}
			}
			if n := len(out.ReadRecords()); n != len(seen) {
				t.Errorf("%d records downstream after the expiry, want %d (the new windows only)", n, len(seen))
			}
		})
	}
}

// A record for a closed window is counted in oxbow.records.dropped, by its
// node and reason, and with DeadLetterLateRecords written to the
// dead-letter topic.
func TestAppLateRecords(t *testing.T) {
	k := newKT(t)
	in, out, dlq := k.topic("in"), k.topic("out"), k.topic("dlq")
	k.create(1, in, out)
	b := engine.NewBuilder()
	engine.WindowedCount(engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		WindowedBy(engine.TumblingWindows(time.Minute)), engine.Named("per-minute")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	m := newTelMetrics(t)
	a := k.start(top, engine.Config{MeterProvider: m.mp, DeadLetterLateRecords: true, DeadLetterTopic: dlq})
	base := enginetest.Epoch
	k.produce(in,
		&kgo.Record{Key: []byte("a"), Value: []byte("x"), Timestamp: base.Add(30 * time.Second)},
		&kgo.Record{Key: []byte("a"), Value: []byte("x"), Timestamp: base.Add(90 * time.Second)},
		&kgo.Record{Key: []byte("a"), Value: []byte("late"), Timestamp: base.Add(40 * time.Second)},
	)
	want := map[string]int64{"reason=per-minute: record for a closed window": 1, "reason=decode": 0, "reason=process": 0, "reason=produce": 0}
	telWait(t, k, 60*time.Second, "the late record in oxbow.records.dropped", func() (bool, string) {
		got := telInt64s(m.collect(), "oxbow.records.dropped")
		return maps.Equal(got, want), fmt.Sprint(got)
	})
	if got := a.Skipped(); got["per-minute: record for a closed window"] != 1 {
		t.Errorf("App.Skipped: %v", got)
	}
	dead := k.records(dlq, 1, 30*time.Second)
	h := map[string]string{}
	for _, x := range dead[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if string(dead[0].Value) != "late" || h["oxbow.stage"] != "late" || h["oxbow.offset"] != "2" || !strings.Contains(h["oxbow.error"], "closed windows") {
		t.Errorf("dead letter: value %q, headers %v", dead[0].Value, h)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}

// QueryWindowStore fetches one key's windows over a time range, in start
// order, and no window of another key, even one whose bytes begin with it.
func TestQueryWindowStore(t *testing.T) {
	b := engine.NewBuilder()
	engine.WindowedCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().
		WindowedBy(engine.TumblingWindows(10*time.Millisecond)), engine.Materialized("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	for _, p := range []struct {
		key string
		ms  int64
	}{{"a", 1}, {"a", 2}, {"ab", 3}, {"a", 15}, {"ab", 16}, {"a", 27}, {"b", 28}} {
		in.Pipe(p.key, "x", enginetest.At(p.ms))
	}
	ws, err := engine.QueryWindowStore(d, "counts", serde.String, serde.Int64, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(key string, from, to int64) string {
		var got []string
		for kv, err := range ws.Fetch(key, enginetest.At(from), enginetest.At(to)) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s@%d=%d", kv.Key.Key, kv.Key.Window.Start.Sub(enginetest.Epoch).Milliseconds(), kv.Value))
		}
		return strings.Join(got, " ")
	}
	for _, tc := range []struct {
		key      string
		from, to int64
		want     string
	}{
		{"a", 0, 100, "a@0=2 a@10=1 a@20=1"},
		{"a", 10, 20, "a@10=1 a@20=1"},
		{"a", 11, 19, ""},
		{"ab", 0, 100, "ab@0=1 ab@10=1"},
		{"c", 0, 100, ""},
	} {
		if got := fetch(tc.key, tc.from, tc.to); got != tc.want {
			t.Errorf("Fetch(%s, %d, %d) = %q, want %q", tc.key, tc.from, tc.to, got, tc.want)
		}
	}
	if v, ok, err := ws.Get("a", enginetest.At(0)); err != nil || !ok || v != 2 {
		t.Errorf("Get(a, 0) = %d, %v, %v", v, ok, err)
	}
	n := 0
	for _, err := range ws.All() {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 6 {
		t.Errorf("All: %d windows, want 6", n)
	}
	fetchKeys := func(from, to string, start, end int64) string {
		var got []string
		for kv, err := range ws.FetchKeys(from, to, enginetest.At(start), enginetest.At(end)) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s@%d=%d", kv.Key.Key, kv.Key.Window.Start.Sub(enginetest.Epoch).Milliseconds(), kv.Value))
		}
		return strings.Join(got, " ")
	}
	for _, tc := range []struct {
		from, to   string
		start, end int64
		want       string
	}{
		{"a", "b", 0, 100, "a@0=2 a@10=1 a@20=1 ab@0=1 ab@10=1"},
		{"a", "ab", 0, 100, "a@0=2 a@10=1 a@20=1"},
		{"ab", "c", 10, 20, "ab@10=1 b@20=1"},
		{"a", "c", 11, 19, ""},
		{"b", "a", 0, 100, ""},
	} {
		if got := fetchKeys(tc.from, tc.to, tc.start, tc.end); got != tc.want {
			t.Errorf("FetchKeys(%s, %s, %d, %d) = %q, want %q", tc.from, tc.to, tc.start, tc.end, got, tc.want)
		}
	}
}
