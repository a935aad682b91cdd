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
// run with its ratios to the passthrough and to its Kafka Streams twin.
func (r *report) configSection(b *strings.Builder, c benchConfig, cfg engineConfig, runs []run) {
	fmt.Fprintf(b, "## Configuration: %s\n\n", configTitle(cfg.name))
	fmt.Fprintln(b, "| Setting | Oxbow (and the franz-go baselines) | Kafka Streams |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, row := range cfg.settings(c) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	fmt.Fprintln(b)
	pass := map[string]float64{} // by guarantee
	ks := map[string]run{}
	for _, x := range runs {
		if x.engine == "franz-go" {
			pass[x.guarantee] = x.recordsPerSec
		}
		if x.engine == "kstreams" {
			ks[x.topology+"/"+x.guarantee] = x
		}
	}
	fmt.Fprintln(b, "Each run's ratio to the passthrough is to the passthrough with the same guarantee. Records/s is input records a second;"+
		" records moved are those read (in), written to the output (out) and to changelogs, the last two by end offsets, which exactly once"+
		" also count the transactions' markers; moved/s is all of them a second.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| Engine | Topology | Guarantee | Records/s | Moved: in + out + changelog | Moved/s | × passthrough | × Kafka Streams | × Kafka Streams, moved/s | p50 | p99 | CPU s | Peak RSS MB |")
	fmt.Fprintln(b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range runs {
		vsPass, vsKS, vsKSMoved := "", "", ""
		if p := pass[x.guarantee]; p > 0 {
			vsPass = fmt.Sprintf("%.2f", x.recordsPerSec/p)
		}
		if t, ok := ks[x.topology+"/"+x.guarantee]; ok && x.engine == "oxbow" && t.recordsPerSec > 0 {
			vsKS = fmt.Sprintf("%.2f", x.recordsPerSec/t.recordsPerSec)
			if t.movedPerSec() > 0 {
				vsKSMoved = fmt.Sprintf("%.2f", x.movedPerSec()/t.movedPerSec())
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f | %d + %d + %d | %.0f | %s | %s | %s | %s | %s | %.1f | %.0f |\n", x.engine, x.topology, x.guarantee,
			x.recordsPerSec, x.moved.in, x.moved.out, x.moved.changelog, x.movedPerSec(), vsPass, vsKS, vsKSMoved,
			ms(x.p50), ms(x.p99), x.cpuSeconds, x.peakRSSMB)
	}
	if t := targets(runs, pass, ks); t != "" {
		fmt.Fprintf(b, "\nTargets (issue 12): stateless ≥ 0.9× the passthrough; every Oxbow topology ≥ 1.0× Kafka Streams' records/s at no worse p99.\n\n%s", t)
	}
	fmt.Fprintln(b)
}

// targets checks the targets run by run: a line per check, met or
// missed.
func targets(runs []run, pass map[string]float64, ks map[string]run) string {
	var b strings.Builder
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	for _, x := range runs {
		if x.engine != "oxbow" {
			continue
		}
		if p := pass[x.guarantee]; x.topology == "stateless" && p > 0 {
			fmt.Fprintf(&b, "- stateless %s: %.2f× the passthrough: %s\n", x.guarantee, x.recordsPerSec/p, verdict(x.recordsPerSec >= 0.9*p))
		}
		if t, ok := ks[x.topology+"/"+x.guarantee]; ok && t.recordsPerSec > 0 {
			fmt.Fprintf(&b, "- %s %s: %.2f× Kafka Streams, p99 %s against %s: %s\n", x.topology, x.guarantee, x.recordsPerSec/t.recordsPerSec,
				ms(x.p99), ms(t.p99), verdict(x.recordsPerSec >= t.recordsPerSec && x.p99 <= t.p99))
		}
	}
	return b.String()
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
