package topo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/oxbow-dev/oxbow/engine/record"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// TaskID names a task: a sub-topology and a partition of its inputs.
type TaskID struct {
	Sub       int
	Partition int32
}

func (id TaskID) String() string { return fmt.Sprintf("%d_%d", id.Sub, id.Partition) }

// Input is a record read from Kafka (or piped in by the test driver).
type Input struct {
	Topic     string // the real (prefixed) topic name
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte // nil: tombstone
	Timestamp int64  // Unix milliseconds
	Headers   []Header
}

// Output is a record a task sends to a topic.
type Output struct {
	Topic     string
	Partition int32 // AnyPartition: chosen by the key
	Key       []byte
	Value     []byte
	Timestamp int64
	Headers   []Header
	// Produced, if set, is called with the record's partition and offset
	// once Kafka has acknowledged it; for a record sent to several
	// partitions (see Partitions), with those of the first copy only.
	Produced func(partition int32, offset int64)
	// Partitions, if set, chooses the partitions of a record whose
	// Partition is AnyPartition, given the topic's partition count: a
	// sink's Partitioner applied to the record. A collector reads it
	// through Targets.
	Partitions func(n int) []int
}

// AnyPartition lets the collector choose the partition from the key.
const AnyPartition int32 = -1

// Targets returns the partitions, in a topic of n, that a record whose
// Partition is AnyPartition goes to by its Partitions function: each once,
// in the order the function first gave them; none (nil) means by the key,
// as without the function. A partition outside [0, n) is an error, which
// fails processing as an encoding error does.
func (o *Output) Targets(n int32) ([]int32, error) {
	if o.Partitions == nil {
		return nil, nil
	}
	ps := o.Partitions(int(n))
	if len(ps) == 0 {
		return nil, nil
	}
	out := make([]int32, 0, len(ps))
	var seen []uint64 // a bitset, for many partitions
	if len(ps) > 16 {
		seen = make([]uint64, (n+63)/64)
	}
	for _, p := range ps {
		if p < 0 || p >= int(n) {
			return nil, fmt.Errorf("engine: the partitioner of topic %s chose partition %d, not in [0, %d)", o.Topic, p, n)
		}
		if seen != nil {
			if seen[p/64]&(1<<(p%64)) != 0 {
				continue
			}
			seen[p/64] |= 1 << (p % 64)
		} else if slices.Contains(out, int32(p)) {
			continue
		}
		out = append(out, int32(p))
	}
	return out, nil
}

// Collector sends a task's output records, changelog records included.
type Collector interface {
	Send(out Output) error
}

// PunctuationType says which clock a punctuator follows.
type PunctuationType int

// The clocks a punctuator can follow.
const (
	StreamTime PunctuationType = iota
	WallClockTime
)

// TaskConfig is what a task needs from whoever runs it.
type TaskConfig struct {
	ID        TaskID
	Topology  *Topology
	Sub       *SubTopology
	TopicName func(TopicRef) string // resolves internal topic names
	OpenStore func(spec *StoreSpec, id TaskID) (KVStore, error)
	Collector Collector
	Now       func() time.Time // the wall clock
	Logger    *slog.Logger
	// CacheBytes bounds the task's record cache; 0 disables it.
	CacheBytes int64
	// OnDecodeError decides what happens to an input record that cannot be
	// decoded; nil fails the task.
	OnDecodeError func(in Input, err error) error
	// OnSkip, if set, hears of every record a node skips (and counts), with
	// its reason "<node>: <why>", or "decode-error".
	OnSkip func(reason string)
	// OnLate, if set, is told of an input record that came too late for
	// every window it belongs to (after it was counted as skipped); the
	// runtime may dead-letter it.
	OnLate func(reason string) error
	// EmitEveryRecord: the processors that throttle what they emit by the
	// wall clock (emit-final windows, left and outer stream–stream joins)
	// look at every record instead, unless told an interval, as under
	// Kafka Streams' TopologyTestDriver, which sets their emit intervals to
	// 0. For test drivers.
	EmitEveryRecord bool
}

