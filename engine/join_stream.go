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

// JoinWindows say which records of two streams join: a right record at most
// Before earlier or After later than the left one, with the same key.
// Make them with [JoinTimeDifference].
type JoinWindows struct {
	before, after, grace time.Duration
}

// JoinTimeDifference joins records at most d apart, either way, without
// grace: a record later than its window (in stream time) is dropped.
func JoinTimeDifference(d time.Duration) JoinWindows { return JoinWindows{before: d, after: d} }

// Before sets how much earlier than a left record a right record may be.
func (w JoinWindows) Before(d time.Duration) JoinWindows {
	w.before = d
	return w
}

// After sets how much later than a left record a right record may be.
func (w JoinWindows) After(d time.Duration) JoinWindows {
	w.after = d
	return w
}

// Grace accepts out-of-order records for d after their window has passed
// (in stream time).
func (w JoinWindows) Grace(d time.Duration) JoinWindows {
	w.grace = d
	return w
}

func (w JoinWindows) check() error {
	var errs []error
	if w.before < 0 || w.after < 0 || w.before+w.after <= 0 {
		errs = append(errs, fmt.Errorf("join window before %v and after %v must not be negative and must span some time", w.before, w.after))
	}
	if w.grace < 0 {
		errs = append(errs, fmt.Errorf("grace %v is negative", w.grace))
	}
	return errors.Join(errs...)
}

// JoinStreams joins records of two streams with the same key whose
// timestamps fall within the join windows: each pair gives one result,
// stamped with the later of the two times. Records are kept in a store per
// side (with changelogs) for as long as they can still meet a record of the
// other side. A record whose window has passed by more than the grace is
// dropped (counted as skipped, and dead-lettered as late).
func JoinStreams[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, fn func(key K, left VL, right VR) V, opts ...Option) *Stream[K, V] {
	return streamStreamJoin[K, VL, VR, V](l, r, w, "stream-stream-join", false, false, opts, func(k, lv, rv any) any {
		return fn(as[K](k), lv.(VL), rv.(VR))
	}, nilFuncErr(fn == nil, "join"))
}

// LeftJoinStreams is JoinStreams that keeps every left record: one that
// meets no right record gives a result with found false, once its window
// has closed (stream time past it by more than the grace), so that no such
// result is emitted for a record a right one meets later.
func LeftJoinStreams[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, fn func(key K, left VL, right VR, found bool) V, opts ...Option) *Stream[K, V] {
	return streamStreamJoin[K, VL, VR, V](l, r, w, "stream-stream-left-join", true, false, opts, func(k, lv, rv any) any {
		return fn(as[K](k), lv.(VL), as[VR](rv), rv != nil)
	}, nilFuncErr(fn == nil, "join"))
}

// OuterJoinStreams is JoinStreams that keeps every record of both sides:
// one that meets none of the other side gives a result, once its window has
// closed, with the other side not found.
func OuterJoinStreams[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, fn func(key K, left VL, leftFound bool, right VR, rightFound bool) V, opts ...Option) *Stream[K, V] {
	return streamStreamJoin[K, VL, VR, V](l, r, w, "stream-stream-outer-join", true, true, opts, func(k, lv, rv any) any {
		return fn(as[K](k), as[VL](lv), lv != nil, as[VR](rv), rv != nil)
	}, nilFuncErr(fn == nil, "join"))
}

// Each side's store is keyed by record key, timestamp (8 bytes) and the
// record's input offset (8 bytes: records of one key and time stay
// apart). Two time indexes are shared by the sides: when each record can
// no longer meet another and goes (expiry), and, for the sides whose
// unmatched records give results, when each one still unmatched is
// emitted (pending). An index key after its time is the side (1 byte) and
// the record's store key.
const (
	joinLeft  = 0
	joinRight = 1
)

