package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Versioned tables (Kafka Streams' versioned stores, KIP-889 and KIP-914).
//
// A versioned table keeps, besides each key's latest value, the values it
// had over the last history (in stream time), so that a stream record can
// be joined with the table as it was at the record's time rather than as it
// is when the record happens to be processed. The latest value of a key is
// the one with the greatest timestamp, not the last one read: an update
// older than the key's latest (out of order) is kept as a past version and
// changes nothing downstream, and an update older than the history is
// dropped (counted as skipped).
//
// Three stores hold a versioned table: the table's own key-value store with
// the latest values (queried and joined like any table's), "<store>-history"
// with the past versions, and "<store>-history-index", which orders the past
// versions by when they stop being needed. The table has a stream time of
// its own, as Kafka Streams' versioned store does: the greatest timestamp
// of its updates (the stream records joined with it do not move it), kept
// in the history store under clockKey, so that the table's processor and
// the joins reading it agree, and a restart resumes it. An update older than
// that time by more than the history is dropped; a lookup older than that
// still finds the latest value if it had started by then, and nothing else.
// A history key is the record key
// and the version's start (8 bytes, the window store's layout, so the key
// alone says which partition holds it); its value is a byte saying whether
// the version is a value (1) or a deletion (0), the time the version ends
// (8 bytes; an update out of order may end it earlier without rewriting
// it), then the value. A version is needed while some time in the history
// may fall inside it: it goes once stream time has passed its end by the
// history. An index entry whose version has been written again since, with
// a later end, is passed over: the newer entry removes it.
const (
	versionValue     = 1
	versionTombstone = 0
	versionHeader    = 9 // the kind and the end
)

// Versioned keeps the table's past values for history (in stream time) so
// that [Join] and [LeftJoin] can read the table as of a stream record's
// time, and [JoinGrace] can wait for the table to catch up. For NewTable
// and Stream.ToTable. The history must be at least a millisecond.
func Versioned(history time.Duration) Option {
	return func(o *options) { o.versioned = history; o.set = append(o.set, "Versioned") }
}

// JoinGrace delays each record of a stream–table join until the buffer's
// time (the greatest timestamp of the records it took) is d past it, then
// joins it with the table as of the record's time, so that table updates up
// to d late are still seen; records leave in timestamp order, and those of
// one time in the order of their keys' bytes, as in Kafka Streams. A record
// already more than d behind joins at once, and so does a left join's
// record without a key. The records waiting are kept in a store
// ("<join>-buffer", with a changelog).
// The table must be [Versioned] with a history of at least d. Kafka Streams'
// Joined.withGracePeriod.
func JoinGrace(d time.Duration) Option {
	return func(o *options) { o.joinGrace = d; o.set = append(o.set, "JoinGrace") }
}

// versionedStores names the stores of a versioned table whose latest values
// are in store.
func versionedStores(store string) (history, index string) {
	return store + "-history", store + "-history-index"
}

// addVersioned declares the history stores of a versioned table.
func (b *Builder) addVersioned(o *options, store string) {
	history, index := versionedStores(store)
	b.addStore(o, history).Kind = topo.WindowStore
	b.addStore(o, index)
}

func historyKey(kb []byte, from int64) []byte { return suffixed(kb, from) }

// clockKey is the history store's key of the table's stream time: shorter
// than any history key (a record key and 8 bytes), so no range of a key's
// versions holds it.
var clockKey = []byte{0xff}

// versionedAccess reads and writes a versioned table in a task.
type versionedAccess struct {
	latest  kvAccess
	history topo.KVStore
	index   *timeIndex
	keep    int64 // the history, in ms
}

func (a *versionedAccess) open(c *topo.Context, store string, kc, vc topo.Codec, keep time.Duration) error {
	if err := a.latest.open(c, store, kc, vc, true); err != nil {
		return err
	}
	history, index := versionedStores(store)
	var err error
	if a.history, err = c.Store(history); err != nil {
		return err
	}
	ix, err := c.Store(index)
	if err != nil {
		return err
	}
	a.index = newTimeIndex(ix)
	a.keep = keep.Milliseconds()
	return nil
}

// clock is the table's stream time: the greatest timestamp of its updates
// (topo.NoTime before the first).
func (a *versionedAccess) clock() (int64, error) {
	e, ok, err := a.history.Get(clockKey)
	if err != nil || !ok || len(e.Value) != 8 {
		return topo.NoTime, err
	}
	return int64(binary.BigEndian.Uint64(e.Value)), nil
}

// horizon is the earliest time the history still answers for, at the table's
// stream time now.
func (a *versionedAccess) horizon(now int64) int64 {
	if now == topo.NoTime {
		return now
	}
	return now - a.keep
}

// versions returns the key's past versions, earliest first.
func (a *versionedAccess) versions(kb []byte, to int64) ([]topo.Entry, error) {
	var out []topo.Entry
	for e, err := range a.history.Range(historyKey(kb, 0), historyKey(kb, to)) {
		if err != nil {
			return nil, err
		}
		if len(e.Key) != len(kb)+8 || len(e.Value) < versionHeader {
			continue // a longer key that starts with this one's bytes
		}
		out = append(out, topo.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value), Timestamp: int64(binary.BigEndian.Uint64(e.Key[len(kb):]))})
	}
	return out, nil
}

