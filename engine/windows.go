package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Window is a half-open interval of event time, [Start, End).
type Window struct {
	Start, End time.Time
}

func (w Window) String() string {
	return fmt.Sprintf("[%d,%d)", w.Start.UnixMilli(), w.End.UnixMilli())
}

// Windowed is a key in a window: the key of a windowed aggregation's table.
type Windowed[K any] struct {
	Key    K
	Window Window
}

// TimeWindows are windows of a fixed size aligned to the Unix epoch:
// tumbling (each record in exactly one window) when they advance by their
// size, hopping (overlapping) when by less. A record updates a window only
// while the window is open: until its end plus the grace period, in stream
// time (the largest event time its task has seen); a later record for a
// closed window is dropped and counted as skipped.
//
// Sliding windows ([SlidingWindows]) are of the same type: windows of a
// fixed size placed by the records rather than the epoch.
type TimeWindows struct {
	size, advance, grace time.Duration
	sliding              bool
}

// TumblingWindows are back-to-back windows of the given size, without
// grace: a record arriving after stream time passed its window's end is
// dropped. Add grace with [TimeWindows.Grace].
func TumblingWindows(size time.Duration) TimeWindows {
	return TimeWindows{size: size, advance: size}
}

// HoppingWindows are windows of the given size starting every advance
// (which must not exceed the size): a record falls in size/advance windows.
func HoppingWindows(size, advance time.Duration) TimeWindows {
	return TimeWindows{size: size, advance: advance}
}

// Grace keeps each window open for out-of-order records for d after its
// end (in stream time).
func (w TimeWindows) Grace(d time.Duration) TimeWindows {
	w.grace = d
	return w
}

// Size is the windows' size.
func (w TimeWindows) Size() time.Duration { return w.size }

func (w TimeWindows) check() error {
	var errs []error
	if w.size < time.Millisecond {
		errs = append(errs, fmt.Errorf("window size %v is under a millisecond", w.size))
	}
	if !w.sliding && (w.advance < time.Millisecond || w.advance > w.size) {
		errs = append(errs, fmt.Errorf("window advance %v must be at least a millisecond and at most the size %v", w.advance, w.size))
	}
	if w.grace < 0 {
		errs = append(errs, fmt.Errorf("grace %v is negative", w.grace))
	}
	return errors.Join(errs...)
}

// starts returns the starts, in Unix ms, of the windows holding ts, latest
// first.
func (w TimeWindows) starts(ts int64) []int64 {
	size, adv := w.size.Milliseconds(), w.advance.Milliseconds()
	var out []int64
	for s := ts - ts%adv; s >= 0 && s > ts-size; s -= adv {
		out = append(out, s)
	}
	return out
}

// WindowedSerde encodes a windowed key as the inner key's bytes followed by
// the window's start in Unix milliseconds, 8 bytes big-endian (Kafka
// Streams' time-windowed format); decoding gives the window the given size.
func WindowedSerde[K any](inner serde.Serde[K], size time.Duration) serde.Serde[Windowed[K]] {
	return windowedSerde[K]{inner: inner, size: size}
}

type windowedSerde[K any] struct {
	inner serde.Serde[K]
	size  time.Duration
}

func (s windowedSerde[K]) Encode(w Windowed[K]) ([]byte, error) {
	kb, err := s.inner.Encode(w.Key)
	if err != nil {
		return nil, err
	}
	return suffixed(kb, w.Window.Start.UnixMilli()), nil
}

func (s windowedSerde[K]) Decode(b []byte) (Windowed[K], error) {
	inner, ms, err := splitSuffix(b, "a windowed key")
	if err != nil {
		return Windowed[K]{}, err
	}
	k, err := s.inner.Decode(inner)
	if err != nil {
		return Windowed[K]{}, err
	}
	start := topo.TimeOf(ms)
	return Windowed[K]{Key: k, Window: Window{Start: start, End: start.Add(s.size)}}, nil
}

