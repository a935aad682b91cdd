package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// The runtime's telemetry, seen through the public App API with the
// OpenTelemetry SDK: a ManualReader for the metrics, an in-memory span
// recorder for the traces. Every test waits on conditions of what it reads.

// telMetrics reads an instance's metrics on demand.
type telMetrics struct {
	t  *testing.T
	r  *sdkmetric.ManualReader
	mp *sdkmetric.MeterProvider
}

func newTelMetrics(t *testing.T) *telMetrics {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &telMetrics{t: t, r: r, mp: mp}
}

// collect returns every metric by name.
func (m *telMetrics) collect() map[string]metricdata.Metrics {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.r.Collect(context.Background(), &rm); err != nil {
		m.t.Fatalf("collect metrics: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			out[x.Name] = x
		}
	}
	return out
}

// telLabel renders the attributes of a data point as "k=v,k=v".
func telLabel(set attribute.Set) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}

// telInt64s returns the points of an int64 sum or gauge by their attributes;
// nil if the metric is absent or of another kind.
func telInt64s(ms map[string]metricdata.Metrics, name string) map[string]int64 {
	var pts []metricdata.DataPoint[int64]
	switch d := ms[name].Data.(type) {
	case metricdata.Sum[int64]:
		pts = d.DataPoints
	case metricdata.Gauge[int64]:
		pts = d.DataPoints
	default:
		return nil
	}
	out := map[string]int64{}
	for _, p := range pts {
		out[telLabel(p.Attributes)] += p.Value
	}
	return out
}

// telFloat64Gauge returns the points of a float64 gauge by their attributes.
func telFloat64Gauge(ms map[string]metricdata.Metrics, name string) map[string]float64 {
	d, ok := ms[name].Data.(metricdata.Gauge[float64])
	if !ok {
		return nil
	}
	out := map[string]float64{}
	for _, p := range d.DataPoints {
		out[telLabel(p.Attributes)] = p.Value
	}
	return out
}

// telHistogram returns how many observations a float64 histogram holds, and
// their smallest value.
func telHistogram(ms map[string]metricdata.Metrics, name string) (count uint64, minimum float64) {
	d, ok := ms[name].Data.(metricdata.Histogram[float64])
	if !ok {
		return 0, 0
	}
	minimum = math.Inf(1)
	for _, p := range d.DataPoints {
		count += p.Count
		if v, ok := p.Min.Value(); ok {
			minimum = min(minimum, v)
		}
	}
	return count, minimum
}

func telSum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// telWait polls cond until it holds; on timeout it fails with the state
// cond last described.
func telWait(t *testing.T, k *kt, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	await.NoError(t, timeout, what, func() error {
		k.checkApps()
		if ok, state := cond(); !ok {
			return errors.New("last seen: " + state)
		}
		return nil
	})
}

// telReady waits until the instance has run with its state restored.
func telReady(t *testing.T, k *kt, a *app) {
	t.Helper()
	telWait(t, k, 60*time.Second, "the instance to be ready", func() (bool, string) {
		select {
		case <-a.Ready():
			return true, ""
		default:
			return false, a.State().String()
		}
	})
}

