package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
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
// grace: each side keeps a record until it is 2d older than the side's
// latest one, and a left or outer join emits a record that met no partner
// once its window has passed, on the next record at the join's stream time
// (at most once per [EmitInterval]).
func JoinTimeDifference(d time.Duration) JoinWindows { return JoinWindows{before: d, after: d} }

// Before sets how much earlier than a left record a right record may be.
// It may be negative (the right record must then be that much later), as
// long as Before plus After is not.
func (w JoinWindows) Before(d time.Duration) JoinWindows {
	w.before = d
	return w
}

// After sets how much later than a left record a right record may be. It
// may be negative (the right record must then be that much earlier), as
// long as Before plus After is not.
func (w JoinWindows) After(d time.Duration) JoinWindows {
	w.after = d
	return w
}

// Grace keeps each side's records for d longer than the windows span
// (Before plus After), so that out-of-order records still meet them, and
// makes a left or outer join wait d longer before it gives a record that
// met no partner its result without one.
func (w JoinWindows) Grace(d time.Duration) JoinWindows {
	w.grace = d
	return w
}

func (w JoinWindows) check() error {
	var errs []error
	if w.before+w.after < 0 {
		errs = append(errs, fmt.Errorf("join window before %v plus after %v must not be negative", w.before, w.after))
	}
	if w.grace < 0 {
		errs = append(errs, fmt.Errorf("grace %v is negative", w.grace))
	}
	return errors.Join(errs...)
}

// JoinStreams joins records of two streams with the same key whose
// timestamps fall within the join windows: each pair gives one result when
// the second of the two arrives, stamped with the later of the two times
// and carrying the headers of the record that arrived. Each side keeps its
// records in a store with a changelog (a record with a null key or value
// is dropped and counted as skipped), where the other side's records find
// them while they are less than Before plus After plus Grace older than
// the latest record of their side, as Kafka Streams' window stores retain
// them. No record is dropped for being late: it joins whatever the other
// side still keeps, and is kept itself unless it is already that old.
func JoinStreams[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, fn func(key K, left VL, right VR) V, opts ...Option) *Stream[K, V] {
	return streamStreamJoin[K, VL, VR, V](l, r, w, "stream-stream-join", false, false, opts, func(k, lv, rv any) any {
		return fn(as[K](k), lv.(VL), rv.(VR))
	}, nilFuncErr(fn == nil, "join"))
}

// LeftJoinStreams is JoinStreams that also gives each left record that meets
// no right record a result with found false, as Kafka Streams does. Such a
// record waits, in a store of the join's with a changelog, until its
// window and the grace have passed in the join's stream time (the largest
// timestamp of the records of either side); its result is then emitted,
// stamped with its own time and carrying the headers of the record that
// made the join look, the next time a record with a key and a value
// arrives whose timestamp is the join's stream time (no record before it
// was later), if, by the wall clock, [EmitInterval] has passed since
// the join last looked. A right record that meets it before removes it. A
// record that arrives when its window has already passed, and meets no
// right record, gives its result at once (a right record arriving later
// within the grace may still join it). A left record with a null key and a
// value gives its result at once, with the zero key.
func LeftJoinStreams[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, fn func(key K, left VL, right VR, found bool) V, opts ...Option) *Stream[K, V] {
	return streamStreamJoin[K, VL, VR, V](l, r, w, "stream-stream-left-join", true, false, opts, func(k, lv, rv any) any {
		return fn(as[K](k), lv.(VL), as[VR](rv), rv != nil)
	}, nilFuncErr(fn == nil, "join"))
}

// OuterJoinStreams is LeftJoinStreams for the records of both sides: a
// record of either side that meets none of the other gives a result with
// the other side not found, in the same way. The records of both sides
// wait in one store, and are emitted in the order of their times (at one
// time, the right side's first, then by encoded key).
func OuterJoinStreams[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, fn func(key K, left VL, leftFound bool, right VR, rightFound bool) V, opts ...Option) *Stream[K, V] {
	return streamStreamJoin[K, VL, VR, V](l, r, w, "stream-stream-outer-join", true, true, opts, func(k, lv, rv any) any {
		return fn(as[K](k), as[VL](lv), lv != nil, as[VR](rv), rv != nil)
	}, nilFuncErr(fn == nil, "join"))
}

