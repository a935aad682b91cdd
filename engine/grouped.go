package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// GroupedStream is a stream grouped by key, ready for an aggregation:
// [GroupedStream.Count], [GroupedStream.Reduce], [Aggregate] or [Cogroup].
type GroupedStream[K, V any] struct {
	s    *Stream[K, V]
	name string // names the repartition topic, if one is needed
	err  error  // a problem with the grouping's options, reported on its aggregations
	// repartitioned is the repartitioned input, made by the first
	// aggregation that needs it and shared by the others.
	repartitioned *Stream[K, V]
}

// GroupByKey groups the stream by its current key. If an operation upstream
// changed the key, the aggregation repartitions first.
func (s *Stream[K, V]) GroupByKey(opts ...Option) *GroupedStream[K, V] {
	o, err := s.b.opts("GroupByKey", opts)
	name := s.b.name("group-by-key", o, []*topo.Node{s.node}, "")
	return &GroupedStream[K, V]{s: s, name: name, err: groupingErr(name, err)}
}

// GroupBy groups the stream by a new key computed from each record; the
// aggregation repartitions by it. [Named] names the repartition topic.
func GroupBy[K, V, K2 any](s *Stream[K, V], fn func(K, V) K2, opts ...Option) *GroupedStream[K2, V] {
	o, err := s.b.opts("GroupBy", opts)
	name := s.b.name("group-by", o, []*topo.Node{s.node}, "")
	return &GroupedStream[K2, V]{s: SelectKey(s, fn, Named(name+"-key")), name: name, err: groupingErr(name, err)}
}

// WithSerdes sets the serdes for the repartition topic and the store.
func (g *GroupedStream[K, V]) WithSerdes(keySerde serde.Serde[K], valueSerde serde.Serde[V]) *GroupedStream[K, V] {
	return &GroupedStream[K, V]{s: g.s.WithSerdes(keySerde, valueSerde), name: g.name, err: g.err}
}

// input is the stream to aggregate: repartitioned if its key changed.
func (g *GroupedStream[K, V]) input() *Stream[K, V] {
	if !g.s.rekeyed {
		return g.s
	}
	if g.repartitioned == nil {
		g.repartitioned = g.s.repartition(g.name, 0, nil)
	}
	return g.repartitioned
}

// aggFunc folds a value into an aggregate; exists says whether agg holds a
// previous aggregate.
type aggFunc func(k, v, agg any, exists bool) any

// countAdd, reduceAdd and aggregateAdd are the adders of a count, a reduce
// and an aggregate, of every grouping: by key, by time, session or count
// window.
func countAdd(_, _, agg any, exists bool) any {
	if !exists {
		return int64(1)
	}
	return agg.(int64) + 1
}

func reduceAdd[V any](fn func(agg, v V) V) aggFunc {
	return func(_, v, agg any, exists bool) any {
		if !exists {
			return v
		}
		return fn(agg.(V), v.(V))
	}
}

func aggregateAdd[K, V, VA any](init func() VA, fn func(K, V, VA) VA) aggFunc {
	return func(k, v, agg any, exists bool) any {
		if !exists {
			agg = init()
		}
		return fn(as[K](k), v.(V), agg.(VA))
	}
}

// aggregate adds the node that folds a grouped stream into a store.
func aggregate[K, V, VA any](g *GroupedStream[K, V], op string, opts []Option, vas serde.Serde[VA], add aggFunc, nilErr error) *Table[K, VA] {
	b := g.s.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde")
	vas, serr := valueSerdeOpt(o, vas)
	in := g.input()
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{in.node}}
	n.Name = b.name(op, o, n.Parents, "")
	store := storeName(o, n.Name)
	b.addStore(o, store)
	n.Stores = []string{store}
	n.New = streamAggProc(store, codecOf(in.ks), codecOf(vas), add)
	b.add(n, errors.Join(g.err, err, serr, nilErr))
	return kept(&Table[K, VA]{b: b, node: n, ks: in.ks, vs: vas, store: store}, StoreInfo{})
}

func streamAggProc(store string, kc, vc topo.Codec, add aggFunc) func() topo.Processor {
	return func() topo.Processor {
		var st kvAccess
		return &fproc{
			init: func(c *topo.Context) error { return st.open(c, store, kc, vc, true) },
			fn: func(c *topo.Context, r topo.Record) error {
				if r.Key == nil || r.Value == nil {
					c.Skip("record without a key or value in an aggregation")
					return nil
				}
				kb, old, oldTs, ok, err := st.getKey(r)
				if err != nil {
					return err
				}
				agg := add(r.Key, r.Value, old, ok)
				return st.updateKey(kb, r, old, agg, later(r.Timestamp, oldTs))
			},
		}
	}
}