func streamStreamJoin[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, op string, leftOuter, rightOuter bool, opts []Option, join func(k, lv, rv any) any, nilErr error) *Stream[K, V] {
	b := l.b
	o, err := b.opts(op, opts, "InMemory", "WithoutChangelog", "ResultHeaders")
	err = errors.Join(err, b.same(r.b), nilErr)
	if werr := w.check(); werr != nil {
		err = errors.Join(err, fmt.Errorf("%s: %w", op, werr))
	}
	li, ri := l, r
	if l.rekeyed {
		li = l.repartition(b.name(op+"-left-repartition", o, []*topo.Node{l.node}, ""), 0, nil)
	}
	if r.rekeyed {
		ri = r.repartition(b.name(op+"-right-repartition", o, []*topo.Node{r.node}, ""), 0, nil)
	}
	name := b.name(op, o, []*topo.Node{li.node, ri.node}, "")
	stores := []string{name + "-left-store", name + "-right-store", name + "-expiry", name + "-pending"}
	for _, s := range stores {
		b.addStore(o, s)
	}
	kc := codecOf(l.ks)
	vcs := [2]topo.Codec{codecOf(l.vs), codecOf(r.vs)}
	// For a record of a side, the other side's records it meets are at
	// most before earlier and after later.
	before := [2]int64{w.before.Milliseconds(), w.after.Milliseconds()}
	after := [2]int64{w.after.Milliseconds(), w.before.Milliseconds()}
	span, grace := (w.before + w.after).Milliseconds(), w.grace.Milliseconds()
	outer := [2]bool{leftOuter, rightOuter}
	side := func(s int, parent *topo.Node) *topo.Node {
		n := &topo.Node{Name: name + [2]string{"-left", "-right"}[s], Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{parent}, Stores: stores}
		n.New = func() topo.Processor {
			p := &ssJoin{forward: forwardWith(o.resultHeaders), side: s, kc: kc, vcs: vcs, before: before[s], after: after[s], span: span, grace: grace, outer: outer, join: join, stores: stores}
			return &fproc{init: p.init, fn: p.process}
		}
		return b.add(n, nil)
	}
	ln, rn := side(joinLeft, li.node), side(joinRight, ri.node)
	n := &topo.Node{Name: name, Kind: topo.ProcessorNode, Op: op + "-merge", Parents: []*topo.Node{ln, rn}, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}
	b.add(n, errors.Join(err, nilSerdes(l.ks == nil, l.vs == nil || r.vs == nil)))
	return &Stream[K, V]{b: b, node: n, ks: li.ks, vs: defaultSerde[V]()}
}

// ssJoin is one side's processor of a stream-stream join.
type ssJoin struct {
	forward       func(*topo.Context, topo.Record) error
	side          int
	kc            topo.Codec
	vcs           [2]topo.Codec
	before, after int64 // of the other side's records, relative to this side's
	span, grace   int64
	outer         [2]bool
	join          func(k, lv, rv any) any
	stores        []string

	st              [2]topo.KVStore
	expiry, pending *timeIndex
}

func (p *ssJoin) init(c *topo.Context) error {
	for i := range 2 {
		s, err := c.Store(p.stores[i])
		if err != nil {
			return err
		}
		p.st[i] = s
	}
	s, err := c.Store(p.stores[2])
	if err != nil {
		return err
	}
	p.expiry = newTimeIndex(s)
	p.expiry.shared = true
	if s, err = c.Store(p.stores[3]); err != nil {
		return err
	}
	p.pending = newTimeIndex(s)
	p.pending.shared = true
	return nil
}

func joinStoreKey(kb []byte, ts, seq int64) []byte {
	k := binary.BigEndian.AppendUint64(append(make([]byte, 0, len(kb)+16), kb...), uint64(ts))
	return binary.BigEndian.AppendUint64(k, uint64(seq))
}