// The join's stores, as Kafka Streams' (KStreamImplJoin). Their names are
// not those of the join's stores before it followed Kafka Streams
// ("-left-store", "-right-store", "-expiry", "-pending"), whose layouts
// differ: an application that upgrades in place starts its stream joins'
// windows empty rather than misreading them, and may delete those stores'
// changelog topics.
//
//   - one per side ("-left-window", "-right-window"), its window store: key,
//     timestamp (8 bytes) and a sequence number (8 bytes: records of one
//     key and time stay apart, in the order they came), the encoded value;
//   - "-window-expiry", when each side's records expire: the side (1 byte), the
//     time the record expires (its timestamp plus the retention, 8
//     bytes), the record's key in its side's store;
//   - for left and outer joins, "-outer-store", the records waiting for a
//     partner (Kafka Streams' shared outer join store): timestamp (8
//     bytes), the side (1 byte, 0 right, 1 left: TimestampedKeyAndJoinSide's
//     order), the encoded key, and as value the list of the encoded
//     values of that key, time and side, in the order they came.
const (
	joinLeft  = 0
	joinRight = 1
)

func streamStreamJoin[K, VL, VR, V any](l *Stream[K, VL], r *Stream[K, VR], w JoinWindows, op string, leftOuter, rightOuter bool, opts []Option, join func(k, lv, rv any) any, nilErr error) *Stream[K, V] {
	b := l.b
	allowed := []string{"InMemory", "WithoutChangelog", "ResultHeaders"}
	if leftOuter {
		allowed = append(allowed, "EmitInterval")
	}
	o, err := b.opts(op, opts, allowed...)
	err = errors.Join(err, b.same(r.b), nilErr)
	if werr := w.check(); werr != nil {
		err = errors.Join(err, fmt.Errorf("%s: %w", op, werr))
	}
	interval := time.Duration(-1) // the default: at Init
	if o.emitInterval != nil {
		if interval = *o.emitInterval; interval < 0 {
			err = errors.Join(err, fmt.Errorf("%s: EmitInterval %v is negative", op, interval))
		}
	}
	li, ri := l, r
	if l.rekeyed {
		li = l.repartition(b.name(op+"-left-repartition", o, []*topo.Node{l.node}, ""), 0, nil)
	}
	if r.rekeyed {
		ri = r.repartition(b.name(op+"-right-repartition", o, []*topo.Node{r.node}, ""), 0, nil)
	}
	name := b.name(op, o, []*topo.Node{li.node, ri.node}, "")
	stores := []string{name + "-left-window", name + "-right-window", name + "-window-expiry"}
	if leftOuter {
		stores = append(stores, name+"-outer-store")
	}
	for _, s := range stores {
		b.addStore(o, s)
	}
	before, after, grace := w.before.Milliseconds(), w.after.Milliseconds(), w.grace.Milliseconds()
	cfg := &ssConfig{
		forward:   forwardWith(o.resultHeaders),
		kc:        codecOf(l.ks),
		vcs:       [2]topo.Codec{codecOf(l.vs), codecOf(r.vs)},
		before:    before,
		after:     after,
		grace:     grace,
		retention: before + after + grace,
		outer:     [2]bool{leftOuter, rightOuter},
		interval:  interval.Milliseconds(),
		join:      join,
		stores:    stores,
		shared:    map[topo.KVStore]*ssShared{},
	}
	side := func(s int, parent *topo.Node) *topo.Node {
		n := &topo.Node{Name: name + [2]string{"-left", "-right"}[s], Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{parent}, Stores: stores}
		n.New = func() topo.Processor { return &ssJoin{cfg: cfg, side: s} }
		return b.add(n, nil)
	}
	ln, rn := side(joinLeft, li.node), side(joinRight, ri.node)
	n := &topo.Node{Name: name, Kind: topo.ProcessorNode, Op: op + "-merge", Parents: []*topo.Node{ln, rn}, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}
	b.add(n, errors.Join(err, nilSerdes(l.ks == nil, l.vs == nil || r.vs == nil)))
	return &Stream[K, V]{b: b, node: n, ks: li.ks, vs: defaultSerde[V]()}
}

