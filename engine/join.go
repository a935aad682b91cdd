package engine

import (
	"errors"
	"fmt"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Joins of a stream with a table, and of two tables, on their keys. Both
// sides must be co-partitioned (the same number of partitions, keys
// partitioned alike): the join runs in one task per partition, which reads
// the table's store. A stream whose key changed is repartitioned first.
// A table kept in no store of its own is materialized for the join.

// Join joins each record of the stream with the table's current value for
// its key: a record whose key the table lacks gives nothing. Only stream
// records trigger the join; table updates change what later records meet.
// A result has the stream record's key, timestamp and headers. Records
// without a key or with a tombstone are dropped (counted as skipped).
// When the table is [Versioned], a record meets the value the table had at
// the record's time (none when that is older than the table's history),
// and with [JoinGrace] records wait for late table updates. Options:
// [Named], [ResultHeaders], [JoinGrace].
func Join[K, V, VT, VR any](s *Stream[K, V], t *Table[K, VT], fn func(key K, value V, tableValue VT) VR, opts ...Option) *Stream[K, VR] {
	return streamTableJoin[K, V, VT, VR](s, t, "stream-table-join", opts, func(k, v, tv any, found bool) (any, bool) {
		if !found {
			return nil, false
		}
		return fn(as[K](k), v.(V), tv.(VT)), true
	}, nilFuncErr(fn == nil, "join"))
}

// LeftJoin is Join that keeps every stream record: one whose key the table
// lacks (or that has no key) is joined with found false and the zero
// table value.
func LeftJoin[K, V, VT, VR any](s *Stream[K, V], t *Table[K, VT], fn func(key K, value V, tableValue VT, found bool) VR, opts ...Option) *Stream[K, VR] {
	return streamTableJoin[K, V, VT, VR](s, t, "stream-table-left-join", opts, func(k, v, tv any, found bool) (any, bool) {
		return fn(as[K](k), v.(V), as[VT](tv), found), true
	}, nilFuncErr(fn == nil, "join"))
}

// streamJoinFunc joins a stream value with the table's (found: there is
// one); ok false: no result.
type streamJoinFunc func(k, v, tv any, found bool) (result any, ok bool)

func streamTableJoin[K, V, VT, VR any](s *Stream[K, V], t *Table[K, VT], op string, opts []Option, join streamJoinFunc, nilErr error) *Stream[K, VR] {
	b := s.b
	o, err := b.opts(op, opts, "ResultHeaders", "JoinGrace")
	err = errors.Join(err, b.same(t.b), nilErr)
	t = t.materialized()
	forward := forwardWith(o.resultHeaders)
	in := s
	if s.rekeyed {
		in = s.repartition(b.name(op+"-repartition", o, []*topo.Node{s.node}, ""), 0, nil)
	}
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{in.node}, Stores: []string{t.store}}
	n.Name = b.name(op, o, n.Parents, t.node.Name)
	kc, vc := codecOf(t.ks), codecOf(t.vs)
	store, left, keep, grace := t.store, op == "stream-table-left-join", t.versioned, o.joinGrace
	if keep > 0 {
		history, index := versionedStores(store)
		n.Stores = append(n.Stores, history, index)
	}
	var buffer string
	switch {
	case grace < 0:
		err = errors.Join(err, fmt.Errorf("JoinGrace %v is negative", grace))
	case grace > 0 && keep == 0:
		err = errors.Join(err, fmt.Errorf("JoinGrace needs a versioned table (the table %q is not: give it the option Versioned)", t.node.Name))
	case grace > keep:
		err = errors.Join(err, fmt.Errorf("JoinGrace %v is longer than the history %v the table %q keeps: records would be joined after its versions are gone", grace, keep, t.node.Name))
	case grace > 0:
		buffer = n.Name + "-buffer"
		b.addStore(o, buffer)
		n.Stores = append(n.Stores, buffer)
	}
	n.New = func() topo.Processor {
		var st kvAccess
		var va versionedAccess
		var buf *joinBuffer
		// lookup returns the table's value for r's key: as of r's time
		// when the table is versioned.
		lookup := func(c *topo.Context, r topo.Record) (any, bool, error) {
			if keep == 0 {
				_, tv, _, found, err := st.getKey(r)
				return tv, found, err
			}
			kb, ok := topo.RawKey(r, kc)
			if !ok {
				var err error
				if kb, err = kc.Encode(r.Key); err != nil {
					return nil, false, st.err("key", nil, true, err)
				}
			}
			return va.asOf(kb, r.Timestamp.UnixMilli())
		}
		joinOne := func(c *topo.Context, r topo.Record) error {
			var tv any
			found := false
			if r.Key != nil {
				var err error
				if tv, found, err = lookup(c, r); err != nil {
					return err
				}
			}
			res, ok := join(r.Key, r.Value, tv, found)
			if !ok {
				return nil
			}
			r.Value = res
			return forward(c, r)
		}
		return &fproc{
			init: func(c *topo.Context) error {
				if keep > 0 {
					if err := va.open(c, store, kc, vc, keep); err != nil {
						return err
					}
					st = va.latest
				} else if err := st.open(c, store, kc, vc, true); err != nil {
					return err
				}
				if buffer != "" {
					bs, err := c.Store(buffer)
					if err != nil {
						return err
					}
					buf = &joinBuffer{st: bs, kc: codecOf(in.ks), vc: codecOf(in.vs), grace: grace.Milliseconds()}
				}
				return nil
			},
			fn: func(c *topo.Context, r topo.Record) error {
				if r.Value == nil {
					c.Skip("tombstone in a stream-table join")
					return nil
				}
				if r.Key == nil && !left {
					c.Skip("record without a key in a stream-table join")
					return nil
				}
				if buf == nil || r.Key == nil {
					// A left join's record without a key has no table value
					// to wait for: it is joined at once (KIP-962; Kafka
					// Streams 4.4 throws on it with a grace period).
					return joinOne(c, r)
				}
				return buf.process(c, r, joinOne)
			},
		}
	}
	b.add(n, errors.Join(err, nilSerdes(t.ks == nil, t.vs == nil)))
	return &Stream[K, VR]{b: b, node: n, ks: in.ks, vs: defaultSerde[VR]()}
}

