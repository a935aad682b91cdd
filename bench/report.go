package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
	fmt.Fprintf(&b, "- Broker: %s (one node, on this machine: it shares the CPUs)\n", strings.Join(c.brokers, ","))
	fmt.Fprintf(&b, "- Input: %d records, %d keys, %d-byte values, %d partitions, event times over half an hour; the join's table: %d keys\n",
		c.records, c.keys, c.valueSize, c.partitions, c.keys)
	fmt.Fprintf(&b, "- Latency: %d records/s for %s after each run has caught up, event time to the output being readable (read committed)\n\n",
		c.liveRate, c.liveFor)
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
	ratio := func(x run, base string) string {
		if t, ok := byKey[base]; ok && t.recordsPerSec > 0 {
			return fmt.Sprintf("%.2f", x.recordsPerSec/t.recordsPerSec)
		}
		return ""
	}
	fmt.Fprintln(b, "Records/s is input records a second. Records moved are those read (in), written to the output (out) and to changelogs,"+
		" the last two by end offsets, which exactly once also count the transactions' markers; moved/s is all of them a second."+
		" The baselines: the read limit (franz-go consuming and counting), the stateless topology's filter and map by hand with franz-go"+
		" (the limit for a Go program) and with the plain Java clients, Kafka Streams copying every record."+
		" × filter/map is to franz-go's filter and map with the same guarantee; × Kafka Streams to the Kafka Streams twin.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| Engine | Topology | Guarantee | Records/s | Moved: in + out + changelog | Moved/s | × read limit | × filter/map | × Kafka Streams | × Kafka Streams, moved/s | p50 | p99 | CPU s | Peak RSS MB |")
	fmt.Fprintln(b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range runs {
		vsRead, vsFM, vsKS, vsKSMoved := ratio(x, "franz-go/consume/alos"), "", "", ""
		if x.topology != "consume" && !(x.engine == "franz-go" && x.topology == "filter-map") {
			vsFM = ratio(x, "franz-go/filter-map/"+x.guarantee)
		}
		if t, ok := byKey["kstreams/"+x.topology+"/"+x.guarantee]; ok && x.engine == "oxbow" && t.recordsPerSec > 0 {
			vsKS = ratio(x, "kstreams/"+x.topology+"/"+x.guarantee)
			if t.movedPerSec() > 0 {
				vsKSMoved = fmt.Sprintf("%.2f", x.movedPerSec()/t.movedPerSec())
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f | %d + %d + %d | %.0f | %s | %s | %s | %s | %s | %s | %.1f | %.0f |\n", x.engine, x.topology, guaranteeName(x),
			x.recordsPerSec, x.moved.in, x.moved.out, x.moved.changelog, x.movedPerSec(), vsRead, vsFM, vsKS, vsKSMoved,
			ms(x.p50), ms(x.p99), x.cpuSeconds, x.peakRSSMB)
	}
	fmt.Fprintf(b, "\nTargets (issue 28; one run each, no interval): every Oxbow topology ≥ 2.0× Kafka Streams' moved/s at no worse p99;"+
		" stateless ≥ 0.8× franz-go's filter/map, count ≥ 0.5× of it; window ≥ 2× the Oxbow rate of the report before issue 28"+
		" (%.0f records/s at least once, %.0f exactly once).\n\n", windowBefore["alos"], windowBefore["eos"])
	for _, x := range runs {
		if x.engine != "oxbow" {
			continue
		}
		if t, ok := byKey["kstreams/"+x.topology+"/"+x.guarantee]; ok && t.movedPerSec() > 0 {
			q := x.movedPerSec() / t.movedPerSec()
			fmt.Fprintf(b, "- %s %s: %.2f× Kafka Streams' moved/s, p99 %s against %s: %s\n", x.topology, x.guarantee, q,
				ms(x.p99), ms(t.p99), metOrMissed(q >= 2 && x.p99 <= t.p99))
		}
		if want := map[string]float64{"stateless": 0.8, "count": 0.5}[x.topology]; want > 0 {
			if t, ok := byKey["franz-go/filter-map/"+x.guarantee]; ok && t.recordsPerSec > 0 {
				q := x.recordsPerSec / t.recordsPerSec
				fmt.Fprintf(b, "- %s %s: %.2f× franz-go's filter/map: %s\n", x.topology, x.guarantee, q, metOrMissed(q >= want))
			}
		}
		if x.topology == "window" {
			q := x.recordsPerSec / windowBefore[x.guarantee]
			fmt.Fprintf(b, "- window %s: %.2f× the rate before: %s\n", x.guarantee, q, metOrMissed(q >= 2))
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

// movedPerSec is the records a run moved (in, out, changelog) a second.
func (x run) movedPerSec() float64 {
	if x.seconds <= 0 {
		return 0
	}
	return float64(x.moved.total()) / x.seconds
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