// Task runs one sub-topology for one partition: the single writer of that
// partition's state.
type Task struct {
	cfg        TaskConfig
	sources    map[string]*nodeInst // by real topic name
	insts      []*nodeInst
	stores     map[string]KVStore
	streamTime int64 // Unix ms; NoTime before the first record
	// resumedTime is the stream time the task resumed with (RaiseStreamTime
	// before its first record), where processors' clocks start; NoTime.
	resumedTime int64
	eventTime   int64 // the event time of the last record processed
	recordTime  int64 // the timestamp of the record the current node sees
	origin      Origin
	puncts      []*punctuator
	skipped     map[string]int64
	cache       *Cache
	hooks       []commitHook
	// commitSoon: a processor asked for a commit (Context.RequestCommit).
	commitSoon bool
}

type commitHook struct {
	inst *nodeInst
	fn   func() error
}

// NoTime is the stream time of a task that has processed nothing.
const NoTime int64 = -1 << 63

type nodeInst struct {
	node     *Node
	proc     Processor
	ctx      *Context
	children []*nodeInst
	task     *Task
	topic    string // sources and sinks: the real topic name
	inited   bool   // Init succeeded, so Close is due
	// sinks: the sources whose key bytes this sink may write as they are.
	rawKeysFrom []*nodeInst
	// sources: the fused line (see Fused), if the source has one.
	fused Fused
	// seen counts the records that reached the node (NodeRecords).
	seen int64
}

// NewTask instantiates every node of the sub-topology and opens its stores.
func NewTask(cfg TaskConfig) (*Task, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Task{
		cfg:         cfg,
		sources:     map[string]*nodeInst{},
		stores:      map[string]KVStore{},
		streamTime:  NoTime,
		resumedTime: NoTime,
		skipped:     map[string]int64{},
		cache:       NewCache(cfg.CacheBytes),
	}
	for _, spec := range cfg.Sub.GlobalStores {
		s, err := cfg.OpenStore(spec, cfg.ID)
		if err != nil {
			t.closeStores()
			return nil, fmt.Errorf("engine: task %s: open global store %q: %w", cfg.ID, spec.Name, err)
		}
		t.stores[spec.Name] = readOnlyStore{s}
	}
	for _, spec := range cfg.Sub.Stores {
		s, err := cfg.OpenStore(spec, cfg.ID)
		if err != nil {
			t.closeStores()
			return nil, fmt.Errorf("engine: task %s: open store %q: %w", cfg.ID, spec.Name, err)
		}
		if spec.Logged && !spec.Global {
			s = &loggedStore{KVStore: s, topic: cfg.TopicName(TopicRef{Name: ChangelogTopic(spec.Name), Internal: true}), partition: cfg.ID.Partition, collector: cfg.Collector}
		}
		t.stores[spec.Name] = s
	}
	byNode := map[*Node]*nodeInst{}
	for _, n := range cfg.Sub.Nodes {
		ni := &nodeInst{node: n, task: t}
		ni.ctx = &Context{inst: ni}
		if n.Kind != ProcessorNode {
			ni.topic = cfg.TopicName(n.Ref())
		}
		if n.Kind == SourceNode {
			t.sources[ni.topic] = ni
		}
		if n.Kind == ProcessorNode {
			ni.proc = n.New()
		}
		byNode[n] = ni
		t.insts = append(t.insts, ni)
	}
	for _, ni := range t.insts {
		if n := ni.node; n.Kind == SourceNode && n.Fuse != nil && !cfg.Topology.Unfused {
			ni.fused = n.Fuse(fuseEnv{t, byNode})
		}
		for _, c := range ni.node.Children {
			ni.children = append(ni.children, byNode[c])
		}
		if ni.node.Kind == SinkNode && ni.node.KeyComparable {
			sc, ok := ni.node.KeyCodec.(SameCodec)
			for _, src := range t.insts {
				if ok && src.node.Kind == SourceNode && sc.SameAs(src.node.KeyCodec) {
					ni.rawKeysFrom = append(ni.rawKeysFrom, src)
				}
			}
		}
	}
	for _, ni := range t.insts {
		if ni.proc == nil {
			continue
		}
		if err := safely(func() error { return ni.proc.Init(ni.ctx) }); err != nil {
			t.Close()
			return nil, fmt.Errorf("engine: task %s: init %q: %w", cfg.ID, ni.node.Name, err)
		}
		ni.inited = true
	}
	return t, nil
}

