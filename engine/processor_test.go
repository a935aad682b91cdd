package engine_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Helpers of this file are prefixed with "pt".

type ptCtx = engine.ProcessorContext[string, int64]
type ptRec = engine.Record[string, int64]

// ptProc is a processor made of functions; a nil one does nothing. It
// records which of its methods were called.
type ptProc struct {
	init    func(ctx *ptCtx) error
	process func(ctx *ptCtx, rec ptRec) error
	close   func() error
	calls   []string
}

func (p *ptProc) Init(ctx *ptCtx) error {
	p.calls = append(p.calls, "init")
	if p.init != nil {
		return p.init(ctx)
	}
	return nil
}

func (p *ptProc) Process(ctx *ptCtx, rec ptRec) error {
	p.calls = append(p.calls, "process")
	if p.process != nil {
		return p.process(ctx, rec)
	}
	return nil
}

func (p *ptProc) Close() error {
	p.calls = append(p.calls, "close")
	if p.close != nil {
		return p.close()
	}
	return nil
}

// ptOne returns a constructor that hands out p, and counts its calls.
func ptOne(p *ptProc, made *int) func() engine.Processor[string, int64, string, int64] {
	return func() engine.Processor[string, int64, string, int64] {
		*made++
		return p
	}
}

// A processor counts the records of each key in a store it declared, sends
// every count to all its children and the odd ones only to the child named
// "all", and sees where each record came from.
func TestProcessorStoreForwardAndMetadata(t *testing.T) {
	counts := engine.NewKeyValueStore("counts", serde.String, serde.Int64)
	var (
		kv   engine.KeyValueStore[string, int64]
		meta []engine.Metadata
		made int
	)
	p := &ptProc{
		init: func(ctx *ptCtx) error {
			var err error
			kv, err = counts.Open(ctx)
			return err
		},
		process: func(ctx *ptCtx, rec ptRec) error {
			meta = append(meta, ctx.Metadata())
			if got := ctx.TaskID(); got != "0_0" {
				t.Errorf("TaskID() = %q, want 0_0", got)
			}
			if got := ctx.StreamTime(); !got.Equal(rec.Timestamp) {
				t.Errorf("StreamTime() = %v, want the record's %v", got, rec.Timestamp)
			}
			n, _, err := kv.Get(rec.Key)
			if err != nil {
				return err
			}
			n++
			if err := kv.Put(rec.Key, n); err != nil {
				return err
			}
			out := engine.Record[string, int64]{Key: rec.Key, Value: n, Timestamp: rec.Timestamp, Headers: rec.Headers}
			if n%2 == 0 {
				return ctx.Forward(out)
			}
			return ctx.ForwardTo("all", out)
		},
	}
	b := engine.NewBuilder()
	out := engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.WithStores(counts), engine.Named("counter"))
	out.Peek(func(string, int64) {}, engine.Named("all")).To("all")
	out.Peek(func(string, int64) {}, engine.Named("evens")).To("evens")
	top := dsBuild(t, b)

	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	hdr := engine.Header{Key: "trace", Value: []byte("t-1")}
	in.Pipe("a", 0, enginetest.At(10), hdr)
	in.Pipe("b", 0, enginetest.At(20))
	in.Pipe("a", 0, enginetest.At(30))
	in.Pipe("a", 0, enginetest.At(40))

	if made != 1 {
		t.Errorf("the constructor was called %d times, want once (one task)", made)
	}
	all := enginetest.NewOutput(d, "all", serde.String, serde.Int64).ReadRecords()
	wantAll := []engine.KeyValue[string, int64]{{Key: "a", Value: 1}, {Key: "b", Value: 1}, {Key: "a", Value: 2}, {Key: "a", Value: 3}}
	if got := ptKVs(all); !slices.Equal(got, wantAll) {
		t.Errorf("all = %v, want %v", got, wantAll)
	}
	if !all[0].Timestamp.Equal(enginetest.At(10)) || len(all[0].Headers) != 1 || all[0].Headers[0].Key != "trace" {
		t.Errorf("the first output lost its timestamp or headers: %+v", all[0])
	}
	evens := enginetest.NewOutput(d, "evens", serde.String, serde.Int64).ReadKeyValues()
	if want := []engine.KeyValue[string, int64]{{Key: "a", Value: 2}}; !slices.Equal(evens, want) {
		t.Errorf("evens = %v, want %v", evens, want)
	}
	wantMeta := []engine.Metadata{{Topic: "in", Offset: 0}, {Topic: "in", Offset: 1}, {Topic: "in", Offset: 2}, {Topic: "in", Offset: 3}}
	if !slices.Equal(meta, wantMeta) {
		t.Errorf("metadata = %+v, want %+v", meta, wantMeta)
	}
	if got := enginetest.StoreContents(d, "counts", serde.String, serde.Int64); len(got) != 2 || got["a"] != 3 || got["b"] != 1 {
		t.Errorf("store counts = %v, want map[a:3 b:1]", got)
	}
}