// later is the output timestamp of an aggregation: that of the latest
// contributing input.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Count counts the records of each key. Records without a value are skipped.
func (g *GroupedStream[K, V]) Count(opts ...Option) *Table[K, int64] {
	t := aggregate(g, "count", opts, serde.Int64, countAdd, nil)
	t.node.ValueBlind = true
	return t
}

// Reduce combines the values of each key: the first value is the aggregate,
// and each later one is combined with it by fn.
func (g *GroupedStream[K, V]) Reduce(fn func(agg, v V) V, opts ...Option) *Table[K, V] {
	return aggregate(g, "reduce", opts, g.s.vs, reduceAdd(fn), nilFuncErr(fn == nil, "reduce"))
}

func nilFuncErr(isNil bool, what string) error {
	if isNil {
		return errNilFunc(what)
	}
	return nil
}

// Aggregate folds the records of each key into an aggregate that starts as
// init() and is updated by fn. The aggregate's serde defaults to serde.For
// of its type; set it with [ValueSerde].
func Aggregate[K, V, VA any](g *GroupedStream[K, V], init func() VA, fn func(K, V, VA) VA, opts ...Option) *Table[K, VA] {
	return aggregate(g, "aggregate", opts, defaultSerde[VA](), aggregateAdd(init, fn), errors.Join(nilFuncErr(init == nil, "init"), nilFuncErr(fn == nil, "aggregate")))
}

// GroupedTable is a table re-grouped by a new key, ready for an aggregation
// with an adder and a subtractor: [GroupedTable.Count],
// [GroupedTable.Reduce] or [AggregateTable].
type GroupedTable[K, V any] struct {
	b    *Builder
	sel  *topo.Node
	ks   serde.Serde[K]
	vs   serde.Serde[V]
	name string
	// selector computes the new key and value of a row.
	selector func(k, v any) (any, any)
	src      *topo.Node // the repartitioned changes, once an aggregation asked
}

// GroupTable re-groups a table by a new key and value computed from each
// row. An update of a row moves its contribution: the aggregation subtracts
// the old row from the old key's aggregate and adds the new row to the new
// key's; a delete only subtracts. [Named] names the repartition topic.
func GroupTable[K, V, K2, V2 any](t *Table[K, V], fn func(K, V) (K2, V2), opts ...Option) *GroupedTable[K2, V2] {
	o, err := t.b.opts("GroupTable", opts)
	t.kt.enableSendingOldValues(true) // as Kafka Streams' KTableImpl.groupBy
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "table-group-by", Parents: []*topo.Node{t.node}}
	n.Name = t.b.name("table-group-by", o, n.Parents, "")
	g := &GroupedTable[K2, V2]{b: t.b, sel: n, ks: defaultSerde[K2](), vs: defaultSerde[V2](), name: n.Name}
	// The first aggregation makes the real processor, once the serdes are
	// final; without one the node forwards nothing.
	n.New = stateless(func(*topo.Context, topo.Record) error { return nil })
	t.b.add(n, errors.Join(err, nilFuncErr(fn == nil, "group-by")))
	g.selector = func(k any, v any) (any, any) {
		k2, v2 := fn(as[K](k), v.(V))
		return k2, v2
	}
	return g
}

// WithSerdes sets the serdes for the repartition topic and the store.
func (g *GroupedTable[K, V]) WithSerdes(keySerde serde.Serde[K], valueSerde serde.Serde[V]) *GroupedTable[K, V] {
	if keySerde != nil {
		g.ks = keySerde
	}
	if valueSerde != nil {
		g.vs = valueSerde
	}
	return g
}

// tableAgg folds table changes into an aggregate: sub takes back an old
// value (and may find there is no aggregate left), add adds a new one.
type tableAgg struct {
	add func(k, v, agg any, exists bool) any
	sub func(k, v, agg any, exists bool) (any, bool)
}

