package runtime

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// metrics are the instance's OpenTelemetry instruments. Gauges read values
// the loop publishes once a round, so their callbacks never touch a task.
type metrics struct {
	// enabled: a meter was configured, so per-record measurements are worth
	// their cost.
	enabled bool

	recordsProcessed metric.Int64Counter
	processLatency   metric.Float64Histogram
	commitLatency    metric.Float64Histogram
	recordLateness   metric.Float64Histogram
	droppedRecords   metric.Int64Counter
	restoredRecords  metric.Int64Counter
	panics           metric.Int64Counter
	reconnects       metric.Int64Counter

	restoreRemaining atomic.Int64
	hanging          atomic.Int64 // transactions left open, found and not repaired (stall.go)
	lag              atomic.Pointer[[]partitionLag]
	cacheHits        atomic.Int64
	cacheMisses      atomic.Int64
	workers          atomic.Int64
	// db is the instance's state while it is open, for the gauge of the
	// memory pebble holds.
	db  atomic.Pointer[state.DB]
	reg metric.Registration
}

// close unregisters the gauges' callback.
func (m *metrics) close() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

type partitionLag struct {
	topic     string
	partition int32
	lag       int64
}

// The bucket bounds of the engine's histograms, in seconds, for what each
// measures: a record's processing takes microseconds, a commit
// milliseconds to seconds, lateness anything up to days. (OpenTelemetry's
// default bounds, 0 to 10,000, suit milliseconds: every observation in
// seconds would land in the first bucket.)
var (
	processBuckets  = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	commitBuckets   = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	latenessBuckets = []float64{0.001, 0.01, 0.1, 1, 10, 60, 600, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600}
)

func newMetrics(m metric.Meter, group string) (*metrics, error) {
	x := &metrics{enabled: m != nil}
	if m == nil {
		m = noop.NewMeterProvider().Meter("oxbow")
	}
	var errs [11]error // e11 joins errs[6]
	x.recordsProcessed, errs[0] = m.Int64Counter("oxbow.records.processed", metric.WithDescription("Records processed, by input topic."))
	x.processLatency, errs[1] = m.Float64Histogram("oxbow.process.latency", metric.WithUnit("s"), metric.WithDescription("Time to process one record through its sub-topology."),
		metric.WithExplicitBucketBoundaries(processBuckets...))
	x.commitLatency, errs[2] = m.Float64Histogram("oxbow.commit.latency", metric.WithUnit("s"), metric.WithDescription("Time to commit: flush caches, await produced records, commit offsets, apply state."),
		metric.WithExplicitBucketBoundaries(commitBuckets...))
	x.recordLateness, errs[3] = m.Float64Histogram("oxbow.record.lateness", metric.WithUnit("s"), metric.WithDescription("How far behind its task's stream time a record arrived."),
		metric.WithExplicitBucketBoundaries(latenessBuckets...))
	x.droppedRecords, errs[4] = m.Int64Counter("oxbow.records.dropped", metric.WithDescription("Records skipped or dead-lettered, by reason: decode, process, produce, or \"<node>: <why>\" for a record a node dropped (a late record for a closed window, a tombstone an operation cannot take)."))
	x.restoredRecords, errs[5] = m.Int64Counter("oxbow.restore.records", metric.WithDescription("Changelog records restored into local state."))
	remaining, e6 := m.Int64ObservableGauge("oxbow.restore.remaining", metric.WithDescription("Changelog records left to restore."))
	lag, e7 := m.Int64ObservableGauge("oxbow.consumer.lag", metric.WithDescription("Records between the last one processed and the partition's high watermark."))
	hitRatio, e8 := m.Float64ObservableGauge("oxbow.cache.hit_ratio", metric.WithDescription("Share of record-cache reads answered by the cache."))
	workers, e9 := m.Int64ObservableGauge("oxbow.workers", metric.WithDescription("Goroutines processing the instance's tasks (Config.Workers, or as App.SetWorkers set it)."))
	stateMemory, e11 := m.Int64ObservableGauge("oxbow.state.memory", metric.WithUnit("By"),
		metric.WithDescription("Memory the instance's state store (pebble) has allocated, by part: memtables (writes not yet flushed, the queued ones, and flushed ones still held or kept for reuse) and block_cache; outside the Go heap when built with cgo."))
	x.panics, errs[8] = m.Int64Counter("oxbow.panics", metric.WithDescription("Panics in user code recovered by the engine (each also counts as a processing error)."))
	hangingTxns, e12 := m.Int64ObservableGauge("oxbow.kafka.hanging_transactions", metric.WithUnit("{transaction}"),
		metric.WithDescription("Transactions Kafka left open on the instance's partitions after their coordinator ended them, found while the instance made no progress and not repaired (each also logged at ERROR with its remedy)."))
	x.reconnects, errs[10] = m.Int64Counter("oxbow.kafka.reconnects", metric.WithDescription("Rounds Kafka failed (a broker away, a transaction its coordinator aborted) after which the instance closed its tasks and reconnected."))
	errs[6] = errors.Join(e6, e7, e8, e9, e11, e12)
	if x.enabled && errors.Join(errs[:]...) == nil {
		// Every counter from the start, at zero: a query for a rate or an
		// alert on an increase finds a series before the first event.
		ctx := context.Background()
		x.panics.Add(ctx, 0)
		x.reconnects.Add(ctx, 0)
		x.restoredRecords.Add(ctx, 0)
		for _, reason := range []string{"decode", "process", "produce"} {
			x.droppedRecords.Add(ctx, 0, metric.WithAttributes(attribute.String("reason", reason)))
		}
	}
	groupAttr := attribute.String("group", group)
	memtables := metric.WithAttributes(groupAttr, attribute.String("part", "memtables"))
	blockCache := metric.WithAttributes(groupAttr, attribute.String("part", "block_cache"))
	// One callback, unregistered when the instance stops, so that a process
	// running many instances one after another does not keep them alive.
	x.reg, errs[7] = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(remaining, x.restoreRemaining.Load())
		o.ObserveInt64(workers, x.workers.Load())
		o.ObserveInt64(hangingTxns, x.hanging.Load())
		if l := x.lag.Load(); l != nil {
			for _, p := range *l {
				o.ObserveInt64(lag, p.lag, metric.WithAttributes(attribute.String("topic", p.topic), attribute.Int("partition", int(p.partition))))
			}
		}
		if h, m := x.cacheHits.Load(), x.cacheMisses.Load(); h+m > 0 {
			o.ObserveFloat64(hitRatio, float64(h)/float64(h+m))
		}
		if db := x.db.Load(); db != nil {
			if pm := db.PebbleMetrics(); pm != nil { // nil: closed since
				// The memtables written and queued, and those no longer
				// referenced but still held (by an iterator, or one kept
				// for reuse at the next rotation).
				o.ObserveInt64(stateMemory, int64(pm.MemTable.Size+pm.MemTable.ZombieSize), memtables)
				o.ObserveInt64(stateMemory, pm.BlockCache.Size, blockCache)
			}
		}
		return nil
	}, remaining, lag, hitRatio, workers, stateMemory, hangingTxns)
	return x, errors.Join(errs[:]...)
}

