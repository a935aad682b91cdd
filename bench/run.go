package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// run is one measured run: a process's throughput on the input, then
// another's latency on a live input.
type run struct {
	rep, seq                    int    // its repetition, and its place in it
	config                      string // the engines' configuration
	engine, topology, guarantee string
	seconds                     float64 // end to end: from its start to its group's commit of the input's end
	recordsPerSec               float64 // end to end
	moved                       moved   // records in, out and to changelogs, end to end
	steady                      steady  // over the window that excludes start and end
	peakRSSMB                   float64
	lat                         latencies
	check, liveCheck            verdict // its outputs against the expected
}

// steady is what a run did in its steady window: from when its group had
// committed warmFraction of the input to when it had committed endFraction.
type steady struct {
	ok             bool    // the run had such a window (its commits fell in it at least twice)
	seconds        float64 // its length
	moved          moved   // records read (committed), written to the output and to changelogs in it
	cpu, brokerCPU float64 // CPU seconds of the process and of the broker in it; brokerCPU < 0: not measured
}

// The steady window: the input's first warmFraction is the warm-up, and
// its last part, past endFraction, the tail (partitions finishing one by
// one, the last commit interval).
const warmFraction, endFraction = 0.2, 0.9

func (s steady) recordsPerSec() float64 {
	if !s.ok || s.seconds <= 0 {
		return math.NaN()
	}
	return float64(s.moved.in) / s.seconds
}

func (s steady) movedPerSec() float64 {
	if !s.ok || s.seconds <= 0 {
		return math.NaN()
	}
	return float64(s.moved.total()) / s.seconds
}

// latencies are a latency phase's: event time to the output being readable.
type latencies struct {
	p50, p99, p999 time.Duration
	samples        int
}

type report struct {
	runs              []run
	phases            []phaseRun
	mismatches        []string // runs whose output is wrong
	input             int64
	started, finished time.Time
	merged            []string // the results files it was merged from
	revision          string   // the commit this run ran (see revisionOf)
	pin               *pinning
	brokerJVM         string
}

// runner runs the measured processes.
type runner struct {
	c            benchConfig
	adm          *kadm.Client
	cl           *kgo.Client // the loads' producer (adm's client)
	live         *kgo.Client // the latency phases' producer
	id           string
	input, table string
	in           *inputModel
	self         string // this binary, for the Go children
	pin          *pinning
	rep          *report
	filled       *fill // the phases' fill, once made
}

