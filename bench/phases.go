package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
)

// The phases of issue 28 beside the topologies' runs, each once a
// repetition, Oxbow alone, at the engine's default configuration:
//
//   - http-read: point reads of a view over HTTP, from this process to an
//     instance serving in another, open loop (openloop.go) at fixed rates,
//     then a search for the highest rate it sustains;
//   - restore: a fresh instance restoring a store from its changelog,
//     against a franz-go consumer reading the same changelog;
//   - commands: the command round trip through an aggregate.Client to an
//     exactly-once instance, open loop at a fixed rate, then a search for
//     the highest rate it sustains.
//
// http-read and restore share a fill: the count topology run on the input
// with no record cache, so that its store's changelog has a record for
// every input record; its store holds each key's count, which the input
// gives (expectedCounts).
var phaseNames = []string{"http-read", "restore", "commands"}

// phaseRun is one repetition of a phase.
type phaseRun struct {
	Rep   int
	Phase string
	// http-read and commands: the loads at fixed rates, and the search.
	Fixed  []loadResult `json:",omitempty"`
	Search searchResult
	// restore.
	Restore restoreResult
	// Wrong answers, outcomes or states; the first of them.
	Wrong   int
	Example string `json:",omitempty"`
}

// restoreResult is a fresh instance's restore against a raw consume of the
// same changelog.
type restoreResult struct {
	Records      int64   // restored (the instance's count)
	Seconds      float64 // from the first partition's restore starting to the instance being ready
	StartToReady float64 // from the process's start (joining the group included)
	RawRecords   int64   // read by the raw consume
	RawBytes     int64   // their keys' and values' bytes
	RawSeconds   float64 // from its first fetch to the last partition's end
}

func (r restoreResult) perSec() float64    { return rate(float64(r.Records), r.Seconds) }
func (r restoreResult) rawPerSec() float64 { return rate(float64(r.RawRecords), r.RawSeconds) }

// mbPerSec: the changelog's bytes (as the raw consume counted them) over
// the restore's time, scaled by the records it restored.
func (r restoreResult) mbPerSec() float64 {
	if r.RawRecords == 0 {
		return rate(0, 0)
	}
	return rate(float64(r.RawBytes)*float64(r.Records)/float64(r.RawRecords)/1e6, r.Seconds)
}

func (r restoreResult) rawMBPerSec() float64 { return rate(float64(r.RawBytes)/1e6, r.RawSeconds) }

func rate(n, seconds float64) float64 {
	if seconds <= 0 {
		return math.NaN()
	}
	return n / seconds
}

// phaseSettings are the phases' loads.
type phaseSettings struct {
	HTTPRates      []float64     // point reads a second, each a fixed load
	HTTPMaxP99     time.Duration // the search's latency limit
	CommandRate    float64
	CommandMaxP99  time.Duration
	LoadFor        time.Duration // each fixed load, measured
	LoadWarmup     time.Duration // before it, not measured
	StepFor        time.Duration // each step of a search, measured (after a fifth of it as its warm-up)
	MaxSteps       int
	CommandTargets int // aggregates the commands go to
}

func defaultPhaseSettings() phaseSettings {
	return phaseSettings{HTTPRates: []float64{5000, 10000}, HTTPMaxP99: 10 * time.Millisecond, CommandRate: 200, CommandMaxP99: time.Second,
		LoadFor: 30 * time.Second, LoadWarmup: 5 * time.Second, StepFor: 10 * time.Second, MaxSteps: 12, CommandTargets: 1000}
}

// httpConns bounds the point reads' connections.
const httpConns = 64

// The searches: from the first fixed rate up by half each step, then two
// bisections.
const searchFactor, searchBisections = 1.5, 2

// helper is a started child process whose standard output is read line by
// line.
type helper struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan error
	stderr *strings.Builder
}

func startHelper(cmd *exec.Cmd) (*helper, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &helper{cmd: cmd, lines: make(chan string, 64), exited: make(chan error, 1), stderr: &strings.Builder{}}
	cmd.Stderr = &limited{w: h.stderr, n: 16 << 10}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default: // nobody reads this many
			}
		}
		h.exited <- cmd.Wait()
	}()
	return h, nil
}

