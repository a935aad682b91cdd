// Command bench measures Oxbow against raw franz-go and against Kafka
// Streams, on one real broker, with the same input and guarantees:
//
//	scripts/services.sh start kafka && eval "$(scripts/services.sh env)"
//	go run ./bench                      # the full run (5M records), written to bench/REPORT.md
//	go run ./bench -smoke               # seconds: the harness works, nothing said of speed
//
// Each engine runs in two configurations (-config defaults|tuned|both):
// defaults, each side as it comes, and aligned-and-tuned, the same producer
// batch size, linger and compression on every side, Kafka Streams with a
// bounded RocksDB and a stated heap, max.poll.records raised (config.go
// names every setting, and so does the report).
//
// It loads a fixed input (keys "k%08d", 100-byte values, event times
// spread over half an hour, 6 partitions) and a table for the join, then
// runs, one after another, for each configuration: the baselines (a
// franz-go consumer that only counts, the read limit; the stateless
// topology's filter and map written by hand with franz-go, the limit for a
// Go program, and with the plain Java clients; Kafka Streams copying every
// record); each Oxbow topology (stateless, count, hopping-window count, stream–table
// join) at least once and exactly once; and each Kafka Streams twin
// (bench/kstreams, built with Maven), with the same commit interval, cache
// size and threads. Every run is a child process, timed from when it says
// it runs (its tasks assigned) to when its group has committed the input's
// end; its CPU seconds and peak RSS come from /proc. Then, started again on
// its state, it gets a paced live input whose end-to-end latency (event
// time to the output being readable) gives p50 and p99. Each run's output
// (both engines') is checked against what a correct engine must give for
// the input, computed here from it (expected.go): a wrong output fails the
// run, smoke or full, so that the figures are of engines that did the work.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "-child" {
		os.Exit(runChild(os.Args[1:]))
	}
	os.Exit(runBench(os.Args[1:]))
}

type benchConfig struct {
	brokers    []string
	records    int
	keys       int
	partitions int32
	valueSize  int
	only       []string
	kstreams   bool
	jar        string
	out        string
	smoke      bool
	liveRate   int
	liveFor    time.Duration
	commitMs   int
	cacheBytes int64
	threads    int
	configs    []engineConfig
	configName string // -config
}

