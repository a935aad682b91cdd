package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// absentDeletesTopology writes five tables' streams: a source table, a
// filter of it, a value mapper of it, an inner join of it with a second
// table, and a suppression of it.
func absentDeletesTopology(t *testing.T, opts ...engine.Option) *engine.Topology {
	t.Helper()
	b := engine.NewBuilder(opts...)
	src := engine.NewTable(b, "in", serde.String, serde.Int64)
	src.ToStream().To("source")
	src.Filter(func(_ string, v int64) bool { return v > 0 }).ToStream().To("filter")
	engine.MapTableValues(src, func(_ string, v int64) int64 { return 10 * v }).ToStream().To("map")
	other := engine.NewTable(b, "other", serde.String, serde.Int64)
	engine.JoinTables(src, other, func(_ string, l, r int64) int64 { return l + r }).ToStream().To("join")
	src.SuppressUntil(time.Millisecond).ToStream().To("suppress")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// outputs reads every output topic of absentDeletesTopology: "key=value"
// per record, "key=~" for a tombstone.
func outputs(d *enginetest.Driver) map[string]string {
	got := map[string]string{}
	for _, topic := range []string{"source", "filter", "map", "join", "suppress"} {
		var recs []string
		for _, r := range enginetest.NewOutput(d, topic, serde.String, serde.Int64).ReadRecords() {
			if r.Tombstone {
				recs = append(recs, r.Key+"=~")
			} else {
				recs = append(recs, fmt.Sprintf("%s=%d", r.Key, r.Value))
			}
		}
		got[topic] = strings.Join(recs, " ")
	}
	return got
}

// By default a table forwards the delete of a key it does not have, as
// Kafka Streams does, so its stream has a tombstone of a key it never had;
// with OmitAbsentDeletes no table node forwards a change from nothing to
// nothing.
func TestOmitAbsentDeletes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []engine.Option
		want map[string]string
	}{
		{"default", nil, map[string]string{
			// The source (materialized for the join, without a record
			// cache) and the map forward the delete of x; the filter (made
			// before the join materialized its parent, so it sends no old
			// values) a delete for -1 too; the join the delete of k, which
			// the other table has; the suppression passes both deletes,
			// k's although it was added and deleted while it waited.
			"source":   "k=-1 k=~ x=~ z=5",
			"filter":   "k=~ k=~ x=~ z=5",
			"map":      "k=-10 k=~ x=~ z=50",
			"join":     "k=0 k=~",
			"suppress": "k=~ x=~",
		}},
		{"omit", []engine.Option{engine.OmitAbsentDeletes()}, map[string]string{
			"source":   "k=-1 k=~ z=5",
			"filter":   "z=5",
			"map":      "k=-10 k=~ z=50",
			"join":     "k=0 k=~",
			"suppress": "",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := enginetest.New(t, absentDeletesTopology(t, tc.opts...))
			enginetest.NewInput(d, "other", serde.String, serde.Int64).Pipe("k", 1, enginetest.At(1))
			in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
			in.Pipe("k", -1, enginetest.At(2))
			in.Delete("k", enginetest.At(2))
			in.Delete("x", enginetest.At(2))
			in.Pipe("z", 5, enginetest.At(10)) // lets the suppression's waiting updates go
			got := outputs(d)
			for topic, want := range tc.want {
				if got[topic] != want {
					t.Errorf("%s: got %q, want %q", topic, got[topic], want)
				}
			}
		})
	}
}

// NewBuilder takes only builder options.
func TestNewBuilderOptions(t *testing.T) {
	b := engine.NewBuilder(engine.Materialized("s"))
	engine.NewStream(b, "in", serde.String, serde.String).To("out")
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "NewBuilder does not use the option(s) Materialized") {
		t.Errorf("Build: %v, want NewBuilder's error about Materialized", err)
	}
}
