package engine

import (
	"errors"
	"fmt"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Stream is a record stream: every record is a fact of its own, an insert.
//
// A tombstone (a record without a value, see [Record]) never reaches a user
// function of the DSL. Operations that keep the key (Filter, FilterNot,
// MapValues, FlatMapValues, Merge, Repartition, To, ToTable) pass it on
// unchanged, so that deletes reach the tables and topics downstream;
// operations that need the value to act (Map, FlatMap, SelectKey, Split,
// GroupBy, and the aggregations) drop it and count it as skipped. Peek and
// Foreach see only records with values.
type Stream[K, V any] struct {
	b    *Builder
	node *topo.Node
	ks   serde.Serde[K]
	vs   serde.Serde[V]
	// rekeyed: the key may no longer match the partitioning, so a stateful
	// operation must repartition first.
	rekeyed bool
}

func defaultSerde[T any]() serde.Serde[T] { return serde.For[T]() }

// NewStream reads a topic as a stream.
func NewStream[K, V any](b *Builder, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) *Stream[K, V] {
	o, err := b.opts("NewStream", opts, "WithTimestamps", "WithWallClockTimestamps")
	n := &topo.Node{Kind: topo.SourceNode, Op: "source", Topic: topic, KeyCodec: codecOf(keySerde), ValueCodec: codecOf(valueSerde), KeyComparable: keyComparable[K]()}
	n.Name = b.name("source", o, nil, topic)
	n.Typed = newSourceStep(keySerde, valueSerde)
	b.add(n, errors.Join(err, nilSerdes(keySerde == nil, valueSerde == nil), sourceTimes[K, V](n, o)))
	return &Stream[K, V]{b: b, node: n, ks: keySerde, vs: valueSerde}
}

func nilSerdes(key, value bool) error {
	switch {
	case key && value:
		return errors.New("the key and value serdes are nil")
	case key:
		return errors.New("the key serde is nil")
	case value:
		return errors.New("the value serde is nil")
	}
	return nil
}

// Name is the name of the stream's node.
func (s *Stream[K, V]) Name() string { return s.node.Name }

// WithSerdes returns the same stream with other serdes for the topics and
// stores that follow it. Operations that change a type default to
// serde.For of the new type.
func (s *Stream[K, V]) WithSerdes(keySerde serde.Serde[K], valueSerde serde.Serde[V]) *Stream[K, V] {
	c := *s
	if keySerde != nil {
		c.ks = keySerde
	}
	if valueSerde != nil {
		c.vs = valueSerde
	}
	return &c
}

// child adds a processor node below s.
func (s *Stream[K, V]) child(op string, opts []Option, fn func(c *topo.Context, r topo.Record) error, allowed ...string) (*topo.Node, *options) {
	o, err := s.b.opts(op, opts, allowed...)
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{s.node}, New: stateless(fn)}
	n.Name = s.b.name(op, o, n.Parents, "")
	s.b.add(n, err)
	return n, o
}

func derive[K, V, K2, V2 any](s *Stream[K, V], n *topo.Node, ks serde.Serde[K2], vs serde.Serde[V2], rekeyed bool) *Stream[K2, V2] {
	return &Stream[K2, V2]{b: s.b, node: n, ks: ks, vs: vs, rekeyed: rekeyed}
}

func keep[K, V any](s *Stream[K, V], n *topo.Node) *Stream[K, V] {
	return &Stream[K, V]{b: s.b, node: n, ks: s.ks, vs: s.vs, rekeyed: s.rekeyed}
}

func errNilFunc(what string) error { return fmt.Errorf("the %s function is nil", what) }

// Filter keeps the records for which pred is true.
func (s *Stream[K, V]) Filter(pred func(K, V) bool, opts ...Option) *Stream[K, V] {
	return s.filter("filter", pred, true, opts)
}

// FilterNot keeps the records for which pred is false.
func (s *Stream[K, V]) FilterNot(pred func(K, V) bool, opts ...Option) *Stream[K, V] {
	return s.filter("filter-not", pred, false, opts)
}

func (s *Stream[K, V]) filter(op string, pred func(K, V) bool, want bool, opts []Option) *Stream[K, V] {
	n, _ := s.child(op, opts, func(c *topo.Context, r topo.Record) error {
		if r.Value == nil || pred(as[K](r.Key), r.Value.(V)) == want {
			return c.Forward(r)
		}
		return nil
	})
	if pred == nil {
		n.Err = errors.Join(n.Err, errNilFunc("predicate"))
	}
	n.Typed = filterStep[K, V]{pred, want}
	return keep(s, n)
}

