package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Words from lines of text are counted by a topology that re-keys the stream
// by word, so the count runs after a repartition.
func Example() {
	b := engine.NewBuilder()
	lines := engine.NewStream(b, "lines", serde.String, serde.String)
	words := engine.FlatMapValues(lines, func(_ string, line string) []string {
		return strings.Fields(line)
	})
	counts := engine.GroupBy(words, func(_ string, w string) string { return w }, engine.Named("by-word")).
		Count(engine.Materialized("word-counts"))
	counts.ToStream().To("word-counts")

	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	in := enginetest.NewInput(d, "lines", serde.String, serde.String)
	in.Pipe("", "the cat", enginetest.At(1))
	in.Pipe("", "the dog", enginetest.At(2))

	out := enginetest.NewOutput(d, "word-counts", serde.String, serde.Int64)
	for _, kv := range out.ReadKeyValues() {
		fmt.Println(kv.Key, kv.Value)
	}
	// Output:
	// the 1
	// cat 1
	// the 2
	// dog 1
}

// A count that changes downstream at most once a minute per key: the
// updates wait in SuppressUntil's buffer and leave as one when stream time
// has moved a minute past the first of them.
func ExampleTable_SuppressUntil() {
	b := engine.NewBuilder()
	engine.NewStream(b, "clicks", serde.String, serde.String).GroupByKey().Count().
		SuppressUntil(time.Minute).ToStream().To("clicks-per-minute")
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	in := enginetest.NewInput(d, "clicks", serde.String, serde.String)
	out := enginetest.NewOutput(d, "clicks-per-minute", serde.String, serde.Int64)
	at := func(d time.Duration) time.Time { return enginetest.Epoch.Add(d) }
	in.Pipe("ann", "/home", at(0))
	in.Pipe("ann", "/cart", at(10*time.Second))
	in.Pipe("bob", "/home", at(30*time.Second))
	fmt.Println("after 30s:", out.ReadKeyValues())
	in.Pipe("ann", "/pay", at(70*time.Second))
	fmt.Println("after 70s:", out.ReadKeyValues())
	in.Pipe("cat", "/home", at(2*time.Minute))
	fmt.Println("after 2m:", out.ReadKeyValues())
	// Output:
	// after 30s: []
	// after 70s: [{ann 3}]
	// after 2m: [{bob 1}]
}

// Clicks per user session: a session lasts while clicks follow each other
// within five minutes. A click that comes late enough to join two sessions
// merges them; the two are retracted (a nil count) before the merged one.
func ExampleSessionCount() {
	b := engine.NewBuilder()
	clicks := engine.NewStream(b, "clicks", serde.String, serde.String)
	perSession := engine.SessionCount(clicks.GroupByKey().
		SessionWindowedBy(engine.SessionWindows(5 * time.Minute).Grace(time.Hour)))
	perSession.ToStream().To("sessions") // keys in engine.SessionWindowedSerde's format
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	in := enginetest.NewInput(d, "clicks", serde.String, serde.String)
	at := func(m int) time.Time { return enginetest.Epoch.Add(time.Duration(m) * time.Minute) }
	in.Pipe("ann", "/home", at(0))
	in.Pipe("ann", "/cart", at(3))
	in.Pipe("ann", "/home", at(12))
	in.Pipe("ann", "/help", at(7)) // within 5 minutes of both sessions

	out := enginetest.NewOutput(d, "sessions", engine.SessionWindowedSerde(serde.String), serde.Int64)
	for _, r := range out.ReadRecords() {
		w := r.Key.Window
		count := fmt.Sprint(r.Value)
		if r.Tombstone {
			count = "retracted"
		}
		fmt.Printf("%s %v-%v: %s\n", r.Key.Key, w.Start.Sub(enginetest.Epoch), w.End.Sub(enginetest.Epoch), count)
	}
	// Output:
	// ann 0s-0s: 1
	// ann 0s-0s: retracted
	// ann 0s-3m0s: 2
	// ann 12m0s-12m0s: 1
	// ann 0s-3m0s: retracted
	// ann 12m0s-12m0s: retracted
	// ann 0s-12m0s: 4
}

