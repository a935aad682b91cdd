package engine

import (
	"errors"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/record"
)

// Header is a Kafka record header: a string Key and a []byte Value.
type Header = record.Header

// Record is a keyed, timestamped record as a processor sees it.
//
// A tombstone is a record without a value: it deletes Key from a table, and
// it is what a null-valued Kafka record becomes. Its Value is the zero value.
type Record[K, V any] struct {
	Key       K
	Value     V
	Tombstone bool
	Timestamp time.Time
	Headers   []Header
}

// KeyValue is a key and its value.
type KeyValue[K, V any] struct {
	Key   K
	Value V
}

// KV makes a KeyValue.
func KV[K, V any](k K, v V) KeyValue[K, V] { return KeyValue[K, V]{Key: k, Value: v} }

// Metadata says where the record being processed came from. In a punctuator
// Topic is empty and Offset is -1.
type Metadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

// PunctuationType says which clock a punctuator follows.
type PunctuationType int

const (
	// StreamTime punctuators follow the task's stream time, the largest
	// record timestamp it has processed; the first call comes with the first
	// record.
	StreamTime PunctuationType = iota
	// WallClockTime punctuators follow the wall clock; the first call comes an
	// interval after scheduling.
	WallClockTime
)

// The clocks are the task's, in its order, so that Schedule converts
// rather than maps (a compile error otherwise).
func _() {
	var x [1]struct{}
	_ = x[StreamTime-PunctuationType(topo.StreamTime)]
	_ = x[WallClockTime-PunctuationType(topo.WallClockTime)]
}

// Processor is the low-level API for what the DSL cannot say. Add one with
// [Process]. One instance exists per task (per input partition), called by
// one goroutine at a time; it may keep state in fields, but state that must
// survive a restart belongs in a store (see [WithStores]).
//
// A Processor may also implement Init(*ProcessorContext[KOut, VOut]) error,
// called once before the first record (to open stores and schedule
// punctuators), and Close() error, called when its task closes.
type Processor[KIn, VIn, KOut, VOut any] interface {
	Process(ctx *ProcessorContext[KOut, VOut], rec Record[KIn, VIn]) error
}

// ProcessorFunc adapts a function to a Processor.
type ProcessorFunc[KIn, VIn, KOut, VOut any] func(ctx *ProcessorContext[KOut, VOut], rec Record[KIn, VIn]) error

// Process calls f.
func (f ProcessorFunc[KIn, VIn, KOut, VOut]) Process(ctx *ProcessorContext[KOut, VOut], rec Record[KIn, VIn]) error {
	return f(ctx, rec)
}

// ProcessorContext is a processor's handle on its task.
type ProcessorContext[K, V any] struct {
	c *topo.Context
}

// StoreContext is what a store definition opens a store from: any
// *ProcessorContext.
type StoreContext interface {
	raw() *topo.Context
}

func (p *ProcessorContext[K, V]) raw() *topo.Context { return p.c }

// Forward sends a record to every child node, which process it before
// Forward returns.
func (p *ProcessorContext[K, V]) Forward(rec Record[K, V]) error {
	return p.c.Forward(untype(rec))
}

// ForwardTo sends a record to the child node with the given name (see
// [Named]).
func (p *ProcessorContext[K, V]) ForwardTo(child string, rec Record[K, V]) error {
	return p.c.ForwardTo(child, untype(rec))
}

// ForwardToProduced is ForwardTo that also learns where the record went:
// once Kafka has acknowledged the record a sink below child wrote for it
// (and before the commit that includes it), fn is called, from any
// goroutine, with its partition and offset. The nodes between must pass
// the record on as they got it (a filter does; a map makes a new one). In
// the test driver fn is called at once. Read the positions in a
// [ProcessorContext.BeforeCommit] hook.
func (p *ProcessorContext[K, V]) ForwardToProduced(child string, rec Record[K, V], fn func(partition int32, offset int64)) error {
	return p.c.ForwardTo(child, topo.WithProduced(untype(rec), fn))
}

// BeforeCommit registers fn to run in the processor's task before each
// commit, once Kafka has acknowledged every record the task sent (so the
// callbacks of [ProcessorContext.ForwardToProduced] have run). What fn
// forwards and writes to stores commits with what the task processed: under
// exactly-once, in the same transaction. The positions of records fn itself
// forwards are known at the next commit. The test driver runs the hooks
// after each piped record and at Commit.
func (p *ProcessorContext[K, V]) BeforeCommit(fn func() error) { p.c.BeforeCommit(fn) }

// RequestCommit asks for a commit as soon as the instance has processed
// what it polled, instead of at the next CommitInterval: for a processor
// whose results someone waits for (Kafka Streams' ProcessorContext.commit).
// Under load the commits then follow the polls.
func (p *ProcessorContext[K, V]) RequestCommit() { p.c.RequestCommit() }

