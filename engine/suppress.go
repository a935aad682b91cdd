package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// SuppressUntil rate-limits the table's updates per key: an update waits in
// a buffer until limit has passed, in stream time, since the key's first
// update now waiting (arriving updates do not restart the wait), then
// leaves as one update from the value before the first to the latest. So a
// key changes downstream at most once per limit, as with Kafka Streams'
// suppress(untilTimeLimit). Stream time here is the suppression's own: the
// latest timestamp of the updates it was given (Kafka Streams' observed
// stream time), which records dropped upstream do not move. An update
// whose own timestamp is already limit behind it leaves at once. Every
// update that leaves goes downstream, a delete too, even of a key that was
// added and deleted while it waited or that the suppression never passed
// on (as Kafka Streams' untilTimeLimit does; see [OmitAbsentDeletes]). An
// update that leaves carries the timestamp and headers of the latest one
// it stands for.
//
// The buffer is a store (named by [Materialized], default the node's name
// plus "-buffer", with a changelog unless [WithoutChangelog]), so what waits
// survives a restart, and under exactly-once an update leaves in the same
// transaction as the input that let it go. [MaxRecords] and [MaxBytes] bound
// it: when it would hold more, the updates that have waited longest leave
// early, or, with [ShutDownWhenFull], the task fails. Windowed aggregations
// emit only final results with [EmitFinal] or [SuppressUntilWindowCloses]
// instead.
func (t *Table[K, V]) SuppressUntil(limit time.Duration, opts ...Option) *Table[K, V] {
	o, err := t.b.opts("SuppressUntil", opts, "Named", "Materialized", "InMemory", "WithoutChangelog", "MaxRecords", "MaxBytes", "ShutDownWhenFull")
	if limit < 0 {
		err = errors.Join(err, fmt.Errorf("SuppressUntil: the time limit %v is negative", limit))
	}
	if o.maxRecords < 0 || o.maxBytes < 0 {
		err = errors.Join(err, fmt.Errorf("SuppressUntil: MaxRecords (%d) and MaxBytes (%d) must not be negative", o.maxRecords, o.maxBytes))
	}
	if o.shutDownWhenFull && o.maxRecords == 0 && o.maxBytes == 0 {
		err = errors.Join(err, errors.New("SuppressUntil: ShutDownWhenFull needs a bound: add MaxRecords or MaxBytes"))
	}
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "suppress", Parents: []*topo.Node{t.node}}
	n.Name = t.b.name("suppress", o, n.Parents, "")
	store := n.Name + "-buffer"
	if o.store != "" {
		store = o.store
	}
	index := store + "-index"
	t.b.addStore(o, store)
	t.b.addStore(o, index)
	n.Stores = []string{store, index}
	kc, vc := codecOf(t.ks), codecOf(t.vs)
	b := suppressBuffer{limit: limit.Milliseconds(), maxRecords: o.maxRecords, maxBytes: o.maxBytes, failWhenFull: o.shutDownWhenFull, omitAbsent: t.b.omitAbsent}
	// Kafka Streams' KTableSuppressProcessorSupplier makes its parent send
	// old values, and reads through its parent's value getter.
	parent := t.kt
	parent.enableSendingOldValues(true)
	kt := &ktable{kind: ktableProcessor, enable: parent.enableSendingOldValues, view: parent.valueGetter}
	n.New = func() topo.Processor {
		s := b // a buffer per task
		return &fproc{
			init: func(c *topo.Context) error { return s.open(c, store, index, kc, vc) },
			fn:   func(c *topo.Context, r topo.Record) error { return s.process(c, r) },
		}
	}
	t.b.add(n, errors.Join(err, nilSerdes(t.ks == nil, t.vs == nil)))
	return &Table[K, V]{b: t.b, node: n, ks: t.ks, vs: t.vs, kt: kt}
}

// MaxRecords bounds SuppressUntil's buffer to n keys.
func MaxRecords(n int) Option {
	return func(o *options) { o.maxRecords = n; o.set = append(o.set, "MaxRecords") }
}

// MaxBytes bounds SuppressUntil's buffer to n bytes of keys and encoded
// values.
func MaxBytes(n int64) Option {
	return func(o *options) { o.maxBytes = n; o.set = append(o.set, "MaxBytes") }
}

// ShutDownWhenFull makes SuppressUntil fail the task when its buffer would
// exceed its bound, rather than let updates leave early: for when an early
// result would be wrong.
func ShutDownWhenFull() Option {
	return func(o *options) { o.shutDownWhenFull = true; o.set = append(o.set, "ShutDownWhenFull") }
}

// suppressBuffer is one task's SuppressUntil. The buffer store maps a key to
// the time its wait began (8 bytes big-endian) followed by the waiting
// change (topo.EncodeChange: the value before the first update, the
// latest); the index orders the keys by that time.
type suppressBuffer struct {
	limit        int64 // ms
	maxRecords   int
	maxBytes     int64
	failWhenFull bool
	omitAbsent   bool // OmitAbsentDeletes: a change from nothing to nothing leaves silently

	clock topo.Clock // the suppression's own stream time
	st    kvAccess
	index *timeIndex
	// Keys waiting and their keys' and entries' bytes, for the bounds
	// (counted from the restored buffer only when there are bounds, on the
	// first record: processors start before their stores are restored).
	n       int
	nbytes  int64
	counted bool
}

