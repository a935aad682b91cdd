package main

import (
	"context"
	"math"
	"testing"
	"time"
)

// A server that stalls: an open loop keeps sending on schedule, and each
// request's latency counts from when it was due, so the requests due
// during the stall show it, though each was answered at once once sent.
func TestSummarizeLoadFromDueTime(t *testing.T) {
	const rate = 1000 // a request a millisecond
	var samples []sample
	for i := range 2000 {
		due := time.Duration(i) * time.Millisecond
		s := sample{due: due, sent: due, done: due + 100*time.Microsecond}
		// Stalled from 1,500 ms to 1,600 ms: what was due then is answered
		// at 1,600 ms, though the generator sent it on time.
		if due >= 1500*time.Millisecond && due < 1600*time.Millisecond {
			s.done = 1600 * time.Millisecond
		}
		samples = append(samples, s)
	}
	samples[1700].outcome = reqWrong
	samples[1701].outcome = reqError
	samples[10].outcome = reqError // in the warm-up: not counted
	r := summarizeLoad(rate, time.Second, 2*time.Second, samples)
	if r.Requests != 1000 || r.Wrong != 1 || r.Errors != 1 {
		t.Fatalf("%d requests, %d wrong, %d errors; want 1000, 1, 1", r.Requests, r.Wrong, r.Errors)
	}
	// 100 of the 1000 (10%) waited 1–100 ms: p50 is an answer at once,
	// p99 and p99.9 are in the stall.
	if r.P50 != 100*time.Microsecond {
		t.Errorf("p50 %s, want 100µs", r.P50)
	}
	if r.P99 != 90*time.Millisecond || r.P999 != 99*time.Millisecond {
		t.Errorf("p99 %s, p99.9 %s; want 90ms and 99ms (from the due times)", r.P99, r.P999)
	}
	if math.Abs(r.Achieved-998) > 1 || r.LateP99 != 0 {
		t.Errorf("achieved %.1f/s, late %s; want 998/s, 0", r.Achieved, r.LateP99)
	}
}

// A server that answers 500 a second, offered 1,000: it answers 500 a
// second, and the requests wait ever longer.
func TestSummarizeLoadOverloaded(t *testing.T) {
	var samples []sample
	free := time.Duration(0)
	for i := range 2000 {
		due := time.Duration(i) * time.Millisecond
		free = max(free, due) + 2*time.Millisecond
		samples = append(samples, sample{due: due, sent: due, done: free})
	}
	r := summarizeLoad(1000, time.Second, 2*time.Second, samples)
	if math.Abs(r.Achieved-500) > 1 || r.P50 < time.Second || r.P99 < 1900*time.Millisecond {
		t.Errorf("%s; want 500/s answered, p50 over 1s, p99 near 2s", r)
	}
}

// The generator's own lateness counts: a request sent late is measured from
// when it was due.
func TestSummarizeLoadLateSend(t *testing.T) {
	samples := []sample{{due: 0, sent: 5 * time.Millisecond, done: 6 * time.Millisecond}}
	r := summarizeLoad(1, 0, time.Second, samples)
	if r.P50 != 6*time.Millisecond || r.LateP99 != 5*time.Millisecond {
		t.Errorf("p50 %s, late %s; want 6ms, 5ms", r.P50, r.LateP99)
	}
}