// ssConfig is what the processors of a stream-stream join have in common.
type ssConfig struct {
	forward   func(*topo.Context, topo.Record) error
	kc        topo.Codec
	vcs       [2]topo.Codec
	before    int64 // JoinWindows' before, after and grace (ms)
	after     int64
	grace     int64
	retention int64 // how long each side's store keeps a record: before + after + grace
	outer     [2]bool
	interval  int64 // the emit interval of non-joined results (wall-clock ms); -1: the default
	join      func(k, lv, rv any) any
	stores    []string // left, right, expiry[, outer]

	mu     sync.Mutex
	shared map[topo.KVStore]*ssShared // by the left store of each task
}

// ssShared is what the two processors of one task's join share: Kafka
// Streams' TimeTracker (the join's stream time, the earliest time waiting
// in the outer store, when non-joined results may next be emitted), and
// each side's store's observed time and next sequence number.
type ssShared struct {
	refs int

	clock    topo.Clock // the largest timestamp of the records either side was given
	minTime  int64      // the earliest time put in the outer store since the last look, or the time of the last record that look visited (MaxInt64: none)
	nextEmit int64      // the wall-clock time (ms) before which the outer store is not looked through

	loaded  bool
	obs     [2]int64  // each side's store's observed time: the largest timestamp put into it (-1: none)
	seq     [2]uint64 // the next sequence number of each side's store
	nextDue [2]int64  // the earliest expiry of each side's records (MaxInt64: none)
}

// ssJoin is one side's processor of a stream-stream join: Kafka Streams'
// KStreamJoinWindow (which puts the side's records into its store) and
// KStreamKStreamJoin (which looks up the other side's) in one.
type ssJoin struct {
	cfg  *ssConfig
	side int
	c    *topo.Context
	key  topo.KVStore // the task's left store: the key of sh in cfg.shared
	sh   *ssShared

	st            [2]topo.KVStore
	expiry, outer topo.KVStore // outer: nil for an inner join
	joinBefore    int64        // how much earlier than this side's record the other side's may be
	joinAfter     int64        // how much later
	interval      int64        // the emit interval (wall-clock ms)
}

func (p *ssJoin) Init(c *topo.Context) error {
	p.c = c
	cfg := p.cfg
	var ss []topo.KVStore
	for _, name := range cfg.stores {
		s, err := c.Store(name)
		if err != nil {
			return err
		}
		ss = append(ss, s)
	}
	p.st, p.expiry = [2]topo.KVStore{ss[0], ss[1]}, ss[2]
	if len(ss) > 3 {
		p.outer = ss[3]
	}
	p.interval = cfg.interval
	if p.interval < 0 {
		p.interval = defaultEmitInterval.Milliseconds()
		if c.EmitEveryRecord() {
			p.interval = 0
		}
	}
	p.joinBefore, p.joinAfter = cfg.before, cfg.after
	if p.side == joinRight {
		p.joinBefore, p.joinAfter = cfg.after, cfg.before
	}
	cfg.mu.Lock()
	defer cfg.mu.Unlock()
	p.key = ss[0]
	sh := cfg.shared[p.key]
	if sh == nil {
		sh = &ssShared{minTime: math.MaxInt64}
		cfg.shared[p.key] = sh
	}
	sh.refs++
	p.sh = sh
	return nil
}