// The average price of a stock over every ten-minute span of its trades:
// a sliding window holds each set of trades at most ten minutes apart. Each
// trade ends a window, and starts one a millisecond after it when a later
// trade follows within ten minutes (the 20m trade's, holding the 25m one).
// With EmitFinal each window's average comes once, when stream time has
// passed its end by more than the grace period.
func ExampleSlidingWindows() {
	b := engine.NewBuilder()
	trades := engine.NewStream(b, "trades", serde.String, serde.Float64)
	type avg struct{ Sum, N float64 }
	avgs := engine.WindowedAggregate(trades.GroupByKey().WindowedBy(engine.SlidingWindows(10*time.Minute).Grace(5*time.Minute)),
		func() avg { return avg{} },
		func(_ string, price float64, a avg) avg { return avg{a.Sum + price, a.N + 1} }, engine.EmitFinal())
	engine.MapValues(avgs.ToStream(), func(_ engine.Windowed[string], a avg) float64 { return a.Sum / a.N }).
		To("averages") // keys in engine.WindowedSerde's format
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	in := enginetest.NewInput(d, "trades", serde.String, serde.Float64)
	at := func(m int) time.Time { return enginetest.Epoch.Add(time.Duration(m) * time.Minute) }
	in.Pipe("ACME", 10, at(20))
	in.Pipe("ACME", 12, at(25))
	in.Pipe("ACME", 20, at(40)) // closes the windows ending before 35m
	in.Pipe("ACME", 0, at(55))  // and before 50m

	out := enginetest.NewOutput(d, "averages", engine.WindowedSerde(serde.String, 10*time.Minute), serde.Float64)
	for _, kv := range out.ReadKeyValues() {
		w := kv.Key.Window
		fmt.Printf("%v-%v: %.1f\n", w.Start.Sub(enginetest.Epoch), w.End.Sub(enginetest.Epoch), kv.Value)
	}
	// Output:
	// 10m0s-20m0s: 10.0
	// 15m0s-25m0s: 11.0
	// 20m0.001s-30m0.001s: 12.0
	// 30m0s-40m0s: 20.0
}

// The average of every 3 readings of each sensor, whenever they came:
// tumbling count windows, emitted when full.
func ExampleTumblingCountWindows() {
	b := engine.NewBuilder()
	readings := engine.NewStream(b, "readings", serde.String, serde.Float64)
	type avg struct{ Sum, N float64 }
	avgs := engine.CountWindowedAggregate(readings.GroupByKey().WindowedByCount(engine.TumblingCountWindows(3)),
		func() avg { return avg{} },
		func(_ string, v float64, a avg) avg { return avg{a.Sum + v, a.N + 1} }, engine.EmitFinal())
	engine.MapValues(avgs.ToStream(), func(_ engine.CountWindowed[string], a avg) float64 { return a.Sum / a.N }).
		To("averages") // keys in engine.CountWindowedSerde's format
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	in := enginetest.NewInput(d, "readings", serde.String, serde.Float64)
	for i, v := range []float64{20, 21, 22, 30, 31, 32, 33} {
		in.Pipe("boiler", v, enginetest.Epoch.Add(time.Duration(i)*time.Hour))
	}
	in.Pipe("attic", 5, enginetest.Epoch)

	out := enginetest.NewOutput(d, "averages", engine.CountWindowedSerde(serde.String, 3), serde.Float64)
	for _, r := range out.ReadRecords() {
		fmt.Printf("%s readings %d-%d: %.1f (last at %v)\n", r.Key.Key, r.Key.Window.Start, r.Key.Window.End-1, r.Value, r.Timestamp.Sub(enginetest.Epoch))
	}
	// Output:
	// boiler readings 0-2: 21.0 (last at 2h0m0s)
	// boiler readings 3-5: 31.0 (last at 5h0m0s)
}

// Orders enriched with the customer's current name: a stream-table left
// join. A table update gives nothing by itself; the next order meets it.
func ExampleLeftJoin() {
	b := engine.NewBuilder()
	customers := engine.NewTable(b, "customers", serde.String, serde.String)
	orders := engine.NewStream(b, "orders", serde.String, serde.String)
	engine.LeftJoin(orders, customers, func(_ string, order, name string, found bool) string {
		if !found {
			return order + " for an unknown customer"
		}
		return order + " for " + name
	}).To("enriched-orders")
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	cust := enginetest.NewInput(d, "customers", serde.String, serde.String)
	ord := enginetest.NewInput(d, "orders", serde.String, serde.String)
	ord.Pipe("c1", "order 1", enginetest.At(1))
	cust.Pipe("c1", "Ann", enginetest.At(2))
	ord.Pipe("c1", "order 2", enginetest.At(3))
	cust.Pipe("c1", "Ann Lee", enginetest.At(4))
	ord.Pipe("c1", "order 3", enginetest.At(5))

	for _, kv := range enginetest.NewOutput(d, "enriched-orders", serde.String, serde.String).ReadKeyValues() {
		fmt.Println(kv.Value)
	}
	// Output:
	// order 1 for an unknown customer
	// order 2 for Ann
	// order 3 for Ann Lee
}

