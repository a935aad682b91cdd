package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// priceSum is the running state of a moving average.
type priceSum struct {
	Sum   float64 `json:"sum"`
	Count int64   `json:"count"`
}

// The five-minute moving average of each stock, advancing every minute,
// over a generated series of trades of which some arrive out of order
// (within the grace period) matches a direct calculation from the trades.
func TestMovingAverage(t *testing.T) {
	const grace = 2 * time.Minute
	b := engine.NewBuilder()
	trades := engine.NewStream(b, "trades", serde.String, serde.Float64)
	sums := engine.WindowedAggregate(trades.GroupByKey().WindowedBy(engine.HoppingWindows(5*time.Minute, time.Minute).Grace(grace)),
		func() priceSum { return priceSum{} },
		func(_ string, price float64, s priceSum) priceSum { return priceSum{s.Sum + price, s.Count + 1} },
		engine.Materialized("sums"))
	engine.MapTableValues(sums, func(_ engine.Windowed[string], s priceSum) float64 { return s.Sum / float64(s.Count) }).
		ToStream().To("averages")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))

	// Trades every few seconds over an hour; about one in ten is delayed by
	// up to a minute (less than the grace), so it arrives out of order.
	type trade struct {
		stock string
		at    time.Time
		price float64
	}
	var series []trade
	start := enginetest.Epoch
	for at := start; at.Before(start.Add(time.Hour)); at = at.Add(time.Duration(1+rng.IntN(5)) * time.Second) {
		stock := []string{"acme", "zinc", "tin"}[rng.IntN(3)]
		series = append(series, trade{stock, at, math.Round(100*(50+rng.Float64()*10)) / 100})
	}
	arrival := make([]trade, len(series))
	copy(arrival, series)
	outOfOrder := 0
	for i := range arrival {
		if rng.IntN(10) != 0 {
			continue
		}
		// Move the trade now at i later in the arrival order, by up to a
		// minute of trades after its own time (it may have been moved
		// already: the delays do not add up).
		x := arrival[i]
		j := i
		for j+1 < len(arrival) && arrival[j+1].at.Sub(x.at) < time.Minute && rng.IntN(8) != 0 {
			j++
		}
		if j > i {
			copy(arrival[i:j], arrival[i+1:j+1])
			arrival[j] = x
			outOfOrder++
		}
	}
	if outOfOrder == 0 {
		t.Fatal("the generator delayed no trade")
	}

	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "trades", serde.String, serde.Float64)
	for _, tr := range arrival {
		in.Pipe(tr.stock, tr.price, tr.at)
	}
	if s := d.Skipped(); len(s) != 0 {
		t.Fatalf("records were dropped: %v (a delay exceeded the grace?)", s)
	}
	got := map[string]float64{}
	for _, r := range enginetest.NewOutput(d, "averages", engine.WindowedSerde(serde.String, 5*time.Minute), serde.Float64).ReadRecords() {
		got[fmt.Sprintf("%s@%d", r.Key.Key, r.Key.Window.Start.UnixMilli())] = r.Value
	}

	// The direct calculation: every window of every stock, from the series.
	want := map[string]float64{}
	sum, n := map[string]float64{}, map[string]int{}
	for _, tr := range series {
		ms := tr.at.UnixMilli()
		for s := ms - ms%60_000; s > ms-300_000 && s >= 0; s -= 60_000 {
			k := fmt.Sprintf("%s@%d", tr.stock, s)
			sum[k] += tr.price
			n[k]++
		}
	}
	for k := range sum {
		want[k] = sum[k] / float64(n[k])
	}
	if len(got) != len(want) {
		t.Errorf("%d windows averaged, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("window %s: average %v, want %v", k, g, w)
		}
	}
	t.Logf("%d trades, %d out of order, %d windows", len(series), outOfOrder, len(want))
}