func runBench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c benchConfig
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "the broker (default $KAFKA_BROKERS; none: scripts/services.sh starts one)")
	fs.IntVar(&c.records, "records", 5_000_000, "input records")
	fs.IntVar(&c.keys, "keys", 10_000, "distinct keys")
	partitions := fs.Int("partitions", 6, "input partitions")
	fs.IntVar(&c.valueSize, "value-size", 100, "value bytes")
	only := fs.String("only", "", "comma-separated topologies to run (default all: "+strings.Join(topologyNames, ",")+")")
	fs.BoolVar(&c.kstreams, "kstreams", true, "run the Kafka Streams twins (needs Java 17 and Maven)")
	fs.StringVar(&c.out, "out", "bench/REPORT.md", "the report file (empty: standard output only)")
	fs.BoolVar(&c.smoke, "smoke", false, "a run of seconds that checks the harness (20k records, no report file)")
	fs.IntVar(&c.liveRate, "live-rate", 5000, "records/s of the latency phase")
	fs.DurationVar(&c.liveFor, "live-for", 5*time.Second, "how long the latency phase feeds records")
	fs.IntVar(&c.commitMs, "commit-ms", 1000, "commit interval at least once (exactly once: 100ms, both engines' default)")
	fs.Int64Var(&c.cacheBytes, "cache-bytes", 10<<20, "record cache bytes (both engines; 0: no cache on either)")
	fs.IntVar(&c.threads, "threads", runtime.NumCPU(), "Oxbow workers and Kafka Streams threads")
	fs.StringVar(&c.configName, "config", "both", "the engines' configurations: defaults, tuned (aligned and tuned) or both (-smoke: tuned)")
	batchBytes := fs.Int("tuned-batch-bytes", tunedBatchBytes, "the tuned configuration's producer batch size, every side")
	linger := fs.Duration("tuned-linger", tunedLinger, "the tuned configuration's producer linger, every side")
	compression := fs.String("tuned-compression", tunedCompression, "the tuned configuration's producer compression, every side (none, gzip, snappy, lz4, zstd)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := compressionCodec(*compression); err != nil || *batchBytes <= 0 || *linger < 0 {
		fmt.Fprintf(os.Stderr, "bench: -tuned-batch-bytes must be positive, -tuned-linger not negative, -tuned-compression one of none, gzip, snappy, lz4, zstd\n")
		return 2
	}
	c.partitions = int32(*partitions)
	if c.valueSize < 16 {
		// The expected outputs take each value's first 16 bytes.
		fmt.Fprintln(os.Stderr, "bench: -value-size must be at least 16")
		return 2
	}
	if c.smoke {
		c.records, c.keys, c.liveRate, c.liveFor = 20_000, 500, 1000, time.Second
		if !isFlagSet(fs, "config") {
			// The configuration with more to go wrong (RocksDB bounded,
			// compression); -config both takes twice as long.
			c.configName = "tuned"
		}
		if !isFlagSet(fs, "out") {
			c.out = ""
		}
	}
	var err error
	if c.configs, err = parseConfigs(c.configName, tunedConfig(*batchBytes, *linger, *compression)); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	c.only = topologyNames
	if *only != "" {
		c.only = strings.Split(*only, ",")
	}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.brokers = append(c.brokers, b)
		}
	}
	ctx := context.Background()
	if len(c.brokers) == 0 {
		b, err := startBroker(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		c.brokers = b
	}
	if c.kstreams {
		jar, err := buildKStreams(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		c.jar = jar
	}
	rep, err := bench(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	text := rep.markdown(c)
	fmt.Print(text)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "bench: report written to", c.out)
	}
	if len(rep.mismatches) > 0 {
		fmt.Fprintln(os.Stderr, "bench: wrong outputs:\n  "+strings.Join(rep.mismatches, "\n  "))
		return 1
	}
	return 0
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// repoRoot is the repository's root (the bench runs from it or below).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "services.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the bench from the repository (no scripts/services.sh above the working directory)")
		}
		dir = parent
	}
}

// startBroker starts the repo's Kafka broker and returns its address.
func startBroker(ctx context.Context) ([]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "services.sh")
	cmd := exec.CommandContext(ctx, "bash", script, "start", "kafka")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("starting Kafka with %s: %w", script, err)
	}
	out, err := exec.CommandContext(ctx, "bash", script, "env").Output()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export KAFKA_BROKERS="); ok {
			return strings.Split(v, ","), nil
		}
	}
	return nil, errors.New("scripts/services.sh started no broker")
}

// buildKStreams builds the Kafka Streams twins' jar with Maven, if it is
// missing or older than its sources.
func buildKStreams(ctx context.Context) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	jar := filepath.Join(root, "bench", "kstreams", "target", "oxbow-kstreams-bench.jar")
	if fi, err := os.Stat(jar); err == nil && !newerSources(filepath.Join(root, "bench", "kstreams"), fi.ModTime()) {
		return jar, nil
	}
	fmt.Fprintln(os.Stderr, "bench: building bench/kstreams with Maven")
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-Dmaven.repo.local="+filepath.Join(root, ".cache", "m2"),
		"-f", filepath.Join(root, "bench", "kstreams", "pom.xml"), "package")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building bench/kstreams (mvn package): %w", err)
	}
	return jar, nil
}

// newerSources: the Maven module's pom.xml or a file under its src/
// changed after t.
func newerSources(module string, t time.Time) bool {
	newer := false
	check := func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil && !d.IsDir() && fi.ModTime().After(t) {
			newer = true
		}
		return nil
	}
	_ = filepath.WalkDir(filepath.Join(module, "pom.xml"), check)
	_ = filepath.WalkDir(filepath.Join(module, "src"), check)
	return newer
}

