package engine_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Helpers of this file are prefixed with "bt" so that they cannot collide
// with the helpers of the other test files of package engine_test.

func btSum(a, v int64) int64           { return a + v }
func btDiff(a, v int64) int64          { return a - v }
func btTrue(string, int64) bool        { return true }
func btZero() int64                    { return 0 }
func btAdd(_ string, v, a int64) int64 { return a + v }
func btSub(_ string, v, a int64) int64 { return a - v }
func btIdent(k string, v int64) string { return k }
func btPair(k string, v int64) (string, int64) {
	return k, v
}

// btBuildErr builds and returns the error, failing the test if there is none.
func btBuildErr(t *testing.T, b *engine.Builder) error {
	t.Helper()
	top, err := b.Build()
	if err == nil {
		t.Fatalf("Build succeeded, want an error; the topology is:\n%s", top.Describe())
	}
	if top != nil {
		t.Errorf("Build returned a topology along with the error %v", err)
	}
	return err
}

// btLines splits a joined error into its problems, one a line.
func btLines(err error) []string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// btLineWith returns the problem line that contains every one of want.
func btLineWith(err error, want ...string) (string, bool) {
next:
	for _, l := range btLines(err) {
		for _, w := range want {
			if !strings.Contains(l, w) {
				continue next
			}
		}
		return l, true
	}
	return "", false
}