// Trades priced as of their own time, though they arrive late: the price
// table is versioned, so a trade meets the price that held when it was made,
// and JoinGrace holds each trade until stream time is a minute past it, so
// a price update that comes in late still counts.
func ExampleVersioned() {
	b := engine.NewBuilder()
	prices := engine.NewTable(b, "prices", serde.String, serde.Float64, engine.Versioned(time.Hour))
	trades := engine.NewStream(b, "trades", serde.String, serde.Int64)
	engine.Join(trades, prices, func(symbol string, qty int64, price float64) string {
		return fmt.Sprintf("%d %s at %.2f", qty, symbol, price)
	}, engine.JoinGrace(time.Minute)).To("priced-trades")
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	minute := func(m int) time.Time { return enginetest.Epoch.Add(time.Duration(m) * time.Minute) }
	price := enginetest.NewInput(d, "prices", serde.String, serde.Float64)
	trade := enginetest.NewInput(d, "trades", serde.String, serde.Int64)
	price.Pipe("ACME", 10.00, minute(0))
	price.Pipe("ACME", 12.50, minute(10))
	trade.Pipe("ACME", 100, minute(5))   // waits for the grace
	price.Pipe("ACME", 11.00, minute(4)) // late, but in time for it
	trade.Pipe("ACME", 7, minute(2))     // out of order
	trade.Pipe("ACME", 50, minute(20))   // lets the others go

	for _, kv := range enginetest.NewOutput(d, "priced-trades", serde.String, serde.String).ReadKeyValues() {
		fmt.Println(kv.Value)
	}
	// Output:
	// 7 ACME at 10.00
	// 100 ACME at 11.00
}

// A truncate in a stream of row changes concerns every key, so it must
// reach every partition of the repartition topic, and with it every task
// downstream; the rows themselves go to the partition their key hashes to.
// The driver has one partition per topic, so there the truncate is written
// once; on a broker it is written once to each partition.
func ExampleStream_RepartitionBy() {
	everywhere := func(_ string, change string, partitions int) []int {
		if change != "truncate" {
			return nil // by the key
		}
		all := make([]int, partitions)
		for p := range all {
			all[p] = p
		}
		return all
	}
	b := engine.NewBuilder()
	engine.NewStream(b, "changes", serde.String, serde.String).
		RepartitionBy(everywhere, engine.Named("by-row")).
		To("rows")
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range strings.Split(topology.Describe(), "\n") {
		if strings.Contains(line, "Sink: by-row") {
			fmt.Println(strings.TrimSpace(line))
		}
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	in := enginetest.NewInput(d, "changes", serde.String, serde.String)
	in.Pipe("r1", "insert", enginetest.At(1))
	in.Pipe("", "truncate", enginetest.At(2))
	in.Pipe("r2", "insert", enginetest.At(3))
	for _, kv := range enginetest.NewOutput(d, d.InternalTopic("by-row-repartition"), serde.String, serde.String).ReadKeyValues() {
		fmt.Printf("%q %s\n", kv.Key, kv.Value)
	}
	// Output:
	// Sink: by-row-sink (topic: ${app}-by-row-repartition, partitioned by a function)
	// "r1" insert
	// "" truncate
	// "r2" insert
}

// A windowed count read through its table: the store's name, its serdes
// and the windows' size come with the table.
func ExampleQueryWindowedTable() {
	b := engine.NewBuilder()
	clicks := engine.NewStream(b, "clicks", serde.String, serde.String)
	perMinute := engine.WindowedCount(clicks.GroupByKey().WindowedBy(engine.TumblingWindows(time.Minute)),
		engine.Materialized("clicks-per-minute"))
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	in := enginetest.NewInput(d, "clicks", serde.String, serde.String)
	for _, s := range []int64{5, 30, 61, 90, 95} {
		in.Pipe("ann", "click", enginetest.At(s*1000))
	}

	st, err := engine.QueryWindowedTable(d, perMinute)
	if err != nil {
		fmt.Println(err)
		return
	}
	for w, err := range st.Fetch("ann", enginetest.At(0), enginetest.At(120_000)) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(w.Key.Window.Start.Sub(enginetest.Epoch), w.Value)
	}
	// A query by name that reads the windows as plain keys is refused.
	_, err = engine.QueryKeyValueStore(d, "clicks-per-minute", serde.String, serde.Int64)
	fmt.Println(errors.Is(err, engine.ErrStoreKind))
	// Output:
	// 0s 2
	// 1m0s 3
	// true
}