// run is one measured run.
type run struct {
	config                      string // the engines' configuration
	engine, topology, guarantee string
	seconds                     float64
	recordsPerSec               float64
	moved                       moved // records in, out and to changelogs
	cpuSeconds                  float64
	peakRSSMB                   float64
	p50, p99                    time.Duration
	output, group, stateDir     string
	start                       starter
	check                       verdict // its output against the expected
}

type report struct {
	runs       []run
	mismatches []string // runs whose output is wrong
	input      int64
	started    time.Time
}

func bench(ctx context.Context, c benchConfig) (*report, error) {
	rep := &report{started: time.Now()}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	id := strconv.FormatInt(time.Now().Unix(), 36)
	input, table := "oxbench-"+id+"-input", "oxbench-"+id+"-table"
	if err := createTopics(ctx, adm, c.partitions, input, table); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: loading %d records (%d keys, %d-byte values) into %s\n", c.records, c.keys, c.valueSize, input)
	in, err := load(ctx, cl, c, input, table)
	if err != nil {
		return nil, err
	}
	rep.input = int64(c.records)

	// A run's first phase: from its start until its group has committed
	// the inputs' ends, as they were at its start.
	throughput := func(cfg engineConfig, eng, topology, guarantee string, start starter) (run, error) {
		out := fmt.Sprintf("oxbench-%s-%s-%s-%s-%s-out", id, cfg.name, eng, topology, guarantee)
		group := fmt.Sprintf("oxbench-%s-%s-%s-%s-%s", id, cfg.name, eng, topology, guarantee)
		if err := createTopics(ctx, adm, c.partitions, out); err != nil {
			return run{}, err
		}
		dir, err := os.MkdirTemp("", "oxbench-")
		if err != nil {
			return run{}, err
		}
		r := run{config: cfg.name, engine: eng, topology: topology, guarantee: guarantee, output: out, group: group, stateDir: dir, start: start}
		fmt.Fprintf(os.Stderr, "bench: %s: %s %s %s\n", cfg.name, eng, topology, guarantee)
		before, err := written(ctx, c.brokers, group, out)
		if err != nil {
			return r, err
		}
		res, records, err := watch(ctx, adm, start(out, group, dir), group, inputsOf(topology, input, table), nil)
		if err != nil {
			return r, fmt.Errorf("%s %s %s: %w", eng, topology, guarantee, err)
		}
		after, err := written(ctx, c.brokers, group, out)
		if err != nil {
			return r, err
		}
		r.seconds, r.cpuSeconds, r.peakRSSMB = res.elapsed.Seconds(), res.cpu, res.rss
		r.recordsPerSec = float64(records) / res.elapsed.Seconds()
		r.moved = moved{in: records, out: after.out - before.out, changelog: after.changelog - before.changelog}
		fmt.Fprintf(os.Stderr, "bench: %s %s %s: %.1f s, records moved: %d in, %d out, %d to changelogs\n",
			eng, topology, guarantee, r.seconds, r.moved.in, r.moved.out, r.moved.changelog)
		if as := checkedAs(topology); as != "" {
			if r.check, err = checkOutput(ctx, c.brokers, in, as, guarantee, out); err != nil {
				return r, fmt.Errorf("%s %s %s: checking the output: %w", eng, topology, guarantee, err)
			}
			fmt.Fprintf(os.Stderr, "bench: %s %s %s: %d output records, %s\n", eng, topology, guarantee, r.check.records, r.check)
			if r.check.wrong > 0 {
				rep.mismatches = append(rep.mismatches, mismatch(r, r.check))
			}
		}
		return r, nil
	}
	// Its second phase: started again on its state, caught up, fed a paced
	// live input.
	live := func(r *run) error {
		fmt.Fprintf(os.Stderr, "bench: %s %s %s: latency\n", r.engine, r.topology, r.guarantee)
		_, _, err := watch(ctx, adm, r.start(r.output, r.group, r.stateDir), r.group, inputsOf(r.topology, input, table), func() error {
			var err error
			r.p50, r.p99, err = latency(ctx, c, cl, in, input, r.output, r.guarantee == "eos")
			return err
		})
		if err != nil {
			return fmt.Errorf("%s %s %s: latency: %w", r.engine, r.topology, r.guarantee, err)
		}
		return os.RemoveAll(r.stateDir)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	child := func(cfg engineConfig, kind, topology, guarantee string) starter {
		return func(out, group, dir string) *exec.Cmd {
			f := childFlags{kind: kind, topology: topology, guarantee: guarantee, input: input, table: table, output: out, app: group,
				brokers: strings.Join(c.brokers, ","), commitMs: commitMs(c, guarantee), cacheBytes: c.cacheBytes, workers: c.threads, stateDir: dir,
				batchBytes: cfg.batchBytes, lingerMs: cfg.lingerMs(), compression: cfg.compression}
			cmd := exec.Command(self, f.args()...)
			cmd.Env = cfg.goEnv(os.Environ())
			return cmd
		}
	}
	kstreams := func(cfg engineConfig, topology, guarantee string) starter {
		return func(out, group, dir string) *exec.Cmd {
			args := append(slices.Clone(cfg.jvm), "-jar", c.jar, "--brokers", strings.Join(c.brokers, ","), "--app-id", group,
				"--topology", topology, "--input", input, "--output", out, "--guarantee", guarantee,
				"--commit-ms", strconv.Itoa(commitMs(c, guarantee)), "--cache-bytes", strconv.FormatInt(c.cacheBytes, 10),
				"--threads", strconv.Itoa(c.threads), "--state-dir", dir)
			args = append(args, cfg.kstreamsArgs()...)
			if topology == "join" {
				args = append(args, "--table", table)
			}
			return exec.Command("java", args...)
		}
	}

	for _, cfg := range c.configs {
		// The baselines: throughput only, each output checked.
		type baseline struct {
			engine, topology string
			guarantees       []string
			start            func(g string) starter
		}
		baselines := []baseline{
			{"franz-go", "consume", []string{"alos"}, func(g string) starter { return child(cfg, "consume", "consume", g) }},
			{"franz-go", "filter-map", []string{"alos", "eos"}, func(g string) starter { return child(cfg, "filter-map", "filter-map", g) }},
		}
		if c.kstreams {
			baselines = append(baselines,
				baseline{"java-clients", "filter-map", []string{"alos", "eos"}, func(g string) starter { return kstreams(cfg, "client-loop", g) }},
				baseline{"kstreams", "passthrough", []string{"alos", "eos"}, func(g string) starter { return kstreams(cfg, "passthrough", g) }})
		}
		for _, b := range baselines {
			for _, g := range b.guarantees {
				x, err := throughput(cfg, b.engine, b.topology, g, b.start(g))
				if err != nil {
					return nil, err
				}
				_ = os.RemoveAll(x.stateDir)
				rep.runs = append(rep.runs, x)
			}
		}
		for _, topology := range c.only {
			for _, g := range []string{"alos", "eos"} {
				// Both engines' throughput first, on the same input, each
				// output checked; then their latency phases, which add to the
				// input.
				ox, err := throughput(cfg, "oxbow", topology, g, child(cfg, "oxbow", topology, g))
				if err != nil {
					return nil, err
				}
				pair := []*run{&ox}
				if c.kstreams {
					ks, err := throughput(cfg, "kstreams", topology, g, kstreams(cfg, topology, g))
					if err != nil {
						return nil, err
					}
					pair = append(pair, &ks)
				}
				for _, r := range pair {
					if err := live(r); err != nil {
						return nil, err
					}
					rep.runs = append(rep.runs, *r)
				}
			}
		}
	}
	return rep, nil
}

// checkedAs is the topology whose expected output a run's output must be:
// the franz-go and Java client loops do the stateless topology's work; the
// read limit writes nothing.
func checkedAs(topology string) string {
	switch topology {
	case "consume":
		return ""
	case "filter-map":
		return "stateless"
	}
	return topology
}

// starter makes the command of a run, given its output, group and state
// directory.
type starter func(out, group, dir string) *exec.Cmd

func inputsOf(topology, input, table string) []string {
	if topology == "join" {
		return []string{input, table}
	}
	return []string{input}
}

func commitMs(c benchConfig, guarantee string) int {
	if guarantee == "eos" {
		return 100
	}
	return c.commitMs
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) error {
	res, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return err
	}
	return res.Error()
}