// ID is the task's id.
func (t *Task) ID() TaskID { return t.cfg.ID }

// StreamTime is the largest timestamp the task has processed, in Unix ms.
func (t *Task) StreamTime() int64 { return t.streamTime }

// RaiseStreamTime moves stream time up to ms, if it is behind: how a task
// resumes the stream time it had committed before a restart.
func (t *Task) RaiseStreamTime(ms int64) {
	if ms > t.streamTime {
		t.streamTime = ms
	}
	if ms > t.resumedTime {
		t.resumedTime = ms
	}
}

// EventTime is the event time of the last record the task processed (its
// source's timestamp function's, or the recorded time), in Unix ms.
func (t *Task) EventTime() int64 { return t.eventTime }

// Store returns one of the task's stores.
func (t *Task) Store(name string) KVStore { return t.stores[name] }

// NodeRecords adds to into, per node name, how many records have reached
// the node in this task: read by a source, or passed to a processor or
// sink by its parents (a record a processor forwards to two children
// counts at each).
func (t *Task) NodeRecords(into map[string]int64) {
	for _, ni := range t.insts {
		into[ni.node.Name] += ni.seen
	}
}

// Skipped counts the records the task dropped, by reason.
func (t *Task) Skipped() map[string]int64 { return t.skipped }

// Source is a task's source of one topic, for ProcessFrom.
type Source struct{ ni *nodeInst }

// Source returns the task's source of a topic, or nil if it reads no such
// topic.
func (t *Task) Source(topic string) *Source {
	if ni := t.sources[topic]; ni != nil {
		return &Source{ni}
	}
	return nil
}

// RecordTimed reports whether the source's records have the time Kafka
// recorded as their event time (no timestamp function, no wall clock).
func (s *Source) RecordTimed() bool {
	n := s.ni.node
	return !n.WallClockTimestamps && n.Timestamps == nil
}

// EventTime is the event time the source will give the record, in Unix ms:
// what its timestamp function returns (which means decoding the record),
// the wall clock, or the recorded time. A record the source cannot decode
// or time has its recorded time here; processing reports it. The runtime
// uses it to choose among a task's partitions, as Kafka Streams does with
// extracted timestamps.
func (s *Source) EventTime(in Input) int64 {
	if s.RecordTimed() {
		return in.Timestamp
	}
	r, err := s.ni.decode(in)
	if err != nil {
		return in.Timestamp
	}
	return r.Timestamp.UnixMilli()
}

// Process runs one input record through the sub-topology, depth-first.
func (t *Task) Process(in Input) error {
	src := t.sources[in.Topic]
	if src == nil {
		return fmt.Errorf("engine: task %s does not read topic %q", t.cfg.ID, in.Topic)
	}
	return t.process(src, in)
}

// ProcessFrom is Process for a record of src's topic, without looking the
// source up.
func (t *Task) ProcessFrom(src *Source, in Input) error { return t.process(src.ni, in) }

func (t *Task) process(src *nodeInst, in Input) error {
	src.seen++
	t.origin = Origin{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset}
	if src.fused != nil {
		return t.processFused(src, in)
	}
	r, err := src.decode(in)
	if err != nil {
		return t.decodeFailed(in, err)
	}
	t.advance(r.Timestamp.UnixMilli())
	if err := src.forwardAll(r); err != nil {
		return err
	}
	return t.punctuate(StreamTime, t.streamTime)
}