func TestBuildErrors(t *testing.T) {
	type problem []string // substrings that must all be on one line of the error
	tests := []struct {
		name  string
		build func(b *engine.Builder)
		want  []problem
	}{
		{
			name: "duplicate node names",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.Int64)
				s.Filter(btTrue, engine.Named("x")).To("out1")
				s.FilterNot(btTrue, engine.Named("x")).To("out2")
			},
			want: []problem{{`node "x"`, "the name is used by another node", "engine.Named"}},
		},
		{
			name: "duplicate names across kinds: a source and a processor",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.Int64, engine.Named("x"))
				s.Peek(func(string, int64) {}, engine.Named("x")).To("out")
			},
			want: []problem{{`node "x"`, "the name is used by another node"}},
		},
		{
			name: "nil key serde at a source",
			build: func(b *engine.Builder) {
				engine.NewStream[string](b, "in", nil, serde.Int64, engine.Named("src")).Foreach(func(string, int64) {})
			},
			want: []problem{{`node "src"`, "the key serde is nil"}},
		},
		{
			name: "nil value serde at a source",
			build: func(b *engine.Builder) {
				engine.NewStream[string, int64](b, "in", serde.String, nil, engine.Named("src")).Foreach(func(string, int64) {})
			},
			want: []problem{{`node "src"`, "the value serde is nil"}},
		},
		{
			name: "nil serdes at a table source, a global table and the sink that follows",
			build: func(b *engine.Builder) {
				engine.NewTable[string, int64](b, "tin", nil, nil, engine.Named("tsrc")).ToStream().To("out", engine.Named("snk"))
				engine.NewGlobalTable[string, int64](b, "gin", serde.String, nil, engine.Named("gsrc"))
			},
			want: []problem{
				{`node "tsrc"`, "the key and value serdes are nil"},
				{`node "tsrc-table"`, "the key and value serdes are nil"},
				{`node "snk"`, "the key and value serdes are nil"},
				{`node "gsrc"`, "the value serde is nil"},
			},
		},
		{
			name: "nil serde reaches a sink",
			build: func(b *engine.Builder) {
				engine.NewStream[string, int64](b, "in", serde.String, nil, engine.Named("src")).To("out", engine.Named("snk"))
			},
			want: []problem{{`node "src"`, "the value serde is nil"}, {`node "snk"`, "the value serde is nil"}},
		},
		{
			name: "invalid source topic names",
			build: func(b *engine.Builder) {
				engine.NewStream(b, "bad topic", serde.String, serde.Int64, engine.Named("s1")).To("out1")
				engine.NewStream(b, "", serde.String, serde.Int64, engine.Named("s2")).To("out2")
				engine.NewStream(b, "..", serde.String, serde.Int64, engine.Named("s3")).To("out3")
				engine.NewStream(b, strings.Repeat("t", 201), serde.String, serde.Int64, engine.Named("s4")).To("out4")
			},
			want: []problem{
				{`node "s1"`, `' '`, "topic names allow only letters, digits, '.', '_' and '-'"},
				{`node "s2"`, "the topic name is empty"},
				{`node "s3"`, "not a legal topic name"},
				{`node "s4"`, "201 characters", "at most 200"},
			},
		},
		{
			name: "invalid sink topic name",
			build: func(b *engine.Builder) {
				engine.NewStream(b, "in", serde.String, serde.Int64).To("a/b", engine.Named("snk"))
			},
			want: []problem{{`node "snk"`, `'/'`, "topic names allow only"}},
		},
		{
			name: "invalid internal topic name from Named on Repartition",
			build: func(b *engine.Builder) {
				engine.NewStream(b, "in", serde.String, serde.Int64).Repartition(engine.Named("re part")).To("out")
			},
			want: []problem{
				{`node "re part-sink"`, "topic names allow only"},
				{`node "re part-source"`, "topic names allow only"},
			},
		},
		{
			name: "invalid store names",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.Int64)
				s.GroupByKey().Count(engine.Materialized("bad:store"))
				engine.Process(s, btNopProcessor, engine.WithStores(engine.NewKeyValueStore("a*b", serde.String, serde.String)))
				engine.Process(s, btNopProcessor, engine.WithStores(engine.NewKeyValueStore("", serde.String, serde.String)))
			},
			want: []problem{
				{`store "bad:store"`, `':'`, "allow only"},
				{`store "a*b"`, `'*'`, "allow only"},
				{`store ""`, "the name is empty"},
			},
		},
		{
			name: "a store declared twice",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.Int64)
				s.GroupByKey().Count(engine.Materialized("st"))
				engine.Process(s, btNopProcessor, engine.WithStores(engine.NewKeyValueStore("st", serde.String, serde.String)))
			},
			want: []problem{{`store "st"`, "declared twice", "unique"}},
		},
		{
			name: "a topic read by two sources",
			build: func(b *engine.Builder) {
				engine.NewStream(b, "in", serde.String, serde.Int64, engine.Named("first")).To("out1")
				engine.NewTable(b, "in", serde.String, serde.Int64, engine.Named("second"))
			},
			want: []problem{{`node "second"`, "topic in is already read by another source", "read it once and share the stream"}},
		},
		{
			name: "a sink writes a topic its own sub-topology reads",
			build: func(b *engine.Builder) {
				engine.NewStream(b, "in", serde.String, serde.Int64).Filter(btTrue).To("in", engine.Named("loop"))
			},
			want: []problem{{`node "loop"`, "writes topic in, which leads back to it", "loop forever"}},
		},
		{
			name: "an option the operation does not use",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.Int64, engine.Partitions(2), engine.Named("src"))
				s.Filter(btTrue, engine.Partitions(3), engine.Named("f")).
					Peek(func(string, int64) {}, engine.Materialized("m"), engine.Named("p")).
					To("out", engine.InMemory(), engine.Named("snk"))
				engine.MapValues(s, btIdent, engine.ValueSerde(serde.String), engine.Named("mv")).To("out2")
				engine.NewGlobalTable(b, "g", serde.String, serde.Int64, engine.WithoutChangelog(), engine.Named("gt"))
			},
			want: []problem{
				{`node "src"`, "NewStream does not use the option(s) Partitions"},
				{`node "f"`, "does not use the option(s) Partitions"},
				{`node "p"`, "does not use the option(s) Materialized"},
				{`node "snk"`, "To does not use the option(s) InMemory"},
				{`node "mv"`, "does not use the option(s) ValueSerde"},
				{`node "gt"`, "NewGlobalTable does not use the option(s) WithoutChangelog"},
			},
		},
		{
			name: "InMemory on a table operation without a store",
			build: func(b *engine.Builder) {
				engine.NewTable(b, "in", serde.String, serde.Int64).Filter(btTrue, engine.InMemory(), engine.Named("tf"))
			},
			want: []problem{{`node "tf"`, "InMemory and WithoutChangelog need a store", "add Materialized"}},
		},
		{
			name: "a negative partition count",
			build: func(b *engine.Builder) {
				engine.NewStream(b, "in", serde.String, serde.Int64).Repartition(engine.Partitions(-1), engine.Named("rp")).To("out")
			},
			want: []problem{{`node "rp-sink"`, "Partitions(-1) must be positive"}},
		},
		{
			name: "a ValueSerde of the wrong type",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.Int64)
				s.GroupByKey().Count(engine.ValueSerde(serde.String), engine.Named("cnt"))
				engine.Aggregate(s.GroupByKey(), func() float64 { return 0 }, func(string, int64, float64) float64 { return 0 },
					engine.ValueSerde(serde.Int64), engine.Named("agg"))
				engine.NewTable(b, "t", serde.String, serde.Int64).Filter(btTrue, engine.Materialized("tf-store"), engine.ValueSerde(serde.Bytes), engine.Named("tf"))
			},
			want: []problem{
				{`node "cnt"`, "ValueSerde", "but the values are int64"},
				{`node "agg"`, "ValueSerde", "but the values are float64"},
				{`node "tf"`, "ValueSerde", "but the values are int64"},
			},
		},
		{
			name: "Merge of streams from two builders",
			build: func(b *engine.Builder) {
				other := engine.NewBuilder()
				a := engine.NewStream(b, "a", serde.String, serde.Int64)
				c := engine.NewStream(other, "c", serde.String, serde.Int64)
				a.Merge(c, engine.Named("m")).To("out")
			},
			want: []problem{{`node "m"`, "different builders"}},
		},
		{
			name: "Cogroup of streams from two builders",
			build: func(b *engine.Builder) {
				other := engine.NewBuilder()
				a := engine.NewStream(b, "a", serde.String, serde.Int64).GroupByKey()
				c := engine.NewStream(other, "c", serde.String, serde.Int64).GroupByKey()
				co := engine.Cogroup(a, btAdd)
				engine.CogroupWith(co, c, btAdd).Aggregate(btZero, engine.Named("co"))
			},
			want: []problem{{`node "co-agg-1"`, "different builders"}},
		},
		{
			name: "a Split branch after the default branch",
			build: func(b *engine.Builder) {
				sp := engine.NewStream(b, "in", serde.String, serde.Int64).Split()
				sp.Branch("big", func(_ string, v int64) bool { return v > 10 }).To("big")
				sp.Default("rest").To("rest")
				sp.Branch("late", btTrue).To("late")
				sp.Default("rest2").To("rest2")
			},
			want: []problem{
				{`node "late"`, `branch "late" comes after the default branch`},
				{`node "rest2"`, `branch "rest2" comes after the default branch`},
			},
		},
		{
			name: "a versioned table without history; join grace without a versioned table, or longer than its history",
			build: func(b *engine.Builder) {
				s := engine.NewStream(b, "in", serde.String, serde.String)
				join := func(_ string, v, tv string) string { return v + tv }
				zero := engine.NewTable(b, "t0", serde.String, serde.String, engine.Named("zero"), engine.Versioned(0))
				engine.Join(s, zero, join).To("out0")
				plain := engine.NewTable(b, "t1", serde.String, serde.String, engine.Named("plain"))
				engine.Join(s, plain, join, engine.Named("j1"), engine.JoinGrace(time.Second)).To("out1")
				short := engine.NewTable(b, "t2", serde.String, serde.String, engine.Named("short"), engine.Versioned(time.Second))
				engine.Join(s, short, join, engine.Named("j2"), engine.JoinGrace(time.Minute)).To("out2")
				engine.Join(s, short, join, engine.Named("j3"), engine.JoinGrace(-time.Second)).To("out3")
				engine.JoinTables(plain, short, join, engine.Named("j4"), engine.Versioned(time.Second)).ToStream().To("out4")
			},
			want: []problem{
				{`node "zero-table"`, "Versioned history 0s must be at least a millisecond"},
				{`node "j1"`, "JoinGrace needs a versioned table", `"plain-table"`, "Versioned"},
				{`node "j2"`, "JoinGrace 1m0s is longer than the history 1s", `"short-table"`},
				{`node "j3"`, "JoinGrace -1s is negative"},
				{`node "j4"`, "Versioned"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := engine.NewBuilder()
			tt.build(b)
			err := btBuildErr(t, b)
			for _, p := range tt.want {
				if _, ok := btLineWith(err, p...); !ok {
					t.Errorf("no problem line contains all of %q; the error is:\n%v", p, err)
				}
			}
			if got, want := len(btLines(err)), len(tt.want); got != want {
				t.Errorf("the error has %d problem lines, want %d:\n%v", got, want, err)
			}
			for _, l := range btLines(err) {
				if !strings.HasPrefix(l, "engine: ") {
					t.Errorf("problem %q lacks the engine: prefix", l)
				}
			}
		})
	}
}

