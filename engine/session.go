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

// Sessions are session windows: a key's records belong to one session
// while each follows the one before within the inactivity gap. A session
// is the window [first, last] of its records (both ends held, as in Kafka
// Streams). A record that falls within the gap of sessions, or inside one,
// replaces them: each is retracted downstream (a nil value) and the
// session that replaces them is emitted, even when it has the same window
// as the one it replaces (through the record cache, a session's retraction
// and new value until the next commit go downstream as one). Only a record
// that starts a session of its own, or falls on one made of records at the
// same time alone, is emitted without a retraction. Make them with
// [SessionWindows].
//
// A session closes once the aggregation's stream time (the largest
// timestamp of the records it took) passes its end by more than the gap
// plus the grace period: a record whose session, merged with those within
// its gap, would end before that is dropped (Kafka Streams'
// KStreamSessionWindowAggregate). Without the record cache, as there, a
// record does not see sessions that ended more than the store's retention
// (gap plus grace, or [Retention]) before the latest session written.
type Sessions struct {
	gap, grace time.Duration
}

// SessionWindows are sessions with the given inactivity gap, without
// grace: a record for a session that ended more than the gap before the
// aggregation's stream time is dropped. Add grace with [Sessions.Grace].
func SessionWindows(inactivityGap time.Duration) Sessions {
	return Sessions{gap: inactivityGap}
}

// Grace keeps sessions open for out-of-order records for d longer (in
// stream time).
func (w Sessions) Grace(d time.Duration) Sessions {
	w.grace = d
	return w
}

func (w Sessions) check() error {
	var errs []error
	if w.gap < time.Millisecond {
		errs = append(errs, fmt.Errorf("inactivity gap %v is under a millisecond", w.gap))
	}
	if w.grace < 0 {
		errs = append(errs, fmt.Errorf("grace %v is negative", w.grace))
	}
	return errors.Join(errs...)
}

// SessionWindowedSerde encodes a session's key as the inner key's bytes
// followed by the session's end and start in Unix milliseconds, 8 bytes
// big-endian each (Kafka Streams' session key format).
func SessionWindowedSerde[K any](inner serde.Serde[K]) serde.Serde[Windowed[K]] {
	return sessionSerde[K]{inner: inner}
}

type sessionSerde[K any] struct{ inner serde.Serde[K] }

func (s sessionSerde[K]) Encode(w Windowed[K]) ([]byte, error) {
	kb, err := s.inner.Encode(w.Key)
	if err != nil {
		return nil, err
	}
	return sessionKey(kb, w.Window.End.UnixMilli(), w.Window.Start.UnixMilli()), nil
}

func (s sessionSerde[K]) Decode(b []byte) (Windowed[K], error) {
	if len(b) < 16 {
		return Windowed[K]{}, fmt.Errorf("a session key needs at least 16 bytes, got %d", len(b))
	}
	k, err := s.inner.Decode(b[:len(b)-16])
	if err != nil {
		return Windowed[K]{}, err
	}
	end, start := sessionBounds(b)
	return Windowed[K]{Key: k, Window: Window{Start: topo.TimeOf(start), End: topo.TimeOf(end)}}, nil
}

// sessionKey is the store key of a session of the inner key kb.
func sessionKey(kb []byte, end, start int64) []byte {
	b := binary.BigEndian.AppendUint64(append(make([]byte, 0, len(kb)+16), kb...), uint64(end))
	return binary.BigEndian.AppendUint64(b, uint64(start))
}

// sessionBounds reads a session store key's end and start.
func sessionBounds(b []byte) (end, start int64) {
	n := len(b)
	return int64(binary.BigEndian.Uint64(b[n-16 : n-8])), int64(binary.BigEndian.Uint64(b[n-8:]))
}

// SessionWindowedStream is a grouped stream cut into sessions, ready for a
// session aggregation.
type SessionWindowedStream[K, V any] struct {
	g   *GroupedStream[K, V]
	w   Sessions
	err error
}

// SessionWindowedBy cuts the grouped stream into sessions.
func (g *GroupedStream[K, V]) SessionWindowedBy(w Sessions) *SessionWindowedStream[K, V] {
	var err error
	if cerr := w.check(); cerr != nil {
		err = fmt.Errorf("SessionWindowedBy: %w", cerr)
	}
	return &SessionWindowedStream[K, V]{g: g, w: w, err: err}
}

