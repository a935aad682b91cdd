package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"
)

// An open-loop load issues requests at a fixed rate on a schedule —
// request i is due at start + i/rate — each when it is due, whatever
// became of the earlier ones, and measures each request's latency from
// when it was due, not from when it went out. A stall of the server (or of
// the generator itself) then delays every request due during it, as the
// users who sent them would see it. A closed loop (send, wait for the
// answer, send the next) sends none of the requests a stall would have
// delayed, and its percentiles hide the stall: coordinated omission.

// loadSpec is one open-loop load: rate requests a second, first for warmup
// (sent, not measured), then for measure; a request not answered within
// timeout of when it was due is an error. With workers, that many
// goroutines send the requests, a request due while every one is busy
// waiting for one (the wait counted: as wrk2's connections); else each
// request has a goroutine of its own.
type loadSpec struct {
	rate            float64
	warmup, measure time.Duration
	timeout         time.Duration
	workers         int
}

// reqOutcome is what became of a request.
type reqOutcome uint8

const (
	reqOK    reqOutcome = iota // answered, and right
	reqWrong                   // answered wrong: a wrong status or value, an outcome not the expected
	reqError                   // no answer: a transport error, a timeout
)

// sample is one request: when it was due, sent and answered (or failed),
// as offsets from the load's start.
type sample struct {
	due, sent, done time.Duration
	outcome         reqOutcome
}

// loadResult is a load's measured part: the requests due in it.
type loadResult struct {
	Rate     float64 // offered, a second
	Achieved float64 // right answers that came in the window (to any request, the warm-up's too), a second
	Seconds  float64 // the measured window
	Requests int     // due in it
	Errors   int     // no answer
	Wrong    int     // answered wrong
	// Latency from when each request was due to its answer (or its
	// failure), over every request of the window.
	P50, P99, P999 time.Duration
	// The generator's own delay, from due to sent (p99): how far behind
	// its schedule it sent; counted in the latencies above.
	LateP99 time.Duration
	Example string `json:",omitempty"` // a wrong answer or an error, the first
	// CPUs busy over the whole load (warm-up included): this process (the
	// generator), the server's and the broker's; -1: not measured.
	GeneratorCPU, ServerCPU, BrokerCPU float64
}

// sustained: the load was carried — answers at 95% of the offered rate at
// least, p99 within maxP99, no error and no wrong answer.
func (r loadResult) sustained(maxP99 time.Duration) bool {
	return r.Requests > 0 && r.Achieved >= 0.95*r.Rate && r.P99 <= maxP99 && r.Errors == 0 && r.Wrong == 0
}

// summarizeLoad measures the window [from, to) of a load at rate: the
// latencies and errors of the requests due in it, and the right answers
// that came in it (a load that is carried answers as many a second as it
// offers; one that is not, as many as the server manages, whatever the
// rate offered).
func summarizeLoad(rate float64, from, to time.Duration, samples []sample) loadResult {
	r := loadResult{Rate: rate, Seconds: (to - from).Seconds()}
	var lat, late []time.Duration
	answered := 0
	for _, s := range samples {
		if s.outcome == reqOK && s.done >= from && s.done < to {
			answered++
		}
		if s.due < from || s.due >= to {
			continue
		}
		r.Requests++
		lat = append(lat, s.done-s.due)
		late = append(late, max(s.sent-s.due, 0))
		switch s.outcome {
		case reqWrong:
			r.Wrong++
		case reqError:
			r.Errors++
		}
	}
	if r.Requests == 0 {
		return r
	}
	slices.Sort(lat)
	slices.Sort(late)
	r.P50, r.P99, r.P999 = quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 0.999)
	r.LateP99 = quantile(late, 0.99)
	r.Achieved = float64(answered) / (to - from).Seconds()
	return r
}

// runOpenLoop runs a load: do(ctx, first+i) is request i, its ctx ending
// timeout after it was due (and with ctx). It returns once every request
// has ended.
func runOpenLoop(ctx context.Context, spec loadSpec, first int, do func(context.Context, int) (reqOutcome, string)) (loadResult, error) {
	return runOpenLoopOn(ctx, spec, first, 0, 0, do)
}