// decodeFailed applies the decode error policy to a record that cannot be
// decoded or has no valid timestamp.
func (t *Task) decodeFailed(in Input, err error) error {
	if t.cfg.OnDecodeError == nil {
		return err
	}
	if err := t.cfg.OnDecodeError(in, err); err != nil {
		return err
	}
	t.Skip("decode-error")
	return nil
}

// advance makes ts the event time of the record being processed and moves
// stream time up to it.
func (t *Task) advance(ts int64) {
	t.eventTime = ts
	if ts > t.streamTime {
		t.streamTime = ts
	}
}

// TakeCommitRequest reports whether a processor asked for a commit since
// the last call.
func (t *Task) TakeCommitRequest() bool {
	r := t.commitSoon
	t.commitSoon = false
	return r
}

// HasCommitHooks reports whether a processor asked to run before commits
// (Context.BeforeCommit).
func (t *Task) HasCommitHooks() bool { return len(t.hooks) > 0 }

// BeforeCommit runs the processors' commit hooks. The runner calls it once
// every record the task sent has been acknowledged, and before committing
// what the task processed; what the hooks forward and write commits with
// it.
func (t *Task) BeforeCommit() error {
	for _, h := range t.hooks {
		t.origin = Origin{Partition: t.cfg.ID.Partition, Offset: -1}
		t.recordTime = t.streamTime
		if err := h.fn(); err != nil {
			return fmt.Errorf("engine: before-commit hook of %q: %w", h.inst.node.Name, err)
		}
	}
	return nil
}

// Punctuate runs the wall-clock punctuators that are due.
func (t *Task) Punctuate(now time.Time) error {
	return t.punctuate(WallClockTime, now.UnixMilli())
}

// Flush empties the record cache: every update waiting in it is written to
// its store and forwarded. Call it before committing.
func (t *Task) Flush() error { return t.cache.Flush() }

// CacheStats returns how many reads the record cache answered and passed on.
func (t *Task) CacheStats() (hits, misses int64) {
	if t.cache == nil {
		return 0, 0
	}
	return t.cache.Hits.Load(), t.cache.Misses.Load()
}

// Pending is the number of updates waiting in the record cache.
func (t *Task) Pending() int { return t.cache.Len() }

// Skip counts a dropped record.
func (t *Task) Skip(reason string) {
	t.skipped[reason]++
	if t.cfg.OnSkip != nil {
		t.cfg.OnSkip(reason)
	}
}

// Close closes every processor and store.
func (t *Task) Close() error {
	var errs []error
	for _, ni := range t.insts {
		if ni.inited {
			ni.inited = false
			if err := safely(ni.proc.Close); err != nil {
				errs = append(errs, fmt.Errorf("engine: close %q: %w", ni.node.Name, err))
			}
		}
	}
	errs = append(errs, t.closeStores())
	return errors.Join(errs...)
}

