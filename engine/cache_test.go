package engine_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// cacheTopology has every kind of table processor that writes through the
// record cache: a stream count, a table source, a materialized filter and a
// re-grouped table aggregation with a subtractor, chained across repartitions.
func cacheTopology(t *testing.T) *engine.Topology {
	b := engine.NewBuilder()
	clicks := engine.NewStream(b, "clicks", serde.String, serde.Int64)
	counts := clicks.GroupByKey().Count(engine.Materialized("click-counts"))
	counts.ToStream().To("click-counts")

	users := engine.NewTable(b, "users", serde.String, serde.String, engine.Materialized("users"))
	active := users.Filter(func(_ string, city string) bool { return city != "nowhere" }, engine.Materialized("active-users"))
	perCity := engine.GroupTable(active, func(u, city string) (string, int64) { return city, 1 }).Count(engine.Materialized("users-per-city"))
	perCity.ToStream().To("users-per-city")
	sums := engine.GroupBy(clicks, func(_ string, v int64) string { return fmt.Sprint(v % 3) }).
		Reduce(func(a, v int64) int64 { return a + v }, engine.Materialized("click-sums"))
	sums.ToStream().To("click-sums")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

type cacheRun struct {
	outputs map[string]map[string]int64
	stores  map[string]map[string]int64
	users   map[string]string
}

func runWithCache(t *testing.T, top *engine.Topology, cacheBytes int64, seed uint64) cacheRun {
	d := enginetest.New(t, top, enginetest.CacheBytes(cacheBytes))
	rng := rand.New(rand.NewPCG(seed, 1))
	clicks := enginetest.NewInput(d, "clicks", serde.String, serde.Int64)
	users := enginetest.NewInput(d, "users", serde.String, serde.String)
	outs := map[string]*enginetest.Output[string, int64]{}
	for _, topic := range []string{"click-counts", "users-per-city", "click-sums"} {
		outs[topic] = enginetest.NewOutput(d, topic, serde.String, serde.Int64)
	}
	cities := []string{"oslo", "lima", "nowhere", "pune"}
	for i := range 2000 {
		ts := enginetest.At(int64(i))
		user := fmt.Sprintf("u%d", rng.IntN(20))
		switch rng.IntN(10) {
		case 0:
			users.Delete(user, ts)
		case 1, 2, 3:
			users.Pipe(user, cities[rng.IntN(len(cities))], ts)
		default:
			clicks.Pipe(user, int64(rng.IntN(100)), ts)
		}
		if rng.IntN(50) == 0 {
			d.Commit()
		}
	}
	d.Commit()
	run := cacheRun{outputs: map[string]map[string]int64{}, stores: map[string]map[string]int64{}}
	for topic, o := range outs {
		run.outputs[topic] = enginetest.ReadTable(o)
	}
	for _, s := range []string{"click-counts", "users-per-city", "click-sums"} {
		run.stores[s] = enginetest.StoreContents(d, s, serde.String, serde.Int64)
		// The changelog, read as a table, must equal the store.
		log := enginetest.ReadTable(enginetest.NewOutput(d, d.ChangelogTopic(s), serde.String, serde.Int64))
		if !maps.Equal(log, run.stores[s]) {
			t.Errorf("cache %d: changelog of %s = %v, store = %v", cacheBytes, s, log, run.stores[s])
		}
	}
	run.users = enginetest.StoreContents(d, "active-users", serde.String, serde.String)
	return run
}

// The record cache changes how many updates reach the stores and downstream,
// never the results.
func TestRecordCacheGivesSameResults(t *testing.T) {
	top := cacheTopology(t)
	for _, seed := range []uint64{1, 2, 3} {
		want := runWithCache(t, top, 0, seed)
		for _, size := range []int64{1, 300, 4096, 1 << 20} {
			got := runWithCache(t, top, size, seed)
			for topic, w := range want.outputs {
				if !maps.Equal(got.outputs[topic], w) {
					t.Errorf("seed %d cache %d: topic %s = %v, want %v", seed, size, topic, got.outputs[topic], w)
				}
			}
			for s, w := range want.stores {
				if !maps.Equal(got.stores[s], w) {
					t.Errorf("seed %d cache %d: store %s = %v, want %v", seed, size, s, got.stores[s], w)
				}
			}
			if !maps.Equal(got.users, want.users) {
				t.Errorf("seed %d cache %d: active users = %v, want %v", seed, size, got.users, want.users)
			}
		}
	}
}

// With a large cache, repeated updates of a key between commits reach the
// output once.
func TestRecordCacheCompactsUpdates(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "clicks", serde.String, serde.Int64).GroupByKey().Count().ToStream().To("counts")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top, enginetest.CacheBytes(1<<20))
	in := enginetest.NewInput(d, "clicks", serde.String, serde.Int64)
	out := enginetest.NewOutput(d, "counts", serde.String, serde.Int64)
	for i := range 5 {
		in.Pipe("a", 1, enginetest.At(int64(i)))
		in.Pipe("b", 1, enginetest.At(int64(i)))
	}
	if !out.Empty() {
		t.Fatalf("output before commit: %v", out.ReadKeyValues())
	}
	d.Commit()
	got := out.ReadRecords()
	if len(got) != 2 || got[0].Key != "a" || got[0].Value != 5 || got[1].Key != "b" || got[1].Value != 5 {
		t.Fatalf("after commit: %+v, want a=5 then b=5", got)
	}
	if got[0].Timestamp != enginetest.At(4) {
		t.Errorf("timestamp %v, want the latest input's %v", got[0].Timestamp, enginetest.At(4))
	}
}

