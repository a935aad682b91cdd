package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
)

// childFlags are what a measured process runs with.
type childFlags struct {
	kind, topology, guarantee string
	input, table, output, app string
	brokers                   string
	commitMs                  int
	cacheBytes                int64
	memoryBudget              int64 // engine.Config.MemoryBudget; 0: none
	workers                   int
	stateDir                  string
	// The producers' settings: 0, -1 and "" leave franz-go's defaults.
	batchBytes  int
	lingerMs    int
	compression string
	// The phases' (phases.go): leave the group on a clean stop; print how
	// the instance restored its state; serve the count store over HTTP at
	// this address.
	leave        bool
	restoreStats bool
	serve        string
	// The instances curve's (instances.go): the instance's id (a static
	// member; "": the one kept in the state directory), its standby
	// replicas, and how often it prints a PROGRESS line (0: never).
	instanceID string
	standbys   int
	progressMs int
}

func (c childFlags) args() []string {
	return []string{"-child", c.kind, "-topology", c.topology, "-guarantee", c.guarantee, "-input", c.input, "-table", c.table,
		"-output", c.output, "-app", c.app, "-brokers", c.brokers, "-commit-ms", fmt.Sprint(c.commitMs),
		"-cache-bytes", fmt.Sprint(c.cacheBytes), "-memory-budget", fmt.Sprint(c.memoryBudget), "-workers", fmt.Sprint(c.workers), "-state-dir", c.stateDir,
		"-batch-bytes", fmt.Sprint(c.batchBytes), "-linger-ms", fmt.Sprint(c.lingerMs), "-compression", c.compression,
		"-leave=" + fmt.Sprint(c.leave), "-restore-stats=" + fmt.Sprint(c.restoreStats), "-serve", c.serve,
		"-instance-id", c.instanceID, "-standbys", fmt.Sprint(c.standbys), "-progress-ms", fmt.Sprint(c.progressMs)}
}