// materialized is the table, or, if it has no store of its own, a table
// that keeps its changes in one (for a join to read). Kafka Streams reads
// such a table through a value getter, which computes its values from the
// store of the source table upstream; so the node keeping the store is
// transparent: it forwards each change as it gets it, at once. Either way
// the table's source tables become materialized (ktable.valueGetter).
func (t *Table[K, V]) materialized() *Table[K, V] {
	t.kt.valueGetter()
	if t.store != "" {
		return t
	}
	b := t.b
	o, _ := b.opts("materialize", nil)
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "table-materialize", Parents: []*topo.Node{t.node}}
	n.Name = b.name("table-materialize", o, n.Parents, "")
	store := storeName(o, n.Name)
	b.addStore(o, store)
	n.Stores = []string{store}
	kc, vc := codecOf(t.ks), codecOf(t.vs)
	omit := b.omitAbsent
	n.New = func() topo.Processor {
		var st kvAccess
		return &fproc{
			init: func(c *topo.Context) error { return st.openTable(c, store, kc, vc, false, omit) },
			fn: func(c *topo.Context, r topo.Record) error {
				ch, _ := r.Value.(topo.Change)
				return st.update(r, ch.Old, ch.New, r.Timestamp)
			},
		}
	}
	b.add(n, nilSerdes(t.ks == nil, t.vs == nil))
	return kept(&Table[K, V]{b: b, node: n, ks: t.ks, vs: t.vs, store: store, kt: t.kt}, StoreInfo{})
}

// JoinTables joins two tables on their keys: a key has a result while both
// tables have it. Every update of either side recomputes the key's result;
// one that removes it (a delete on either side) goes downstream as a
// delete. A result's timestamp is the later of the two sides'. As in Kafka
// Streams (KTableKTableInnerJoin), an update of a key the other table has
// always goes downstream, a delete of a key that had no result included
// (see [OmitAbsentDeletes]).
func JoinTables[K, VL, VR, V any](l *Table[K, VL], r *Table[K, VR], fn func(key K, left VL, right VR) V, opts ...Option) *Table[K, V] {
	return tableTableJoin[K, VL, VR, V](l, r, "table-table-join", innerTableJoin, opts, func(k, lv, rv any) any {
		if lv == nil || rv == nil {
			return nil
		}
		return fn(as[K](k), lv.(VL), rv.(VR))
	}, nilFuncErr(fn == nil, "join"))
}