// Every nil user function is reported under its node's name.
func TestBuildNilFunctions(t *testing.T) {
	src := func(b *engine.Builder) *engine.Stream[string, int64] {
		return engine.NewStream(b, "in", serde.String, serde.Int64)
	}
	tbl := func(b *engine.Builder) *engine.Table[string, int64] {
		return engine.NewTable(b, "tin", serde.String, serde.Int64)
	}
	named := engine.Named("n")
	tests := []struct {
		name  string
		build func(b *engine.Builder)
		node  string
		what  string
	}{
		{"Filter", func(b *engine.Builder) { src(b).Filter(nil, named) }, "n", "predicate"},
		{"FilterNot", func(b *engine.Builder) { src(b).FilterNot(nil, named) }, "n", "predicate"},
		{"Peek", func(b *engine.Builder) { src(b).Peek(nil, named) }, "n", "peek"},
		{"Foreach", func(b *engine.Builder) { src(b).Foreach(nil, named) }, "n", "foreach"},
		{"Map", func(b *engine.Builder) { engine.Map[string, int64, string, int64](src(b), nil, named) }, "n", "map"},
		{"MapValues", func(b *engine.Builder) { engine.MapValues[string, int64, int64](src(b), nil, named) }, "n", "map"},
		{"SelectKey", func(b *engine.Builder) { engine.SelectKey[string, int64, string](src(b), nil, named) }, "n", "key"},
		{"FlatMap", func(b *engine.Builder) { engine.FlatMap[string, int64, string, int64](src(b), nil, named) }, "n", "flat-map"},
		{"FlatMapValues", func(b *engine.Builder) { engine.FlatMapValues[string, int64, int64](src(b), nil, named) }, "n", "flat-map"},
		{"Split.Branch", func(b *engine.Builder) { src(b).Split().Branch("n", nil) }, "n", "branch predicate"},
		{"RepartitionBy", func(b *engine.Builder) { src(b).RepartitionBy(nil, named).To("out") }, "n-sink", "partition"},
		{"GroupBy", func(b *engine.Builder) {
			engine.GroupBy[string, int64, string](src(b), nil, named).Count()
		}, "n-key", "key"},
		{"Reduce", func(b *engine.Builder) { src(b).GroupByKey().Reduce(nil, named) }, "n", "reduce"},
		{"Aggregate init", func(b *engine.Builder) {
			engine.Aggregate(src(b).GroupByKey(), nil, btAdd, named)
		}, "n", "init"},
		{"Aggregate aggregator", func(b *engine.Builder) {
			engine.Aggregate[string, int64, int64](src(b).GroupByKey(), btZero, nil, named)
		}, "n", "aggregate"},
		{"Cogroup aggregator", func(b *engine.Builder) {
			engine.Cogroup[string, int64, int64](src(b).GroupByKey(), nil).Aggregate(btZero, engine.Named("co"))
		}, "co-agg-0", "aggregate"},
		{"Cogroup init", func(b *engine.Builder) {
			engine.Cogroup(src(b).GroupByKey(), btAdd).Aggregate(nil, named)
		}, "n", "init"},
		{"Table.Filter", func(b *engine.Builder) { tbl(b).Filter(nil, named) }, "n", "predicate"},
		{"Table.FilterNot", func(b *engine.Builder) { tbl(b).FilterNot(nil, named) }, "n", "predicate"},
		{"MapTableValues", func(b *engine.Builder) { engine.MapTableValues[string, int64, int64](tbl(b), nil, named) }, "n", "map"},
		{"GroupTable", func(b *engine.Builder) {
			engine.GroupTable[string, int64, string, int64](tbl(b), nil, named).Count()
		}, "n", "group-by"},
		{"GroupedTable.Reduce adder", func(b *engine.Builder) {
			engine.GroupTable(tbl(b), btPair).Reduce(nil, btDiff, named)
		}, "n", "adder"},
		{"GroupedTable.Reduce subtractor", func(b *engine.Builder) {
			engine.GroupTable(tbl(b), btPair).Reduce(btSum, nil, named)
		}, "n", "subtractor"},
		{"AggregateTable init", func(b *engine.Builder) {
			engine.AggregateTable(engine.GroupTable(tbl(b), btPair), nil, btAdd, btSub, named)
		}, "n", "init"},
		{"AggregateTable adder", func(b *engine.Builder) {
			engine.AggregateTable(engine.GroupTable(tbl(b), btPair), btZero, nil, btSub, named)
		}, "n", "adder"},
		{"AggregateTable subtractor", func(b *engine.Builder) {
			engine.AggregateTable(engine.GroupTable(tbl(b), btPair), btZero, btAdd, nil, named)
		}, "n", "subtractor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := engine.NewBuilder()
			tt.build(b)
			err := btBuildErr(t, b)
			want := `engine: node "` + tt.node + `": the ` + tt.what + ` function is nil`
			if _, ok := btLineWith(err, want); !ok {
				t.Errorf("the error lacks %q:\n%v", want, err)
			}
		})
	}
}

