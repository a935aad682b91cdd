package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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

type partQueue struct {
	recs []*kgo.Record
	head int
	// headTime is the event time of recs[head], once looked up (headSet).
	headTime int64
	headSet  bool
	hwm      int64 // the high watermark of the last fetch
	lso      int64 // the last stable offset of the last fetch
	next     int64 // the offset after the last record enqueued
	paused   bool  // its fetching is paused (backpressure, restoring)
	// gaveUp: records known to be on the broker were waited for in vain
	// (behind); not again until records arrive.
	gaveUp bool
	// endAtAssign is the partition's end offset when the task was
	// assigned (-1: unknown); seen: records of it have arrived since.
	// boot: 0 undecided, 1 waiting for its first records, 2 not waiting.
	endAtAssign int64
	seen        bool
	boot        uint8
	tp          topicPartition
	// consumed is the offset after the last record processed since the last
	// commit, or -1.
	consumed int64
	// processed is the offset after the last record processed (or
	// committed, at the start), or -1.
	processed int64
	// metaRead: the commit's metadata was looked up (positions.go).
	metaRead bool
	src      *topo.Source // the task's source of the partition's topic
	// Per-topic values made once rather than per record.
	spanName  string
	topicAttr metric.MeasurementOption
}

func (q *partQueue) len() int { return len(q.recs) - q.head }

func (q *partQueue) peek() *kgo.Record { return q.recs[q.head] }

// eventTime is the head's event time as its source gives it.
func (q *partQueue) eventTime() int64 {
	if !q.headSet {
		rec := q.peek()
		if q.src == nil || q.src.RecordTimed() || (rec.Value == nil && isMarker(rec)) {
			q.headTime = rec.Timestamp.UnixMilli()
		} else {
			q.headTime = q.src.EventTime(topo.Input{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp.UnixMilli()})
		}
		q.headSet = true
	}
	return q.headTime
}

func (q *partQueue) pop() *kgo.Record {
	q.headSet = false
	rec := q.recs[q.head]
	q.recs[q.head] = nil
	q.head++
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
	}
	return rec
}

func (t *rtask) enqueue(fp kgo.FetchTopicPartition) {
	q := t.queues[topicPartition{fp.Topic, fp.Partition}]
	if q == nil {
		return
	}
	q.hwm, q.lso = fp.HighWatermark, fp.LastStableOffset
	if len(fp.Records) > 0 {
		t.startStreamTime()
		q.seen, q.gaveUp = true, false
	}
	for _, rec := range fp.Records {
		q.recs = append(q.recs, rec)
		q.next = rec.Offset + 1
		t.buffered++
	}
}

func (t *rtask) hasPunctuation(now time.Time) bool {
	return now.Sub(t.lastPunc) >= 10*time.Millisecond
}