// suffixed is kb followed by n, 8 bytes big-endian: the layout of the
// windowed keys (time and count windows) and of versioned rows, which
// sorts a key's entries together and in the order of n.
func suffixed(kb []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(kb)+8), kb...), uint64(n))
}

// splitSuffix undoes suffixed; what names the key in an error.
func splitSuffix(b []byte, what string) ([]byte, int64, error) {
	if len(b) < 8 {
		return nil, 0, fmt.Errorf("%s needs at least 8 bytes, got %d", what, len(b))
	}
	return b[:len(b)-8], int64(binary.BigEndian.Uint64(b[len(b)-8:])), nil
}

// TimeWindowedStream is a grouped stream cut into time windows, ready for a
// windowed aggregation.
type TimeWindowedStream[K, V any] struct {
	g   *GroupedStream[K, V]
	w   TimeWindows
	err error
}

// WindowedBy cuts the grouped stream into time windows.
func (g *GroupedStream[K, V]) WindowedBy(w TimeWindows) *TimeWindowedStream[K, V] {
	var err error
	if cerr := w.check(); cerr != nil {
		err = fmt.Errorf("WindowedBy: %w", cerr)
	}
	return &TimeWindowedStream[K, V]{g: g, w: w, err: err}
}

// The windowed aggregations are functions, not methods of
// TimeWindowedStream: a method giving a Table[Windowed[K], …] would make Go
// instantiate windows of windows of … without end (a windowed table's
// stream can be grouped and windowed again).

// WindowedCount counts the records of each key in each window.
func WindowedCount[K, V any](ws *TimeWindowedStream[K, V], opts ...Option) *Table[Windowed[K], int64] {
	t := windowedAggregate(ws, "windowed-count", opts, serde.Int64, countAdd, nil)
	t.node.ValueBlind = true
	return t
}

// WindowedReduce combines the values of each key in each window: the first
// value is the aggregate, each later one is combined with it by fn.
func WindowedReduce[K, V any](ws *TimeWindowedStream[K, V], fn func(agg, v V) V, opts ...Option) *Table[Windowed[K], V] {
	return windowedAggregate(ws, "windowed-reduce", opts, ws.g.s.vs, reduceAdd(fn), nilFuncErr(fn == nil, "reduce"))
}

// WindowedAggregate folds the records of each key in each window into an
// aggregate that starts as init() and is updated by fn.
func WindowedAggregate[K, V, VA any](ws *TimeWindowedStream[K, V], init func() VA, fn func(K, V, VA) VA, opts ...Option) *Table[Windowed[K], VA] {
	return windowedAggregate(ws, "windowed-aggregate", opts, defaultSerde[VA](), aggregateAdd(init, fn), errors.Join(nilFuncErr(init == nil, "init"), nilFuncErr(fn == nil, "aggregate")))
}

// windowedAggregate adds the node that folds each record into the windows
// holding it. Its store is keyed by the windowed key in WindowedSerde's
// format.
func windowedAggregate[K, V, VA any](ws *TimeWindowedStream[K, V], op string, opts []Option, vas serde.Serde[VA], add aggFunc, nilErr error) *Table[Windowed[K], VA] {
	g := ws.g
	b := g.s.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "EmitFinal", "Retention")
	vas, serr := valueSerdeOpt(o, vas)
	in := g.input()
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{in.node}}
	n.Name = b.name(op, o, n.Parents, "")
	ks, base, rerr := timeWindowBase(b, n.Name, o, in.ks, vas, ws.w)
	n.Stores = base.stores()
	n.New = base.processor(ws.w, add)
	b.add(n, errors.Join(g.err, ws.err, err, serr, nilErr, rerr))
	return &Table[Windowed[K], VA]{b: b, node: n, ks: ks, vs: vas, store: base.store}
}

