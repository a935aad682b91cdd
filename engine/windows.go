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
// while the window is open: until its end plus the grace period, in the
// aggregation's own stream time (the largest timestamp of the records it
// took, as Kafka Streams' observed stream time: records it dropped, and
// records of other operations of the task, do not move it); a later record
// for a closed window is dropped and counted as skipped.
//
// Sliding windows ([SlidingWindows]) are of the same type: windows of a
// fixed size placed by the records rather than the epoch.
type TimeWindows struct {
	size, advance, grace time.Duration
	sliding              bool
}

// TumblingWindows are back-to-back windows of the given size, without
// grace: a record arriving after stream time reached its window's end is
// dropped. Add grace with [TimeWindows.Grace].
func TumblingWindows(size time.Duration) TimeWindows {
	return TimeWindows{size: size, advance: size}
}

// HoppingWindows are windows of the given size starting every advance
// (which must not exceed the size): a record falls in size/advance windows
// (rounded up or down; fewer near the epoch), which it updates earliest
// first.
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

// timeWindowStarts are the starts, in Unix ms, of the windows of the given
// size and advance holding ts (Kafka Streams' TimeWindows.windowsFor),
// earliest first.
func timeWindowStarts(ts, size, advance int64) []int64 {
	var out []int64
	for s := max(0, ts-size+advance) / advance * advance; s <= ts; s += advance {
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

// WindowedCount counts the records of each key in each window. As in Kafka
// Streams, a record without a value counts too (sliding windows skip it);
// one without a key is dropped.
func WindowedCount[K, V any](ws *TimeWindowedStream[K, V], opts ...Option) *Table[Windowed[K], int64] {
	t := windowedAggregate(ws, "windowed-count", opts, serde.Int64, countAdd, true, nil)
	t.node.ValueBlind = true
	return t
}

// WindowedReduce combines the values of each key in each window: the first
// value is the aggregate, each later one is combined with it by fn. A
// record without a key or value is dropped.
func WindowedReduce[K, V any](ws *TimeWindowedStream[K, V], fn func(agg, v V) V, opts ...Option) *Table[Windowed[K], V] {
	return windowedAggregate(ws, "windowed-reduce", opts, ws.g.s.vs, reduceAdd(fn), false, nilFuncErr(fn == nil, "reduce"))
}

// WindowedAggregate folds the records of each key in each window into an
// aggregate that starts as init() and is updated by fn. A record without a
// key or value is dropped.
func WindowedAggregate[K, V, VA any](ws *TimeWindowedStream[K, V], init func() VA, fn func(K, V, VA) VA, opts ...Option) *Table[Windowed[K], VA] {
	return windowedAggregate(ws, "windowed-aggregate", opts, defaultSerde[VA](), aggregateAdd(init, fn), false, errors.Join(nilFuncErr(init == nil, "init"), nilFuncErr(fn == nil, "aggregate")))
}

// windowedAggregate adds the node that folds each record into the windows
// holding it. Its store is keyed by the windowed key in WindowedSerde's
// format. countsNulls: records without a value are folded in too (a count).
func windowedAggregate[K, V, VA any](ws *TimeWindowedStream[K, V], op string, opts []Option, vas serde.Serde[VA], add aggFunc, countsNulls bool, nilErr error) *Table[Windowed[K], VA] {
	g := ws.g
	b := g.s.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "EmitFinal", "EmitInterval", "Retention")
	vas, serr := valueSerdeOpt(o, vas)
	in := g.input()
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{in.node}}
	n.Name = b.name(op, o, n.Parents, "")
	ks, base, rerr := timeWindowBase(b, n.Name, o, in.ks, vas, ws.w)
	base.countsNulls = countsNulls
	n.Stores = base.stores()
	n.New = base.processor(add)
	n.Typed = windowClose{ws.w.closeAfter()}
	b.add(n, errors.Join(g.err, ws.err, err, serr, nilErr, rerr))
	return keptAs(&Table[Windowed[K], VA]{b: b, node: n, ks: ks, vs: vas, store: base.store}, StoreInfo{Kind: WindowKind, WindowSize: ws.w.size}, in.ks)
}

// windowClose marks (in topo.Node.Typed) a node whose windowed table's
// windows close: after stream time passed a window's end by closeAfter
// (the grace; a session's gap plus grace). SuppressUntilWindowCloses looks
// for it upstream.
type windowClose struct{ closeAfter time.Duration }

// closeAfter is how long after its end a window closes.
func (w TimeWindows) closeAfter() time.Duration { return w.grace }

// timeWindowBase declares the stores of an aggregation, named by node,
// in the time windows w.
func timeWindowBase[K, VA any](b *Builder, node string, o *options, inner serde.Serde[K], vas serde.Serde[VA], w TimeWindows) (serde.Serde[Windowed[K]], windowBase, error) {
	var ks serde.Serde[Windowed[K]]
	if inner != nil {
		ks = WindowedSerde(inner, w.size)
	}
	// Kafka Streams' default retention: sliding windows look back two
	// time differences for the windows a record touches.
	keep := w.size + w.grace
	kind := timeWindowKind
	if w.sliding {
		keep += w.size
		kind = slidingWindowKind
	}
	base, err := newWindowBase(b, node, o, kind, topo.WindowStore, codecOf(ks), codecOf(vas), w.size, keep, w.grace)
	base.advance = w.advance.Milliseconds()
	base.wkey = windowedKeyOf[K]
	base.ikc = codecOf(inner)
	return ks, base, err
}