// next picks the record to process: the head with the smallest event time
// (as its source gives it: a source with a timestamp function decodes the
// head to tell). If an input partition is empty although the broker has
// more for it, the task waits up to MaxTaskIdle for it, so that records are
// processed in event-time order across partitions.
func (t *rtask) next(now time.Time) (*kgo.Record, *partQueue) {
	var best *partQueue
	waiting, booting := false, false
	for _, q := range t.qs {
		if q.len() == 0 {
			if q.hwm > q.next && t.r.cfg.MaxTaskIdle > 0 {
				waiting = true
			}
			if len(t.qs) > 1 && (t.bootstrapping(q) || t.behind(q)) {
				booting = true
			}
			continue
		}
		// Only a choice between heads needs their event times.
		if best == nil || q.eventTime() < best.eventTime() {
			best = q
		}
	}
	if best == nil {
		return nil, nil
	}
	if booting {
		if t.bootSince.IsZero() {
			t.bootSince = now
		}
		if now.Sub(t.bootSince) < bootstrapWait {
			return nil, nil
		}
		t.r.log.Warn("a task's partition known to have records sent none; processing the others", "task", t.id.String(), "waited", bootstrapWait)
		for _, q := range t.qs {
			q.boot = 2
			if q.len() == 0 {
				q.gaveUp = true
			}
		}
	}
	t.bootSince = time.Time{}
	if waiting {
		if t.idleSince.IsZero() {
			t.idleSince = now
		}
		if now.Sub(t.idleSince) < t.r.cfg.MaxTaskIdle {
			return nil, nil
		}
	}
	t.idleSince = time.Time{}
	return best.pop(), best
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

// decodeError marks an error the decode hook already handled.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

func (t *rtask) onDecodeError(in topo.Input, err error) error {
	r := t.r
	switch r.cfg.OnDecodeError {
	case Skip:
		r.log.Warn("skipped a record that cannot be decoded", "topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "err", err)
		r.m.dropped(context.Background(), "decode")
		return nil
	case DeadLetter:
		r.m.dropped(context.Background(), "decode")
		return t.deadLetter(in.Topic, in.Partition, in.Offset, in.Key, in.Value, in.Timestamp, in.Headers, "decode", err)
	}
	return &decodeError{err}
}

func (t *rtask) handleProcessError(ctx context.Context, rec *kgo.Record, err error) error {
	r := t.r
	where := []any{"task", t.id.String(), "err", err}
	if rec != nil {
		where = append(where, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
	}
	switch r.cfg.OnProcessError {
	case Skip:
		r.log.Warn("skipped a record whose processing failed", where...)
		r.m.dropped(ctx, "process")
		return nil
	case DeadLetter:
		r.m.dropped(ctx, "process")
		if rec == nil {
			return fmt.Errorf("engine: task %s: punctuation: %w", t.id, err)
		}
		return t.deadLetter(rec.Topic, rec.Partition, rec.Offset, rec.Key, rec.Value, rec.Timestamp.UnixMilli(), nil, "process", err)
	}
	if rec != nil {
		return fmt.Errorf("engine: task %s: %s[%d]@%d: %w", t.id, rec.Topic, rec.Partition, rec.Offset, err)
	}
	return fmt.Errorf("engine: task %s: %w", t.id, err)
}

func (t *rtask) deadLetter(topic string, partition int32, offset int64, key, value []byte, ts int64, headers []topo.Header, stage string, err error) error {
	hs := append(slices.Clone(headers),
		topo.Header{Key: HeaderError, Value: []byte(err.Error())},
		topo.Header{Key: HeaderTopic, Value: []byte(topic)},
		topo.Header{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(partition)))},
		topo.Header{Key: HeaderOffset, Value: []byte(strconv.FormatInt(offset, 10))},
		topo.Header{Key: HeaderStage, Value: []byte(stage)},
	)
	t.r.log.Warn("dead-lettered a record", "topic", topic, "partition", partition, "offset", offset, "stage", stage, "err", err)
	return t.out.Send(topo.Output{Topic: t.r.cfg.DeadLetterTopic, Partition: 0, Key: key, Value: value, Timestamp: ts, Headers: hs})
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

// onAssigned creates the tasks of the newly assigned partitions (the
// balancer is cooperative: franz-go passes what was added); their state is
// restored by the loop before they process anything.
func (r *Runtime) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.balancer.Current()
	r.owned = addParts(r.owned, assigned)
	ids := r.tasksOf(r.owned)
	// Standbys first: one that became active must have checkpointed what it
	// applied before the active task plans its restore.
	if err := r.restorer.syncStandbys(cur.Standby); err != nil {
		r.fail(err)
		return
	}
	for id := range ids {
		if r.tasks[id] != nil {
			continue
		}
		if err := r.openTask(id); err != nil {
			r.fail(err)
			return
		}
	}
	r.noteAssignEnds(ctx, ids)
	r.reassigned = true
	r.log.Info("assigned", "generation", cur.Generation, "tasks", taskList(ids))
}

func taskList(ids map[topo.TaskID]bool) []string {
	var s []string
	for id := range ids {
		s = append(s, id.String())
	}
	slices.Sort(s)
	return s
}

// refOf maps a real topic name back to the graph's reference.
func (r *Runtime) refOf(topic string) topo.TopicRef {
	if p := r.cfg.Group + "-"; len(topic) > len(p) && topic[:len(p)] == p {
		ref := topo.TopicRef{Name: topic[len(p):], Internal: true}
		if r.topo.SubFor(ref) != nil {
			return ref
		}
	}
	return topo.TopicRef{Name: topic}
}

func (r *Runtime) openTask(id topo.TaskID) error {
	var sub *topo.SubTopology
	for _, s := range r.topo.Subs {
		if s.ID == id.Sub {
			sub = s
		}
	}
	if sub == nil {
		return fmt.Errorf("engine: assigned task %s of an unknown sub-topology", id)
	}
	t := &rtask{r: r, id: id, sub: sub, queues: map[topicPartition]*partQueue{}}
	t.out = newCollector(r, t)
	t.st = r.db.Task()
	mem := map[string]*topo.MemStore{}
	for _, spec := range sub.Stores {
		if spec.Logged {
			t.logged = append(t.logged, loggedStore{store: spec.Name, changelog: r.plan.name(topo.TopicRef{Name: topo.ChangelogTopic(spec.Name), Internal: true}), inMemory: spec.InMemory})
		}
	}
	var cacheBytes int64
	if r.cfg.CacheBytes > 0 {
		n := int64(len(r.balancer.Current().Active))
		cacheBytes = r.cfg.CacheBytes / max(n, 1)
	}
	// Opening the task runs the processors' Init: user code (a panic in it
	// is a *PanicError).
	task, err := topo.NewTask(topo.TaskConfig{
		ID:        id,
		Topology:  r.topo,
		Sub:       sub,
		TopicName: r.plan.name,
		OpenStore: func(spec *topo.StoreSpec, id topo.TaskID) (topo.KVStore, error) {
			if spec.Global {
				// A global table's store, to read: the global task keeps it
				// (in pebble whatever its options) and commits each update
				// before the tasks process anything.
				return t.st.OpenStore(spec, topo.TaskID{Sub: id.Sub, Partition: globalPartition})
			}
			if spec.InMemory {
				m := topo.NewMemStore(spec.Name)
				mem[spec.Name] = m
				return m, nil
			}
			return t.st.OpenStore(spec, id)
		},
		Collector:     t.out,
		Now:           r.cfg.Now,
		Logger:        r.log,
		CacheBytes:    cacheBytes,
		OnDecodeError: func(in topo.Input, err error) error { return t.onDecodeError(in, err) },
		OnLate: func(reason string) error {
			rec := t.cur
			if !r.cfg.DeadLetterLate || rec == nil {
				return nil
			}
			var hs []topo.Header
			for _, h := range rec.Headers {
				hs = append(hs, topo.Header{Key: h.Key, Value: h.Value})
			}
			return t.deadLetter(rec.Topic, rec.Partition, rec.Offset, rec.Key, rec.Value, rec.Timestamp.UnixMilli(), hs, "late", errors.New(reason))
		},
		OnSkip: func(reason string) {
			// Decode errors are counted where their policy is applied.
			if reason != "decode-error" {
				r.m.dropped(context.Background(), reason)
			}
		},
	})
	if err != nil {
		r.noteIfPanic(err, "task "+id.String())
		t.st.Close()
		return err
	}
	t.t = task
	t.lastPunc = r.cfg.Now()
	for ref := range sub.Sources {
		tp := topicPartition{r.plan.name(ref), id.Partition}
		if task.Source(tp.topic) == nil {
			t.st.Close()
			r.closeTask(task)
			return fmt.Errorf("engine: task %s has no source for topic %s", id, tp.topic)
		}
	}
	for ref := range sub.Sources {
		tp := topicPartition{r.plan.name(ref), id.Partition}
		q := &partQueue{consumed: -1, processed: -1, src: task.Source(tp.topic), spanName: "oxbow process " + tp.topic, topicAttr: metric.WithAttributeSet(attribute.NewSet(attribute.String("topic", tp.topic))),
			endAtAssign: -1, tp: tp}
		t.queues[tp] = q
		t.qs = append(t.qs, q)
		r.byPart[tp] = t
	}
	r.tasks[id] = t
	return r.restorer.add(t, mem)
}

// onRevoked commits every task and closes the revoked ones: a cooperative
// rebalance revokes only the tasks that move (all of them when the
// instance leaves, or under the eager protocol), and the others go on.
func (r *Runtime) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owned = removeParts(r.owned, revoked)
	gone := r.tasksOf(revoked)
	if len(r.tasks) == 0 || len(gone) == 0 {
		return
	}
	var ids []topo.TaskID
	for id := range r.tasks {
		if gone[id] {
			ids = append(ids, id)
		}
	}
	if r.fatal != nil || r.State() == Failed {
		// The instance is going down with an error: commit nothing, so the
		// failed interval is processed again after a restart.
		for _, t := range r.tasks {
			t.discard()
		}
		r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.commitLocked(cctx); err != nil {
		r.log.Error("commit on revoke", "err", err)
		r.fail(err)
	}
	r.closeTasksLocked(ids)
	r.log.Info("revoked", "tasks", taskList(gone))
}

// tasksOf lists the tasks of partitions.
func (r *Runtime) tasksOf(parts map[string][]int32) map[topo.TaskID]bool {
	ids := map[topo.TaskID]bool{}
	for topic, ps := range parts {
		sub := r.topo.SubFor(r.refOf(topic))
		if sub == nil {
			continue
		}
		for _, p := range ps {
			ids[topo.TaskID{Sub: sub.ID, Partition: p}] = true
		}
	}
	return ids
}

// addParts returns to with the partitions of add added.
func addParts(to, add map[string][]int32) map[string][]int32 {
	if to == nil {
		to = map[string][]int32{}
	}
	for topic, ps := range add {
		for _, p := range ps {
			if !slices.Contains(to[topic], p) {
				to[topic] = append(to[topic], p)
			}
		}
	}
	return to
}

// removeParts returns from without the partitions of rm.
func removeParts(from, rm map[string][]int32) map[string][]int32 {
	for topic, ps := range rm {
		from[topic] = slices.DeleteFunc(from[topic], func(p int32) bool { return slices.Contains(ps, p) })
		if len(from[topic]) == 0 {
			delete(from, topic)
		}
	}
	return from
}

// onLost drops every task without committing: another member may own them
// already.
func (r *Runtime) onLost(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log.Warn("partitions lost; dropping uncommitted work", "tasks", len(r.tasks))
	r.owned = nil // franz-go loses everything at once
	// Records not sent yet would land after the new owner restored: drop
	// them. (Records already in flight cannot be called back; only
	// exactly-once fences such a zombie completely.)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := r.cl.AbortBufferedRecords(actx); err != nil {
		r.log.Warn("abort buffered records", "err", err)
	}
	cancel()
	var ids []topo.TaskID
	for id, t := range r.tasks {
		t.discard()
		ids = append(ids, id)
	}
	r.closeTasksLocked(ids)
}

