package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// SuppressUntilWindowCloses holds back a windowed table's updates until
// their window closes, then emits each window's final value once: Kafka
// Streams' suppress(Suppressed.untilWindowCloses(unbounded())). A window
// closes when the suppression's own stream time (the largest timestamp of
// the updates it was given, so not of records the aggregation dropped)
// reaches the window's end ([Window.End]: a time window's exclusive end, a
// sliding window's or session's last instant) plus the grace period of the
// windowed aggregation upstream (for sessions, plus the inactivity gap).
// The windows leave earliest end first, then in the order of their encoded
// keys, each with the timestamp and headers of its latest update and the
// change from the value before its first update held back; a window whose
// latest update is a retraction (a session merged into another) emits
// nothing. Unlike [EmitFinal], this does not wait for the wall clock and
// never misses a window; a session a later record extends after it was
// emitted is emitted again when it closes anew.
//
// The buffer is a store (named by [Materialized], default the node's name
// plus "-buffer", with a changelog unless [WithoutChangelog]), so what
// waits survives a restart. It is not bounded. The table must come from
// windowed aggregations upstream, every path up from it reaching one (the
// longest close delay among them counts, as Kafka Streams'
// GraphGraceSearchUtil finds it): building fails otherwise.
func SuppressUntilWindowCloses[K, V any](t *Table[Windowed[K], V], opts ...Option) *Table[Windowed[K], V] {
	o, err := t.b.opts("SuppressUntilWindowCloses", opts, "Named", "Materialized", "InMemory", "WithoutChangelog")
	closeAfter, ok := windowCloseOf(t.node)
	if !ok {
		err = errors.Join(err, errors.New("SuppressUntilWindowCloses: the table does not come from a windowed aggregation, so its windows never close"))
	}
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "suppress-until-window-closes", Parents: []*topo.Node{t.node}}
	n.Name = t.b.name("suppress-until-window-closes", o, n.Parents, "")
	store := n.Name + "-buffer"
	if o.store != "" {
		store = o.store
	}
	t.b.addStore(o, store)
	n.Stores = []string{store}
	n.Typed = windowClose{closeAfter}
	kc, vc := codecOf(t.ks), codecOf(t.vs)
	n.New = func() topo.Processor {
		return &windowSuppress{store: store, kc: kc, vc: vc, closeAfter: closeAfter.Milliseconds()}
	}
	t.b.add(n, errors.Join(err, nilSerdes(t.ks == nil, t.vs == nil)))
	return &Table[Windowed[K], V]{b: t.b, node: n, ks: t.ks, vs: t.vs}
}

// windowCloseOf finds how long after its end a window of the table of node
// n closes: the windowed aggregation's, found upstream (Kafka Streams'
// GraphGraceSearchUtil); the longest, if the table comes from several.
func windowCloseOf(n *topo.Node) (time.Duration, bool) {
	if w, ok := n.Typed.(windowClose); ok {
		return w.closeAfter, true
	}
	if len(n.Parents) == 0 {
		return 0, false
	}
	var d time.Duration
	for _, p := range n.Parents {
		pd, ok := windowCloseOf(p)
		if !ok {
			return 0, false
		}
		d = max(d, pd)
	}
	return d, true
}

// windowSuppress is one task's SuppressUntilWindowCloses. Its store maps
// the window's end (8 bytes big-endian) followed by the encoded windowed
// key to the change waiting (windowSuppressEntry), stamped with the latest
// update's timestamp: so the windows due are the store's first keys.
type windowSuppress struct {
	store      string
	kc, vc     topo.Codec
	closeAfter int64 // ms

	c     *topo.Context
	st    topo.KVStore
	clock topo.Clock
}

func (s *windowSuppress) Init(c *topo.Context) error {
	if s.kc == nil || s.vc == nil {
		return fmt.Errorf("engine: store %q: %w", s.store, nilSerdes(s.kc == nil, s.vc == nil))
	}
	s.c = c
	var err error
	s.st, err = c.Store(s.store)
	return err
}

func (s *windowSuppress) Close() error { return nil }