// runChild runs a measured process: Oxbow or a franz-go baseline, until
// SIGTERM. It prints READY once it processes.
func runChild(args []string) int {
	fs := flag.NewFlagSet("bench child", flag.ContinueOnError)
	var c childFlags
	fs.StringVar(&c.kind, "child", "", "oxbow, consume, filter-map, changelog or commands")
	fs.StringVar(&c.topology, "topology", "", "")
	fs.StringVar(&c.guarantee, "guarantee", "alos", "")
	fs.StringVar(&c.input, "input", "", "")
	fs.StringVar(&c.table, "table", "", "")
	fs.StringVar(&c.output, "output", "", "")
	fs.StringVar(&c.app, "app", "", "")
	fs.StringVar(&c.brokers, "brokers", "", "")
	fs.IntVar(&c.commitMs, "commit-ms", 1000, "")
	fs.Int64Var(&c.cacheBytes, "cache-bytes", 10<<20, "")
	fs.Int64Var(&c.memoryBudget, "memory-budget", 0, "")
	fs.IntVar(&c.workers, "workers", 2, "")
	fs.StringVar(&c.stateDir, "state-dir", "", "")
	fs.IntVar(&c.batchBytes, "batch-bytes", 0, "")
	fs.IntVar(&c.lingerMs, "linger-ms", -1, "")
	fs.StringVar(&c.compression, "compression", "", "")
	fs.BoolVar(&c.leave, "leave", false, "")
	fs.BoolVar(&c.restoreStats, "restore-stats", false, "")
	fs.StringVar(&c.serve, "serve", "", "")
	fs.StringVar(&c.instanceID, "instance-id", "", "")
	fs.IntVar(&c.standbys, "standbys", 0, "")
	fs.IntVar(&c.progressMs, "progress-ms", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if dir := os.Getenv("OXBOW_BENCH_CPUPROFILE"); dir != "" {
		// Diagnosing: every child writes its CPU profile to dir.
		if f, err := os.CreateTemp(dir, c.kind+"-*.pprof"); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	var err error
	switch c.kind {
	case "oxbow":
		err = runOxbow(ctx, c)
	case "consume":
		err = runConsume(ctx, c)
	case "filter-map":
		err = runFilterMap(ctx, c)
	case "changelog":
		err = runChangelog(ctx, c)
	case "commands":
		err = runCommands(ctx, c)
	default:
		err = fmt.Errorf("no child kind %q", c.kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

func runOxbow(ctx context.Context, c childFlags) error {
	top, err := oxbowTopology(c.topology, c.input, c.table, c.output)
	if err != nil {
		return err
	}
	g := engine.AtLeastOnce
	if c.guarantee == "eos" {
		g = engine.ExactlyOnce
	}
	// -cache-bytes 0 turns the record cache off, as Kafka Streams'
	// statestore.cache.max.bytes=0 does; engine.Config takes 0 for its
	// default (10 MiB) and a negative size for none.
	cacheBytes := c.cacheBytes
	if cacheBytes == 0 {
		cacheBytes = -1
	}
	// The producer settings reach the engine's clients through
	// KafkaOptions, which it passes to every client after its own base
	// options (it sets no producer option of its own).
	popts, err := producerOpts(c.batchBytes, c.lingerMs, c.compression)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	restores := &restoreLog{}
	if c.restoreStats {
		logger = slog.New(&restoreLogHandler{next: logger.Handler(), log: restores})
	}
	app, err := engine.NewApp(top, engine.Config{AppID: c.app, Brokers: strings.Split(c.brokers, ","), Guarantee: g,
		CommitInterval: time.Duration(c.commitMs) * time.Millisecond, CacheBytes: cacheBytes, MemoryBudget: c.memoryBudget, Workers: c.workers, StateDir: c.stateDir,
		KafkaOptions: popts, Logger: logger, LeaveGroupOnClose: c.leave, InstanceID: c.instanceID, StandbyReplicas: c.standbys})
	if err != nil {
		return err
	}
	if c.progressMs > 0 {
		pctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { printProgress(pctx, app, time.Duration(c.progressMs)*time.Millisecond) })
		defer wg.Wait()
		defer cancel()
	}
	start := time.Now()
	done, ended, err := runReady(ctx, app)
	if ended {
		return err
	}
	if c.restoreStats {
		ready := time.Now()
		records, first := restores.get()
		seconds := 0.0
		if !first.IsZero() {
			seconds = ready.Sub(first).Seconds()
		}
		fmt.Printf("RESTORED records=%d logged=%d seconds=%.6f ready=%.6f\n", app.RestoredRecords(), records, seconds, ready.Sub(start).Seconds())
	}
	if c.serve != "" {
		stop, err := serveStore(app, c.topology, c.serve)
		if err != nil {
			return err
		}
		defer stop()
	}
	return <-done
}

// runReady runs app and prints READY once it is ready; it returns what
// will receive Run's error. ended: Run returned first, with err.
func runReady(ctx context.Context, app *engine.App) (done <-chan error, ended bool, err error) {
	ch := make(chan error, 1)
	go func() { ch <- app.Run(ctx) }()
	select {
	case <-app.Ready():
		fmt.Println("READY")
		return ch, false, nil
	case err := <-ch:
		return nil, true, err
	}
}

// runConsume is the read limit: one franz-go consumer that only counts the
// input's records, committing what it read every commit interval and
// whenever its input runs dry.
func runConsume(ctx context.Context, c childFlags) error {
	assigned := make(chan struct{})
	var once sync.Once
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...), kgo.ConsumerGroup(c.app), kgo.ConsumeTopics(c.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) { _ = cl.CommitUncommittedOffsets(ctx) }))
	if err != nil {
		return err
	}
	defer cl.Close()
	go sayReady(ctx, assigned)
	interval := time.Duration(c.commitMs) * time.Millisecond
	var n int64
	last, pending := time.Now(), false
	for {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			cl.AllowRebalance()
			fmt.Fprintf(os.Stderr, "bench child: %d records read\n", n)
			return nil
		}
		if err := fetchErr(fs); err != nil {
			return err
		}
		k := fs.NumRecords()
		n += int64(k)
		pending = pending || k > 0
		if pending && (k == 0 || time.Since(last) >= interval) {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			last, pending = time.Now(), false
		}
		cl.AllowRebalance()
	}
}

// filterMap is the stateless topology's work on one record: nil if the
// record is dropped.
func filterMap(r *kgo.Record) *kgo.Record {
	if len(r.Value) <= 8 || r.Value[8]&1 != 0 {
		return nil
	}
	return &kgo.Record{Partition: r.Partition, Key: r.Key, Value: r.Value[:16:16], Timestamp: r.Timestamp}
}

