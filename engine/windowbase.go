package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// windowKind says which of Kafka Streams' window processors an aggregation
// ports.
type windowKind int

const (
	timeWindowKind    windowKind = iota // tumbling and hopping: KStreamWindowAggregate
	slidingWindowKind                   // KStreamSlidingWindowAggregate
	sessionWindowKind                   // KStreamSessionWindowAggregate
)

// windowBase is what the windowed aggregations share: the store of the
// windows, the index of the windows waiting to be emitted (emit-final), the
// sweep that expires old windows, and the processor's clock. Each processor
// instance has its own copy; open fills in the instance's part.
type windowBase struct {
	store, emitStore string
	kind             windowKind
	final            bool
	emitEvery        int64 // ms between emit-final checks (wall clock); -1: the task's default
	kc, vc           topo.Codec
	ikc              topo.Codec // the record key's
	// size is the windows' size (time windows), time difference (sliding)
	// or inactivity gap (sessions), in ms; advance the time windows'.
	size, advance, grace int64
	// retention is how long windows are kept (see expireAt).
	retention time.Duration
	// visibleFor is the retention of Kafka Streams' store (Retention, or
	// its default: size plus grace; twice the time difference plus grace;
	// gap plus grace): its store hides a window whose start (a session's
	// end) is that far behind the latest one written. See visible.
	visibleFor int64
	// countsNulls: records without a value are counted (a count of time
	// windows or sessions) rather than dropped.
	countsNulls bool
	// wkey makes the typed windowed key (a Windowed[K]) of a record key.
	wkey func(key any, w Window) any
	// times holds the latest window written to each task's store, shared
	// by the processors writing it.
	times *storeTimes

	// The instance's, set by open.
	st           winTable
	raw          topo.KVStore // the store under st, for the sweep
	emit         topo.KVStore
	clock        topo.Clock
	written      *storeTime
	cached       bool  // Kafka Streams' store would have a record cache
	nextEmit     int64 // wall ms: no emit-final check before
	lastEmit     int64 // the window close time of the last emit-final; -1: none
	lastEmitRead bool  // lastEmit was read from the emit store
	// fresh: the windows the record being processed created, which
	// expire at once if the store's time is past their expiry already (a
	// cogroup's stream that lags behind the others).
	fresh [][]byte
}

// winTable is the store of the windows: a TableStore (time windows) or a
// RangeTableStore (sliding windows and sessions, which read ranges).
type winTable interface {
	Name() string
	Get(key []byte) (topo.Entry, bool, error)
	Update(key, value []byte, ts int64, rec topo.Record, old, new any) error
	UpdateNew(key, value []byte, ts int64, rec topo.Record, old, new any) error
	Expire(key []byte, ts int64) error
}

// newWindowBase declares the stores of an aggregation, named by node. keep
// is the least retention the windows need (Kafka Streams' default
// retention); size the window size, time difference or gap.
func newWindowBase(b *Builder, node string, o *options, kind windowKind, storeKind topo.StoreKind, kc, vc topo.Codec, size, keep, grace time.Duration) (windowBase, error) {
	store := storeName(o, node)
	spec := b.addStore(o, store)
	spec.Kind = storeKind
	// Filed locally by time (state.Layout), in segments of four times
	// what the windows need: a record's windows then mostly fall in one
	// segment, one seek (with Kafka Streams' segments, half of it, two or
	// three), and the segments being written are a small part of a store
	// kept for hours. Measured with BenchmarkTaskWindowPebble, 100,000 keys
	// over two hours of event time on one CPU: 23,900 records/s against
	// 19,500 plainly (median of three pairs, each 1.18–1.22×), 6.7 GB
	// written by pebble against 8.5 GB.
	spec.Segment = max(4*keep, minSegment)
	wb := windowBase{store: store, emitStore: store + "-emit", kind: kind, final: o.emitFinal,
		kc: kc, vc: vc, size: size.Milliseconds(), grace: grace.Milliseconds(), times: &storeTimes{m: map[topo.KVStore]*storeTime{}}}
	wb.emitEvery = -1 // the task's default
	if o.emitInterval != nil {
		wb.emitEvery = o.emitInterval.Milliseconds()
	}
	if wb.final {
		b.addStore(o, wb.emitStore)
	}
	wb.retention = max(keep, defaultRetention)
	wb.visibleFor = keep.Milliseconds()
	var err error
	if o.retention > 0 {
		if o.retention < keep {
			err = fmt.Errorf("Retention %v is shorter than the windows need (%v): windows would go before they close", o.retention, keep)
		}
		wb.retention = max(keep, o.retention)
		wb.visibleFor = wb.retention.Milliseconds()
	}
	if o.emitInterval != nil && !o.emitFinal {
		err = errors.Join(err, errors.New("EmitInterval is for EmitFinal, which is not given"))
	} else if o.emitInterval != nil && *o.emitInterval < 0 {
		err = errors.Join(err, fmt.Errorf("EmitInterval %v is negative", *o.emitInterval))
	}
	return wb, err
}

