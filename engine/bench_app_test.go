package engine_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// End-to-end throughput on a broker: a raw franz-go consume→produce loop as
// the baseline (BenchmarkPassthrough), and the engine running a stateless
// topology (BenchmarkStateless) and a count (BenchmarkCount) over the same
// input. Each iteration creates fresh topics, pre-loads the input (six
// partitions) with 500k records — 20k with -short, or -oxbow.bench.records —
// with 100-byte values over 100k keys (a quarter of the records when fewer),
// starts the processor, and times from the moment it owns its partitions
// until the last result is visible on the output topic; then it stops the
// processor and deletes the topics and the group. Every processor commits at
// least once every -oxbow.bench.commit (1s). The figures to compare are
// records/s and ns/record; ns/op is the timed window of one iteration.
// allocs/record, B/record and cpu-ns/record (CPU time, user and system)
// count the whole process in the timed window, the output reader included. Run them together, so that they see the same
// machine:
//
//	KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench 'Passthrough|Stateless|Count' -benchtime=1x -count 3 ./engine/
//
// BenchmarkHoppingCount is the count in 5-minute windows advancing every
// minute, for the ratio to BenchmarkCount (-oxbow.bench.cache sets the
// record cache; windows need more of it than plain counts).
//
// BenchmarkGuarantee compares exactly-once with at-least-once (both
// topologies, commits every 100ms and every second):
//
//	KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench Guarantee -benchtime=1x -count 3 -oxbow.bench.records=1000000 ./engine/
//
// BenchmarkWorkers runs the count and a CPU-heavy map with one worker
// goroutine and with two (the ratio of their records/s is what a second
// worker buys; on a 2-core machine the broker and the reader share the
// cores):
//
//	KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench Workers -benchtime=1x -count 3 ./engine/
//
// CPU profiles split by role with the label oxbow.bench (processor, preload,
// reader): go tool pprof -tagfocus oxbow.bench=processor -top engine.test cpu.prof.
// Without KAFKA_BROKERS (or a registered provider) they run on the embedded
// broker, which is no performance baseline.

var (
	benchRecordsFlag = flag.Int("oxbow.bench.records", 0, "records per iteration of the Kafka benchmarks (default 500000, 20000 with -short)")
	benchCacheFlag   = flag.Int64("oxbow.bench.cache", 0, "record cache bytes of the engine's processors (default the engine's, 10 MiB)")
	benchWorkersFlag = flag.Int("oxbow.bench.workers", 0, "worker goroutines of the engine's processors (default GOMAXPROCS)")
	benchCommitFlag  = flag.Duration("oxbow.bench.commit", time.Second, "commit interval of the processors in the Kafka benchmarks")
)

const (
	benchPartitions = 6
	benchValueLen   = 100
	benchKeys       = 100_000
	// benchDropEvery: the stateless topology's filter drops one record in
	// this many.
	benchDropEvery = 100
)

// benchSize is the number of records per iteration and of distinct keys.
func benchSize() (records, keys int) {
	records = 500_000
	if testing.Short() {
		records = 20_000
	}
	if *benchRecordsFlag > 0 {
		records = *benchRecordsFlag
	}
	return records, min(benchKeys, records/4)
}