func (s *windowSuppress) Process(r topo.Record) error {
	ch := r.Value.(topo.Change)
	end, ok := windowEndOf(r.Key)
	if !ok {
		return fmt.Errorf("engine: node %q: a key of type %T is not a windowed key", s.c.Name(), r.Key)
	}
	kb, ok := topo.RawKey(r, s.kc)
	if !ok {
		var err error
		if kb, err = s.kc.Encode(r.Key); err != nil {
			return s.err("key", nil, true, err)
		}
	}
	now := s.clock.Observe(s.c, r.Timestamp.UnixMilli())
	bk := append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(kb)), uint64(max(end, 0))), kb...)
	prev, waiting, err := s.st.Get(bk)
	if err != nil {
		return err
	}
	if waiting {
		// The value before the first update held back stays.
		w, err := s.decode(prev.Value)
		if err != nil {
			return err
		}
		ch.Old = w.c.Old
	}
	entry, err := encodeSuppressEntry(ch, r.Headers, s.vc)
	if err != nil {
		return s.err("value", nil, true, err)
	}
	if err := s.st.Put(bk, entry, r.Timestamp.UnixMilli()); err != nil {
		return err
	}
	// Windows whose end plus grace is at or before the stream time leave.
	due := now - s.closeAfter
	if due < 0 {
		return nil
	}
	var keys [][]byte
	for e, err := range s.st.Range(nil, binary.BigEndian.AppendUint64(nil, uint64(due+1))) {
		if err != nil {
			return err
		}
		keys = append(keys, bytes.Clone(e.Key))
	}
	for _, k := range keys {
		if err := s.emit(k, now); err != nil {
			return err
		}
	}
	return nil
}

// emit lets a window's waiting change leave the buffer.
func (s *windowSuppress) emit(bk []byte, now int64) error {
	e, ok, err := s.st.Get(bk)
	if err != nil || !ok {
		return err
	}
	w, err := s.decode(e.Value)
	if err != nil {
		return err
	}
	if err := s.st.Delete(bk, now); err != nil {
		return err
	}
	if w.c.New == nil {
		return nil // a retraction: Kafka Streams drops it
	}
	k, err := s.kc.Decode(bk[8:])
	if err != nil {
		return s.err("key", bk[8:], false, err)
	}
	return s.c.Forward(topo.Record{Key: k, Value: w.c, Timestamp: topo.TimeOf(e.Timestamp), Headers: w.headers})
}

func (s *windowSuppress) err(part string, b []byte, encode bool, err error) error {
	return &serde.Error{Store: s.store, Partition: -1, Offset: -1, Part: part, Bytes: b, Encode: encode, Err: err}
}

// windowEndOf is the end of a windowed key's window, in Unix ms.
func windowEndOf(key any) (int64, bool) {
	if w, ok := key.(interface{ windowEnd() int64 }); ok {
		return w.windowEnd(), true
	}
	return 0, false
}

func (w Windowed[K]) windowEnd() int64 { return w.Window.End.UnixMilli() }

// windowSuppressEntry is a change waiting in the buffer, with the headers
// of its latest update.
type windowSuppressEntry struct {
	c       topo.Change
	headers []topo.Header
}

// encodeSuppressEntry writes the change (topo.EncodeChange) as a field,
// then the headers (appendHeaders).
func encodeSuppressEntry(c topo.Change, hs []topo.Header, vc topo.Codec) ([]byte, error) {
	cb, err := topo.EncodeChange(c, vc)
	if err != nil {
		return nil, err
	}
	return appendHeaders(appendField(nil, cb), hs), nil
}

func (s *windowSuppress) decode(b []byte) (windowSuppressEntry, error) {
	var w windowSuppressEntry
	f := newFieldReader(b)
	cb := f.field()
	w.headers = f.headers()
	if !f.ok {
		return w, s.err("value", b, false, errors.New("a truncated window suppression buffer entry"))
	}
	var err error
	if w.c, err = topo.DecodeChange(cb, s.vc); err != nil {
		return w, s.err("value", b, false, err)
	}
	return w, nil
}