// stores are the names of the stores, for the nodes that use them.
func (wb windowBase) stores() []string {
	names := []string{wb.store}
	if wb.final {
		names = append(names, wb.emitStore)
	}
	return names
}

// lastEmitKey is the emit store's key of the close time of the last
// emit-final (Kafka Streams keeps it in the processor metadata it commits
// with the offsets). It sorts after every index entry, whose keys start
// with a time, 8 bytes big-endian, below 2^63.
var lastEmitKey = []byte{0xff, 'l', 'a', 's', 't'}

// open opens the stores for a processor instance (wb is its copy).
func (wb *windowBase) open(c *topo.Context) error {
	if wb.kc == nil || wb.vc == nil {
		return fmt.Errorf("engine: store %q: %w", wb.store, nilSerdes(wb.kc == nil, wb.vc == nil))
	}
	if wb.kind == timeWindowKind {
		tbl, err := c.TableStore(wb.store)
		if err != nil {
			return err
		}
		tbl.SetCodecs(wb.kc, wb.vc)
		wb.st = tbl
	} else {
		tbl, err := c.RangeTableStore(wb.store)
		if err != nil {
			return err
		}
		tbl.SetCodecs(wb.kc, wb.vc)
		wb.st = tbl
	}
	kv, err := c.Store(wb.store)
	if err != nil {
		return err
	}
	wb.raw = kv
	wb.written = wb.times.acquire(kv)
	// Kafka Streams caches the stores of emit-final sliding windows and
	// sessions never, the others' when the cache has room.
	wb.cached = c.Cached() && (wb.kind == timeWindowKind || !wb.final)
	wb.lastEmit = -1
	if wb.emitEvery < 0 {
		wb.emitEvery = defaultEmitInterval.Milliseconds()
		if c.EmitEveryRecord() {
			wb.emitEvery = 0
		}
	}
	if wb.final {
		if wb.emit, err = c.Store(wb.emitStore); err != nil {
			return err
		}
	}
	return nil
}

// loadLastEmit reads the close time of the last emit-final from the emit
// store, on the first record (processors start before their stores are
// restored).
func (wb *windowBase) loadLastEmit() error {
	wb.lastEmitRead = true
	e, ok, err := wb.emit.Get(lastEmitKey)
	if err != nil {
		return err
	}
	if ok && len(e.Value) == 8 {
		wb.lastEmit = int64(binary.BigEndian.Uint64(e.Value))
	}
	return nil
}

// close lets go of the instance's share of the store's time.
func (wb *windowBase) close() {
	if wb.written != nil {
		wb.times.release(wb.written)
		wb.written = nil
	}
}

// segTime is the time Kafka Streams' store files a window under: a
// window's start, a session's end.
func (wb *windowBase) segTime(kb []byte) int64 {
	n := len(kb)
	if wb.kind == sessionWindowKind {
		return int64(binary.BigEndian.Uint64(kb[n-16 : n-8]))
	}
	return int64(binary.BigEndian.Uint64(kb[n-8:]))
}