func (p *ssJoin) process(c *topo.Context, r topo.Record) error {
	if r.Key == nil || r.Value == nil {
		c.Skip("record without a key or value in a stream-stream join")
		return nil
	}
	now := c.StreamTime().UnixMilli()
	t := r.Timestamp.UnixMilli()
	other := 1 - p.side
	// Too late: its window ended more than the grace ago, and what the
	// other side had in it may have been emitted as unmatched.
	if t+p.after+p.grace < now {
		c.Skip("record for a closed join window")
		if err := c.Late("record for a closed join window"); err != nil {
			return err
		}
		return p.advance(c, now)
	}
	kb, ok := topo.RawKey(r, p.kc)
	if !ok {
		var err error
		if kb, err = p.kc.Encode(r.Key); err != nil {
			return joinSerdeErr(p.stores[p.side], "key", nil, true, err)
		}
	}
	vb, err := p.vcs[p.side].Encode(r.Value)
	if err != nil {
		return joinSerdeErr(p.stores[p.side], "value", nil, true, err)
	}
	if vb == nil {
		vb = []byte{}
	}
	sk := joinStoreKey(kb, t, c.Origin().Offset)
	if err := p.st[p.side].Put(sk, vb, t); err != nil {
		return err
	}
	ik := append([]byte{byte(p.side)}, sk...)
	if err := p.expiry.add(t+p.span+p.grace+1, ik, t); err != nil {
		return err
	}
	// The other side's records it meets.
	lo := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(max(t-p.before, 0)))
	hi := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(t+p.after+1))
	type hit struct {
		key []byte
		ts  int64
		v   any
	}
	var hits []hit
	for e, err := range p.st[other].Range(lo, hi) {
		if err != nil {
			return err
		}
		if len(e.Key) != len(kb)+16 {
			continue // another key that starts with this one's bytes
		}
		ov, err := p.vcs[other].Decode(e.Value)
		if err != nil {
			return joinSerdeErr(p.stores[other], "value", e.Value, false, err)
		}
		hits = append(hits, hit{bytes.Clone(e.Key), int64(binary.BigEndian.Uint64(e.Key[len(kb) : len(kb)+8])), ov})
	}
	for _, h := range hits {
		if p.outer[other] {
			// It has met a record: no result of its own when its window
			// closes.
			due := h.ts + p.span + p.grace
			pk := append(binary.BigEndian.AppendUint64(nil, uint64(due)), byte(other))
			if err := p.pending.s.Delete(append(pk, h.key...), t); err != nil {
				return err
			}
		}
		out := r
		if p.side == joinLeft {
			out.Value = p.join(r.Key, r.Value, h.v)
		} else {
			out.Value = p.join(r.Key, h.v, r.Value)
		}
		if h.ts > t {
			out.Timestamp = topo.TimeOf(h.ts)
		}
		if err := p.forward(c, out); err != nil {
			return err
		}
	}
	if len(hits) == 0 && p.outer[p.side] {
		if err := p.pending.add(t+p.span+p.grace, ik, t); err != nil {
			return err
		}
	}
	return p.advance(c, now)
}

// advance emits the results of the records whose windows closed unmatched
// and lets go of the records that can meet no more.
func (p *ssJoin) advance(c *topo.Context, now int64) error {
	ms := now
	if err := p.pending.each(ms-1, ms, func(ik []byte) error {
		s, sk := int(ik[0]), ik[1:]
		e, ok, err := p.st[s].Get(sk)
		if err != nil || !ok {
			return err
		}
		v, err := p.vcs[s].Decode(e.Value)
		if err != nil {
			return joinSerdeErr(p.stores[s], "value", e.Value, false, err)
		}
		k, err := p.kc.Decode(sk[:len(sk)-16])
		if err != nil {
			return joinSerdeErr(p.stores[s], "key", sk[:len(sk)-16], false, err)
		}
		var res any
		if s == joinLeft {
			res = p.join(k, v, nil)
		} else {
			res = p.join(k, nil, v)
		}
		return p.forward(c, topo.Record{Key: k, Value: res, Timestamp: topo.TimeOf(e.Timestamp)})
	}); err != nil {
		return err
	}
	return p.expiry.each(ms-1, ms, func(ik []byte) error {
		return p.st[ik[0]].Delete(ik[1:], ms)
	})
}

// joinSerdeErr is a key or value of a join store that does not encode or
// decode.
func joinSerdeErr(store, part string, b []byte, encode bool, err error) error {
	return &serde.Error{Store: store, Partition: -1, Offset: -1, Part: part, Bytes: b, Encode: encode, Err: err}
}
