package main

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Three parts of a run, written as -results writes them, merge into one
// report: the second part's repetitions, which the first has in the same
// configuration, numbered on after the first's; the third's, of another
// configuration, kept.
func TestResultsMerge(t *testing.T) {
	c := benchConfig{brokers: []string{"127.0.0.1:9092"}, records: 1000, keys: 10, partitions: 6, valueSize: 100, commitMs: 1000,
		cacheBytes: 10 << 20, threads: 2, liveRate: 5000, liveFor: time.Minute, liveWarmup: 15 * time.Second}
	c.tuned = tunedConfig(tunedBatchBytes, tunedLinger, tunedCompression)
	x := run{rep: 1, seq: 3, config: "tuned", engine: "oxbow", topology: "count", guarantee: "eos", seconds: 2, recordsPerSec: 500,
		moved: moved{1000, 10, 10}, steady: steady{ok: true, seconds: 1.5, moved: moved{700, 7, 7}, cpu: 1.2, brokerCPU: 0.4}, peakRSSMB: 90,
		lat:   latencies{p50: time.Millisecond, p99: 2 * time.Millisecond, p999: 3 * time.Millisecond, samples: 9},
		check: verdict{records: 10}, liveCheck: verdict{records: 9, wrong: 1, example: "key k1"}}
	if got := toRecord(x).run(); !reflect.DeepEqual(got, x) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, x)
	}
	c.phases = defaultPhaseSettings()
	phase := phaseRun{Phase: "commands", Fixed: []loadResult{{Rate: 200, Achieved: 199, Requests: 6000, P50: 20 * time.Millisecond, P99: 40 * time.Millisecond}},
		Search: searchResult{Steps: []loadResult{{Rate: 200, Achieved: 200, Requests: 2000}, {Rate: 300, Achieved: 200, Requests: 3000}}, Max: 200, Bounded: true}}
	dir := t.TempDir()
	var paths []string
	for i, cfg := range []string{"tuned", "tuned", "defaults"} {
		rep := &report{started: time.Now(), pin: &pinning{note: "pinned"}}
		path := filepath.Join(dir, fmt.Sprintf("part%d.jsonl", i))
		paths = append(paths, path)
		w, err := openResults(path, c, rep)
		if err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			y := x
			y.config, y.rep = cfg, r
			y.liveCheck.wrong = i % 2 // wrong outputs in the second part
			if err := w.write(toRecord(y)); err != nil {
				t.Fatal(err)
			}
			if cfg == "tuned" {
				pr := phase
				pr.Rep = r
				if err := w.write(phaseLine{Phase: pr.Phase, Run: pr, Finished: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.close(); err != nil {
			t.Fatal(err)
		}
	}
	var m benchConfig
	rep, err := merge(paths, &m)
	if err != nil {
		t.Fatal(err)
	}
	if m.reps != 4 || m.latencyReps != 4 || len(m.configs) != 2 || m.configName != "both" || m.records != 1000 || m.commitMs != 1000 {
		t.Errorf("merged config: %d reps, %d with latency, %d configs (%s), %d records, commit %d ms", m.reps, m.latencyReps, len(m.configs), m.configName, m.records, m.commitMs)
	}
	var reps []string
	for _, r := range rep.runs {
		reps = append(reps, fmt.Sprint(r.config, r.rep))
	}
	if !reflect.DeepEqual(reps, []string{"tuned0", "defaults0", "tuned1", "defaults1", "tuned2", "tuned3"}) || len(rep.mismatches) != 2 || len(rep.merged) != 3 {
		t.Errorf("merged runs' repetitions %v, mismatches %q, parts %q", reps, rep.mismatches, rep.merged)
	}
	if text := rep.markdown(m); !strings.Contains(text, "Merged (`go run ./bench -merge`) from 3 parts") || !strings.Contains(text, "## Configuration: aligned and tuned") ||
		!strings.Contains(text, "| 200 | 4 | 199 [199–199] | 20.00 [20.00–20.00] | 40.00 [40.00–40.00] |") || !strings.Contains(text, "- Commands sustained: 200 [200–200]/s") {
		t.Errorf("report:\n%s", text)
	}
	// The phases' repetitions are numbered on as the runs' are.
	var phaseReps []int
	for _, p := range rep.phases {
		phaseReps = append(phaseReps, p.Rep)
	}
	if !reflect.DeepEqual(phaseReps, []int{0, 1, 2, 3}) || !reflect.DeepEqual(rep.phases[0].Search, phase.Search) {
		t.Errorf("merged phases: repetitions %v, search %+v", phaseReps, rep.phases[0].Search)
	}
	c.records = 2000
	rep2 := &report{started: time.Now(), pin: &pinning{}}
	w, _ := openResults(filepath.Join(dir, "other.jsonl"), c, rep2)
	w.close()
	if _, err := merge([]string{paths[0], filepath.Join(dir, "other.jsonl")}, &benchConfig{}); err == nil {
		t.Error("parts of different inputs merged")
	}
}