// visible reports whether the aggregation sees a stored window when it
// reads it, as Kafka Streams' RocksDB store does: that store hides the
// windows (sessions) filed under a time (segTime) more than its retention
// behind the latest one written (the time-ordered store of emit-final time
// and sliding windows also those exactly that far behind), while the
// record cache in front of it shows every window it holds, which, with a
// cache of any useful size, is every window. So without a cache, a late
// record for a window or session that is still open can miss the older
// windows it would be combined with, and a cogroup's stream that lags
// behind the others can find a window it had written gone and start it
// afresh.
func (wb *windowBase) visible(seg int64) bool {
	return wb.cached || wb.inStore(seg)
}

// inStore reports whether Kafka Streams' store, without the cache, shows a
// window filed under seg.
func (wb *windowBase) inStore(seg int64) bool {
	horizon := wb.written.t - wb.visibleFor
	if wb.final && wb.kind != sessionWindowKind {
		return seg >= horizon
	}
	return seg > horizon
}

// emitVisible reports whether an emit-final emits a closed window: Kafka
// Streams fetches the windows to emit from its time-ordered store, which
// hides time windows started more than its retention before the latest one
// written (unless the record cache holds them); sessions it finds by end
// time regardless of retention.
func (wb *windowBase) emitVisible(seg int64) bool {
	return wb.kind == sessionWindowKind || wb.cached || seg >= wb.written.t-wb.visibleFor
}

// get reads a window: its aggregate and timestamp.
func (wb *windowBase) get(kb []byte) (any, int64, bool, error) {
	e, ok, err := wb.st.Get(kb)
	if err != nil || !ok {
		return nil, 0, false, err
	}
	v, err := wb.vc.Decode(e.Value)
	if err != nil {
		return nil, 0, false, wb.codecErr("value", e.Value, false, err)
	}
	return v, e.Timestamp, true, nil
}

// windowFound is a window read by getMany: its aggregate and timestamp.
type windowFound struct {
	v  any
	ts int64
	ok bool
}

// getMany reads the windows kbs (ascending) into found.
func (wb *windowBase) getMany(kbs [][]byte, found []windowFound) error {
	ts, ok := wb.st.(*topo.TableStore)
	if !ok {
		for i, kb := range kbs {
			v, t, ok, err := wb.get(kb)
			if err != nil {
				return err
			}
			found[i] = windowFound{v, t, ok}
		}
		return nil
	}
	return ts.GetMany(kbs, wb.keySuffix(), func(i int, e topo.Entry, ok bool) error {
		if !ok {
			found[i] = windowFound{}
			return nil
		}
		v, err := wb.vc.Decode(e.Value)
		if err != nil {
			return wb.codecErr("value", e.Value, false, err)
		}
		found[i] = windowFound{v, e.Timestamp, true}
		return nil
	})
}

func (wb *windowBase) codecErr(part string, b []byte, encode bool, err error) error {
	return &serde.Error{Store: wb.store, Partition: -1, Offset: -1, Part: part, Bytes: b, Encode: encode, Err: err}
}

// minSegment is the least segment interval of Kafka Streams' window and
// session stores.
const minSegment = time.Minute

// expireAt is when a window filed under seg (segTime) is deleted, in the
// store's time (the latest segTime written): as Kafka Streams' segmented
// RocksDB store drops a segment, a span of max(retention/2, a minute) of
// segTimes, once the store's time is the retention past the segment's end.
// So no window goes before Kafka Streams would lose it.
func (wb *windowBase) expireAt(seg int64) int64 {
	r := wb.retention.Milliseconds()
	interval := max(r/2, minSegment.Milliseconds())
	return (seg/interval+1)*interval + r
}

// created notes a new window (kb): with emit-final it is indexed to be
// emitted once closeAt (its end) is old enough.
func (wb *windowBase) created(kb []byte, closeAt, ts int64) error {
	if wb.expireAt(wb.segTime(kb)) <= max(wb.written.t, wb.segTime(kb)) {
		wb.fresh = append(wb.fresh, kb)
	}
	if wb.emit != nil {
		key := append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(kb)), uint64(closeAt)), kb...)
		return wb.emit.Put(key, []byte{}, ts)
	}
	return nil
}