func bench(ctx context.Context, c benchConfig) (*report, error) {
	rep := &report{started: time.Now(), revision: revisionOf(".")}
	rn, cl, err := newRunner(c, rep)
	if err != nil {
		return nil, err
	}
	defer rn.close()
	if err := createTopics(ctx, rn.adm, c.partitions, rn.input, rn.table); err != nil {
		return nil, err
	}
	defer rn.deleteTopics(rn.input, rn.table)
	rn.logf("loading %d records (%d keys, %d-byte values) into %s\n", c.records, c.keys, c.valueSize, rn.input)
	if rn.in, err = load(ctx, cl, c, rn.input, rn.table); err != nil {
		return nil, err
	}
	rep.input = int64(c.records)
	// Pinned once the input is loaded.
	pin, undo := pin(c.brokers, c.pin)
	defer undo()
	rn.pin, rep.pin = pin, pin
	if pin.brokerPID > 0 {
		rep.brokerJVM = jvmFlags(pin.brokerPID)
	}
	rn.logf("%s\n", pin.note)
	results, err := openResults(c.results, c, rep)
	if err != nil {
		return nil, err
	}
	defer results.close()
	defer func() {
		if f := rn.filled; f != nil {
			rn.cleanup(f.group, f.output)
		}
	}()

	// The repetitions, interleaved: each runs every configuration (the
	// order of configurations and of baselines alternating from one to the
	// next), and in each the two engines of a topology and guarantee one
	// after the other, which goes first alternating from one pair to the
	// next and from one repetition to the next.
	for i := c.firstRep; i < c.firstRep+c.reps; i++ {
		configs := slices.Clone(c.configs)
		if i%2 == 1 {
			slices.Reverse(configs)
		}
		seq := 0
		do := func(s spec, latency bool) error {
			x, err := rn.throughput(ctx, s, i)
			if err != nil {
				return err
			}
			if latency && i < c.firstRep+c.latencyReps {
				if x.lat, x.liveCheck, err = rn.latency(ctx, s, i); err != nil {
					return err
				}
			}
			x.rep, x.seq = i, seq
			seq++
			rep.runs = append(rep.runs, x)
			return results.write(toRecord(x))
		}
		for _, cfg := range configs {
			if len(c.only) == 0 {
				break // phases only
			}
			rn.logf("repetition %d (%d of %d), %s\n", i+1, i-c.firstRep+1, c.reps, cfg.name)
			// The baselines: throughput only, each output checked. The
			// smoke leaves out Kafka Streams' passthrough exactly once: the
			// same code as at least once, with the guarantee the twins'
			// exactly-once runs set too.
			baselines := []spec{{cfg, "franz-go", "consume", "alos"}}
			for _, g := range []string{"alos", "eos"} {
				baselines = append(baselines, spec{cfg, "franz-go", "filter-map", g})
				if c.kstreams {
					baselines = append(baselines, spec{cfg, "java-clients", "filter-map", g})
					if !c.smoke || g == "alos" {
						baselines = append(baselines, spec{cfg, "kstreams", "passthrough", g})
					}
				}
			}
			if i%2 == 1 {
				slices.Reverse(baselines)
			}
			for _, s := range baselines {
				if err := do(s, false); err != nil {
					return nil, err
				}
			}
			pair := 0
			for ti, topology := range c.only {
				for gi, g := range []string{"alos", "eos"} {
					engines := []string{"oxbow"}
					// The smoke runs each Kafka Streams twin at one
					// guarantee, at least once and exactly once in turn
					// from one topology to the next: every twin's code and
					// both guarantees once, each output checked.
					if c.kstreams && (!c.smoke || (ti+gi)%2 == 0) {
						engines = append(engines, "kstreams")
						if (i+pair)%2 == 1 {
							slices.Reverse(engines)
						}
					}
					pair++
					for _, eng := range engines {
						if err := do(spec{cfg, eng, topology, g}, true); err != nil {
							return nil, err
						}
					}
				}
			}
		}
		if err := rn.runPhases(ctx, c.phaseSel, i, results); err != nil {
			return nil, err
		}
	}
	rep.finished = time.Now()
	return rep, nil
}

// newRunner connects the runner's clients (cl: the loads' producer); the
// caller pins, and closes the runner.
func newRunner(c benchConfig, rep *report) (*runner, *kgo.Client, error) {
	// A short metadata age: a run's new topics are listed as soon as the
	// broker has them, not 5 s later (franz-go's default MetadataMinAge),
	// which every run used to wait in createTopics.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	// The latency phases' records go out as they come.
	live, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ProducerLinger(0))
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		cl.Close()
		live.Close()
		return nil, nil, err
	}
	id := strconv.FormatInt(time.Now().Unix(), 36)
	return &runner{c: c, adm: kadm.NewClient(cl), cl: cl, live: live, id: id, input: "oxbench-" + id + "-input", table: "oxbench-" + id + "-table",
		self: self, rep: rep}, cl, nil
}

func (rn *runner) close() {
	rn.live.Close()
	rn.cl.Close()
}

// logf logs a line to standard error, with the time since the start.
func (rn *runner) logf(format string, args ...any) {
	d := time.Since(rn.rep.started).Round(time.Second)
	fmt.Fprintf(os.Stderr, "bench: %02d:%02d:%02d "+format, append([]any{int(d.Hours()), int(d.Minutes()) % 60, int(d.Seconds()) % 60}, args...)...)
}

// spec names a run: its configuration, engine (oxbow, kstreams, or a
// baseline's: franz-go, java-clients), topology and guarantee.
type spec struct {
	cfg                         engineConfig
	engine, topology, guarantee string
}