func (p *ssJoin) Close() error {
	if p.sh == nil {
		return nil
	}
	p.cfg.mu.Lock()
	defer p.cfg.mu.Unlock()
	if p.sh.refs--; p.sh.refs == 0 {
		delete(p.cfg.shared, p.key)
	}
	p.sh = nil
	return nil
}

// load learns, the first time a processor of the task is given a record
// (after the stores were restored), each side's observed time and next
// sequence number from the expiry index: a side's store holds its record
// with the largest timestamp until a later one comes (a record is kept
// for the retention, at least 1ms, after the largest timestamp; with a
// retention of 0 no record is kept, none could be found).
func (p *ssJoin) load() error {
	sh := p.sh
	if sh.loaded {
		return nil
	}
	sh.obs, sh.nextDue = [2]int64{-1, -1}, [2]int64{math.MaxInt64, math.MaxInt64}
	for e, err := range p.expiry.Range(nil, nil) {
		if err != nil {
			return err
		}
		if len(e.Key) < 1+8+16 || e.Key[0] > joinRight {
			continue
		}
		s, due := int(e.Key[0]), int64(binary.BigEndian.Uint64(e.Key[1:9]))
		sk := e.Key[9:]
		ts, seq := int64(binary.BigEndian.Uint64(sk[len(sk)-16:])), binary.BigEndian.Uint64(sk[len(sk)-8:])
		sh.obs[s] = max(sh.obs[s], ts)
		sh.seq[s] = max(sh.seq[s], seq+1)
		sh.nextDue[s] = min(sh.nextDue[s], due)
	}
	sh.loaded = true
	return nil
}

func joinStoreKey(kb []byte, ts int64, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(append(make([]byte, 0, len(kb)+16), kb...), uint64(ts))
	return binary.BigEndian.AppendUint64(k, seq)
}

// outerKey is a key of the outer store: Kafka Streams'
// TimestampedKeyAndJoinSide.
func outerKey(kb []byte, ts int64, side int) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(kb)), uint64(ts))
	return append(append(k, byte(1-side)), kb...)
}

// Process is Kafka Streams' KStreamKStreamJoinProcessor.process followed
// by KStreamJoinWindowProcessor's put of the record into its side's store.
func (p *ssJoin) Process(r topo.Record) error {
	c, cfg, sh := p.c, p.cfg, p.sh
	t := r.Timestamp.UnixMilli()
	streamTime := sh.clock.Observe(c, t)
	if cfg.outer[p.side] && r.Key == nil && r.Value != nil {
		// KIP-962: joined with nothing at once.
		out := r
		out.Value = p.joinWith(nil, r.Value, nil)
		return cfg.forward(c, out)
	}
	if r.Key == nil || r.Value == nil {
		c.Skip("record without a key or value in a stream-stream join")
		return nil
	}
	if err := p.load(); err != nil {
		return err
	}
	if p.outer != nil && t == streamTime {
		if err := p.emitNonJoined(r, streamTime); err != nil {
			return err
		}
	}
	kb, ok := topo.RawKey(r, cfg.kc)
	if !ok {
		var err error
		if kb, err = cfg.kc.Encode(r.Key); err != nil {
			return joinSerdeErr(cfg.stores[p.side], "key", nil, true, err)
		}
	}
	other := 1 - p.side
	// The other side's records it meets: those in its window the other
	// side's store still keeps.
	from, to := max(0, t-p.joinBefore), max(0, t+p.joinAfter)
	from = max(from, sh.obs[other]-cfg.retention+1)
	type hit struct {
		ts int64
		v  any
	}
	var hits []hit
	if to >= from {
		lo := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(from))
		hi := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(to)+1)
		for e, err := range p.st[other].Range(lo, hi) {
			if err != nil {
				return err
			}
			if len(e.Key) != len(kb)+16 {
				continue // another key that starts with this one's bytes
			}
			ov, err := cfg.vcs[other].Decode(e.Value)
			if err != nil {
				return joinSerdeErr(cfg.stores[other], "value", e.Value, false, err)
			}
			hits = append(hits, hit{int64(binary.BigEndian.Uint64(e.Key[len(kb) : len(kb)+8])), ov})
		}
	}
	for _, h := range hits {
		if p.outer != nil {
			// The other side's records of that key and time no longer wait
			// for a partner.
			wk := outerKey(kb, h.ts, other)
			if _, found, err := p.outer.Get(wk); err != nil {
				return err
			} else if found {
				if err := p.outer.Delete(wk, t); err != nil {
					return err
				}
			}
		}
		out := r
		out.Value = p.joinWith(r.Key, r.Value, h.v)
		out.Timestamp = topo.TimeOf(max(t, h.ts))
		if err := cfg.forward(c, out); err != nil {
			return err
		}
	}
	if len(hits) == 0 && cfg.outer[p.side] {
		if p.outer == nil || to < streamTime {
			// Its window has passed: nothing to wait for.
			out := r
			out.Value = p.joinWith(r.Key, r.Value, nil)
			if err := cfg.forward(c, out); err != nil {
				return err
			}
		} else if err := p.wait(kb, r, t); err != nil {
			return err
		}
	}
	return p.put(kb, r, t)
}

