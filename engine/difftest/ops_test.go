package difftest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// An op is a topology of the catalog: one DSL operation (or a short chain
// ending in one) with its structural parameters fixed, built here with
// Oxbow's DSL and in Twins.java with Kafka Streams'. Each seed draws the
// numeric parameters (sizes, grace periods) and the input.
type op struct {
	name    string // the catalog's name, unique: the twin and its fixed parameters
	twin    string // the topology's name on the Kafka Streams side
	fixed   params
	inputs  []input
	outputs []output
	draw    func(r *rand.Rand, p params) // draws the numeric parameters into p
	build   func(b *engine.Builder, p params)
}

// An input is a topic the generator writes, with the keys it draws from.
type input struct {
	topic string
	keys  []string
	table bool // a table's topic: tombstones delete, so the generator writes more of them
}

// An output is a topic both sides read, with how its bytes read (for people).
type output struct {
	topic      string
	key, value format
}

type format int

const (
	text     format = iota // UTF-8
	int64be                // serde.Int64, Kafka's LongSerializer
	windowed               // a key, then the window's start (Kafka Streams' time-windowed key)
	session                // a key, then the session's end and start (its session key)
)

func (o *op) outputTopics() []string {
	ts := make([]string, len(o.outputs))
	for i, out := range o.outputs {
		ts[i] = out.topic
	}
	return ts
}

var (
	keys        = []string{"a", "b", "c"}
	foreignKeys = []string{"f0", "f1", "f2"}
	str         = serde.String
)

func stream(b *engine.Builder, topic string) *engine.Stream[string, string] {
	return engine.NewStream(b, topic, str, str)
}

func table(b *engine.Builder, topic string, opts ...engine.Option) *engine.Table[string, string] {
	return engine.NewTable(b, topic, str, str, opts...)
}

func ms(p params, name string) time.Duration { return time.Duration(p.ms(name)) * time.Millisecond }

// materialized is the option the twins give with the parameter param=1: a
// store of the given name.
func materialized(p params, param, store string) []engine.Option {
	if p.bool(param) {
		return []engine.Option{engine.Materialized(store)}
	}
	return nil
}

func drawBool(name string) func(*rand.Rand, params) {
	return drawBools(name)
}

// drawBools draws each of the named parameters 0 or 1.
func drawBools(names ...string) func(*rand.Rand, params) {
	return func(r *rand.Rand, p params) {
		for _, name := range names {
			p[name] = strconv.Itoa(r.IntN(2))
		}
	}
}

// drawGrace draws a grace period: none a third of the time.
func drawGrace(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return "0"
	}
	return strconv.Itoa(1 + r.IntN(20))
}

// catalog lists every op, in the order the test runs them.
var catalog = buildCatalog()