func aggregateTable[K, V, VA any](g *GroupedTable[K, V], op string, opts []Option, vas serde.Serde[VA], fns tableAgg, nilErr error) *Table[K, VA] {
	b := g.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde")
	vas, serr := valueSerdeOpt(o, vas)
	kc := codecOf(g.ks)
	src := g.source()
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{src}}
	n.Name = b.name(op, o, n.Parents, "")
	store := storeName(o, n.Name)
	b.addStore(o, store)
	n.Stores = []string{store}
	avc := codecOf(vas)
	n.New = func() topo.Processor {
		var st kvAccess
		return &fproc{
			init: func(c *topo.Context) error { return st.open(c, store, kc, avc, true) },
			fn: func(c *topo.Context, r topo.Record) error {
				ch := r.Value.(topo.Change)
				kb, old, oldTs, ok, err := st.getKey(r)
				if err != nil {
					return err
				}
				agg, exists := old, ok
				if ch.Old != nil {
					agg, exists = fns.sub(r.Key, ch.Old, agg, exists)
				}
				if ch.New != nil {
					agg, exists = fns.add(r.Key, ch.New, agg, exists), true
				}
				if !exists {
					if !ok {
						return nil
					}
					agg = nil
				}
				return st.updateKey(kb, r, old, agg, later(r.Timestamp, oldTs))
			},
		}
	}
	b.add(n, errors.Join(err, serr, nilErr))
	return kept(&Table[K, VA]{b: b, node: n, ks: g.ks, vs: vas, store: store}, StoreInfo{})
}

// source writes the re-grouped changes through the repartition topic, once,
// and returns the node that reads them back: every aggregation of the
// grouped table shares it.
func (g *GroupedTable[K, V]) source() *topo.Node {
	if g.src != nil {
		return g.src
	}
	b := g.b
	kc, vc := codecOf(g.ks), codecOf(g.vs)
	sel := g.selector
	g.sel.New = stateless(func(c *topo.Context, r topo.Record) error {
		ch := r.Value.(topo.Change)
		var ko, vo, kn, vn any
		if ch.Old != nil {
			ko, vo = sel(r.Key, ch.Old)
		}
		if ch.New != nil {
			kn, vn = sel(r.Key, ch.New)
		}
		if ch.Old != nil && ch.New != nil {
			kbo, err1 := kc.Encode(ko)
			kbn, err2 := kc.Encode(kn)
			if err := errors.Join(err1, err2); err != nil {
				return &serde.Error{Topic: g.name + "-repartition", Partition: -1, Offset: -1, Part: "key", Encode: true, Err: err}
			}
			if bytes.Equal(kbo, kbn) {
				// Same group: one atomic update, never an intermediate result.
				r.Key, r.Value = kn, topo.Change{Old: vo, New: vn}
				return c.Forward(r)
			}
		}
		if ch.Old != nil {
			sub := r
			sub.Key, sub.Value = ko, topo.Change{Old: vo}
			if err := c.Forward(sub); err != nil {
				return err
			}
		}
		if ch.New != nil {
			r.Key, r.Value = kn, topo.Change{New: vn}
			return c.Forward(r)
		}
		return nil
	})
	it := &topo.InternalTopic{Name: g.name + "-repartition", Kind: topo.RepartitionTopic}
	b.add(&topo.Node{Name: g.name + "-sink", Kind: topo.SinkNode, Op: "repartition-sink", Topic: it.Name, Internal: true, InternalTopic: it,
		Parents: []*topo.Node{g.sel}, KeyCodec: kc, ValueCodec: vc, ChangeValues: true}, nilSerdes(g.ks == nil, g.vs == nil))
	g.src = b.add(&topo.Node{Name: g.name + "-source", Kind: topo.SourceNode, Op: "repartition-source", Topic: it.Name, Internal: true,
		KeyCodec: kc, ValueCodec: vc, ChangeValues: true, KeyComparable: keyComparable[K]()}, nil)

	return g.src
}

// Count counts the rows in each group. A group whose rows all left keeps
// the count 0, as in Kafka Streams.
func (g *GroupedTable[K, V]) Count(opts ...Option) *Table[K, int64] {
	return aggregateTable(g, "table-count", opts, serde.Int64, tableAgg{
		add: func(_, _, agg any, exists bool) any {
			if !exists {
				return int64(1)
			}
			return agg.(int64) + 1
		},
		sub: func(_, _, agg any, exists bool) (any, bool) {
			if !exists {
				return int64(-1), true
			}
			return agg.(int64) - 1, true
		},
	}, nil)
}