// joinWith is the join function's result for this side's value v and the
// other side's ov (nil: not found).
func (p *ssJoin) joinWith(k, v, ov any) any {
	if p.side == joinLeft {
		return p.cfg.join(k, v, ov)
	}
	return p.cfg.join(k, ov, v)
}

// wait puts the record into the outer store, to wait for a partner.
func (p *ssJoin) wait(kb []byte, r topo.Record, t int64) error {
	p.sh.minTime = min(p.sh.minTime, t)
	vb, err := p.encode(r.Value)
	if err != nil {
		return err
	}
	wk := outerKey(kb, t, p.side)
	e, found, err := p.outer.Get(wk)
	if err != nil {
		return err
	}
	var list []byte
	if found {
		list = bytes.Clone(e.Value)
	}
	list = binary.AppendUvarint(list, uint64(len(vb)))
	return p.outer.Put(wk, append(list, vb...), t)
}

func (p *ssJoin) encode(v any) ([]byte, error) {
	vb, err := p.cfg.vcs[p.side].Encode(v)
	if err != nil {
		return nil, joinSerdeErr(p.cfg.stores[p.side], "value", nil, true, err)
	}
	if vb == nil {
		vb = []byte{}
	}
	return vb, nil
}

// put is KStreamJoinWindowProcessor's put of the record into its side's
// store (a segmented window store, whose records a fetch finds only while
// they are no older than its observed time less the retention, plus 1ms):
// it advances the side's observed time, and lets go of the records that
// fell behind it. A record already that old is not kept: nothing would
// find it.
func (p *ssJoin) put(kb []byte, r topo.Record, t int64) error {
	cfg, sh, s := p.cfg, p.sh, p.side
	sh.obs[s] = max(sh.obs[s], t)
	if t >= sh.obs[s]-cfg.retention+1 {
		vb, err := p.encode(r.Value)
		if err != nil {
			return err
		}
		sk := joinStoreKey(kb, t, sh.seq[s])
		sh.seq[s]++
		if err := p.st[s].Put(sk, vb, t); err != nil {
			return err
		}
		due := t + cfg.retention
		ik := append(binary.BigEndian.AppendUint64([]byte{byte(s)}, uint64(due)), sk...)
		if err := p.expiry.Put(ik, []byte{}, t); err != nil {
			return err
		}
		sh.nextDue[s] = min(sh.nextDue[s], due)
	}
	if sh.nextDue[s] > sh.obs[s] {
		return nil
	}
	var expired [][]byte
	sh.nextDue[s] = math.MaxInt64
	for e, err := range p.expiry.Range([]byte{byte(s)}, []byte{byte(s) + 1}) {
		if err != nil {
			return err
		}
		if due := int64(binary.BigEndian.Uint64(e.Key[1:9])); due > sh.obs[s] {
			sh.nextDue[s] = due
			break
		}
		expired = append(expired, bytes.Clone(e.Key))
	}
	for _, ik := range expired {
		if err := p.st[s].Delete(ik[9:], t); err != nil {
			return err
		}
		if err := p.expiry.Delete(ik, t); err != nil {
			return err
		}
	}
	return nil
}