// benchEnv is a benchmark's handle on the broker.
type benchEnv struct {
	b       *testing.B
	env     *kafkaenv.Env
	cl      *kgo.Client
	adm     *kadm.Client
	name    string
	records int
	keys    int
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	env := kafkaenv.ForTest(b)
	if !env.Real() {
		b.Log("embedded broker: figures are no performance baseline; set KAFKA_BROKERS")
	}
	var cl *kgo.Client
	var err error
	labelled("preload", func() {
		cl, err = kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	n, k := benchSize()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", "=", "-").Replace(b.Name()))
	return &benchEnv{b: b, env: env, cl: cl, adm: kadm.NewClient(cl), name: name, records: n, keys: k}
}

// benchIter is one iteration's topics, named <prefix>-in and <prefix>-out;
// the prefix is also the group (and the App's id, so its internal topics
// share the prefix).
type benchIter struct {
	e       *benchEnv
	prefix  string
	in, out string
	once    sync.Once
}

func (e *benchEnv) iteration() *benchIter {
	e.b.Helper()
	prefix := fmt.Sprintf("bench-%s-%x", e.name, rand.Uint32())
	it := &benchIter{e: e, prefix: prefix, in: prefix + "-in", out: prefix + "-out"}
	e.b.Cleanup(it.cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range []string{it.in, it.out} {
		resp, err := e.adm.CreateTopic(ctx, benchPartitions, -1, nil, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			e.b.Fatalf("create topic %s: %v", t, err)
		}
	}
	await.NoError(e.b, 30*time.Second, fmt.Sprintf("topics %s, %s: metadata", it.in, it.out), func() error {
		d, err := e.adm.ListTopics(ctx, it.in, it.out)
		if err != nil {
			return err
		}
		if len(d[it.in].Partitions) != benchPartitions || len(d[it.out].Partitions) != benchPartitions || d.Error() != nil {
			return fmt.Errorf("partitions %d and %d, want %d (%v)", len(d[it.in].Partitions), len(d[it.out].Partitions), benchPartitions, d.Error())
		}
		return nil
	})
	return it
}

// cleanup deletes every topic with the iteration's prefix and its group.
func (it *benchIter) cleanup() {
	it.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ts, err := it.e.adm.ListTopics(ctx)
		if err != nil {
			it.e.b.Logf("cleanup: list topics: %v", err)
			return
		}
		var del []string
		for _, t := range ts.Names() {
			if strings.HasPrefix(t, it.prefix+"-") {
				del = append(del, t)
			}
		}
		if _, err := it.e.adm.DeleteTopics(ctx, del...); err != nil {
			it.e.b.Logf("cleanup: delete topics %v: %v", del, err)
		}
		_, _ = it.e.adm.DeleteGroups(ctx, it.prefix)
	})
}

// benchValue is record i's value: 100 bytes, the first byte i mod
// benchDropEvery (the stateless filter drops 0).
func benchValue(i int) []byte {
	v := make([]byte, benchValueLen)
	v[0] = byte(i % benchDropEvery)
	for j := 1; j < len(v); j++ {
		v[j] = 'a' + byte((i+j)%26)
	}
	return v
}

// preload writes the iteration's input: record i has key k<i mod keys>,
// partitioned as Kafka's default partitioner would.
func (it *benchIter) preload() {
	e := it.e
	e.b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var first error
	for i := range e.records {
		key := fmt.Appendf(nil, "k%06d", i%e.keys)
		rec := &kgo.Record{Topic: it.in, Partition: kafkaPartition(key, benchPartitions), Key: key, Value: benchValue(i)}
		e.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first = firstErr(first, err)
				mu.Unlock()
			}
		})
	}
	if err := e.cl.Flush(ctx); err != nil {
		e.b.Fatal(err)
	}
	if first != nil {
		e.b.Fatalf("pre-load %s: %v", it.in, first)
	}
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// labelled runs fn with the profiler label oxbow.bench=role, which the
// goroutines it starts inherit, so that a CPU profile can be split by role:
// go tool pprof -tagfocus oxbow.bench=processor.
func labelled(role string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("oxbow.bench", role), func(context.Context) { fn() })
}

// processor is something running between the input and the output topic.
type processor struct {
	ready <-chan struct{} // closed when it owns its partitions and starts processing
	errc  <-chan error    // Run's result
	stop  func() error
}

