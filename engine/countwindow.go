package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// CountWindows cut each key's records into windows of a number of records
// rather than of event time: tumbling (every record in exactly one window)
// when they advance by their size, hopping (overlapping) when by less.
// Records are numbered per key from 0 in the order the key's task processes
// them (its partition's order); window [s, s+size) holds records s to
// s+size-1, and windows start at every multiple of the advance. A window is
// full once it has its size's records; it is never late and never closed by
// time. Quix Streams has these; Kafka Streams does not.
//
// The number of records seen per key is state, kept in a store with a
// changelog beside the windows' aggregates and committed with them, so a
// restart (or a task moving to another instance) carries on with the next
// record number: with exactly-once no record counts in two windows and
// none is dropped. At least once, a crash may count records again, as it
// may in any aggregation; the record numbers go through the record cache
// with the windows, so a commit writes the two together, but what the
// cache evicts between commits is written one entry at a time, and the
// windows after such a crash may then start at other records.
type CountWindows struct {
	size, advance, keep int64
}

// TumblingCountWindows are back-to-back windows of n records per key.
func TumblingCountWindows(n int64) CountWindows {
	return CountWindows{size: n, advance: n, keep: 1}
}

// HoppingCountWindows are windows of size records per key, one starting
// every advance records (advance at most size): a record falls in up to
// size/advance windows (rounded up).
func HoppingCountWindows(size, advance int64) CountWindows {
	return CountWindows{size: size, advance: advance, keep: 1}
}

// Keep keeps each key's last n full windows in the store, for queries
// (default 1: the latest full window and the ones still filling). An older
// full window is deleted from the store and its changelog when a later one
// fills, without a change downstream.
func (w CountWindows) Keep(n int64) CountWindows {
	w.keep = n
	return w
}

// Size is the number of records in a full window.
func (w CountWindows) Size() int64 { return w.size }

func (w CountWindows) check() error {
	var errs []error
	if w.size < 1 {
		errs = append(errs, fmt.Errorf("count window size %d is under one record", w.size))
	}
	if w.advance < 1 || w.advance > w.size {
		errs = append(errs, fmt.Errorf("count window advance %d must be at least 1 and at most the size %d", w.advance, w.size))
	}
	if w.keep < 1 {
		errs = append(errs, fmt.Errorf("Keep(%d): at least the latest full window is kept", w.keep))
	}
	return errors.Join(errs...)
}

// starts returns the first record numbers of the windows holding record i,
// latest first.
func (w CountWindows) starts(i int64) []int64 {
	var out []int64
	for s := i - i%w.advance; s >= 0 && s > i-w.size; s -= w.advance {
		out = append(out, s)
	}
	return out
}

// CountWindow is a count window: the numbers of its key's records it holds,
// [Start, End).
type CountWindow struct {
	Start, End int64
}

func (w CountWindow) String() string { return fmt.Sprintf("#[%d,%d)", w.Start, w.End) }

// CountWindowed is a key in a count window: the key of a count-windowed
// aggregation's table.
type CountWindowed[K any] struct {
	Key    K
	Window CountWindow
}

// CountWindowedSerde encodes a count-windowed key as the inner key's bytes
// followed by the window's first record number, 8 bytes big-endian (the
// layout of [WindowedSerde]); decoding gives the window the given size. A
// key's windows sort in order, but not always together: with keys of
// different lengths, another key's windows may sort between them ("a"'s
// windows and "a\x00"'s interleave). Read a key's windows with
// [QueryCountWindowStore], which keeps them apart.
func CountWindowedSerde[K any](inner serde.Serde[K], size int64) serde.Serde[CountWindowed[K]] {
	return countWindowedSerde[K]{inner: inner, size: size}
}

type countWindowedSerde[K any] struct {
	inner serde.Serde[K]
	size  int64
}

func (s countWindowedSerde[K]) Encode(w CountWindowed[K]) ([]byte, error) {
	kb, err := s.inner.Encode(w.Key)
	if err != nil {
		return nil, err
	}
	return suffixed(kb, w.Window.Start), nil
}

func (s countWindowedSerde[K]) Decode(b []byte) (CountWindowed[K], error) {
	inner, start, err := splitSuffix(b, "a count-windowed key")
	if err != nil {
		return CountWindowed[K]{}, err
	}
	k, err := s.inner.Decode(inner)
	if err != nil {
		return CountWindowed[K]{}, err
	}
	return CountWindowed[K]{Key: k, Window: CountWindow{Start: start, End: start + s.size}}, nil
}

// CountWindowedStream is a grouped stream cut into count windows, ready for
// a count-windowed aggregation.
type CountWindowedStream[K, V any] struct {
	g   *GroupedStream[K, V]
	w   CountWindows
	err error
}

// WindowedByCount cuts the grouped stream into windows of a number of
// records per key.
func (g *GroupedStream[K, V]) WindowedByCount(w CountWindows) *CountWindowedStream[K, V] {
	var err error
	if cerr := w.check(); cerr != nil {
		err = fmt.Errorf("WindowedByCount: %w", cerr)
	}
	return &CountWindowedStream[K, V]{g: g, w: w, err: err}
}