// emitNonJoined is Kafka Streams' emitNonJoinedOuterRecords: it emits the
// results of the records waiting in the outer store whose windows and
// grace have passed, in the store's order, stopping for each side at its
// first record whose window is still open, and removes them. It looks
// only if the earliest record put in the store since it last looked may
// have closed by the join's stream time (as this side's window goes), and,
// by the wall clock, the emit interval has passed since it last looked.
// The results carry the headers of r, the record that made it look.
func (p *ssJoin) emitNonJoined(r topo.Record, streamTime int64) error {
	cfg, sh := p.cfg, p.sh
	// As Kafka Streams' long arithmetic: MaxInt64 (nothing put since the
	// last look) plus a positive window wraps and lets it look.
	if sh.minTime+p.joinAfter+cfg.grace >= streamTime {
		return nil
	}
	now := p.c.Now().UnixMilli()
	if now < sh.nextEmit {
		return nil
	}
	sh.nextEmit = now + p.interval
	sh.minTime = math.MaxInt64
	type result struct {
		key  []byte
		side int
		vb   []byte
	}
	var results []result
	var done [][]byte
	var open [2]bool
scan:
	for e, err := range p.outer.Range(nil, nil) {
		if err != nil {
			return err
		}
		ts, s := int64(binary.BigEndian.Uint64(e.Key[:8])), 1-int(e.Key[8])
		emitted := false
		for list := e.Value; len(list) > 0; {
			n, w := binary.Uvarint(list)
			if w <= 0 || uint64(len(list)-w) < n {
				return joinSerdeErr(cfg.stores[3], "value", e.Value, false, errors.New("malformed list of values"))
			}
			vb := list[w : w+int(n)]
			list = list[w+int(n):]
			sh.minTime = ts
			if open[joinLeft] && open[joinRight] {
				break scan
			}
			// The window of a left record ends after After, that of a
			// right record after Before.
			lookBack := cfg.after
			if s == joinRight {
				lookBack = cfg.before
			}
			if sh.minTime+lookBack+cfg.grace >= streamTime {
				open[s] = true
				continue
			}
			results = append(results, result{e.Key, s, vb})
			emitted = true
		}
		if emitted {
			done = append(done, bytes.Clone(e.Key))
		}
	}
	for _, res := range results {
		kb := res.key[9:]
		k, err := cfg.kc.Decode(kb)
		if err != nil {
			return joinSerdeErr(cfg.stores[3], "key", kb, false, err)
		}
		v, err := cfg.vcs[res.side].Decode(res.vb)
		if err != nil {
			return joinSerdeErr(cfg.stores[3], "value", res.vb, false, err)
		}
		var joined any
		if res.side == joinLeft {
			joined = cfg.join(k, v, nil)
		} else {
			joined = cfg.join(k, nil, v)
		}
		ts := int64(binary.BigEndian.Uint64(res.key[:8]))
		if err := cfg.forward(p.c, topo.Record{Key: k, Value: joined, Timestamp: topo.TimeOf(ts), Headers: r.Headers}); err != nil {
			return err
		}
	}
	t := r.Timestamp.UnixMilli()
	for _, k := range done {
		if err := p.outer.Delete(k, t); err != nil {
			return err
		}
	}
	return nil
}

// joinSerdeErr is a key or value of a join store that does not encode or
// decode.
func joinSerdeErr(store, part string, b []byte, encode bool, err error) error {
	return &serde.Error{Store: store, Partition: -1, Offset: -1, Part: part, Bytes: b, Encode: encode, Err: err}
}