func buildCatalog() []*op {
	in := []input{{topic: "in", keys: keys}}
	in2 := []input{{topic: "in", keys: keys}, {topic: "in2", keys: keys}}
	tin := []input{{topic: "in", keys: keys, table: true}}
	out := []output{{"out", text, text}}
	outLong := []output{{"out", text, int64be}}
	var ops []*op
	add := func(o *op) {
		if o.twin == "" {
			o.twin = o.name
		}
		if o.fixed == nil {
			o.fixed = params{}
		}
		ops = append(ops, o)
	}

	// Stateless operations and repartitioning.
	add(&op{name: "filter", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		stream(b, "in").Filter(even).To("out")
	}})
	add(&op{name: "filter-not", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		stream(b, "in").FilterNot(even).To("out")
	}})
	add(&op{name: "map-values", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		engine.MapValues(stream(b, "in"), mapValue).To("out")
	}})
	add(&op{name: "flat-map-values", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		engine.FlatMapValues(stream(b, "in"), fanValues).To("out")
	}})
	add(&op{name: "map", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		engine.Map(stream(b, "in"), mapPair).To("out")
	}})
	add(&op{name: "flat-map", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		engine.FlatMap(stream(b, "in"), fanPairs).To("out")
	}})
	add(&op{name: "select-key", inputs: in, outputs: out, build: func(b *engine.Builder, p params) {
		engine.SelectKey(stream(b, "in"), newKey).To("out")
	}})
	add(&op{name: "merge", inputs: in2, outputs: out, build: func(b *engine.Builder, p params) {
		stream(b, "in").Merge(stream(b, "in2")).To("out")
	}})
	add(&op{name: "split", inputs: in, outputs: []output{{"out", text, text}, {"out-three", text, text}, {"out-rest", text, text}},
		build: func(b *engine.Builder, p params) {
			sp := stream(b, "in").Split()
			sp.Branch("even", even).To("out")
			sp.Branch("three", three).To("out-three")
			sp.Default("rest").To("out-rest")
		}})
	add(&op{name: "repartition", inputs: in, outputs: out, draw: drawBool("rekey"), build: func(b *engine.Builder, p params) {
		s := stream(b, "in")
		if p.bool("rekey") {
			s = engine.SelectKey(s, newKey)
		}
		s.Repartition().To("out")
	}})
	add(&op{name: "to-table", inputs: in, outputs: out, draw: drawBool("materialized"), build: func(b *engine.Builder, p params) {
		stream(b, "in").ToTable(materialized(p, "materialized", "t")...).ToStream().To("out")
	}})

	// Aggregations of streams, by key or re-grouped.
	for _, agg := range []string{"count", "reduce", "aggregate"} {
		for _, rekey := range []string{"0", "1"} {
			o := outLong
			if agg != "count" {
				o = out
			}
			add(&op{name: agg + "/rekey=" + rekey, twin: agg, fixed: params{"rekey": rekey}, inputs: in, outputs: o,
				build: func(b *engine.Builder, p params) {
					s := stream(b, "in")
					g := s.GroupByKey()
					if p.bool("rekey") {
						g = engine.GroupBy(s, newKey)
					}
					switch agg {
					case "count":
						g.Count().ToStream().To("out")
					case "reduce":
						g.Reduce(reduce).ToStream().To("out")
					default:
						engine.Aggregate(g, initial, aggregate).ToStream().To("out")
					}
				}})
		}
	}

	// Tables: sources, stateless operations, re-grouped aggregations with
	// adder and subtractor, suppression.
	add(&op{name: "table-source", inputs: tin, outputs: out, draw: drawBool("materialized"), build: func(b *engine.Builder, p params) {
		table(b, "in", materialized(p, "materialized", "t")...).ToStream().To("out")
	}})
	add(&op{name: "table-filter", inputs: tin, outputs: out, draw: drawBools("materialized", "srcmat", "not"), build: func(b *engine.Builder, p params) {
		t := table(b, "in", materialized(p, "srcmat", "t")...)
		if p.bool("not") {
			t = t.FilterNot(even, materialized(p, "materialized", "f")...)
		} else {
			t = t.Filter(even, materialized(p, "materialized", "f")...)
		}
		t.ToStream().To("out")
	}})
	add(&op{name: "table-map-values", inputs: tin, outputs: out, draw: drawBools("materialized", "srcmat"), build: func(b *engine.Builder, p params) {
		engine.MapTableValues(table(b, "in", materialized(p, "srcmat", "t")...), mapValue, materialized(p, "materialized", "m")...).ToStream().To("out")
	}})
	// A filter whose table downstream needs old values (the re-grouping),
	// and a table both written out and read by a join (which materializes it).
	add(&op{name: "table-filter-count", inputs: tin, outputs: outLong, draw: drawBools("srcmat"), build: func(b *engine.Builder, p params) {
		engine.GroupTable(table(b, "in", materialized(p, "srcmat", "t")...).Filter(even), regroup).Count().ToStream().To("out")
	}})
	add(&op{name: "table-source-shared", inputs: []input{{topic: "in", keys: keys, table: true}, {topic: "in2", keys: keys, table: true}},
		outputs: []output{{"out", text, text}, {"out2", text, text}}, build: func(b *engine.Builder, p params) {
			t := table(b, "in")
			t.ToStream().To("out")
			engine.JoinTables(t, table(b, "in2"), func(_, l, r string) string { return joined(l, true, r, true) }).ToStream().To("out2")
		}})
	add(&op{name: "table-count", inputs: tin, outputs: outLong, build: func(b *engine.Builder, p params) {
		engine.GroupTable(table(b, "in"), regroup).Count().ToStream().To("out")
	}})
	add(&op{name: "table-reduce", inputs: tin, outputs: out, build: func(b *engine.Builder, p params) {
		engine.GroupTable(table(b, "in"), regroup).Reduce(reduce, subtract).ToStream().To("out")
	}})
	add(&op{name: "table-aggregate", inputs: tin, outputs: out, build: func(b *engine.Builder, p params) {
		engine.AggregateTable(engine.GroupTable(table(b, "in"), regroup), initial, aggregate,
			func(_, v, agg string) string { return subtract(agg, v) }).ToStream().To("out")
	}})
	drawLimit := func(r *rand.Rand, p params) { p["limit"] = strconv.Itoa(1 + r.IntN(20)) }
	add(&op{name: "table-suppress/table", twin: "table-suppress", fixed: params{"source": "table"}, inputs: tin, outputs: out,
		draw: drawLimit, build: func(b *engine.Builder, p params) {
			table(b, "in").SuppressUntil(ms(p, "limit")).ToStream().To("out")
		}})
	add(&op{name: "table-suppress/filter", twin: "table-suppress", fixed: params{"source": "filter"}, inputs: tin, outputs: out,
		draw: drawLimit, build: func(b *engine.Builder, p params) {
			table(b, "in").Filter(even).SuppressUntil(ms(p, "limit")).ToStream().To("out")
		}})
	add(&op{name: "table-suppress/count", twin: "table-suppress", fixed: params{"source": "count"}, inputs: in, outputs: outLong,
		draw: drawLimit, build: func(b *engine.Builder, p params) {
			stream(b, "in").GroupByKey().Count().SuppressUntil(ms(p, "limit")).ToStream().To("out")
		}})

	add(&op{name: "cogroup", inputs: in2, outputs: out, build: func(b *engine.Builder, p params) {
		c := engine.Cogroup(stream(b, "in").GroupByKey(), aggregate)
		c = engine.CogroupWith(c, stream(b, "in2").GroupByKey(), aggregate2)
		c.Aggregate(initial).ToStream().To("out")
	}})

	// Windowed aggregations.
	drawWindows := func(r *rand.Rand, p params) {
		p["grace"] = drawGrace(r)
		size := 2 + r.IntN(19)
		p["size"] = strconv.Itoa(size)
		p["advance"] = strconv.Itoa(1 + r.IntN(size))
		p["gap"] = strconv.Itoa(1 + r.IntN(10))
		// The store's retention (0: the default, the least the windows
		// need), which decides what the aggregation still sees.
		p["retention"] = "0"
		if r.IntN(2) == 0 {
			least := p.ms("size") + p.ms("grace")
			switch p["kind"] {
			case "sliding":
				least += p.ms("size")
			case "session":
				least = p.ms("gap") + p.ms("grace")
			}
			p["retention"] = strconv.FormatInt(least+int64(r.IntN(20)), 10)
		}
	}
	for _, kind := range []string{"tumbling", "hopping", "sliding", "session"} {
		key := windowed
		if kind == "session" {
			key = session
		}
		add(&op{name: "cogroup-window/" + kind, twin: "cogroup-window", fixed: params{"kind": kind}, inputs: in2,
			outputs: []output{{"out", key, text}}, draw: drawWindows, build: buildCogroupWindow})
		for _, agg := range []string{"count", "reduce", "aggregate"} {
			for _, emit := range []string{"update", "final", "suppress"} {
				value := text
				if agg == "count" {
					value = int64be
				}
				add(&op{name: fmt.Sprintf("window/%s/%s/%s", kind, agg, emit), twin: "window",
					fixed: params{"kind": kind, "agg": agg, "emit": emit}, inputs: in, outputs: []output{{"out", key, value}},
					draw: drawWindows, build: buildWindow})
			}
		}
	}

	// Joins.
	for _, kind := range []string{"inner", "left", "outer"} {
		add(&op{name: "stream-join/" + kind, twin: "stream-join", fixed: params{"kind": kind}, inputs: in2, outputs: out,
			draw: func(r *rand.Rand, p params) {
				p["grace"] = drawGrace(r)
				// A window may be shifted (a negative before or after),
				// as long as it is not negative as a whole.
				before := r.IntN(11)
				after := max(r.IntN(16)-5, -before)
				p["before"] = strconv.Itoa(before)
				p["after"] = strconv.Itoa(after)
				if kind != "inner" {
					// How often the join looks for non-joined results, by
					// the wall clock: not said (each driver's default, 0),
					// Kafka Streams' runtime default, every record, or
					// between.
					if e := []string{"", "1000", "0", "300"}[r.IntN(4)]; e != "" {
						p["joinemit"] = e
					}
				}
			},
			build: buildStreamJoin})
	}
	for _, kind := range []string{"inner", "left"} {
		for _, versioned := range []string{"plain", "versioned", "grace"} {
			add(&op{name: "table-join/" + kind + "/" + versioned, twin: "table-join", fixed: params{"kind": kind},
				inputs: []input{{topic: "in", keys: keys}, {topic: "table", keys: keys, table: true}}, outputs: out,
				draw: func(r *rand.Rand, p params) {
					p["history"], p["grace"] = "0", "0"
					if versioned == "plain" {
						return
					}
					grace := 0
					if versioned == "grace" {
						grace = 1 + r.IntN(20)
					}
					p["grace"] = strconv.Itoa(grace)
					p["history"] = strconv.Itoa(grace + 1 + r.IntN(30))
				},
				build: buildTableJoin})
		}
	}
	for _, kind := range []string{"inner", "left", "outer"} {
		add(&op{name: "join-tables/" + kind, twin: "join-tables", fixed: params{"kind": kind},
			inputs: []input{{topic: "in", keys: keys, table: true}, {topic: "in2", keys: keys, table: true}}, outputs: out,
			build: func(b *engine.Builder, p params) {
				l, r := table(b, "in"), table(b, "in2")
				var j *engine.Table[string, string]
				switch kind {
				case "inner":
					j = engine.JoinTables(l, r, func(_, l, r string) string { return joined(l, true, r, true) })
				case "left":
					j = engine.LeftJoinTables(l, r, func(_, l, r string, ok bool) string { return joined(l, true, r, ok) })
				default:
					j = engine.OuterJoinTables(l, r, func(_, l string, lok bool, r string, rok bool) string { return joined(l, lok, r, rok) })
				}
				j.ToStream().To("out")
			}})
	}
	for _, kind := range []string{"inner", "left", "outer"} {
		add(&op{name: "join-tables-filtered/" + kind, twin: "join-tables-filtered", fixed: params{"kind": kind},
			inputs: []input{{topic: "in", keys: keys, table: true}, {topic: "in2", keys: keys, table: true}}, outputs: out,
			draw: drawBools("lmat", "rfilter", "post", "postmat"),
			build: func(b *engine.Builder, p params) {
				l, r := table(b, "in").Filter(even, materialized(p, "lmat", "lf")...), table(b, "in2")
				if p.bool("rfilter") {
					r = r.FilterNot(three)
				}
				var j *engine.Table[string, string]
				switch kind {
				case "inner":
					j = engine.JoinTables(l, r, func(_, l, r string) string { return joined(l, true, r, true) })
				case "left":
					j = engine.LeftJoinTables(l, r, func(_, l, r string, ok bool) string { return joined(l, true, r, ok) })
				default:
					j = engine.OuterJoinTables(l, r, func(_, l string, lok bool, r string, rok bool) string { return joined(l, lok, r, rok) })
				}
				if p.bool("post") {
					j = j.Filter(firstEven, materialized(p, "postmat", "pf")...)
				}
				j.ToStream().To("out")
			}})
	}
	for _, kind := range []string{"inner", "left"} {
		add(&op{name: "join-foreign-key/" + kind, twin: "join-foreign-key", fixed: params{"kind": kind},
			inputs:  []input{{topic: "in", keys: keys, table: true}, {topic: "in2", keys: foreignKeys, table: true}},
			outputs: out, draw: drawBools("materialized", "lfilter"),
			build: func(b *engine.Builder, p params) {
				l, r := table(b, "in"), table(b, "in2")
				if p.bool("lfilter") {
					l = l.FilterNot(three)
				}
				fk := func(_, v string) string { return foreignKey(v) }
				opts := materialized(p, "materialized", "fk")
				var j *engine.Table[string, string]
				if kind == "inner" {
					j = engine.JoinForeignKey(l, r, fk, func(_, l, r string) string { return joined(l, true, r, true) }, opts...)
				} else {
					j = engine.LeftJoinForeignKey(l, r, fk, func(_, l, r string, ok bool) string { return joined(l, true, r, ok) }, opts...)
				}
				j.ToStream().To("out")
			}})
	}
	for _, kind := range []string{"inner", "left"} {
		add(&op{name: "join-global/" + kind, twin: "join-global", fixed: params{"kind": kind},
			inputs:  []input{{topic: "in", keys: keys}, {topic: "global", keys: foreignKeys, table: true}},
			outputs: out,
			build: func(b *engine.Builder, p params) {
				s, g := stream(b, "in"), engine.NewGlobalTable(b, "global", str, str)
				fk := func(_, v string) string { return foreignKey(v) }
				var j *engine.Stream[string, string]
				if kind == "inner" {
					j = engine.JoinGlobal(s, g, fk, func(_, l, r string) string { return joined(l, true, r, true) })
				} else {
					j = engine.LeftJoinGlobal(s, g, fk, func(_, l, r string, ok bool) string { return joined(l, true, r, ok) })
				}
				j.To("out")
			}})
	}
	return ops
}

