package engine_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// joinTopology enriches orders (keyed by customer, values
// "<order>:<product>") with the customer's name (a stream-table left join)
// and the product's price (a join with a global table), pairs orders with
// payments of the same customer at most 5ms apart (a stream-stream join),
// joins customers with their credit limits (a table-table join), and order
// rows (whose value names their customer) with the customer (a foreign-key
// join across tables with different partition counts).
func joinTopology(orders, payments, customers, limits, products, rows, enriched, offers, paid, owners string) *engine.Topology {
	b := engine.NewBuilder()
	prices := engine.NewGlobalTable(b, products, serde.String, serde.Int64, engine.Materialized("prices"))
	cust := engine.NewTable(b, customers, serde.String, serde.String, engine.Materialized("customers"))
	lim := engine.NewTable(b, limits, serde.String, serde.Int64, engine.Materialized("limits"))
	orderStream := engine.NewStream(b, orders, serde.String, serde.String)
	engine.JoinStreams(orderStream, engine.NewStream(b, payments, serde.String, serde.String), engine.JoinTimeDifference(5*time.Millisecond).Grace(time.Hour),
		func(_ string, order, payment string) string { return order + "&" + payment }).To(paid)
	withName := engine.LeftJoin(orderStream, cust, func(_ string, order, name string, found bool) string {
		if !found {
			name = "?"
		}
		return order + "@" + name
	})
	engine.JoinGlobal(withName, prices, func(_ string, v string) string {
		_, product, _ := strings.Cut(strings.Split(v, "@")[0], ":")
		return product
	}, func(_ string, v string, price int64) string {
		return v + "$" + strconv.FormatInt(price, 10)
	}).To(enriched)
	engine.JoinForeignKey(engine.NewTable(b, rows, serde.String, serde.String, engine.Materialized("rows")), cust,
		func(_ string, customer string) string { return customer },
		func(_ string, customer string, name string) string { return customer + "=" + name }).ToStream().To(owners)
	engine.JoinTables(cust, lim, func(_ string, name string, limit int64) string {
		return name + ":" + strconv.FormatInt(limit, 10)
	}).ToStream().To(offers)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

type joinInput struct {
	topic string
	key   string
	value []byte // nil: a tombstone
	ms    int64
}

// Three instances with exactly-once give the join results this test works
// out from the input: the table-table and foreign-key joins' final rows,
// every enriched order and every pair of an order and a payment. The
// tables are loaded first, then the orders arrive.
func TestAppJoins(t *testing.T) {
	k := newKT(t)
	orders, payments, customers, limits, products, rows := k.topic("orders"), k.topic("payments"), k.topic("customers"), k.topic("limits"), k.topic("products"), k.topic("rows")
	enriched, offers, paid, owners := k.topic("enriched"), k.topic("offers"), k.topic("paid"), k.topic("owners")
	k.create(3, orders, payments, customers, limits, enriched, offers, paid, owners)
	k.create(2, products, rows)
	top := joinTopology(orders, payments, customers, limits, products, rows, enriched, offers, paid, owners)

	rng := rand.New(rand.NewPCG(11, 12))
	var tables, stream []joinInput
	ms := int64(0)
	for i := range 400 {
		ms++
		key := fmt.Sprintf("c%02d", rng.IntN(40))
		if rng.IntN(4) == 0 {
			row := fmt.Sprintf("r%02d", rng.IntN(30))
			if rng.IntN(8) == 0 {
				tables = append(tables, joinInput{rows, row, nil, ms})
			} else {
				tables = append(tables, joinInput{rows, row, []byte(key), ms})
			}
			continue
		}
		switch rng.IntN(10) {
		case 0:
			tables = append(tables, joinInput{customers, key, nil, ms})
		case 1, 2, 3, 4:
			tables = append(tables, joinInput{customers, key, fmt.Appendf(nil, "name%d", i), ms})
		default:
			v, _ := serde.Int64.Encode(int64(rng.IntN(1000)))
			tables = append(tables, joinInput{limits, key, v, ms})
		}
	}
	for i := range 20 {
		ms++
		v, _ := serde.Int64.Encode(int64(100 + i))
		tables = append(tables, joinInput{products, fmt.Sprintf("p%d", i), v, ms})
	}
	for i := range 300 {
		ms++
		stream = append(stream, joinInput{orders, fmt.Sprintf("c%02d", rng.IntN(45)), fmt.Appendf(nil, "o%d:p%d", i, rng.IntN(24)), ms})
		if rng.IntN(2) == 0 {
			stream = append(stream, joinInput{payments, fmt.Sprintf("c%02d", rng.IntN(45)), fmt.Appendf(nil, "pay%d", i), ms - int64(rng.IntN(8))})
		}
	}

	// The results, worked out here from the input rather than by the
	// engine: the tables are loaded before the orders arrive, and
	// nothing is late (a grace of an hour).
	customersAt, limitsAt, rowsAt := map[string]string{}, map[string]int64{}, map[string]string{}
	for _, in := range tables {
		switch in.topic {
		case customers:
			if in.value == nil {
				delete(customersAt, in.key)
			} else {
				customersAt[in.key] = string(in.value)
			}
		case limits:
			n, err := serde.Int64.Decode(in.value)
			if err != nil {
				t.Fatal(err)
			}
			limitsAt[in.key] = n
		case rows:
			if in.value == nil {
				delete(rowsAt, in.key)
			} else {
				rowsAt[in.key] = string(in.value)
			}
		}
	}
	wantOffers := map[string]string{} // customers ⋈ limits
	for c, name := range customersAt {
		if limit, ok := limitsAt[c]; ok {
			wantOffers[c] = name + ":" + strconv.FormatInt(limit, 10)
		}
	}
	wantOwners := map[string]string{} // rows ⋈ customers by the row's customer
	for row, c := range rowsAt {
		if name, ok := customersAt[c]; ok {
			wantOwners[row] = c + "=" + name
		}
	}
	var wantEnriched, wantPaid []string
	for _, o := range stream {
		if o.topic != orders {
			continue
		}
		name, ok := customersAt[o.key]
		if !ok {
			name = "?"
		}
		_, product, _ := strings.Cut(string(o.value), ":")
		if j, _ := strconv.Atoi(strings.TrimPrefix(product, "p")); j < 20 { // prices p0..p19
			wantEnriched = append(wantEnriched, fmt.Sprintf("%s=%s@%s$%d", o.key, o.value, name, 100+j))
		}
		for _, p := range stream {
			if p.topic == payments && p.key == o.key && p.ms >= o.ms-5 && p.ms <= o.ms+5 {
				wantPaid = append(wantPaid, fmt.Sprintf("%s=%s&%s", o.key, o.value, p.value))
			}
		}
	}
	slices.Sort(wantEnriched)
	slices.Sort(wantPaid)
	if len(wantOffers) == 0 || len(wantOwners) == 0 || len(wantEnriched) == 0 || len(wantPaid) == 0 {
		t.Fatalf("the input joins too little: %d offers, %d owners, %d enriched orders, %d paid", len(wantOffers), len(wantOwners), len(wantEnriched), len(wantPaid))
	}

	// Three instances on the broker.
	cfg := func(id string) engine.Config { return engine.Config{InstanceID: id, Guarantee: engine.ExactlyOnce} }
	apps := []*app{k.start(top, cfg("a")), k.start(top, cfg("b")), k.start(top, cfg("c"))}
	await.Until(t, 60*time.Second, "the three instances to share the tasks", func() bool {
		k.checkApps()
		for _, a := range apps {
			if a.State() != engine.AppRunning || len(a.Tasks()) == 0 {
				return false
			}
		}
		return true
	})
	produce := func(ins []joinInput) {
		t.Helper()
		var recs []*kgo.Record
		for _, in := range ins {
			recs = append(recs, &kgo.Record{Topic: in.topic, Key: []byte(in.key), Value: in.value, Timestamp: enginetest.At(in.ms)})
		}
		for _, r := range recs {
			n := int32(3)
			if r.Topic == products || r.Topic == rows {
				n = 2
			}
			r.Partition = kafkaPartition(r.Key, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(tables)
	gotOffers := readCommitted(t, k, offers, func(m map[string]string, _ []string) bool { return maps.Equal(m, wantOffers) })
	if !maps.Equal(gotOffers, wantOffers) {
		t.Fatalf("table-table join: got %v, want %v", gotOffers, wantOffers)
	}
	gotOwners := readCommitted(t, k, owners, func(m map[string]string, _ []string) bool { return maps.Equal(m, wantOwners) })
	if !maps.Equal(gotOwners, wantOwners) {
		t.Fatalf("foreign-key join: got %v, want %v", gotOwners, wantOwners)
	}
	// Every instance has every price before the orders come.
	for _, a := range apps {
		await.Until(t, 30*time.Second, "instance "+a.ID()+" to hold every price", func() bool {
			st, err := engine.QueryKeyValueStore(a.App, "prices", serde.String, serde.Int64)
			if err != nil {
				return false
			}
			n := 0
			for _, err := range st.All() {
				if err != nil {
					return false
				}
				n++
			}
			return n == 20
		})
	}
	produce(stream)
	var gotEnriched []string
	readCommitted(t, k, enriched, func(_ map[string]string, all []string) bool {
		gotEnriched = slices.Sorted(slices.Values(all))
		return len(all) >= len(wantEnriched)
	})
	if !slices.Equal(gotEnriched, wantEnriched) {
		t.Fatalf("stream-table join: got %d results %v, want %d %v", len(gotEnriched), gotEnriched, len(wantEnriched), wantEnriched)
	}
	var gotPaid []string
	readCommitted(t, k, paid, func(_ map[string]string, all []string) bool {
		gotPaid = slices.Sorted(slices.Values(all))
		return len(all) >= len(wantPaid)
	})
	if !slices.Equal(gotPaid, wantPaid) {
		t.Fatalf("stream-stream join: got %d results %v, want %d %v", len(gotPaid), gotPaid, len(wantPaid), wantPaid)
	}
	for _, a := range apps {
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// readCommitted reads a topic of string keys and values, read-committed,
// until done holds of its table (latest value per key, tombstones
// deleting) and its records ("key=value", tombstones "key=~"), and returns
// the table.
func readCommitted(t *testing.T, k *kt, topic string, done func(map[string]string, []string) bool) map[string]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	table := map[string]string{}
	var all []string
	await.NoError(t, 60*time.Second, "topic "+topic+" complete", func() error {
		if !done(table, all) {
			k.checkApps()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			fs := cl.PollFetches(ctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Value == nil {
					delete(table, string(r.Key))
					all = append(all, string(r.Key)+"=~")
					return
				}
				table[string(r.Key)] = string(r.Value)
				all = append(all, string(r.Key)+"="+string(r.Value))
			})
		}
		if !done(table, all) {
			return fmt.Errorf("%d records, table %v", len(all), table)
		}
		return nil
	})
	return table
}

// ResultHeaders chooses what a join result carries; without it, the
// triggering record's headers.
func TestJoinResultHeaders(t *testing.T) {
	for _, withOption := range []bool{false, true} {
		b := engine.NewBuilder()
		table := engine.NewTable(b, "customers", serde.String, serde.String)
		var opts []engine.Option
		if withOption {
			opts = append(opts, engine.ResultHeaders(func(hs []engine.Header) []engine.Header {
				return append(slices.Clone(hs), engine.Header{Key: "joined", Value: []byte("yes")})
			}))
		}
		engine.Join(engine.NewStream(b, "orders", serde.String, serde.String), table, func(_ string, o, c string) string { return o + "@" + c }, opts...).To("out")
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		d := enginetest.New(t, top)
		enginetest.NewInput(d, "customers", serde.String, serde.String).Pipe("c1", "Ann", enginetest.At(1))
		enginetest.NewInput(d, "orders", serde.String, serde.String).Pipe("c1", "o1", enginetest.At(2), engine.Header{Key: "trace", Value: []byte("t1")})
		recs := enginetest.NewOutput(d, "out", serde.String, serde.String).ReadRecords()
		if len(recs) != 1 {
			t.Fatalf("results %v", recs)
		}
		got := fmt.Sprint(recs[0].Headers)
		want := "[{trace [116 49]}]"
		if withOption {
			want = "[{trace [116 49]} {joined [121 101 115]}]"
		}
		if got != want {
			t.Errorf("option %v: headers %s, want %s", withOption, got, want)
		}
	}
	// Not an option of the other operations.
	b := engine.NewBuilder()
	engine.NewStream(b, "in", serde.String, serde.String).Filter(func(string, string) bool { return true }, engine.ResultHeaders(nil)).To("out")
	if _, err := b.Build(); err == nil {
		t.Error("ResultHeaders on a filter was accepted")
	}
}