func btNopProcessor() engine.Processor[string, int64, string, int64] {
	return engine.ProcessorFunc[string, int64, string, int64](func(*engine.ProcessorContext[string, int64], engine.Record[string, int64]) error {
		return nil
	})
}

// A nil processor constructor is a nil user function like the others, but
// Build accepts it and the first task start panics.
func TestBuildNilProcessorConstructor(t *testing.T) {
	b := engine.NewBuilder()
	engine.Process[string, int64, string, int64](engine.NewStream(b, "in", serde.String, serde.Int64), nil, engine.Named("proc"))
	top, err := b.Build()
	if err == nil {
		// Show what happens instead of a Build error.
		var panicked any
		func() {
			defer func() { panicked = recover() }()
			d, err := enginetest.Start(top)
			if err == nil {
				d.Close()
			}
		}()
		t.Fatalf("Build accepts engine.Process with a nil constructor; starting the topology then panics with %v", panicked)
	}
	if _, ok := btLineWith(err, `node "proc"`, "nil"); !ok {
		t.Errorf("the error does not name the node and the nil constructor:\n%v", err)
	}
}

// A nil function together with an unused option: both problems must be
// reported, not only the last one found.
func TestBuildNilFunctionAndBadOptionBothReported(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *engine.Builder)
	}{
		{"stream Filter", func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.Int64).Filter(nil, engine.Partitions(3), engine.Named("n"))
		}},
		{"Map", func(b *engine.Builder) {
			engine.Map[string, int64, string, int64](engine.NewStream(b, "in", serde.String, serde.Int64), nil, engine.Partitions(3), engine.Named("n"))
		}},
		{"table Filter", func(b *engine.Builder) {
			engine.NewTable(b, "in", serde.String, serde.Int64).Filter(nil, engine.Partitions(3), engine.Named("n"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := engine.NewBuilder()
			tt.build(b)
			err := btBuildErr(t, b)
			_, nilOK := btLineWith(err, `node "n"`, "function is nil")
			_, optOK := btLineWith(err, `node "n"`, "Partitions")
			if !nilOK {
				t.Errorf("the nil function is not reported:\n%v", err)
			}
			if !optOK {
				t.Fatalf("the nil-function error overwrites the option error of the same node; Build reports only:\n%v", err)
			}
		})
	}
}