// A known input through a count (with a record cache) and a stateless
// branch: records processed per topic, the undecodable record dropped with
// reason "decode", latencies observed, lag per input partition down to 0,
// the cache hit ratio reported.
func TestTelemetryMetrics(t *testing.T) {
	k := newKT(t)
	in1, in2, out1, out2 := k.topic("counted"), k.topic("mapped"), k.topic("counts"), k.topic("upper")
	k.create(2, in1, in2, out1, out2)
	b := engine.NewBuilder()
	engine.NewStream(b, in1, serde.String, serde.Int64).GroupByKey().Count(engine.Materialized("counts")).ToStream().To(out1)
	engine.MapValues(engine.NewStream(b, in2, serde.String, serde.String), func(_ string, v string) string { return strings.ToUpper(v) }).To(out2)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	m := newTelMetrics(t)
	// No periodic commit: the record cache keeps every update until the
	// final commit, so its hits are known exactly.
	a := k.start(top, engine.Config{Version: "v7", MeterProvider: m.mp, OnDeserializationError: engine.Skip, CommitInterval: time.Hour})
	telReady(t, k, a)

	one, _ := serde.Int64.Encode(1)
	var recs1 []*kgo.Record
	for range 5 {
		recs1 = append(recs1, &kgo.Record{Key: []byte("k"), Value: one})
	}
	recs1 = append(recs1, &kgo.Record{Key: []byte("k"), Value: []byte("not an int64")})
	for range 3 {
		recs1 = append(recs1, &kgo.Record{Key: []byte("j"), Value: one})
	}
	var recs2 []*kgo.Record
	for i := range 4 {
		recs2 = append(recs2, &kgo.Record{Key: fmt.Appendf(nil, "w%d", i), Value: []byte("word")})
	}
	k.produce(in1, recs1...)
	k.produce(in2, recs2...)
	wantProcessed := map[string]int64{"topic=" + in1: int64(len(recs1)), "topic=" + in2: int64(len(recs2))}
	// Key k: one miss, then four hits; key j: one miss, two hits.
	const wantHitRatio = 6.0 / 8.0
	var wantLag []string
	for _, topic := range []string{in1, in2} {
		for p := range 2 {
			wantLag = append(wantLag, fmt.Sprintf("partition=%d,topic=%s", p, topic))
		}
	}
	slices.Sort(wantLag)

	telWait(t, k, 60*time.Second, "every record processed, lag 0 on every input partition and the cache hit ratio", func() (bool, string) {
		ms := m.collect()
		processed := telInt64s(ms, "oxbow.records.processed")
		lag := telInt64s(ms, "oxbow.consumer.lag")
		ratio := telFloat64Gauge(ms, "oxbow.cache.hit_ratio")
		state := fmt.Sprintf("processed %v, lag %v, hit ratio %v", processed, lag, ratio)
		for key, n := range wantProcessed {
			if processed[key] < n {
				return false, state
			}
		}
		if !slices.Equal(slices.Sorted(maps.Keys(lag)), wantLag) || telSum(lag) != 0 {
			return false, state
		}
		return len(ratio) > 0 && math.Abs(ratio[""]-wantHitRatio) < 1e-9, state
	})

	ms := m.collect()
	if got := telInt64s(ms, "oxbow.records.processed"); !maps.Equal(got, wantProcessed) {
		t.Errorf("oxbow.records.processed: got %v, want %v", got, wantProcessed)
	}
	// Every counter is there from the start, at zero until it counts.
	if got, want := telInt64s(ms, "oxbow.records.dropped"), map[string]int64{"reason=decode": 1, "reason=process": 0, "reason=produce": 0}; !maps.Equal(got, want) {
		t.Errorf("oxbow.records.dropped: got %v, want %v", got, want)
	}
	for _, name := range []string{"oxbow.panics", "oxbow.kafka.reconnects", "oxbow.restore.records"} {
		if got, want := telInt64s(ms, name), map[string]int64{"": 0}; !maps.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	if n, least := telHistogram(ms, "oxbow.process.latency"); n != uint64(len(recs1)+len(recs2)) || least < 0 {
		t.Errorf("oxbow.process.latency: %d observations (smallest %v), want %d", n, least, len(recs1)+len(recs2))
	}
	// The memory pebble holds for the state, by part, the group named.
	mem := telInt64s(ms, "oxbow.state.memory")
	var parts []string
	for key, v := range mem {
		group, part, _ := strings.Cut(key, ",")
		if group != "group="+k.prefix+"-v7" || v < 0 || part == "part=memtables" && v == 0 {
			t.Errorf("oxbow.state.memory: %s = %d", key, v)
		}
		parts = append(parts, part)
	}
	if slices.Sort(parts); !slices.Equal(parts, []string{"part=block_cache", "part=memtables"}) {
		t.Errorf("oxbow.state.memory: %v, want the memtables and the block cache", mem)
	}
	if got := a.Skipped(); got["decode-error"] != 1 {
		t.Errorf("App.Skipped: %v, want decode-error: 1", got)
	}
	// The instruments' scope names the application and its version: two
	// versions in one process (reprocessing side by side) report apart.
	var rm metricdata.ResourceMetrics
	if err := m.r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if got := telLabel(sm.Scope.Attributes); got != "oxbow.app="+k.prefix+",oxbow.version=v7" {
			t.Errorf("the scope %s has the attributes %s", sm.Scope.Name, got)
		}
	}

	// The final commit flushes the cache and is timed.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	ms = m.collect()
	if n, least := telHistogram(ms, "oxbow.commit.latency"); n == 0 || least < 0 {
		t.Errorf("oxbow.commit.latency: %d observations (smallest %v), want some", n, least)
	}
	// Nothing was processed twice on the way out.
	if got := telInt64s(ms, "oxbow.records.processed"); !maps.Equal(got, wantProcessed) {
		t.Errorf("oxbow.records.processed after stop: got %v, want %v", got, wantProcessed)
	}
}