// Peek calls fn for every record with a value and passes the records on.
func (s *Stream[K, V]) Peek(fn func(K, V), opts ...Option) *Stream[K, V] {
	n, _ := s.child("peek", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value != nil {
			fn(as[K](r.Key), r.Value.(V))
		}
		return c.Forward(r)
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("peek"))
	}
	n.Typed = peekStep[K, V]{fn}
	return keep(s, n)
}

// Foreach calls fn for every record with a value. It ends the stream.
func (s *Stream[K, V]) Foreach(fn func(K, V), opts ...Option) {
	n, _ := s.child("foreach", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value != nil {
			fn(as[K](r.Key), r.Value.(V))
		}
		return nil
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("foreach"))
	}
	n.Typed = foreachStep[K, V]{fn}
}

// Merge interleaves two streams of the same types, in processing order.
func (s *Stream[K, V]) Merge(other *Stream[K, V], opts ...Option) *Stream[K, V] {
	o, err := s.b.opts("Merge", opts)
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "merge", Parents: []*topo.Node{s.node, other.node}, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}
	n.Name = s.b.name("merge", o, n.Parents, "")
	s.b.add(n, errors.Join(err, s.b.same(other.b)))
	m := keep(s, n)
	m.rekeyed = s.rekeyed || other.rekeyed
	return m
}

// Map changes each record's key and value. The stream is repartitioned
// before any stateful operation that follows.
func Map[K, V, K2, V2 any](s *Stream[K, V], fn func(K, V) (K2, V2), opts ...Option) *Stream[K2, V2] {
	n, _ := s.child("map", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value == nil {
			c.Skip("tombstone in Map")
			return nil
		}
		k, v := fn(as[K](r.Key), r.Value.(V))
		r.Key, r.Value = k, v
		return c.Forward(r)
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("map"))
	}
	if plain[K2]() && plain[V2]() {
		n.Typed = mapStep[K, V, K2, V2]{n, "Map", fn}
	}
	return derive(s, n, defaultSerde[K2](), defaultSerde[V2](), true)
}

// MapValues changes each record's value and keeps its key (so no
// repartitioning follows). Tombstones pass unchanged.
func MapValues[K, V, V2 any](s *Stream[K, V], fn func(K, V) V2, opts ...Option) *Stream[K, V2] {
	n, _ := s.child("map-values", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value != nil {
			r.Value = fn(as[K](r.Key), r.Value.(V))
		}
		return c.Forward(r)
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("map"))
	}
	if plain[V2]() {
		n.Typed = mapValuesStep[K, V, V2]{fn}
	}
	return derive(s, n, s.ks, defaultSerde[V2](), s.rekeyed)
}

// SelectKey gives each record a new key computed from it; the value stays.
// The stream is repartitioned before any stateful operation that follows.
func SelectKey[K, V, K2 any](s *Stream[K, V], fn func(K, V) K2, opts ...Option) *Stream[K2, V] {
	n, _ := s.child("select-key", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value == nil {
			c.Skip("tombstone in SelectKey")
			return nil
		}
		r.Key = fn(as[K](r.Key), r.Value.(V))
		return c.Forward(r)
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("key"))
	}
	if plain[K2]() {
		n.Typed = mapStep[K, V, K2, V]{n, "SelectKey", func(k K, v V) (K2, V) { return fn(k, v), v }}
	}
	return derive(s, n, defaultSerde[K2](), s.vs, true)
}

// FlatMap turns each record into zero or more records with new keys and
// values, all with the input's timestamp and headers.
func FlatMap[K, V, K2, V2 any](s *Stream[K, V], fn func(K, V) []KeyValue[K2, V2], opts ...Option) *Stream[K2, V2] {
	n, _ := s.child("flat-map", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value == nil {
			c.Skip("tombstone in FlatMap")
			return nil
		}
		for _, kv := range fn(as[K](r.Key), r.Value.(V)) {
			out := r
			out.Key, out.Value = kv.Key, kv.Value
			if err := c.Forward(out); err != nil {
				return err
			}
		}
		return nil
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("flat-map"))
	}
	if plain[K2]() && plain[V2]() {
		n.Typed = flatMapStep[K, V, K2, V2]{n, fn}
	}
	return derive(s, n, defaultSerde[K2](), defaultSerde[V2](), true)
}