// SessionCount counts the records of each key's sessions. As in Kafka
// Streams, a record without a value counts too; one without a key is
// dropped.
func SessionCount[K, V any](ss *SessionWindowedStream[K, V], opts ...Option) *Table[Windowed[K], int64] {
	t := sessionAggregate(ss, "session-count", opts, serde.Int64, countAdd, func(_, acc any, has bool, next any) any {
		if !has {
			return next
		}
		return acc.(int64) + next.(int64)
	}, true, nil)
	t.node.ValueBlind = true
	return t
}

// SessionReduce combines the values of each key's sessions: the first value
// is the aggregate, each later one is combined with it by fn, and so are
// the aggregates of merged sessions (earlier session first). A record
// without a key or value is dropped.
func SessionReduce[K, V any](ss *SessionWindowedStream[K, V], fn func(agg, v V) V, opts ...Option) *Table[Windowed[K], V] {
	return sessionAggregate(ss, "session-reduce", opts, ss.g.s.vs, reduceAdd(fn), func(_, acc any, has bool, next any) any {
		if !has {
			return next
		}
		return fn(acc.(V), next.(V))
	}, false, nilFuncErr(fn == nil, "reduce"))
}

// SessionAggregate folds the records of each key's sessions into an
// aggregate that starts as init() and is updated by fn. When a record
// falls into sessions, their aggregates are combined first: starting from
// init(), merge folds in each session's, earliest first; then fn adds the
// record. A record without a key or value is dropped.
func SessionAggregate[K, V, VA any](ss *SessionWindowedStream[K, V], init func() VA, fn func(K, V, VA) VA, merge func(K, VA, VA) VA, opts ...Option) *Table[Windowed[K], VA] {
	return sessionAggregate(ss, "session-aggregate", opts, defaultSerde[VA](), aggregateAdd(init, fn), func(k, acc any, has bool, next any) any {
		if !has {
			acc = init()
		}
		return merge(as[K](k), acc.(VA), next.(VA))
	}, false, errors.Join(nilFuncErr(init == nil, "init"), nilFuncErr(fn == nil, "aggregate"), nilFuncErr(merge == nil, "merge")))
}

// sessionAggregate adds the node that folds each record into its key's
// session, merging sessions it bridges. Its store is keyed in
// SessionWindowedSerde's format, so a key's sessions are in the order of
// their ends. countsNulls: records without a value are folded in too (a
// count).
func sessionAggregate[K, V, VA any](ss *SessionWindowedStream[K, V], op string, opts []Option, vas serde.Serde[VA], add aggFunc, merge sessionMerge, countsNulls bool, nilErr error) *Table[Windowed[K], VA] {
	g := ss.g
	b := g.s.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "EmitFinal", "EmitInterval", "Retention")
	vas, serr := valueSerdeOpt(o, vas)
	in := g.input()
	n := &topo.Node{Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{in.node}}
	n.Name = b.name(op, o, n.Parents, "")
	ks, wb, rerr := sessionBase(b, n.Name, o, in.ks, vas, ss.w)
	wb.countsNulls = countsNulls
	n.Stores = wb.stores()
	n.New = wb.sessionProcessor(add, merge)
	n.Typed = windowClose{ss.w.gap + ss.w.grace}
	b.add(n, errors.Join(g.err, ss.err, err, serr, nilErr, rerr))
	return keptAs(&Table[Windowed[K], VA]{b: b, node: n, ks: ks, vs: vas, store: wb.store}, StoreInfo{Kind: SessionKind}, in.ks)
}

// sessionBase declares the stores of a session aggregation named by node.
func sessionBase[K, VA any](b *Builder, node string, o *options, inner serde.Serde[K], vas serde.Serde[VA], w Sessions) (serde.Serde[Windowed[K]], windowBase, error) {
	var ks serde.Serde[Windowed[K]]
	if inner != nil {
		ks = SessionWindowedSerde(inner)
	}
	wb, err := newWindowBase(b, node, o, sessionWindowKind, topo.SessionStore, codecOf(ks), codecOf(vas), w.gap, w.gap+w.grace, w.grace)
	wb.wkey = windowedKeyOf[K]
	wb.ikc = codecOf(inner)
	return ks, wb, err
}

