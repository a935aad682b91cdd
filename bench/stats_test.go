package main

import (
	"math"
	"testing"
)

func TestOrderStatisticInterval(t *testing.T) {
	for _, c := range []struct {
		n, k int
		cov  float64
	}{{2, 1, 0.5}, {5, 1, 0.9375}, {6, 1, 0.96875}, {8, 1, 0.9921875}, {9, 2, 0.9609375}, {10, 2, 0.978515625}, {20, 6, 0.958610535}} {
		k, cov := orderStatistic(c.n, 0.95)
		if k != c.k || math.Abs(cov-c.cov) > 1e-6 {
			t.Errorf("n=%d: k=%d coverage %.6f, want k=%d %.6f", c.n, k, cov, c.k, c.cov)
		}
	}
	s := summarize([]float64{5, 1, math.NaN(), 4, 2, 3})
	if s.n != 5 || s.median != 3 || s.lo != 1 || s.hi != 5 || s.coverage != 0.9375 {
		t.Errorf("summary %+v", s)
	}
	if !s.clears(1, true) || s.clears(1.5, true) || !s.clears(5, false) {
		t.Errorf("clears %+v", s)
	}
	if one := summarize([]float64{7}); one.clears(1, true) || one.format(0) != "7" {
		t.Errorf("one value: %+v %q", one, one.format(0))
	}
	if even := summarize([]float64{1, 2, 3, 4}); even.median != 2.5 {
		t.Errorf("median of 1..4: %v", even.median)
	}
}