// An instance restarted with a wiped state directory restores its store from
// the changelog and counts what it restored; it commits periodically and
// times the commits.
func TestTelemetryRestore(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).GroupByKey().Count(engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}

	m1 := newTelMetrics(t)
	a := k.start(top, engine.Config{InstanceID: "first", MeterProvider: m1.mp})
	telReady(t, k, a)
	var recs []*kgo.Record
	want := map[string]int64{}
	for i := range 40 {
		key := fmt.Sprintf("key-%d", i%5)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte("v")})
		want[key]++
	}
	k.produce(in, recs...)
	k.table(out, 60*time.Second, func(got map[string]int64) bool { return maps.Equal(got, want) })
	telWait(t, k, 60*time.Second, "periodic commits to be timed", func() (bool, string) {
		n, _ := telHistogram(m1.collect(), "oxbow.commit.latency")
		return n >= 2, fmt.Sprintf("%d commits", n)
	})
	if got := telSum(telInt64s(m1.collect(), "oxbow.restore.records")); got != 0 {
		t.Errorf("first instance, empty changelog: oxbow.restore.records %d, want 0", got)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// The changelog holds at most end - start records of each partition.
	changelog := a.Group() + "-counts-changelog"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	starts, err := k.adm.ListStartOffsets(ctx, changelog)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := k.adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		t.Fatal(err)
	}
	var logged int64
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(e.Topic, e.Partition)
		logged += e.Offset - s.Offset
	})
	if logged == 0 {
		t.Fatalf("changelog %s is empty", changelog)
	}

	// A new instance with a fresh state directory restores everything.
	m2 := newTelMetrics(t)
	b2 := k.start(top, engine.Config{InstanceID: "second", MeterProvider: m2.mp})
	telReady(t, k, b2)
	telWait(t, k, 60*time.Second, "the restored records to be counted", func() (bool, string) {
		ms := m2.collect()
		restored := telSum(telInt64s(ms, "oxbow.restore.records"))
		remaining := telInt64s(ms, "oxbow.restore.remaining")
		state := fmt.Sprintf("oxbow.restore.records %d, App.RestoredRecords %d, oxbow.restore.remaining %v, changelog records at most %d", restored, b2.RestoredRecords(), remaining, logged)
		return restored > 0 && restored == b2.RestoredRecords() && len(remaining) == 1 && remaining[""] == 0, state
	})
	if got := telSum(telInt64s(m2.collect(), "oxbow.restore.records")); got > logged {
		t.Errorf("oxbow.restore.records %d, but the changelog holds at most %d records", got, logged)
	}
	// What was restored is the state: one more record continues the count.
	k.produce(in, &kgo.Record{Key: []byte("key-0"), Value: []byte("v")})
	want["key-0"]++
	k.table(out, 60*time.Second, func(got map[string]int64) bool { return maps.Equal(got, want) })
}

