// Command bench measures Oxbow against hand-written franz-go and Java
// client loops and against Kafka Streams, on one real broker, with the
// same input and guarantees:
//
//	scripts/services.sh start kafka && eval "$(scripts/services.sh env)"
//	go run ./bench                      # the full run (5M records, 5 repetitions), written to bench/REPORT.md
//	go run ./bench -smoke               # minutes: the harness works, nothing said of speed
//
// A full run takes longer than a working session: run it in parts, each
// keeping its runs in a file, and report them as one:
//
//	go run ./bench -config tuned -reps 2 -results /tmp/part1.jsonl -out ""
//	go run ./bench -config tuned -reps 3 -first-rep 2 -results /tmp/part2.jsonl -out ""
//	go run ./bench -merge /tmp/part1.jsonl,/tmp/part2.jsonl
//
// Each engine runs in two configurations (-config defaults|tuned|both):
// defaults, each side as it comes, and aligned-and-tuned, the same producer
// batch size, linger and compression on every side, Kafka Streams with a
// bounded RocksDB and a stated heap, max.poll.records raised (config.go
// names every setting, and so does the report).
//
// It loads a fixed input (keys "k%08d", 100-byte values, event times
// spread over half an hour, 6 partitions) and a table for the join, then
// runs, -reps times over, interleaved, for each configuration: the
// baselines (a franz-go consumer that only counts, the read limit; the
// stateless topology's filter and map written by hand with franz-go, the
// limit for a Go program, and with the plain Java clients; Kafka Streams
// copying every record); each Oxbow topology (stateless, count,
// hopping-window count, stream–table join) at least once and exactly once,
// and its Kafka Streams twin (bench/kstreams, built with Maven), with the
// same commit interval, cache size and threads, which of the two goes
// first alternating. Every run is a child process, pinned to its own CPUs
// (the broker and the harness to the others) where there are two or more,
// timed from when it says it runs (its tasks assigned) to when its group
// has committed the input's end (end to end), and over a steady window
// that leaves out the first fifth of the input (its warm-up) and the last
// tenth, in which its CPU seconds and the broker's are read from /proc.
// Each engine's latency comes from a second process on a live input paced
// at -live-rate: a warm-up, then -live-for measured (event time to the
// output being readable: p50, p99, p99.9). The report gives each figure's
// median over the repetitions with an order-statistics interval, and
// judges the targets on the intervals (stats.go).
//
// Each run's output (both engines', both phases) is checked against what
// a correct engine must give for the input, computed here from it
// (expected.go): a wrong output fails the run, smoke or full, so that the
// figures are of engines that did the work.
//
// Each repetition then runs three phases of Oxbow alone (phases.go; -only
// names them too): http-read, point reads of a served view from this
// process, open loop (openloop.go) at -http-rates and then a search for
// the highest rate sustained; restore, a fresh instance restoring a store
// from its changelog against a franz-go consumer reading the same
// changelog; commands, the command round trip through an aggregate.Client
// to an exactly-once instance, open loop at -command-rate and then a
// search. Every answer, outcome and final state is checked as the outputs
// are.
//
// With -curves it writes no report but measures how costs grow
// (curves.go): restore time and point-read latency against the store's
// size, throughput and peak RSS against distinct keys and against
// partitions, and against instance processes the group's throughput, a
// join's pause and a task's move with a warm standby and without
// (instances.go), each point -curve-reps times, into bench/curves (points
// as JSON lines, PNG plots, a README of tables):
//
//	go run ./bench -curves restore,keys,partitions,instances
//
// -curves-render redraws the README and plots of -curve-dir from its
// points, measuring nothing.
//
// With -soak DURATION it runs the shoe store for that long on real Kafka
// and PostgreSQL under steady load (soak.go): commands, view reads, a
// change feed, prices changed in the database and captured; it samples the
// store's RSS, heap, goroutines, open files and state on disk every
// -soak-every, fails unless each is flat after -soak-warmup and the views
// agree with the load at the end, and writes the samples, fits and plots
// to -soak-dir (bench/soak: an hour's; CI runs five minutes):
//
//	go run ./bench -soak 1h
//
// The smoke (CI) runs every code path once on a small input: each
// baseline but Kafka Streams' passthrough exactly once, every Oxbow
// topology at both guarantees, each Kafka Streams twin at one (at least
// once and exactly once in turn), latency phases and loads of seconds.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
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
	brokers     []string
	records     int
	keys        int
	partitions  int32
	valueSize   int
	only        []string
	kstreams    bool
	jar         string
	out         string
	smoke       bool
	liveRate    int
	liveFor     time.Duration
	liveWarmup  time.Duration
	pin         bool
	reps        int
	firstRep    int
	latencyReps int
	commitMs    int
	cacheBytes  int64
	memBudget   int64 // Oxbow's MemoryBudget; 0: none
	threads     int
	configs     []engineConfig
	configName  string       // -config
	tuned       engineConfig // the tuned configuration, run or not
	results     string       // -results
	phases      phaseSettings
	phaseSel    map[string]bool // the phases -only selects
}