// runFilterMap is the limit for a Go program: the stateless topology's
// filter and map written with franz-go by hand, as a careful service would,
// with the same parallelism as the engines: c.workers goroutines, each a
// client of one consumer group, which splits the partitions between them.
// At least once each produces without waiting and, every commit interval
// and whenever its input runs dry, flushes and commits the offsets
// consumed (and before giving partitions up). Exactly once each is a
// transactional consume→produce loop (kgo.GroupTransactSession, read
// committed), one transaction per commit interval, the offsets committed
// in it.
func runFilterMap(ctx context.Context, c childFlags) error {
	interval := time.Duration(c.commitMs) * time.Millisecond
	popts, err := producerOpts(c.batchBytes, c.lingerMs, c.compression)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, c.workers)
	ready := make([]chan struct{}, c.workers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range c.workers {
		assigned := make(chan struct{})
		ready[i] = assigned
		var once sync.Once
		opts := append([]kgo.Opt{kgo.SeedBrokers(strings.Split(c.brokers, ",")...), kgo.ConsumerGroup(c.app), kgo.ConsumeTopics(c.input),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.DefaultProduceTopic(c.output),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(1 << 20),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				if len(ps[c.input]) > 0 {
					once.Do(func() { close(assigned) })
				}
			})}, popts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.guarantee == "eos" {
				errs[i] = filterMapEOS(ctx, fmt.Sprintf("%s-%d", c.app, i), interval, opts)
			} else {
				errs[i] = filterMapALOS(ctx, interval, opts)
			}
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	go func() {
		// READY once every goroutine has partitions.
		for _, a := range ready {
			select {
			case <-a:
			case <-ctx.Done():
				return
			}
		}
		fmt.Println("READY")
	}()
	wg.Wait()
	return errors.Join(errs...)
}

func filterMapALOS(ctx context.Context, interval time.Duration, opts []kgo.Opt) error {
	var mu sync.Mutex
	var produceErr error
	onAck := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			produceErr = cmp.Or(produceErr, err)
			mu.Unlock()
		}
	}
	commit := func(ctx context.Context, cl *kgo.Client) error {
		err := cl.Flush(ctx)
		mu.Lock()
		err, produceErr = cmp.Or(err, produceErr), nil
		mu.Unlock()
		if err == nil {
			err = cl.CommitUncommittedOffsets(ctx)
		}
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) { _ = commit(ctx, cl) }))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	last, pending := time.Now(), false
	for {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fs := cl.PollRecords(pctx, 10_000)
		cancel()
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		if err := fetchErr(fs); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if out := filterMap(r); out != nil {
				cl.Produce(ctx, out, onAck)
			}
		})
		k := fs.NumRecords()
		pending = pending || k > 0
		if pending && (k == 0 || time.Since(last) >= interval) {
			if err := commit(ctx, cl); err != nil && ctx.Err() == nil {
				return err
			}
			last, pending = time.Now(), false
		}
		cl.AllowRebalance()
	}
}

func filterMapEOS(ctx context.Context, txid string, interval time.Duration, opts []kgo.Opt) error {
	s, err := kgo.NewGroupTransactSession(append(opts, kgo.TransactionalID(txid), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return err
	}
	defer s.Close()
	for ctx.Err() == nil {
		if err := s.Begin(); err != nil {
			return err
		}
		end := time.Now().Add(interval)
		for time.Now().Before(end) {
			pctx, cancel := context.WithDeadline(ctx, end)
			fs := s.PollRecords(pctx, 10_000)
			cancel()
			if ctx.Err() != nil {
				break
			}
			if err := fetchErr(fs); err != nil {
				return err
			}
			fs.EachRecord(func(r *kgo.Record) {
				if out := filterMap(r); out != nil {
					s.Produce(ctx, out, nil)
				}
			})
		}
		// A shutdown aborts the open transaction: its records are
		// consumed again by the next run.
		commit := kgo.TransactionEndTry(ctx.Err() == nil)
		ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := s.End(ectx, commit)
		cancel()
		if err != nil {
			return fmt.Errorf("ending a transaction: %w", err)
		}
	}
	return nil
}

// sayReady prints READY once the group has assigned partitions.
func sayReady(ctx context.Context, assigned <-chan struct{}) {
	select {
	case <-assigned:
		fmt.Println("READY")
	case <-ctx.Done():
	}
}

func fetchErr(fs kgo.Fetches) error {
	var err error
	fs.EachError(func(t string, p int32, e error) {
		if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) {
			err = cmp.Or(err, fmt.Errorf("fetching %s[%d]: %w", t, p, e))
		}
	})
	return err
}