// keepVersion writes a past version (value nil: a deletion) starting at
// from and valid until until, and schedules its removal.
func (a *versionedAccess) keepVersion(kb []byte, from, until int64, vb []byte, deleted bool) error {
	v := make([]byte, 0, versionHeader+len(vb))
	if deleted {
		v = binary.BigEndian.AppendUint64(append(v, versionTombstone), uint64(until))
	} else {
		v = append(binary.BigEndian.AppendUint64(append(v, versionValue), uint64(until)), vb...)
	}
	hk := historyKey(kb, from)
	if err := a.history.Put(hk, v, from); err != nil {
		return err
	}
	return a.index.add(until+a.keep, hk, from)
}

// versionEnd is the end of a past version, as written (a later version
// may end it earlier).
func versionEnd(v []byte) int64 { return int64(binary.BigEndian.Uint64(v[1:versionHeader])) }

// expire removes the versions no time in the history falls inside, at the
// table's stream time ms.
func (a *versionedAccess) expire(ms int64) error {
	if ms == topo.NoTime {
		return nil
	}
	return a.index.each(ms, ms, func(hk []byte) error {
		e, ok, err := a.history.Get(hk)
		if err != nil || !ok || len(e.Value) < versionHeader {
			return err
		}
		if until := int64(binary.BigEndian.Uint64(e.Value[1:versionHeader])); until+a.keep > ms {
			return nil // written again since, to end later
		}
		return a.history.Delete(hk, ms)
	})
}

