package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The targets of the phases (issue 28).
const (
	targetHTTPRate    = 5000 // point reads a second at which p99 is judged
	targetHTTPP99     = 2.0  // ms
	targetRestore     = 0.8  // × the raw consume's records/s
	targetCommandP99  = 50.0 // ms, at CommandRate
	targetCommandRate = 2000 // commands a second sustained
)

// phasesSection renders the phases: their setup, a table each, and their
// targets.
func (r *report) phasesSection(b *strings.Builder, c benchConfig) {
	p := c.phases
	byPhase := map[string][]phaseRun{}
	for _, x := range r.phases {
		byPhase[x.Phase] = append(byPhase[x.Phase], x)
	}
	fmt.Fprintf(b, "## Serving, restoring and commands: Oxbow alone\n\n")
	fmt.Fprintf(b, "Once a repetition, after its configurations' runs, at the engine's defaults but for what is said. The HTTP reads and the restore"+
		" share a fill: the count topology at least once on the input (%d workers, commit interval %d ms, no record cache, so that its store's"+
		" changelog has a record for every input record: %d), run until its group has committed the input's end; its store then holds each of the"+
		" %d keys' counts, which the input gives. A fresh instance of that application (an empty state directory; record cache %d bytes) restores"+
		" the store and, once ready, serves it as a view over HTTP (httpapi, `GET /views/counts/keys/{key}`) on 127.0.0.1. Every child process is"+
		" pinned as the measured processes are; this process (the load generators, the aggregate client) runs with the broker.\n\n",
		c.threads, c.commitMs, c.records, c.keys, c.cacheBytes)
	fmt.Fprintf(b, "The loads are open loop: requests due at fixed intervals, each sent when due whatever became of the earlier ones, and each"+
		" latency measured from when the request was due, so that a stall delays, and shows in, every request due during it (no coordinated"+
		" omission). Each fixed rate runs %s not measured, then %s measured; a load's figures are over the requests due in the measured part,"+
		" errors (no answer: a transport error, a timeout) counted at the time they failed. *Right/s* is the right answers that came in the"+
		" measured part (to any request, the warm-up's too), a second. *Late p99* is how late requests went out, from due to sent (behind the"+
		" generator's schedule, or waiting for a free connection; counted in the latencies). *CPUs* are the CPUs each process kept busy over the load, warm-up included (utime + stime of /proc/<pid>/stat over its"+
		" length): the generator's (this process), the server's (the instance) and the broker's; a process pinned to one CPU is saturated at 1. The search for the highest rate sustained offers the first fixed rate, then %.1f× the last while each step is sustained —"+
		" right answers at 95%% of the offered rate at least, p99 within the limit, no error and no wrong answer — then bisects %d times between"+
		" the highest rate sustained and the lowest not, %d steps at most, each %s measured after %s not; ≥ marks a repetition that sustained"+
		" every step it was offered. Every answer is checked; a wrong one fails the run.\n\n",
		p.LoadWarmup, p.LoadFor, searchFactor, searchBisections, p.MaxSteps, p.StepFor, p.StepFor/5)

	loads := func(name, unit string, runs []phaseRun, maxP99 time.Duration) {
		if len(runs) == 0 {
			return
		}
		fmt.Fprintf(b, "| Offered %s/s | Runs | Right/s | p50 ms | p99 ms | p99.9 ms | Errors | Wrong | Late p99 ms | CPUs: generator | server | broker |\n", unit)
		fmt.Fprintln(b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for i, l := range runs[0].Fixed {
			of := func(f func(loadResult) float64) summary {
				var xs []float64
				for _, x := range runs {
					if i < len(x.Fixed) {
						xs = append(xs, f(x.Fixed[i]))
					}
				}
				return summarize(xs)
			}
			msOf := func(f func(loadResult) time.Duration) summary {
				return of(func(r loadResult) float64 { return float64(f(r)) / float64(time.Millisecond) })
			}
			cpu := func(f func(loadResult) float64) summary {
				return of(func(r loadResult) float64 {
					if f(r) < 0 {
						return math.NaN()
					}
					return f(r)
				})
			}
			fmt.Fprintf(b, "| %.0f | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.Rate, of(func(loadResult) float64 { return 1 }).n,
				of(func(r loadResult) float64 { return r.Achieved }).format(0),
				msOf(func(r loadResult) time.Duration { return r.P50 }).format(2), msOf(func(r loadResult) time.Duration { return r.P99 }).format(2),
				msOf(func(r loadResult) time.Duration { return r.P999 }).format(2),
				of(func(r loadResult) float64 { return float64(r.Errors) }).format(0), of(func(r loadResult) float64 { return float64(r.Wrong) }).format(0),
				msOf(func(r loadResult) time.Duration { return r.LateP99 }).format(2),
				cpu(func(r loadResult) float64 { return r.GeneratorCPU }).format(2), cpu(func(r loadResult) float64 { return r.ServerCPU }).format(2),
				cpu(func(r loadResult) float64 { return r.BrokerCPU }).format(2))
		}
		fmt.Fprintf(b, "\nHighest %s rate sustained (p99 ≤ %s): %s %s/s.\n\n", name, maxP99, maxRate(runs).format(0)+unbounded(runs), unit)
	}
	if runs := byPhase["http-read"]; len(runs) > 0 {
		fmt.Fprintf(b, "### HTTP point reads\n\nPoint reads of the %d keys, in a scattered order, over at most %d keep-alive connections, each with a"+
			" sending goroutine of its own (as wrk2: a request due while every one is busy waits for one, and the wait counts): each answer must be status 200 and the key's count.\n\n",
			c.keys, httpConns)
		loads("point-read", "requests", runs, p.HTTPMaxP99)
	}
	if runs := byPhase["restore"]; len(runs) > 0 {
		fmt.Fprintf(b, "### Restore\n\nA fresh instance restores the fill's store from its changelog: from the first partition's restore starting"+
			" (the engine's `restored` log lines: each partition's end less its time) to the instance being ready (every task restored), against a"+
			" franz-go consumer in a child process of its own reading every partition of the same changelog from its start to its end offset, from"+
			" its first fetch (connecting and listing the offsets before it) to the last partition's end; which goes first alternates from one"+
			" repetition to the next. MB are the records' keys' and values' bytes. The restored store is then read whole over HTTP, every key"+
			" checked.\n\n")
		of := func(f func(restoreResult) float64) summary {
			var xs []float64
			for _, x := range runs {
				xs = append(xs, f(x.Restore))
			}
			return summarize(xs)
		}
		fmt.Fprintln(b, "| Reader | Runs | Records | Seconds | Records/s | MB/s | × raw consume |")
		fmt.Fprintln(b, "|---|---:|---:|---:|---:|---:|---:|")
		fmt.Fprintf(b, "| Oxbow's restore | %d | %s | %s | %s | %s | %s |\n", len(runs), of(func(r restoreResult) float64 { return float64(r.Records) }).format(0),
			of(func(r restoreResult) float64 { return r.Seconds }).format(3), of(restoreResult.perSec).format(0), of(restoreResult.mbPerSec).format(1),
			of(func(r restoreResult) float64 { return r.perSec() / r.rawPerSec() }).format(2))
		fmt.Fprintf(b, "| franz-go, raw consume | %d | %s | %s | %s | %s | |\n", len(runs), of(func(r restoreResult) float64 { return float64(r.RawRecords) }).format(0),
			of(func(r restoreResult) float64 { return r.RawSeconds }).format(3), of(restoreResult.rawPerSec).format(0), of(restoreResult.rawMBPerSec).format(1))
		fmt.Fprintf(b, "\nFrom the restoring process's start to ready (joining the group included): %s s.\n\n", of(func(r restoreResult) float64 { return r.StartToReady }).format(2))
	}
	if runs := byPhase["commands"]; len(runs) > 0 {
		fmt.Fprintf(b, "### Commands\n\nThe command round trip: `aggregate.Client.Submit` in this process, from the command's due time to its outcome,"+
			" to an instance of the inventory aggregate (internal/fixtures/inventory) exactly once at the engine's default configuration (commit"+
			" interval 100 ms), %d partitions. Each command is a ReceiveShipment to one of %d aggregates in turn; each outcome must be Accepted,"+
			" and at the end each aggregate's state in its store's changelog (read committed) must be what its accepted commands make it.\n\n",
			c.partitions, p.CommandTargets)
		loads("command", "commands", runs, p.CommandMaxP99)
	}

	fmt.Fprintf(b, "Targets (issue 28), each judged on its interval:\n\n")
	fixedAt := func(runs []phaseRun, rate float64, f func(loadResult) float64) summary {
		var xs []float64
		for _, x := range runs {
			for _, l := range x.Fixed {
				if l.Rate == rate {
					xs = append(xs, f(l))
				}
			}
		}
		return summarize(xs)
	}
	p99ms := func(r loadResult) float64 { return float64(r.P99) / float64(time.Millisecond) }
	if runs := byPhase["http-read"]; len(runs) > 0 {
		s := fixedAt(runs, targetHTTPRate, p99ms)
		fmt.Fprintf(b, "- HTTP point reads at %d/s: p99 %s ms, target < %.0f ms: %s\n", targetHTTPRate, s.format(2), targetHTTPP99, judge(s, targetHTTPP99, false))
	}
	if runs := byPhase["restore"]; len(runs) > 0 {
		var xs []float64
		for _, x := range runs {
			xs = append(xs, x.Restore.perSec()/x.Restore.rawPerSec())
		}
		s := summarize(xs)
		fmt.Fprintf(b, "- Restore: %s× the raw consume's records/s, target ≥ %.1f×: %s\n", s.format(2), targetRestore, judge(s, targetRestore, true))
	}
	if runs := byPhase["commands"]; len(runs) > 0 {
		s := fixedAt(runs, p.CommandRate, p99ms)
		fmt.Fprintf(b, "- Commands at %.0f/s: p99 %s ms, target < %.0f ms: %s\n", p.CommandRate, s.format(1), targetCommandP99, judge(s, targetCommandP99, false))
		m := maxRate(runs)
		fmt.Fprintf(b, "- Commands sustained: %s%s/s, target ≥ %d/s: %s\n", m.format(0), unbounded(runs), targetCommandRate, judge(m, targetCommandRate, true))
	}
	fmt.Fprintln(b)
}

// maxRate summarizes the searches' highest rates sustained.
func maxRate(runs []phaseRun) summary {
	var xs []float64
	for _, x := range runs {
		xs = append(xs, x.Search.Max)
	}
	return summarize(xs)
}

// unbounded marks a search that sustained every step.
func unbounded(runs []phaseRun) string {
	for _, x := range runs {
		if !x.Search.Bounded && len(x.Search.Steps) > 0 {
			return " (≥: not bounded)"
		}
	}
	return ""
}

// everyPhase is the appendix of the phases: each load, fixed or a step of
// a search, and each restore.
func (r *report) everyPhase(b *strings.Builder, c benchConfig) {
	if len(r.phases) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Every phase\n\nThe loads, in the order they ran; the steps are the search's.\n\n")
	fmt.Fprintln(b, "| Repetition | Phase | Load | Offered/s | Right/s | p50 ms | p99 ms | p99.9 ms | Errors | Wrong | Late p99 ms | CPUs: generator, server, broker | Sustained |")
	fmt.Fprintln(b, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
	var restores []phaseRun
	for _, x := range r.phases {
		if x.Phase == "restore" {
			restores = append(restores, x)
			continue
		}
		limit := map[string]time.Duration{"http-read": c.phases.HTTPMaxP99, "commands": c.phases.CommandMaxP99}[x.Phase]
		row := func(load string, l loadResult, sustained string) {
			fmt.Fprintf(b, "| %d | %s | %s | %.0f | %.0f | %s | %s | %s | %d | %d | %s | %s, %s, %s | %s |\n", x.Rep+1, x.Phase, load, l.Rate, l.Achieved,
				msNum(l.P50), msNum(l.P99), msNum(l.P999), l.Errors, l.Wrong, msNum(l.LateP99), cpuNum(l.GeneratorCPU), cpuNum(l.ServerCPU),
				cpuNum(l.BrokerCPU), sustained)
		}
		for _, l := range x.Fixed {
			row("fixed", l, "")
		}
		for i, l := range x.Search.Steps {
			mark := "no"
			if l.sustained(limit) {
				mark = "yes"
			}
			if l.Rate == x.Search.Max {
				mark += ", the highest"
			}
			row(fmt.Sprintf("step %d", i+1), l, mark)
		}
	}
	if len(restores) > 0 {
		fmt.Fprintln(b)
		fmt.Fprintln(b, "| Repetition | Restored records | Restore s | Records/s | MB/s | Start to ready s | Raw consume records | Raw s | Raw records/s | Raw MB/s |")
		fmt.Fprintln(b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, x := range restores {
			e := x.Restore
			fmt.Fprintf(b, "| %d | %d | %.3f | %s | %s | %.2f | %d | %.3f | %s | %s |\n", x.Rep+1, e.Records, e.Seconds, num(e.perSec(), 0), num(e.mbPerSec(), 1),
				e.StartToReady, e.RawRecords, e.RawSeconds, num(e.rawPerSec(), 0), num(e.rawMBPerSec(), 1))
		}
	}
}

func cpuNum(x float64) string {
	if x < 0 {
		return "–"
	}
	return num(x, 2)
}

func msNum(d time.Duration) string { return num(float64(d)/float64(time.Millisecond), 2) }