func (s spec) String() string {
	return fmt.Sprintf("%s: %s %s %s", s.cfg.name, s.engine, s.topology, s.guarantee)
}

// name is the run's prefix of topics and groups.
func (rn *runner) name(s spec, phase string, rep int) string {
	return fmt.Sprintf("oxbench-%s-r%d-%s-%s-%s-%s-%s", rn.id, rep, s.cfg.name, s.engine, s.topology, s.guarantee, phase)
}

// command is the process of a run on an input.
func (rn *runner) command(ctx context.Context, s spec, input, output, group, dir string) *exec.Cmd {
	c, cfg := rn.c, s.cfg
	if s.engine == "oxbow" || s.engine == "franz-go" {
		kind := s.topology
		if s.engine == "oxbow" {
			kind = "oxbow"
		}
		f := childFlags{kind: kind, topology: s.topology, guarantee: s.guarantee, input: input, table: rn.table, output: output, app: group,
			brokers: strings.Join(c.brokers, ","), commitMs: commitMs(c, s.guarantee), cacheBytes: c.cacheBytes, memoryBudget: c.memBudget, workers: c.threads, stateDir: dir,
			batchBytes: cfg.batchBytes, lingerMs: cfg.lingerMs(), compression: cfg.compression}
		return rn.pin.command(ctx, cfg.goEnv(os.Environ()), rn.self, f.args()...)
	}
	topology := s.topology
	if s.engine == "java-clients" {
		topology = "client-loop"
	}
	args := append(slices.Clone(cfg.jvm), "-jar", c.jar, "--brokers", strings.Join(c.brokers, ","), "--app-id", group,
		"--topology", topology, "--input", input, "--output", output, "--guarantee", s.guarantee,
		"--commit-ms", strconv.Itoa(commitMs(c, s.guarantee)), "--cache-bytes", strconv.FormatInt(c.cacheBytes, 10),
		"--threads", strconv.Itoa(c.threads), "--state-dir", dir)
	args = append(args, cfg.kstreamsArgs()...)
	if topology == "join" {
		args = append(args, "--table", rn.table)
	}
	return rn.pin.command(ctx, os.Environ(), "java", args...)
}

// throughput runs a process on the input, from its start until its group
// has committed the inputs' ends as they were at its start, and checks its
// output.
func (rn *runner) throughput(ctx context.Context, s spec, rep int) (run, error) {
	c := rn.c
	group := rn.name(s, "tp", rep)
	out := group + "-out"
	r := run{rep: rep, config: s.cfg.name, engine: s.engine, topology: s.topology, guarantee: s.guarantee}
	if err := createTopics(ctx, rn.adm, c.partitions, out); err != nil {
		return r, err
	}
	defer rn.cleanup(group, out)
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	rn.logf("%s (repetition %d)\n", s, rep+1)
	before, err := written(ctx, c.brokers, group, out)
	if err != nil {
		return r, err
	}
	snap := func() (moved, error) { return written(ctx, c.brokers, group, out) }
	res, err := watch(ctx, rn.adm, rn.command(ctx, s, rn.input, out, group, dir), watchOpts{group: group, topics: inputsOf(s.topology, rn.input, rn.table),
		brokerPID: rn.pin.brokerPID, snap: snap, steady: true})
	if err != nil {
		return r, fmt.Errorf("%s: %w", s, err)
	}
	after, err := written(ctx, c.brokers, group, out)
	if err != nil {
		return r, err
	}
	r.seconds, r.peakRSSMB, r.steady = res.elapsed.Seconds(), res.rss, res.steady
	r.recordsPerSec = float64(res.records) / res.elapsed.Seconds()
	r.moved = moved{in: res.records, out: after.out - before.out, changelog: after.changelog - before.changelog}
	rn.logf("%s: %.1f s, records moved: %d in, %d out, %d to changelogs; steady: %s\n",
		s, r.seconds, r.moved.in, r.moved.out, r.moved.changelog, r.steady)
	if as := checkedAs(s.topology); as != "" {
		if r.check, err = checkOutput(ctx, c.brokers, rn.in, as, s.guarantee, out); err != nil {
			return r, fmt.Errorf("%s: checking the output: %w", s, err)
		}
		rn.logf("%s: %d output records, %s\n", s, r.check.records, r.check)
		if r.check.wrong > 0 {
			rn.rep.mismatches = append(rn.rep.mismatches, mismatch(r, "", r.check))
		}
	}
	return r, nil
}