// Reduce combines the rows of each group: adder adds a row's value to the
// aggregate, subtractor takes one back. The first value of a group is its
// aggregate.
func (g *GroupedTable[K, V]) Reduce(adder, subtractor func(agg, v V) V, opts ...Option) *Table[K, V] {
	return aggregateTable(g, "table-reduce", opts, g.vs, tableAgg{
		add: func(_, v, agg any, exists bool) any {
			if !exists {
				return v
			}
			return adder(agg.(V), v.(V))
		},
		sub: func(_, v, agg any, exists bool) (any, bool) {
			if !exists {
				return nil, false
			}
			return subtractor(agg.(V), v.(V)), true
		},
	}, errors.Join(nilFuncErr(adder == nil, "adder"), nilFuncErr(subtractor == nil, "subtractor")))
}

// AggregateTable folds the rows of each group into an aggregate that starts
// as init(): adder adds a row's value, subtractor takes one back. When a row
// moves from one group to another, or is updated, the subtractor sees its old
// value before the adder sees the new one.
func AggregateTable[K, V, VA any](g *GroupedTable[K, V], init func() VA, adder, subtractor func(K, V, VA) VA, opts ...Option) *Table[K, VA] {
	start := func(agg any, exists bool) VA {
		if !exists {
			return init()
		}
		return agg.(VA)
	}
	return aggregateTable(g, "table-aggregate", opts, defaultSerde[VA](), tableAgg{
		add: func(k, v, agg any, exists bool) any {
			return adder(as[K](k), v.(V), start(agg, exists))
		},
		sub: func(k, v, agg any, exists bool) (any, bool) {
			return subtractor(as[K](k), v.(V), start(agg, exists)), true
		},
	}, errors.Join(nilFuncErr(init == nil, "init"), nilFuncErr(adder == nil, "adder"), nilFuncErr(subtractor == nil, "subtractor")))
}

// Cogrouped aggregates several grouped streams, each with its own
// aggregator, into one table. Make one with [Cogroup], add streams with
// [CogroupWith], finish with [Cogrouped.Aggregate].
type Cogrouped[K, VA any] struct {
	b     *Builder
	ks    serde.Serde[K]
	parts []cogroupPart
}

type cogroupPart struct {
	in  *topo.Node
	add func(k, v, agg any) any
	err error
}

// Cogroup starts a cogrouped aggregation with one grouped stream and its
// aggregator.
func Cogroup[K, V, VA any](g *GroupedStream[K, V], fn func(K, V, VA) VA) *Cogrouped[K, VA] {
	c := &Cogrouped[K, VA]{b: g.s.b, ks: g.s.ks}
	return CogroupWith(c, g, fn)
}

// CogroupWith adds a grouped stream, with the aggregator of its values, to a
// cogrouped aggregation. Every stream must have the same key type and be
// partitioned alike.
func CogroupWith[K, V, VA any](c *Cogrouped[K, VA], g *GroupedStream[K, V], fn func(K, V, VA) VA) *Cogrouped[K, VA] {
	in := g.input()
	c.parts = append(c.parts, cogroupPart{
		in:  in.node,
		add: func(k, v, agg any) any { return fn(as[K](k), v.(V), agg.(VA)) },
		err: errors.Join(g.err, c.b.same(g.s.b), nilFuncErr(fn == nil, "aggregate")),
	})
	return c
}

