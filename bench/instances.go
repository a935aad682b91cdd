package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
)

// The instances curve (-curves instances): N Oxbow instances of one
// application, each its own process on this machine, for each N of
// -curve-instances. Every instance runs at the engine's defaults but the
// harness's MemoryBudget, commit interval and workers (as the keys curve),
// with a state directory and instance id of its own (a static member that
// leaves the group when it stops). The input has
// -curve-instance-partitions partitions (12 by default: 6 instances get two
// tasks each). Each repetition of a point runs three parts:
//
//   - scale: N instances run the count topology at least once on
//     -curve-instance-records records of -keys keys. The group's committed
//     offsets are read every 100 ms (commitLook). Throughput is the records
//     the group committed per second over the steady window: from the first
//     look at which every instance runs tasks and 10% of the input is
//     committed to the first look at which half of it is. There one more
//     instance starts (N → N+1, the engine's warm-up replicas on), and the
//     run goes on to the input's end; the output is checked as the keys
//     curve's is. Across the join: settle, from the new instance's start to
//     the first look at which every partition not yet at its end has
//     committed past where it stood after the last change of any
//     instance's active tasks (each instance prints them every 100 ms); the
//     rebalance's pause, the longest time any partition's committed offset
//     stood still from the join to the settle (longestStall); and the same
//     longest stall over the steady window, for comparison: committed
//     offsets advance once a commit interval (-commit-ms), so that is the
//     pause of an undisturbed group.
//   - move, warm and cold (for N ≥ 2, which goes first alternating): N
//     instances of the kv topology (a table of its input, served over
//     HTTP), with StandbyReplicas 1 (warm) or 0 (cold), start on an empty
//     input; once the group is balanced, -curve-move-keys keys are written
//     to it (so that no instance holds a copy of a task it does not run,
//     which a balancing by warm-ups would leave behind: cold is cold).
//     Once the group has committed them, every standby caught up and the
//     assignment has not changed for a second, the instance owning the most
//     partitions (found by reading a key of each partition from every
//     instance over HTTP) is stopped (SIGTERM: it commits and leaves the
//     group at once); the move time runs from the signal to the moment
//     every partition it owned answers a read of one of its keys, with the
//     right value, from another instance (each instance read every 20 ms),
//     and "assigned" to the first PROGRESS line of another instance that
//     has every one of its tasks among its active ones (the rebalance's
//     share: the survivors learn of the leave at their next heartbeat,
//     3 s apart by default).
//     A crashed static member would keep its tasks for SessionTimeout (45 s
//     by default) before this begins. Then a sample of the moved
//     partitions' keys is read and checked; the records the survivors
//     restored for the move are reported (a warm move restores the tail the
//     standby had not applied, a cold one the moved partitions' whole
//     changelog).
//
// All the instances run on the measured processes' CPU (one of this
// machine's two): more instances share one CPU, so the throughput shows
// what splitting the work across processes costs, not a scale-out.

// instancesAbout is the curve's setup, for its README (at the flags'
// defaults).
const instancesAbout = "N instances (processes) of one application, each at the engine's defaults but a MemoryBudget (256 MiB), 2 workers, a commit " +
	"interval of 1 s, a state directory and instance id of its own, all on the one CPU of the measured processes (so more instances share a CPU: " +
	"the throughput shows what splitting the work costs, not a scale-out); 12 input partitions. Throughput: the count topology at least once " +
	"(20M records, 10,000 keys), records the group committed per second from 10% to 50% of the input (once every instance runs tasks). " +
	"There one more instance joins: settle is the time from its start until every partition has committed past where it stood after the " +
	"last change of any instance's tasks; the join's pause the longest time any partition's committed offset stood still from the join to the " +
	"settle (offsets read every 100 ms), the steady pause the same over the steady window (about the commit interval: the floor). Move: N " +
	"instances of a table served over HTTP, StandbyReplicas 1 (warm) or 0 (cold), balanced on an empty input, then 2M keys written to it " +
	"(222 MB of changelog) and committed, every standby caught up; the instance owning the most " +
	"partitions is stopped (SIGTERM, leaving the group); the move time runs from the signal until each of its partitions answers a read " +
	"(HTTP, checked) from another instance, assigned until other instances list all its tasks as theirs (100 ms samples; the survivors hear " +
	"of the leave at their next heartbeat, 3 s apart); restored: the changelog records the survivors restored for it."