func ptKVs(recs []engine.Record[string, int64]) []engine.KeyValue[string, int64] {
	kvs := make([]engine.KeyValue[string, int64], len(recs))
	for i, r := range recs {
		kvs[i] = engine.KV(r.Key, r.Value)
	}
	return kvs
}

// ForwardTo a child that does not exist is an error that names the node and
// the child; it reaches the caller of Pipe, and the driver goes on.
func TestProcessorForwardToUnknownChild(t *testing.T) {
	var made int
	p := &ptProc{process: func(ctx *ptCtx, rec ptRec) error {
		if rec.Key == "bad" {
			return ctx.ForwardTo("nope", rec)
		}
		return ctx.ForwardTo("known", rec)
	}}
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.Named("proc")).
		Filter(btTrue, engine.Named("known")).To("out")
	d := enginetest.New(t, dsBuild(t, b))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	err := in.TryPipe("bad", 1, enginetest.At(1))
	if err == nil {
		t.Fatal("ForwardTo an unknown child succeeded")
	}
	for _, want := range []string{`node "proc"`, `no child named "nope"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	in.Pipe("good", 2, enginetest.At(2))
	if got := enginetest.NewOutput(d, "out", serde.String, serde.Int64).ReadKeyValues(); !slices.Equal(got, []engine.KeyValue[string, int64]{{Key: "good", Value: 2}}) {
		t.Errorf("out = %v, want [{good 2}]", got)
	}
}

// Punctuators fire at exact times: a stream-time one with the first record
// and then whenever stream time reaches the next multiple of the interval
// after the last firing (one call for several missed intervals, with the
// current stream time); a wall-clock one an interval after scheduling, then
// likewise. Each follows only its own clock, and cancel stops it.
func TestProcessorPunctuators(t *testing.T) {
	var (
		streamCalls, wallCalls   []time.Time
		cancelStream, cancelWall func()
		punctMeta                []engine.Metadata
		made                     int
	)
	p := &ptProc{
		init: func(ctx *ptCtx) error {
			var err error
			cancelStream, err = ctx.Schedule(10*time.Millisecond, engine.StreamTime, func(now time.Time) error {
				streamCalls = append(streamCalls, now)
				punctMeta = append(punctMeta, ctx.Metadata())
				return ctx.Forward(engine.Record[string, int64]{Key: "stream", Value: now.Sub(enginetest.Epoch).Milliseconds(), Timestamp: now})
			})
			if err != nil {
				return err
			}
			cancelWall, err = ctx.Schedule(time.Second, engine.WallClockTime, func(now time.Time) error {
				wallCalls = append(wallCalls, now)
				if !ctx.Now().Equal(now) {
					t.Errorf("in a wall-clock punctuator Now() = %v, want %v", ctx.Now(), now)
				}
				return ctx.Forward(engine.Record[string, int64]{Key: "wall", Value: now.Sub(enginetest.Epoch).Milliseconds(), Timestamp: now})
			})
			return err
		},
	}
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.Named("proc")).To("ticks")
	d := enginetest.New(t, dsBuild(t, b))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	ticks := enginetest.NewOutput(d, "ticks", serde.String, serde.Int64)

	ms := func(ts ...int64) []time.Time {
		var out []time.Time
		for _, t := range ts {
			out = append(out, enginetest.At(t))
		}
		return out
	}
	// Stream time.
	for _, ts := range []int64{5, 12, 15, 3, 47, 55, 60} {
		in.Pipe("k", 0, enginetest.At(ts))
	}
	if want := ms(5, 15, 47, 55); !slices.EqualFunc(streamCalls, want, time.Time.Equal) {
		t.Errorf("stream-time punctuations at %v, want %v", streamCalls, want)
	}
	if len(wallCalls) != 0 {
		t.Errorf("records moved the wall-clock punctuator: %v", wallCalls)
	}
	for _, m := range punctMeta {
		if m != (engine.Metadata{Topic: "", Partition: 0, Offset: -1}) {
			t.Errorf("metadata in a punctuator = %+v, want no topic and offset -1", m)
		}
	}
	wantTicks := []engine.KeyValue[string, int64]{{Key: "stream", Value: 5}, {Key: "stream", Value: 15}, {Key: "stream", Value: 47}, {Key: "stream", Value: 55}}
	if got := ticks.ReadKeyValues(); !slices.Equal(got, wantTicks) {
		t.Errorf("records forwarded by the punctuator = %v, want %v", got, wantTicks)
	}

	// Wall clock, scheduled at Epoch.
	for _, by := range []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 2500 * time.Millisecond, 500 * time.Millisecond, 999 * time.Millisecond} {
		d.AdvanceWallClock(by)
	}
	if want := []time.Time{enginetest.Epoch.Add(time.Second), enginetest.Epoch.Add(3500 * time.Millisecond), enginetest.Epoch.Add(4 * time.Second)}; !slices.EqualFunc(wallCalls, want, time.Time.Equal) {
		t.Errorf("wall-clock punctuations at %v, want %v", wallCalls, want)
	}
	if len(streamCalls) != 4 {
		t.Errorf("the wall clock moved the stream-time punctuator: %v", streamCalls)
	}
	if got := ticks.ReadKeyValues(); len(got) != 3 || got[0] != engine.KV("wall", int64(1000)) {
		t.Errorf("records forwarded by the wall-clock punctuator = %v", got)
	}
	d.AdvanceWallClock(time.Millisecond) // 5s: due
	if len(wallCalls) != 4 || !wallCalls[3].Equal(enginetest.Epoch.Add(5*time.Second)) {
		t.Errorf("wall-clock punctuations at %v, want a fourth at 5s", wallCalls)
	}

	// Cancelled, neither fires again.
	cancelStream()
	cancelWall()
	in.Pipe("k", 0, enginetest.At(1000))
	d.AdvanceWallClock(time.Hour)
	if len(streamCalls) != 4 || len(wallCalls) != 4 {
		t.Errorf("cancelled punctuators fired: stream %v, wall %v", streamCalls, wallCalls)
	}
}

// Store writes from a punctuator carry the punctuation's time, in the store
// and in its changelog.
func TestProcessorStoreWriteInPunctuator(t *testing.T) {
	def := engine.NewKeyValueStore("ticks", serde.String, serde.Int64)
	p := &ptProc{init: func(ctx *ptCtx) error {
		kv, err := def.Open(ctx)
		if err != nil {
			return err
		}
		_, err = ctx.Schedule(time.Minute, engine.WallClockTime, func(now time.Time) error {
			return kv.Put("last", now.Sub(enginetest.Epoch).Milliseconds())
		})
		return err
	}}
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.WithStores(def))
	d := enginetest.New(t, dsBuild(t, b))
	d.AdvanceWallClock(90 * time.Second)
	msgs := d.Messages(d.ChangelogTopic("ticks"))
	if len(msgs) != 1 || !msgs[0].Timestamp.Equal(enginetest.At(90_000)) {
		t.Fatalf("changelog = %+v, want one record at 90s", msgs)
	}
	if got := enginetest.StoreContents(d, "ticks", serde.String, serde.Int64); got["last"] != 90_000 {
		t.Errorf("store = %v, want last:90000", got)
	}
}

// A store write carries the timestamp of the record its processor is
// processing, even after the processor forwarded a record with another
// timestamp to its children.
func TestProcessorStoreWriteAfterForwardKeepsRecordTime(t *testing.T) {
	def := engine.NewKeyValueStore("kv", serde.String, serde.Int64)
	var kv engine.KeyValueStore[string, int64]
	p := &ptProc{
		init: func(ctx *ptCtx) error {
			var err error
			kv, err = def.Open(ctx)
			return err
		},
		process: func(ctx *ptCtx, rec ptRec) error {
			out := rec
			out.Timestamp = enginetest.At(99)
			if err := ctx.Forward(out); err != nil {
				return err
			}
			return kv.Put(rec.Key, rec.Value)
		},
	}
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.WithStores(def)).Filter(btTrue).To("out")
	d := enginetest.New(t, dsBuild(t, b))
	enginetest.NewInput(d, "in", serde.String, serde.Int64).Pipe("a", 1, enginetest.At(10))
	msgs := d.Messages(d.ChangelogTopic("kv"))
	if len(msgs) != 1 {
		t.Fatalf("changelog = %+v, want one record", msgs)
	}
	if got := msgs[0].Timestamp; !got.Equal(enginetest.At(10)) {
		t.Fatalf("a store write after Forward takes the forwarded record's timestamp (%v after the epoch), not the processed record's (10ms): the child's record time leaks back to the parent", got.Sub(enginetest.Epoch))
	}
}

// A punctuator can cancel itself from inside its own call.
func TestProcessorPunctuatorCancelsItself(t *testing.T) {
	var calls int
	var cancel func()
	p := &ptProc{init: func(ctx *ptCtx) error {
		var err error
		cancel, err = ctx.Schedule(time.Second, engine.WallClockTime, func(time.Time) error {
			calls++
			if calls == 2 {
				cancel()
			}
			return nil
		})
		return err
	}}
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made))
	d := enginetest.New(t, dsBuild(t, b))
	for range 5 {
		d.AdvanceWallClock(time.Second)
	}
	if calls != 2 {
		t.Errorf("the punctuator ran %d times, want 2", calls)
	}
}

func TestProcessorScheduleErrors(t *testing.T) {
	t.Run("interval under a millisecond", func(t *testing.T) {
		p := &ptProc{init: func(ctx *ptCtx) error {
			_, err := ctx.Schedule(time.Microsecond, engine.StreamTime, func(time.Time) error { return nil })
			return err
		}}
		var made int
		b := engine.NewBuilder()
		engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.Named("proc"))
		_, err := enginetest.Start(dsBuild(t, b))
		if err == nil || !strings.Contains(err.Error(), "under a millisecond") || !strings.Contains(err.Error(), `"proc"`) {
			t.Errorf("Start error = %v, want one about the interval naming the node", err)
		}
	})
	t.Run("a punctuator's error reaches the caller", func(t *testing.T) {
		boom := errors.New("boom")
		p := &ptProc{init: func(ctx *ptCtx) error {
			_, err := ctx.Schedule(time.Second, engine.WallClockTime, func(time.Time) error { return boom })
			return err
		}}
		var made int
		b := engine.NewBuilder()
		engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.Named("proc"))
		d := enginetest.New(t, dsBuild(t, b))
		err := d.TryAdvanceWallClock(time.Second)
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"proc"`) {
			t.Errorf("TryAdvanceWallClock error = %v, want boom wrapped with the node", err)
		}
	})
}

