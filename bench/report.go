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
	fmt.Fprintf(&b, "Run %s with `go run ./bench%s -config %s`.\n\n", r.started.UTC().Format(time.RFC3339), map[bool]string{true: " -smoke", false: ""}[c.smoke], c.configName)
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
		" readable (read committed); p50, p99, p99.9 of every output record of the measured part.\n\n",
		c.liveRate, c.liveWarmup, c.liveFor)
	for _, cfg := range c.configs {
		var runs []run
		for _, x := range r.runs {
			if x.config == cfg.name {
				runs = append(runs, x)
			}
		}
		r.configSection(&b, c, cfg, runs)
	}
	fmt.Fprintf(&b, "\nEach output is checked against the one the input gives (stateless and join record by record, count and window by each key's last value):"+
		" exactly once it must be that exactly; at least once, each record there at least once and no other, each count at least the expected.\n")
	if len(r.mismatches) > 0 {
		fmt.Fprintf(&b, "\nWrong outputs:\n\n- %s\n", strings.Join(r.mismatches, "\n- "))
	} else {
		fmt.Fprintf(&b, "\nEvery output is as expected.\n")
	}
	for _, x := range r.runs {
		if x.check.repeated > 0 {
			fmt.Fprintf(&b, "- %s: %s %s %s: %d records repeated or keys counted above the expected (at least once allows it)\n", x.config, x.engine, x.topology, x.guarantee, x.check.repeated)
		}
	}
	return b.String()
}

// configName is how the report calls a configuration.
func configTitle(name string) string {
	if name == "tuned" {
		return "aligned and tuned"
	}
	return name
}

// configSection renders one configuration: its settings, then a row per
// run with its ratios to its baselines.
func (r *report) configSection(b *strings.Builder, c benchConfig, cfg engineConfig, runs []run) {
	fmt.Fprintf(b, "## Configuration: %s\n\n", configTitle(cfg.name))
	fmt.Fprintln(b, "| Setting | Oxbow and the franz-go baselines | Kafka Streams and the Java client loop |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, row := range cfg.settings(c) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	fmt.Fprintln(b)
	byKey := map[string]run{}
	for _, x := range runs {
		byKey[x.engine+"/"+x.topology+"/"+x.guarantee] = x
	}
	fmt.Fprintln(b, "Records/s is input records a second. Records moved are those read (in), written to the output (out) and to changelogs,"+
		" the last two by end offsets, which exactly once also count the transactions' markers; moved/s is all of them a second."+
		" The baselines: the read limit (franz-go consuming and counting), the stateless topology's filter and map by hand with franz-go"+
		" (the limit for a Go program) and with the plain Java clients, Kafka Streams copying every record."+
		" × filter/map is to franz-go's filter and map with the same guarantee; × Kafka Streams to the Kafka Streams twin; both in the steady window."+
		" CPU is per million input records in the steady window.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| Engine | Topology | Guarantee | Records/s steady | Records/s end to end | Moved: in + out + changelog | Moved/s steady | × read limit | × filter/map | × Kafka Streams | × Kafka Streams, moved/s | p50 | p99 | p99.9 | CPU s/M: process | CPU s/M: broker | Peak RSS MB |")
	fmt.Fprintln(b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ratio := func(x float64, base string, moved bool) string {
		t, ok := byKey[base]
		if !ok {
			return ""
		}
		y := t.steady.recordsPerSec()
		if moved {
			y = t.steady.movedPerSec()
		}
		return num(x/y, 2)
	}
	for _, x := range runs {
		vsRead, vsFM, vsKS, vsKSMoved := ratio(x.steady.recordsPerSec(), "franz-go/consume/alos", false), "", "", ""
		if x.topology != "consume" && !(x.engine == "franz-go" && x.topology == "filter-map") {
			vsFM = ratio(x.steady.recordsPerSec(), "franz-go/filter-map/"+x.guarantee, false)
		}
		if x.engine == "oxbow" {
			vsKS = ratio(x.steady.recordsPerSec(), "kstreams/"+x.topology+"/"+x.guarantee, false)
			vsKSMoved = ratio(x.steady.movedPerSec(), "kstreams/"+x.topology+"/"+x.guarantee, true)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %.0f | %d + %d + %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f |\n", x.engine, x.topology, guaranteeName(x),
			num(x.steady.recordsPerSec(), 0), x.recordsPerSec, x.moved.in, x.moved.out, x.moved.changelog, num(x.steady.movedPerSec(), 0),
			vsRead, vsFM, vsKS, vsKSMoved, ms(x.lat.p50), ms(x.lat.p99), ms(x.lat.p999), num(x.steady.cpuPerM(x.steady.cpu), 1),
			num(x.steady.cpuPerM(x.steady.brokerCPU), 1), x.peakRSSMB)
	}
	fmt.Fprintf(b, "\nTargets (issue 28; one run each, no interval; rates in the steady window): every Oxbow topology ≥ 2.0× Kafka Streams' moved/s at no worse p99;"+
		" stateless ≥ 0.8× franz-go's filter/map, count ≥ 0.5× of it; window ≥ 2× the Oxbow rate of the report before issue 28"+
		" (%.0f records/s at least once, %.0f exactly once).\n\n", windowBefore["alos"], windowBefore["eos"])
	for _, x := range runs {
		if x.engine != "oxbow" {
			continue
		}
		if t, ok := byKey["kstreams/"+x.topology+"/"+x.guarantee]; ok {
			q := x.steady.movedPerSec() / t.steady.movedPerSec()
			fmt.Fprintf(b, "- %s %s: %s× Kafka Streams' moved/s, p99 %s against %s: %s\n", x.topology, x.guarantee, num(q, 2),
				ms(x.lat.p99), ms(t.lat.p99), metOrMissed(q >= 2 && x.lat.p99 <= t.lat.p99))
		}
		if want := map[string]float64{"stateless": 0.8, "count": 0.5}[x.topology]; want > 0 {
			if t, ok := byKey["franz-go/filter-map/"+x.guarantee]; ok {
				q := x.steady.recordsPerSec() / t.steady.recordsPerSec()
				fmt.Fprintf(b, "- %s %s: %s× franz-go's filter/map: %s\n", x.topology, x.guarantee, num(q, 2), metOrMissed(q >= want))
			}
		}
		if x.topology == "window" {
			q := x.recordsPerSec / windowBefore[x.guarantee]
			fmt.Fprintf(b, "- window %s: %s× the rate before, end to end as it was: %s\n", x.guarantee, num(q, 2), metOrMissed(q >= 2))
		}
	}
	fmt.Fprintln(b)
}

// windowBefore is Oxbow's window rate in the report before issue 28 (5M
// records, defaults, 10 MiB cache), the base of the window's target.
var windowBefore = map[string]float64{"alos": 99877, "eos": 78379}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

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