// startPassthrough is the baseline: one consumer-group client that
// produces each record it reads to the output topic, partitioned by key,
// and every interval awaits every produced record's ack and commits the
// offsets read — the engine's at-least-once cycle without the engine.
func (it *benchIter) startPassthrough(interval time.Duration) *processor {
	e := it.e
	ready := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.env.Brokers...),
		kgo.ConsumerGroup(it.prefix),
		kgo.ConsumeTopics(it.in),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(1<<20),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(ready) }) }),
	)
	if err != nil {
		e.b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		var mu sync.Mutex
		var perr error
		onAck := func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = firstErr(perr, err)
				mu.Unlock()
			}
		}
		last := time.Now()
		for {
			pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			fs := cl.PollRecords(pctx, 5000)
			pcancel()
			if fs.IsClientClosed() || ctx.Err() != nil {
				cl.AllowRebalance()
				errc <- nil
				return
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					ferr = firstErr(ferr, fmt.Errorf("fetch %s[%d]: %w", t, p, err))
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				cl.Produce(context.Background(), &kgo.Record{Topic: it.out, Partition: kafkaPartition(r.Key, benchPartitions), Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, onAck)
			})
			if ferr == nil && time.Since(last) >= interval {
				last = time.Now()
				ferr = cl.Flush(ctx)
				mu.Lock()
				ferr, perr = firstErr(ferr, perr), nil
				mu.Unlock()
				if ferr == nil {
					ferr = cl.CommitUncommittedOffsets(ctx)
				}
			}
			cl.AllowRebalance()
			if ferr != nil && ctx.Err() == nil {
				errc <- ferr
				return
			}
		}
	}()
	return &processor{ready: ready, errc: errc, stop: func() error {
		cancel()
		cl.Close()
		return nil
	}}
}

// startApp runs the topology in one App instance with guarantee g,
// committing every interval.
func (it *benchIter) startApp(top *engine.Topology, interval time.Duration, g engine.Guarantee) *processor {
	return it.startAppWorkers(top, interval, g, *benchWorkersFlag)
}

