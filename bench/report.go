package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// markdown renders the report: the machine, the input, then a row per run
// with its ratios to the passthrough and to its Kafka Streams twin.
func (r *report) markdown(c benchConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Oxbow benchmark report\n\n")
	if len(r.merged) > 0 {
		fmt.Fprintf(&b, "Merged (`go run ./bench -merge`) from %d parts, which took %s together: %s.\n\n", len(r.merged),
			r.finished.Sub(r.started).Round(time.Second), strings.Join(r.merged, "; "))
	} else {
		fmt.Fprintf(&b, "Run %s at %s with `go run ./bench%s -config %s -reps %d -latency-reps %d`; it took %s.\n\n", r.started.UTC().Format(time.RFC3339),
			cmp.Or(r.revision, "an unrecorded commit"), map[bool]string{true: " -smoke", false: ""}[c.smoke], c.configName, c.reps, c.latencyReps, r.finished.Sub(r.started).Round(time.Second))
	}
	fmt.Fprintf(&b, "- Machine: %s, %d CPUs, %s; %s/%s; %s; %s\n", cpuModel(), runtime.NumCPU(), memTotal(), runtime.GOOS, runtime.GOARCH, runtime.Version(), javaVersion())
	broker := "its process " + r.pin.brokerFound + ": its CPU is not measured"
	if r.pin.brokerPID > 0 {
		broker = fmt.Sprintf("pid %d, found as %s, JVM %s", r.pin.brokerPID, r.pin.brokerFound, cmp.Or(r.brokerJVM, "flags unknown"))
	}
	fmt.Fprintf(&b, "- Broker: %s, one node on this machine (%s)\n", strings.Join(c.brokers, ","), broker)
	fmt.Fprintf(&b, "- Pinning: %s\n", r.pin.note)
	fmt.Fprintf(&b, "- Input: %d records, %d keys, %d-byte values, %d partitions, event times over half an hour; the join's table: %d keys\n",
		c.records, c.keys, c.valueSize, c.partitions, c.keys)
	fmt.Fprintf(&b, "- Throughput: each run a fresh process on the whole input, its own group. End to end: input records over the time from its start"+
		" (READY/RUNNING: its group has assigned its tasks) to its group's commit of the input's end. Steady: the first %.0f%% of the input is its warm-up"+
		" and the part past %.0f%% its tail; the steady window runs from the first look (every 100 ms) at the group's commits that finds %.0f%% committed"+
		" to the first that finds %.0f%%, and its rate is the records committed in it over its length. CPU seconds are the process's and the broker's"+
		" (utime + stime of /proc/<pid>/stat, every thread) in that window only; peak RSS is the process's VmHWM at its end.\n",
		100*warmFraction, 100*endFraction, 100*warmFraction, 100*endFraction)
	fmt.Fprintf(&b, "- Latency: a second process of the same kind on a new, empty input (its own group and state): once it runs, %d records/s for %s"+
		" not measured (its warm-up), then for %s measured, from each record's event time (when the harness writes it) to its output being"+
		" readable (read committed); p50, p99, p99.9 of every output record of the measured part.\n",
		c.liveRate, c.liveWarmup, c.liveFor)
	k, cov := orderStatistic(c.reps, 0.95)
	if c.reps == 1 {
		fmt.Fprintf(&b, "- Repetitions: 1: every figure is one run's, with no interval, and no target is judged.\n\n")
	} else {
		fmt.Fprintf(&b, "- Repetitions: %d, interleaved: each repetition runs every configuration and every run once, the order of the configurations"+
			" and of the baselines reversed every other repetition, and of each topology and guarantee's two engines alternating from pair to pair and"+
			" from repetition to repetition. Every figure is the median of its repetitions and, in brackets, a distribution-free interval for that"+
			" median from order statistics: [x(k), x(n+1−k)] of the n sorted values, here %s, which covers the median with probability %.1f%%"+
			" (1 − 2·P(B ≤ k−1), B binomial(n, ½); the largest k keeping it at 95%%, k = 1 when none does: below 6 repetitions the interval is"+
			" [min, max] and covers less than 95%%). A ratio's values are the ratios within each repetition. A target is met only when its whole"+
			" interval clears it.\n\n", c.reps, intervalName(c.reps, k), 100*cov)
	}
	for _, cfg := range c.configs {
		var runs []run
		for _, x := range r.runs {
			if x.config == cfg.name {
				runs = append(runs, x)
			}
		}
		if len(runs) == 0 && len(r.phases) > 0 {
			continue // phases only (-only)
		}
		r.configSection(&b, c, cfg, runs)
	}
	if len(r.phases) > 0 {
		r.phasesSection(&b, c)
	}
	fmt.Fprintf(&b, "\nEach output is checked against the one the input gives (stateless and join record by record, count and window by each key's last value):"+
		" exactly once it must be that exactly; at least once, each record there at least once and no other, each count at least the expected.\n")
	if len(r.mismatches) > 0 {
		fmt.Fprintf(&b, "\nWrong outputs:\n\n- %s\n", strings.Join(r.mismatches, "\n- "))
	} else {
		fmt.Fprintf(&b, "\nEvery output is as expected.\n")
	}
	for _, x := range r.runs {
		for _, v := range []struct {
			phase string
			v     verdict
		}{{"", x.check}, {" (latency phase)", x.liveCheck}} {
			if v.v.repeated > 0 {
				fmt.Fprintf(&b, "- repetition %d, %s: %s %s %s%s: %d records repeated or keys counted above the expected (at least once allows it)\n",
					x.rep+1, x.config, x.engine, x.topology, x.guarantee, v.phase, v.v.repeated)
			}
		}
	}
	r.everyRun(&b)
	r.everyPhase(&b, c)
	return b.String()
}

