// Package enginetest runs a topology in memory, deterministically, without
// Kafka: the engine's counterpart of Kafka Streams' TopologyTestDriver.
//
// Every topic has one partition, so each sub-topology runs as one task.
// Piping a record into an input topic processes it through its
// sub-topology, depth-first, and then every record it caused on internal
// topics (repartitions) or on other topics the topology reads, until nothing
// is left; when Pipe returns, the outputs hold everything the record caused.
// The wall clock is simulated and moves only with [Driver.AdvanceWallClock].
//
//	d := enginetest.New(t, topology)
//	in := enginetest.NewInput(d, "purchases", serde.String, serde.Int64)
//	out := enginetest.NewOutput(d, "totals", serde.String, serde.Int64)
//	in.Pipe("alice", 3, enginetest.At(1))
//	got := out.ReadKeyValues()
package enginetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Epoch is the driver's default start of the wall clock, and the zero of [At].
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// At is Epoch plus ms milliseconds: a short way to write record timestamps.
func At(ms int64) time.Time { return Epoch.Add(time.Duration(ms) * time.Millisecond) }

// Option configures a Driver.
type Option func(*Driver)

// AppID sets the application id that prefixes internal topic names.
// Default: "test".
func AppID(id string) Option { return func(d *Driver) { d.appID = id } }

// WallClock sets the start of the simulated wall clock. Default: [Epoch].
func WallClock(t time.Time) Option { return func(d *Driver) { d.now = t } }

// CacheBytes gives each task a record cache of that many bytes, as the
// runtime has: updates of a key wait in it and only the latest reaches the
// store, the changelog and downstream when [Driver.Commit] (or the cache's
// budget) flushes it. Default: 0, no cache, so every update is visible as
// soon as Pipe returns.
func CacheBytes(n int64) Option { return func(d *Driver) { d.cacheBytes = n } }

// Message is a record on a topic of the driver, in bytes.
type Message struct {
	Key, Value []byte // Value nil: tombstone
	Timestamp  time.Time
	Headers    []engine.Header
	Offset     int64
}

// Driver runs a topology in memory. It is not safe for concurrent use.
type Driver struct {
	tb      testing.TB
	appID   string
	now     time.Time
	top     *engine.Topology
	topo    *topo.Topology
	tasks   []*topo.Task
	readers map[string]*topo.Task // real topic name -> the task that reads it
	topics  map[string][]Message
	queue   []topo.Input
	closed  bool

	cacheBytes int64
}

var _ engine.Queryable = (*Driver)(nil)

