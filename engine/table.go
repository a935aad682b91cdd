package engine

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Table is a changelog stream seen as a table: each record upserts its key,
// and a tombstone deletes it. Only the latest value of each key counts.
//
// User functions of table operations see only present values. A table
// forwards every update as the key's old and new value, so operations
// downstream can take back what the old value contributed: a filter turns a
// row that stops passing into a delete, and a re-grouped aggregation
// subtracts the old value before adding the new one.
//
// Tables forward the updates Kafka Streams' tables forward, which include,
// in many places, a delete of a key that was not there (a change from
// nothing to nothing, a tombstone in the table's stream): a source table
// forwards every delete it reads, a filter a delete for each row that fails
// it. Which ones depends, as in Kafka Streams, on whether a table node keeps
// a store of its own and sends old values, which the operations added
// downstream decide while the topology is built; the docs of NewTable,
// ToTable, Filter, MapTableValues, the joins and SuppressUntil say how.
// [OmitAbsentDeletes] drops them all.
type Table[K, V any] struct {
	b     *Builder
	node  *topo.Node // forwards topo.Change values
	ks    serde.Serde[K]
	vs    serde.Serde[V]
	store string // the store holding the table, "" if none
	// versioned is the history a versioned table keeps (0: not versioned).
	versioned time.Duration
	// kt is what Kafka Streams' table node would know (nil: an
	// aggregation's table); see ktable.
	kt *ktable
	// kept is the store holding the table as queries read it (nil: none).
	kept *tableStore
}

// NewTable reads a topic as a table, kept in a store (queryable under the
// name given with [Materialized]). As Kafka Streams' source tables, it
// forwards every record it reads, the delete of a key it does not have too,
// except that a table materialized in Kafka Streams' terms — given
// [Materialized] or [Versioned], or read by a join, or sending old values
// to a re-grouping or a suppression — writes through the record cache,
// which drops such a delete (see [OmitAbsentDeletes]).
func NewTable[K, V any](b *Builder, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) *Table[K, V] {
	o, err := b.opts("NewTable", opts, "Materialized", "InMemory", "WithoutChangelog", "WithTimestamps", "WithWallClockTimestamps", "Versioned")
	src := &topo.Node{Kind: topo.SourceNode, Op: "table-source", Topic: topic, KeyCodec: codecOf(keySerde), ValueCodec: codecOf(valueSerde), KeyComparable: keyComparable[K]()}
	src.Name = b.name("table-source", o, nil, topic)
	b.add(src, errors.Join(err, nilSerdes(keySerde == nil, valueSerde == nil), sourceTimes[K, V](src, o)))
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "table", Parents: []*topo.Node{src}}
	n.Name = src.Name + "-table"
	return materialize(b, n, o, nil, keySerde, valueSerde)
}

// materialize completes n as the processor that folds a stream of upserts
// and tombstones into a store and forwards each change, as Kafka Streams'
// KTableSource: every update, the delete of an absent key included, unless
// the table is materialized (see ktable) and the record cache drops it.
func materialize[K, V any](b *Builder, n *topo.Node, o *options, err error, ks serde.Serde[K], vs serde.Serde[V]) *Table[K, V] {
	kt := &ktable{kind: ktableSource, queryable: o.store != "" || slices.Contains(o.set, "Versioned")}
	omit := b.omitAbsent
	store := storeName(o, n.Name)
	b.addStore(o, store)
	n.Stores = []string{store}
	kc, vc := codecOf(ks), codecOf(vs)
	if slices.Contains(o.set, "Versioned") {
		b.addVersioned(o, store)
		history, index := versionedStores(store)
		n.Stores = append(n.Stores, history, index)
		keep := o.versioned
		n.New = func() topo.Processor {
			var a versionedAccess
			return &fproc{
				init: func(c *topo.Context) error { return a.open(c, store, kc, vc, keep) },
				fn:   a.process,
			}
		}
		b.add(n, errors.Join(err, nilSerdes(ks == nil, vs == nil), checkVersioned(keep)))
		return kept(&Table[K, V]{b: b, node: n, ks: ks, vs: vs, store: store, versioned: keep, kt: kt}, StoreInfo{Kind: VersionedKind})
	}
	n.New = func() topo.Processor {
		var st kvAccess
		cached := kt.queryable // final once built
		return &fproc{
			init: func(c *topo.Context) error { return st.openTable(c, store, kc, vc, cached, omit) },
			fn: func(c *topo.Context, r topo.Record) error {
				if r.Key == nil {
					c.Skip("record without a key for a table")
					return nil
				}
				kb, old, _, ok, err := st.getKey(r)
				if err != nil {
					return err
				}
				if r.Value == nil && !ok {
					if omit {
						return nil
					}
					return st.deleteAbsent(kb, r, r.Timestamp)
				}
				return st.updateKey(kb, r, old, r.Value, r.Timestamp)
			},
		}
	}
	b.add(n, errors.Join(err, nilSerdes(ks == nil, vs == nil)))
	return kept(&Table[K, V]{b: b, node: n, ks: ks, vs: vs, store: store, kt: kt}, StoreInfo{})
}