// write stores a window's new aggregate with timestamp ts: forwarded with
// the change from old (nil: a new window) unless the windows are emitted
// when they close. isNew: the store does not have the window (a new
// session), so that its removal before the cache writes it writes nothing.
func (wb *windowBase) write(kb []byte, r topo.Record, key any, old, agg any, ts int64, isNew bool) error {
	vb, err := wb.vc.Encode(agg)
	if err != nil {
		return wb.codecErr("value", nil, true, err)
	}
	if vb == nil {
		vb = []byte{}
	}
	wb.wrote(kb)
	r.Key = key
	update := wb.st.Update
	if isNew {
		update = wb.st.UpdateNew
	}
	if wb.final {
		return update(kb, vb, ts, r, nil, nil)
	}
	return update(kb, vb, ts, r, old, agg)
}

// remove deletes a window: forwarded as a retraction of old unless the
// windows are emitted when they close. Through the record cache, Kafka
// Streams forwards a retraction when it flushes it only if its store still
// shows the window (a session can be gone from it while the cache still
// held it): then nothing goes downstream.
func (wb *windowBase) remove(kb []byte, r topo.Record, key any, old any, ts int64) error {
	if wb.cached && !wb.inStore(wb.segTime(kb)) {
		old = nil
	}
	wb.wrote(kb)
	r.Key = key
	if wb.final {
		return wb.st.Update(kb, nil, ts, r, nil, nil)
	}
	return wb.st.Update(kb, nil, ts, r, old, nil)
}

// wrote moves the store's time up to the window's.
func (wb *windowBase) wrote(kb []byte) {
	wb.written.t = max(wb.written.t, wb.segTime(kb))
}

// maybeEmitFinal is Kafka Streams' emit-final (maybeForwardFinalResult of
// AbstractKStreamTimeWindowAggregateProcessor and
// KStreamSessionWindowAggregate): at most once per emit interval of wall
// clock time (the first record always looks), if the close time
// (observed stream time minus grace, and the gap for sessions) moved past
// the last emit's, it emits the windows that closed since, earliest first
// (then by key bytes): time windows that end at or before the close time,
// sliding windows and sessions that end before it. Each goes with its
// stored timestamp and the headers of the record r that let it go.
func (wb *windowBase) maybeEmitFinal(c *topo.Context, r topo.Record, closeTime int64) error {
	if wb.emit == nil {
		return nil
	}
	if !wb.lastEmitRead {
		if err := wb.loadLastEmit(); err != nil {
			return err
		}
	}
	now := c.Now().UnixMilli()
	if now < wb.nextEmit {
		return nil
	}
	wb.nextEmit = now + wb.emitEvery
	if wb.lastEmit != -1 && wb.lastEmit >= closeTime {
		return nil
	}
	// The range of times (segTime) to emit, as Kafka Streams computes it.
	var lo, hi int64
	switch wb.kind {
	case timeWindowKind:
		if hi = closeTime - wb.size; hi < 0 {
			return nil
		}
		if wb.lastEmit != -1 {
			lo = max(0, wb.lastEmit-wb.size) + 1
			// No window starts in [lo, hi]: nothing new to emit (and the
			// last emit's close time stays).
			if slices.Equal(wb.windowStarts(hi), wb.windowStarts(lo-1)) {
				return nil
			}
		}
	case slidingWindowKind:
		if hi = closeTime - wb.size - 1; hi < 0 {
			return nil
		}
		if wb.lastEmit != -1 {
			lo = max(0, wb.lastEmit-wb.size)
		}
	default:
		if hi = closeTime - 1; hi < 0 {
			return nil
		}
		if lo = max(0, wb.lastEmit); hi < lo {
			return nil
		}
	}
	// The index is by window end: a time or sliding window ends size after
	// its start.
	due := hi
	if wb.kind != sessionWindowKind {
		due += wb.size
	}
	var keys [][]byte
	for e, err := range wb.emit.Range(nil, binary.BigEndian.AppendUint64(nil, uint64(due+1))) {
		if err != nil {
			return err
		}
		keys = append(keys, bytes.Clone(e.Key))
	}
	if wb.kind == sessionWindowKind {
		// Kafka Streams' time-ordered session store orders them by end,
		// then start, then key; the index, by end, then key.
		slices.SortStableFunc(keys, func(a, b []byte) int {
			ae, as := sessionBounds(a)
			be, bs := sessionBounds(b)
			return cmp.Or(cmp.Compare(ae, be), cmp.Compare(as, bs), bytes.Compare(a[8:len(a)-16], b[8:len(b)-16]))
		})
	}
	ms := r.Timestamp.UnixMilli()
	for _, k := range keys {
		if err := wb.emit.Delete(k, ms); err != nil {
			return err
		}
		kb := k[8:]
		seg := wb.segTime(kb)
		if seg >= lo && wb.emitVisible(seg) {
			if err := wb.emitWindow(c, r, kb); err != nil {
				return err
			}
		}
		// A window kept past its expiry for this (see expire, which took
		// its expiry entry: the store's time, which a restart forgets,
		// need not have reached it again) goes now.
		if wb.holdsForEmit() && wb.expireAt(seg) <= wb.written.t {
			if err := wb.st.Expire(kb, ms); err != nil {
				return err
			}
		}
	}
	wb.lastEmit = closeTime
	return wb.emit.Put(lastEmitKey, binary.BigEndian.AppendUint64(nil, uint64(closeTime)), ms)
}

