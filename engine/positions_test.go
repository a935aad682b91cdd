package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// twoHops counts words through a repartition (store "counts"), and sums
// the counts to one key through a second repartition (store "total"), so
// that "total" derives from the input through two repartition topics and
// both sub-topologies of the first. Words "skip" are dropped before the
// first repartition: their positions reach the stores with no record.
func twoHops(in string) *engine.Topology {
	b := engine.NewBuilder()
	words := engine.NewStream(b, in, serde.String, serde.String).Filter(func(_, w string) bool { return w != "skip" })
	counts := engine.GroupBy(words, func(_, w string) string { return w }, engine.Named("by-word")).Count(engine.Materialized("counts"))
	engine.AggregateTable(engine.GroupTable(counts, func(_ string, n int64) (string, int64) { return "all", n }, engine.Named("to-total")),
		func() int64 { return 0 },
		func(_ string, n, sum int64) int64 { return sum + n },
		func(_ string, n, sum int64) int64 { return sum - n },
		engine.Materialized("total"))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// Each record written to the input is reflected in both stores, behind one
// and two repartition topics, as soon as the store's position says so, on
// the instance that holds the key: a read-your-writes through
// repartitions, checked against counts kept here.
func TestStorePositionFollowsRepartitions(t *testing.T) {
	for _, g := range guarantees {
		t.Run(g.name, func(t *testing.T) {
			k := newKT(t)
			in := k.topic("words")
			k.create(3, in)
			top := twoHops(in)
			cfg := engine.Config{Guarantee: g.g}
			a := k.start(top, withID(cfg, "a"))
			b := k.start(top, withID(cfg, "b"))
			await.Until(t, 60*time.Second, "both instances to have tasks", func() bool {
				k.checkApps()
				return len(a.Tasks()) > 0 && len(b.Tasks()) > 0
			})
			apps := map[string]*app{"a": a, "b": b}
			rng := rand.New(rand.NewPCG(3, 4))
			vocabulary := []string{"ant", "bee", "cat", "skip"}
			want, total := map[string]int64{}, int64(0)
			for i := range 40 {
				w := vocabulary[rng.IntN(len(vocabulary))]
				rec := &kgo.Record{Key: fmt.Appendf(nil, "user-%d", rng.IntN(9)), Value: []byte(w), Timestamp: enginetest.At(int64(i))}
				k.produce(in, rec) // which sets its partition and offset
				if w != "skip" {
					want[w]++
					total++
				}
				check := func(store, key string, wantV int64) {
					t.Helper()
					owner, _, err := engine.KeyOwner(a.App, store, key, serde.String)
					if err != nil {
						t.Fatal(err)
					}
					host := apps[owner.ID]
					var last engine.StorePosition
					defer func() {
						if t.Failed() {
							t.Logf("the store's last position: %+v", last)
						}
					}()
					await.Until(t, 30*time.Second, fmt.Sprintf("store %s on %s to reflect %s[%d]@%d", store, owner.ID, in, rec.Partition, rec.Offset), func() bool {
						k.checkApps()
						pos, err := host.StorePosition(store)
						if err != nil {
							t.Fatal(err)
						}
						last = pos
						return pos.Offsets[in][rec.Partition] > rec.Offset
					})
					s, err := engine.QueryKeyValueStore(host.App, store, serde.String, serde.Int64)
					if err != nil {
						t.Fatal(err)
					}
					v, _, err := s.Get(key)
					if err != nil {
						t.Fatal(err)
					}
					if v != wantV {
						t.Fatalf("record %d (%q): store %s says %s=%d once its position passed the record, want %d", i, w, store, key, v, wantV)
					}
				}
				if w != "skip" {
					check("counts", w, want[w])
				} else {
					check("counts", "ant", want["ant"])
				}
				check("total", "all", total)
			}
			// A new instance in their place knows, from the committed
			// offsets' metadata, what the stores reflect, with no new record.
			last := map[int32]int64{}
			for p := range int32(3) {
				last[p] = k.end(in, p)
			}
			for _, x := range []*app{a, b} {
				if err := x.stop(); err != nil {
					t.Fatal(err)
				}
			}
			c := k.start(top, withID(cfg, "c"))
			await.Until(t, 60*time.Second, "the new instance to know what total reflects", func() bool {
				k.checkApps()
				pos, err := c.StorePosition("total")
				if errors.Is(err, engine.ErrNotReady) {
					return false
				}
				if err != nil {
					t.Fatal(err)
				}
				for p, end := range last {
					if pos.Offsets[in][p] < end {
						return false
					}
				}
				return true
			})
			for _, x := range []*app{c} {
				pos, err := x.StorePosition("total")
				if err != nil {
					t.Fatal(err)
				}
				if len(pos.Inputs) != 1 || pos.Inputs[0] != in || len(pos.Derived) != 1 {
					t.Errorf("instance %s: store total derives from %v (through a repartition: %v), want [%s] both", x.ID(), pos.Inputs, pos.Derived, in)
				}
			}
		})
	}
}

// end is a partition's end offset.
func (k *kt) end(topic string, p int32) int64 {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		k.t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, p)
	return o.Offset
}