// progressSample is what an instance's PROGRESS line says: its active
// tasks, how many of its stores are restoring, the changelog records it
// has restored, its standby tasks and their summed lag.
type progressSample struct {
	at        time.Time
	active    []string // sorted
	restoring int
	restored  int64
	standbys  int
	lag       int64
}

// formatProgress is an instance's PROGRESS line at now.
func formatProgress(now time.Time, active []string, restoring int, restored int64, standbyLag map[string]int64) string {
	var lag int64
	for _, l := range standbyLag {
		lag += l
	}
	tasks := "-"
	if len(active) > 0 {
		tasks = strings.Join(active, ",")
	}
	return fmt.Sprintf("PROGRESS ms=%d active=%s restoring=%d restored=%d standbys=%d lag=%d", now.UnixMilli(), tasks, restoring, restored, len(standbyLag), lag)
}

// parseProgress reads a PROGRESS line.
func parseProgress(line string) (progressSample, error) {
	var s progressSample
	rest, ok := strings.CutPrefix(line, "PROGRESS ")
	if !ok {
		return s, fmt.Errorf("%q is no PROGRESS line", line)
	}
	seen := map[string]bool{}
	for _, f := range strings.Fields(rest) {
		name, v, _ := strings.Cut(f, "=")
		seen[name] = true
		var err error
		var n int64
		switch name {
		case "active":
			if v != "-" {
				s.active = strings.Split(v, ",")
				slices.Sort(s.active)
			}
			continue
		case "ms", "restoring", "restored", "standbys", "lag":
			n, err = strconv.ParseInt(v, 10, 64)
		default:
			continue
		}
		if err != nil {
			return s, fmt.Errorf("%q: %s: %w", line, name, err)
		}
		switch name {
		case "ms":
			s.at = time.UnixMilli(n)
		case "restoring":
			s.restoring = int(n)
		case "restored":
			s.restored = n
		case "standbys":
			s.standbys = int(n)
		case "lag":
			s.lag = n
		}
	}
	for _, name := range []string{"ms", "active", "restoring", "restored", "standbys", "lag"} {
		if !seen[name] {
			return s, fmt.Errorf("%q: no %s", line, name)
		}
	}
	return s, nil
}