func buildWindow(b *engine.Builder, p params) {
	g := stream(b, "in").GroupByKey()
	opts := retention(p)
	if p["emit"] == "final" {
		opts = append(opts, engine.EmitFinal())
	}
	grace := ms(p, "grace")
	if p["kind"] == "session" {
		ss := g.SessionWindowedBy(engine.SessionWindows(ms(p, "gap")).Grace(grace))
		switch p["agg"] {
		case "count":
			windowSink(p, engine.SessionCount(ss, opts...))
		case "reduce":
			windowSink(p, engine.SessionReduce(ss, reduce, opts...))
		default:
			windowSink(p, engine.SessionAggregate(ss, initial, aggregate, merge, opts...))
		}
		return
	}
	var w engine.TimeWindows
	switch p["kind"] {
	case "tumbling":
		w = engine.TumblingWindows(ms(p, "size"))
	case "hopping":
		w = engine.HoppingWindows(ms(p, "size"), ms(p, "advance"))
	default:
		w = engine.SlidingWindows(ms(p, "size"))
	}
	ws := g.WindowedBy(w.Grace(grace))
	switch p["agg"] {
	case "count":
		windowSink(p, engine.WindowedCount(ws, opts...))
	case "reduce":
		windowSink(p, engine.WindowedReduce(ws, reduce, opts...))
	default:
		windowSink(p, engine.WindowedAggregate(ws, initial, aggregate, opts...))
	}
}