// emitWindow forwards a closed window's final value, if it is still there
// (a session merged into another since is gone).
func (wb *windowBase) emitWindow(c *topo.Context, r topo.Record, kb []byte) error {
	v, ts, ok, err := wb.get(kb)
	if err != nil || !ok {
		return err
	}
	wk, err := wb.kc.Decode(kb)
	if err != nil {
		return wb.codecErr("key", kb, false, err)
	}
	return c.Forward(topo.Record{Key: wk, Value: topo.Change{New: v}, Timestamp: topo.TimeOf(ts), Headers: r.Headers})
}

// holdsForEmit reports whether windows waiting to be emitted stay past
// their expiry: time windows emitted on close through the record cache,
// which in Kafka Streams shows them when they are emitted even after its
// store dropped their segment.
func (wb *windowBase) holdsForEmit() bool {
	return wb.emit != nil && wb.cached && wb.kind == timeWindowKind
}

// windowStarts are the starts of the time windows holding ts (Kafka
// Streams' TimeWindows.windowsFor), earliest first.
func (wb *windowBase) windowStarts(ts int64) []int64 {
	return timeWindowStarts(ts, wb.size, wb.advance)
}

// expire deletes the windows whose time to expire (expireAt) the store's
// time has reached, without a word downstream (a change still waiting in
// the record cache goes first), but those emit-final still holds
// (holdsForEmit). It runs after a record's writes, before emit-final looks
// for closed windows, as Kafka Streams drops segments when it writes.
//
// No index says which windows are due: each window would cost an entry,
// written to the store and its changelog when the window is made and
// deleted when it goes, a third more writes than the windows' own for a
// hopping count. A sweep finds them instead. Once the store's time passes
// the expiry time of a segment that the last sweep did not cover (after a
// restart: at once, since nothing is known), a sweep starts over the
// task's whole store, and each record moves it on by at most sweepBudget
// windows, deleting those that are due; windows still waiting in the
// record cache, not yet in the store, are looked at as it starts. When
// it reaches the end, every window due when it started is gone: windows
// made since are not due by then (a window is made only while it is
// open, and kept its retention, at least its size and grace, past its
// start), but those a cogroup's lagging stream makes in a segment that
// has expired for the store, which go as the record that made them ends
// (fresh).
// So a store of n windows costs a sweep of n reads per segment interval
// (half the retention), two per window in its life; a store far larger
// than sweepBudget is swept over n/sweepBudget records, and until the
// sweep reaches a due window a query still sees it.
func (wb *windowBase) expire() error {
	now := wb.written.t
	for _, kb := range wb.fresh {
		if wb.expireAt(wb.segTime(kb)) <= now {
			// A copy: the changelog's record keeps the key.
			if err := wb.expireOne(bytes.Clone(kb), now); err != nil {
				return err
			}
		}
	}
	wb.fresh = wb.fresh[:0]
	sw := &wb.written.sweep
	if !sw.on {
		if now < 0 || sw.known && now < sw.next {
			return nil
		}
		sw.on, sw.from, sw.started = true, nil, now
		// Windows made since the last flush wait in the record cache, not
		// yet in the store the sweep reads.
		if ts, ok := wb.st.(*topo.TableStore); ok {
			for _, kb := range ts.Unwritten() {
				if len(kb) >= wb.keySuffix() && wb.expireAt(wb.segTime(kb)) <= now {
					if err := wb.expireOne(kb, now); err != nil {
						return err
					}
				}
			}
		}
	}
	n := 0
	var resume []byte
	for e, err := range wb.raw.Range(sw.from, nil) {
		if err != nil {
			return err
		}
		if n == sweepBudget {
			resume = bytes.Clone(e.Key)
			break
		}
		n++
		if len(e.Key) < wb.keySuffix() {
			continue // not a window's key
		}
		if wb.expireAt(wb.segTime(e.Key)) <= now {
			if err := wb.expireOne(bytes.Clone(e.Key), now); err != nil {
				return err
			}
		}
	}
	if resume != nil {
		sw.from = resume
		return nil
	}
	// Done: every window due when the sweep started is gone, and the next
	// is due when the segment after the store's time then expires.
	sw.on, sw.from, sw.known = false, nil, true
	sw.next = wb.nextExpiry(sw.started)
	return nil
}