// printProgress prints the instance's PROGRESS line every interval until
// ctx ends.
func printProgress(ctx context.Context, app *engine.App, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		fmt.Println(formatProgress(time.Now(), app.Tasks(), len(app.Restoring()), app.RestoredRecords(), app.StandbyLag()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// commitLook is one look at the group's committed offsets of the input:
// at is when it was asked for (the answer holds every commit made before).
type commitLook struct {
	at      time.Time
	offsets map[int32]int64
}

// longestStall is the longest time within [from, to] that a partition's
// committed offset stood still, and that partition: for each partition
// the times between from, the looks in (from, to] at which its offset
// advanced, and to, unless the partition had reached its end (ends) by
// then. Partitions with no records have none.
func longestStall(looks []commitLook, ends map[int32]int64, from, to time.Time) (time.Duration, int32) {
	var worst time.Duration
	worstP := int32(-1)
	for p, end := range ends {
		if end <= 0 {
			continue
		}
		var last time.Time // when it last advanced
		var at int64
		finished := false
		for _, l := range looks {
			if l.at.After(to) {
				break
			}
			o := l.offsets[p]
			if o <= at {
				continue
			}
			if l.at.After(from) {
				if d := l.at.Sub(later(last, from)); d > worst || d == worst && p < worstP {
					worst, worstP = d, p
				}
			}
			last, at = l.at, o
			if o >= end {
				finished = true
				break
			}
		}
		if !finished {
			if d := to.Sub(later(last, from)); d > worst || d == worst && p < worstP {
				worst, worstP = d, p
			}
		}
	}
	return worst, worstP
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settledAt is the first look after since at which every partition has
// committed past where it stood at the first look asked for at or after
// since, or has reached its end; false if none.
func settledAt(looks []commitLook, ends map[int32]int64, since time.Time) (time.Time, bool) {
	var base map[int32]int64
	for _, l := range looks {
		if l.at.Before(since) {
			continue
		}
		if base == nil {
			base = l.offsets
			continue
		}
		all := true
		for p, end := range ends {
			if o := l.offsets[p]; o < end && o <= base[p] {
				all = false
				break
			}
		}
		if all {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// lastActiveChange is the latest sample at or after from, among the
// instances' samples (each in time order), at which an instance's active
// tasks differ from its sample before (before its first: none); false if
// none.
func lastActiveChange(instances [][]progressSample, from time.Time) (time.Time, bool) {
	var last time.Time
	found := false
	for _, samples := range instances {
		var prev []string
		for _, s := range samples {
			if !slices.Equal(s.active, prev) && !s.at.Before(from) && (!found || s.at.After(last)) {
				last, found = s.at, true
			}
			prev = s.active
		}
	}
	return last, found
}

// member is one instance of the curve: its process, and what it printed.
type member struct {
	id      string
	h       *helper
	started time.Time
	done    chan struct{} // closed once it exited and its lines are read

	mu       sync.Mutex
	samples  []progressSample
	base     string // its HTTP server, once it serves
	exitedAt time.Time
	exitErr  error
	badLine  error
}

// startMember starts an instance and reads its lines until it exits.
func (rn *runner) startMember(ctx context.Context, fl childFlags) (*member, error) {
	m := &member{id: fl.instanceID, started: time.Now(), done: make(chan struct{})}
	h, err := startHelper(rn.pin.command(ctx, os.Environ(), rn.self, fl.args()...))
	if err != nil {
		return nil, err
	}
	m.h = h
	go m.drain()
	return m, nil
}

// drain reads the instance's lines; the only reader of its helper's.
func (m *member) drain() {
	defer close(m.done)
	for {
		select {
		case l := <-m.h.lines:
			m.line(l)
		case err := <-m.h.exited:
			for more := true; more; {
				select {
				case l := <-m.h.lines:
					m.line(l)
				default:
					more = false
				}
			}
			m.mu.Lock()
			m.exitedAt, m.exitErr = time.Now(), err
			m.mu.Unlock()
			return
		}
	}
}

func (m *member) line(l string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case strings.HasPrefix(l, "PROGRESS "):
		s, err := parseProgress(l)
		if err != nil {
			m.badLine = cmpErr(m.badLine, err)
			return
		}
		m.samples = append(m.samples, s)
	case strings.HasPrefix(l, "SERVING "):
		m.base = strings.TrimPrefix(l, "SERVING ")
	}
}

// stop ends the instance (SIGTERM; SIGKILL 90 s later) and waits for it.
func (m *member) stop() {
	_ = m.h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(90 * time.Second):
		_ = m.h.cmd.Process.Kill()
		<-m.done
	}
}

// exited says why the instance is gone, nil while it runs.
func (m *member) exited() error {
	select {
	case <-m.done:
		return fmt.Errorf("instance %s exited: %v\n%s", m.id, m.exitErr, m.h.stderr.String())
	default:
		return nil
	}
}

// last is the instance's latest sample (ok false: none yet).
func (m *member) last() (progressSample, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return progressSample{}, false
	}
	return m.samples[len(m.samples)-1], true
}

// stable: the instance's active tasks have been those of its latest
// sample for d at least.
func (m *member) stable(d time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return false
	}
	last := m.samples[len(m.samples)-1]
	for i := len(m.samples) - 1; i >= 0; i-- {
		if !slices.Equal(m.samples[i].active, last.active) {
			return false
		}
		if last.at.Sub(m.samples[i].at) >= d {
			return true
		}
	}
	return false
}

func (m *member) sampleCopy() []progressSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.samples)
}

func (m *member) serving() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.base
}