// process folds one update of the table's source into the versions.
func (a *versionedAccess) process(c *topo.Context, r topo.Record) error {
	if r.Key == nil {
		c.Skip("record without a key for a table")
		return nil
	}
	now, err := a.clock()
	if err != nil {
		return err
	}
	ts := r.Timestamp.UnixMilli()
	if ts < a.horizon(now) {
		c.Skip("update older than the versioned table's history")
		return nil
	}
	if ts > now {
		now = ts
		if err := a.history.Put(clockKey, binary.BigEndian.AppendUint64(nil, uint64(now)), now); err != nil {
			return err
		}
	}
	if err := a.expire(now); err != nil {
		return err
	}
	kb, old, oldTime, ok, err := a.latest.getKey(r)
	if err != nil {
		return err
	}
	if ok && ts >= oldTime.UnixMilli() {
		// The new latest value; the old one becomes a past version, unless
		// it has the same time. A deletion at a later time is a version of
		// its own; one at the latest value's time only removes that value,
		// as Kafka Streams' versioned store does (the version before it
		// ended then already).
		from := oldTime.UnixMilli()
		if from < ts {
			vb, err := a.latest.vc.Encode(old)
			if err != nil {
				return a.latest.err("value", nil, true, err)
			}
			if err := a.keepVersion(kb, from, ts, vb, false); err != nil {
				return err
			}
		}
		if r.Value == nil && from < ts {
			if err := a.keepVersion(kb, ts, ts, nil, true); err != nil {
				return err
			}
		}
		return a.latest.updateKey(kb, r, old, r.Value, r.Timestamp)
	}
	// No latest value, or a newer one: where does ts fall among the past
	// versions?
	past, err := a.versions(kb, 1<<63-1)
	if err != nil {
		return err
	}
	until := int64(1<<63 - 1) // when the version starting at ts ends
	if ok {
		until = oldTime.UnixMilli()
	}
	inside := int64(1<<63 - 1) // the end of the version ts falls inside
	for i := range past {
		if past[i].Timestamp > ts {
			until = min(until, past[i].Timestamp)
			break
		}
		inside = 1<<63 - 1
		if end := versionEnd(past[i].Value); end > ts {
			inside = end
		}
	}
	// A version written inside an earlier one ends where that one did.
	until = min(until, inside)
	if !ok && until == 1<<63-1 {
		// Later than every version, and the key is deleted (or new): a
		// value becomes the latest; a deletion changes nothing downstream,
		// but ends the versions before it (an update older than it is
		// out of order).
		if r.Value != nil {
			return a.latest.updateKey(kb, r, nil, r.Value, r.Timestamp)
		}
		// Deleted already, perhaps, but a deletion is a version too: an
		// update older than it, out of order, ends there.
		return a.keepVersion(kb, ts, ts, nil, true)
	}
	// Out of order: a past version, nothing downstream. A version that
	// ends before the history begins would never be read.
	if until < a.horizon(now) {
		c.Skip("update older than the versioned table's history")
		return nil
	}
	if r.Value == nil {
		return a.keepVersion(kb, ts, until, nil, true)
	}
	vb, err := a.latest.vc.Encode(r.Value)
	if err != nil {
		return a.latest.err("value", nil, true, err)
	}
	return a.keepVersion(kb, ts, until, vb, false)
}

// asOf returns the key's value at time t (nil, false when it had none). Past
// the history only the latest value is known, if it had started by t.
func (a *versionedAccess) asOf(kb []byte, t int64) (any, bool, error) {
	e, ok, err := a.latest.tbl.Get(kb)
	if err != nil {
		return nil, false, err
	}
	if ok && e.Timestamp <= t {
		return a.decode(e.Value)
	}
	now, err := a.clock()
	if err != nil || t < a.horizon(now) {
		return nil, false, err
	}
	past, err := a.versions(kb, t+1)
	if err != nil || len(past) == 0 {
		return nil, false, err
	}
	v := past[len(past)-1].Value
	if v[0] == versionTombstone || versionEnd(v) <= t {
		return nil, false, nil
	}
	return a.decode(v[versionHeader:])
}

func (a *versionedAccess) decode(vb []byte) (any, bool, error) {
	v, err := a.latest.vc.Decode(vb)
	if err != nil {
		return nil, false, a.latest.err("value", vb, false, err)
	}
	return v, true, nil
}

// ReadOnlyVersionedStore reads a versioned table (see [Versioned]).
type ReadOnlyVersionedStore[K, V any] interface {
	// Get returns the key's latest value and the time it was set.
	Get(key K) (value V, from time.Time, ok bool, err error)
	// GetAsOf returns the value the key had at time t and the time it was
	// set. Versions that ended more than the history before stream time may
	// be gone.
	GetAsOf(key K, t time.Time) (value V, from time.Time, ok bool, err error)
}