func withID(cfg engine.Config, id string) engine.Config {
	cfg.InstanceID = id
	return cfg
}

// A global table's store reflects every partition of its topic: its
// position says how far, from the bootstrap on (a new instance knows it
// before any new record).
func TestStorePositionOfAGlobalTable(t *testing.T) {
	k := newKT(t)
	in := k.topic("prices")
	k.create(2, in)
	b := engine.NewBuilder()
	engine.NewGlobalTable(b, in, serde.String, serde.Int64, engine.Materialized("prices"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{InstanceID: "a"})
	for i := range int64(6) {
		v, _ := serde.Int64.Encode(i)
		key := fmt.Sprintf("k%d", i%3)
		rec := &kgo.Record{Key: []byte(key), Value: v}
		k.produce(in, rec)
		await.Until(t, 30*time.Second, "the global store to reflect the record", func() bool {
			k.checkApps()
			pos, err := a.StorePosition("prices")
			if errors.Is(err, engine.ErrNotReady) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			return pos.Offsets[in][rec.Partition] > rec.Offset
		})
		s, err := engine.QueryKeyValueStore(a.App, "prices", serde.String, serde.Int64)
		if err != nil {
			t.Fatal(err)
		}
		if got, _, err := s.Get(key); err != nil || got != i {
			t.Fatalf("record %d: the store says %d (%v) once its position passed it", i, got, err)
		}
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	c := k.start(top, engine.Config{InstanceID: "c"})
	await.Until(t, 60*time.Second, "a new instance to know the global store's position", func() bool {
		k.checkApps()
		pos, err := c.StorePosition("prices")
		return err == nil && pos.Offsets[in][0] == k.end(in, 0) && pos.Offsets[in][1] == k.end(in, 1)
	})
}

// A foreign-key join's result goes out and back: the left table's record
// to the right side (the subscription) and the joined value back (the
// response). Its store reflects a left record once the round trip is
// done, and a right record once every left record it joins came back.
func TestStorePositionThroughAForeignKeyJoin(t *testing.T) {
	k := newKT(t)
	orders, products := k.topic("orders"), k.topic("products")
	k.create(3, orders, products)
	b := engine.NewBuilder()
	l := engine.NewTable(b, orders, serde.String, serde.String)  // order -> product
	r := engine.NewTable(b, products, serde.String, serde.Int64) // product -> price
	engine.JoinForeignKey(l, r, func(_ string, product string) string { return product },
		func(_ string, product string, price int64) string { return fmt.Sprintf("%s@%d", product, price) },
		engine.Named("priced"), engine.Materialized("priced"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{InstanceID: "a"})
	b2 := k.start(top, engine.Config{InstanceID: "b"})
	await.Until(t, 60*time.Second, "both instances to have tasks", func() bool {
		k.checkApps()
		return len(a.Tasks()) > 0 && len(b2.Tasks()) > 0
	})
	apps := map[string]*app{"a": a, "b": b2}
	put := func(topic, key string, value []byte) *kgo.Record {
		t.Helper()
		rec := &kgo.Record{Key: []byte(key), Value: value}
		k.produce(topic, rec)
		return rec
	}
	// read waits for the owner of the order's result to reflect rec, then
	// reads the result.
	read := func(order string, rec *kgo.Record) string {
		t.Helper()
		owner, _, err := engine.KeyOwner(a.App, "priced", order, serde.String)
		if err != nil {
			t.Fatal(err)
		}
		host := apps[owner.ID]
		await.Until(t, 30*time.Second, fmt.Sprintf("priced to reflect %s[%d]@%d", rec.Topic, rec.Partition, rec.Offset), func() bool {
			k.checkApps()
			pos, err := host.StorePosition("priced")
			if errors.Is(err, engine.ErrNotReady) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			return pos.Offsets[rec.Topic][rec.Partition] > rec.Offset
		})
		s, err := engine.QueryKeyValueStore(host.App, "priced", serde.String, serde.String)
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := s.Get(order)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	price := func(p int64) []byte { b, _ := serde.Int64.Encode(p); return b }
	put(products, "shoe", price(10))
	put(products, "hat", price(5))
	for i := range 12 {
		order := fmt.Sprintf("o%d", i%4)
		product := []string{"shoe", "hat"}[i%2]
		rec := put(orders, order, []byte(product))
		p := map[string]int64{"shoe": 10, "hat": 5}[product]
		if i >= 6 && product == "shoe" {
			p = 20
		}
		if i == 6 {
			// A new price: reflected in the orders of the shoe once the
			// price's position is.
			prec := put(products, "shoe", price(20))
			if got := read("o0", prec); got != "shoe@10" && got != "shoe@20" {
				t.Fatalf("o0 after the price change: %q", got)
			}
		}
		if got, want := read(order, rec), fmt.Sprintf("%s@%d", product, p); got != want {
			t.Fatalf("order %d (%s: %s): the result says %q once its position passed the order, want %q", i, order, product, got, want)
		}
	}
	for _, x := range []*app{a, b2} {
		pos, err := x.StorePosition("priced")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pos.Inputs, []string{orders, products}) && !slices.Equal(pos.Inputs, []string{products, orders}) {
			t.Errorf("instance %s: priced derives from %v", x.ID(), pos.Inputs)
		}
	}
}

// What the tasks skipped stays counted when they are closed and opened
// again (a rebalance, an aborted transaction): a record skipped before the
// last commit is not processed again, so its count must not go with the
// task.
func TestSkippedSurvivesReopenedTasks(t *testing.T) {
	k := newKT(t)
	in := k.topic("words")
	k.create(1, in)
	a := k.start(twoHops(in), engine.Config{Guarantee: engine.ExactlyOnce})
	produce := func(value []byte) *kgo.Record {
		t.Helper()
		rec := &kgo.Record{Key: []byte("k"), Value: value}
		k.produce(in, rec)
		return rec
	}
	committed := func(rec *kgo.Record) {
		t.Helper()
		await.Until(t, 30*time.Second, "the record to be committed", func() bool {
			k.checkApps()
			pos, err := a.StorePosition("counts")
			return err == nil && pos.Offsets[in][0] > rec.Offset
		})
	}
	produce([]byte("ant"))
	committed(produce(nil)) // a tombstone: GroupBy skips it
	before := a.Skipped()
	if len(before) == 0 {
		t.Fatal("the tombstone was not counted as skipped")
	}
	engine.RevokeNow(a.App)
	committed(produce([]byte("bee")))
	if after := a.Skipped(); !maps.Equal(after, before) {
		t.Errorf("skipped %v after the tasks were reopened, want %v as before", after, before)
	}
}

// An input written in transactions, read to its end: the group's
// committed offset is the partition's end, past the last transaction's
// commit marker, as a Kafka Streams application's is (it commits its
// consumer's position) — not one record short, which a lag measured on
// the committed offsets would show for ever. Also when the records come
// in one transaction after the other while the instance reads them.
func TestCommittedPastTheLastMarker(t *testing.T) {
	for _, g := range guarantees {
		t.Run(g.name, func(t *testing.T) {
			k := newKT(t)
			in, out := k.topic("in"), k.topic("out")
			k.create(1, in, out)
			top := passthrough(t, in, out)
			a := k.start(top, withID(engine.Config{Guarantee: g.g}, "a"))
			p, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.TransactionalID(k.prefix+"-producer"), kgo.DefaultProduceTopic(in))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			for txn := range 20 {
				if err := p.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					p.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%d-%d", txn, i)}, nil)
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
			}
			// 20 transactions of 3 records and a marker (the last written
			// a moment after EndTransaction returns).
			const end = 20 * 4
			await.Until(t, 30*time.Second, "the last marker", func() bool { return k.end(in, 0) == end })
			await.Until(t, 60*time.Second, "the committed offset at the input's end", func() bool {
				k.checkApps()
				return k.committed(a.Group(), in) == end
			})
		})
	}
}