// Options given to GroupByKey or GroupBy that they do not use must be
// reported under a node name like every other problem.
func TestBuildGroupByOptionErrorNamesNode(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "in", serde.String, serde.Int64).GroupByKey(engine.Partitions(2), engine.Named("gbk")).Count()
	err := btBuildErr(t, b)
	l, ok := btLineWith(err, "Partitions")
	if !ok {
		t.Fatalf("the unused option is not reported:\n%v", err)
	}
	if !strings.Contains(l, `"gbk`) || !strings.HasPrefix(l, "engine: ") {
		t.Fatalf("the GroupByKey option error names no node (and lacks the engine: prefix): %q", l)
	}
}

// Options to NewKeyValueStore go unchecked: ones it has no use for are
// silently ignored, while every DSL operation reports them.
func TestBuildStoreDefinitionRejectsUnusedOptions(t *testing.T) {
	b := engine.NewBuilder()
	st := engine.NewKeyValueStore("st", serde.String, serde.Int64, engine.Partitions(4), engine.Named("other"))
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), btNopProcessor, engine.WithStores(st), engine.Named("proc"))
	top, err := b.Build()
	if err == nil {
		t.Fatalf("NewKeyValueStore ignores the options it does not use (Partitions, Named); Build succeeds:\n%s", top.Describe())
	}
	if _, ok := btLineWith(err, "st", "Partitions"); !ok {
		t.Errorf("the error does not name the store and the option:\n%v", err)
	}
}

