package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// concurrency tracks how many calls of a user function run at once.
type concurrency struct {
	inflight, max, calls atomic.Int64
}

func (c *concurrency) enter() {
	n := c.inflight.Add(1)
	for m := c.max.Load(); n > m && !c.max.CompareAndSwap(m, n); m = c.max.Load() {
	}
	c.calls.Add(1)
	// A little work, so that calls on different workers overlap.
	time.Sleep(100 * time.Microsecond)
	c.inflight.Add(-1)
}

// The workers of a running exactly-once instance are raised and lowered
// under a continuous input: from 1 to 3 (calls then overlap), back to 1 (a
// stretch of records with no overlap follows), then to 2. Every input
// record reaches the output exactly once, and the counts per key are
// exact.
func TestSetWorkers(t *testing.T) {
	k := newKT(t)
	in, copied, counts := k.topic("in"), k.topic("copied"), k.topic("counts")
	k.create(6, in, copied, counts)
	var cc concurrency
	b := engine.NewBuilder()
	s := engine.NewStream(b, in, serde.String, serde.String).Peek(func(string, string) { cc.enter() })
	s.To(copied)
	s.GroupByKey().Count().ToStream().To(counts)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{Guarantee: engine.ExactlyOnce, Workers: 1})
	waitRunning(t, k, a)
	if a.Workers() != 1 {
		t.Fatalf("Workers() = %d, want 1", a.Workers())
	}
	if err := a.SetWorkers(0); err == nil || !strings.Contains(err.Error(), "at least one worker") {
		t.Fatalf("SetWorkers(0) = %v, want an error", err)
	}

	// The input: records on 40 keys, paced, until stopped.
	ctx, cancel := context.WithCancel(context.Background())
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			batch := make([]*kgo.Record, 50)
			for i := range batch {
				n := sent.Load() + int64(i)
				batch[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%02d", n%40), Value: []byte(strconv.FormatInt(n, 10))}
			}
			k.produce(in, batch...)
			sent.Add(int64(len(batch)))
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()
	progress := func(n int64) {
		t.Helper()
		target := cc.calls.Load() + n
		await.Until(t, 60*time.Second, fmt.Sprintf("%d more records processed", n), func() bool { k.checkApps(); return cc.calls.Load() >= target })
	}

	progress(500)
	if m := cc.max.Load(); m != 1 {
		t.Fatalf("with one worker, %d calls ran at once", m)
	}
	if err := a.SetWorkers(3); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 60*time.Second, "calls on several workers at once", func() bool { k.checkApps(); return cc.max.Load() >= 2 })
	if err := a.SetWorkers(1); err != nil {
		t.Fatal(err)
	}
	// A round that began with three workers ends with them; some later
	// stretch of 300 records runs on one.
	await.Until(t, 60*time.Second, "300 records in a row on one worker", func() bool {
		cc.max.Store(cc.inflight.Load())
		progress(300)
		return cc.max.Load() == 1
	})
	if err := a.SetWorkers(2); err != nil {
		t.Fatal(err)
	}
	progress(500)
	cancel()
	wg.Wait()
	total := sent.Load()
	waitInputCommitted(t, k, in)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// Every record once in the copy, read committed.
	seen := make([]int, total)
	for _, r := range k.committedRecords(copied) {
		n, err := strconv.ParseInt(string(r.Value), 10, 64)
		if err != nil || n < 0 || n >= total {
			t.Fatalf("copied record %q", r.Value)
		}
		seen[n]++
	}
	for n, c := range seen {
		if c != 1 {
			t.Fatalf("record %d copied %d times (of %d records)", n, c, total)
		}
	}
	// The last count of each key is its number of records.
	last := map[string]int64{}
	for _, r := range k.committedRecords(counts) {
		v, err := serde.Int64.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		last[string(r.Key)] = v
	}
	for key := range int64(40) {
		want := total / 40
		if key < total%40 {
			want++
		}
		if got := last[fmt.Sprintf("k%02d", key)]; got != want {
			t.Errorf("count of k%02d = %d, want %d", key, got, want)
		}
	}
	t.Logf("%d records", total)
}