func (s steady) String() string {
	if !s.ok {
		return "no window (the run committed fewer than twice in it)"
	}
	b := "broker –"
	if s.brokerCPU >= 0 {
		b = fmt.Sprintf("broker %.1f CPU s", s.brokerCPU)
	}
	return fmt.Sprintf("%.1f s, %.0f records/s, %.1f CPU s, %s", s.seconds, s.recordsPerSec(), s.cpu, b)
}

// latency starts a process of the run's kind on a new, empty input (its own
// group and state) and, once it runs and has read the join's table, feeds
// it records at c.liveRate: first for c.liveWarmup, not measured (the
// process warms: a JVM compiles its hot paths), then for c.liveFor,
// measured, from each record's event time (the time it is written) to its
// output being readable (read committed). The output is checked against
// the records fed.
func (rn *runner) latency(ctx context.Context, s spec, rep int) (latencies, verdict, error) {
	c := rn.c
	var lat latencies
	var v verdict
	group := rn.name(s, "lat", rep)
	input, out := group+"-in", group+"-out"
	if err := createTopics(ctx, rn.adm, c.partitions, input, out); err != nil {
		return lat, v, err
	}
	defer rn.cleanup(group, input, out)
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return lat, v, err
	}
	defer os.RemoveAll(dir)
	rn.logf("%s: latency\n", s)
	model := &inputModel{keys: c.keys}
	feed := func(ctx context.Context) error {
		var err error
		lat, err = rn.feed(ctx, model, input, out, group)
		return err
	}
	_, err = watch(ctx, rn.adm, rn.command(ctx, s, input, out, group, dir), watchOpts{group: group, topics: inputsOf(s.topology, input, rn.table), then: feed})
	if err != nil {
		return lat, v, fmt.Errorf("%s: latency: %w", s, err)
	}
	rn.logf("%s: latency p50 %s, p99 %s, p99.9 %s (%d samples)\n", s, ms(lat.p50), ms(lat.p99), ms(lat.p999), lat.samples)
	if v, err = checkOutput(ctx, c.brokers, model, checkedAs(s.topology), s.guarantee, out); err != nil {
		return lat, v, fmt.Errorf("%s: checking the latency phase's output: %w", s, err)
	}
	if v.wrong > 0 {
		rn.rep.mismatches = append(rn.rep.mismatches, mismatch(run{rep: rep, config: s.cfg.name, engine: s.engine, topology: s.topology, guarantee: s.guarantee}, "latency phase", v))
	}
	return lat, v, nil
}