// sessionProcessor makes the processors that fold records into the
// sessions of the base's stores.
func (wb windowBase) sessionProcessor(add aggFunc, merge sessionMerge) func() topo.Processor {
	return func() topo.Processor { return &sessionProc{wb: wb, add: add, merge: merge} }
}

// sessionMerge folds the aggregate of a session, next, into acc, the
// aggregate of the sessions before it (has: there were some).
type sessionMerge func(k, acc any, has bool, next any) any

// session is a stored session of the key being processed.
type session struct {
	kb         []byte // its store key
	start, end int64
	agg        any
}

// sessionProc is the processor of a session aggregation, a port of Kafka
// Streams' KStreamSessionWindowAggregate. A record without a key is
// dropped before it moves the processor's stream time, and so, unless the
// aggregation counts them, is one without a value.
type sessionProc struct {
	wb    windowBase
	add   aggFunc
	merge sessionMerge
	c     *topo.Context
	found []session
}

func (p *sessionProc) Init(c *topo.Context) error { p.c = c; return p.wb.open(c) }
func (p *sessionProc) Close() error               { p.wb.close(); return nil }

func (p *sessionProc) Process(r topo.Record) error {
	c, wb := p.c, &p.wb
	if r.Key == nil || r.Value == nil && !wb.countsNulls {
		c.Skip("record without a key or value in an aggregation")
		return nil
	}
	kb, err := innerKey(r, wb.ikc)
	if err != nil {
		return wb.codecErr("key", nil, true, err)
	}
	t := r.Timestamp.UnixMilli()
	gap := wb.size
	now := wb.clock.Observe(c, t)
	closeTime := now - wb.grace - gap
	found, err := p.find(kb, t-gap, t+gap)
	if err != nil {
		return err
	}
	start, end := t, t
	var agg any
	for i, s := range found {
		agg = p.merge(r.Key, agg, i > 0, s.agg)
		start, end = min(start, s.start), max(end, s.end)
	}
	if end < closeTime {
		c.Skip("record for a closed session")
		if err := c.Late("record for a closed session"); err != nil {
			return err
		}
	} else if err := p.put(r, kb, found, agg, start, end); err != nil {
		return err
	}
	if err := wb.expire(); err != nil {
		return err
	}
	return wb.maybeEmitFinal(c, r, closeTime)
}

// put replaces the sessions found with the session [start, end] holding
// them and the record: unless that is the record's own [t, t], each found
// is removed and retracted first, then the new one is written.
func (p *sessionProc) put(r topo.Record, kb []byte, found []session, agg any, start, end int64) error {
	wb := &p.wb
	t := r.Timestamp.UnixMilli()
	newKey := sessionKey(kb, end, start)
	var old any // the value the new session's key had, if it is one of them
	existed := false
	for _, s := range found {
		if bytes.Equal(s.kb, newKey) {
			old, existed = s.agg, true
		}
	}
	if start != t || end != t {
		for _, s := range found {
			wk := wb.wkey(r.Key, Window{Start: topo.TimeOf(s.start), End: topo.TimeOf(s.end)})
			if err := wb.remove(s.kb, r, wk, s.agg, s.end); err != nil {
				return err
			}
		}
		old = nil
	}
	agg = p.add(r.Key, r.Value, agg, len(found) > 0)
	if !existed {
		if err := wb.created(newKey, end, end); err != nil {
			return err
		}
	}
	wk := wb.wkey(r.Key, Window{Start: topo.TimeOf(start), End: topo.TimeOf(end)})
	return wb.write(newKey, r, wk, old, agg, end, !existed)
}

// find reads the key's sessions that end at or after earliestEnd and start
// at or before latestStart, in the order of their ends, that the
// aggregation sees (windowBase.visible).
func (p *sessionProc) find(kb []byte, earliestEnd, latestStart int64) ([]session, error) {
	p.found = p.found[:0]
	for e, err := range p.wb.rangeWindows(sessionKey(kb, max(earliestEnd, 0), 0), prefixEnd(kb)) {
		if err != nil {
			return nil, err
		}
		if len(e.Key) != len(kb)+16 {
			continue // another key that starts with this one's bytes
		}
		end, start := sessionBounds(e.Key)
		if !p.wb.visible(end) {
			continue
		}
		if start > latestStart {
			// The sessions seen do not overlap: the later ones start later
			// still. (A hidden one may hold a later one.)
			break
		}
		agg, err := p.wb.vc.Decode(e.Value)
		if err != nil {
			return nil, p.wb.codecErr("value", e.Value, false, err)
		}
		p.found = append(p.found, session{kb: bytes.Clone(e.Key), start: start, end: end, agg: agg})
	}
	return p.found, nil
}

