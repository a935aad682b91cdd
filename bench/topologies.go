package main

import (
	"fmt"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// The topologies, as Oxbow writes them. bench/kstreams has their Kafka
// Streams twins; the harness checks that both give the same output.
//
//   - stateless: keep the records whose value's byte 8 is even; the value
//     becomes its first 16 bytes;
//   - count: records per key (8-byte big-endian counts);
//   - window: records per key in 5-minute windows advancing by a minute
//     (grace 1 minute), keyed "<key>@<window start ms>";
//   - join: each record with the table's value of its key (inner join):
//     its first 8 bytes, then the table's value.
//
// The other window kinds, raced against Kafka Streams too, run when -only
// names them (the report's default run has the hopping window only):
//
//   - tumbling: records per key in 5-minute windows (grace 1 minute),
//     keyed "<key>@<window start ms>";
//   - sliding: records per key in sliding windows of a 5-minute time
//     difference (grace 1 minute), keyed "<key>@<window start ms>";
//   - session: records per key in sessions of a 5-minute inactivity gap
//     (grace 1 minute), keyed in the session-windowed serde's format (the
//     key, then the session's end and start), a session merged into a
//     later one removed with a tombstone.
//
// The curves (curves.go) add one, not raced against Kafka Streams:
//
//   - kv: the input read as a table into the store "kv" (string values),
//     which the restore curve fills through its changelog.
var topologyNames = []string{"stateless", "count", "window", "join"}

// windowKinds are the topologies of the other window kinds.
var windowKinds = []string{"tumbling", "sliding", "session"}

// windowAt flattens a windowed count's key to "<key>@<window start ms>".
func windowAt(w engine.Windowed[string], n int64) (string, int64) {
	return fmt.Sprintf("%s@%d", w.Key, w.Window.Start.UnixMilli()), n
}

func oxbowTopology(name, input, table, output string) (*engine.Topology, error) {
	b := engine.NewBuilder()
	if name == "kv" {
		engine.NewTable(b, input, serde.String, serde.String, engine.Named("kv"), engine.Materialized("kv"))
		return b.Build()
	}
	in := engine.NewStream(b, input, serde.String, serde.Bytes, engine.Named("input"))
	switch name {
	case "stateless":
		engine.MapValues(in.Filter(func(_ string, v []byte) bool { return len(v) > 8 && v[8]&1 == 0 }, engine.Named("even")),
			func(_ string, v []byte) []byte { return v[:min(16, len(v))] }, engine.Named("head")).To(output)
	case "count":
		in.GroupByKey().Count(engine.Named("counts"), engine.Materialized("counts")).ToStream().To(output)
	case "window":
		counts := engine.WindowedCount(in.GroupByKey().WindowedBy(engine.HoppingWindows(5*time.Minute, time.Minute).Grace(time.Minute)),
			engine.Named("window-counts"), engine.Materialized("window-counts"))
		engine.Map(counts.ToStream(), windowAt, engine.Named("flatten")).WithSerdes(serde.String, serde.Int64).To(output)
	case "tumbling":
		counts := engine.WindowedCount(in.GroupByKey().WindowedBy(engine.TumblingWindows(5*time.Minute).Grace(time.Minute)),
			engine.Named("tumbling-counts"), engine.Materialized("tumbling-counts"))
		engine.Map(counts.ToStream(), windowAt, engine.Named("flatten")).WithSerdes(serde.String, serde.Int64).To(output)
	case "sliding":
		counts := engine.WindowedCount(in.GroupByKey().WindowedBy(engine.SlidingWindows(5*time.Minute).Grace(time.Minute)),
			engine.Named("sliding-counts"), engine.Materialized("sliding-counts"))
		engine.Map(counts.ToStream(), windowAt, engine.Named("flatten")).WithSerdes(serde.String, serde.Int64).To(output)
	case "session":
		counts := engine.SessionCount(in.GroupByKey().SessionWindowedBy(engine.SessionWindows(5*time.Minute).Grace(time.Minute)),
			engine.Named("session-counts"), engine.Materialized("session-counts"))
		counts.ToStream().WithSerdes(engine.SessionWindowedSerde(serde.String), serde.Int64).To(output)
	case "join":
		t := engine.NewTable(b, table, serde.String, serde.String, engine.Named("table"), engine.Materialized("join-table"))
		engine.Join(in, t, func(_ string, v []byte, tv string) []byte {
			return append(append(make([]byte, 0, 8+len(tv)), v[:min(8, len(v))]...), tv...)
		}, engine.Named("joined")).WithSerdes(serde.String, serde.Bytes).To(output)
	default:
		return nil, fmt.Errorf("no topology %q (%v, %v, kv)", name, topologyNames, windowKinds)
	}
	return b.Build()
}