// runOpenLoopOn is runOpenLoop, reading the CPU seconds of this process, of
// the server's (pid server) and of the broker's (pid broker) over the load
// (0: not measured).
func runOpenLoopOn(ctx context.Context, spec loadSpec, first, server, broker int, do func(context.Context, int) (reqOutcome, string)) (loadResult, error) {
	pids := []int{os.Getpid(), server, broker}
	cpu0 := make([]float64, len(pids))
	for i, pid := range pids {
		cpu0[i], _ = cpuSeconds(pid)
	}
	total := int(spec.rate * (spec.warmup + spec.measure).Seconds())
	samples := make([]sample, total)
	var mu sync.Mutex
	example := ""
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	dueOf := func(i int) time.Duration { return time.Duration(float64(i) / spec.rate * float64(time.Second)) }
	start := time.Now()
	send := func(i int) {
		sent := time.Since(start)
		rctx, rcancel := context.WithDeadline(ctx, start.Add(dueOf(i)+spec.timeout))
		o, note := do(rctx, first+i)
		rcancel()
		samples[i] = sample{due: dueOf(i), sent: sent, done: time.Since(start), outcome: o}
		if o != reqOK && note != "" {
			mu.Lock()
			if example == "" {
				example = note
			}
			mu.Unlock()
		}
	}
	var queue chan int
	if spec.workers > 0 {
		// Long-lived goroutines: a goroutine a request would grow its
		// stack through the HTTP client's calls every time.
		queue = make(chan int, total)
		for range spec.workers {
			wg.Go(func() {
				for i := range queue {
					send(i)
				}
			})
		}
	}
	n := 0
dispatch:
	for ; n < total; n++ {
		if wait := dueOf(n) - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break dispatch
			case <-timer.C:
			}
		}
		if queue != nil {
			queue <- n
			continue
		}
		i := n // n is the loop's, shared
		wg.Go(func() { send(i) })
	}
	if queue != nil {
		close(queue)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	elapsed := time.Since(start).Seconds()
	r := summarizeLoad(spec.rate, spec.warmup, spec.warmup+spec.measure, samples[:n])
	r.Example = example
	busy := make([]float64, len(pids))
	for i, pid := range pids {
		busy[i] = -1
		if cpu, err := cpuSeconds(pid); err == nil && cpu >= 0 && cpu0[i] >= 0 {
			busy[i] = (cpu - cpu0[i]) / elapsed
		}
	}
	r.GeneratorCPU, r.ServerCPU, r.BrokerCPU = busy[0], busy[1], busy[2]
	return r, nil
}

// rateSearch looks for the highest rate a server sustains: it offers a
// first rate, then factor times the last while each step is sustained (or
// the last divided by factor while none has been); once it has a rate
// sustained and a higher one not, it bisects between the highest sustained
// and the lowest not, bisections times; maxSteps steps at most.
type rateSearch struct {
	factor               float64
	bisections, maxSteps int
	sustained            func(loadResult) bool
	steps                []loadResult
	pass, fail           float64 // the highest offered rate sustained, the lowest not (0: none yet)
	bisected             int
}

func newRateSearch(factor float64, bisections, maxSteps int, sustained func(loadResult) bool) *rateSearch {
	return &rateSearch{factor: factor, bisections: bisections, maxSteps: maxSteps, sustained: sustained}
}

// record takes a step's result and says the next rate to offer, or false
// when the search is over.
func (s *rateSearch) record(r loadResult) (float64, bool) {
	s.steps = append(s.steps, r)
	if s.sustained(r) {
		s.pass = max(s.pass, r.Rate)
	} else if s.fail == 0 || r.Rate < s.fail {
		s.fail = r.Rate
	}
	if len(s.steps) >= s.maxSteps {
		return 0, false
	}
	switch {
	case s.fail == 0:
		return math.Round(r.Rate * s.factor), true
	case s.pass == 0:
		next := math.Round(r.Rate / s.factor)
		return next, next >= 1
	case s.bisected >= s.bisections:
		return 0, false
	}
	s.bisected++
	next := math.Round((s.pass + s.fail) / 2)
	if next <= s.pass || next >= s.fail {
		return 0, false // nothing left between them
	}
	return next, true
}

// searchResult is a rate search's: its steps, and the highest rate
// sustained (bounded: a higher one was not; else the search ran out of
// steps with every one sustained).
type searchResult struct {
	Steps   []loadResult
	Max     float64
	Bounded bool
}

// searchRate runs a rate search from start: each step a load of warmup then
// measure. next numbers the requests on, from one step to the next.
func searchRate(ctx context.Context, s *rateSearch, start float64, warmup, measure, timeout time.Duration, workers int, next *int, server, broker int,
	do func(context.Context, int) (reqOutcome, string), logf func(string, ...any)) (searchResult, error) {
	rate, more := start, true
	for more {
		spec := loadSpec{rate: rate, warmup: warmup, measure: measure, timeout: timeout, workers: workers}
		r, err := runOpenLoopOn(ctx, spec, *next, server, broker, do)
		if err != nil {
			return searchResult{}, err
		}
		*next += int(spec.rate * (spec.warmup + spec.measure).Seconds())
		logf("  step %.0f/s: %s, sustained: %v\n", rate, r, s.sustained(r))
		rate, more = s.record(r)
	}
	return searchResult{Steps: s.steps, Max: s.pass, Bounded: s.fail > 0}, nil
}

func (r loadResult) String() string {
	s := fmt.Sprintf("%.0f/s offered, %.0f/s answered right; p50 %s, p99 %s, p99.9 %s; %d requests, %d errors, %d wrong; generator late p99 %s;"+
		" CPUs: generator %.2f, server %.2f, broker %.2f",
		r.Rate, r.Achieved, msf(r.P50), msf(r.P99), msf(r.P999), r.Requests, r.Errors, r.Wrong, msf(r.LateP99), r.GeneratorCPU, r.ServerCPU, r.BrokerCPU)
	if r.Example != "" {
		s += "; e.g. " + r.Example
	}
	return s
}

// msf renders a duration in milliseconds with two decimals.
func msf(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