// Name is the name of the table's node.
func (t *Table[K, V]) Name() string { return t.node.Name }

// StoreName is the name of the store holding the table, or "" when the
// table is not kept in a store of its own (see [Materialized]).
func (t *Table[K, V]) StoreName() string { return t.store }

// WithSerdes returns the same table with other serdes for what follows it.
func (t *Table[K, V]) WithSerdes(keySerde serde.Serde[K], valueSerde serde.Serde[V]) *Table[K, V] {
	c := *t
	if keySerde != nil {
		c.ks = keySerde
	}
	if valueSerde != nil {
		c.vs = valueSerde
	}
	return &c
}

// changeNode adds a processor that maps each change of t to a change of the
// result, materializing the result when [Materialized] is given. Its model
// is kt (see ktable); it drops a change from nothing to nothing only where
// drop says so (a filter that sends old values) or with
// [OmitAbsentDeletes], and otherwise forwards it, at once or, with a store,
// as a materialized source table does.
func changeNode[K, V, V2 any](t *Table[K, V], op string, opts []Option, vs2 serde.Serde[V2], mapChange func(k K, c topo.Change) topo.Change, drop func(kt *ktable) bool, model func(store bool) *ktable) *Table[K, V2] {
	o, err := t.b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde")
	vs2, serr := valueSerdeOpt(o, vs2)
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{t.node}}
	n.Name = t.b.name(op, o, n.Parents, "")
	store := ""
	if o.store != "" {
		store = o.store
		t.b.addStore(o, store)
		n.Stores = []string{store}
	} else if o.inMemory || o.noLog {
		err = errors.Join(err, errors.New("InMemory and WithoutChangelog need a store: add Materialized"))
	}
	kt := model(store != "")
	omit := t.b.omitAbsent
	kc, vc := codecOf(t.ks), codecOf(vs2)
	n.New = func() topo.Processor {
		var st kvAccess
		dropAbsent := omit || drop(kt)
		return &fproc{
			init: func(c *topo.Context) error {
				if store == "" {
					return nil
				}
				return st.openTable(c, store, kc, vc, true, omit)
			},
			fn: func(c *topo.Context, r topo.Record) error {
				ch := mapChange(as[K](r.Key), r.Value.(topo.Change))
				if ch.Old == nil && ch.New == nil && dropAbsent {
					return nil
				}
				if store != "" && ch.Old == nil && ch.New == nil {
					// The store has no value for the key either.
					kb, err := kc.Encode(r.Key)
					if err != nil {
						return st.err("key", nil, true, err)
					}
					return st.deleteAbsent(kb, r, r.Timestamp)
				}
				if store != "" {
					return st.update(r, ch.Old, ch.New, r.Timestamp)
				}
				r.Value = ch
				return c.Forward(r)
			},
		}
	}
	t.b.add(n, errors.Join(err, serr))
	return kept(&Table[K, V2]{b: t.b, node: n, ks: t.ks, vs: vs2, store: store, kt: kt}, StoreInfo{})
}

// Filter keeps the rows for which pred is true. A row that stops passing is
// deleted downstream. As Kafka Streams' filter, unless the table downstream
// needs old values (a re-grouping, a left or outer join, a suppression,
// a filter of a materialized table...), a row that fails pred goes
// downstream as a delete whether or not it passed before (see
// [OmitAbsentDeletes]).
func (t *Table[K, V]) Filter(pred func(K, V) bool, opts ...Option) *Table[K, V] {
	return t.filter("table-filter", pred, true, opts)
}

// FilterNot keeps the rows for which pred is false.
func (t *Table[K, V]) FilterNot(pred func(K, V) bool, opts ...Option) *Table[K, V] {
	return t.filter("table-filter-not", pred, false, opts)
}

func (t *Table[K, V]) filter(op string, pred func(K, V) bool, want bool, opts []Option) *Table[K, V] {
	keepIf := func(k K, v any) any {
		if v != nil && pred(k, v.(V)) == want {
			return v
		}
		return nil
	}
	parent := t.kt
	r := changeNode(t, op, opts, t.vs, func(k K, c topo.Change) topo.Change {
		return topo.Change{Old: keepIf(k, c.Old), New: keepIf(k, c.New)}
	}, func(kt *ktable) bool { return kt.sendOld }, func(store bool) *ktable {
		kt := derivedTable(parent, store)
		// KTableFilter asks its parent for old values when it is made,
		// without forcing a store on it.
		kt.sendOld = parent.enableSendingOldValues(false)
		return kt
	})
	if pred == nil {
		r.node.Err = errors.Join(r.node.Err, errNilFunc("predicate"))
	}
	return r
}

