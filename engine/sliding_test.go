package engine_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// slidingRec is an input record of the sliding-window tests.
type slidingRec struct {
	key string
	ts  int64 // ms since the Unix epoch
	v   int64
}

// slidingModel computes sliding windows from their definition, the way
// Kafka Streams documents them: each record at t has the window [t-d, t]
// ([0, d] when t < d: windows do not start before the epoch) and, if
// another record follows within (t, t+1+d], the window [t+1, t+1+d]; a
// window sums the values of the records in it, ends included. Keys are
// "<key>@<start>-<end>".
func slidingModel(recs []slidingRec, d int64) map[string]int64 {
	type win struct {
		key        string
		start, end int64
	}
	wins := map[win]bool{}
	for _, r := range recs {
		if r.ts < d {
			wins[win{r.key, 0, d}] = true
		} else {
			wins[win{r.key, r.ts - d, r.ts}] = true
		}
		for _, o := range recs {
			if o.key == r.key && o.ts > r.ts && o.ts <= r.ts+1+d {
				wins[win{r.key, r.ts + 1, r.ts + 1 + d}] = true
				break
			}
		}
	}
	out := map[string]int64{}
	for w := range wins {
		sum := int64(0)
		for _, r := range recs {
			if r.key == w.key && r.ts >= w.start && r.ts <= w.end {
				sum += r.v
			}
		}
		out[fmt.Sprintf("%s@%d-%d", w.key, w.start, w.end)] = sum
	}
	return out
}

// slidingSum sums the values of each key in sliding windows of d, with a
// grace long enough for every record of the tests.
func slidingSum(d time.Duration) *engine.Topology {
	b := engine.NewBuilder()
	in := engine.NewStream(b, "in", serde.String, serde.Int64)
	sums := engine.WindowedReduce(in.GroupByKey().WindowedBy(engine.SlidingWindows(d).Grace(time.Hour)), func(a, v int64) int64 { return a + v }, engine.Materialized("sums"))
	engine.Map(sums.ToStream(), func(k engine.Windowed[string], v int64) (string, int64) {
		return fmt.Sprintf("%s@%d-%d", k.Key, k.Window.Start.UnixMilli(), k.Window.End.UnixMilli()), v
	}).To("out")
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// In any order, early records included, the sliding windows end up as
// their definition says: each window once, with the sum of its records.
func TestSlidingWindowsMatchTheirDefinition(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 3))
		d := int64(1 + rng.IntN(20))
		var recs []slidingRec
		for range 1 + rng.IntN(30) {
			recs = append(recs, slidingRec{key: string(rune('a' + rng.IntN(2))), ts: int64(rng.IntN(80)), v: int64(1 + rng.IntN(9))})
		}
		drv := enginetest.New(t, slidingSum(time.Duration(d)*time.Millisecond))
		in := enginetest.NewInput(drv, "in", serde.String, serde.Int64)
		for _, r := range recs {
			in.Pipe(r.key, r.v, time.UnixMilli(r.ts))
		}
		got := enginetest.ReadTable(enginetest.NewOutput(drv, "out", serde.String, serde.Int64))
		if want := slidingModel(recs, d); !maps.Equal(got, want) {
			t.Fatalf("seed %d, d=%d, records %v:\ngot  %v\nwant %v", seed, d, recs, got, want)
		}
	}
}
