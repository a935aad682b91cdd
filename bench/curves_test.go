package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

func TestFmtNum(t *testing.T) {
	for v, want := range map[float64]string{12: "12", 12.5: "12.5", 0.1234: "0.123", 1234567: "1,230,000", 999.6: "1,000", 250: "250", -4321: "-4,320"} {
		if got := fmtNum(v); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", v, got, want)
		}
	}
}

// The README's cells are the medians over the repetitions with their
// range, and every plot is drawn, one line of medians a series.
func TestCurvesReadme(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "keys.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for i, v := range []float64{300, 100, 200} {
		if err := enc.Encode(curvePoint{Curve: "keys", X: 1000, Rep: i, Values: map[string]float64{"records_per_s": v, "peak_rss_mb": 50}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Encode(curvePoint{Curve: "keys", X: 10, Rep: 0, Values: map[string]float64{"records_per_s": 7}}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := writeCurvesReadme(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{"| 10 | 1 | – | 7 |", "| 1,000 | 3 | – | 200 [100–300] |", "![Count throughput against keys](keys-throughput.png)"} {
		if !strings.Contains(md, want) {
			t.Errorf("README lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "## Restore") {
		t.Error("README has a section for a curve with no points")
	}
	img, err := os.Open(filepath.Join(dir, "keys-throughput.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	cfg, err := png.DecodeConfig(img)
	if err != nil {
		t.Fatalf("keys-throughput.png: %v", err)
	}
	if cfg.Width < 300 || cfg.Height < 200 {
		t.Errorf("the throughput plot is %d×%d pixels", cfg.Width, cfg.Height)
	}
	d := seriesData(curveDocs["keys"].plots[0], readPoints(t, filepath.Join(dir, "keys.jsonl")))
	if len(d[0].dots) != 4 || len(d[0].medians) != 2 || d[0].medians[1] != (plotter.XY{X: 1000, Y: 200}) {
		t.Errorf("the throughput series is drawn as %d dots and medians %v, want 4 dots (one a repetition) and medians at 10 and 1,000 (200)", len(d[0].dots), d[0].medians)
	}
}

func readPoints(t *testing.T, path string) []curvePoint {
	t.Helper()
	pts, err := readCurve(path)
	if err != nil {
		t.Fatal(err)
	}
	return pts
}

// scramble is a permutation of 0..n-1 (every index once) that moves
// neighbours apart, for sizes with and without common factors.
func TestScramble(t *testing.T) {
	for _, n := range []int{1, 2, 6, 1000, 9009, 900900} {
		f := scramble(n)
		seen := make([]bool, n)
		adjacent := 0
		for i := range n {
			j := f(i)
			if j < 0 || j >= n || seen[j] {
				t.Fatalf("n=%d: %d -> %d, out of range or twice", n, i, j)
			}
			seen[j] = true
			if i > 0 && (j == f(i-1)+1 || j == f(i-1)-1) {
				adjacent++
			}
		}
		if n >= 1000 && adjacent > n/100 {
			t.Errorf("n=%d: %d neighbours kept next to each other", n, adjacent)
		}
	}
}
