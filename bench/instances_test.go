package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A PROGRESS line reads back as it was printed; a line missing a field
// or with a bad number is refused.
func TestProgressLine(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	line := formatProgress(now, []string{"0_3", "0_11"}, 1, 4567, map[string]int64{"0_1": 10, "0_2": 5})
	s, err := parseProgress(line)
	if err != nil {
		t.Fatal(err)
	}
	if !s.at.Equal(now) || !slices.Equal(s.active, []string{"0_11", "0_3"}) || s.restoring != 1 || s.restored != 4567 || s.standbys != 2 || s.lag != 15 {
		t.Errorf("%q read as %+v", line, s)
	}
	none, err := parseProgress(formatProgress(now, nil, 0, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	if none.active != nil || none.standbys != 0 {
		t.Errorf("no tasks read as %+v", none)
	}
	for _, bad := range []string{"READY", "PROGRESS ms=1 active=- restoring=0 restored=0 standbys=0", "PROGRESS ms=x active=- restoring=0 restored=0 standbys=0 lag=0"} {
		if _, err := parseProgress(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// looksAt builds looks every 100 ms from t0: offsets[i] is look i's.
func looksAt(t0 time.Time, offsets ...map[int32]int64) []commitLook {
	var ls []commitLook
	for i, o := range offsets {
		ls = append(ls, commitLook{at: t0.Add(time.Duration(i) * 100 * time.Millisecond), offsets: o})
	}
	return ls
}

func TestLongestStall(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ends := map[int32]int64{0: 100, 1: 100, 2: 0}
	// Partition 0 advances every look; partition 1 stands still from look
	// 2 to look 7 (500 ms), then reaches its end at look 8 and stays there.
	looks := looksAt(t0,
		map[int32]int64{0: 10, 1: 10},
		map[int32]int64{0: 20, 1: 20},
		map[int32]int64{0: 30, 1: 30},
		map[int32]int64{0: 40, 1: 30},
		map[int32]int64{0: 50, 1: 30},
		map[int32]int64{0: 60, 1: 30},
		map[int32]int64{0: 70, 1: 30},
		map[int32]int64{0: 80, 1: 50},
		map[int32]int64{0: 90, 1: 100},
		map[int32]int64{0: 95, 1: 100},
		map[int32]int64{0: 99, 1: 100},
		map[int32]int64{0: 99, 1: 100},
		map[int32]int64{0: 99, 1: 100},
	)
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     time.Duration
		part     int32
	}{
		{"the whole run: partition 1's pause; at its end it stands still but is done", ms(0), ms(1200), 500 * time.Millisecond, 1},
		{"a window cuts the pause at its start", ms(450), ms(800), 250 * time.Millisecond, 1},
		{"and at its end", ms(150), ms(400), 200 * time.Millisecond, 1},
		{"partition 0 not at its end stands still until to", ms(800), ms(1200), 200 * time.Millisecond, 0},
		{"nothing stands still for longer than the looks apart", ms(0), ms(200), 100 * time.Millisecond, 0},
	} {
		got, part := longestStall(looks, ends, c.from, c.to)
		if got != c.want || part != c.part {
			t.Errorf("%s: %v on partition %d, want %v on %d", c.name, got, part, c.want, c.part)
		}
	}
	// A partition with no commit at all stands still from from to to.
	if got, part := longestStall(looks, map[int32]int64{3: 10}, ms(100), ms(600)); got != 500*time.Millisecond || part != 3 {
		t.Errorf("a partition never committed: %v on %d", got, part)
	}
}

func TestSettledAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ends := map[int32]int64{0: 100, 1: 100}
	looks := looksAt(t0,
		map[int32]int64{0: 10, 1: 10},
		map[int32]int64{0: 20, 1: 10},
		map[int32]int64{0: 30, 1: 10}, // the first look after since: the base
		map[int32]int64{0: 40, 1: 11}, // both past it
		map[int32]int64{0: 50, 1: 12},
	)
	at, ok := settledAt(looks, ends, t0.Add(150*time.Millisecond))
	if !ok || !at.Equal(t0.Add(300*time.Millisecond)) {
		t.Errorf("settled at %v (%v), want look 3", at.Sub(t0), ok)
	}
	// A partition at its end counts as settled.
	at, ok = settledAt(looksAt(t0, map[int32]int64{0: 10, 1: 100}, map[int32]int64{0: 11, 1: 100}), ends, t0)
	if !ok || !at.Equal(t0.Add(100*time.Millisecond)) {
		t.Errorf("with a partition at its end: settled at %v (%v), want look 1", at.Sub(t0), ok)
	}
	if _, ok := settledAt(looks, ends, t0.Add(time.Second)); ok {
		t.Error("settled with no look after since")
	}
}

func TestLastActiveChange(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := func(ms int, active ...string) progressSample {
		return progressSample{at: t0.Add(time.Duration(ms) * time.Millisecond), active: active}
	}
	a := []progressSample{s(0), s(100, "0_0", "0_1"), s(200, "0_0", "0_1"), s(700, "0_0"), s(800, "0_0")}
	b := []progressSample{s(0, "0_2"), s(500, "0_2"), s(600, "0_1", "0_2"), s(900, "0_1", "0_2")}
	joiner := []progressSample{s(300), s(400)}
	at, ok := lastActiveChange([][]progressSample{a, b, joiner}, t0.Add(250*time.Millisecond))
	if !ok || !at.Equal(t0.Add(700*time.Millisecond)) {
		t.Errorf("last change at %v (%v), want 700ms", at.Sub(t0), ok)
	}
	if _, ok := lastActiveChange([][]progressSample{a, b, joiner}, t0.Add(750*time.Millisecond)); ok {
		t.Error("a change found after the last")
	}
	// An instance's first tasks are a change.
	at, ok = lastActiveChange([][]progressSample{{s(0), s(300, "0_5")}}, t0)
	if !ok || !at.Equal(t0.Add(300*time.Millisecond)) {
		t.Errorf("first tasks at %v (%v), want 300ms", at.Sub(t0), ok)
	}
}

// -curves-render draws the instances curve from its points: its table
// and its three plots, a point without a move (one instance) included.
func TestInstancesReadme(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "instances.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for _, p := range []curvePoint{
		{Curve: "instances", X: 1, Values: map[string]float64{"records_per_s": 1e6, "join_pause_s": 1.2, "join_settle_s": 2, "steady_pause_s": 1}},
		{Curve: "instances", X: 2, Values: map[string]float64{"records_per_s": 9e5, "join_pause_s": 1.4, "join_settle_s": 3, "steady_pause_s": 1.1,
			"move_warm_s": 3.1, "move_cold_s": 5.5, "move_cold_assigned_s": 3, "move_cold_restored": 1e6}},
	} {
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if err := writeCurvesReadme(dir); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Instances of one application", "| 2 | 1 | 900,000 |", "| 5.5 |", "![One more instance joining](instances-rebalance.png)"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("the README lacks %q:\n%s", want, readme)
		}
	}
	for _, pl := range curveDocs["instances"].plots {
		fi, err := os.Stat(filepath.Join(dir, pl.file))
		if err != nil || fi.Size() == 0 {
			t.Errorf("plot %s: %v", pl.file, err)
		}
	}
}