// timeWindowBase declares the stores of an aggregation, named by node,
// in the time windows w.
func timeWindowBase[K, VA any](b *Builder, node string, o *options, inner serde.Serde[K], vas serde.Serde[VA], w TimeWindows) (serde.Serde[Windowed[K]], windowBase, error) {
	var ks serde.Serde[Windowed[K]]
	if inner != nil {
		ks = WindowedSerde(inner, w.size)
	}
	// Sliding windows look back two window sizes for the windows a record
	// touches, so they are kept that long at least.
	keep := w.size + w.grace
	if w.sliding {
		keep += w.size
	}
	base, err := newWindowBase(b, node, o, topo.WindowStore, codecOf(ks), codecOf(vas), keep, w.grace)
	base.direct = w.sliding
	base.wkey = windowedKeyOf[K]
	return ks, base, err
}

// processor makes the processors that fold records into the windows w of
// the base's stores with add.
func (wb windowBase) processor(w TimeWindows, add aggFunc) func() topo.Processor {
	if w.sliding {
		return func() topo.Processor { return newSlidingProc(wb, w.size, add) }
	}
	return func() topo.Processor { return newTimeWindowProc(wb, w, add) }
}

// windowBase is what the windowed aggregations share: the store of the
// windows, the index of the windows waiting to be emitted (emit-final) and
// the index of the windows to expire.
type windowBase struct {
	store, emitStore, expiryStore string
	final                         bool
	// direct: the store is written without the record cache (the
	// processor reads ranges of it).
	direct    bool
	kc, vc    topo.Codec
	grace     time.Duration
	retention time.Duration
	// shared: several nodes (a cogroup's) write the stores, so a time
	// index cannot remember when its next entry is due.
	shared bool
	// wkey makes the typed windowed key (a Windowed[K]) of a record key.
	wkey func(key any, w Window) any
	ikc  topo.Codec // the record key's (sessions)

	st           kvAccess
	emit, expiry *timeIndex
}

// newWindowBase declares the stores of an aggregation, named by node.
// keep is the least retention the windows need.
func newWindowBase(b *Builder, node string, o *options, kind topo.StoreKind, kc, vc topo.Codec, keep, grace time.Duration) (windowBase, error) {
	store := storeName(o, node)
	b.addStore(o, store).Kind = kind
	wb := windowBase{store: store, emitStore: store + "-emit", expiryStore: store + "-expiry", final: o.emitFinal, kc: kc, vc: vc, grace: grace}
	if wb.final {
		b.addStore(o, wb.emitStore)
	}
	b.addStore(o, wb.expiryStore)
	wb.retention = max(keep, defaultRetention)
	var err error
	if o.retention > 0 {
		if o.retention < keep {
			err = fmt.Errorf("Retention %v is shorter than the windows need (%v): windows would go before they close", o.retention, keep)
		}
		wb.retention = max(keep, o.retention)
	}
	return wb, err
}

// stores are the names of the stores, for the nodes that use them.
func (wb windowBase) stores() []string {
	names := []string{wb.store}
	if wb.final {
		names = append(names, wb.emitStore)
	}
	return append(names, wb.expiryStore)
}

// open opens the stores for a processor instance (wb is its copy).
func (wb *windowBase) open(c *topo.Context) error {
	if wb.direct {
		if wb.kc == nil || wb.vc == nil {
			return fmt.Errorf("engine: store %q: %w", wb.store, nilSerdes(wb.kc == nil, wb.vc == nil))
		}
		wb.st.kc, wb.st.vc = wb.kc, wb.vc
		var err error
		if wb.st.tbl, err = c.DirectTableStore(wb.store); err != nil {
			return err
		}
	} else if err := wb.st.open(c, wb.store, wb.kc, wb.vc, true); err != nil {
		return err
	}
	s, err := c.Store(wb.expiryStore)
	if err != nil {
		return err
	}
	wb.expiry = newTimeIndex(s)
	wb.expiry.shared = wb.shared
	if wb.final {
		s, err := c.Store(wb.emitStore)
		if err != nil {
			return err
		}
		wb.emit = newTimeIndex(s)
		wb.emit.shared = wb.shared
	}
	return nil
}

