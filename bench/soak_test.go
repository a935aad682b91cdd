package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A series is flat when its fitted line moves over the window by no more
// than the noise about it or 5% of its mean; a steady climb is not, even
// under noise.
func TestFitLine(t *testing.T) {
	ts := make([]float64, 60)
	for i := range ts {
		ts[i] = float64(i * 10)
	}
	series := func(f func(i int, t float64) float64) []float64 {
		ys := make([]float64, len(ts))
		for i, t := range ts {
			ys[i] = f(i, t)
		}
		return ys
	}
	saw := func(i int, _ float64) float64 { return 100 + float64(i%6)*8 } // a heap's saw: 100 to 140
	for _, c := range []struct {
		name string
		ys   []float64
		flat bool
	}{
		{"constant", series(func(int, float64) float64 { return 150 }), true},
		{"saw", series(saw), true},
		{"saw on a slow drift under 5%", series(func(i int, t float64) float64 { return saw(i, t) + t*0.005 }), true},
		{"a climb of 20% over the window", series(func(_ int, t float64) float64 { return 100 + t*20.0/590 }), false},
		{"saw on a climb of 50%", series(func(i int, t float64) float64 { return saw(i, t) + t*60.0/590 }), false},
		{"one more goroutine a minute", series(func(_ int, t float64) float64 { return 120 + math.Floor(t/60) }), false},
	} {
		f := fitLine("s", "s", "", ts, c.ys)
		if f.Flat != c.flat {
			t.Errorf("%s: %s, want flat %v", c.name, f, c.flat)
		}
	}
	if f := fitLine("s", "s", "", ts[:soakMinSamples-1], make([]float64, soakMinSamples-1)); f.Flat {
		t.Errorf("%d samples judged flat: %s", soakMinSamples-1, f)
	}
	// The fit itself: y = 3 + 2t.
	f := fitLine("s", "s", "", []float64{0, 1, 2, 3, 4, 5}, []float64{3, 5, 7, 9, 11, 13})
	if math.Abs(f.Slope-2) > 1e-9 || math.Abs(f.Intercept-3) > 1e-9 || f.Resid > 1e-9 || f.Window != 5 {
		t.Errorf("fit of y = 3 + 2t: %+v", f)
	}
}

// The soak's README has a row a series with its verdict, the warm-up left
// out of the fits, and a plot a series.
func TestWriteSoak(t *testing.T) {
	r := soakResult{Settings: "-soak 5m", Revision: "abc", Warmup: 60, Commands: 10, Accepted: 7, Rejected: 3, FeedEvents: 7}
	for i := range 30 {
		v := map[string]float64{"rss_mb": 230 + float64(i), "rss_apart_mb": 200, "state_memory_mb": 30 + float64(i), "state_memory_bound_mb": 100, "heap_mb": 40 + float64(i%3), "goroutines": 100, "open_fds": 60, "state_tables_mb": 1 + float64(i),
			"state_wal_mb": float64(i), "state_wal_bound_mb": 48}
		if i < 6 {
			v["rss_apart_mb"] = 1000 // the warm-up's, left out
		}
		r.Samples = append(r.Samples, soakSample{At: float64(i * 10), Values: v})
	}
	fits := r.fit()
	verdict := map[string]bool{}
	for _, f := range fits {
		verdict[f.Series] = f.Flat
		if f.N != 24 {
			t.Errorf("%s fitted on %d samples, want the 24 after the warm-up", f.Series, f.N)
		}
	}
	if !verdict["rss_apart_mb"] || !verdict["state_memory_mb"] || !verdict["goroutines"] || verdict["state_tables_mb"] || !verdict["state_wal_mb"] {
		t.Errorf("verdicts %v: want RSS and goroutines flat (the warm-up left out), the tables not, the logs under their bound", verdict)
	}
	r.Samples[3].Values["state_wal_mb"] = 49 // in the warm-up: the bound holds throughout
	if f := r.fit()[7]; f.Series != "state_wal_mb" || f.Flat || f.Max != 49 {
		t.Errorf("logs over their bound in the warm-up: %s", f)
	}
	dir := t.TempDir()
	if err := writeSoak(dir, r, fits); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| resident memory apart from the state store's | 24 | 200 MiB |", "the sum of the next two", "| state on disk: tables | 24 |", "**not flat**", "under its bound (at most 29)", "![goroutines](soak-goroutines.png)", "10 commands answered (7 accepted, 3 rejected"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("README lacks %q:\n%s", want, md)
		}
	}
	for _, s := range soakSeries {
		if _, err := os.Stat(filepath.Join(dir, "soak-"+strings.ReplaceAll(s.name, "_", "-")+".png")); err != nil {
			t.Error(err)
		}
	}
}

// The logs' bound is 2 × (stop-writes threshold + 1) × memtable size a
// store, the memory's (threshold + 2) × memtable size plus the block
// cache, read from each store's newest OPTIONS file.
func TestStateDisk(t *testing.T) {
	dir := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := func(size, threshold int) string {
		return fmt.Sprintf("[Options]\n  cache_size=1000\n  mem_table_size=%d\n  mem_table_stop_writes_threshold=%d\n", size, threshold)
	}
	write(filepath.Join(dir, "a", "OPTIONS-000003"), opts(1000, 9)) // superseded
	write(filepath.Join(dir, "a", "OPTIONS-000007"), opts(1<<20, 2))
	write(filepath.Join(dir, "a", "000004.log"), strings.Repeat("x", 300))
	write(filepath.Join(dir, "b", "OPTIONS-000003"), opts(2<<20, 4))
	write(filepath.Join(dir, "b", "000005.log"), strings.Repeat("x", 200))
	write(filepath.Join(dir, "b", "000006.sst"), strings.Repeat("x", 100))
	tables, logs, bound, memBound, err := stateDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	optBytes := float64(len(opts(1000, 9)) + len(opts(1<<20, 2)) + len(opts(2<<20, 4)))
	if want := float64(4*(1<<20) + 1000 + 6*(2<<20) + 1000); memBound != want {
		t.Errorf("memory bound %v, want %v", memBound, want)
	}
	if logs != 500 || tables != 100+optBytes || bound != 2*(3*(1<<20)+5*(2<<20)) {
		t.Errorf("stateDisk = tables %v, logs %v, bound %v; want %v, 500, %v", tables, logs, bound, 100+optBytes, 2*(3*(1<<20)+5*(2<<20)))
	}
}