// Aggregate finishes the cogrouped aggregation: every key's aggregate starts
// as init() and each record is folded in by its own stream's aggregator.
func (c *Cogrouped[K, VA]) Aggregate(init func() VA, opts ...Option) *Table[K, VA] {
	o, err := c.b.opts("Cogroup", opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde")
	vas, serr := valueSerdeOpt(o, defaultSerde[VA]())
	name := c.b.name("cogroup", o, c.parents(), "")
	store := storeName(o, name)
	c.b.addStore(o, store)
	kc, vc := codecOf(c.ks), codecOf(vas)
	n := c.finish(name, []string{store}, func(add aggFunc) func() topo.Processor { return streamAggProc(store, kc, vc, add) }, init, errors.Join(err, serr))
	return kept(&Table[K, VA]{b: c.b, node: n, ks: c.ks, vs: vas, store: store}, StoreInfo{})
}

// parents are the grouped streams' nodes.
func (c *Cogrouped[K, VA]) parents() []*topo.Node {
	var parents []*topo.Node
	for _, p := range c.parts {
		parents = append(parents, p.in)
	}
	return parents
}

// finish adds a node per stream, each folding its records into the shared
// stores with its own aggregator through a processor that proc makes, and
// the node that merges their changes, named name.
func (c *Cogrouped[K, VA]) finish(name string, stores []string, proc func(add aggFunc) func() topo.Processor, init func() VA, err error) *topo.Node {
	var aggs []*topo.Node
	for i, p := range c.parts {
		add := p.add
		n := &topo.Node{Name: name + "-agg-" + itoa(i), Kind: topo.ProcessorNode, Op: "cogroup-aggregate", Parents: []*topo.Node{p.in}, Stores: stores,
			New: proc(func(k, v, agg any, exists bool) any {
				if !exists {
					agg = init()
				}
				return add(k, v, agg)
			})}
		aggs = append(aggs, c.b.add(n, p.err))
	}
	n := &topo.Node{Name: name, Kind: topo.ProcessorNode, Op: "cogroup", Parents: aggs, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}
	return c.b.add(n, errors.Join(err, nilFuncErr(init == nil, "init")))
}

// WindowedCogroup finishes a cogrouped aggregation in windows (tumbling,
// hopping or sliding): each record is folded, by its own stream's
// aggregator, into the windows holding it, whose aggregates start as init().
// Each stream's aggregation has its own stream time (as in Kafka Streams,
// where each is a window aggregation of its own writing the shared store):
// a window closes for a stream's records when that stream's stream time
// passes it. A record without a key or value is dropped. The options are
// those of [WindowedAggregate].
func WindowedCogroup[K, VA any](c *Cogrouped[K, VA], w TimeWindows, init func() VA, opts ...Option) *Table[Windowed[K], VA] {
	o, err := c.b.opts("WindowedCogroup", opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "EmitFinal", "EmitInterval", "Retention")
	vas, serr := valueSerdeOpt(o, defaultSerde[VA]())
	if werr := w.check(); werr != nil {
		err = errors.Join(err, fmt.Errorf("WindowedCogroup: %w", werr))
	}
	name := c.b.name("windowed-cogroup", o, c.parents(), "")
	ks, wb, rerr := timeWindowBase(c.b, name, o, c.ks, vas, w)
	n := c.finish(name, wb.stores(), wb.processor, init, errors.Join(err, serr, rerr))
	n.Typed = windowClose{w.closeAfter()}
	return keptAs(&Table[Windowed[K], VA]{b: c.b, node: n, ks: ks, vs: vas, store: wb.store}, StoreInfo{Kind: WindowKind, WindowSize: w.size}, c.ks)
}

// SessionCogroup finishes a cogrouped aggregation in sessions: each record
// is folded, by its own stream's aggregator, into its key's session; when a
// record falls into several sessions their aggregates are combined first,
// from init(), by merge (see [SessionAggregate]). Each stream's aggregation
// has its own stream time, as in [WindowedCogroup]. A record without a key
// or value is dropped. The options are those of [SessionAggregate].
func SessionCogroup[K, VA any](c *Cogrouped[K, VA], w Sessions, init func() VA, merge func(K, VA, VA) VA, opts ...Option) *Table[Windowed[K], VA] {
	o, err := c.b.opts("SessionCogroup", opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "EmitFinal", "EmitInterval", "Retention")
	vas, serr := valueSerdeOpt(o, defaultSerde[VA]())
	if werr := w.check(); werr != nil {
		err = errors.Join(err, fmt.Errorf("SessionCogroup: %w", werr))
	}
	name := c.b.name("session-cogroup", o, c.parents(), "")
	ks, wb, rerr := sessionBase(c.b, name, o, c.ks, vas, w)
	mergeAggs := func(k, acc any, has bool, next any) any {
		if !has {
			acc = init()
		}
		return merge(as[K](k), acc.(VA), next.(VA))
	}
	n := c.finish(name, wb.stores(), func(add aggFunc) func() topo.Processor { return wb.sessionProcessor(add, mergeAggs) }, init,
		errors.Join(err, serr, rerr, nilFuncErr(merge == nil, "merge")))
	n.Typed = windowClose{w.gap + w.grace}
	return keptAs(&Table[Windowed[K], VA]{b: c.b, node: n, ks: ks, vs: vas, store: wb.store}, StoreInfo{Kind: SessionKind}, c.ks)
}

func itoa(i int) string { return strconv.Itoa(i) }

// groupingErr names the grouping a problem of its options belongs to; Build
// reports it on the aggregation's node, the first node the grouping makes.
func groupingErr(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("grouping %q: %w", name, err)
}