func (m *metrics) processed(ctx context.Context, topic metric.MeasurementOption, d time.Duration) {
	m.recordsProcessed.Add(ctx, 1, topic)
	m.processLatency.Record(ctx, d.Seconds())
}

func (m *metrics) panicked(ctx context.Context) { m.panics.Add(ctx, 1) }

func (m *metrics) recovery(ctx context.Context) { m.reconnects.Add(ctx, 1) }

func (m *metrics) commit(ctx context.Context, d time.Duration) {
	m.commitLatency.Record(ctx, d.Seconds())
}

func (m *metrics) lateness(ctx context.Context, d time.Duration) {
	m.recordLateness.Record(ctx, d.Seconds())
}

func (m *metrics) dropped(ctx context.Context, reason string) {
	m.droppedRecords.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
}

func (m *metrics) restored(ctx context.Context, n int64) { m.restoredRecords.Add(ctx, n) }

// publish records what the gauges report; the loop calls it every round.
func (r *Runtime) publish() {
	var lags []partitionLag
	var hits, misses int64
	skipped := maps.Clone(r.skippedClosed)
	if skipped == nil {
		skipped = map[string]int64{}
	}
	r.publishQueryable()
	nodes := maps.Clone(r.nodesClosed)
	if nodes == nil {
		nodes = map[string]int64{}
	}
	if r.global != nil {
		for _, t := range r.global.tasks {
			t.NodeRecords(nodes)
		}
	}
	for _, t := range r.tasks {
		t.t.NodeRecords(nodes)
		for k, v := range t.t.Skipped() {
			skipped[k] += v
		}
		for tp, q := range t.queues {
			behind := max(q.hwm-q.next, 0)
			if q.markerAfter() {
				behind = 0
			}
			lags = append(lags, partitionLag{tp.topic, tp.partition, behind + int64(q.len())})
		}
		h, m := t.t.CacheStats()
		hits += h
		misses += m
	}
	r.publishPolled()
	r.skipped.Store(&skipped)
	r.nodes.Store(&nodes)
	r.m.lag.Store(&lags)
	r.m.cacheHits.Store(hits)
	r.m.cacheMisses.Store(misses)
	if len(r.restorer.jobs) == 0 {
		r.m.restoreRemaining.Store(0)
	}
}

// publishQueryable records which tasks queries may read: open and restored.
func (r *Runtime) publishQueryable() {
	queryable := map[topo.TaskID]bool{}
	for id, t := range r.tasks {
		if !t.restoring {
			queryable[id] = true
		}
	}
	r.queryable.Store(&queryable)
}