// feed writes the latency phase's records, paced, and measures when their
// outputs are readable; it returns once the group has committed them all.
func (rn *runner) feed(ctx context.Context, model *inputModel, input, output, group string) (latencies, error) {
	c := rn.c
	var lat latencies
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(output), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return lat, err
	}
	defer rd.Close()
	var mu sync.Mutex
	var samples []time.Duration
	var measureFrom time.Time // records with earlier event times are the warm-up's
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			fs := rd.PollFetches(rctx)
			if rctx.Err() != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if !measureFrom.IsZero() && !r.Timestamp.Before(measureFrom) {
					samples = append(samples, now.Sub(r.Timestamp))
				}
			})
			mu.Unlock()
		}
	}()
	defer wg.Wait()
	defer cancel()
	var produceErr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			produceErr = cmpErr(produceErr, err)
			mu.Unlock()
		}
	}
	// Paced: at each millisecond, the records due by then.
	rate := max(c.liveRate, 1)
	write := func(d time.Duration) error {
		start, n := time.Now(), int(d.Seconds()*float64(rate))
		for i := 0; i < n; {
			due := min(n, int(time.Since(start).Seconds()*float64(rate))+1)
			for ; i < due; i++ {
				k, ts := model.records()%c.keys, time.Now()
				rn.live.Produce(ctx, &kgo.Record{Topic: input, Key: []byte(keyName(k)), Value: model.addLive(k, ts, c.valueSize), Timestamp: ts}, done)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}
	if err := write(c.liveWarmup); err != nil {
		return lat, err
	}
	mu.Lock()
	measureFrom = time.Now()
	mu.Unlock()
	if err := write(c.liveFor); err != nil {
		return lat, err
	}
	if err := rn.live.Flush(ctx); err != nil {
		return lat, err
	}
	mu.Lock()
	err = produceErr
	mu.Unlock()
	if err != nil {
		return lat, fmt.Errorf("writing the live input: %w", err)
	}
	// Until the group has committed every record fed (its outputs are
	// readable then), and a moment for the reader.
	ends, err := rn.adm.ListEndOffsets(ctx, input)
	if err != nil {
		return lat, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if ok, _ := progress(ctx, rn.adm, group, ends, nil); ok {
			break
		}
		if time.Now().After(deadline) {
			return lat, errors.New("the live input not committed 2 minutes after its end")
		}
		select {
		case <-ctx.Done():
			return lat, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return lat, ctx.Err()
	case <-time.After(500 * time.Millisecond):
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(samples)
	lat.samples = len(samples)
	lat.p50, lat.p99, lat.p999 = quantile(samples, 0.5), quantile(samples, 0.99), quantile(samples, 0.999)
	return lat, nil
}

// quantile is the q-quantile of sorted samples (nearest rank); 0 for none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// cleanup deletes a run's topics, its changelogs and its group.
func (rn *runner) cleanup(group string, topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if listed, err := rn.adm.ListTopics(ctx); err == nil {
		for _, t := range listed.Names() {
			if strings.HasPrefix(t, group+"-") && (strings.HasSuffix(t, "-changelog") || strings.HasSuffix(t, "-repartition")) {
				topics = append(topics, t)
			}
		}
	}
	// Kafka refuses every topic named twice in one request (the restore
	// curve's changelog is both given and listed), and left them behind.
	slices.Sort(topics)
	rn.deleteTopics(slices.Compact(topics)...)
	_, _ = rn.adm.DeleteGroups(ctx, group)
}

func (rn *runner) deleteTopics(topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = rn.adm.DeleteTopics(ctx, topics...)
}

type watchOpts struct {
	group     string
	topics    []string
	steady    bool                  // measure the steady window
	brokerPID int                   // the broker's, for its CPU in the window; 0: none
	snap      func() (moved, error) // the records written so far, read at the window's edges
	then      func(context.Context) error
}

type watched struct {
	elapsed time.Duration
	records int64 // between the group's commits at the start and the topics' ends
	steady  steady
	rss     float64 // peak, MB
}

// watch runs a process until its group has committed the topics' ends as
// they were at its start, then runs then (if any), then stops it (SIGTERM)
// and reads its peak RSS. With steady, it measures the steady window on the
// way: at the first look (every 100 ms) at the group's commits that finds
// warmFraction of the records committed, and at the first that finds
// endFraction, it reads the process's and the broker's CPU seconds and the
// records written.
func watch(ctx context.Context, adm *kadm.Client, cmd *exec.Cmd, o watchOpts) (watched, error) {
	var w watched
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return w, err
	}
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 16 << 10}
	ends, err := adm.ListEndOffsets(ctx, o.topics...)
	if err != nil {
		return w, err
	}
	from, _ := adm.FetchOffsets(ctx, o.group)
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(0)
		if o, ok := from.Lookup(e.Topic, e.Partition); ok && o.At > 0 {
			at = o.At
		}
		w.records += max(e.Offset-at, 0)
	})
	if err := cmd.Start(); err != nil {
		return w, err
	}
	// The clock starts when the process says it runs (Oxbow's READY, Kafka
	// Streams' RUNNING: both once the group has assigned it its tasks), so
	// that start-up — a JVM's seconds — is not counted as processing.
	running := make(chan time.Time, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); l == "READY" || l == "RUNNING" {
				select {
				case running <- time.Now():
				default:
				}
			}
		}
		exited <- cmd.Wait()
	}()
	var begin time.Time
	select {
	case begin = <-running:
	case err := <-exited:
		return w, fmt.Errorf("the process exited before it ran: %v\n%s", err, stderr.String())
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		return w, fmt.Errorf("the process did not say it runs in 5 minutes\n%s", stderr.String())
	case <-ctx.Done():
		<-exited
		return w, ctx.Err()
	}
	pid := cmd.Process.Pid
	var stats procStats
	stop := func() {
		stats, _ = readProc(pid)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	// The steady window's edges.
	type edge struct {
		at             time.Time
		committed      int64
		cpu, brokerCPU float64
		written        moved
	}
	var first, last *edge
	mark := func(committed int64) (*edge, error) {
		e := &edge{at: time.Now(), committed: committed}
		e.cpu, _ = cpuSeconds(pid)
		var err error
		if e.brokerCPU, err = cpuSeconds(o.brokerPID); err != nil {
			e.brokerCPU = -1
		}
		if o.snap != nil {
			if e.written, err = o.snap(); err != nil {
				return nil, err
			}
		}
		return e, nil
	}
	deadline := time.Now().Add(30 * time.Minute)
	for {
		done, committed := progress(ctx, adm, o.group, ends, from)
		if o.steady && w.records > 0 && last == nil {
			var err error
			switch {
			case first == nil && float64(committed) >= endFraction*float64(w.records):
				last = &edge{} // no window: one commit took it past both edges
			case first == nil && float64(committed) >= warmFraction*float64(w.records):
				first, err = mark(committed)
			case first != nil && float64(committed) >= endFraction*float64(w.records):
				last, err = mark(committed)
			}
			if err != nil {
				stop()
				return w, err
			}
		}
		if done {
			break
		}
		select {
		case err := <-exited:
			return w, fmt.Errorf("the process exited: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			stop()
			return w, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return w, errors.New("not done in 30 minutes")
		}
	}
	w.elapsed = time.Since(begin)
	if first != nil && last != nil && last.committed > first.committed {
		w.steady = steady{ok: true, seconds: last.at.Sub(first.at).Seconds(), cpu: last.cpu - first.cpu, brokerCPU: -1,
			moved: moved{in: last.committed - first.committed, out: last.written.out - first.written.out, changelog: last.written.changelog - first.written.changelog}}
		if first.brokerCPU >= 0 && last.brokerCPU >= 0 {
			w.steady.brokerCPU = last.brokerCPU - first.brokerCPU
		}
	}
	if o.then != nil {
		if err := o.then(ctx); err != nil {
			stop()
			return w, err
		}
	}
	stop()
	w.rss = stats.peakRSSMB
	return w, nil
}

// progress: whether the group has committed every partition's end, and
// how many records it has committed past from (nil: from the start), up to
// the ends.
func progress(ctx context.Context, adm *kadm.Client, group string, ends kadm.ListedOffsets, from kadm.OffsetResponses) (bool, int64) {
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false, 0
	}
	ok, n := true, int64(0)
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(0)
		if o, found := from.Lookup(e.Topic, e.Partition); found && o.At > 0 {
			at = o.At
		}
		o, found := committed.Lookup(e.Topic, e.Partition)
		if e.Offset > 0 && (!found || o.At < e.Offset) {
			ok = false
		}
		if found {
			n += max(min(o.At, e.Offset)-at, 0)
		}
	})
	return ok, n
}

// revisionOf names the commit of the work tree at dir, "+changes" when
// tracked files differ from it, or "" when git cannot tell: a merged
// report says which code each of its parts measured.
func revisionOf(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+changes"
	}
	return rev
}