// retention is the option the twins give with retention > 0.
func retention(p params) []engine.Option {
	if d := ms(p, "retention"); d > 0 {
		return []engine.Option{engine.Retention(d)}
	}
	return nil
}

// windowSink writes a windowed table's changes to "out", suppressed until
// its windows close with emit=suppress (Twins.windowSink).
func windowSink[V any](p params, t *engine.Table[engine.Windowed[string], V]) {
	if p["emit"] == "suppress" {
		t = engine.SuppressUntilWindowCloses(t)
	}
	t.ToStream().To("out")
}

func buildCogroupWindow(b *engine.Builder, p params) {
	c := engine.Cogroup(stream(b, "in").GroupByKey(), aggregate)
	c = engine.CogroupWith(c, stream(b, "in2").GroupByKey(), aggregate2)
	grace := ms(p, "grace")
	var t *engine.Table[engine.Windowed[string], string]
	switch p["kind"] {
	case "session":
		t = engine.SessionCogroup(c, engine.SessionWindows(ms(p, "gap")).Grace(grace), initial, merge, retention(p)...)
	case "tumbling":
		t = engine.WindowedCogroup(c, engine.TumblingWindows(ms(p, "size")).Grace(grace), initial, retention(p)...)
	case "hopping":
		t = engine.WindowedCogroup(c, engine.HoppingWindows(ms(p, "size"), ms(p, "advance")).Grace(grace), initial, retention(p)...)
	default:
		t = engine.WindowedCogroup(c, engine.SlidingWindows(ms(p, "size")).Grace(grace), initial, retention(p)...)
	}
	t.ToStream().To("out")
}