// created indexes a new window: to expire at expireAt, and with
// emit-final to be emitted when stream time passes closeAt.
func (wb *windowBase) created(kb []byte, expireAt, closeAt, ts int64) error {
	if err := wb.expiry.add(expireAt, kb, ts); err != nil {
		return err
	}
	if wb.emit != nil {
		return wb.emit.add(closeAt, kb, ts)
	}
	return nil
}

// write stores a window's new aggregate: forwarded with the change from
// old (nil: a new window) unless the windows are emitted when they close.
func (wb *windowBase) write(kb []byte, r topo.Record, key any, old, agg any, ts time.Time) error {
	r.Key = key
	if wb.emit != nil {
		return wb.st.writeQuiet(kb, r, agg, ts)
	}
	return wb.st.updateKey(kb, r, old, agg, ts)
}

// remove deletes a window: forwarded as a retraction of old unless the
// windows are emitted when they close.
func (wb *windowBase) remove(kb []byte, r topo.Record, key any, old any, ts time.Time) error {
	r.Key = key
	if wb.emit != nil {
		return wb.st.tbl.Update(kb, nil, ts.UnixMilli(), r, nil, nil)
	}
	return wb.st.updateKey(kb, r, old, nil, ts)
}

// advance emits the windows that closed at or before closed (emit-final)
// and expires those whose retention ended at or before now.
func (wb *windowBase) advance(c *topo.Context, closed int64, now time.Time) error {
	ms := now.UnixMilli()
	if wb.emit != nil {
		if err := wb.emit.each(closed, ms, func(kb []byte) error {
			// A window merged into another since is gone: nothing to emit.
			v, ts, ok, err := wb.st.getEncoded(kb)
			if err != nil || !ok {
				return err
			}
			wk, err := wb.kc.Decode(kb)
			if err != nil {
				return err
			}
			return c.Forward(topo.Record{Key: wk, Value: topo.Change{New: v}, Timestamp: ts})
		}); err != nil {
			return err
		}
	}
	// Windows whose retention has passed go, without a word downstream.
	return wb.expiry.each(ms, ms, func(kb []byte) error {
		if wb.direct {
			if _, ok, err := wb.st.tbl.Get(kb); err != nil || !ok {
				return err
			}
		}
		return wb.st.expire(kb, now)
	})
}

// newTimeWindowProc folds each record into the tumbling or hopping windows
// holding it.
func newTimeWindowProc(wb windowBase, w TimeWindows, add aggFunc) topo.Processor {
	size, grace := w.size, w.grace
	return &fproc{
		init: wb.open,
		fn: func(c *topo.Context, r topo.Record) error {
			if r.Key == nil || r.Value == nil {
				c.Skip("record without a key or value in an aggregation")
				return nil
			}
			now := c.StreamTime()
			starts := w.starts(r.Timestamp.UnixMilli())
			late := 0
			for _, s := range starts {
				start := topo.TimeOf(s)
				end := start.Add(size)
				if !now.Before(end.Add(grace)) {
					c.Skip("record for a closed window")
					late++
					continue
				}
				wr := r
				wr.Key = wb.wkey(r.Key, Window{Start: start, End: end})
				kb, old, oldTs, ok, err := wb.st.getKey(wr)
				if err != nil {
					return err
				}
				agg := add(r.Key, r.Value, old, ok)
				ts := later(r.Timestamp, oldTs)
				if !ok {
					if err := wb.created(kb, start.Add(wb.retention).UnixMilli(), end.UnixMilli(), ts.UnixMilli()); err != nil {
						return err
					}
				}
				if err := wb.write(kb, wr, wr.Key, old, agg, ts); err != nil {
					return err
				}
			}
			if late > 0 && late == len(starts) {
				if err := c.Late("record for closed windows only"); err != nil {
					return err
				}
			}
			// Windows ending at or before now-grace have closed.
			return wb.advance(c, now.UnixMilli()-grace.Milliseconds(), now)
		},
	}
}