// Init is called once before the first record, Close when the driver
// closes; a Close error comes back from Driver.Close. Both are optional.
func TestProcessorInitAndClose(t *testing.T) {
	closeErr := errors.New("close failed")
	p := &ptProc{close: func() error { return closeErr }}
	var made int
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.Int64)
	engine.Process(s, ptOne(p, &made), engine.Named("proc"))
	// A processor without Init and Close is fine too.
	engine.Process(s, btNopProcessor)
	d, err := enginetest.Start(dsBuild(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.calls, []string{"init"}) {
		t.Errorf("after Start the calls are %q, want [init]", p.calls)
	}
	if err := enginetest.NewInput(d, "in", serde.String, serde.Int64).TryPipe("k", 1, enginetest.At(1)); err != nil {
		t.Fatal(err)
	}
	err = d.Close()
	if !errors.Is(err, closeErr) || !strings.Contains(err.Error(), `"proc"`) {
		t.Errorf("Close() = %v, want the processor's error, naming it", err)
	}
	if want := []string{"init", "process", "close"}; !slices.Equal(p.calls, want) {
		t.Errorf("calls = %q, want %q", p.calls, want)
	}
	if err := d.Close(); err != nil {
		t.Errorf("a second Close() = %v, want nil", err)
	}
	if !slices.Equal(p.calls, []string{"init", "process", "close"}) {
		t.Errorf("a second Close closed the processor again: %q", p.calls)
	}
}