func buildStreamJoin(b *engine.Builder, p params) {
	l, r := stream(b, "in"), stream(b, "in2")
	w := engine.JoinTimeDifference(ms(p, "before")).After(ms(p, "after")).Grace(ms(p, "grace"))
	var opts []engine.Option
	if _, ok := p["joinemit"]; ok {
		opts = append(opts, engine.EmitInterval(ms(p, "joinemit")))
	}
	var j *engine.Stream[string, string]
	switch p["kind"] {
	case "inner":
		j = engine.JoinStreams(l, r, w, func(_, l, r string) string { return joined(l, true, r, true) })
	case "left":
		j = engine.LeftJoinStreams(l, r, w, func(_, l, r string, ok bool) string { return joined(l, true, r, ok) }, opts...)
	default:
		j = engine.OuterJoinStreams(l, r, w, func(_, l string, lok bool, r string, rok bool) string { return joined(l, lok, r, rok) }, opts...)
	}
	j.To("out")
}

func buildTableJoin(b *engine.Builder, p params) {
	var topts, jopts []engine.Option
	if h := ms(p, "history"); h > 0 {
		topts = append(topts, engine.Versioned(h))
	}
	if g := ms(p, "grace"); g > 0 {
		jopts = append(jopts, engine.JoinGrace(g))
	}
	s, t := stream(b, "in"), table(b, "table", topts...)
	var j *engine.Stream[string, string]
	if p["kind"] == "inner" {
		j = engine.Join(s, t, func(_, v, tv string) string { return joined(v, true, tv, true) }, jopts...)
	} else {
		j = engine.LeftJoin(s, t, func(_, v, tv string, ok bool) string { return joined(v, true, tv, ok) }, jopts...)
	}
	j.To("out")
}