func (t *Task) closeStores() error {
	var errs []error
	for _, s := range t.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// TimeOf is a Unix millisecond timestamp as a UTC time.
func TimeOf(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// TimestampError is a record whose event time is invalid: negative, or
// refused by the source's timestamp extractor. It goes through the decode
// error policy like a record that cannot be decoded.
type TimestampError = record.TimestampError

// eventTime is a decoded record's event time: its source's extractor's, or
// the recorded time; negative is invalid.
// hasValue says whether the record is no tombstone; kv gives its decoded
// key and value.
func (ni *nodeInst) eventTime(in Input, hasValue bool, kv func() (key, value any)) (int64, error) {
	ts := in.Timestamp
	if ni.node.WallClockTimestamps {
		ts = ni.task.cfg.Now().UnixMilli()
	} else if f := ni.node.Timestamps; f != nil && hasValue {
		var err error
		k, v := kv()
		if ts, err = f(k, v, in.Timestamp); err != nil {
			return 0, &TimestampError{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Err: err}
		}
	}
	if ts < 0 {
		return 0, &TimestampError{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Timestamp: ts, Err: fmt.Errorf("timestamp %d is negative", ts)}
	}
	return ts, nil
}

func (ni *nodeInst) decode(in Input) (Record, error) {
	r := Record{Timestamp: TimeOf(in.Timestamp), Headers: in.Headers}
	where := func(part string, b []byte, err error) error {
		return &serde.Error{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Part: part, Bytes: b, Err: err}
	}
	if in.Key != nil {
		k, err := ni.node.KeyCodec.Decode(in.Key)
		if err != nil {
			return r, where("key", in.Key, err)
		}
		r.Key, r.src, r.srcKey, r.rawKey = k, ni, k, in.Key
	}
	if ni.node.ChangeValues {
		c, err := DecodeChange(in.Value, ni.node.ValueCodec)
		if err != nil {
			return r, where("value", in.Value, err)
		}
		r.Value = c
	} else if in.Value != nil && ni.node.ValueUnread {
		r.Value = Unread
	} else if in.Value != nil {
		v, err := ni.node.ValueCodec.Decode(in.Value)
		if err != nil {
			return r, where("value", in.Value, err)
		}
		r.Value = v
	}
	ts, err := ni.eventTime(in, r.Value != nil, func() (any, any) { return r.Key, r.Value })
	if err != nil {
		return r, err
	}
	r.Timestamp = TimeOf(ts)
	return r, nil
}

func (ni *nodeInst) process(r Record) error {
	ni.seen++
	switch ni.node.Kind {
	case SinkNode:
		return ni.sink(r)
	case SourceNode:
		return ni.forwardAll(r)
	}
	// The node sees its record's time until it returns, whatever its
	// children (which run inside Forward) saw.
	prev := ni.task.recordTime
	ni.task.recordTime = r.Timestamp.UnixMilli()
	err := ni.proc.Process(r)
	ni.task.recordTime = prev
	return err
}

func (ni *nodeInst) forwardAll(r Record) error {
	for _, c := range ni.children {
		if err := c.process(r); err != nil {
			return err
		}
	}
	return nil
}

func (ni *nodeInst) sink(r Record) error {
	if r.Key == nil && ni.node.DropNullKeys {
		ni.task.Skip(ni.node.Name + ": null key")
		return nil
	}
	out := Output{Topic: ni.topic, Partition: AnyPartition, Timestamp: r.Timestamp.UnixMilli(), Headers: r.Headers, Produced: r.produced}
	if ni.node.Partitioner != nil {
		out.Partitions = partitionsOf(ni.node.Partitioner, r.Key, r.Value)
	}
	where := func(part string, err error) error {
		return &serde.Error{Topic: ni.topic, Partition: -1, Offset: -1, Part: part, Encode: true, Err: err}
	}
	if r.Key != nil {
		if r.src != nil && slices.Contains(ni.rawKeysFrom, r.src) && r.Key == r.srcKey {
			// Still the key its source read, with a codec that would give
			// back the same bytes: write those.
			out.Key = r.rawKey
		} else if raw := r.raw; raw != nil && ni.node.KeyComparable && r.Key == raw.keyOf && sameCodec(ni.node.KeyCodec, raw.kc) {
			out.Key = raw.key // the key a table store wrote
		} else {
			k, err := ni.node.KeyCodec.Encode(r.Key)
			if err != nil {
				return where("key", err)
			}
			out.Key = k
		}
	}
	if ni.node.ChangeValues {
		c, _ := r.Value.(Change)
		v, err := EncodeChange(c, ni.node.ValueCodec)
		if err != nil {
			return where("value", err)
		}
		out.Value = v
	} else if raw := r.raw; raw != nil && raw.value != nil && ni.node.ValueComparable && r.Value == raw.valueOf && sameCodec(ni.node.ValueCodec, raw.vc) {
		out.Value = raw.value // the value a table store wrote
	} else if r.Value != nil {
		v, err := ni.node.ValueCodec.Encode(r.Value)
		if err != nil {
			return where("value", err)
		}
		if v == nil {
			v = []byte{}
		}
		out.Value = v
	}
	return ni.task.cfg.Collector.Send(out)
}

// partitionsOf is Output.Partitions for a record of a sink with a
// partitioner (its own function, so that the sink's fast path captures
// nothing).
func partitionsOf(p func(key, value any, n int) []int, key, value any) func(n int) []int {
	return func(n int) []int { return p(key, value, n) }
}

// RawKey returns the bytes r's key was read from, if its key is still the
// one its source decoded and codec encodes it back to those bytes: then
// they can stand for codec.Encode(r.Key), without an allocation. The bytes
// may share a fetched batch's buffer: read them, copy what is kept.
func RawKey(r Record, codec Codec) ([]byte, bool) {
	if r.src == nil || r.rawKey == nil || !r.src.node.KeyComparable {
		return nil, false
	}
	// The source's key type is comparable, so == cannot panic: a key of
	// another dynamic type is simply unequal.
	if sc, ok := codec.(SameCodec); !ok || !sc.SameAs(r.src.node.KeyCodec) || r.Key != r.srcKey {
		return nil, false
	}
	return r.rawKey, true
}

// EncodeChange writes a Change for a repartition topic: a flag byte (bit 0:
// old present, bit 1: new present), the old value's length as a uvarint and
// its bytes, then the new value's bytes.
func EncodeChange(c Change, codec Codec) ([]byte, error) {
	var flags byte
	var old, nw []byte
	var err error
	if c.Old != nil {
		flags |= 1
		if old, err = codec.Encode(c.Old); err != nil {
			return nil, err
		}
	}
	if c.New != nil {
		flags |= 2
		if nw, err = codec.Encode(c.New); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(old)+len(nw))
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(old)))
	b = append(b, old...)
	return append(b, nw...), nil
}