// enginetest.New closes the driver, and with it the processors, when the
// test ends.
func TestProcessorClosedAtTestEnd(t *testing.T) {
	p := &ptProc{}
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made))
	top := dsBuild(t, b)
	t.Run("inner", func(t *testing.T) {
		enginetest.New(t, top)
		if slices.Contains(p.calls, "close") {
			t.Error("closed before the test ended")
		}
	})
	if !slices.Equal(p.calls, []string{"init", "close"}) {
		t.Errorf("calls = %q, want [init close]", p.calls)
	}
}

// When one processor's Init fails, the task does not start, and processors
// whose Init never ran must not be closed.
func TestProcessorInitFailure(t *testing.T) {
	failing := &ptProc{init: func(*ptCtx) error { return errors.New("no database") }}
	later := &ptProc{}
	var made int
	b := engine.NewBuilder()
	s := engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(failing, &made), engine.Named("first"))
	engine.Process(s, ptOne(later, &made), engine.Named("second"))
	_, err := enginetest.Start(dsBuild(t, b))
	if err == nil || !strings.Contains(err.Error(), `init "first"`) || !strings.Contains(err.Error(), "no database") {
		t.Fatalf("Start error = %v, want the Init error of node first", err)
	}
	if slices.Contains(later.calls, "close") && !slices.Contains(later.calls, "init") {
		t.Fatalf("a processor whose Init never ran is closed when another's Init fails: first %q, second %q", failing.calls, later.calls)
	}
}