func (s *suppressBuffer) open(c *topo.Context, store, index string, kc, vc topo.Codec) error {
	if err := s.st.open(c, store, kc, vc, false); err != nil {
		return err
	}
	ix, err := c.Store(index)
	if err != nil {
		return err
	}
	s.index = newTimeIndex(ix)
	// The counts only serve the bounds.
	s.counted = s.maxRecords == 0 && s.maxBytes == 0
	return nil
}

// count counts what the buffer holds, restored from its changelog: it
// counts against the bounds.
func (s *suppressBuffer) count() error {
	for e, err := range s.st.st.Range(nil, nil) {
		if err != nil {
			return err
		}
		s.n++
		s.nbytes += int64(len(e.Key) + len(e.Value))
	}
	s.counted = true
	return nil
}

func (s *suppressBuffer) process(c *topo.Context, r topo.Record) error {
	if !s.counted {
		if err := s.count(); err != nil {
			return err
		}
	}
	ch := r.Value.(topo.Change)
	kb, ok := topo.RawKey(r, s.st.kc)
	if !ok {
		var err error
		if kb, err = s.st.kc.Encode(r.Key); err != nil {
			return s.st.err("key", nil, true, err)
		}
	}
	ts := r.Timestamp.UnixMilli()
	since := ts
	prev, waiting, err := s.st.st.Get(kb)
	if err != nil {
		return err
	}
	if waiting {
		old, err := s.decode(prev.Value)
		if err != nil {
			return err
		}
		since, ch.Old = old.since, old.c.Old
		s.nbytes -= int64(len(kb) + len(prev.Value))
	} else {
		if err := s.index.add(since, kb, ts); err != nil {
			return err
		}
		s.n++
	}
	cb, err := topo.EncodeChange(ch, s.st.vc)
	if err != nil {
		return s.st.err("value", nil, true, err)
	}
	entry := binary.BigEndian.AppendUint64(make([]byte, 0, 8+1+binary.MaxVarintLen64+len(cb)+1), uint64(since))
	entry = appendHeaders(appendField(append(entry, entryWithHeaders), cb), r.Headers)
	if err := s.st.st.Put(kb, entry, ts); err != nil { // stores copy what they keep
		return err
	}
	s.nbytes += int64(len(kb) + len(entry))

	now := s.clock.Observe(c, ts)
	if err := s.index.each(now-s.limit, now, func(kb []byte) error { return s.emit(c, kb, now) }); err != nil {
		return err
	}
	for s.n > 0 && (s.maxRecords > 0 && s.n > s.maxRecords || s.maxBytes > 0 && s.nbytes > s.maxBytes) {
		if s.failWhenFull {
			return fmt.Errorf("engine: node %q: the suppression buffer is full (%d keys, %d bytes; MaxRecords %d, MaxBytes %d) and ShutDownWhenFull is set", c.Name(), s.n, s.nbytes, s.maxRecords, s.maxBytes)
		}
		// The longest waiting leaves early.
		left := false
		if err := s.index.first(math.MaxInt64-1, now, 1, func(kb []byte) error { left = true; return s.emit(c, kb, now) }); err != nil {
			return err
		}
		if !left {
			return fmt.Errorf("engine: node %q: the suppression buffer counts %d keys but its index has none", c.Name(), s.n)
		}
	}
	return nil
}

type waitingChange struct {
	since   int64
	c       topo.Change
	headers []topo.Header // the latest update's
}

// entryWithHeaders follows the time in a buffer entry that also holds the
// headers of its latest update: the change as a field, then the headers
// (fields.go). An entry written before headers were kept has the change
// (topo.EncodeChange, whose flag byte is below 4) right after the time.
const entryWithHeaders = 0x80

func (s *suppressBuffer) decode(b []byte) (waitingChange, error) {
	if len(b) < 9 {
		return waitingChange{}, s.st.err("value", b, false, errors.New("a suppression buffer entry needs at least 9 bytes"))
	}
	w := waitingChange{since: int64(binary.BigEndian.Uint64(b[:8]))}
	cb := b[8:]
	if b[8] == entryWithHeaders {
		f := newFieldReader(b[9:])
		cb, w.headers = f.field(), f.headers()
		if !f.ok {
			return waitingChange{}, s.st.err("value", b, false, errors.New("a truncated suppression buffer entry"))
		}
	}
	var err error
	if w.c, err = topo.DecodeChange(cb, s.st.vc); err != nil {
		return waitingChange{}, s.st.err("value", b, false, err)
	}
	return w, nil
}

// emit lets a key's waiting change leave the buffer.
func (s *suppressBuffer) emit(c *topo.Context, kb []byte, now int64) error {
	e, ok, err := s.st.st.Get(kb)
	if err != nil || !ok {
		return err
	}
	w, err := s.decode(e.Value)
	if err != nil {
		return err
	}
	if err := s.st.st.Delete(kb, now); err != nil {
		return err
	}
	s.n--
	s.nbytes -= int64(len(kb) + len(e.Value))
	if w.c.Old == nil && w.c.New == nil && s.omitAbsent {
		return nil
	}
	k, err := s.st.kc.Decode(kb)
	if err != nil {
		return s.st.err("key", kb, false, err)
	}
	return c.Forward(topo.Record{Key: k, Value: w.c, Timestamp: topo.TimeOf(e.Timestamp), Headers: w.headers})
}