// FlatMapValues turns each record into zero or more records with the same
// key. A tombstone passes once, unchanged.
func FlatMapValues[K, V, V2 any](s *Stream[K, V], fn func(K, V) []V2, opts ...Option) *Stream[K, V2] {
	n, _ := s.child("flat-map-values", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value == nil {
			return c.Forward(r)
		}
		for _, v := range fn(as[K](r.Key), r.Value.(V)) {
			out := r
			out.Value = v
			if err := c.Forward(out); err != nil {
				return err
			}
		}
		return nil
	})
	if fn == nil {
		n.Err = errors.Join(n.Err, errNilFunc("flat-map"))
	}
	if plain[V2]() {
		n.Typed = flatMapValuesStep[K, V, V2]{fn}
	}
	return derive(s, n, s.ks, defaultSerde[V2](), s.rekeyed)
}

// To writes the stream to a topic with the stream's serdes. A tombstone is
// written as a record with a null value. It takes [Named] and [Feedback].
func (s *Stream[K, V]) To(topic string, opts ...Option) {
	o, err := s.b.opts("To", opts, "Feedback")
	n := &topo.Node{Kind: topo.SinkNode, Op: "sink", Topic: topic, Parents: []*topo.Node{s.node}, KeyCodec: codecOf(s.ks), ValueCodec: codecOf(s.vs),
		KeyComparable: keyComparable[K](), ValueComparable: keyComparable[V](), Feedback: o.feedback}
	n.Name = s.b.name("sink", o, n.Parents, topic)
	n.Typed = newSinkStep(n, s.ks, s.vs)
	s.b.add(n, errors.Join(err, nilSerdes(s.ks == nil, s.vs == nil)))
}

// Repartition writes the stream through an internal topic, partitioned by
// its current key, and reads it back as a new sub-topology. Stateful
// operations do this by themselves after a key change; call it to choose the
// partition count ([Partitions]) or the topic's name ([Named]).
func (s *Stream[K, V]) Repartition(opts ...Option) *Stream[K, V] {
	o, err := s.b.opts("Repartition", opts, "Partitions")
	name := s.b.name("repartition", o, []*topo.Node{s.node}, "")
	r := s.repartition(name, o.partitions, err)
	r.rekeyed = false
	return r
}

// RepartitionBy is Repartition with the partitions chosen by partition: it
// is given each record's key and value (for a null key or a tombstone, the
// zero K or V) and the topic's partition count, and returns the partitions
// the record is written to — one, several (each gets a copy: a multicast,
// as KIP-837 lets a Kafka Streams partitioner do), or none (nil: the
// partition its key hashes to, as Repartition does). A partition is written
// once however often it is returned; one outside [0, partitions) fails
// processing with an error naming the topic, the partition and the count,
// as a value that cannot be encoded does. It takes the same options as
// Repartition ([Partitions], [Named]).
//
// Broadcasting to every partition is how an event that concerns all keys
// (a CDC truncate, a configuration change) reaches the state of every task
// downstream. The stream that comes back is taken to be partitioned by its
// key, as after Repartition, so the stateful operations after it do not
// repartition again: keys the function sends elsewhere than their hash have
// their state there, where [KeyOwner] and queries by key do not look.
func (s *Stream[K, V]) RepartitionBy(partition func(key K, value V, partitions int) []int, opts ...Option) *Stream[K, V] {
	o, err := s.b.opts("RepartitionBy", opts, "Partitions")
	name := s.b.name("repartition-by", o, []*topo.Node{s.node}, "")
	if partition == nil {
		err = errors.Join(err, errNilFunc("partition"))
	}
	r := s.repartitionBy(name, o.partitions, partition, err)
	r.rekeyed = false
	return r
}

// repartition adds sink -> internal topic -> source.
func (s *Stream[K, V]) repartition(name string, partitions int, err error) *Stream[K, V] {
	return s.repartitionBy(name, partitions, nil, err)
}