// The record cache changes no join's results either: a foreign-key join and
// a table–table join, with caches that evict at once, soon or never and
// commits at random, end where the same input without a cache ends. A
// subscription answered from a right row still waiting in the cache was
// never taken back when that row's insert and delete cancelled out before a
// commit (no change went downstream): the join kept a result for a row that
// never was.
func TestRecordCacheJoinsGiveSameResults(t *testing.T) {
	b := engine.NewBuilder()
	rows := engine.NewTable(b, "rows", serde.String, serde.String)
	customers := engine.NewTable(b, "customers", serde.String, serde.String)
	limits := engine.NewTable(b, "limits", serde.String, serde.String)
	engine.JoinForeignKey(rows, customers, func(_, c string) string { return c }, func(_, c, name string) string { return c + "=" + name },
		engine.Materialized("owners")).ToStream().To("owners")
	engine.LeftJoinForeignKey(rows, customers, func(_, c string) string { return c }, func(_, c, name string, found bool) string {
		return fmt.Sprintf("%s=%s/%v", c, name, found)
	}, engine.Materialized("left-owners")).ToStream().To("left-owners")
	engine.JoinTables(customers, limits, func(_, name, limit string) string { return name + ":" + limit }).
		Filter(func(string, string) bool { return true }, engine.Materialized("offers")).ToStream().To("offers")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	run := func(cacheBytes int64, seed uint64) (outputs, stores map[string]map[string]string) {
		d := enginetest.New(t, top, enginetest.CacheBytes(cacheBytes))
		rng := rand.New(rand.NewPCG(seed, 2))
		ins := map[string]*enginetest.Input[string, string]{}
		for _, topic := range []string{"rows", "customers", "limits"} {
			ins[topic] = enginetest.NewInput(d, topic, serde.String, serde.String)
		}
		outs := map[string]*enginetest.Output[string, string]{}
		for _, topic := range []string{"owners", "left-owners", "offers"} {
			outs[topic] = enginetest.NewOutput(d, topic, serde.String, serde.String)
		}
		for i := range 1500 {
			ts := enginetest.At(int64(i))
			c := fmt.Sprintf("c%d", rng.IntN(6))
			switch n := rng.IntN(10); {
			case n < 4:
				row := fmt.Sprintf("r%d", rng.IntN(12))
				if rng.IntN(6) == 0 {
					ins["rows"].Delete(row, ts)
				} else {
					ins["rows"].Pipe(row, c, ts)
				}
			case n < 8:
				if rng.IntN(3) == 0 {
					ins["customers"].Delete(c, ts)
				} else {
					ins["customers"].Pipe(c, fmt.Sprintf("name%d", i), ts)
				}
			default:
				if rng.IntN(4) == 0 {
					ins["limits"].Delete(c, ts)
				} else {
					ins["limits"].Pipe(c, fmt.Sprint(i), ts)
				}
			}
			if rng.IntN(40) == 0 {
				d.Commit()
			}
		}
		d.Commit()
		outputs, stores = map[string]map[string]string{}, map[string]map[string]string{}
		for topic, o := range outs {
			outputs[topic] = enginetest.ReadTable(o)
			stores[topic] = enginetest.StoreContents(d, topic, serde.String, serde.String)
		}
		return outputs, stores
	}
	for seed := range uint64(40) {
		wantOut, wantStores := run(0, seed)
		for _, size := range []int64{1, 300, 500, 700, 1000, 1500, 2000, 4096, 1 << 20} {
			gotOut, gotStores := run(size, seed)
			for topic, w := range wantOut {
				if !maps.Equal(gotOut[topic], w) {
					t.Errorf("seed %d cache %d: topic %s = %v, want %v", seed, size, topic, gotOut[topic], w)
				}
				if !maps.Equal(gotStores[topic], wantStores[topic]) {
					t.Errorf("seed %d cache %d: store %s = %v, want %v", seed, size, topic, gotStores[topic], wantStores[topic])
				}
			}
		}
	}
}