// A processor can open only the stores attached to it with WithStores; the
// task fails to start with an error that names the node and the store and
// says what to do. (A store with nil serdes is refused earlier, by Build.)
func TestProcessorStoreNotAttached(t *testing.T) {
	mine := engine.NewKeyValueStore("mine", serde.String, serde.Int64)
	theirs := engine.NewKeyValueStore("theirs", serde.String, serde.Int64)
	tests := []struct {
		name    string
		attach  []engine.Option
		open    *engine.KeyValueStoreDef[string, int64]
		errWant []string
	}{
		{"declared nowhere", nil, mine, []string{`node "proc"`, `did not declare store "mine"`, "attach it"}},
		{"attached to another processor", []engine.Option{engine.WithStores(mine)}, theirs, []string{`node "proc"`, `did not declare store "theirs"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &ptProc{init: func(ctx *ptCtx) error {
				_, err := tt.open.Open(ctx)
				return err
			}}
			var made int
			b := engine.NewBuilder()
			s := engine.NewStream(b, "in", serde.String, serde.Int64)
			engine.Process(s, ptOne(p, &made), append(tt.attach, engine.Named("proc"))...)
			engine.Process(s, btNopProcessor, engine.WithStores(theirs))
			_, err := enginetest.Start(dsBuild(t, b))
			if err == nil {
				t.Fatal("the driver started")
			}
			for _, w := range tt.errWant {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A tombstone reaches a processor as Tombstone=true with the zero value;
// forwarding a record with Tombstone=true writes a null value; a zero value
// without Tombstone stays a value.
func TestProcessorTombstones(t *testing.T) {
	var seen []ptRec
	p := &ptProc{process: func(ctx *ptCtx, rec ptRec) error {
		seen = append(seen, rec)
		out := rec
		if rec.Key == "zero" {
			out.Value, out.Tombstone = 0, false
		}
		if rec.Key == "forced" {
			out.Value, out.Tombstone = 42, true
		}
		return ctx.Forward(out)
	}}
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made)).To("out")
	d := enginetest.New(t, dsBuild(t, b))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	in.Delete("gone", enginetest.At(1))
	in.Pipe("zero", 0, enginetest.At(2))
	in.Pipe("forced", 7, enginetest.At(3))

	want := []ptRec{
		{Key: "gone", Tombstone: true, Timestamp: enginetest.At(1)},
		{Key: "zero", Value: 0, Timestamp: enginetest.At(2)},
		{Key: "forced", Value: 7, Timestamp: enginetest.At(3)},
	}
	if len(seen) != len(want) {
		t.Fatalf("the processor saw %d records, want %d", len(seen), len(want))
	}
	for i := range want {
		if seen[i].Key != want[i].Key || seen[i].Value != want[i].Value || seen[i].Tombstone != want[i].Tombstone || !seen[i].Timestamp.Equal(want[i].Timestamp) {
			t.Errorf("record %d = %+v, want %+v", i, seen[i], want[i])
		}
	}
	msgs := d.Messages("out")
	if len(msgs) != 3 {
		t.Fatalf("out has %d messages, want 3", len(msgs))
	}
	if msgs[0].Value != nil || msgs[2].Value != nil {
		t.Errorf("tombstones were written with values %q and %q, want null", msgs[0].Value, msgs[2].Value)
	}
	if msgs[1].Value == nil || len(msgs[1].Value) != 8 {
		t.Errorf("the zero value was written as %v, want 8 bytes", msgs[1].Value)
	}
}

// ptStoreOps is a processor that applies commands to its store: a value v
// >= 0 puts v, a negative one deletes the key.
func ptStoreOps(def *engine.KeyValueStoreDef[string, int64], kv *engine.KeyValueStore[string, int64]) *ptProc {
	return &ptProc{
		init: func(ctx *ptCtx) error {
			var err error
			*kv, err = def.Open(ctx)
			return err
		},
		process: func(_ *ptCtx, rec ptRec) error {
			if rec.Value < 0 {
				return (*kv).Delete(rec.Key)
			}
			return (*kv).Put(rec.Key, rec.Value)
		},
	}
}

func ptCollect[K, V any](t *testing.T, seq func(func(engine.KeyValue[K, V], error) bool)) []engine.KeyValue[K, V] {
	t.Helper()
	var out []engine.KeyValue[K, V]
	for kv, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kv)
	}
	return out
}

// Range is half-open, [from, to), in the order of the encoded keys; All
// lists everything; Delete removes a key; a store opened for queries reads
// the same and refuses writes.
func TestProcessorStoreRangeAllDelete(t *testing.T) {
	def := engine.NewKeyValueStore("kv", serde.String, serde.Int64)
	var kv engine.KeyValueStore[string, int64]
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(ptStoreOps(def, &kv), &made), engine.WithStores(def))
	d := enginetest.New(t, dsBuild(t, b))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	for i, k := range []string{"d", "b", "e", "a", "c", "bb"} {
		in.Pipe(k, int64(i), enginetest.At(int64(i)))
	}
	query := enginetest.Store(d, "kv", serde.String, serde.Int64)

	keys := func(kvs []engine.KeyValue[string, int64]) []string {
		var ks []string
		for _, kv := range kvs {
			ks = append(ks, kv.Key)
		}
		return ks
	}
	for name, s := range map[string]engine.ReadOnlyKeyValueStore[string, int64]{"processor's": kv, "query": query} {
		tests := []struct {
			from, to string
			want     []string
		}{
			{"b", "d", []string{"b", "bb", "c"}},
			{"a", "b", []string{"a"}},
			{"b", "b", nil},
			{"d", "b", nil},
			{"", "c", []string{"a", "b", "bb"}},
			{"c", "z", []string{"c", "d", "e"}},
			{"bb", "bc", []string{"bb"}},
		}
		for _, tt := range tests {
			if got := keys(ptCollect(t, s.Range(tt.from, tt.to))); !slices.Equal(got, tt.want) {
				t.Errorf("%s Range(%q, %q) = %q, want %q", name, tt.from, tt.to, got, tt.want)
			}
		}
		all := ptCollect(t, s.All())
		if got := keys(all); !slices.Equal(got, []string{"a", "b", "bb", "c", "d", "e"}) {
			t.Errorf("%s All() keys = %q", name, got)
		}
		if all[0].Value != 3 || all[5].Value != 2 {
			t.Errorf("%s All() = %v, want a:3 … e:2", name, all)
		}
	}

	in.Pipe("c", -1, enginetest.At(10))
	in.Pipe("nothing-there", -1, enginetest.At(11))
	if got := keys(ptCollect(t, query.Range("b", "e"))); !slices.Equal(got, []string{"b", "bb", "d"}) {
		t.Errorf("after deleting c, Range(b, e) = %q", got)
	}
	if _, ok, err := query.Get("c"); ok || err != nil {
		t.Errorf("Get(c) after Delete = ok %v, err %v; want absent", ok, err)
	}
	if v, ok, err := query.Get("bb"); !ok || err != nil || v != 5 {
		t.Errorf("Get(bb) = %d, %v, %v; want 5", v, ok, err)
	}

	// Stopping early.
	n := 0
	for range query.All() {
		n++
		break
	}
	if n != 1 {
		t.Errorf("breaking out of All visited %d", n)
	}

	// Writes through a query store are refused.
	w, ok := query.(engine.KeyValueStore[string, int64])
	if !ok {
		t.Skip("the query store has no write methods at all")
	}
	if err := w.Put("x", 1); !errors.Is(err, engine.ErrReadOnly) {
		t.Errorf("Put through a query store = %v, want ErrReadOnly", err)
	}
	if err := w.Delete("a"); !errors.Is(err, engine.ErrReadOnly) {
		t.Errorf("Delete through a query store = %v, want ErrReadOnly", err)
	}
}

// Ranges follow the encoded keys, so with serde.Int64 (big-endian two's
// complement) the negative keys sort after the positive ones, and a range
// from a negative to a positive key is empty.
func TestProcessorStoreRangeFollowsEncodedOrder(t *testing.T) {
	def := engine.NewKeyValueStore("ints", serde.Int64, serde.Int64)
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.Int64, serde.Int64), func() engine.Processor[int64, int64, int64, int64] {
		made++
		var kv engine.KeyValueStore[int64, int64]
		return &ptIntStore{def: def, kv: &kv}
	}, engine.WithStores(def))
	d := enginetest.New(t, dsBuild(t, b))
	in := enginetest.NewInput(d, "in", serde.Int64, serde.Int64)
	for _, k := range []int64{-2, 5, 0, -7, 3} {
		in.Pipe(k, k*10, enginetest.At(1))
	}
	s := enginetest.Store(d, "ints", serde.Int64, serde.Int64)
	var keys []int64
	for kv, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, kv.Key)
	}
	if want := []int64{0, 3, 5, -7, -2}; !slices.Equal(keys, want) {
		t.Errorf("All() keys = %v, want %v", keys, want)
	}
	if got := ptCollect(t, s.Range(-5, 5)); len(got) != 0 {
		t.Errorf("Range(-5, 5) = %v, want empty (the encoded -5 sorts after 5)", got)
	}
	if got := ptCollect(t, s.Range(0, 5)); len(got) != 2 || got[0].Key != 0 || got[1].Key != 3 {
		t.Errorf("Range(0, 5) = %v, want keys 0 and 3", got)
	}
}

type ptIntStore struct {
	def *engine.KeyValueStoreDef[int64, int64]
	kv  *engine.KeyValueStore[int64, int64]
}

func (p *ptIntStore) Init(ctx *engine.ProcessorContext[int64, int64]) error {
	var err error
	*p.kv, err = p.def.Open(ctx)
	return err
}

func (p *ptIntStore) Process(_ *engine.ProcessorContext[int64, int64], rec engine.Record[int64, int64]) error {
	return (*p.kv).Put(rec.Key, rec.Value)
}

// The loop body of a Range may write to the store it iterates.
func TestProcessorStoreWriteWhileIterating(t *testing.T) {
	def := engine.NewKeyValueStore("kv", serde.String, serde.Int64)
	var kv engine.KeyValueStore[string, int64]
	p := ptStoreOps(def, &kv)
	ops := p.process
	p.process = func(ctx *ptCtx, rec ptRec) error {
		if rec.Key != "double" {
			return ops(ctx, rec)
		}
		for e, err := range kv.All() {
			if err != nil {
				return err
			}
			if err := kv.Put(e.Key, e.Value*2); err != nil {
				return err
			}
			if err := kv.Put(e.Key+"-copy", e.Value); err != nil {
				return err
			}
		}
		return nil
	}
	var made int
	b := engine.NewBuilder()
	engine.Process(engine.NewStream(b, "in", serde.String, serde.Int64), ptOne(p, &made), engine.WithStores(def))
	d := enginetest.New(t, dsBuild(t, b))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	in.Pipe("a", 1, enginetest.At(1))
	in.Pipe("b", 2, enginetest.At(2))
	in.Pipe("double", 0, enginetest.At(3))
	got := enginetest.StoreContents(d, "kv", serde.String, serde.Int64)
	want := map[string]int64{"a": 2, "b": 4, "a-copy": 1, "b-copy": 2}
	if len(got) != len(want) {
		t.Fatalf("store = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("store[%s] = %d, want %d", k, got[k], v)
		}
	}
}