// repartitionBy is repartition with a sink partitioned by partition, if
// not nil.
func (s *Stream[K, V]) repartitionBy(name string, partitions int, partition func(K, V, int) []int, err error) *Stream[K, V] {
	it := &topo.InternalTopic{Name: name + "-repartition", Kind: topo.RepartitionTopic, Partitions: partitions}
	kc, vc := codecOf(s.ks), codecOf(s.vs)
	serdeErr := nilSerdes(s.ks == nil, s.vs == nil)
	sink := &topo.Node{Name: name + "-sink", Kind: topo.SinkNode, Op: "repartition-sink", Topic: it.Name, Internal: true, InternalTopic: it,
		Parents: []*topo.Node{s.node}, KeyCodec: kc, ValueCodec: vc, KeyComparable: keyComparable[K](), DropNullKeys: true}
	sink.Typed = newSinkStep(sink, s.ks, s.vs)
	if partition != nil {
		sink.Partitioner = func(key, value any, n int) []int { return partition(as[K](key), as[V](value), n) }
		if st, ok := sink.Typed.(sinkStep[K, V]); ok {
			st.part = partition
			sink.Typed = st
		}
	}
	s.b.add(sink, errors.Join(err, serdeErr))
	src := s.b.add(&topo.Node{Name: name + "-source", Kind: topo.SourceNode, Op: "repartition-source", Topic: it.Name, Internal: true,
		KeyCodec: kc, ValueCodec: vc, KeyComparable: keyComparable[K](), Typed: newSourceStep(s.ks, s.vs)}, nil)
	return &Stream[K, V]{b: s.b, node: src, ks: s.ks, vs: s.vs}
}

// ToTable turns the stream into a table: each record upserts its key, a
// tombstone deletes it. The table is kept in a store. Like a table of
// [NewTable], it forwards every record, the delete of a key it does not
// have too, unless it is materialized in Kafka Streams' terms and the
// record cache drops that delete.
func (s *Stream[K, V]) ToTable(opts ...Option) *Table[K, V] {
	o, err := s.b.opts("ToTable", opts, "Materialized", "InMemory", "WithoutChangelog", "Versioned")
	in := s
	if s.rekeyed {
		in = s.repartition(s.b.name("to-table", o, []*topo.Node{s.node}, "repartition"), 0, nil)
	}
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "to-table", Parents: []*topo.Node{in.node}}
	n.Name = s.b.name("to-table", o, n.Parents, "")
	return materialize(in.b, n, o, err, in.ks, in.vs)
}

// Splitter routes each record of a stream to the first branch whose
// predicate it satisfies. Make one with [Stream.Split].
type Splitter[K, V any] struct {
	s        *Stream[K, V]
	node     *topo.Node
	branches []splitBranch[K, V]
	done     bool
}

type splitBranch[K, V any] struct {
	pred func(K, V) bool // nil: the default branch
	node *topo.Node
}

// Split starts routing the stream into branches: records go to the first
// branch (in the order they are added) whose predicate is true, else to the
// default branch if there is one, else nowhere.
func (s *Stream[K, V]) Split(opts ...Option) *Splitter[K, V] {
	sp := &Splitter[K, V]{s: s}
	n, _ := s.child("split", opts, func(c *topo.Context, r topo.Record) error {
		if r.Value == nil {
			c.Skip("tombstone in Split")
			return nil
		}
		k, v := as[K](r.Key), r.Value.(V)
		for _, br := range sp.branches {
			if br.pred == nil || br.pred(k, v) {
				return c.ForwardTo(br.node.Name, r)
			}
		}
		return nil
	})
	sp.node = n
	return sp
}

// Branch adds a branch named name (the branch node's name) for the records
// that satisfy pred and no earlier branch.
func (sp *Splitter[K, V]) Branch(name string, pred func(K, V) bool) *Stream[K, V] {
	var err error
	if pred == nil {
		err = errNilFunc("branch predicate")
	}
	return sp.add(name, pred, err)
}

// Default adds the branch for the records no other branch takes. It must be
// the last branch.
func (sp *Splitter[K, V]) Default(name string) *Stream[K, V] {
	return sp.add(name, nil, nil)
}

func (sp *Splitter[K, V]) add(name string, pred func(K, V) bool, err error) *Stream[K, V] {
	if sp.done {
		err = errors.Join(err, fmt.Errorf("branch %q comes after the default branch, which takes every record left", name))
	}
	if name == "" {
		name = sp.s.b.name("branch", nil, []*topo.Node{sp.node}, "")
	}
	if pred == nil && err == nil {
		sp.done = true
	}
	n := sp.s.b.add(&topo.Node{Name: name, Kind: topo.ProcessorNode, Op: "branch", Parents: []*topo.Node{sp.node}, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}, err)
	sp.branches = append(sp.branches, splitBranch[K, V]{pred: pred, node: n})
	return keep(sp.s, n)
}