// windowedKeyOf is windowBase.wkey for keys of type K.
func windowedKeyOf[K any](key any, w Window) any { return Windowed[K]{Key: as[K](key), Window: w} }

// defaultRetention is how long windows are kept from their start when
// their aggregation sets no Retention (at least until they close), as in
// Kafka Streams.
const defaultRetention = 24 * time.Hour

// timeIndex orders window keys by a time (a window's end, for emit-final;
// the end of its retention, for expiry) in a store keyed by the time (8
// bytes big-endian) followed by the window store's key, so that the keys due
// at a time are the store's first ones, found without a scan.
type timeIndex struct {
	s       topo.KVStore
	nextDue int64 // the earliest time in the index; math.MaxInt64: none; unknownDue: not looked yet
	shared  bool  // other writers add entries too: nextDue stays unknown
}

// unknownDue: the index has not been looked at since the task started.
const unknownDue = math.MinInt64

func newTimeIndex(s topo.KVStore) *timeIndex { return &timeIndex{s: s, nextDue: unknownDue} }

func (x *timeIndex) add(at int64, kb []byte, ts int64) error {
	key := append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(kb)), uint64(at)), kb...)
	if err := x.s.Put(key, []byte{}, ts); err != nil {
		return err
	}
	if x.nextDue != unknownDue {
		x.nextDue = min(x.nextDue, at)
	}
	return nil
}

// each calls fn, in time order, with the window key of every entry due at
// or before the time due, and removes the entry (at time now).
func (x *timeIndex) each(due, now int64, fn func(kb []byte) error) error {
	return x.first(due, now, -1, fn)
}

// first is each for at most n entries (n < 0: all).
func (x *timeIndex) first(due, now int64, n int, fn func(kb []byte) error) error {
	if x.nextDue != unknownDue && due < x.nextDue {
		return nil
	}
	var keys [][]byte
	if due >= 0 {
		for e, err := range x.s.Range(nil, binary.BigEndian.AppendUint64(nil, uint64(due+1))) {
			if err != nil {
				return err
			}
			if len(keys) == n {
				break
			}
			keys = append(keys, bytes.Clone(e.Key))
		}
	}
	for _, k := range keys {
		if err := x.s.Delete(k, now); err != nil {
			return err
		}
		if err := fn(k[8:]); err != nil {
			return err
		}
	}
	if x.shared {
		return nil
	}
	x.nextDue = math.MaxInt64
	for e, err := range x.s.Range(nil, nil) {
		if err != nil {
			return err
		}
		x.nextDue = int64(binary.BigEndian.Uint64(e.Key[:8]))
		break
	}
	return nil
}

// ReadOnlyWindowStore reads the windows of a windowed aggregation.
type ReadOnlyWindowStore[K, V any] interface {
	// Get returns the value of key's window starting at start.
	Get(key K, start time.Time) (value V, ok bool, err error)
	// Fetch iterates key's windows that start in [from, to], earliest
	// first. A key another instance owns gives a *NotLocalError.
	Fetch(key K, from, to time.Time) iter.Seq2[KeyValue[Windowed[K], V], error]
	// FetchKeys iterates the windows of the keys in [fromKey, toKey) that
	// start in [from, to], in the partitions this instance reads, in the
	// store's order (each key's windows by start, but those of keys that
	// begin alike may interleave: "a"'s with "a\x00"'s).
	FetchKeys(fromKey, toKey K, from, to time.Time) iter.Seq2[KeyValue[Windowed[K], V], error]
	// All iterates every window of the partitions this instance reads, by
	// encoded key, then start.
	All() iter.Seq2[KeyValue[Windowed[K], V], error]
}

