package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// The windowed aggregations' fine points that Kafka Streams decides (the
// differential test, engine/difftest, checks them against it at large).

const milli = time.Millisecond

// windowLines reads a windowed count's output as "<key>@<start>=<count>"
// (a tombstone: "~"), one string per record.
func windowLines(t *testing.T, d *enginetest.Driver, ks serde.Serde[engine.Windowed[string]]) string {
	t.Helper()
	var got []string
	for _, m := range d.Messages("out") {
		k, err := ks.Decode(m.Key)
		if err != nil {
			t.Fatal(err)
		}
		v := "~"
		if m.Value != nil {
			n, err := serde.Int64.Decode(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			v = fmt.Sprint(n)
		}
		got = append(got, fmt.Sprintf("%s@%d=%s", k.Key, k.Window.Start.Sub(enginetest.Epoch).Milliseconds(), v))
	}
	return strings.Join(got, " ")
}

func build(t *testing.T, f func(b *engine.Builder, in *engine.Stream[string, string])) *engine.Topology {
	t.Helper()
	b := engine.NewBuilder()
	f(b, engine.NewStream(b, "in", serde.String, serde.String))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// Emit-final looks for closed windows at most once per EmitInterval of
// wall-clock time, when a record comes (the first always looks); the
// driver's default, as Kafka Streams' TopologyTestDriver's, is every record.
func TestEmitInterval(t *testing.T) {
	ws := engine.WindowedSerde(serde.String, 10*milli)
	for _, every := range []time.Duration{time.Second, -1} {
		name := "default"
		if every >= 0 {
			name = every.String()
		}
		t.Run(name, func(t *testing.T) {
			top := build(t, func(_ *engine.Builder, in *engine.Stream[string, string]) {
				opts := []engine.Option{engine.EmitFinal()}
				if every >= 0 {
					opts = append(opts, engine.EmitInterval(every))
				}
				engine.WindowedCount(in.GroupByKey().WindowedBy(engine.TumblingWindows(10*milli)), opts...).ToStream().To("out")
			})
			d := enginetest.New(t, top)
			in := enginetest.NewInput(d, "in", serde.String, serde.String)
			in.Pipe("a", "x", enginetest.At(1))  // looks: nothing closed
			in.Pipe("a", "x", enginetest.At(12)) // closes [0,10)
			want := "a@0=1"
			if every > 0 {
				want = "" // not a second since it last looked
			}
			if got := windowLines(t, d, ws); got != want {
				t.Fatalf("after the record closing [0,10): %q, want %q", got, want)
			}
			if every <= 0 {
				return
			}
			d.AdvanceWallClock(999 * milli)
			in.Pipe("b", "x", enginetest.At(13))
			if got := windowLines(t, d, ws); got != "" {
				t.Fatalf("999ms later: %q", got)
			}
			d.AdvanceWallClock(milli)
			in.Pipe("b", "x", enginetest.At(14))
			if got := windowLines(t, d, ws); got != "a@0=1" {
				t.Fatalf("a second later: %q, want a@0=1", got)
			}
		})
	}
}

// A window waiting for emit-final stays in the store past its expiry when
// the record cache is on: Kafka Streams' cache shows it to the emit even
// after its store dropped the window's segment (a replay moving stream time
// a day within the emit interval). Without the cache its store hides it,
// and it is never emitted.
func TestEmitFinalHoldsWindowsPastExpiry(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			top := build(t, func(_ *engine.Builder, in *engine.Stream[string, string]) {
				engine.WindowedCount(in.GroupByKey().WindowedBy(engine.TumblingWindows(10*milli)), engine.Materialized("counts"),
					engine.EmitFinal(), engine.EmitInterval(time.Second)).ToStream().To("out")
			})
			var opts []enginetest.Option
			if cache {
				opts = append(opts, enginetest.CacheBytes(1<<20))
			}
			d := enginetest.New(t, top, opts...)
			in := enginetest.NewInput(d, "in", serde.String, serde.String)
			in.Pipe("a", "x", enginetest.At(1))
			in.Pipe("b", "x", enginetest.At(int64(48*time.Hour/milli))) // [0,10)'s segment expires
			d.Commit()
			d.AdvanceWallClock(time.Second)
			in.Pipe("b", "x", enginetest.At(int64(48*time.Hour/milli)+1))
			d.Commit()
			want := ""
			if cache {
				want = "a@0=1"
			}
			if got := windowLines(t, d, engine.WindowedSerde(serde.String, 10*milli)); got != want {
				t.Errorf("emitted %q, want %q", got, want)
			}
			if got := enginetest.WindowStoreContents(d, "counts", serde.String, serde.Int64, 10*milli); len(got) != 1 {
				t.Errorf("store %v, want b's window only", got)
			}
		})
	}
}

// EmitInterval goes with EmitFinal, and is not negative.
func TestEmitIntervalErrors(t *testing.T) {
	for _, c := range []struct {
		opts []engine.Option
		want string
	}{
		{[]engine.Option{engine.EmitInterval(time.Second)}, "EmitInterval is for EmitFinal"},
		{[]engine.Option{engine.EmitFinal(), engine.EmitInterval(-time.Second)}, "EmitInterval -1s is negative"},
	} {
		b := engine.NewBuilder()
		engine.SessionCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().SessionWindowedBy(engine.SessionWindows(time.Second)), c.opts...)
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Build error %v, want one saying %q", err, c.want)
		}
	}
}