// await waits for a line starting with prefix and returns the rest.
func (h *helper) await(ctx context.Context, prefix string, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case l := <-h.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
		case err := <-h.exited:
			h.exited <- err
			return "", fmt.Errorf("the process exited before saying %q: %v\n%s", prefix, err, h.stderr.String())
		case <-deadline.C:
			return "", fmt.Errorf("the process did not say %q in %s\n%s", prefix, timeout, h.stderr.String())
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// stop ends the process (SIGTERM; SIGKILL 90 s later) and waits for it.
func (h *helper) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(90 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
}

// fill is the count topology's run that http-read and restore share.
type fill struct {
	group, output, changelog string
	expected                 []int64 // each key's count
}

// fill runs the count topology on the input, at least once, with no record
// cache, until its group has committed the input's end; the instance leaves
// the group as it stops. The caller deletes its topics and group (also
// after an error).
func (rn *runner) fill(ctx context.Context, rep int) (*fill, error) {
	c := rn.c
	s := spec{cfg: defaultsConfig(), engine: "oxbow", topology: "count", guarantee: "alos"}
	f := &fill{group: rn.name(s, "fill", rep)}
	f.output = f.group + "-out"
	if err := createTopics(ctx, rn.adm, c.partitions, f.output); err != nil {
		return f, err
	}
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	rn.logf("phases: filling a count store's changelog (the count topology on the input, no record cache)\n")
	cmd := rn.pin.command(ctx, os.Environ(), rn.self, rn.oxbowFlags(f, dir, "").args()...)
	res, err := watch(ctx, rn.adm, cmd, watchOpts{group: f.group, topics: []string{rn.input}})
	if err != nil {
		return f, fmt.Errorf("phases: the fill: %w", err)
	}
	listed, err := rn.freshAdmin(ctx)
	if err != nil {
		return f, err
	}
	for _, t := range listed {
		if strings.HasPrefix(t, f.group+"-") && strings.HasSuffix(t, "-changelog") {
			f.changelog = t
		}
	}
	if f.changelog == "" {
		return f, fmt.Errorf("phases: the fill's group %s has no changelog", f.group)
	}
	// The fill's output must be the input's counts exactly, as its store
	// then is (at least once allows counting a record twice after a
	// failure; its store would then hold more than the input gives, and
	// the reads' checks would blame the server).
	v, err := checkOutput(ctx, c.brokers, rn.in, "count", "eos", f.output)
	if err != nil {
		return f, fmt.Errorf("phases: checking the fill's output: %w", err)
	}
	if v.wrong > 0 {
		return f, fmt.Errorf("phases: the fill's counts are not the input's: %s", v)
	}
	counts := expectedCounts(rn.in, "count")
	f.expected = make([]int64, c.keys)
	for k := range f.expected {
		f.expected[k] = counts[keyName(k)]
	}
	rn.logf("phases: filled %s in %.1f s; its output: %d records, %s\n", f.changelog, res.elapsed.Seconds(), v.records, v)
	return f, nil
}

// freshAdmin lists the topics with a client of its own (see written).
func (rn *runner) freshAdmin(ctx context.Context) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(rn.c.brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return listTopics(ctx, cl)
}

// oxbowFlags are an instance of the fill's application: the fill itself
// (serve ""), or a fresh instance that restores its store, says how, and
// serves it over HTTP at serve.
func (rn *runner) oxbowFlags(f *fill, dir, serve string) childFlags {
	c := rn.c
	fl := childFlags{kind: "oxbow", topology: "count", guarantee: "alos", input: rn.input, table: rn.table, output: f.output, app: f.group,
		brokers: strings.Join(c.brokers, ","), commitMs: c.commitMs, workers: c.threads, stateDir: dir, lingerMs: -1, leave: true}
	if serve != "" {
		fl.cacheBytes, fl.serve, fl.restoreStats = c.cacheBytes, serve, true
	}
	return fl
}

// serveFill starts a fresh instance of the fill's application and waits
// until it has restored its store and serves it; it returns the process,
// its restore and its base URL.
func (rn *runner) serveFill(ctx context.Context, f *fill, dir string) (*helper, restoreResult, string, error) {
	var r restoreResult
	h, err := startHelper(rn.pin.command(ctx, os.Environ(), rn.self, rn.oxbowFlags(f, dir, "127.0.0.1:0").args()...))
	if err != nil {
		return nil, r, "", err
	}
	line, err := h.await(ctx, "RESTORED ", 10*time.Minute)
	if err == nil {
		err = parseFields(line, map[string]any{"records": &r.Records, "seconds": &r.Seconds, "ready": &r.StartToReady})
	}
	var base string
	if err == nil {
		base, err = h.await(ctx, "SERVING ", time.Minute)
	}
	if err != nil {
		h.stop()
		return nil, r, "", err
	}
	return h, r, base, nil
}

// parseFields reads "name=value ..." into the pointers (int64 or float64).
func parseFields(line string, into map[string]any) error {
	for _, f := range strings.Fields(line) {
		name, v, _ := strings.Cut(f, "=")
		var err error
		switch p := into[name].(type) {
		case *int64:
			*p, err = strconv.ParseInt(v, 10, 64)
		case *float64:
			*p, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			return fmt.Errorf("%q: %w", line, err)
		}
	}
	return nil
}

// pointReads is the request function of point reads of the fill's store
// at base: request i reads key i·7919 mod keys (7919 is prime: the keys in
// a scattered order) and checks the answer: status 200 and the key's
// count. At most httpConns connections, kept alive, and as many workers
// send the loads: as in wrk2, a request due when every one is busy waits
// for one (and the wait counts, from its due time), rather than a server
// that falls behind being sent ever more connections to accept.
func pointReads(base string, f *fill) (func(context.Context, int) (reqOutcome, string), func()) {
	tr := &http.Transport{MaxConnsPerHost: httpConns, MaxIdleConns: httpConns, MaxIdleConnsPerHost: httpConns, IdleConnTimeout: time.Minute,
		DisableCompression: true}
	client := &http.Client{Transport: tr}
	keys := len(f.expected)
	urls := make([]string, keys)
	for k := range urls {
		urls[k] = base + "/views/counts/keys/" + keyName(k)
	}
	// The answers as httpapi writes them, compared first: decoding JSON
	// costs the generator more than reading the answer.
	want := make([][]byte, keys)
	for k, n := range f.expected {
		want[k] = fmt.Appendf(nil, "{\"key\":%q,\"value\":%d}\n", keyName(k), n)
	}
	return func(ctx context.Context, i int) (reqOutcome, string) {
		k := int((int64(i) * 7919) % int64(keys))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[k], nil)
		if err != nil {
			return reqError, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return reqError, err.Error()
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return reqError, err.Error()
		}
		if resp.StatusCode == http.StatusOK && bytes.Equal(body, want[k]) {
			return reqOK, ""
		}
		key := keyName(k)
		var e struct {
			Key   string `json:"key"`
			Value int64  `json:"value"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &e) != nil || e.Key != key || e.Value != f.expected[k] {
			return reqWrong, fmt.Sprintf("key %s: expected 200 {\"key\":%q,\"value\":%d}, got %d %s", key, key, f.expected[k], resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return reqOK, ""
	}, tr.CloseIdleConnections
}

// readEveryKey reads every key of the fill's store at base once, 8 at a
// time, and checks each answer; it returns the wrong ones.
func readEveryKey(ctx context.Context, base string, f *fill) (int, string) {
	read, closeIdle := pointReads(base, f)
	defer closeIdle()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next, wrong, example := 0, 0, ""
	for range 8 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(f.expected) || ctx.Err() != nil {
					return
				}
				// Request i reads key i·7919 mod keys: with i over
				// 0..keys, every key once (7919 is prime, and keys not a
				// multiple of it).
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				o, note := read(rctx, i)
				cancel()
				if o != reqOK {
					mu.Lock()
					wrong++
					if example == "" {
						example = note
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return wrong, example
}

// restorePhase restores the fill's store in a fresh instance and reads its
// changelog with a franz-go consumer, in turn (which goes first
// alternating from one repetition to the next); the restored store is
// then read whole over HTTP, each key checked.
func (rn *runner) restorePhase(ctx context.Context, f *fill, rep int) (phaseRun, error) {
	pr := phaseRun{Rep: rep, Phase: "restore"}
	restore := func() error {
		dir, err := os.MkdirTemp("", "oxbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		h, r, base, err := rn.serveFill(ctx, f, dir)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		defer h.stop()
		pr.Restore.Records, pr.Restore.Seconds, pr.Restore.StartToReady = r.Records, r.Seconds, r.StartToReady
		wrong, example := readEveryKey(ctx, base, f)
		pr.Wrong += wrong
		if example != "" && pr.Example == "" {
			pr.Example = "the restored store: " + example
		}
		return ctx.Err()
	}
	raw := func() error {
		fl := childFlags{kind: "changelog", input: f.changelog, brokers: strings.Join(rn.c.brokers, ",")}
		h, err := startHelper(rn.pin.command(ctx, os.Environ(), rn.self, fl.args()...))
		if err != nil {
			return err
		}
		defer h.stop()
		line, err := h.await(ctx, "CONSUMED ", 10*time.Minute)
		if err != nil {
			return fmt.Errorf("raw consume: %w", err)
		}
		return parseFields(line, map[string]any{"records": &pr.Restore.RawRecords, "bytes": &pr.Restore.RawBytes, "seconds": &pr.Restore.RawSeconds})
	}
	steps := []func() error{restore, raw}
	if rep%2 == 1 {
		steps[0], steps[1] = raw, restore
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return pr, err
		}
	}
	r := pr.Restore
	rn.logf("phases: restore: %d records in %.3f s (%.0f records/s, %.1f MB/s; %.1f s from the process's start to ready); raw consume: %d records, %.1f MB in %.3f s (%.0f records/s, %.1f MB/s)\n",
		r.Records, r.Seconds, r.perSec(), r.mbPerSec(), r.StartToReady, r.RawRecords, float64(r.RawBytes)/1e6, r.RawSeconds, r.rawPerSec(), r.rawMBPerSec())
	if pr.Wrong > 0 {
		rn.logf("phases: restore: %d keys wrong, e.g. %s\n", pr.Wrong, pr.Example)
	}
	return pr, nil
}

// httpReadPhase serves the fill's store from a fresh instance and reads it
// over HTTP: open loop at each fixed rate, then a rate search.
func (rn *runner) httpReadPhase(ctx context.Context, f *fill, rep int) (phaseRun, error) {
	p := rn.c.phases
	pr := phaseRun{Rep: rep, Phase: "http-read"}
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return pr, err
	}
	defer os.RemoveAll(dir)
	h, _, base, err := rn.serveFill(ctx, f, dir)
	if err != nil {
		return pr, fmt.Errorf("http-read: %w", err)
	}
	defer h.stop()
	rn.logf("phases: http-read: point reads of %d keys at %s\n", len(f.expected), base)
	// Every key once first, closed loop: the server's caches and the
	// connections warm.
	if wrong, example := readEveryKey(ctx, base, f); wrong > 0 {
		pr.Wrong, pr.Example = wrong, example
	}
	read, closeIdle := pointReads(base, f)
	defer closeIdle()
	next := 0
	for _, r := range p.HTTPRates {
		spec := loadSpec{rate: r, warmup: p.LoadWarmup, measure: p.LoadFor, timeout: 5 * time.Second, workers: httpConns}
		res, err := runOpenLoopOn(ctx, spec, next, h.cmd.Process.Pid, rn.pin.brokerPID, read)
		if err != nil {
			return pr, err
		}
		next += int(spec.rate * (spec.warmup + spec.measure).Seconds())
		rn.logf("phases: http-read at %.0f/s: %s\n", r, res)
		pr.Fixed = append(pr.Fixed, res)
	}
	rn.logf("phases: http-read: the highest rate sustained (p99 ≤ %s)\n", p.HTTPMaxP99)
	s := newRateSearch(searchFactor, searchBisections, p.MaxSteps, func(r loadResult) bool { return r.sustained(p.HTTPMaxP99) })
	if pr.Search, err = searchRate(ctx, s, p.HTTPRates[0], p.StepFor/5, p.StepFor, 5*time.Second, httpConns, &next, h.cmd.Process.Pid, rn.pin.brokerPID, read, rn.logf); err != nil {
		return pr, err
	}
	rn.logf("phases: http-read: sustained up to %.0f/s%s\n", pr.Search.Max, map[bool]string{false: " (every step sustained)", true: ""}[pr.Search.Bounded])
	pr.countWrong()
	return pr, nil
}

// phaseMismatch names a phase's repetition with wrong answers.
func phaseMismatch(pr phaseRun) string {
	return fmt.Sprintf("repetition %d, phase %s: %d wrong, e.g. %s", pr.Rep+1, pr.Phase, pr.Wrong, pr.Example)
}

// countWrong adds up the wrong answers of the loads.
func (pr *phaseRun) countWrong() {
	for _, r := range append(append([]loadResult(nil), pr.Fixed...), pr.Search.Steps...) {
		pr.Wrong += r.Wrong
		if r.Wrong > 0 && pr.Example == "" {
			pr.Example = r.Example
		}
	}
}

// commandsPhase submits inventory commands (ReceiveShipment, to
// CommandTargets aggregates in turn) through an aggregate.Client to an
// exactly-once instance at the engine's default configuration: open loop at
// CommandRate, then a rate search. Each outcome must be Accepted, and at
// the end each aggregate's state in its store's changelog must be what
// its accepted commands make it.
func (rn *runner) commandsPhase(ctx context.Context, rep int) (phaseRun, error) {
	c, p := rn.c, rn.c.phases
	pr := phaseRun{Rep: rep, Phase: "commands"}
	name := fmt.Sprintf("oxbench-%s-r%d-commands", rn.id, rep)
	agg, err := inv.New(name)
	if err != nil {
		return pr, err
	}
	commands, events, replies := agg.Topics()
	if err := createTopics(ctx, rn.adm, c.partitions, commands, events, replies); err != nil {
		return pr, err
	}
	defer rn.cleanup(name, commands, events, replies)
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return pr, err
	}
	defer os.RemoveAll(dir)
	fl := childFlags{kind: "commands", app: name, brokers: strings.Join(c.brokers, ","), stateDir: dir}
	h, err := startHelper(rn.pin.command(ctx, os.Environ(), rn.self, fl.args()...))
	if err != nil {
		return pr, err
	}
	defer h.stop()
	if _, err := h.await(ctx, "READY", 5*time.Minute); err != nil {
		return pr, fmt.Errorf("commands: %w", err)
	}
	client, err := agg.NewClient(ctx, aggregate.ClientConfig{Brokers: c.brokers, Timeout: time.Minute})
	if err != nil {
		return pr, err
	}
	defer client.Close()
	rn.logf("phases: commands: to %d aggregates of %s\n", p.CommandTargets, name)
	type tally struct{ submitted, accepted, qSubmitted, qAccepted int64 }
	tallies := make([]tally, p.CommandTargets)
	var mu sync.Mutex
	submit := func(ctx context.Context, i int) (reqOutcome, string) {
		t, q := i%p.CommandTargets, 1+i%7
		id := fmt.Sprintf("shoe-%04d", t)
		mu.Lock()
		tallies[t].submitted++
		tallies[t].qSubmitted += int64(q)
		mu.Unlock()
		o, err := client.Submit(ctx, id, inv.ReceiveShipment{Quantity: q, UnitCost: 100}, aggregate.CommandID(fmt.Sprintf("c%d", i)))
		if err != nil {
			return reqError, err.Error()
		}
		if o.Status != aggregate.Accepted || o.AggregateID != id || o.Duplicate {
			return reqWrong, fmt.Sprintf("command c%d to %s: outcome %+v, want accepted", i, id, o)
		}
		mu.Lock()
		tallies[t].accepted++
		tallies[t].qAccepted += int64(q)
		mu.Unlock()
		return reqOK, ""
	}
	next := 0
	spec := loadSpec{rate: p.CommandRate, warmup: p.LoadWarmup, measure: p.LoadFor, timeout: time.Minute}
	res, err := runOpenLoopOn(ctx, spec, next, h.cmd.Process.Pid, rn.pin.brokerPID, submit)
	if err != nil {
		return pr, err
	}
	next += int(spec.rate * (spec.warmup + spec.measure).Seconds())
	rn.logf("phases: commands at %.0f/s: %s\n", p.CommandRate, res)
	pr.Fixed = append(pr.Fixed, res)
	rn.logf("phases: commands: the highest rate sustained (p99 ≤ %s)\n", p.CommandMaxP99)
	s := newRateSearch(searchFactor, searchBisections, p.MaxSteps, func(r loadResult) bool { return r.sustained(p.CommandMaxP99) })
	if pr.Search, err = searchRate(ctx, s, p.CommandRate, p.StepFor/5, p.StepFor, time.Minute, 0, &next, h.cmd.Process.Pid, rn.pin.brokerPID, submit, rn.logf); err != nil {
		return pr, err
	}
	rn.logf("phases: commands: sustained up to %.0f/s%s\n", pr.Search.Max, map[bool]string{false: " (every step sustained)", true: ""}[pr.Search.Bounded])
	pr.countWrong()

	// The states, as the store's changelog has them (read committed: what
	// the transactions committed).
	topics, err := rn.freshAdmin(ctx)
	if err != nil {
		return pr, err
	}
	changelog := ""
	for _, t := range topics {
		if t == name+"-"+agg.StateStore()+"-changelog" {
			changelog = t
		}
	}
	if changelog == "" {
		return pr, fmt.Errorf("commands: no changelog %s-%s-changelog", name, agg.StateStore())
	}
	last := map[string][]byte{}
	if _, err := readOutput(ctx, c.brokers, changelog, func(r *kgo.Record) { last[string(r.Key)] = r.Value }); err != nil {
		return pr, err
	}
	wrongStates := 0
	for t, want := range tallies {
		id := fmt.Sprintf("shoe-%04d", t)
		got, ok := last[id]
		var version int64
		var st inv.State
		if ok {
			version, st, err = agg.DecodeState(got)
		}
		// A command with no outcome (an error) may have been decided
		// after all.
		if want.submitted > 0 && (!ok || err != nil || version < want.accepted || version > want.submitted ||
			int64(st.InStock) < want.qAccepted || int64(st.InStock) > want.qSubmitted) {
			wrongStates++
			if pr.Example == "" {
				pr.Example = fmt.Sprintf("aggregate %s: %d commands accepted (%d submitted), %d pairs; its state: %q", id, want.accepted, want.submitted, want.qAccepted, got)
			}
		}
	}
	pr.Wrong += wrongStates
	rn.logf("phases: commands: %d aggregates' states checked, %d wrong\n", len(tallies), wrongStates)
	return pr, nil
}

// runPhases runs the selected phases of a repetition.
func (rn *runner) runPhases(ctx context.Context, selected map[string]bool, rep int, results *resultsWriter) error {
	add := func(pr phaseRun, err error) error {
		if err != nil {
			return err
		}
		rn.rep.phases = append(rn.rep.phases, pr)
		if pr.Wrong > 0 {
			rn.rep.mismatches = append(rn.rep.mismatches, phaseMismatch(pr))
		}
		return results.write(phaseLine{Phase: pr.Phase, Run: pr, Finished: time.Now()})
	}
	if selected["restore"] || selected["http-read"] {
		// One fill for every repetition: each restores it afresh.
		if rn.filled == nil {
			f, err := rn.fill(ctx, rep)
			rn.filled = f
			if err != nil {
				return err
			}
		}
		f := rn.filled
		if selected["restore"] {
			if err := add(rn.restorePhase(ctx, f, rep)); err != nil {
				return err
			}
		}
		if selected["http-read"] {
			if err := add(rn.httpReadPhase(ctx, f, rep)); err != nil {
				return err
			}
		}
	}
	if selected["commands"] {
		if err := add(rn.commandsPhase(ctx, rep)); err != nil {
			return err
		}
	}
	return nil
}

// listTopics lists the topics' names.
func listTopics(ctx context.Context, cl *kgo.Client) ([]string, error) {
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	return topics.Names(), nil
}