// stopMembers stops the instances, all at once.
func stopMembers(ms []*member) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(m.stop)
	}
	wg.Wait()
}

// awaitMembers checks cond every 20 ms until it holds; an error if an
// instance exits, ctx ends or timeout passes first.
func awaitMembers(ctx context.Context, ms []*member, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		for _, m := range ms {
			if err := m.exited(); err != nil {
				return fmt.Errorf("awaiting %s: %w", what, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not in %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// instancesCurve runs the instances curve: the scale part's input and the
// move part's changelog made once, then each point's repetitions.
func (rn *runner) instancesCurve(ctx context.Context, cs curveSettings, add func(curvePoint) error) error {
	c := rn.c
	c.partitions, c.records = int32(cs.instPartitions), cs.instRecords
	prn := *rn
	prn.c = c
	prn.input = fmt.Sprintf("oxbench-%s-instances-input", rn.id)
	prn.table = fmt.Sprintf("oxbench-%s-instances-table", rn.id)
	if err := createTopics(ctx, rn.adm, c.partitions, prn.input, prn.table); err != nil {
		return err
	}
	defer rn.deleteTopics(prn.input, prn.table)
	rn.logf("curve instances: loading %d records (%d keys) on %d partitions\n", c.records, c.keys, c.partitions)
	var err error
	if prn.in, err = load(ctx, rn.cl, c, prn.input, prn.table); err != nil {
		return err
	}
	for _, n := range cs.instances {
		for rep := range cs.reps {
			p := curvePoint{X: float64(n), Rep: rep, Values: map[string]float64{"partitions": float64(c.partitions), "records": float64(c.records),
				"keys": float64(c.keys), "budget_mb": float64(c.memBudget) / (1 << 20), "move_keys": float64(cs.moveKeys)}}
			if err := prn.scale(ctx, n, rep, &p); err != nil {
				return fmt.Errorf("%d instances: %w", n, err)
			}
			if n >= 2 {
				kinds := []string{"warm", "cold"}
				if rep%2 == 1 {
					slices.Reverse(kinds)
				}
				for _, kind := range kinds {
					if err := prn.move(ctx, cs.moveKeys, n, rep, kind, &p); err != nil {
						return fmt.Errorf("%d instances, %s move: %w", n, kind, err)
					}
				}
			}
			rn.logf("curve instances at %d, repetition %d: %s records/s; join: pause %s s (steady %s s), settle %s s; move warm %s s (%s restored), cold %s s (%s restored)\n",
				n, rep+1, fmtNum(p.Values["records_per_s"]), fmtNum(p.Values["join_pause_s"]), fmtNum(p.Values["steady_pause_s"]), fmtNum(p.Values["join_settle_s"]),
				fmtNum(nanIfMissing(p.Values, "move_warm_s")), fmtNum(nanIfMissing(p.Values, "move_warm_restored")),
				fmtNum(nanIfMissing(p.Values, "move_cold_s")), fmtNum(nanIfMissing(p.Values, "move_cold_restored")))
			if err := add(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func nanIfMissing(m map[string]float64, k string) float64 {
	if v, ok := m[k]; ok {
		return v
	}
	return math.NaN()
}

// memberFlags are an instance's flags in the curve.
func (rn *runner) memberFlags(topology, input, output, app, id, stateDir string) childFlags {
	c := rn.c
	return childFlags{kind: "oxbow", topology: topology, guarantee: "alos", input: input, table: rn.table, output: output, app: app,
		brokers: strings.Join(c.brokers, ","), commitMs: commitMs(c, "alos"), cacheBytes: c.cacheBytes, memoryBudget: c.memBudget, workers: c.threads,
		stateDir: stateDir, lingerMs: -1, leave: true, instanceID: id, progressMs: int(progressEvery / time.Millisecond)}
}

// progressEvery is how often each instance prints its PROGRESS, and the
// harness looks at the group's committed offsets.
const progressEvery = 100 * time.Millisecond

// scale runs n instances of the count topology on the input, one more
// joining at half of it (see the curve's doc), and checks the output.
func (rn *runner) scale(ctx context.Context, n, rep int, p *curvePoint) error {
	c := rn.c
	group := fmt.Sprintf("oxbench-%s-inst-n%d-r%d", rn.id, n, rep)
	out := group + "-out"
	if err := createTopics(ctx, rn.adm, c.partitions, out); err != nil {
		return err
	}
	defer rn.cleanup(group, out)
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	listed, err := rn.adm.ListEndOffsets(ctx, rn.input)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return err
	}
	ends := map[int32]int64{}
	var total int64
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset; total += o.Offset })
	var ms []*member
	defer func() { stopMembers(ms) }()
	start := func(i int) error {
		fl := rn.memberFlags("count", rn.input, out, group, fmt.Sprintf("%s-%d", group, i), filepath.Join(dir, strconv.Itoa(i)))
		m, err := rn.startMember(ctx, fl)
		if err == nil {
			ms = append(ms, m)
		}
		return err
	}
	rn.logf("curve instances: %d instances on %d records (repetition %d)\n", n, total, rep+1)
	for i := range n {
		if err := start(i); err != nil {
			return err
		}
	}
	var looks []commitLook
	var winFrom, winTo commitLook // the steady window's edges, once found
	var joinAt time.Time
	committedOf := func(l commitLook) int64 {
		var s int64
		for p, end := range ends {
			s += min(l.offsets[p], end)
		}
		return s
	}
	deadline := time.Now().Add(30 * time.Minute)
	for {
		l := commitLook{at: time.Now(), offsets: map[int32]int64{}}
		offs, err := rn.adm.FetchOffsets(ctx, group)
		if err == nil {
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == rn.input && o.Err == nil {
					l.offsets[o.Partition] = o.At
				}
			})
			looks = append(looks, l)
		}
		committed := committedOf(l)
		// The join at half the input, a look after the window began.
		if err == nil && joinAt.IsZero() && !winFrom.at.IsZero() && float64(committed) >= 0.5*float64(total) {
			winTo = l
			joinAt = time.Now()
			rn.logf("curve instances: %d of %d records committed; instance %d joins\n", committed, total, n+1)
			if err := start(n); err != nil {
				return err
			}
		}
		if err == nil && winFrom.at.IsZero() && joinAt.IsZero() && float64(committed) >= 0.1*float64(total) {
			all := true
			for _, m := range ms {
				s, ok := m.last()
				all = all && ok && len(s.active) > 0
			}
			if all {
				winFrom = l
			}
		}
		if err == nil && committed >= total {
			break
		}
		for _, m := range ms {
			if err := m.exited(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group has not committed the input in 30 minutes (%d of %d records)", committed, total)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(progressEvery):
		}
	}
	doneAt := looks[len(looks)-1].at
	var samples [][]progressSample
	for _, m := range ms {
		m.mu.Lock()
		err := m.badLine
		m.mu.Unlock()
		if err != nil {
			return err
		}
		samples = append(samples, m.sampleCopy())
	}
	stopMembers(ms)
	nan := math.NaN()
	p.Values["records_per_s"], p.Values["window_s"], p.Values["steady_pause_s"] = nan, nan, nan
	p.Values["join_pause_s"], p.Values["join_settle_s"], p.Values["join_records_per_s"] = nan, nan, nan
	if !winTo.at.IsZero() && winTo.at.After(winFrom.at) {
		d := winTo.at.Sub(winFrom.at)
		p.Values["window_s"] = d.Seconds()
		p.Values["records_per_s"] = float64(committedOf(winTo)-committedOf(winFrom)) / d.Seconds()
		stall, _ := longestStall(looks, ends, winFrom.at, winTo.at)
		p.Values["steady_pause_s"] = stall.Seconds()
	}
	if !joinAt.IsZero() {
		to := doneAt
		if change, ok := lastActiveChange(samples, joinAt); ok {
			if at, ok := settledAt(looks, ends, change); ok {
				to = at
				p.Values["join_settle_s"] = at.Sub(joinAt).Seconds()
			}
		}
		stall, part := longestStall(looks, ends, joinAt, to)
		p.Values["join_pause_s"] = stall.Seconds()
		var from commitLook
		for _, l := range looks {
			if !l.at.After(joinAt) {
				from = l
			}
		}
		var upto commitLook
		for _, l := range looks {
			if !l.at.After(to) {
				upto = l
			}
		}
		if d := upto.at.Sub(from.at); d > 0 {
			p.Values["join_records_per_s"] = float64(committedOf(upto)-committedOf(from)) / d.Seconds()
		}
		rn.logf("curve instances: %d → %d: settled %s s after the join; longest stall %s s (partition %d), in the steady window %s s\n",
			n, n+1, fmtNum(p.Values["join_settle_s"]), fmtNum(stall.Seconds()), part, fmtNum(p.Values["steady_pause_s"]))
	} else {
		rn.logf("curve instances: no join: the instances did not all run tasks before half the input was committed\n")
	}
	v, err := checkOutput(ctx, c.brokers, rn.in, "count", "alos", out)
	if err != nil {
		return fmt.Errorf("checking the output: %w", err)
	}
	rn.logf("curve instances: %d output records, %s\n", v.records, v)
	if v.wrong > 0 {
		p.Wrong += v.wrong
		if p.Example == "" {
			p.Example = v.String()
		}
	}
	return nil
}

// moveStore is a move's store: the kv topology's, made by its instances
// from an input of keys written once they are balanced.
type moveStore struct {
	app, input   string
	keys         int
	perPartition map[int32]int64 // keys in each partition
	sample       map[int32][]int // keys of each partition, for the reads
}

// moveSample is how many keys of each partition the moves read.
const moveSample = 200

// fillMoveStore writes the store's keys to its input: key i kvKey(i), its value
// kvValue(i).
func (rn *runner) fillMoveStore(ctx context.Context, mv *moveStore) error {
	var mu sync.Mutex
	var firstErr error
	for i := range mv.keys {
		rn.cl.Produce(ctx, &kgo.Record{Topic: mv.input, Key: []byte(kvKey(i)), Value: kvValue(i)}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				return
			}
			mv.perPartition[r.Partition]++
			if len(mv.sample[r.Partition]) < moveSample {
				mv.sample[r.Partition] = append(mv.sample[r.Partition], i)
			}
		})
	}
	if err := rn.cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// move starts n instances of the kv topology on an empty input, with a
// standby each task (warm) or none (cold), and once they are balanced
// writes the store's keys to the input (so that no instance holds state
// of a task it does not run: a cold move restores the whole changelog);
// once every key is committed and every standby has caught up, it stops
// the instance owning the most partitions and measures how long its
// partitions take to answer from the others.
func (rn *runner) move(ctx context.Context, keys, n, rep int, kind string, p *curvePoint) error {
	standbys := 0
	if kind == "warm" {
		standbys = 1
	}
	mv := &moveStore{app: fmt.Sprintf("oxbench-%s-move-n%d-r%d-%s", rn.id, n, rep, kind), keys: keys, perPartition: map[int32]int64{}, sample: map[int32][]int{}}
	mv.input = mv.app + "-in"
	if err := createTopics(ctx, rn.adm, rn.c.partitions, mv.input); err != nil {
		return err
	}
	defer rn.cleanup(mv.app, mv.input)
	dir, err := os.MkdirTemp("", "oxbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var ms []*member
	defer func() { stopMembers(ms) }()
	rn.logf("curve instances: %d instances, %d standby replicas, building a store of %d keys (repetition %d)\n", n, standbys, mv.keys, rep+1)
	for i := range n {
		fl := rn.memberFlags("kv", mv.input, mv.input, mv.app, fmt.Sprintf("%s-%d", mv.app, i), filepath.Join(dir, strconv.Itoa(i)))
		fl.standbys, fl.serve = standbys, "127.0.0.1:0"
		m, err := rn.startMember(ctx, fl)
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	tasks := int(rn.c.partitions)
	balanced := func() bool {
		for _, m := range ms {
			s, ok := m.last()
			if !ok || m.serving() == "" || !m.stable(time.Second) || len(s.active) < tasks/n || len(s.active) > (tasks+n-1)/n {
				return false
			}
		}
		return true
	}
	if err := awaitMembers(ctx, ms, 5*time.Minute, "the instances balanced", func() (bool, error) { return balanced(), nil }); err != nil {
		return err
	}
	if err := rn.fillMoveStore(ctx, mv); err != nil {
		return err
	}
	ends, err := rn.adm.ListEndOffsets(ctx, mv.input)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return err
	}
	// Every key committed, every standby caught up, still balanced.
	err = awaitMembers(ctx, ms, 15*time.Minute, "the keys committed and every standby caught up", func() (bool, error) {
		if done, _ := progress(ctx, rn.adm, mv.app, ends, nil); !done || !balanced() {
			return false, nil
		}
		seen := map[string]bool{}
		standby := 0
		for _, m := range ms {
			s, _ := m.last()
			if s.restoring > 0 || s.lag > 0 {
				return false, nil
			}
			for _, t := range s.active {
				seen[t] = true
			}
			standby += s.standbys
		}
		return len(seen) == tasks && standby == tasks*standbys, nil
	})
	if err != nil {
		return err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// read reads key i at an instance: whether it answered 200, and
	// whether what it answered was right.
	read := func(base string, i int) (served, right bool, got string) {
		resp, err := client.Get(base + "/views/kv/keys/" + kvKey(i))
		if err != nil {
			return false, false, err.Error()
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return false, false, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		want := fmt.Sprintf("{\"key\":%q,\"value\":%q}\n", kvKey(i), kvValue(i))
		return true, string(body) == want, strings.TrimSpace(string(body))
	}
	wrong := func(i int, got string) {
		p.Wrong++
		if p.Example == "" {
			p.Example = fmt.Sprintf("%s move: key %s: got %s", kind, kvKey(i), got)
		}
	}
	// Who owns each partition, by reads.
	owner := map[int32]int{}
	var parts []int32
	for q := range mv.sample {
		parts = append(parts, q)
	}
	slices.Sort(parts)
	err = awaitMembers(ctx, ms, time.Minute, "every partition answering a read", func() (bool, error) {
		for _, q := range parts {
			if _, ok := owner[q]; ok {
				continue
			}
			for j, m := range ms {
				served, right, got := read(m.serving(), mv.sample[q][0])
				if served && !right {
					wrong(mv.sample[q][0], got)
				}
				if served {
					owner[q] = j
					break
				}
			}
		}
		return len(owner) == len(parts), nil
	})
	if err != nil {
		return err
	}
	owned := make([]int, n)
	for _, j := range owner {
		owned[j]++
	}
	victim := 0
	for j := range owned {
		if owned[j] > owned[victim] {
			victim = j
		}
	}
	var moved []int32
	var changelog int64
	for _, q := range parts {
		if owner[q] == victim {
			moved = append(moved, q)
			changelog += mv.perPartition[q]
		}
	}
	var survivors []*member
	restoredBefore := map[*member]int64{}
	for j, m := range ms {
		if j != victim {
			survivors = append(survivors, m)
			s, _ := m.last()
			restoredBefore[m] = s.restored
		}
	}
	v := ms[victim]
	rn.logf("curve instances: stopping instance %s, owner of partitions %v (%d changelog records)\n", v.id, moved, changelog)
	stopped := time.Now()
	if err := v.h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	answered := map[int32]time.Time{}
	err = awaitMembers(ctx, survivors, 5*time.Minute, "the moved partitions answering from another instance", func() (bool, error) {
		for _, q := range moved {
			if _, ok := answered[q]; ok {
				continue
			}
			for _, m := range survivors {
				served, right, got := read(m.serving(), mv.sample[q][0])
				if served && !right {
					wrong(mv.sample[q][0], got)
				}
				if served {
					answered[q], owner[q] = time.Now(), slices.Index(ms, m)
					break
				}
			}
		}
		return len(answered) == len(moved), nil
	})
	if err != nil {
		return err
	}
	var ready time.Time
	for _, at := range answered {
		ready = later(ready, at)
	}
	select {
	case <-v.done:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("instance %s still running 2 minutes after SIGTERM", v.id)
	}
	v.mu.Lock()
	closed := v.exitedAt.Sub(stopped)
	v.mu.Unlock()
	// What the survivors restored, from their first samples after the
	// move.
	var restored int64
	err = awaitMembers(ctx, survivors, time.Minute, "the survivors' progress after the move", func() (bool, error) {
		restored = 0
		for _, m := range survivors {
			s, ok := m.last()
			if !ok || !s.at.After(ready) {
				return false, nil
			}
			restored += s.restored - restoredBefore[m]
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	// When each moved task was first among a survivor's active tasks (its
	// samples 100 ms apart, every survivor's read past ready above): the
	// rebalance's part of the move.
	var assigned time.Time
	for _, q := range moved {
		var first time.Time
		for _, m := range survivors {
			for _, s := range m.sampleCopy() {
				if s.at.After(stopped) && slices.ContainsFunc(s.active, func(t string) bool { return strings.HasSuffix(t, fmt.Sprintf("_%d", q)) }) {
					if first.IsZero() || s.at.Before(first) {
						first = s.at
					}
					break
				}
			}
		}
		if first.IsZero() {
			assigned = time.Time{}
			break
		}
		assigned = later(assigned, first)
	}
	// The moved partitions' sample, each key checked at its new owner.
	for _, q := range moved {
		for _, i := range mv.sample[q] {
			if _, right, got := read(ms[owner[q]].serving(), i); !right {
				wrong(i, got)
			}
		}
	}
	p.Values["move_"+kind+"_s"] = ready.Sub(stopped).Seconds()
	p.Values["move_"+kind+"_close_s"] = closed.Seconds()
	p.Values["move_"+kind+"_assigned_s"] = math.NaN()
	if !assigned.IsZero() {
		p.Values["move_"+kind+"_assigned_s"] = assigned.Sub(stopped).Seconds()
	}
	p.Values["move_"+kind+"_restored"] = float64(restored)
	p.Values["move_"+kind+"_changelog"] = float64(changelog)
	p.Values["move_"+kind+"_tasks"] = float64(len(moved))
	rn.logf("curve instances: %s move of %d tasks: answering %.2f s after the signal (the instance closed in %.2f s, the tasks assigned elsewhere by %s s), %d records restored of %d\n",
		kind, len(moved), ready.Sub(stopped).Seconds(), closed.Seconds(), fmtNum(p.Values["move_"+kind+"_assigned_s"]), restored, changelog)
	return nil
}