// QueryWindowStore opens the store of a windowed aggregation of a running
// topology (its Materialized name) for reading: the serdes of its keys and
// values, and the windows' size.
func QueryWindowStore[K, V any](q Queryable, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], size time.Duration, opts ...QueryOption) (ReadOnlyWindowStore[K, V], error) {
	if keySerde == nil {
		return nil, fmt.Errorf("engine: store %q: %w", store, nilSerdes(true, valueSerde == nil))
	}
	kv, err := QueryKeyValueStore(q, store, WindowedSerde(keySerde, size), valueSerde, opts...)
	if err != nil {
		return nil, err
	}
	return &windowStore[K, V]{kv: kv.(*kvStore[Windowed[K], V]), inner: keySerde, size: size}, nil
}

type windowStore[K, V any] struct {
	kv    *kvStore[Windowed[K], V]
	inner serde.Serde[K]
	size  time.Duration
}

func (s *windowStore[K, V]) window(key K, start time.Time) Windowed[K] {
	return Windowed[K]{Key: key, Window: Window{Start: start, End: start.Add(s.size)}}
}

func (s *windowStore[K, V]) Get(key K, start time.Time) (V, bool, error) {
	return s.kv.Get(s.window(key, start))
}

func (s *windowStore[K, V]) Fetch(key K, from, to time.Time) iter.Seq2[KeyValue[Windowed[K], V], error] {
	kb, err := s.inner.Encode(key)
	if err != nil {
		return errSeq[Windowed[K], V](s.kv.serdeErr("key", nil, true, err))
	}
	// The owner and readiness checks of a point read.
	if _, _, err := s.kv.raw.Get(binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(from.UnixMilli()))); err != nil {
		return errSeq[Windowed[K], V](err)
	}
	lo := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(max(from.UnixMilli(), 0)))
	hi := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(to.UnixMilli()+1))
	return func(yield func(KeyValue[Windowed[K], V], error) bool) {
		for kv, err := range s.kv.scanRaw(lo, hi, func(k []byte) bool { return len(k) == len(kb)+8 }) {
			if !yield(kv, err) || err != nil {
				return
			}
		}
	}
}

func (s *windowStore[K, V]) FetchKeys(fromKey, toKey K, from, to time.Time) iter.Seq2[KeyValue[Windowed[K], V], error] {
	return keyRange(s.kv, s.inner, 8, fromKey, toKey, func(k []byte) bool {
		start := int64(binary.BigEndian.Uint64(k[len(k)-8:]))
		return start >= from.UnixMilli() && start <= to.UnixMilli()
	})
}

func (s *windowStore[K, V]) All() iter.Seq2[KeyValue[Windowed[K], V], error] { return s.kv.All() }

// keyRange iterates the entries of a window or session store (whose keys
// end with a suffix of n bytes) whose record key is in [fromKey, toKey) and
// whose key the time filter keeps.
func keyRange[W, K, V any](kv *kvStore[W, V], inner serde.Serde[K], n int, fromKey, toKey K, keep func(k []byte) bool) iter.Seq2[KeyValue[W, V], error] {
	lo, err := inner.Encode(fromKey)
	if err != nil {
		return errSeq[W, V](kv.serdeErr("key", nil, true, err))
	}
	hi, err := inner.Encode(toKey)
	if err != nil {
		return errSeq[W, V](kv.serdeErr("key", nil, true, err))
	}
	if bytes.Compare(lo, hi) >= 0 {
		return func(func(KeyValue[W, V], error) bool) {}
	}
	// The store keys of toKey itself, and of longer keys that begin with
	// it, sort after toKey but before prefixEnd(toKey): scan that far and
	// keep what is in range.
	return kv.scanRaw(lo, prefixEnd(hi), func(k []byte) bool {
		if len(k) < n {
			return false
		}
		rk := k[:len(k)-n]
		return bytes.Compare(rk, lo) >= 0 && bytes.Compare(rk, hi) < 0 && keep(k)
	})
}