// committedRecords reads a topic to its end offsets, read committed (the
// transaction markers are read too, so that every partition is read to its
// end, but not returned).
func (k *kt) committedRecords(topic string) []*kgo.Record {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		k.t.Fatal(err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		k.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			k.t.Fatalf("topic %s: partitions %v not read to their ends", topic, remaining)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// A panic in user code goes through the processing error policy: dead-
// lettered, the instance carries on with the next record; with Fail, Run
// returns a *PanicError instead of the process crashing.
func TestPanicInUserCode(t *testing.T) {
	k := newKT(t)
	in, out, dlq := k.topic("in"), k.topic("out"), k.topic("dlq")
	k.create(1, in, out)
	b := engine.NewBuilder()
	engine.MapValues(engine.NewStream(b, in, serde.String, serde.String), func(_ string, v string) string {
		if v == "boom" {
			panic("boom!")
		}
		return strings.ToUpper(v)
	}).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	k.produce(in, &kgo.Record{Key: []byte("a"), Value: []byte("ok")}, &kgo.Record{Key: []byte("b"), Value: []byte("boom")}, &kgo.Record{Key: []byte("c"), Value: []byte("fine")})

	a := k.start(top, engine.Config{OnProcessingError: engine.DeadLetter, DeadLetterTopic: dlq, Workers: 2})
	outRecs := k.records(out, 2, 60*time.Second)
	if string(outRecs[0].Value) != "OK" || string(outRecs[1].Value) != "FINE" {
		t.Errorf("output %q %q, want OK FINE", outRecs[0].Value, outRecs[1].Value)
	}
	dead := k.records(dlq, 1, 30*time.Second)[0]
	if string(dead.Key) != "b" || !bytes.Equal(dead.Value, []byte("boom")) || header(dead, "oxbow.stage") != "process" || header(dead, "oxbow.error") != "panic: boom!" {
		t.Errorf("dead letter %q=%q headers %v", dead.Key, dead.Value, dead.Headers)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	err = k.runUntilStopped(top, engine.Config{AppID: k.prefix + "-fail"})
	var pe *engine.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom!" || !bytes.Contains(pe.Stack, []byte("TestPanicInUserCode")) || !strings.Contains(err.Error(), in+"[0]@1") {
		t.Fatalf("Run returned %v, want a *PanicError for offset 1 with the panicking function in its stack", err)
	}
}

// panicky is a processor that panics in the place it is told to: in Init,
// in Close, or in the callback of ForwardToProduced (which runs on the
// Kafka client's goroutine, where a panic would end the process).
type panicky struct{ where string }

func (p *panicky) Init(*engine.ProcessorContext[string, string]) error {
	if p.where == "init" {
		panic("init boom")
	}
	return nil
}

func (p *panicky) Close() error {
	if p.where == "close" {
		panic("close boom")
	}
	return nil
}

func (p *panicky) Process(ctx *engine.ProcessorContext[string, string], rec engine.Record[string, string]) error {
	return ctx.ForwardToProduced("sink", rec, func(int32, int64) {
		if p.where == "produced" {
			panic("callback boom")
		}
	})
}

// User code that panics where no record is to blame (a processor's Init,
// a ForwardToProduced callback) stops the instance with a *PanicError
// from Run, saying where, instead of ending the process; nothing of the
// interval is committed, so the input is read again by the next instance.
// A panic in Close, at the end, is Run's error too, after the last commit.
func TestPanicOutsideRecords(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	k.produce(in, &kgo.Record{Key: []byte("a"), Value: []byte("x")})
	for _, c := range []struct{ where, says, value string }{
		{"init", "init", "init boom"},
		{"produced", "the callback of ForwardToProduced", "callback boom"},
		{"close", "", "close boom"},
	} {
		t.Run(c.where, func(t *testing.T) {
			b := engine.NewBuilder()
			s := engine.Process(engine.NewStream(b, in, serde.String, serde.String), func() engine.Processor[string, string, string, string] {
				return &panicky{where: c.where}
			})
			s.Filter(func(string, string) bool { return true }, engine.Named("sink")).To(out)
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			group := k.prefix + "-" + c.where
			if c.where == "close" {
				a := k.start(top, engine.Config{AppID: group})
				await.Until(t, 60*time.Second, "the input committed", func() bool { return k.committed(group, in) == 1 })
				err := a.stop()
				var pe *engine.PanicError
				if !errors.As(err, &pe) || pe.Value != c.value {
					t.Fatalf("Close returned %v, want a *PanicError %q", err, c.value)
				}
				return
			}
			err = k.runUntilStopped(top, engine.Config{AppID: group})
			var pe *engine.PanicError
			if !errors.As(err, &pe) || pe.Value != c.value || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Run returned %v, want a *PanicError %q saying %q", err, c.value, c.says)
			}
			if at := k.committed(group, in); at > 0 {
				t.Errorf("the input committed at %d, want nothing committed", at)
			}
		})
	}
}