// Schedule calls fn every interval of the given clock, with that clock's
// time, until cancel is called or the task closes. Records forwarded from fn
// go to the node's children like any other.
func (p *ProcessorContext[K, V]) Schedule(interval time.Duration, typ PunctuationType, fn func(now time.Time) error) (cancel func(), err error) {
	return p.c.Schedule(interval, topo.PunctuationType(typ), fn)
}

// Metadata says where the record being processed came from.
func (p *ProcessorContext[K, V]) Metadata() Metadata {
	o := p.c.Origin()
	return Metadata{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset}
}

// TaskID names the task: "<sub-topology>_<partition>".
func (p *ProcessorContext[K, V]) TaskID() string { return p.c.TaskID().String() }

// Partition is the input partition the task owns.
func (p *ProcessorContext[K, V]) Partition() int32 { return p.c.TaskID().Partition }

// StreamTime is the task's stream time: the largest timestamp it has
// processed (the zero time before the first record).
func (p *ProcessorContext[K, V]) StreamTime() time.Time { return p.c.StreamTime() }

// Now is the wall clock (the driver's simulated one in tests).
func (p *ProcessorContext[K, V]) Now() time.Time { return p.c.Now() }

// Skip counts a record the processor chose to drop, with the reason, in the
// dropped-records metric.
func (p *ProcessorContext[K, V]) Skip(reason string) { p.c.Skip(reason) }

func untype[K, V any](rec Record[K, V]) topo.Record {
	r := topo.Record{Key: rec.Key, Timestamp: rec.Timestamp, Headers: rec.Headers}
	if !rec.Tombstone {
		r.Value = rec.Value
	}
	return r
}

func typed[K, V any](r topo.Record) Record[K, V] {
	return Record[K, V]{Key: as[K](r.Key), Value: as[V](r.Value), Tombstone: r.Value == nil, Timestamp: r.Timestamp, Headers: r.Headers}
}

// Process adds a processor to a stream. newProcessor is called once per task.
// Attach the stores it uses with [WithStores].
func Process[KIn, VIn, KOut, VOut any](s *Stream[KIn, VIn], newProcessor func() Processor[KIn, VIn, KOut, VOut], opts ...Option) *Stream[KOut, VOut] {
	o, err := s.b.opts("Process", opts, "WithStores")
	n := &topo.Node{Kind: topo.ProcessorNode, Op: "process", Parents: []*topo.Node{s.node}}
	n.Name = s.b.name("process", o, n.Parents, "")
	for _, d := range o.stores {
		spec := d.spec()
		s.b.g.AddStore(spec)
		n.Stores = append(n.Stores, spec.Name)
		err = errors.Join(err, d.check())
	}
	err = errors.Join(err, nilFuncErr(newProcessor == nil, "processor constructor"))
	n.New = func() topo.Processor {
		return &userProc[KIn, VIn, KOut, VOut]{p: newProcessor()}
	}
	s.b.add(n, err)
	return &Stream[KOut, VOut]{b: s.b, node: n, ks: defaultSerde[KOut](), vs: defaultSerde[VOut](), rekeyed: true}
}

type userProc[KIn, VIn, KOut, VOut any] struct {
	p   Processor[KIn, VIn, KOut, VOut]
	ctx *ProcessorContext[KOut, VOut]
}

func (u *userProc[KIn, VIn, KOut, VOut]) Init(c *topo.Context) error {
	u.ctx = &ProcessorContext[KOut, VOut]{c: c}
	if i, ok := u.p.(interface {
		Init(*ProcessorContext[KOut, VOut]) error
	}); ok {
		return i.Init(u.ctx)
	}
	return nil
}

func (u *userProc[KIn, VIn, KOut, VOut]) Process(r topo.Record) error {
	return u.p.Process(u.ctx, typed[KIn, VIn](r))
}

func (u *userProc[KIn, VIn, KOut, VOut]) Close() error {
	if c, ok := u.p.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// fproc is the processor behind most DSL operations: a function of the
// context and the record, with an optional init.
type fproc struct {
	init func(c *topo.Context) error
	fn   func(c *topo.Context, r topo.Record) error
	c    *topo.Context
}

func (f *fproc) Init(c *topo.Context) error {
	f.c = c
	if f.init != nil {
		return f.init(c)
	}
	return nil
}

func (f *fproc) Process(r topo.Record) error { return f.fn(f.c, r) }
func (f *fproc) Close() error                { return nil }

func stateless(fn func(c *topo.Context, r topo.Record) error) func() topo.Processor {
	return func() topo.Processor { return &fproc{fn: fn} }
}