// telHeaders adapts a Kafka record's headers to a propagation carrier.
type telHeaders struct{ r *kgo.Record }

func (c telHeaders) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c telHeaders) Set(key, value string) {
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c telHeaders) Keys() []string {
	var keys []string
	for _, h := range c.r.Headers {
		keys = append(keys, h.Key)
	}
	return keys
}

// A record produced with a W3C traceparent is processed in a consumer span
// that continues the producer's trace, and the output record carries that
// trace with the processing span as its parent. A record without one starts
// a trace of its own, which its output carries too.
func TestTelemetryTracePropagation(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	b := engine.NewBuilder()
	engine.MapValues(engine.NewStream(b, in, serde.String, serde.String), func(_ string, v string) string { return strings.ToUpper(v) }).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := k.start(top, engine.Config{TracerProvider: tp})
	telReady(t, k, a)

	producer := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	prop := propagation.TraceContext{}
	traced := &kgo.Record{Key: []byte("traced"), Value: []byte("a")}
	prop.Inject(trace.ContextWithSpanContext(context.Background(), producer), telHeaders{traced})
	if (telHeaders{traced}).Get("traceparent") == "" {
		t.Fatal("no traceparent injected")
	}
	k.produce(in, traced, &kgo.Record{Key: []byte("untraced"), Value: []byte("b")})

	outputs := map[string]trace.SpanContext{}
	for _, r := range k.records(out, 2, 60*time.Second) {
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), telHeaders{r}))
		if !sc.IsValid() {
			t.Errorf("output %s has no valid traceparent; headers %v", r.Key, r.Headers)
		}
		outputs[string(r.Key)] = sc
	}

	// The consumer spans end right after processing; wait for both.
	var consumer []sdktrace.ReadOnlySpan
	telWait(t, k, 30*time.Second, "two consumer spans", func() (bool, string) {
		consumer = consumer[:0]
		var names []string
		for _, s := range spans.Ended() {
			names = append(names, s.Name())
			if s.SpanKind() == trace.SpanKindConsumer {
				consumer = append(consumer, s)
			}
		}
		return len(consumer) >= 2, fmt.Sprintf("ended spans %v", names)
	})
	if len(consumer) != 2 {
		t.Fatalf("%d consumer spans, want 2 (one per record)", len(consumer))
	}
	var child, root sdktrace.ReadOnlySpan
	for _, s := range consumer {
		if !strings.Contains(s.Name(), in) {
			t.Errorf("consumer span %q does not name the input topic %s", s.Name(), in)
		}
		if s.SpanContext().TraceID() == producer.TraceID() {
			child = s
		} else {
			root = s
		}
	}
	if child == nil {
		t.Fatalf("no consumer span in the producer's trace %s", producer.TraceID())
	}
	if p := child.Parent(); p.SpanID() != producer.SpanID() || p.TraceID() != producer.TraceID() || !p.IsRemote() {
		t.Errorf("consumer span's parent: %s/%s remote=%v, want the producer's span %s/%s, remote", p.TraceID(), p.SpanID(), p.IsRemote(), producer.TraceID(), producer.SpanID())
	}
	if got := outputs["traced"]; got.TraceID() != producer.TraceID() || got.SpanID() != child.SpanContext().SpanID() {
		t.Errorf("traced output's traceparent: trace %s parent %s, want trace %s parent %s (the consumer span)", got.TraceID(), got.SpanID(), producer.TraceID(), child.SpanContext().SpanID())
	}
	if root == nil {
		t.Fatal("no consumer span for the record without a traceparent")
	}
	if root.Parent().IsValid() {
		t.Errorf("the untraced record's span has a parent: %v", root.Parent())
	}
	if got := outputs["untraced"]; got.TraceID() != root.SpanContext().TraceID() || got.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("untraced output's traceparent: trace %s parent %s, want trace %s parent %s", got.TraceID(), got.SpanID(), root.SpanContext().TraceID(), root.SpanContext().SpanID())
	}
}