// CountWindowedCount counts the records of each key in each count window
// (a window's count is its size once full). It is mostly useful with
// [EmitFinal], or to see how full each window is.
func CountWindowedCount[K, V any](ws *CountWindowedStream[K, V], opts ...Option) *Table[CountWindowed[K], int64] {
	t := countWindowedAggregate(ws, "count-windowed-count", opts, serde.Int64, countAdd, nil)
	t.node.ValueBlind = true
	return t
}

// CountWindowedReduce combines the values of each key in each count window:
// the first value is the aggregate, each later one is combined with it by
// fn.
func CountWindowedReduce[K, V any](ws *CountWindowedStream[K, V], fn func(agg, v V) V, opts ...Option) *Table[CountWindowed[K], V] {
	return countWindowedAggregate(ws, "count-windowed-reduce", opts, ws.g.s.vs, reduceAdd(fn), nilFuncErr(fn == nil, "reduce"))
}

// CountWindowedAggregate folds the records of each key in each count window
// into an aggregate that starts as init() and is updated by fn.
func CountWindowedAggregate[K, V, VA any](ws *CountWindowedStream[K, V], init func() VA, fn func(K, V, VA) VA, opts ...Option) *Table[CountWindowed[K], VA] {
	return countWindowedAggregate(ws, "count-windowed-aggregate", opts, defaultSerde[VA](), aggregateAdd(init, fn), errors.Join(nilFuncErr(init == nil, "init"), nilFuncErr(fn == nil, "aggregate")))
}

// countWindowedAggregate adds the node that folds each record into the
// count windows holding it. Its stores: the windows, keyed in
// CountWindowedSerde's format, and "<store>-seq", each key's number of
// records so far (8 bytes big-endian).
//
// Every update of a window is emitted, stamped with the latest timestamp
// in it; with EmitFinal, each window once, when it is full.
func countWindowedAggregate[K, V, VA any](ws *CountWindowedStream[K, V], op string, opts []Option, vas serde.Serde[VA], add aggFunc, nilErr error) *Table[CountWindowed[K], VA] {
	g := ws.g
	b := g.s.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "EmitFinal")
	vas, serr := valueSerdeOpt(o, vas)
	in := g.input()
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{in.node}}
	n.Name = b.name(op, o, n.Parents, "")
	var ks serde.Serde[CountWindowed[K]]
	if in.ks != nil {
		ks = CountWindowedSerde(in.ks, ws.w.size)
	}
	store := storeName(o, n.Name)
	// A window store: its keys end with 8 bytes (a record number rather
	// than a time), and the record key before them alone says which
	// partition holds them, for queries.
	b.addStore(o, store).Kind = topo.WindowStore
	b.addStore(o, store+"-seq")
	n.Stores = []string{store, store + "-seq"}
	p := countWindowProc{w: ws.w, final: o.emitFinal, store: store, kc: codecOf(ks), vc: codecOf(vas), ikc: codecOf(in.ks), add: add,
		wkey: func(key any, w CountWindow) any { return CountWindowed[K]{Key: as[K](key), Window: w} }}
	n.New = func() topo.Processor { return p.processor() }
	b.add(n, errors.Join(g.err, ws.err, err, serr, nilErr))
	return keptAs(&Table[CountWindowed[K], VA]{b: b, node: n, ks: ks, vs: vas, store: store}, StoreInfo{Kind: CountWindowKind, WindowRecords: ws.w.size}, in.ks)
}

// countWindowProc is what a count-window processor is made from.
type countWindowProc struct {
	w              CountWindows
	final          bool
	store          string
	kc, vc, ikc    topo.Codec
	add            aggFunc
	wkey           func(key any, w CountWindow) any
	windows, seqSt kvAccess
}

func (p countWindowProc) processor() topo.Processor {
	return &fproc{
		init: func(c *topo.Context) error {
			if err := p.windows.open(c, p.store, p.kc, p.vc, true); err != nil {
				return err
			}
			if p.ikc == nil {
				return fmt.Errorf("engine: store %q: %w", p.store+"-seq", nilSerdes(true, false))
			}
			// Through the record cache like the windows, so that a commit
			// writes the two together (see countWindowProc).
			s, err := c.TableStore(p.store + "-seq")
			p.seqSt.tbl, p.seqSt.kc = s, p.ikc
			return err
		},
		fn: p.process,
	}
}