// Materialized("") names no store; it must not silently fall back to a
// derived name, or to no store at all.
func TestBuildEmptyMaterializedName(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *engine.Builder)
	}{
		{"Count", func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.Int64).GroupByKey().Count(engine.Materialized(""), engine.Named("n"))
		}},
		{"table Filter", func(b *engine.Builder) {
			engine.NewTable(b, "in", serde.String, serde.Int64).Filter(btTrue, engine.Materialized(""), engine.Named("n"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := engine.NewBuilder()
			tt.build(b)
			top, err := b.Build()
			if err == nil {
				t.Fatalf("Materialized(\"\") is accepted; the stores are %q", top.Stores())
			}
			if _, ok := btLineWith(err, `"n"`, "empty"); !ok {
				t.Errorf("the error does not say the store name is empty:\n%v", err)
			}
		})
	}
}

// Two sub-topologies that feed each other through user topics loop forever
// as surely as one that feeds itself. DESIGN.md: Build validates cycles.
func TestBuildCycleAcrossSubTopologies(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "a", serde.String, serde.Int64).To("b", engine.Named("a-to-b"))
	engine.NewStream(b, "b", serde.String, serde.Int64).To("a", engine.Named("b-to-a"))
	top, err := b.Build()
	if err == nil {
		t.Fatalf("Build accepts a cycle a -> b -> a across two sub-topologies; piping one record would never return:\n%s", top.Describe())
	}
	if _, ok := btLineWith(err, "loop"); !ok {
		t.Errorf("the error does not report the loop:\n%v", err)
	}
}

// A loop declared with Feedback builds, and runs for as long as the
// topology keeps feeding it: here three rounds, each adding one.
func TestBuildFeedbackLoop(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.NewStream(b, "a", serde.String, serde.Int64)
	s.To("out", engine.Named("a-to-out"))
	engine.MapValues(s.Filter(func(_ string, v int64) bool { return v < 3 }), func(_ string, v int64) int64 { return v + 1 }).
		To("a", engine.Named("a-again"), engine.Feedback())
	top, err := b.Build()
	if err != nil {
		t.Fatalf("a loop declared with Feedback: %v", err)
	}
	d := enginetest.New(t, top)
	enginetest.NewInput(d, "a", serde.String, serde.Int64).Pipe("k", 0, time.UnixMilli(1))
	var got []int64
	for _, kv := range enginetest.NewOutput(d, "out", serde.String, serde.Int64).ReadKeyValues() {
		got = append(got, kv.Value)
	}
	if want := []int64{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("out: %v, want %v", got, want)
	}
}

// A grouped stream may feed two aggregations; after a key change they share
// one repartition topic (as Kafka Streams' optimizer arranges), so the
// records are written through it once.
func TestBuildGroupedStreamReusedForTwoAggregations(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.Map(engine.NewStream(b, "in", serde.String, serde.Int64), btPair)
	g := s.GroupByKey()
	g.Count()
	g.Reduce(btSum)
	top, err := b.Build()
	if err != nil {
		t.Fatalf("one GroupByKey after a key change cannot feed two aggregations; Build fails with names the user never chose:\n%v", err)
	}
	if n := strings.Count(top.Describe(), "(repartition)"); n != 1 {
		t.Errorf("want one shared repartition topic, got %d:\n%s", n, top.Describe())
	}
}

// Every problem of a topology is reported, joined, one a line, in one error.
func TestBuildReportsEveryProblemJoined(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.Int64, engine.Named("src"))
	s.Filter(nil, engine.Named("f"))
	s.Peek(func(string, int64) {}, engine.Named("f"))
	s.To("in", engine.Named("loop"))
	engine.NewStream[string, int64](b, "in", serde.String, nil, engine.Named("again"))
	err := btBuildErr(t, b)
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("the error is a %T, not a joined error", err)
	}
	if got := len(joined.Unwrap()); got != 5 {
		t.Errorf("got %d problems, want 5:\n%v", got, err)
	}
	for _, want := range [][]string{
		{`node "f"`, "predicate function is nil"},
		{`node "f"`, "the name is used by another node"},
		{`node "loop"`, "loop"},
		{`node "again"`, "already read by another source"},
		{`node "again"`, "value serde is nil"},
	} {
		if _, ok := btLineWith(err, want...); !ok {
			t.Errorf("no line has %q:\n%v", want, err)
		}
	}
}

