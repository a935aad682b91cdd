package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// The per-record cost of the engine's own work, without Kafka: one task of
// the stateless and the count benchmark topologies processing records that
// are already in memory, its output discarded. BenchmarkTaskBaseline is the
// floor: the same records copied into output records, as a passthrough
// does. BenchmarkTaskStatelessUnfused is the stateless topology without
// fusion. The count keeps its state in memory here (its pebble cost is
// measured by the state package's benchmarks and BenchmarkCount).

// discard is a collector that drops what it is sent.
type discard struct{ n int }

func (d *discard) Send(topo.Output) error { d.n++; return nil }

func taskInputs(n int) []topo.Input {
	in := make([]topo.Input, n)
	for i := range in {
		in[i] = topo.Input{Topic: "in", Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "k%06d", i%benchKeys), Value: benchValue(i), Timestamp: int64(i)}
	}
	return in
}

func benchTask(b *testing.B, t *topo.Topology) {
	b.Helper()
	sub := t.Subs[0]
	out := &discard{}
	task, err := topo.NewTask(topo.TaskConfig{
		Topology:  t,
		Sub:       sub,
		TopicName: func(r topo.TopicRef) string { return r.Name },
		OpenStore: func(spec *topo.StoreSpec, _ topo.TaskID) (topo.KVStore, error) {
			return topo.NewMemStore(spec.Name), nil
		},
		Collector:  out,
		Now:        time.Now,
		CacheBytes: 10 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer task.Close()
	ins := taskInputs(1 << 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := task.Process(ins[i&(len(ins)-1)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := task.Flush(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkTaskBaseline(b *testing.B) {
	ins := taskInputs(1 << 16)
	out := &discard{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		in := ins[i&(len(ins)-1)]
		_ = out.Send(topo.Output{Topic: "out", Partition: topo.AnyPartition, Key: in.Key, Value: in.Value, Timestamp: in.Timestamp})
	}
}

func BenchmarkTaskStateless(b *testing.B) {
	benchTask(b, topo.Unwrap(statelessTopology("in", "out")))
}

// BenchmarkTaskStatelessUnfused is the stateless topology on the generic
// path, each node a processor with boxed records (see the topo package's
// doc on fusion).
func BenchmarkTaskStatelessUnfused(b *testing.B) {
	benchTask(b, topo.Unwrap(engine.Unfused(statelessTopology("in", "out"))))
}

func BenchmarkTaskCount(b *testing.B) {
	benchTask(b, topo.Unwrap(countTopology("in", "out")))
}