// LeftJoinTables is JoinTables where a key has a result while the left
// table has it: without a right value, fn gets found false and the zero
// value. As in Kafka Streams (KTableKTableLeftJoin and RightJoin), an
// update of the right table goes downstream while the left table has the
// key, and one of the left table unless it is a change from nothing to
// nothing and the right table lacks the key.
func LeftJoinTables[K, VL, VR, V any](l *Table[K, VL], r *Table[K, VR], fn func(key K, left VL, right VR, found bool) V, opts ...Option) *Table[K, V] {
	return tableTableJoin[K, VL, VR, V](l, r, "table-table-left-join", leftTableJoin, opts, func(k, lv, rv any) any {
		if lv == nil {
			return nil
		}
		return fn(as[K](k), lv.(VL), as[VR](rv), rv != nil)
	}, nilFuncErr(fn == nil, "join"))
}

// OuterJoinTables is JoinTables where a key has a result while either table
// has it: fn learns which sides are there. As in Kafka Streams
// (KTableKTableOuterJoin), an update of either table goes downstream
// unless it is a change from nothing to nothing and the other table lacks
// the key.
func OuterJoinTables[K, VL, VR, V any](l *Table[K, VL], r *Table[K, VR], fn func(key K, left VL, leftFound bool, right VR, rightFound bool) V, opts ...Option) *Table[K, V] {
	return tableTableJoin[K, VL, VR, V](l, r, "table-table-outer-join", outerTableJoin, opts, func(k, lv, rv any) any {
		if lv == nil && rv == nil {
			return nil
		}
		return fn(as[K](k), as[VL](lv), lv != nil, as[VR](rv), rv != nil)
	}, nilFuncErr(fn == nil, "join"))
}

// tableJoinFunc is a key's join result for the two sides' values (nil:
// absent), nil for none.
type tableJoinFunc func(k, lv, rv any) any

type tableJoinKind int

const (
	innerTableJoin tableJoinKind = iota
	leftTableJoin
	outerTableJoin
)

func tableTableJoin[K, VL, VR, V any](l *Table[K, VL], r *Table[K, VR], op string, kind tableJoinKind, opts []Option, join tableJoinFunc, nilErr error) *Table[K, V] {
	b := l.b
	o, err := b.opts(op, opts, "ResultHeaders")
	err = errors.Join(err, b.same(r.b), nilErr)
	// Kafka Streams' KTableImpl.doJoin: the outer sides send old values,
	// both tables are read through value getters.
	lkt, rkt := l.kt, r.kt
	if kind != innerTableJoin {
		lkt.enableSendingOldValues(true)
	}
	if kind == outerTableJoin {
		rkt.enableSendingOldValues(true)
	}
	l, r = l.materialized(), r.materialized()
	kt := &ktable{kind: ktableProcessor}
	kt.enable = func(bool) bool {
		lkt.enableSendingOldValues(true)
		rkt.enableSendingOldValues(true)
		kt.sendOld = true
		return true
	}
	name := b.name(op, o, []*topo.Node{l.node, r.node}, "")
	forward := forwardWith(o.resultHeaders)
	omit := b.omitAbsent
	lkc, lvc := codecOf(l.ks), codecOf(l.vs)
	rkc, rvc := codecOf(r.ks), codecOf(r.vs)
	side := func(suffix string, parent *topo.Node, otherStore string, okc, ovc topo.Codec, leftSide bool) *topo.Node {
		// needOther: the side forwards nothing while the other table lacks
		// the key (KTableKTableInnerJoin, and KTableKTableRightJoin, the
		// right side of a left join); the others drop only a change from
		// nothing to nothing then.
		needOther := kind == innerTableJoin || kind == leftTableJoin && !leftSide
		n := &topo.Node{Name: name + suffix, Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{parent}, Stores: []string{l.store, r.store}}
		n.New = func() topo.Processor {
			var other kvAccess
			return &fproc{
				// The other table as last sent downstream, beneath the
				// record cache (see the package doc's differences).
				init: func(c *topo.Context) error { return other.open(c, otherStore, okc, ovc, false) },
				fn: func(c *topo.Context, rec topo.Record) error {
					if rec.Key == nil {
						c.Skip("record without a key in a table-table join")
						return nil
					}
					ch, _ := rec.Value.(topo.Change)
					_, ov, ots, found, err := other.getKey(rec)
					if err != nil {
						return err
					}
					if !found {
						ov = nil
						if needOther || ch.Old == nil && ch.New == nil {
							return nil
						}
					}
					res := func(v any) any {
						if leftSide {
							return join(rec.Key, v, ov)
						}
						return join(rec.Key, ov, v)
					}
					oldRes, newRes := res(ch.Old), res(ch.New)
					if oldRes == nil && newRes == nil && omit {
						return nil
					}
					rec.Value = topo.Change{Old: oldRes, New: newRes}
					if found && ots.After(rec.Timestamp) {
						rec.Timestamp = ots
					}
					return forward(c, rec)
				},
			}
		}
		return b.add(n, nil)
	}
	ln := side("-left", l.node, r.store, rkc, rvc, true)
	rn := side("-right", r.node, l.store, lkc, lvc, false)
	n := &topo.Node{Name: name, Kind: topo.ProcessorNode, Op: op + "-merge", Parents: []*topo.Node{ln, rn}, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}
	b.add(n, errors.Join(err, nilSerdes(l.ks == nil || r.ks == nil, l.vs == nil || r.vs == nil)))
	return &Table[K, V]{b: b, node: n, ks: l.ks, vs: defaultSerde[V](), kt: kt}
}