func TestRateSearch(t *testing.T) {
	// A server that carries up to 2,600 a second.
	carry := func(rate float64) loadResult {
		r := loadResult{Rate: rate, Requests: 100, Achieved: rate, P99: time.Millisecond}
		if rate > 2600 {
			r.Achieved = 2600
		}
		return r
	}
	ok := func(r loadResult) bool { return r.sustained(10 * time.Millisecond) }
	s := newRateSearch(2, 2, 20, ok)
	var offered []float64
	for rate, more := 500.0, true; more; {
		offered = append(offered, rate)
		rate, more = s.record(carry(rate))
	}
	// Doubling: 500, 1000, 2000 sustained, 4000 not; bisecting: 3000 not,
	// 2500 sustained.
	want := []float64{500, 1000, 2000, 4000, 3000, 2500}
	if len(offered) != len(want) {
		t.Fatalf("offered %v, want %v", offered, want)
	}
	for i := range want {
		if offered[i] != want[i] {
			t.Fatalf("offered %v, want %v", offered, want)
		}
	}
	if s.pass != 2500 || s.fail != 3000 {
		t.Errorf("sustained up to %.0f, not at %.0f; want 2500, 3000", s.pass, s.fail)
	}
	// A p99 over the limit or an error is not sustained.
	if ok(loadResult{Rate: 10, Requests: 10, Achieved: 10, P99: time.Second}) || ok(loadResult{Rate: 10, Requests: 10, Achieved: 10, Errors: 1}) {
		t.Error("a slow or failing step sustained")
	}
	// Out of steps, every one sustained: unbounded.
	s = newRateSearch(1.5, 2, 3, ok)
	n := 0
	for rate, more := 100.0, true; more; n++ {
		rate, more = s.record(carry(rate))
	}
	if n != 3 || s.pass != 225 || s.fail != 0 {
		t.Errorf("%d steps, sustained up to %.0f, failed at %.0f; want 3, 225, none", n, s.pass, s.fail)
	}
	// The first step fails: down by the factor until one is sustained,
	// then bisected.
	s = newRateSearch(2, 1, 10, ok)
	offered = nil
	for rate, more := 12000.0, true; more; {
		offered = append(offered, rate)
		rate, more = s.record(carry(rate))
	}
	if want := []float64{12000, 6000, 3000, 1500, 2250}; len(offered) != len(want) || offered[3] != 1500 || offered[4] != 2250 || s.pass != 2250 {
		t.Errorf("from a step not sustained: offered %v, sustained up to %.0f; want %v, 2250", offered, s.pass, want)
	}
}

// The generator sends on schedule whatever the answers: a request that
// takes long does not hold back the next ones.
func TestRunOpenLoop(t *testing.T) {
	release := make(chan struct{})
	do := func(ctx context.Context, i int) (reqOutcome, string) {
		if i == 0 {
			select {
			case <-release:
			case <-ctx.Done():
				return reqError, "timeout"
			}
		}
		if i == 50 {
			close(release)
		}
		return reqOK, ""
	}
	r, err := runOpenLoop(context.Background(), loadSpec{rate: 500, warmup: 0, measure: 200 * time.Millisecond, timeout: 5 * time.Second}, 0, do)
	if err != nil {
		t.Fatal(err)
	}
	// Request 0 is answered once request 50 (due at 100 ms) is sent.
	if r.Requests != 100 || r.Errors != 0 || r.P999 < 90*time.Millisecond {
		t.Errorf("%s; want 100 requests, no error, p99.9 ≥ 90ms", r)
	}
	// One worker: the requests due while request 0 is answered wait for
	// it, and the wait counts.
	slow := func(ctx context.Context, i int) (reqOutcome, string) {
		if i == 0 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return reqOK, ""
	}
	r, err = runOpenLoop(context.Background(), loadSpec{rate: 500, measure: 200 * time.Millisecond, timeout: 5 * time.Second, workers: 1}, 0, slow)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 100 || r.P99 < 90*time.Millisecond || r.LateP99 < 80*time.Millisecond {
		t.Errorf("one worker, the first request slow: %s; want p99 ≥ 90ms, late p99 ≥ 80ms", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, workers := range []int{0, 4} {
		if _, err := runOpenLoop(ctx, loadSpec{rate: 10, measure: time.Hour, timeout: time.Second, workers: workers}, 0, do); err == nil {
			t.Errorf("a cancelled load (%d workers) returned no error", workers)
		}
	}
}