// startAppWorkers is startApp with the given number of workers.
func (it *benchIter) startAppWorkers(top *engine.Topology, interval time.Duration, g engine.Guarantee, workers int) *processor {
	e := it.e
	cfg := engine.Config{
		AppID:          it.prefix,
		Brokers:        e.env.Brokers,
		StateDir:       e.b.TempDir(),
		Guarantee:      g,
		CommitInterval: interval,
		Workers:        workers,
		CacheBytes:     *benchCacheFlag,
	}
	if os.Getenv("OXBOW_TEST_LOG") == "" {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := engine.NewApp(top, cfg)
	if err != nil {
		e.b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- a.Run(context.Background()) }()
	return &processor{ready: a.Ready(), errc: errc, stop: a.Close}
}

// outputReader reads the output topic from the start, as the processor
// writes it; read committed, so that it sees an exactly-once processor's
// output when it is committed, as its users would.
type outputReader struct {
	cl *kgo.Client
}

func (it *benchIter) reader() *outputReader {
	var cl *kgo.Client
	var err error
	labelled("reader", func() {
		cl, err = kgo.NewClient(kgo.SeedBrokers(it.e.env.Brokers...), kgo.ConsumeTopics(it.out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	})
	if err != nil {
		it.e.b.Fatal(err)
	}
	return &outputReader{cl: cl}
}

// until polls until done says the output is complete, failing the benchmark
// if the processor stops or the timeout passes; progress describes how far
// it got.
func (o *outputReader) until(b *testing.B, p *processor, timeout time.Duration, each func(*kgo.Record), done func() bool, progress func() string) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		select {
		case err := <-p.errc:
			b.Fatalf("the processor stopped (%v); output so far: %s", err, progress())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("output incomplete after %v: %s", timeout, progress())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := o.cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(each)
	}
}

// benchRun is the common frame: per iteration, fresh topics, pre-load,
// start, time until complete, stop, clean up.
type benchRun struct {
	// interval is the commit interval; 0: -oxbow.bench.commit.
	interval time.Duration
	// start starts the processor of an iteration.
	start func(it *benchIter, interval time.Duration) *processor
	// expect returns the per-record callback and the completion test of an
	// iteration's output.
	expect func(e *benchEnv) (each func(*kgo.Record), done func() bool, progress func() string)
}

func (r benchRun) run(b *testing.B) {
	e := newBenchEnv(b)
	interval := cmp.Or(r.interval, *benchCommitFlag)
	b.ReportAllocs()
	b.StopTimer()
	var elapsed time.Duration
	var mallocs, bytes uint64
	var cpu time.Duration
	var ms runtime.MemStats
	for range b.N {
		it := e.iteration()
		labelled("preload", it.preload)
		out := it.reader()
		var p *processor
		labelled("processor", func() { p = r.start(it, interval) })
		select {
		case <-p.ready:
		case err := <-p.errc:
			b.Fatalf("the processor stopped before it was ready: %v", err)
		case <-time.After(2 * time.Minute):
			b.Fatal("the processor did not get its partitions within 2m")
		}
		each, done, progress := r.expect(e)
		runtime.ReadMemStats(&ms)
		m0, b0 := ms.Mallocs, ms.TotalAlloc
		c0 := processCPU()
		b.StartTimer()
		t0 := time.Now()
		labelled("reader", func() { out.until(b, p, 5*time.Minute, each, done, progress) })
		elapsed += time.Since(t0)
		cpu += processCPU() - c0
		b.StopTimer()
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - m0
		bytes += ms.TotalAlloc - b0
		out.cl.Close()
		if err := p.stop(); err != nil {
			b.Errorf("stop: %v", err)
		}
		it.cleanup()
	}
	n := float64(e.records) * float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/record")
	b.ReportMetric(float64(mallocs)/n, "allocs/record")
	b.ReportMetric(float64(bytes)/n, "B/record")
}

// processCPU is the CPU time (user and system) the test process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countRecords completes when want records have arrived.
func countRecords(want int) (func(*kgo.Record), func() bool, func() string) {
	got := 0
	return func(*kgo.Record) { got++ },
		func() bool { return got >= want },
		func() string { return fmt.Sprintf("%d of %d records", got, want) }
}

// BenchmarkPassthrough is the baseline: raw franz-go reading the input and
// writing every record to the output, at least once.
func BenchmarkPassthrough(b *testing.B) {
	benchRun{
		start: (*benchIter).startPassthrough,
		expect: func(e *benchEnv) (func(*kgo.Record), func() bool, func() string) {
			return countRecords(e.records)
		},
	}.run(b)
}

// statelessTopology filters out one record in benchDropEvery and changes
// one byte of the others.
func statelessTopology(in, out string) *engine.Topology {
	b := engine.NewBuilder()
	s := engine.NewStream(b, in, serde.String, serde.Bytes).
		Filter(func(_ string, v []byte) bool { return v[0] != 0 })
	engine.MapValues(s, func(_ string, v []byte) []byte {
		v[1] ^= 0x20
		return v
	}).To(out)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// BenchmarkStateless runs Filter and MapValues from the input to the output
// in the engine.
func BenchmarkStateless(b *testing.B) {
	benchRun{
		start: func(it *benchIter, interval time.Duration) *processor {
			return it.startApp(statelessTopology(it.in, it.out), interval, engine.AtLeastOnce)
		},
		expect: expectStateless,
	}.run(b)
}

func expectStateless(e *benchEnv) (func(*kgo.Record), func() bool, func() string) {
	kept := e.records - (e.records+benchDropEvery-1)/benchDropEvery
	return countRecords(kept)
}

// countTopology counts the input's records by key, in a pebble store with a
// changelog.
func countTopology(in, out string) *engine.Topology {
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.Bytes).
		GroupByKey().Count(engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// BenchmarkCount counts by key over benchKeys keys (pebble state and
// changelog), timed until every key's final count is on the output. The
// record cache holds the counts until a commit flushes it, so the window
// ends at the first commit after the last input record.
func BenchmarkCount(b *testing.B) {
	benchRun{
		start: func(it *benchIter, interval time.Duration) *processor {
			return it.startApp(countTopology(it.in, it.out), interval, engine.AtLeastOnce)
		},
		expect: expectCount,
	}.run(b)
}

// BenchmarkWorkers runs, with 1 and with 2 worker goroutines, the count
// (whose per-record cost is the engine's own, small beside the client's and
// the broker's) and a stateless map that spends about 20µs of CPU on each
// record (SHA-256 rounds over its value): the work that more workers are
// for.
func BenchmarkWorkers(b *testing.B) {
	for _, top := range []struct {
		name   string
		build  func(in, out string) *engine.Topology
		expect func(e *benchEnv) (func(*kgo.Record), func() bool, func() string)
	}{
		{"count", countTopology, expectCount},
		{"heavy", heavyTopology, func(e *benchEnv) (func(*kgo.Record), func() bool, func() string) { return countRecords(e.records) }},
	} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", top.name, workers), func(b *testing.B) {
				benchRun{
					start: func(it *benchIter, interval time.Duration) *processor {
						return it.startAppWorkers(top.build(it.in, it.out), interval, engine.AtLeastOnce, workers)
					},
					expect: top.expect,
				}.run(b)
			})
		}
	}
}