// sweepBudget is how many windows a record moves the expiry sweep on.
const sweepBudget = 4096

// keySuffix is the length of the times after the record key in a window's
// key.
func (wb *windowBase) keySuffix() int {
	if wb.kind == sessionWindowKind {
		return 16
	}
	return 8
}

// nextExpiry is the first time after t at which some segment expires: the
// end of the segment after t's, plus the retention (see expireAt).
func (wb *windowBase) nextExpiry(t int64) int64 {
	r := wb.retention.Milliseconds()
	interval := max(r/2, minSegment.Milliseconds())
	// expireAt(seg) = (seg/interval+1)*interval + r, a step function of
	// seg; the first of its values above t.
	k := (t - r) / interval
	for k*interval+r <= t {
		k++
	}
	return k*interval + r
}

// expireOne deletes a due window, unless emit-final still holds it.
func (wb *windowBase) expireOne(kb []byte, now int64) error {
	if wb.holdsForEmit() {
		end := wb.segTime(kb) + wb.size
		if _, waiting, err := wb.emit.Get(append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(kb)), uint64(end)), kb...)); err != nil || waiting {
			return err // emit-final deletes it when it is done with it
		}
	}
	if _, ok, err := wb.st.Get(kb); err != nil || !ok {
		return err
	}
	return wb.st.Expire(kb, now)
}

// storeTimes are the times of a window store's latest window, one per
// task's store, shared by the processors that write it (a cogroup's).
// Kafka Streams' store keeps it in memory (not across a restart), and so
// does this.
type storeTimes struct {
	mu sync.Mutex
	m  map[topo.KVStore]*storeTime
}

type storeTime struct {
	s     topo.KVStore
	t     int64 // Unix ms; -1: nothing written
	sweep sweep
	refs  int
}

// sweep is where the expiry sweep of a task's window store is (see
// windowBase.expire), shared by the processors that write the store.
type sweep struct {
	on      bool   // a sweep is under way
	from    []byte // the key it goes on from (nil: the start)
	started int64  // the store's time when it started
	known   bool   // a sweep has ended since the task opened
	next    int64  // when known and not on: the store's time at which the next starts
}

func (ts *storeTimes) acquire(s topo.KVStore) *storeTime {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	st := ts.m[s]
	if st == nil {
		st = &storeTime{s: s, t: -1}
		ts.m[s] = st
	}
	st.refs++
	return st
}

func (ts *storeTimes) release(st *storeTime) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if st.refs--; st.refs == 0 {
		delete(ts.m, st.s)
	}
}

// rangeWindows iterates the entries of one record key in [lo, hi) of the
// store of a range-reading window aggregation: lo is one of its keys, hi
// another or the end of its keys (see topo.RangeKey).
func (wb *windowBase) rangeWindows(lo, hi []byte) iter.Seq2[topo.Entry, error] {
	return wb.st.(*topo.RangeTableStore).RangeKey(lo, hi, wb.keySuffix())
}