// prefixEnd is the least key after every key that starts with prefix (nil:
// none, the prefix is all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ReadOnlySessionStore reads the sessions of a session aggregation.
type ReadOnlySessionStore[K, V any] interface {
	// Fetch iterates key's sessions, in the order of their ends. A key
	// another instance owns gives a *NotLocalError.
	Fetch(key K) iter.Seq2[KeyValue[Windowed[K], V], error]
	// FindSessions iterates key's sessions that end at or after
	// earliestEnd and start at or before latestStart.
	FindSessions(key K, earliestEnd, latestStart time.Time) iter.Seq2[KeyValue[Windowed[K], V], error]
	// FindSessionsKeys is FindSessions for the keys in [fromKey, toKey), in
	// the partitions this instance reads, by encoded key (the order of the
	// key serde's bytes), then end.
	FindSessionsKeys(fromKey, toKey K, earliestEnd, latestStart time.Time) iter.Seq2[KeyValue[Windowed[K], V], error]
	// All iterates every session of the partitions this instance reads, by
	// encoded key, then end.
	All() iter.Seq2[KeyValue[Windowed[K], V], error]
}

// QuerySessionStore opens the store of a session aggregation of a running
// topology (its Materialized name) for reading.
func QuerySessionStore[K, V any](q Queryable, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (ReadOnlySessionStore[K, V], error) {
	if keySerde == nil {
		return nil, fmt.Errorf("engine: store %q: %w", store, nilSerdes(true, valueSerde == nil))
	}
	if err := checkStore(q, "QuerySessionStore", store, StoreInfo{Kind: SessionKind}); err != nil {
		return nil, err
	}
	kv, err := openStore(q, store, SessionWindowedSerde(keySerde), valueSerde, opts...)
	if err != nil {
		return nil, err
	}
	return &sessionStore[K, V]{kv: kv, inner: keySerde}, nil
}

type sessionStore[K, V any] struct {
	kv    *kvStore[Windowed[K], V]
	inner serde.Serde[K]
}

func (s *sessionStore[K, V]) Fetch(key K) iter.Seq2[KeyValue[Windowed[K], V], error] {
	return s.FindSessions(key, time.UnixMilli(0), time.UnixMilli(math.MaxInt64))
}

func (s *sessionStore[K, V]) FindSessions(key K, earliestEnd, latestStart time.Time) iter.Seq2[KeyValue[Windowed[K], V], error] {
	kb, err := s.inner.Encode(key)
	if err != nil {
		return errSeq[Windowed[K], V](s.kv.serdeErr("key", nil, true, err))
	}
	// The owner and readiness checks of a point read.
	if _, _, err := s.kv.raw.Get(sessionKey(kb, 0, 0)); err != nil {
		return errSeq[Windowed[K], V](err)
	}
	lo, hi := sessionKey(kb, max(earliestEnd.UnixMilli(), 0), 0), prefixEnd(kb)
	latest := latestStart.UnixMilli()
	return func(yield func(KeyValue[Windowed[K], V], error) bool) {
		for kv, err := range s.kv.scanKey(lo, hi, 16, func(k []byte) bool {
			_, start := sessionBounds(k)
			return start <= latest
		}) {
			if !yield(kv, err) || err != nil {
				return
			}
		}
	}
}

func (s *sessionStore[K, V]) FindSessionsKeys(fromKey, toKey K, earliestEnd, latestStart time.Time) iter.Seq2[KeyValue[Windowed[K], V], error] {
	return keyRange(s.kv, s.inner, 16, fromKey, toKey, func(k []byte) bool {
		end, start := sessionBounds(k)
		return end >= earliestEnd.UnixMilli() && start <= latestStart.UnixMilli()
	})
}

func (s *sessionStore[K, V]) All() iter.Seq2[KeyValue[Windowed[K], V], error] { return s.kv.All() }