func (r *Runtime) closeTasksLocked(ids []topo.TaskID) {
	for _, id := range ids {
		t := r.tasks[id]
		if t == nil {
			continue
		}
		r.restorer.remove(t)
		r.posMu.Lock()
		for tp := range t.queues {
			delete(r.byPart, tp)
			delete(r.positions, tp)
		}
		for _, spec := range t.sub.Stores {
			delete(r.storePos[spec.Name], id.Partition)
		}
		r.posMu.Unlock()
		resume := map[string][]int32{}
		for tp, q := range t.queues {
			if q.paused {
				resume[tp.topic] = append(resume[tp.topic], tp.partition)
			}
		}
		if len(resume) > 0 {
			r.cl.ResumeFetchPartitions(resume)
		}
		if r.skippedClosed == nil {
			r.skippedClosed = map[string]int64{}
		}
		for k, v := range t.skippedAtCommit {
			r.skippedClosed[k] += v
		}
		r.closeTask(t.t)
		t.st.Close()
		delete(r.tasks, id)
	}
}

// closeTask closes a task: its processors' Close (user code) and its
// stores. A processor's Close that panicked fails the instance (its error
// a *PanicError); another error is logged.
func (r *Runtime) closeTask(t *topo.Task) {
	err := t.Close()
	if err == nil {
		return
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		r.notePanic(pe, "task "+t.ID().String()+": closing")
		r.fail(err)
		return
	}
	r.log.Warn("close task", "task", t.ID().String(), "err", err)
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

// collector sends a task's output records and remembers, for each changelog
// partition, the offset after the last record Kafka acknowledged, and the
// first production error since the last commit.
type collector struct {
	r       *Runtime
	t       *rtask
	span    trace.SpanContext
	rr      uint32
	promise func(*kgo.Record, error)
	// slab hands out the records Send produces, one allocation for
	// recordSlab of them instead of one each; a slab lives until franz-go
	// has acknowledged all its records. (A sync.Pool measured slower: the
	// records are put back on franz-go's goroutines and taken on the
	// workers'.) Only the task's goroutine sends.
	slab []kgo.Record
	// lastTopic and lastN memoize the partition count of the topic sent to
	// last.
	lastTopic string
	lastN     int32

	// sent counts the records produced since the last commit (only the
	// task's worker sends; the commit reads and resets it between rounds).
	sent int64

	mu       sync.Mutex
	logEnd   map[topicPartition]int64
	err      error
	internal bool // err concerns an internal topic
	inflight sync.WaitGroup
}

func newCollector(r *Runtime, t *rtask) *collector {
	c := &collector{r: r, t: t, logEnd: map[topicPartition]int64{}}
	c.promise = c.produced
	return c
}

// Send produces a record, or a copy of it to each partition its sink's
// partitioner chose; it implements topo.Collector.
func (c *collector) Send(out topo.Output) error {
	p := out.Partition
	if p == topo.AnyPartition {
		n := c.lastN
		if out.Topic != c.lastTopic {
			n = c.r.plan.partitions[out.Topic]
			c.lastTopic, c.lastN = out.Topic, n
		}
		if n == 0 {
			return fmt.Errorf("engine: no partition count known for topic %s", out.Topic)
		}
		if out.Partitions != nil {
			ps, err := out.Targets(n)
			if err != nil {
				return err
			}
			if len(ps) > 0 {
				c.multicast(out, ps)
				return nil
			}
		}
		if out.Key != nil {
			p = partitionFor(out.Key, n)
		} else {
			c.rr++
			p = int32(c.rr % uint32(n))
		}
	}
	c.produce(out, p)
	return nil
}

// multicast produces a copy of out to each of the partitions its
// partitioner chose; only the first copy reports to out.Produced, which
// expects one call.
func (c *collector) multicast(out topo.Output, ps []int32) {
	for i, p := range ps {
		if i == 1 {
			out.Produced = nil
		}
		c.produce(out, p)
	}
}

// produce produces out to partition p.
func (c *collector) produce(out topo.Output, p int32) {
	if len(c.slab) == 0 {
		c.slab = make([]kgo.Record, recordSlab)
	}
	rec := &c.slab[0]
	c.slab = c.slab[1:]
	*rec = kgo.Record{Topic: out.Topic, Partition: p, Key: out.Key, Value: out.Value, Timestamp: topo.TimeOf(out.Timestamp)}
	if out.Produced != nil {
		rec.Context = context.WithValue(context.Background(), producedKey{}, out.Produced)
	}
	if len(out.Headers) > 0 || c.span.IsValid() {
		hs := slices.Clone(out.Headers)
		if c.span.IsValid() {
			propagator.Inject(trace.ContextWithSpanContext(context.Background(), c.span), headerCarrier{&hs})
		}
		rec.Headers = make([]kgo.RecordHeader, len(hs))
		for i, h := range hs {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	// A record larger than the producer's batch limit (franz-go's default
	// is Kafka's 1 MB) fails on its own, before it can share a batch with
	// others; raising that limit above the broker's makes a too-large
	// record fail its whole batch.
	c.inflight.Add(1)
	c.sent++
	c.r.cl.Produce(context.Background(), rec, c.promise)
}

const recordSlab = 256

// producedKey keys a record's topo.Output.Produced in its context.
type producedKey struct{}

// produced is the promise of every record the collector sends (made once,
// as c.promise, so that producing does not allocate a closure per record).
func (c *collector) produced(rec *kgo.Record, err error) {
	defer c.inflight.Done()
	if err == nil && rec.Context != nil {
		if fn, ok := rec.Context.Value(producedKey{}).(func(int32, int64)); ok {
			c.callProduced(fn, rec)
		}
	}
	if err == nil && !c.isChangelog(rec.Topic) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.err == nil {
			c.err = fmt.Errorf("engine: produce to %s[%d]: %w", rec.Topic, rec.Partition, err)
		}
		// Losing a changelog or repartition record would make state and the
		// topics disagree: no policy skips that.
		c.internal = c.internal || strings.HasPrefix(rec.Topic, c.r.cfg.Group+"-")
		return
	}
	tp := topicPartition{rec.Topic, rec.Partition}
	c.logEnd[tp] = max(c.logEnd[tp], rec.Offset+1)
}

func (c *collector) isChangelog(topic string) bool {
	for _, l := range c.t.logged {
		if l.changelog == topic {
			return true
		}
	}
	return false
}

// callProduced calls the callback of ForwardToProduced: user code, on the
// client's goroutine, where a panic would end the process. It fails the
// commit instead, as a lost record of an internal topic does: no policy
// skips it.
func (c *collector) callProduced(fn func(int32, int64), rec *kgo.Record) {
	defer func() {
		if p := recover(); p != nil {
			where := "task " + c.t.id.String() + ": the callback of ForwardToProduced"
			err := fmt.Errorf("engine: %s: %w", where, c.r.panicked(p, where))
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			c.internal = true
			c.mu.Unlock()
		}
	}()
	fn(rec.Partition, rec.Offset)
}

// takeErr returns and clears the first production error, and whether any
// failed record was for an internal topic.
func (c *collector) takeErr() (err error, internal bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err, internal = c.err, c.internal
	c.err, c.internal = nil, false
	return err, internal
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