// processor makes the processors that fold records into the windows of the
// base's stores with add.
func (wb windowBase) processor(add aggFunc) func() topo.Processor {
	if wb.kind == slidingWindowKind {
		return func() topo.Processor { return &slidingProc{wb: wb, add: add} }
	}
	return func() topo.Processor { return &timeWindowProc{wb: wb, add: add} }
}

// timeWindowProc folds each record into the tumbling or hopping windows
// holding it: a port of Kafka Streams' KStreamWindowAggregate. A record
// without a key is dropped before it moves the processor's stream time
// (the largest timestamp of the records it took), and so, unless the
// aggregation counts them, is one without a value. The record updates each
// of its windows that is still open (ends after stream time minus grace),
// earliest first; a window's timestamp is its latest record's.
type timeWindowProc struct {
	wb    windowBase
	add   aggFunc
	c     *topo.Context
	kbs   [][]byte
	buf   []byte
	found []windowFound
}

func (p *timeWindowProc) Init(c *topo.Context) error { p.c = c; return p.wb.open(c) }
func (p *timeWindowProc) Close() error               { p.wb.close(); return nil }

func (p *timeWindowProc) Process(r topo.Record) error {
	c, wb := p.c, &p.wb
	if r.Key == nil || r.Value == nil && !wb.countsNulls {
		c.Skip("record without a key or value in an aggregation")
		return nil
	}
	ikb, err := innerKey(r, wb.ikc)
	if err != nil {
		return wb.codecErr("key", nil, true, err)
	}
	ts := r.Timestamp.UnixMilli()
	now := wb.clock.Observe(c, ts)
	closeTime := now - wb.grace
	starts := wb.windowStarts(ts)
	// The open windows' keys, read in one go: they are next to each other
	// in the store.
	p.kbs, p.found = p.kbs[:0], p.found[:0]
	// Through the record cache the keys share one buffer, reused by the
	// next record: the cache keeps a copy of a key, and writes that copy.
	// Without it a key goes to the store and the changelog as it is, and
	// the producer holds it until the record is sent: each its own.
	need := len(starts) * (len(ikb) + 8)
	if cap(p.buf) < need || !p.c.Cached() {
		p.buf = make([]byte, 0, need)
	}
	buf := p.buf[:0]
	for _, s := range starts {
		if s+wb.size > closeTime {
			n := len(buf)
			buf = binary.BigEndian.AppendUint64(append(buf, ikb...), uint64(s))
			p.kbs = append(p.kbs, buf[n:len(buf):len(buf)])
			p.found = append(p.found, windowFound{})
		}
	}
	if err := wb.getMany(p.kbs, p.found); err != nil {
		return err
	}
	late, open := 0, 0
	for _, s := range starts {
		end := s + wb.size
		if end <= closeTime {
			c.Skip("record for a closed window")
			late++
			continue
		}
		kb, f := p.kbs[open], p.found[open]
		open++
		old, oldTs, ok := f.v, f.ts, f.ok
		if ok && !wb.visible(s) {
			old, ok = nil, false // Kafka Streams' store hides it: the window starts afresh
		}
		agg := p.add(r.Key, r.Value, old, ok)
		newTs := ts
		if ok {
			newTs = max(ts, oldTs)
		} else if err := wb.created(kb, end, newTs); err != nil {
			return err
		}
		key := wb.wkey(r.Key, Window{Start: topo.TimeOf(s), End: topo.TimeOf(end)})
		if err := wb.write(kb, r, key, old, agg, newTs, false); err != nil {
			return err
		}
	}
	if late > 0 && late == len(starts) {
		if err := c.Late("record for closed windows only"); err != nil {
			return err
		}
	}
	if err := wb.expire(); err != nil {
		return err
	}
	return wb.maybeEmitFinal(c, r, closeTime)
}

// innerKey is the encoded record key: its source's bytes if it is unchanged
// since.
func innerKey(r topo.Record, kc topo.Codec) ([]byte, error) {
	if kb, ok := topo.RawKey(r, kc); ok {
		return kb, nil
	}
	return kc.Encode(r.Key)
}

// windowedKeyOf is windowBase.wkey for keys of type K.
func windowedKeyOf[K any](key any, w Window) any { return Windowed[K]{Key: as[K](key), Window: w} }

// defaultRetention is how long windows are kept (windowBase.expireAt) when
// their aggregation sets no Retention: longer than Kafka Streams' default
// (what the windows need), for queries of the store.
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
	if err := checkStore(q, "QueryWindowStore", store, StoreInfo{Kind: WindowKind, WindowSize: size}); err != nil {
		return nil, err
	}
	kv, err := openStore(q, store, WindowedSerde(keySerde, size), valueSerde, opts...)
	if err != nil {
		return nil, err
	}
	return &windowStore[K, V]{kv: kv, inner: keySerde, size: size}, nil
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
		for kv, err := range s.kv.scanKey(lo, hi, 8, nil) {
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
