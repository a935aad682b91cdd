package engine_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// BenchmarkTaskWindowPebble is the bench harness's window topology (a
// hopping count, 5-minute windows advancing by a minute, grace a minute)
// on one task with pebble state, without Kafka: each iteration a record of
// key i mod keys, event times rising over half an hour for 2M records as
// the harness's input; a commit (cache flush, state commit) every 10,000
// records. Run with -benchtime=Nx (8M records are two hours of event
// time); OXBOW_BENCH_KEYS sets the keys (default 100,000),
// OXBOW_BENCH_PLAIN=1 lays the store out plainly rather than in time
// segments (state.Layout), to compare.
func BenchmarkTaskWindowPebble(b *testing.B) {
	keys := 100_000
	if s := os.Getenv("OXBOW_BENCH_KEYS"); s != "" {
		keys, _ = strconv.Atoi(s)
	}
	bld := engine.NewBuilder()
	in := engine.NewStream(bld, "in", serde.String, serde.Bytes, engine.Named("input"))
	counts := engine.WindowedCount(in.GroupByKey().WindowedBy(engine.HoppingWindows(5*time.Minute, time.Minute).Grace(time.Minute)),
		engine.Named("window-counts"), engine.Materialized("window-counts"))
	engine.Map(counts.ToStream(), func(w engine.Windowed[string], n int64) (string, int64) {
		return fmt.Sprintf("%s@%d", w.Key, w.Window.Start.UnixMilli()), n
	}, engine.Named("flatten")).WithSerdes(serde.String, serde.Int64).To("out")
	top, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	t := topo.Unwrap(top)
	mt, _ := strconv.Atoi(os.Getenv("OXBOW_BENCH_MEMTABLE_MB"))
	cs, _ := strconv.Atoi(os.Getenv("OXBOW_BENCH_CACHE_MB"))
	db, err := state.Open(b.TempDir(), state.Options{MemTableSize: uint64(mt) << 20, CacheSize: int64(cs) << 20,
		Layout: func(store string) state.Layout {
			l := state.LayoutOf(t.Stores[store])
			if os.Getenv("OXBOW_BENCH_PLAIN") != "" {
				l = state.Layout{}
			}
			return l
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ntasks := 1
	if s := os.Getenv("OXBOW_BENCH_TASKS"); s != "" {
		ntasks, _ = strconv.Atoi(s)
	}
	out := &discard{}
	sts := make([]*state.Task, ntasks)
	tasks := make([]*topo.Task, ntasks)
	for p := range ntasks {
		sts[p] = db.Task()
		tasks[p], err = topo.NewTask(topo.TaskConfig{
			Topology:   t,
			Sub:        t.Subs[0],
			ID:         topo.TaskID{Sub: 0, Partition: int32(p)},
			TopicName:  func(r topo.TopicRef) string { return r.Name },
			OpenStore:  sts[p].OpenStore,
			Collector:  out,
			Now:        time.Now,
			CacheBytes: 10 << 20 / int64(ntasks),
		})
		if err != nil {
			b.Fatal(err)
		}
		defer tasks[p].Close()
	}
	commit := func() {
		for p := range ntasks {
			if err := tasks[p].Flush(); err != nil {
				b.Fatal(err)
			}
			if err := sts[p].Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	base := time.Now().Add(-30 * time.Minute).UnixMilli()
	step := float64(30*time.Minute/time.Millisecond) / 2e6
	value := make([]byte, 100)
	key := make([]byte, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % keys
		key = fmt.Appendf(key[:0], "k%08d", k)
		p := int(uint32(k)*2654435761>>7) % ntasks
		in := topo.Input{Topic: "in", Partition: int32(p), Offset: int64(i), Key: key, Value: value, Timestamp: base + int64(float64(i)*step)}
		if err := tasks[p].Process(in); err != nil {
			b.Fatal(err)
		}
		if (i+1)%25_000 == 0 {
			commit()
		}
	}
	commit()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if os.Getenv("OXBOW_BENCH_PEBBLE") != "" {
		fmt.Fprintln(os.Stderr, db.PebbleMetrics())
	}
	b.ReportMetric(float64(out.n)/float64(b.N), "outputs/record")
}