// JoinGlobal joins each record of the stream with the global table's value
// for the key that keyOf picks from the record (its key, a field of its
// value): a record whose lookup key the table lacks gives nothing. A global
// table holds every partition on every instance, so the stream needs no
// repartitioning, whatever its key. Only stream records trigger the join.
// A result has the stream record's key, timestamp and headers. Records with
// a tombstone are dropped (counted as skipped).
func JoinGlobal[K, V, GK, GV, VR any](s *Stream[K, V], g *GlobalTable[GK, GV], keyOf func(key K, value V) GK, fn func(key K, value V, tableValue GV) VR, opts ...Option) *Stream[K, VR] {
	return globalJoin[K, V, GK, GV, VR](s, g, "global-join", opts, keyOf, func(k, v, gv any, found bool) (any, bool) {
		if !found {
			return nil, false
		}
		return fn(as[K](k), v.(V), gv.(GV)), true
	}, errors.Join(nilFuncErr(keyOf == nil, "key"), nilFuncErr(fn == nil, "join")))
}

// LeftJoinGlobal is JoinGlobal that keeps every stream record: one whose
// lookup key the table lacks is joined with found false and the zero value.
func LeftJoinGlobal[K, V, GK, GV, VR any](s *Stream[K, V], g *GlobalTable[GK, GV], keyOf func(key K, value V) GK, fn func(key K, value V, tableValue GV, found bool) VR, opts ...Option) *Stream[K, VR] {
	return globalJoin[K, V, GK, GV, VR](s, g, "global-left-join", opts, keyOf, func(k, v, gv any, found bool) (any, bool) {
		return fn(as[K](k), v.(V), as[GV](gv), found), true
	}, errors.Join(nilFuncErr(keyOf == nil, "key"), nilFuncErr(fn == nil, "join")))
}

func globalJoin[K, V, GK, GV, VR any](s *Stream[K, V], g *GlobalTable[GK, GV], op string, opts []Option, keyOf func(K, V) GK, join streamJoinFunc, nilErr error) *Stream[K, VR] {
	b := s.b
	o, err := b.opts(op, opts, "ResultHeaders")
	err = errors.Join(err, b.same(g.b), nilErr)
	forward := forwardWith(o.resultHeaders)
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{s.node}, GlobalStores: []string{g.store}}
	n.Name = b.name(op, o, n.Parents, g.store)
	kc, vc := codecOf(g.ks), codecOf(g.vs)
	store := g.store
	n.New = func() topo.Processor {
		var st kvAccess
		return &fproc{
			init: func(c *topo.Context) error { return st.open(c, store, kc, vc, false) },
			fn: func(c *topo.Context, r topo.Record) error {
				if r.Value == nil {
					c.Skip("tombstone in a global table join")
					return nil
				}
				gk := keyOf(as[K](r.Key), r.Value.(V))
				kb, err := kc.Encode(gk)
				if err != nil {
					return st.err("key", nil, true, err)
				}
				gv, _, found, err := st.getEncoded(kb)
				if err != nil {
					return err
				}
				res, ok := join(r.Key, r.Value, gv, found)
				if !ok {
					return nil
				}
				r.Value = res
				return forward(c, r)
			},
		}
	}
	b.add(n, errors.Join(err, nilSerdes(g.ks == nil, g.vs == nil)))
	return &Stream[K, VR]{b: b, node: n, ks: s.ks, vs: defaultSerde[VR](), rekeyed: s.rekeyed}
}