// heavyTopology maps each value to a SHA-256 digest chained 40 times.
func heavyTopology(in, out string) *engine.Topology {
	b := engine.NewBuilder()
	engine.MapValues(engine.NewStream(b, in, serde.String, serde.Bytes), func(_ string, v []byte) []byte {
		sum := sha256.Sum256(v)
		for range 39 {
			sum = sha256.Sum256(sum[:])
		}
		return sum[:]
	}).To(out)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// expectCount completes when every key's final count has arrived.
func expectCount(e *benchEnv) (func(*kgo.Record), func() bool, func() string) {
	// Each record counts once.
	return latestCountsSumTo(e, int64(e.records), e.keys)
}

// latestCountsSumTo reads output records with Int64 counts and completes
// when the latest count of each key sums to want (and, if keys > 0, there
// are that many keys): since counts only grow, that is when every final
// count has arrived.
func latestCountsSumTo(e *benchEnv, want int64, keys int) (func(*kgo.Record), func() bool, func() string) {
	latest := make(map[string]int64, keys)
	var sum, outputs int64
	var bad error
	each := func(r *kgo.Record) {
		outputs++
		n, err := serde.Int64.Decode(r.Value)
		if err != nil {
			bad = firstErr(bad, fmt.Errorf("%s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err))
			return
		}
		k := string(r.Key)
		sum += n - latest[k]
		latest[k] = n
	}
	done := func() bool {
		if bad != nil {
			e.b.Fatal(bad)
		}
		return sum >= want && (keys == 0 || len(latest) == keys)
	}
	progress := func() string {
		return fmt.Sprintf("%d keys, counts summing to %d of %d, %d output records", len(latest), sum, want, outputs)
	}
	return each, done, progress
}

// BenchmarkGuarantee runs the stateless and the count topologies at least
// once and exactly once, committing every 100ms and every second, for the
// ratio of exactly-once to at-least-once throughput at each interval
// (-oxbow.bench.commit does not apply).
func BenchmarkGuarantee(b *testing.B) {
	for _, top := range []struct {
		name   string
		build  func(in, out string) *engine.Topology
		expect func(*benchEnv) (func(*kgo.Record), func() bool, func() string)
	}{{"stateless", statelessTopology, expectStateless}, {"count", countTopology, expectCount}} {
		for _, interval := range []time.Duration{100 * time.Millisecond, time.Second} {
			for _, g := range []struct {
				name string
				g    engine.Guarantee
			}{{"alos", engine.AtLeastOnce}, {"eos", engine.ExactlyOnce}} {
				b.Run(fmt.Sprintf("%s/commit-%v/%s", top.name, interval, g.name), func(b *testing.B) {
					benchRun{
						interval: interval,
						start: func(it *benchIter, interval time.Duration) *processor {
							return it.startApp(top.build(it.in, it.out), interval, g.g)
						},
						expect: top.expect,
					}.run(b)
				})
			}
		}
	}
}

// hoppingCountTopology counts the input's records by key in 5-minute
// windows advancing every minute: each record updates five windows.
func hoppingCountTopology(in, out string) *engine.Topology {
	b := engine.NewBuilder()
	engine.WindowedCount(engine.NewStream(b, in, serde.String, serde.Bytes).GroupByKey().
		WindowedBy(engine.HoppingWindows(5*time.Minute, time.Minute)), engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// BenchmarkHoppingCount is BenchmarkCount in 5-minute windows advancing
// every minute (five windows per record), for the ratio of windowed to
// plain counting; timed until every window's final count is on the output.
func BenchmarkHoppingCount(b *testing.B) {
	benchRun{
		start: func(it *benchIter, interval time.Duration) *processor {
			return it.startApp(hoppingCountTopology(it.in, it.out), interval, engine.AtLeastOnce)
		},
		expect: func(e *benchEnv) (func(*kgo.Record), func() bool, func() string) {
			// Every record is in exactly five windows.
			return latestCountsSumTo(e, 5*int64(e.records), 0)
		},
	}.run(b)
}
