package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// rtask is a task as the runtime runs it: the topo.Task, the queues of its
// input partitions, its pending state and what it has consumed and produced
// since the last commit.
type rtask struct {
	r         *Runtime
	id        topo.TaskID
	sub       *topo.SubTopology
	t         *topo.Task
	st        *state.Task
	queues    map[topicPartition]*partQueue
	qs        []*partQueue // the same queues, for the per-record choice
	buffered  int
	restoring bool
	idleSince time.Time // when the task first waited for an empty partition
	bootSince time.Time // when it began to wait for records a partition is known to have

	out      *collector
	logged   []loggedStore
	cur      *kgo.Record // the record being processed
	lastPunc time.Time
	timeSet  bool // the committed stream time was looked up (streamtime.go)

	// derived: per repartition topic read, what it told of each input
	// partition; marked: per repartition topic written, the positions of
	// the last marker (positions.go).
	derived map[string]map[topicPartition]*originSlot
	marked  map[string]map[topicPartition]int64
	// skippedAtCommit is what the task had skipped at its last commit.
	skippedAtCommit map[string]int64
}

type loggedStore struct {
	store     string
	changelog string
	inMemory  bool
}

func (t *rtask) hasPunctuation(now time.Time) bool {
	return now.Sub(t.lastPunc) >= 10*time.Millisecond
}

var propagator = propagation.TraceContext{}

// run processes the task's buffered records and runs its due punctuators.
func (t *rtask) run(ctx context.Context, now time.Time) error {
	for {
		rec, q := t.next(now)
		if rec == nil {
			break
		}
		t.buffered--
		t.cur = rec
		err := t.process(ctx, rec, q)
		t.cur = nil
		if err != nil {
			return err
		}
	}
	t.lastPunc = now
	if err := t.punctuate(now); err != nil {
		return t.handleProcessError(ctx, nil, err)
	}
	return nil
}

// processFrom processes a record in the task's topology; a panic in it
// (in user code) becomes a *PanicError, for the processing error policy.
func (t *rtask) processFrom(src *topo.Source, in topo.Input) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = t.panicked(p)
		}
	}()
	return t.t.ProcessFrom(src, in)
}

// punctuate runs the task's due wall-clock punctuators, a panic becoming
// a *PanicError.
func (t *rtask) punctuate(now time.Time) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = t.panicked(p)
		}
	}()
	return t.t.Punctuate(now)
}

// panicked logs a recovered panic with its stack and returns it as an
// error. The task carries on with its next record: the topology resets
// what it keeps per record when the next one starts.
func (t *rtask) panicked(p any) error {
	return t.r.panicked(p, "task "+t.id.String())
}

func (t *rtask) process(ctx context.Context, rec *kgo.Record, q *partQueue) error {
	r := t.r
	if rec.Key == nil && rec.Value == nil && len(rec.Headers) > 0 {
		if writer, pos, ok := markerOf(rec); ok {
			t.applyMarker(q.tp.topic, writer, pos)
			q.consumed, q.processed = rec.Offset+1, rec.Offset+1
			return nil
		}
	}
	var start time.Time
	if r.m.enabled {
		start = time.Now()
	}
	in := topo.Input{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp.UnixMilli()}
	if len(rec.Headers) > 0 {
		in.Headers = make([]topo.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			in.Headers[i] = topo.Header{Key: h.Key, Value: h.Value}
		}
	}
	pctx := ctx
	var err error
	if r.cfg.Tracing {
		// Continue the producer's trace, if the record carries one. (A
		// copy of the headers: a pointer into in would move in to the
		// heap, for every record.)
		hs := in.Headers
		pctx = propagator.Extract(ctx, headerCarrier{&hs})
		var span trace.Span
		pctx, span = r.cfg.Tracer.Start(pctx, q.spanName, trace.WithSpanKind(trace.SpanKindConsumer))
		t.out.span = span.SpanContext()
		err = t.processFrom(q.src, in)
		span.End()
		t.out.span = trace.SpanContext{}
	} else {
		err = t.processFrom(q.src, in)
	}
	if r.m.enabled {
		r.m.processed(ctx, q.topicAttr, time.Since(start))
		if st, et := t.t.StreamTime(), t.t.EventTime(); err == nil && st != topo.NoTime && st > et {
			r.m.lateness(ctx, time.Duration(st-et)*time.Millisecond)
		}
	}
	if err != nil {
		var de *decodeError
		if errors.As(err, &de) {
			return fmt.Errorf("engine: task %s: %w", t.id, de.err)
		}
		if err := t.handleProcessError(pctx, rec, err); err != nil {
			return err // the record stays uncommitted
		}
	}
	q.consumed, q.processed = rec.Offset+1, rec.Offset+1
	return nil
}

type headerCarrier struct{ hs *[]topo.Header }

func (c headerCarrier) Get(key string) string {
	for _, h := range *c.hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range *c.hs {
		if h.Key == key {
			(*c.hs)[i].Value = []byte(value)
			return
		}
	}
	*c.hs = append(*c.hs, topo.Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(*c.hs))
	for i, h := range *c.hs {
		keys[i] = h.Key
	}
	return keys
}

// Skipped counts the records every task dropped, by reason.
// It reads what the loop published at the end of its last round, so it is
// safe from any goroutine, a state listener included.
func (r *Runtime) Skipped() map[string]int64 {
	if p := r.skipped.Load(); p != nil {
		return maps.Clone(*p)
	}
	return map[string]int64{}
}

// NodeRecords counts, per node, the records that reached it in this
// instance's tasks, those closed since too, as of the end of the loop's
// last round (see topo.Task.NodeRecords). Safe from any goroutine.
func (r *Runtime) NodeRecords() map[string]int64 {
	if p := r.nodes.Load(); p != nil {
		return maps.Clone(*p)
	}
	return map[string]int64{}
}

// discard drops the task's uncommitted state and what the runtime tracks
// with it.
func (t *rtask) discard() {
	t.st.Discard()
	for _, q := range t.queues {
		q.consumed = -1
	}
	t.marked = nil
	t.out.mu.Lock()
	clear(t.out.logEnd)
	t.out.mu.Unlock()
}