// As in Kafka Streams, a count of time windows or sessions counts the
// records without a value, a sliding count and the reductions drop them;
// all drop the records without a key.
func TestWindowedAggregationsAndNullValues(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(in *engine.Stream[string, string]) *engine.Table[engine.Windowed[string], int64]
		ks    serde.Serde[engine.Windowed[string]]
		want  string
	}{
		{"tumbling count", func(in *engine.Stream[string, string]) *engine.Table[engine.Windowed[string], int64] {
			return engine.WindowedCount(in.GroupByKey().WindowedBy(engine.TumblingWindows(10 * milli)))
		}, engine.WindowedSerde(serde.String, 10*milli), "a@0=1 a@0=2"},
		{"session count", func(in *engine.Stream[string, string]) *engine.Table[engine.Windowed[string], int64] {
			return engine.SessionCount(in.GroupByKey().SessionWindowedBy(engine.SessionWindows(10 * milli)))
		}, engine.SessionWindowedSerde(serde.String), "a@1=1 a@1=~ a@1=2"},
		{"sliding count", func(in *engine.Stream[string, string]) *engine.Table[engine.Windowed[string], int64] {
			return engine.WindowedCount(in.GroupByKey().WindowedBy(engine.SlidingWindows(10 * milli)))
		}, engine.WindowedSerde(serde.String, 10*milli), "a@-9=1"},
		{"tumbling reduce", func(in *engine.Stream[string, string]) *engine.Table[engine.Windowed[string], int64] {
			lengths := engine.MapValues(in, func(_ string, v string) int64 { return int64(len(v)) })
			return engine.WindowedReduce(lengths.GroupByKey().WindowedBy(engine.TumblingWindows(10*milli)), func(a, v int64) int64 { return a + v })
		}, engine.WindowedSerde(serde.String, 10*milli), "a@0=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := build(t, func(_ *engine.Builder, in *engine.Stream[string, string]) {
				c.build(in).ToStream().To("out")
			})
			d := enginetest.New(t, top)
			for _, r := range []struct {
				key, value []byte
				ms         int64
			}{{[]byte("a"), []byte("x"), 1}, {[]byte("a"), nil, 2}, {nil, []byte("y"), 3}} {
				if err := d.PipeBytes("in", r.key, r.value, enginetest.At(r.ms)); err != nil {
					t.Fatal(err)
				}
			}
			if got := windowLines(t, d, c.ks); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// A record without a key is dropped before it moves the aggregation's
// stream time: it closes no window.
func TestWindowClockSkipsRecordsWithoutKey(t *testing.T) {
	top := build(t, func(_ *engine.Builder, in *engine.Stream[string, string]) {
		engine.WindowedCount(in.GroupByKey().WindowedBy(engine.TumblingWindows(10 * milli))).ToStream().To("out")
	})
	d := enginetest.New(t, top)
	for _, r := range []struct {
		key []byte
		ms  int64
	}{{[]byte("a"), 1}, {nil, 100}, {[]byte("a"), 2}} {
		if err := d.PipeBytes("in", r.key, []byte("x"), enginetest.At(r.ms)); err != nil {
			t.Fatal(err)
		}
	}
	if got := windowLines(t, d, engine.WindowedSerde(serde.String, 10*milli)); got != "a@0=1 a@0=2" {
		t.Errorf("got %q, want a@0=1 a@0=2", got)
	}
}

// Each stream of a cogrouped windowed aggregation has its own stream time,
// as in Kafka Streams: a window one stream's records closed is still open
// for the other's.
func TestWindowedCogroupStreamTimes(t *testing.T) {
	b := engine.NewBuilder()
	add := func(_ string, _ string, agg int64) int64 { return agg + 1 }
	c := engine.Cogroup(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey(), add)
	c = engine.CogroupWith(c, engine.NewStream(b, "in2", serde.String, serde.String).GroupByKey(), add)
	engine.WindowedCogroup(c, engine.TumblingWindows(10*milli), func() int64 { return 0 }, engine.ValueSerde(serde.Int64)).ToStream().To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top, enginetest.CacheBytes(1<<20))
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	in2 := enginetest.NewInput(d, "in2", serde.String, serde.String)
	in.Pipe("a", "x", enginetest.At(1))
	in.Pipe("b", "x", enginetest.At(15)) // [0,10) closes for "in"
	in.Pipe("a", "x", enginetest.At(2))  // dropped
	in2.Pipe("a", "x", enginetest.At(3)) // "in2" is at 3: counted
	d.Commit()                           // a@0 was updated last, so it is flushed last
	if got, want := windowLines(t, d, engine.WindowedSerde(serde.String, 10*milli)), "b@10=1 a@0=2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// SuppressUntilWindowCloses needs a table that comes from a windowed
// aggregation, whose grace tells when the windows close.
func TestSuppressUntilWindowClosesNeedsWindows(t *testing.T) {
	b := engine.NewBuilder()
	ws := engine.WindowedSerde(serde.String, 10*milli)
	engine.SuppressUntilWindowCloses(engine.NewTable(b, "windows", ws, serde.Int64)).ToStream().To("out")
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "does not come from a windowed aggregation") {
		t.Errorf("Build error %v", err)
	}
}