// New starts a driver for the topology; it is closed when the test ends.
func New(tb testing.TB, t *engine.Topology, opts ...Option) *Driver {
	tb.Helper()
	d, err := Start(t, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	d.tb = tb
	tb.Cleanup(func() {
		if err := d.Close(); err != nil {
			tb.Error(err)
		}
	})
	return d
}

// Start starts a driver outside a test (in an Example, say). Its methods
// that would fail a test panic instead; close it with [Driver.Close].
func Start(t *engine.Topology, opts ...Option) (*Driver, error) {
	tp := topo.Unwrap(t)
	if tp == nil {
		return nil, errors.New("enginetest: no topology: build one with engine.Builder.Build")
	}
	d := &Driver{appID: "test", now: Epoch, top: t, topo: tp, readers: map[string]*topo.Task{}, topics: map[string][]Message{}}
	for _, o := range opts {
		o(d)
	}
	global := map[string]*topo.MemStore{} // shared by the global table and the tasks reading it
	for _, sub := range tp.Subs {
		task, err := topo.NewTask(topo.TaskConfig{
			ID:        topo.TaskID{Sub: sub.ID},
			Topology:  tp,
			Sub:       sub,
			TopicName: d.topicName,
			OpenStore: func(spec *topo.StoreSpec, _ topo.TaskID) (topo.KVStore, error) {
				if !spec.Global {
					return topo.NewMemStore(spec.Name), nil
				}
				if global[spec.Name] == nil {
					global[spec.Name] = topo.NewMemStore(spec.Name)
				}
				return global[spec.Name], nil
			},
			Collector:  (*collector)(d),
			Now:        func() time.Time { return d.now },
			CacheBytes: d.cacheBytes,
			// As Kafka Streams' TopologyTestDriver does.
			EmitEveryRecord: true,
		})
		if err != nil {
			d.Close()
			return nil, err
		}
		d.tasks = append(d.tasks, task)
		for ref := range sub.Sources {
			d.readers[d.topicName(ref)] = task
		}
	}
	return d, nil
}

func (d *Driver) topicName(r topo.TopicRef) string {
	if r.Internal {
		return d.appID + "-" + r.Name
	}
	return r.Name
}

// InternalTopic is the full name of an internal topic, given its base name
// as Describe shows it without the ${app}- prefix.
func (d *Driver) InternalTopic(base string) string {
	return d.topicName(topo.TopicRef{Name: base, Internal: true})
}

// ChangelogTopic is the full name of a store's changelog topic.
func (d *Driver) ChangelogTopic(store string) string {
	return d.InternalTopic(topo.ChangelogTopic(store))
}

// collector is the driver as its tasks' collector: unexported, so that
// Driver's methods name no internal type.
type collector Driver

func (c *collector) Send(out topo.Output) error { return (*Driver)(c).send(out) }

// send takes a task's output. Every topic has one partition, so a sink's
// partitioner is asked to choose among one, and a record it sends to
// partition 0 (or to all) is written once.
func (d *Driver) send(out topo.Output) error {
	if out.Partition == topo.AnyPartition {
		if _, err := out.Targets(1); err != nil {
			return err
		}
	}
	msgs := d.topics[out.Topic]
	m := Message{Key: out.Key, Value: out.Value, Timestamp: topo.TimeOf(out.Timestamp), Headers: out.Headers, Offset: int64(len(msgs))}
	d.topics[out.Topic] = append(msgs, m)
	if out.Produced != nil {
		out.Produced(0, m.Offset)
	}
	if d.readers[out.Topic] != nil {
		d.queue = append(d.queue, topo.Input{Topic: out.Topic, Offset: m.Offset, Key: out.Key, Value: out.Value, Timestamp: out.Timestamp, Headers: out.Headers})
	}
	return nil
}

// PipeBytes writes a raw record to a topic and processes it and everything
// it causes. A nil value is a tombstone. It returns the first error, such
// as a *serde.Error for bytes the topology cannot decode.
func (d *Driver) PipeBytes(topic string, key, value []byte, ts time.Time, headers ...engine.Header) error {
	if d.closed {
		return errors.New("enginetest: the driver is closed")
	}
	if d.readers[topic] == nil {
		return fmt.Errorf("enginetest: the topology does not read topic %q (it reads %v)", topic, slices.Sorted(maps.Keys(d.readers)))
	}
	if err := d.send(topo.Output{Topic: topic, Key: key, Value: value, Timestamp: ts.UnixMilli(), Headers: headers}); err != nil {
		return err
	}
	if err := d.drain(); err != nil {
		return err
	}
	return d.beforeCommit()
}

// beforeCommit runs the processors' before-commit hooks, as the runtime
// does before each commit: the driver has every record acknowledged at
// once, and runs them after each piped record and at Commit.
func (d *Driver) beforeCommit() error {
	for _, t := range d.tasks {
		if !t.HasCommitHooks() {
			continue
		}
		if err := t.BeforeCommit(); err != nil {
			return err
		}
		if err := d.drain(); err != nil {
			return err
		}
	}
	return nil
}

// drain processes the queue to the end. A record that fails is dropped, as
// the runtime's fail policy would stop only its task; the others still run,
// and the first error is returned.
func (d *Driver) drain() error {
	var first error
	for len(d.queue) > 0 {
		in := d.queue[0]
		d.queue = d.queue[1:]
		if err := d.readers[in.Topic].Process(in); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// AdvanceWallClock moves the simulated wall clock forward and runs the
// wall-clock punctuators that are due, and whatever they cause.
func (d *Driver) AdvanceWallClock(by time.Duration) {
	if err := d.TryAdvanceWallClock(by); err != nil {
		d.fail(err)
	}
}

// TryAdvanceWallClock is AdvanceWallClock returning the error.
func (d *Driver) TryAdvanceWallClock(by time.Duration) error {
	d.now = d.now.Add(by)
	for _, t := range d.tasks {
		if err := t.Punctuate(d.now); err != nil {
			return err
		}
		if err := d.drain(); err != nil {
			return err
		}
	}
	return nil
}

// Commit does what the runtime does before committing: it flushes every
// task's record cache (see [CacheBytes]) and processes what that causes,
// then runs the processors' before-commit hooks.
func (d *Driver) Commit() {
	if err := d.TryCommit(); err != nil {
		d.fail(err)
	}
}

// TryCommit is Commit returning the error.
func (d *Driver) TryCommit() error {
	// Flushing one task can feed records to another whose cache then fills.
	for pending := true; pending; {
		pending = false
		for _, t := range d.tasks {
			if err := t.Flush(); err != nil {
				return err
			}
			if err := d.drain(); err != nil {
				return err
			}
		}
		for _, t := range d.tasks {
			pending = pending || t.Pending() > 0
		}
	}
	return d.beforeCommit()
}

// Positions is App.Positions for the driver: every topic the topology
// reads (one partition, 0) is processed to its end.
func (d *Driver) Positions() map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	for topic := range d.readers {
		out[topic] = map[int32]int64{0: int64(len(d.topics[topic]))}
	}
	return out
}

// StorePosition is App.StorePosition for the driver: the driver runs every
// record through to the end before the next, so every store reflects
// Positions; its inputs are every topic the topology reads but its own.
func (d *Driver) StorePosition(store string) (engine.StorePosition, error) {
	if d.topo.Stores[store] == nil {
		return engine.StorePosition{}, fmt.Errorf("engine: the topology has no store %q", store)
	}
	var inputs []string
	for _, sub := range d.topo.Subs {
		for ref := range sub.Sources {
			if !ref.Internal && !sub.Global {
				inputs = append(inputs, ref.Name)
			}
		}
	}
	slices.Sort(inputs)
	inputs = slices.Compact(inputs)
	return engine.StorePosition{Offsets: d.Positions(), Inputs: inputs, Partitions: []int32{0}}, nil
}

// Now is the simulated wall clock.
func (d *Driver) Now() time.Time { return d.now }

// Messages returns every record written to a topic so far, in order.
func (d *Driver) Messages(topic string) []Message { return slices.Clone(d.topics[topic]) }

// Topics lists the topics that have records, sorted.
func (d *Driver) Topics() []string { return slices.Sorted(maps.Keys(d.topics)) }

// Skipped counts the records the topology dropped, by node and reason.
func (d *Driver) Skipped() map[string]int64 {
	all := map[string]int64{}
	for _, t := range d.tasks {
		for k, v := range t.Skipped() {
			all[k] += v
		}
	}
	return all
}

// LocalStore returns a store of the running topology; it implements
// engine.Queryable, so [engine.QueryKeyValueStore] reads from a driver.
func (d *Driver) LocalStore(name string) (engine.RawStore, error) {
	for _, t := range d.tasks {
		if s := t.Store(name); s != nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("enginetest: no store %q (the topology has %v)", name, slices.Sorted(maps.Keys(d.topo.Stores)))
}

// Topology is the topology the driver runs; with it, queries refuse a
// store read as something it does not hold, as an App's do.
func (d *Driver) Topology() *engine.Topology { return d.top }

// Close closes every task.
func (d *Driver) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, t := range d.tasks {
		errs = append(errs, t.Close())
	}
	return errors.Join(errs...)
}

func (d *Driver) fail(err error) {
	if d.tb != nil {
		d.tb.Helper()
		d.tb.Fatal(err)
	}
	panic(err)
}

// Input writes typed records to a topic the topology reads.
type Input[K, V any] struct {
	d     *Driver
	topic string
	ks    serde.Serde[K]
	vs    serde.Serde[V]
}

// NewInput returns an input for a topic, encoding with the given serdes.
func NewInput[K, V any](d *Driver, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *Input[K, V] {
	return &Input[K, V]{d: d, topic: topic, ks: keySerde, vs: valueSerde}
}

// Pipe writes a record and processes it and everything it causes; any error
// fails the test.
func (in *Input[K, V]) Pipe(key K, value V, ts time.Time, headers ...engine.Header) {
	if in.d.tb != nil {
		in.d.tb.Helper()
	}
	if err := in.TryPipe(key, value, ts, headers...); err != nil {
		in.d.fail(err)
	}
}

// TryPipe is Pipe returning the error.
func (in *Input[K, V]) TryPipe(key K, value V, ts time.Time, headers ...engine.Header) error {
	kb, err := in.ks.Encode(key)
	if err != nil {
		return err
	}
	vb, err := in.vs.Encode(value)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{}
	}
	return in.d.PipeBytes(in.topic, kb, vb, ts, headers...)
}

// Delete writes a tombstone for key.
func (in *Input[K, V]) Delete(key K, ts time.Time) {
	if in.d.tb != nil {
		in.d.tb.Helper()
	}
	kb, err := in.ks.Encode(key)
	if err == nil {
		err = in.d.PipeBytes(in.topic, kb, nil, ts)
	}
	if err != nil {
		in.d.fail(err)
	}
}

// Output reads typed records from a topic, in the order they were written.
type Output[K, V any] struct {
	d     *Driver
	topic string
	ks    serde.Serde[K]
	vs    serde.Serde[V]
	read  int
}

// NewOutput returns a reader of a topic, decoding with the given serdes. It
// starts at the topic's first record.
func NewOutput[K, V any](d *Driver, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *Output[K, V] {
	return &Output[K, V]{d: d, topic: topic, ks: keySerde, vs: valueSerde}
}

// ReadRecords returns the records not read yet. A decoding error fails the
// test.
func (o *Output[K, V]) ReadRecords() []engine.Record[K, V] {
	if o.d.tb != nil {
		o.d.tb.Helper()
	}
	msgs := o.d.topics[o.topic][o.read:]
	o.read += len(msgs)
	recs := make([]engine.Record[K, V], 0, len(msgs))
	for _, m := range msgs {
		r := engine.Record[K, V]{Timestamp: m.Timestamp, Headers: m.Headers, Tombstone: m.Value == nil}
		var err error
		if m.Key != nil {
			r.Key, err = o.ks.Decode(m.Key)
		}
		if err == nil && m.Value != nil {
			r.Value, err = o.vs.Decode(m.Value)
		}
		if err != nil {
			o.d.fail(fmt.Errorf("enginetest: topic %s offset %d: %w", o.topic, m.Offset, err))
		}
		recs = append(recs, r)
	}
	return recs
}

// ReadKeyValues returns the keys and values of the records not read yet;
// a tombstone has the zero value.
func (o *Output[K, V]) ReadKeyValues() []engine.KeyValue[K, V] {
	if o.d.tb != nil {
		o.d.tb.Helper()
	}
	var kvs []engine.KeyValue[K, V]
	for _, r := range o.ReadRecords() {
		kvs = append(kvs, engine.KV(r.Key, r.Value))
	}
	return kvs
}

// Empty reports whether every record has been read.
func (o *Output[K, V]) Empty() bool { return o.read == len(o.d.topics[o.topic]) }

// ReadTable reads the records not read yet as a changelog and returns the
// table they leave: the latest value of each key, tombstones deleting.
func ReadTable[K comparable, V any](o *Output[K, V]) map[K]V {
	if o.d.tb != nil {
		o.d.tb.Helper()
	}
	t := map[K]V{}
	for _, r := range o.ReadRecords() {
		if r.Tombstone {
			delete(t, r.Key)
		} else {
			t[r.Key] = r.Value
		}
	}
	return t
}

// Store opens a store of the running topology for reading; an error fails
// the test.
func Store[K, V any](d *Driver, name string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) engine.ReadOnlyKeyValueStore[K, V] {
	if d.tb != nil {
		d.tb.Helper()
	}
	s, err := engine.QueryKeyValueStore(d, name, keySerde, valueSerde)
	if err != nil {
		d.fail(err)
	}
	return s
}

// StoreContents reads a whole key-value store into a map; an error fails
// the test.
func StoreContents[K comparable, V any](d *Driver, name string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) map[K]V {
	if d.tb != nil {
		d.tb.Helper()
	}
	m := map[K]V{}
	for kv, err := range Store(d, name, keySerde, valueSerde).All() {
		if err != nil {
			d.fail(err)
		}
		m[kv.Key] = kv.Value
	}
	return m
}

// WindowStoreContents reads every window of a window store (a windowed
// aggregation's, its windows of size) into a map; an error fails the
// test.
func WindowStoreContents[K comparable, V any](d *Driver, name string, keySerde serde.Serde[K], valueSerde serde.Serde[V], size time.Duration) map[engine.Windowed[K]]V {
	if d.tb != nil {
		d.tb.Helper()
	}
	st, err := engine.QueryWindowStore(d, name, keySerde, valueSerde, size)
	if err != nil {
		d.fail(err)
		return nil
	}
	m := map[engine.Windowed[K]]V{}
	for kv, err := range st.All() {
		if err != nil {
			d.fail(err)
		}
		m[kv.Key] = kv.Value
	}
	return m
}