// A topology using every operation of the DSL builds.
func TestBuildValidTopology(t *testing.T) {
	b := engine.NewBuilder()
	orders := engine.NewStream(b, "orders", serde.String, serde.Int64)
	returns := engine.NewStream(b, "returns", serde.String, serde.Int64)
	all := orders.Merge(returns).Filter(btTrue).FilterNot(func(string, int64) bool { return false }).Peek(func(string, int64) {})
	all.Foreach(func(string, int64) {})
	mapped := engine.MapValues(all, func(_ string, v int64) float64 { return float64(v) })
	engine.FlatMapValues(mapped, func(_ string, v float64) []float64 { return []float64{v, v} }).To("doubled")
	engine.FlatMap(all, func(k string, v int64) []engine.KeyValue[string, int64] {
		return []engine.KeyValue[string, int64]{engine.KV(k, v)}
	}).
		GroupByKey().Count(engine.Materialized("flat-counts")).ToStream().To("flat-counts")
	engine.SelectKey(all, btIdent).Repartition(engine.Partitions(4), engine.Named("rekeyed")).To("rekeyed")
	engine.GroupBy(all, btIdent).Reduce(btSum, engine.InMemory(), engine.WithoutChangelog())
	engine.Aggregate(all.GroupByKey(), btZero, btAdd, engine.ValueSerde(serde.Int64))
	engine.Map(all, btPair).ToTable(engine.Materialized("latest"))
	sp := all.Split(engine.Named("split"))
	sp.Branch("small", func(_ string, v int64) bool { return v < 10 }).To("small")
	sp.Branch("", func(_ string, v int64) bool { return v < 100 }).To("medium")
	sp.Default("large").To("large")

	customers := engine.NewTable(b, "customers", serde.String, serde.Int64, engine.Materialized("customers"))
	customers.Filter(btTrue, engine.Materialized("filtered"), engine.InMemory()).ToStream().To("filtered")
	engine.MapTableValues(customers, func(_ string, v int64) string { return "x" })
	engine.GroupTable(customers, btPair).Count()
	engine.GroupTable(customers, btPair).Reduce(btSum, btDiff)
	engine.AggregateTable(engine.GroupTable(customers, btPair), btZero, btAdd, btSub)
	co := engine.Cogroup(orders.GroupByKey(), btAdd)
	engine.CogroupWith(co, returns.GroupByKey(), btSub).Aggregate(btZero, engine.Materialized("net"))
	engine.NewGlobalTable(b, "products", serde.String, serde.String, engine.Materialized("products"))
	st := engine.NewKeyValueStore("seen", serde.String, serde.Int64, engine.InMemory())
	engine.Process(all, btNopProcessor, engine.WithStores(st))

	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"customers", "filtered", "flat-counts", "latest", "net", "products", "seen"} {
		found := false
		for _, got := range top.Stores() {
			found = found || got == s
		}
		if !found {
			t.Errorf("store %q is missing from %q", s, top.Stores())
		}
	}
	// It runs, too.
	d := enginetest.New(t, top)
	enginetest.NewInput(d, "orders", serde.String, serde.Int64).Pipe("a", 5, enginetest.At(1))
	if got := enginetest.StoreContents(d, "net", serde.String, serde.Int64); got["a"] != 5 {
		t.Errorf("net = %v, want a:5", got)
	}
}