// DecodeChange reads what EncodeChange wrote.
func DecodeChange(b []byte, codec Codec) (Change, error) {
	var c Change
	if len(b) < 2 || b[0] > 3 {
		return c, errors.New("not an encoded table change")
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || uint64(len(b)-1-w) < n {
		return c, errors.New("encoded table change is truncated")
	}
	old, nw := b[1+w:1+w+int(n)], b[1+w+int(n):]
	var err error
	if b[0]&1 != 0 {
		if c.Old, err = codec.Decode(old); err != nil {
			return c, err
		}
	}
	if b[0]&2 != 0 {
		if c.New, err = codec.Decode(nw); err != nil {
			return c, err
		}
	}
	return c, nil
}

type punctuator struct {
	inst      *nodeInst
	typ       PunctuationType
	interval  int64
	next      int64 // NoTime: at the first record (stream time)
	fn        func(time.Time) error
	cancelled bool
}

func (t *Task) punctuate(typ PunctuationType, now int64) error {
	if now == NoTime {
		return nil
	}
	for _, p := range t.puncts {
		if p.cancelled || p.typ != typ {
			continue
		}
		if p.next == NoTime {
			p.next = now
		}
		if now < p.next {
			continue
		}
		// Fire once, then skip the intervals that passed meanwhile.
		p.next += ((now-p.next)/p.interval + 1) * p.interval
		t.origin = Origin{Partition: t.cfg.ID.Partition, Offset: -1}
		t.recordTime = now
		if err := p.fn(TimeOf(now)); err != nil {
			return fmt.Errorf("engine: punctuator of %q: %w", p.inst.node.Name, err)
		}
	}
	return nil
}

// readOnlyStore is a global store as the tasks that read it see it: only
// its global table writes it.
type readOnlyStore struct{ KVStore }

func (s readOnlyStore) Put([]byte, []byte, int64) error {
	return fmt.Errorf("engine: global store %q is written by its global table only", s.Name())
}

func (s readOnlyStore) Delete([]byte, int64) error {
	return fmt.Errorf("engine: global store %q is written by its global table only", s.Name())
}

// Close leaves the store open: it is the global table's (the runtime closes
// a task's handle on it with the rest of the task's state).
func (s readOnlyStore) Close() error { return nil }