// QueryVersionedStore opens a versioned table of a running topology (its
// Materialized name) for reading.
func QueryVersionedStore[K, V any](q Queryable, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (ReadOnlyVersionedStore[K, V], error) {
	if err := checkStore(q, "QueryVersionedStore", store, StoreInfo{Kind: VersionedKind}); err != nil {
		return nil, err
	}
	latest, err := openStore(q, store, keySerde, valueSerde, opts...)
	if err != nil {
		return nil, err
	}
	name, _ := versionedStores(store)
	history, err := openStore(q, name, serde.Bytes, serde.Bytes, opts...)
	if err != nil {
		return nil, err
	}
	return &versionedStore[K, V]{latest: latest, history: history}, nil
}

type versionedStore[K, V any] struct {
	latest  *kvStore[K, V]
	history *kvStore[[]byte, []byte]
}

func (s *versionedStore[K, V]) Get(key K) (V, time.Time, bool, error) {
	var zero V
	kb, err := s.latest.ks.Encode(key)
	if err != nil {
		return zero, time.Time{}, false, s.latest.serdeErr("key", nil, true, err)
	}
	e, ok, err := s.latest.raw.Get(kb)
	if err != nil || !ok {
		return zero, time.Time{}, false, err
	}
	v, err := s.latest.vs.Decode(e.Value)
	if err != nil {
		return zero, time.Time{}, false, s.latest.serdeErr("value", e.Value, false, err)
	}
	return v, topo.TimeOf(e.Timestamp), true, nil
}

func (s *versionedStore[K, V]) GetAsOf(key K, t time.Time) (V, time.Time, bool, error) {
	var zero V
	v, from, ok, err := s.Get(key)
	if err != nil || (ok && !from.After(t)) {
		return v, from, ok, err
	}
	kb, err := s.latest.ks.Encode(key)
	if err != nil {
		return zero, time.Time{}, false, s.latest.serdeErr("key", nil, true, err)
	}
	// The owner and readiness checks of a point read.
	if _, _, err := s.history.raw.Get(historyKey(kb, 0)); err != nil {
		return zero, time.Time{}, false, err
	}
	var last topo.Entry
	found := false
	for e, err := range s.history.raw.Range(historyKey(kb, 0), historyKey(kb, t.UnixMilli()+1)) {
		if err != nil {
			return zero, time.Time{}, false, err
		}
		if len(e.Key) == len(kb)+8 && len(e.Value) >= versionHeader {
			last, found = e, true
		}
	}
	if !found || last.Value[0] == versionTombstone {
		return zero, time.Time{}, false, nil
	}
	if v, err = s.latest.vs.Decode(last.Value[versionHeader:]); err != nil {
		return zero, time.Time{}, false, s.latest.serdeErr("value", last.Value[versionHeader:], false, err)
	}
	return v, topo.TimeOf(last.Timestamp), true, nil
}

// checkVersioned is the error of a versioned table's history.
func checkVersioned(d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("Versioned history %v must be at least a millisecond", d)
	}
	return nil
}

// joinBuffer holds the records of a stream–table join for its grace, as
// Kafka Streams' time-ordered buffer does. A key is the record's timestamp
// (8 bytes), its key's bytes and a sequence number (8 bytes), so records
// leave in timestamp order and, at one time, in key order; a value is a
// flag byte (1: the record has a key), then the key, the value and the
// headers, each length-prefixed (a header value's length plus one, 0 for
// none). The buffer's stream time, the greatest timestamp of the records it
// took (a record already too late, joined at once, does not count, nor do
// the table's updates), is kept under the key timeKey.
type joinBuffer struct {
	st      topo.KVStore
	kc, vc  topo.Codec
	grace   int64
	seq     uint64
	nextDue int64 // the earliest timestamp waiting; MaxInt64: none
	now     int64 // the buffer's stream time; MinInt64: none yet
	loaded  bool  // seq, nextDue and now are known
}

// timeKey is the key of the buffer's stream time: one byte, sorting after
// every record's key (a timestamp's first byte is below 0x80).
var timeKey = []byte{0xff}

// load finds the next sequence number, the earliest timestamp and the
// stream time in the buffer, on the first record (processors start before
// their stores are restored).
func (j *joinBuffer) load() error {
	j.nextDue, j.now, j.loaded = 1<<63-1, -1<<63, true
	for e, err := range j.st.Range(nil, nil) {
		if err != nil {
			return err
		}
		switch {
		case len(e.Key) >= 16:
			j.nextDue = min(j.nextDue, int64(binary.BigEndian.Uint64(e.Key)))
			j.seq = max(j.seq, binary.BigEndian.Uint64(e.Key[len(e.Key)-8:])+1)
		case bytes.Equal(e.Key, timeKey) && len(e.Value) == 8:
			j.now = int64(binary.BigEndian.Uint64(e.Value))
		}
	}
	return nil
}