// load writes the input: record i has key k(i mod keys), a value whose
// first 8 bytes are i, then letters; event times spread evenly over half an
// hour before now. And the table: one value per key. It returns what it
// wrote.
func load(ctx context.Context, cl *kgo.Client, c benchConfig, input, table string) (*inputModel, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(-30 * time.Minute)
	step := 30 * time.Minute / time.Duration(max(c.records, 1))
	in := &inputModel{keys: c.keys, base: base, step: step, letters: make([]byte, 0, 8*c.records)}
	var mu sync.Mutex
	var firstErr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			firstErr = cmpErr(firstErr, err)
			mu.Unlock()
		}
	}
	for i := range c.records {
		v := make([]byte, c.valueSize)
		binary.BigEndian.PutUint64(v, uint64(i))
		for j := 8; j < len(v); j++ {
			v[j] = byte('a' + rng.IntN(26))
		}
		in.letters = append(in.letters, v[8:16]...)
		cl.Produce(ctx, &kgo.Record{Topic: input, Key: []byte(fmt.Sprintf("k%08d", i%c.keys)), Value: v, Timestamp: base.Add(time.Duration(i) * step)}, done)
	}
	for k := range c.keys {
		key := fmt.Sprintf("k%08d", k)
		// A second before the first input record: both engines process
		// a task's records in timestamp order, and on a tie Kafka Streams
		// may take the stream's first record before the table's (it did:
		// 34,999 of 35,000 joined).
		cl.Produce(ctx, &kgo.Record{Topic: table, Key: []byte(key), Value: []byte("t-" + key), Timestamp: base.Add(-time.Second)}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, err
	}
	return in, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type watched struct {
	elapsed  time.Duration
	cpu, rss float64
}

// watch runs a process until its group has committed the topics' ends as
// they were at its start, then runs then (if any), then stops it (SIGTERM)
// and reads its CPU time and peak RSS. It returns the records between the
// group's commits at the start and those ends.
func watch(ctx context.Context, adm *kadm.Client, cmd *exec.Cmd, group string, topics []string, then func() error) (watched, int64, error) {
	var w watched
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return w, 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 16 << 10}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return w, 0, err
	}
	records := int64(0)
	from, _ := adm.FetchOffsets(ctx, group)
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(0)
		if o, ok := from.Lookup(e.Topic, e.Partition); ok && o.At > 0 {
			at = o.At
		}
		records += max(e.Offset-at, 0)
	})
	if err := cmd.Start(); err != nil {
		return w, 0, err
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
		return w, 0, fmt.Errorf("the process exited before it ran: %v\n%s", err, stderr.String())
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		return w, 0, fmt.Errorf("the process did not say it runs in 5 minutes\n%s", stderr.String())
	}
	var stats procStats
	stop := func() {
		stats, _ = readProc(cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(30 * time.Minute)
	for !caughtUp(ctx, adm, group, ends) {
		select {
		case err := <-exited:
			return w, 0, fmt.Errorf("the process exited: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return w, 0, errors.New("not done in 30 minutes")
		}
	}
	w.elapsed = time.Since(begin)
	if then != nil {
		if err := then(); err != nil {
			stop()
			return w, 0, err
		}
	}
	stop()
	w.cpu, w.rss = stats.cpuSeconds, stats.peakRSSMB
	return w, records, nil
}

// moved counts the records a run moved: those it read, and by end
// offsets, those it wrote to its output and its changelogs. Exactly once,
// the end offsets count the transactions' markers too (one per partition a
// transaction wrote to).
type moved struct{ in, out, changelog int64 }

func (m moved) total() int64 { return m.in + m.out + m.changelog }

// written reads the end offsets of a run's output and of its group's
// changelogs (<group>-<store>-changelog, both engines), summed. It lists the
// topics with a client of its own: a client answers a listing from the
// metadata it fetched in the last 5 s (MetadataMinAge), which may predate
// the changelogs of a short run.
func written(ctx context.Context, brokers []string, group, output string) (moved, error) {
	var m moved
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return m, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return m, err
	}
	names := []string{output}
	for _, t := range topics.Names() {
		if strings.HasPrefix(t, group+"-") && strings.HasSuffix(t, "-changelog") {
			names = append(names, t)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return m, err
	}
	if err := ends.Error(); err != nil {
		return m, fmt.Errorf("end offsets of %v: %w", names, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == output {
			m.out += o.Offset
		} else {
			m.changelog += o.Offset
		}
	})
	return m, nil
}

// caughtUp: the group has committed every partition's end.
func caughtUp(ctx context.Context, adm *kadm.Client, group string, ends kadm.ListedOffsets) bool {
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(e kadm.ListedOffset) {
		o, found := committed.Lookup(e.Topic, e.Partition)
		if e.Offset > 0 && (!found || o.At < e.Offset) {
			ok = false
		}
	})
	return ok
}

// latency feeds the running process records at a steady rate, their event
// time the time they are written, and measures when each output record
// with an event time in that phase is readable (read committed): p50, p99.
func latency(ctx context.Context, c benchConfig, cl *kgo.Client, in *inputModel, topic, output string, eos bool) (time.Duration, time.Duration, error) {
	phase := time.Now()
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(output), kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(phase.UnixMilli())),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return 0, 0, err
	}
	defer rd.Close()
	var mu sync.Mutex
	var lat []time.Duration
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			fs := rd.PollFetches(rctx)
			if rctx.Err() != nil {
				return
			}
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				if !r.Timestamp.Before(phase) {
					mu.Lock()
					lat = append(lat, now.Sub(r.Timestamp))
					mu.Unlock()
				}
			})
		}
	}()
	n := int(c.liveFor.Seconds() * float64(c.liveRate))
	tick := time.NewTicker(time.Second / time.Duration(max(c.liveRate, 1)))
	var produceErr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			produceErr = cmpErr(produceErr, err)
			mu.Unlock()
		}
	}
	for i := range n {
		<-tick.C
		// Numbered on from the input's records, so that the outputs of
		// later runs, which read these too, can be checked.
		k, ts := i%c.keys, time.Now()
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(keyName(k)), Value: in.addLive(k, ts, c.valueSize), Timestamp: ts}, done)
	}
	tick.Stop()
	if err := cl.Flush(ctx); err != nil {
		return 0, 0, err
	}
	mu.Lock()
	err = produceErr
	mu.Unlock()
	if err != nil {
		// The input is no longer what the checks take it to be.
		return 0, 0, fmt.Errorf("writing the live input: %w", err)
	}
	// Outputs follow within a commit interval or so.
	settle := time.Second + time.Duration(commitMs(c, map[bool]string{true: "eos", false: "alos"}[eos]))*time.Millisecond
	time.Sleep(settle)
	cancel()
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, nil
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

type procStats struct{ cpuSeconds, peakRSSMB float64 }

// readProc reads a process's CPU seconds (user + system) and peak RSS.
func readProc(pid int) (procStats, error) {
	var s procStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which is in parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	f := strings.Fields(rest)
	if len(f) > 12 {
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		s.cpuSeconds = (ut + st) / 100 // USER_HZ
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			s.peakRSSMB = kb / 1024
		}
	}
	return s, nil
}

// limited keeps at most n bytes.
type limited struct {
	w interface{ WriteString(string) (int, error) }
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.WriteString(string(p[:k]))
		l.n -= k
	}
	return len(p), nil
}
