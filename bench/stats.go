package main

import (
	"fmt"
	"math"
	"slices"
)

// summary is the median of a figure over the repetitions and a
// distribution-free confidence interval for it, from order statistics:
// with the n values sorted, [x(k), x(n+1-k)] holds the true median with
// probability 1 − 2·P(B ≤ k−1), B binomial(n, ½), whatever the
// distribution. k is the largest that keeps that at 95% at least; with
// fewer than 6 values none does, and the interval is [min, max] with its
// coverage below 95% (n = 5: 93.75%), stated next to it.
type summary struct {
	n        int // values (NaNs, figures a run did not have, left out)
	median   float64
	lo, hi   float64
	coverage float64 // of [lo, hi]; 0 for n < 2
}

func summarize(xs []float64) summary {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	s := summary{n: len(v), median: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	if len(v) == 0 {
		return s
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		s.median = v[n/2]
	} else {
		s.median = (v[n/2-1] + v[n/2]) / 2
	}
	s.lo, s.hi = v[0], v[n-1]
	if n < 2 {
		return s
	}
	k, cov := orderStatistic(n, 0.95)
	s.lo, s.hi, s.coverage = v[k-1], v[n-k], cov
	return s
}

// orderStatistic is the largest k ≤ n/2 for which [x(k), x(n+1-k)] covers
// the median with probability at least level, and that probability; k = 1
// (min and max) if none does.
func orderStatistic(n int, level float64) (int, float64) {
	k, cov := 1, coverage(n, 1)
	for j := 2; j <= n/2; j++ {
		c := coverage(n, j)
		if c < level {
			break
		}
		k, cov = j, c
	}
	return k, cov
}

// coverage is 1 − 2·P(B ≤ k−1) for B binomial(n, ½).
func coverage(n, k int) float64 {
	tail := 0.0
	for i := 0; i < k; i++ {
		tail += binom(n, i) / math.Pow(2, float64(n))
	}
	return 1 - 2*tail
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// format renders the median and interval: "812,345 [790,001–830,442]".
func (s summary) format(decimals int) string {
	if s.n == 0 {
		return "–"
	}
	if s.n == 1 {
		return num(s.median, decimals)
	}
	return fmt.Sprintf("%s [%s–%s]", num(s.median, decimals), num(s.lo, decimals), num(s.hi, decimals))
}

// clears: the whole interval is at least (above) or at most (!above) the
// target. Never with one value: a run alone has no interval.
func (s summary) clears(target float64, above bool) bool {
	if s.n < 2 {
		return false
	}
	if above {
		return s.lo >= target
	}
	return s.hi <= target
}