// process joins r at once if it is later than the grace already (by the
// buffer's stream time before it), else buffers it and joins, in order,
// every record the grace has passed.
func (j *joinBuffer) process(c *topo.Context, r topo.Record, join func(*topo.Context, topo.Record) error) error {
	if !j.loaded {
		if err := j.load(); err != nil {
			return err
		}
	}
	ts := r.Timestamp.UnixMilli()
	if j.now != -1<<63 && ts < j.now-j.grace {
		return join(c, r)
	}
	kb, ok := topo.RawKey(r, j.kc)
	if !ok {
		var err error
		if kb, err = j.kc.Encode(r.Key); err != nil {
			return joinSerdeErr(j.st.Name(), "key", nil, true, err)
		}
	}
	b, err := j.encode(r, kb)
	if err != nil {
		return err
	}
	k := binary.BigEndian.AppendUint64(append(binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(kb)), uint64(ts)), kb...), j.seq)
	j.seq++
	if err := j.st.Put(k, b, ts); err != nil {
		return err
	}
	j.nextDue = min(j.nextDue, ts)
	if ts > j.now {
		j.now = ts
		if err := j.st.Put(timeKey, binary.BigEndian.AppendUint64(nil, uint64(ts)), ts); err != nil {
			return err
		}
	}
	due := j.now - j.grace
	if due < j.nextDue {
		return nil
	}
	var waiting []topo.Entry
	for e, err := range j.st.Range(nil, binary.BigEndian.AppendUint64(nil, uint64(due+1))) {
		if err != nil {
			return err
		}
		if len(e.Key) >= 16 {
			waiting = append(waiting, topo.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
		}
	}
	for _, e := range waiting {
		if err := j.st.Delete(e.Key, j.now); err != nil {
			return err
		}
		rec, err := j.decode(e.Value)
		if err != nil {
			return err
		}
		rec.Timestamp = topo.TimeOf(int64(binary.BigEndian.Uint64(e.Key)))
		if err := join(c, rec); err != nil {
			return err
		}
	}
	j.nextDue = 1<<63 - 1
	for e, err := range j.st.Range(nil, timeKey) {
		if err != nil {
			return err
		}
		if len(e.Key) >= 16 {
			j.nextDue = int64(binary.BigEndian.Uint64(e.Key))
			break
		}
	}
	return nil
}

// encode writes r, whose key's bytes are kb (nil: no key), as the buffer
// keeps it.
func (j *joinBuffer) encode(r topo.Record, kb []byte) ([]byte, error) {
	b := []byte{0}
	if r.Key != nil {
		b[0] = 1
		b = appendField(b, kb)
	}
	vb, err := j.vc.Encode(r.Value)
	if err != nil {
		return nil, joinSerdeErr(j.st.Name(), "value", nil, true, err)
	}
	return appendHeaders(appendField(b, vb), r.Headers), nil
}

func (j *joinBuffer) decode(b []byte) (topo.Record, error) {
	var r topo.Record
	if len(b) < 1 {
		return r, joinSerdeErr(j.st.Name(), "value", b, false, fmt.Errorf("malformed buffered record"))
	}
	f := newFieldReader(b[1:])
	var kb []byte
	if b[0] == 1 {
		kb = f.field()
	}
	vb := f.field()
	r.Headers = f.headers()
	if !f.ok {
		return topo.Record{}, joinSerdeErr(j.st.Name(), "value", b, false, fmt.Errorf("malformed buffered record"))
	}
	if kb != nil {
		k, err := j.kc.Decode(kb)
		if err != nil {
			return topo.Record{}, joinSerdeErr(j.st.Name(), "key", kb, false, err)
		}
		r.Key = k
	}
	v, err := j.vc.Decode(vb)
	if err != nil {
		return topo.Record{}, joinSerdeErr(j.st.Name(), "value", vb, false, err)
	}
	r.Value = v
	return r, nil
}