func runBench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c benchConfig
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "the broker (default $KAFKA_BROKERS; none: scripts/services.sh starts one)")
	fs.IntVar(&c.records, "records", 5_000_000, "input records")
	fs.IntVar(&c.keys, "keys", 10_000, "distinct keys")
	partitions := fs.Int("partitions", 6, "input partitions")
	fs.IntVar(&c.valueSize, "value-size", 100, "value bytes")
	only := fs.String("only", "", "comma-separated topologies and phases to run (default all: "+strings.Join(append(slices.Clone(topologyNames), phaseNames...), ",")+
		"); the baselines run with any topology; "+strings.Join(windowKinds, ", ")+" only when named")
	fs.BoolVar(&c.kstreams, "kstreams", true, "run the Kafka Streams twins (needs Java 17 and Maven)")
	fs.StringVar(&c.out, "out", "bench/REPORT.md", "the report file (empty: standard output only)")
	fs.BoolVar(&c.smoke, "smoke", false, "a run of minutes that checks the harness (20k records, one repetition, latency phases and loads of seconds,"+
		" fewer baselines and Kafka Streams twins, no report file)")
	fs.IntVar(&c.liveRate, "live-rate", 5000, "records/s of the latency phase")
	fs.DurationVar(&c.liveFor, "live-for", 60*time.Second, "how long the latency phase measures, at -live-rate")
	fs.DurationVar(&c.liveWarmup, "live-warmup", 15*time.Second, "how long the latency phase feeds records at -live-rate before it measures")
	fs.IntVar(&c.reps, "reps", 5, "repetitions of every run, interleaved (-smoke: 1)")
	fs.IntVar(&c.latencyReps, "latency-reps", -1, "repetitions with a latency phase, the first ones (default: every one)")
	fs.IntVar(&c.firstRep, "first-rep", 0, "the first repetition's number, for a part of a run (-results): which engine goes first alternates on from it")
	fs.BoolVar(&c.pin, "pin", true, "pin the broker and the harness to half the CPUs, each measured process to the others (taskset; 2 CPUs at least)")
	fs.IntVar(&c.commitMs, "commit-ms", 1000, "commit interval at least once (exactly once: 100ms, both engines' default)")
	fs.Int64Var(&c.cacheBytes, "cache-bytes", 10<<20, "record cache bytes (both engines; 0: no cache on either)")
	fs.Int64Var(&c.memBudget, "memory-budget", 0, "Oxbow's MemoryBudget, bytes (0: none; -curves: 256 MiB unless set)")
	fs.IntVar(&c.threads, "threads", runtime.NumCPU(), "Oxbow workers and Kafka Streams threads")
	fs.StringVar(&c.configName, "config", "both", "the engines' configurations: defaults, tuned (aligned and tuned) or both (-smoke: tuned)")
	batchBytes := fs.Int("tuned-batch-bytes", tunedBatchBytes, "the tuned configuration's producer batch size, every side")
	linger := fs.Duration("tuned-linger", tunedLinger, "the tuned configuration's producer linger, every side")
	compression := fs.String("tuned-compression", tunedCompression, "the tuned configuration's producer compression, every side (none, gzip, snappy, lz4, zstd)")
	fs.StringVar(&c.results, "results", "", "a file to keep every run's figures in as it ends (JSON lines), for -merge")
	c.phases = defaultPhaseSettings()
	httpRates := fs.String("http-rates", "5000,10000", "http-read: the fixed rates of point reads, a second, comma-separated (the first also starts the search)")
	fs.Float64Var(&c.phases.CommandRate, "command-rate", c.phases.CommandRate, "commands: the fixed rate of commands, a second (also the search's start)")
	fs.DurationVar(&c.phases.LoadFor, "load-for", c.phases.LoadFor, "http-read and commands: how long each fixed rate is measured")
	fs.DurationVar(&c.phases.LoadWarmup, "load-warmup", c.phases.LoadWarmup, "http-read and commands: how long each fixed rate runs before it is measured")
	fs.DurationVar(&c.phases.StepFor, "step-for", c.phases.StepFor, "http-read and commands: how long each step of the rate search is measured (after a fifth of it not)")
	curveNamesFlag := fs.String("curves", "", "run no report: measure these comma-separated curves ("+strings.Join(curveNames, ",")+") into -curve-dir (curves.go)")
	cs := curveSettings{}
	fs.IntVar(&cs.reps, "curve-reps", 3, "curves: repetitions of each point")
	fs.StringVar(&cs.dir, "curve-dir", "bench/curves", "curves: where the points, plots and README.md go")
	restoreGB := fs.String("restore-gb", "0.25,1,2", "curves: the restore curve's changelog sizes, GB of keys and values")
	curveKeys := fs.String("curve-keys", "10000,100000,1000000,10000000", "curves: the keys curve's distinct keys")
	curvePartitions := fs.String("curve-partitions", "6,24,96", "curves: the partitions curve's partition counts")
	curveInstances := fs.String("curve-instances", "1,2,4,6", "curves: the instances curve's instance counts (processes on this machine)")
	fs.IntVar(&cs.instPartitions, "curve-instance-partitions", 12, "curves: the instances curve's input partitions (at least the largest -curve-instances)")
	fs.IntVar(&cs.instRecords, "curve-instance-records", 20_000_000, "curves: the instances curve's input records (at -keys keys)")
	fs.IntVar(&cs.moveKeys, "curve-move-keys", 2_000_000, "curves: the keys of the store whose tasks the instances curve moves (111 bytes each)")
	fs.Float64Var(&cs.readRate, "curve-read-rate", 2000, "curves: the restore curve's point reads a second")
	fs.DurationVar(&cs.readFor, "curve-read-for", 20*time.Second, "curves: how long the restore curve's point reads are measured (after a fifth of it not)")
	curvesRender := fs.Bool("curves-render", false, "measure nothing: rewrite -curve-dir's README.md and plots from its points")
	ss := soakSettings{}
	fs.DurationVar(&ss.duration, "soak", 0, "run no report: the shoe store under steady load for this long on real Kafka and PostgreSQL, sampled (soak.go)")
	fs.DurationVar(&ss.warmup, "soak-warmup", 0, "soak: how long from the start the samples are left out of the fits (0: a sixth of -soak, two minutes at least)")
	fs.DurationVar(&ss.every, "soak-every", 10*time.Second, "soak: how often the store is sampled")
	fs.Float64Var(&ss.rate, "soak-rate", 50, "soak: commands a second, and as many view reads")
	fs.DurationVar(&ss.retention, "soak-retention", 5*time.Minute, "soak: how long the store keeps each command's outcome (its -outcome-retention; the tables grow until it has passed)")
	fs.Int64Var(&ss.budget, "soak-budget", 64<<20, "soak: the store's -memory-budget in bytes, each application's (0: none); its memtables' size is a sixteenth of it, and the resident memory settles once they have filled and been recycled")
	fs.Int64Var(&ss.cache, "soak-cache", 0, "soak: the store's -cache-bytes, each application's record cache (0: the engine's default, or the budget's share); the Go heap grows until the cache has filled, with outcomes kept for -soak-retention")
	fs.IntVar(&ss.shoes, "soak-shoes", 20, "soak: the shoes the commands go to (each a row of the catalog)")
	fs.StringVar(&ss.dir, "soak-dir", "bench/soak", "soak: where the samples, fits and plots go")
	mergeFrom := fs.String("merge", "", "run nothing: report the runs of these comma-separated -results files as one run (the parts of a full run)")
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
	c.phases.HTTPRates = nil
	for _, r := range strings.Split(*httpRates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -http-rates: %q is not a positive rate\n", r)
			return 2
		}
		c.phases.HTTPRates = append(c.phases.HTTPRates, v)
	}
	if c.phases.CommandRate <= 0 || c.phases.LoadFor <= 0 || c.phases.LoadWarmup < 0 || c.phases.StepFor <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -command-rate, -load-for and -step-for must be positive, -load-warmup not negative")
		return 2
	}
	if c.smoke {
		c.keys, c.liveRate, c.liveFor, c.liveWarmup = 500, 1000, 2*time.Second, 500*time.Millisecond
		// Every phase's code once, for seconds: the fixed loads, a search of
		// a few steps.
		c.phases.LoadFor, c.phases.LoadWarmup, c.phases.StepFor, c.phases.MaxSteps = 2*time.Second, 500*time.Millisecond, time.Second, 4
		if !isFlagSet(fs, "records") {
			c.records = 20_000
		}
		if !isFlagSet(fs, "reps") {
			c.reps = 1
		}
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
	c.tuned = tunedConfig(*batchBytes, *linger, *compression)
	if c.configs, err = parseConfigs(c.configName, c.tuned); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if c.reps < 1 {
		fmt.Fprintln(os.Stderr, "bench: -reps must be at least 1")
		return 2
	}
	if c.latencyReps < 0 || c.latencyReps > c.reps {
		c.latencyReps = c.reps
	}
	c.only, c.phaseSel = topologyNames, map[string]bool{}
	for _, p := range phaseNames {
		c.phaseSel[p] = true
	}
	if *only != "" {
		c.only, c.phaseSel = nil, map[string]bool{}
		for _, name := range strings.Split(*only, ",") {
			switch name = strings.TrimSpace(name); {
			case slices.Contains(topologyNames, name) || slices.Contains(windowKinds, name):
				c.only = append(c.only, name)
			case slices.Contains(phaseNames, name):
				c.phaseSel[name] = true
			default:
				fmt.Fprintf(os.Stderr, "bench: -only: no topology or phase %q (%s)\n", name, strings.Join(slices.Concat(topologyNames, windowKinds, phaseNames), ", "))
				return 2
			}
		}
	}
	if *curvesRender {
		if err := writeCurvesReadme(cs.dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if ss.duration > 0 {
		if ss.warmup == 0 {
			ss.warmup = max(2*time.Minute, ss.duration/6)
		}
		if ss.warmup >= ss.duration || ss.every <= 0 || ss.rate <= 0 || ss.shoes < 1 {
			fmt.Fprintln(os.Stderr, "bench: -soak-warmup must be shorter than -soak; -soak-every, -soak-rate and -soak-shoes positive")
			return 2
		}
	}
	if *curveNamesFlag != "" {
		var errs []error
		for _, name := range strings.Split(*curveNamesFlag, ",") {
			if name = strings.TrimSpace(name); !slices.Contains(curveNames, name) {
				errs = append(errs, fmt.Errorf("-curves: no curve %q (%s)", name, strings.Join(curveNames, ", ")))
			}
			cs.names = append(cs.names, name)
		}
		var err error
		if cs.restoreGB, err = parseList(*restoreGB, strconv.ParseFloat); err != nil {
			errs = append(errs, fmt.Errorf("-restore-gb: %w", err))
		}
		if cs.keys, err = parseList(*curveKeys, func(s string, _ int) (int, error) { return strconv.Atoi(s) }); err != nil {
			errs = append(errs, fmt.Errorf("-curve-keys: %w", err))
		}
		if cs.partitions, err = parseList(*curvePartitions, func(s string, _ int) (int, error) { return strconv.Atoi(s) }); err != nil {
			errs = append(errs, fmt.Errorf("-curve-partitions: %w", err))
		}
		if cs.instances, err = parseList(*curveInstances, func(s string, _ int) (int, error) { return strconv.Atoi(s) }); err != nil {
			errs = append(errs, fmt.Errorf("-curve-instances: %w", err))
		}
		if len(cs.instances) > 0 && cs.instPartitions < slices.Max(cs.instances) || cs.instRecords < 1 || cs.moveKeys < 1 {
			errs = append(errs, errors.New("-curve-instance-partitions must be at least the largest -curve-instances; -curve-instance-records and -curve-move-keys positive"))
		}
		if !isFlagSet(fs, "memory-budget") {
			c.memBudget = curveMemoryBudget
		}
		if cs.reps < 1 || cs.readRate <= 0 || cs.readFor <= 0 {
			errs = append(errs, errors.New("-curve-reps, -curve-read-rate and -curve-read-for must be positive"))
		}
		if len(errs) > 0 {
			fmt.Fprintln(os.Stderr, "bench:", errors.Join(errs...))
			return 2
		}
	}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.brokers = append(c.brokers, b)
		}
	}
	// Ctrl-C or SIGTERM ends every run: each child gets SIGTERM, and
	// SIGKILL if the harness dies first (proc.go).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *mergeFrom != "" {
		rep, err := merge(strings.Split(*mergeFrom, ","), &c)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return c.write(rep)
	}
	if len(c.brokers) == 0 {
		b, err := startBroker(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		c.brokers = b
	}
	if ss.duration > 0 {
		if err := soak(ctx, c, ss); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if len(cs.names) > 0 {
		if err := curves(ctx, c, cs); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
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
	return c.write(rep)
}

// write prints the report and writes it to -out; 1 if an output was wrong.
func (c benchConfig) write(rep *report) int {
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

// parseList parses a comma-separated list of positive numbers.
func parseList[T int | float64](s string, parse func(string, int) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
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

// createTopics creates topics and waits until the broker answers for
// every partition of them (a new partition's leader comes a moment after
// the topic; until then its end offset is UNKNOWN_TOPIC_OR_PARTITION).
func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) error {
	res, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return err
	}
	if err := res.Error(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
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
