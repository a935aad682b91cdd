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