func (p *countWindowProc) process(c *topo.Context, r topo.Record) error {
	if r.Key == nil || r.Value == nil {
		c.Skip("record without a key or value in an aggregation")
		return nil
	}
	ikb, ok := topo.RawKey(r, p.ikc)
	if !ok {
		var err error
		if ikb, err = p.ikc.Encode(r.Key); err != nil {
			return p.seqSt.err("key", nil, true, err)
		}
	}
	// The key's record number: how many records it had before this one.
	var i int64
	e, found, err := p.seqSt.tbl.Get(ikb)
	if err != nil {
		return err
	}
	if found {
		if len(e.Value) != 8 {
			return p.seqSt.err("value", e.Value, false, fmt.Errorf("a record count is 8 bytes, not %d", len(e.Value)))
		}
		i = int64(binary.BigEndian.Uint64(e.Value))
	}
	if err := p.seqSt.tbl.UpdateOwned(ikb, binary.BigEndian.AppendUint64(nil, uint64(i+1)), r.Timestamp.UnixMilli(), topo.Record{}, nil, nil); err != nil {
		return err
	}
	for _, s := range p.w.starts(i) {
		win := CountWindow{Start: s, End: s + p.w.size}
		kb := suffixed(ikb, s)
		old, oldTs, ok, err := p.windows.getEncoded(kb)
		if err != nil {
			return err
		}
		agg := p.add(r.Key, r.Value, old, ok)
		ts := later(r.Timestamp, oldTs)
		wr := r
		wr.Key = p.wkey(r.Key, win)
		full := i == win.End-1
		if !p.final {
			if err := p.windows.updateKey(kb, wr, old, agg, ts); err != nil {
				return err
			}
		} else {
			if err := p.windows.writeQuiet(kb, wr, agg, ts); err != nil {
				return err
			}
			if full {
				if err := c.Forward(topo.Record{Key: wr.Key, Value: topo.Change{New: agg}, Timestamp: ts, Headers: r.Headers}); err != nil {
					return err
				}
			}
		}
		if full {
			// Of the full windows, the last keep stay; the one before them goes.
			if gone := s - p.w.keep*p.w.advance; gone >= 0 {
				if err := p.windows.expire(suffixed(ikb, gone), ts); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ReadOnlyCountWindowStore reads the windows of a count-windowed
// aggregation: for each key, the full windows [CountWindows.Keep] keeps and
// the ones still filling.
type ReadOnlyCountWindowStore[K, V any] interface {
	// Get returns the value of key's window starting at record number
	// start.
	Get(key K, start int64) (value V, ok bool, err error)
	// Fetch iterates key's windows, earliest first. A key another
	// instance owns gives a *NotLocalError.
	Fetch(key K) iter.Seq2[KeyValue[CountWindowed[K], V], error]
	// FetchKeys iterates the windows of the keys in [fromKey, toKey), in
	// the partitions this instance reads, in the store's order (each key's
	// windows by start, but those of keys that begin alike may interleave:
	// see [CountWindowedSerde]).
	FetchKeys(fromKey, toKey K) iter.Seq2[KeyValue[CountWindowed[K], V], error]
	// All iterates every window of the partitions this instance reads, in
	// the store's order (see [CountWindowedSerde]).
	All() iter.Seq2[KeyValue[CountWindowed[K], V], error]
}

// QueryCountWindowStore opens the store of a count-windowed aggregation of
// a running topology (its Materialized name) for reading: the serdes of its
// keys and values, and the windows' size in records.
func QueryCountWindowStore[K, V any](q Queryable, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], size int64, opts ...QueryOption) (ReadOnlyCountWindowStore[K, V], error) {
	if keySerde == nil {
		return nil, fmt.Errorf("engine: store %q: %w", store, nilSerdes(true, valueSerde == nil))
	}
	if size < 1 {
		return nil, fmt.Errorf("engine: store %q: count window size %d must be at least 1", store, size)
	}
	if err := checkStore(q, "QueryCountWindowStore", store, StoreInfo{Kind: CountWindowKind, WindowRecords: size}); err != nil {
		return nil, err
	}
	kv, err := openStore(q, store, CountWindowedSerde(keySerde, size), valueSerde, opts...)
	if err != nil {
		return nil, err
	}
	return &countWindowStore[K, V]{kv: kv, inner: keySerde, size: size}, nil
}

type countWindowStore[K, V any] struct {
	kv    *kvStore[CountWindowed[K], V]
	inner serde.Serde[K]
	size  int64
}

func (s *countWindowStore[K, V]) Get(key K, start int64) (V, bool, error) {
	return s.kv.Get(CountWindowed[K]{Key: key, Window: CountWindow{Start: start, End: start + s.size}})
}

func (s *countWindowStore[K, V]) Fetch(key K) iter.Seq2[KeyValue[CountWindowed[K], V], error] {
	kb, err := s.inner.Encode(key)
	if err != nil {
		return errSeq[CountWindowed[K], V](s.kv.serdeErr("key", nil, true, err))
	}
	// The owner and readiness checks of a point read.
	if _, _, err := s.kv.raw.Get(suffixed(bytes.Clone(kb), 0)); err != nil {
		return errSeq[CountWindowed[K], V](err)
	}
	// Every store key that begins with kb, of which those of exactly 8
	// bytes more are key's (longer ones are other keys' that begin alike).
	return s.kv.scanRaw(kb, prefixEnd(kb), func(k []byte) bool { return len(k) == len(kb)+8 })
}

func (s *countWindowStore[K, V]) FetchKeys(fromKey, toKey K) iter.Seq2[KeyValue[CountWindowed[K], V], error] {
	return keyRange(s.kv, s.inner, 8, fromKey, toKey, func([]byte) bool { return true })
}

func (s *countWindowStore[K, V]) All() iter.Seq2[KeyValue[CountWindowed[K], V], error] {
	return s.kv.All()
}