// A store used by a processor but not attached to it cannot be seen by Build
// (a processor opens stores at run time); the task start fails instead,
// naming the node and the store.
func TestBuildStoreNotAttachedFailsAtStart(t *testing.T) {
	b := engine.NewBuilder()
	st := engine.NewKeyValueStore("st", serde.String, serde.Int64)
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), func() engine.Processor[string, int64, string, int64] {
		return &btStoreOpener{def: st}
	}, engine.Named("proc"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = enginetest.Start(top)
	if err == nil {
		t.Fatal("the driver started, want an error for the store that is not attached")
	}
	for _, want := range []string{`"proc"`, `"st"`, "did not declare store", "attach it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// A store declared with a nil serde is as much a wiring mistake as a source
// with one; Build sees the declaration, yet only the store's Open at task
// start reports it.
func TestBuildNilStoreSerde(t *testing.T) {
	b := engine.NewBuilder()
	st := engine.NewKeyValueStore[string, int64]("st", serde.String, nil)
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), btNopProcessor, engine.WithStores(st), engine.Named("proc"))
	top, err := b.Build()
	if err == nil {
		t.Fatalf("Build accepts NewKeyValueStore(%q, serde.String, nil); stores: %q", st.Name(), top.Stores())
	}
	if _, ok := btLineWith(err, `"st"`, "value serde is nil"); !ok {
		t.Errorf("the error does not name the store and its nil serde:\n%v", err)
	}
}

type btStoreOpener struct {
	def *engine.KeyValueStoreDef[string, int64]
}

func (p *btStoreOpener) Init(ctx *engine.ProcessorContext[string, int64]) error {
	_, err := p.def.Open(ctx)
	return err
}

func (p *btStoreOpener) Process(*engine.ProcessorContext[string, int64], engine.Record[string, int64]) error {
	return nil
}

// A builder is frozen by Build, whether Build succeeded or not: every later
// change is a wiring mistake and panics.
func TestBuilderPanicsAfterBuild(t *testing.T) {
	for _, failed := range []bool{false, true} {
		setup := func() (*engine.Builder, *engine.Stream[string, int64], *engine.Table[string, int64]) {
			b := engine.NewBuilder()
			s := engine.NewStream(b, "in", serde.String, serde.Int64)
			tb := engine.NewTable(b, "tin", serde.String, serde.Int64)
			if failed {
				s.Filter(nil)
			}
			if _, err := b.Build(); (err != nil) != failed {
				t.Fatalf("Build error = %v, want failed=%v", err, failed)
			}
			return b, s, tb
		}
		uses := []struct {
			name string
			use  func(b *engine.Builder, s *engine.Stream[string, int64], tb *engine.Table[string, int64])
		}{
			{"Build", func(b *engine.Builder, _ *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				_, _ = b.Build()
			}},
			{"NewStream", func(b *engine.Builder, _ *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				engine.NewStream(b, "other", serde.String, serde.Int64)
			}},
			{"NewTable", func(b *engine.Builder, _ *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				engine.NewTable(b, "other", serde.String, serde.Int64)
			}},
			{"NewGlobalTable", func(b *engine.Builder, _ *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				engine.NewGlobalTable(b, "other", serde.String, serde.Int64)
			}},
			{"Filter", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				s.Filter(btTrue)
			}},
			{"To", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) { s.To("out") }},
			{"Merge", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) { s.Merge(s) }},
			{"Map", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				engine.Map(s, btPair)
			}},
			{"GroupBy", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				engine.GroupBy(s, btIdent)
			}},
			{"GroupByKey", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				s.GroupByKey()
			}},
			{"Split", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) { s.Split() }},
			{"Process", func(_ *engine.Builder, s *engine.Stream[string, int64], _ *engine.Table[string, int64]) {
				engine.Process(s, btNopProcessor)
			}},
			{"Table.Filter", func(_ *engine.Builder, _ *engine.Stream[string, int64], tb *engine.Table[string, int64]) {
				tb.Filter(btTrue)
			}},
			{"Table.ToStream", func(_ *engine.Builder, _ *engine.Stream[string, int64], tb *engine.Table[string, int64]) {
				tb.ToStream()
			}},
			{"GroupTable", func(_ *engine.Builder, _ *engine.Stream[string, int64], tb *engine.Table[string, int64]) {
				engine.GroupTable(tb, btPair)
			}},
		}
		for _, u := range uses {
			name := u.name
			if failed {
				name += " after a failed Build"
			}
			t.Run(name, func(t *testing.T) {
				b, s, tb := setup()
				defer func() {
					r := recover()
					if r == nil {
						if u.name == "GroupByKey" {
							t.Fatal("GroupByKey on a built builder does not panic (it adds no node until the aggregation)")
						}
						t.Fatal("no panic")
					}
					if msg, _ := r.(string); !strings.Contains(msg, "already built") {
						t.Errorf("panic %v does not say the builder was already built", r)
					}
				}()
				u.use(b, s, tb)
			})
		}
	}
}