// MapTableValues changes each row's value. A delete stays a delete (and a
// delete of a key the table did not have too, as in Kafka Streams; see
// [OmitAbsentDeletes]).
func MapTableValues[K, V, V2 any](t *Table[K, V], fn func(K, V) V2, opts ...Option) *Table[K, V2] {
	apply := func(k K, v any) any {
		if v == nil {
			return nil
		}
		return fn(k, v.(V))
	}
	parent := t.kt
	r := changeNode(t, "table-map-values", opts, defaultSerde[V2](), func(k K, c topo.Change) topo.Change {
		return topo.Change{Old: apply(k, c.Old), New: apply(k, c.New)}
	}, func(*ktable) bool { return false }, func(store bool) *ktable { return derivedTable(parent, store) })
	if fn == nil {
		r.node.Err = errors.Join(r.node.Err, errNilFunc("map"))
	}
	return r
}

// ToStream turns the table's updates into a stream: each update becomes a
// record with the new value, each delete a tombstone.
func (t *Table[K, V]) ToStream(opts ...Option) *Stream[K, V] {
	o, err := t.b.opts("ToStream", opts)
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "to-stream", Parents: []*topo.Node{t.node}, New: stateless(func(c *topo.Context, r topo.Record) error {
		r.Value = r.Value.(topo.Change).New
		return c.Forward(r)
	})}
	n.Name = t.b.name("to-stream", o, n.Parents, "")
	t.b.add(n, err)
	return &Stream[K, V]{b: t.b, node: n, ks: t.ks, vs: t.vs}
}

// GlobalTable is a table that holds every partition of its topic on every
// instance, for joins that look a key up from a stream record's value.
type GlobalTable[K, V any] struct {
	b     *Builder
	store string
	ks    serde.Serde[K]
	vs    serde.Serde[V]
}

// NewGlobalTable reads a whole topic into a global table, kept in a store of
// the given name (default: derived from the topic). The topic is its
// changelog; the store writes none of its own.
func NewGlobalTable[K, V any](b *Builder, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) *GlobalTable[K, V] {
	o, err := b.opts("NewGlobalTable", opts, "Materialized", "InMemory", "WithTimestamps", "WithWallClockTimestamps")
	src := &topo.Node{Kind: topo.SourceNode, Op: "global-source", Topic: topic, Global: true, KeyCodec: codecOf(keySerde), ValueCodec: codecOf(valueSerde), KeyComparable: keyComparable[K]()}
	src.Name = b.name("global-source", o, nil, topic)
	b.add(src, errors.Join(err, nilSerdes(keySerde == nil, valueSerde == nil), sourceTimes[K, V](src, o)))
	store := storeName(o, src.Name)
	b.g.AddStore(&topo.StoreSpec{Name: store, Kind: topo.KeyValueStore, Global: true, InMemory: o.inMemory, Topic: topic})
	kc, vc := codecOf(keySerde), codecOf(valueSerde)
	n := &topo.Node{Name: src.Name + "-table", Kind: topo.ProcessorNode, Op: "global-table", Global: true, Parents: []*topo.Node{src}, Stores: []string{store}}
	n.New = func() topo.Processor {
		var st kvAccess
		return &fproc{
			init: func(c *topo.Context) error { return st.open(c, store, kc, vc, false) },
			fn: func(c *topo.Context, r topo.Record) error {
				if r.Key == nil {
					c.Skip("record without a key for a global table")
					return nil
				}
				if r.Value == nil {
					return st.delete(r.Key, r.Timestamp)
				}
				return st.put(r.Key, r.Value, r.Timestamp)
			},
		}
	}
	b.add(n, nil)
	return &GlobalTable[K, V]{b: b, store: store, ks: keySerde, vs: valueSerde}
}

// StoreName is the name of the store holding the global table.
func (g *GlobalTable[K, V]) StoreName() string { return g.store }

// ValueSerde names the serde of an operation's store values when it is not
// the default for their type (serde.For). Build checks it against the type.
func ValueSerde[T any](s serde.Serde[T]) Option {
	return func(o *options) { o.valueSerde = s; o.set = append(o.set, "ValueSerde") }
}

func valueSerdeOpt[T any](o *options, def serde.Serde[T]) (serde.Serde[T], error) {
	if o.valueSerde == nil {
		return def, nil
	}
	s, ok := o.valueSerde.(serde.Serde[T])
	if !ok {
		return def, fmt.Errorf("ValueSerde is a %T, but the values are %v", o.valueSerde, reflect.TypeFor[T]())
	}
	return s, nil
}