func intervalName(n, k int) string {
	if k == 1 {
		return "min and max"
	}
	return fmt.Sprintf("the %d-th smallest and largest of %d", k, n)
}

// everyRun is the appendix: each run's figures.
func (r *report) everyRun(b *strings.Builder) {
	if len(r.runs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Every run\n\nIn the order they ran. CPU seconds in the steady window.\n\n")
	fmt.Fprintln(b, "| Repetition | Configuration | Engine | Topology | Guarantee | Records/s steady | Records/s end to end | Moved: in + out + changelog | Moved/s steady | Steady window s | CPU s: process | CPU s: broker | p50 | p99 | p99.9 | Peak RSS MB |")
	fmt.Fprintln(b, "|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.runs {
		bcpu := math.NaN()
		if x.steady.ok && x.steady.brokerCPU >= 0 {
			bcpu = x.steady.brokerCPU
		}
		cpu, window := math.NaN(), math.NaN()
		if x.steady.ok {
			cpu, window = x.steady.cpu, x.steady.seconds
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %.0f | %d + %d + %d | %s | %s | %s | %s | %s | %s | %s | %.0f |\n", x.rep+1, x.config, x.engine,
			x.topology, guaranteeName(x), num(x.steady.recordsPerSec(), 0), x.recordsPerSec, x.moved.in, x.moved.out, x.moved.changelog,
			num(x.steady.movedPerSec(), 0), num(window, 1), num(cpu, 1), num(bcpu, 1), ms(x.lat.p50), ms(x.lat.p99), ms(x.lat.p999), x.peakRSSMB)
	}
}

// configName is how the report calls a configuration.
func configTitle(name string) string {
	if name == "tuned" {
		return "aligned and tuned"
	}
	return name
}

// configSection renders one configuration: its settings, then a row per
// run (engine, topology, guarantee) with its figures and its ratios to its
// baselines, then the targets.
func (r *report) configSection(b *strings.Builder, c benchConfig, cfg engineConfig, runs []run) {
	fmt.Fprintf(b, "## Configuration: %s\n\n", configTitle(cfg.name))
	fmt.Fprintln(b, "| Setting | Oxbow and the franz-go baselines | Kafka Streams and the Java client loop |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, row := range cfg.settings(c) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	fmt.Fprintln(b)
	// The runs of each engine, topology and guarantee, by repetition, in
	// the order of the first.
	var keys []string
	byKey := map[string]map[int]run{}
	for _, x := range runs {
		k := x.engine + "/" + x.topology + "/" + x.guarantee
		if byKey[k] == nil {
			keys = append(keys, k)
			byKey[k] = map[int]run{}
		}
		byKey[k][x.rep] = x
	}
	// of summarizes f over a row's runs.
	of := func(k string, f func(run) float64) summary {
		var xs []float64
		for _, x := range byKey[k] {
			xs = append(xs, f(x))
		}
		return summarize(xs)
	}
	// ratio summarizes f(run)/f(base) over the repetitions that have both.
	ratio := func(k, base string, f func(run) float64) summary {
		var xs []float64
		for i, x := range byKey[k] {
			if y, ok := byKey[base][i]; ok {
				xs = append(xs, f(x)/f(y))
			}
		}
		return summarize(xs)
	}
	steadyRate := func(x run) float64 { return x.steady.recordsPerSec() }
	steadyMoved := func(x run) float64 { return x.steady.movedPerSec() }
	p99 := func(x run) float64 {
		if x.lat.samples == 0 {
			return math.NaN()
		}
		return float64(x.lat.p99) / float64(time.Millisecond)
	}
	twin := func(k string) (string, bool) {
		e, rest, _ := strings.Cut(k, "/")
		return "kstreams/" + rest, e == "oxbow"
	}
	filterMap := func(k string) (string, bool) {
		e, rest, _ := strings.Cut(k, "/")
		t, g, _ := strings.Cut(rest, "/")
		return "franz-go/filter-map/" + g, t != "consume" && !(e == "franz-go" && t == "filter-map")
	}
	fmt.Fprintln(b, "Records/s is input records a second; moved/s counts the records read (in), written to the output (out) and to changelogs"+
		" (the last two by end offsets, which exactly once also count the transactions' markers); moved per input record is over the whole run."+
		" The baselines: the read limit (franz-go consuming and counting, no guarantee), the stateless topology's filter and map by hand with"+
		" franz-go (the limit for a Go program) and with the plain Java clients, Kafka Streams copying every record (its passthrough)."+
		" × read limit, × filter/map (franz-go's, same guarantee) and × Kafka Streams (the twin: same topology and guarantee) are ratios of steady"+
		" rates within a repetition.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| Engine | Topology | Guarantee | Runs | Records/s steady | Records/s end to end | Moved/s steady | Moved per input record | × read limit | × filter/map | × Kafka Streams | × Kafka Streams, moved/s |")
	fmt.Fprintln(b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range keys {
		var x run
		for _, x = range byKey[k] {
			break
		}
		vsFM, vsKS, vsKSMoved := "", "", ""
		if base, ok := filterMap(k); ok {
			vsFM = ratio(k, base, steadyRate).format(2)
		}
		if base, ok := twin(k); ok {
			vsKS, vsKSMoved = ratio(k, base, steadyRate).format(2), ratio(k, base, steadyMoved).format(2)
		}
		perRecord := of(k, func(x run) float64 { return float64(x.moved.total()) / float64(x.moved.in) })
		fmt.Fprintf(b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.engine, x.topology, guaranteeName(x), len(byKey[k]),
			of(k, steadyRate).format(0), of(k, func(x run) float64 { return x.recordsPerSec }).format(0), of(k, steadyMoved).format(0),
			perRecord.format(2), ratio(k, "franz-go/consume/alos", steadyRate).format(2), vsFM, vsKS, vsKSMoved)
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "Latency from the latency phases; CPU seconds per million input records in the steady window, of the process and of the broker;"+
		" peak RSS of the throughput run's process.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| Engine | Topology | Guarantee | p50 ms | p99 ms | p99.9 ms | p99 × Kafka Streams | CPU s/M: process | CPU s/M: broker | Peak RSS MB |")
	fmt.Fprintln(b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
	ms := func(f func(latencies) time.Duration) func(run) float64 {
		return func(x run) float64 {
			if x.lat.samples == 0 {
				return math.NaN()
			}
			return float64(f(x.lat)) / float64(time.Millisecond)
		}
	}
	for _, k := range keys {
		var x run
		for _, x = range byKey[k] {
			break
		}
		vsKS := ""
		if base, ok := twin(k); ok {
			vsKS = ratio(k, base, p99).format(2)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.engine, x.topology, guaranteeName(x),
			of(k, ms(func(l latencies) time.Duration { return l.p50 })).format(0), of(k, p99).format(0),
			of(k, ms(func(l latencies) time.Duration { return l.p999 })).format(0), vsKS,
			of(k, func(x run) float64 { return x.steady.cpuPerM(x.steady.cpu) }).format(1),
			of(k, func(x run) float64 { return x.steady.cpuPerM(x.steady.brokerCPU) }).format(1),
			of(k, func(x run) float64 { return x.peakRSSMB }).format(0))
	}
	note := ""
	if cfg.name != "tuned" {
		note = " The issue sets them for the aligned-and-tuned configuration; here for reference."
	}
	fmt.Fprintf(b, "\nTargets (issue 28), each judged on its interval: every Oxbow topology ≥ 2.0× Kafka Streams' moved/s at no worse p99 (p99 × Kafka Streams ≤ 1);"+
		" stateless ≥ 0.8× franz-go's filter/map, count ≥ 0.5× of it; window ≥ 2× Oxbow's rate in the report before issue 28 (%.0f records/s at least"+
		" once, %.0f exactly once: 5M records, defaults, unpinned, end to end).%s\n\n", windowBefore["alos"], windowBefore["eos"], note)
	for _, k := range keys {
		e, rest, _ := strings.Cut(k, "/")
		if e != "oxbow" {
			continue
		}
		t, g, _ := strings.Cut(rest, "/")
		if base, ok := twin(k); ok && byKey[base] != nil {
			m, l := ratio(k, base, steadyMoved), ratio(k, base, p99)
			v := judge(m, 2, true)
			if lv := judge(l, 1, false); v == "met" && lv != "met" {
				v = "moved/s met, p99 " + lv
			}
			fmt.Fprintf(b, "- %s %s: %s× Kafka Streams' moved/s, p99 %s× its: %s\n", t, g, m.format(2), l.format(2), v)
		}
		if want := map[string]float64{"stateless": 0.8, "count": 0.5}[t]; want > 0 && byKey["franz-go/filter-map/"+g] != nil {
			q := ratio(k, "franz-go/filter-map/"+g, steadyRate)
			fmt.Fprintf(b, "- %s %s: %s× franz-go's filter/map: %s\n", t, g, q.format(2), judge(q, want, true))
		}
		if t == "window" {
			q := of(k, func(x run) float64 { return x.recordsPerSec / windowBefore[g] })
			fmt.Fprintf(b, "- window %s: %s× the rate before, end to end as it was: %s\n", g, q.format(2), judge(q, 2, true))
		}
	}
	fmt.Fprintln(b)
}

// judge says whether a figure meets its target (at least it: above; at
// most it: !above), on its interval.
func judge(s summary, target float64, above bool) string {
	switch {
	case s.n == 0:
		return "not measured"
	case s.n == 1:
		return "not judged (one run: no interval)"
	case s.clears(target, above):
		return "met"
	case above && s.median < target, !above && s.median > target:
		return "**missed**"
	}
	return "**not shown** (the interval straddles it)"
}

// windowBefore is Oxbow's window rate in the report before issue 28 (5M
// records, defaults, 10 MiB cache), the base of the window's target.
var windowBefore = map[string]float64{"alos": 99877, "eos": 78379}

// guaranteeName: the read limit has none.
func guaranteeName(x run) string {
	if x.topology == "consume" {
		return "–"
	}
	return x.guarantee
}

// cpuPerM is CPU seconds per million records in the window; NaN if not
// measured.
func (s steady) cpuPerM(cpu float64) float64 {
	if !s.ok || cpu < 0 || s.moved.in == 0 {
		return math.NaN()
	}
	return cpu / float64(s.moved.in) * 1e6
}

// num renders a number with d decimals, "–" for NaN or infinity.
func num(x float64, d int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', d, 64)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return fmt.Sprintf("%.0f GB RAM", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func javaVersion() string {
	out, err := exec.Command("java", "-version").CombinedOutput()
	if err != nil {
		return "no Java"
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}
