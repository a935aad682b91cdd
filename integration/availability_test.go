package integration

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Availability at the engine's default configuration: a crashed instance
// restarted at once serves again in seconds (it is a static member of its
// group, so it takes its tasks back without waiting out its predecessor's
// session), and a rolling restart moves no task and never pauses the
// other instances.

var availKills = flag.Int("oxbow.avail.kills", 10, "SIGKILLs of the single instance in TestAvailabilityCrashRestart")

// feeder writes a campaign's input continuously (crashInput.feed's pace)
// from its own goroutine until stopped.
type feeder struct {
	in     *crashInput
	cancel context.CancelFunc
	done   chan error
}

func startFeeder(t *testing.T, in *crashInput) *feeder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &feeder{in: in, cancel: cancel, done: make(chan error, 1)}
	go func() {
		for ctx.Err() == nil {
			// The stop does not cut a batch short: its records are counted
			// already, and a cancelled produce may or may not have
			// reached Kafka.
			bctx, bcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			err := in.batch(bctx, 100)
			bcancel()
			if err != nil {
				f.done <- err
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		f.done <- nil
	}()
	t.Cleanup(cancel)
	return f
}

// stop ends the input after the batch under way and returns the expected
// counts of everything written.
func (f *feeder) stop(t *testing.T) map[string]int64 {
	t.Helper()
	f.cancel()
	if err := <-f.done; err != nil {
		t.Fatalf("writing the input: %v", err)
	}
	return f.in.want
}

// awaitReady waits for a started child to say it is ready.
func awaitReady(t *testing.T, ch *crashChild, what string) {
	t.Helper()
	select {
	case <-ch.ready:
	case <-ch.exited:
		t.Fatalf("%s exited before it was ready:\n%s", what, ch.output())
	case <-time.After(2 * time.Minute):
		ch.kill(t)
		t.Fatalf("%s was not ready after 2m:\n%s", what, ch.output())
	}
}

// alive fails the test if the child has exited.
func alive(t *testing.T, ch *crashChild, what string) {
	t.Helper()
	select {
	case <-ch.exited:
		t.Fatalf("%s exited by itself:\n%s", what, ch.output())
	default:
	}
}

// stopChild sends SIGTERM and requires a clean exit.
func stopChild(t *testing.T, ch *crashChild, what string) {
	t.Helper()
	_ = ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ch.exited:
	case <-time.After(time.Minute):
		ch.kill(t)
		t.Fatalf("%s did not stop within a minute of SIGTERM:\n%s", what, ch.output())
	}
	if code := ch.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM:\n%s", what, code, ch.output())
	}
}

// median of durations (sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// A single exactly-once instance at the default configuration, SIGKILLed
// ten times under load and restarted at once on its state directory:
// after each restart it is ready, and has committed new input, within
// seconds (median < 5s, max < 10s), and the output and store are exact.
func TestAvailabilityCrashRestart(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("ten SIGKILLs and restarts; not with -short")
	}
	seed := campaignSeed(t)
	rng := rand.New(rand.NewPCG(seed, 31))
	c := newCrashTopicsN(t, env, "avail-crash", 3)
	c.eos, c.defaults = true, true
	input := newCrashInput(t, env, c.in, seed, 32)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(input.cl)
	ch := startCrashChild(t, c)
	awaitReady(t, ch, "the first instance")
	feed := startFeeder(t, input)
	var ready, serving []time.Duration
	inTxn := 0
	for i := range *availKills {
		// Kill at a random moment under load, in an open transaction
		// (commits are 100ms apart: nearly always one is open).
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		if landed, state := killInOpenTxn(ctx, t, adm, ch, c.txnID(), fmt.Sprintf("run %d", i)); landed {
			inTxn++
		} else {
			t.Logf("run %d: the transaction was %s when the instance was gone", i, state)
		}
		committed := committedInput(ctx, t, adm, c)
		start := time.Now()
		ch = startCrashChild(t, c)
		awaitReady(t, ch, fmt.Sprintf("restart %d", i))
		ready = append(ready, time.Since(start))
		if err := await.Within(2*time.Minute-time.Since(start), func() error {
			if committedInput(ctx, t, adm, c) > committed {
				return nil
			}
			alive(t, ch, fmt.Sprintf("restart %d", i))
			return errNoProgress
		}); err != nil {
			t.Fatalf("restart %d: no input committed within 2m:\n%s", i, ch.output())
		}
		serving = append(serving, time.Since(start))
		t.Logf("restart %d: ready after %v, committing new input after %v", i, ready[i].Round(time.Millisecond), serving[i].Round(time.Millisecond))
	}
	want := feed.stop(t)
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	readyMax, servingMax := slices.Max(ready), slices.Max(serving)
	readyMed, servingMed := median(ready), median(serving)
	t.Logf("restart to ready: median %v, max %v; to committing new input: median %v, max %v",
		readyMed.Round(time.Millisecond), readyMax.Round(time.Millisecond), servingMed.Round(time.Millisecond), servingMax.Round(time.Millisecond))
	if servingMed >= 5*time.Second || servingMax >= 10*time.Second {
		t.Errorf("restart to serving: median %v, max %v; want below 5s and 10s", servingMed, servingMax)
	}
	t.Logf("%d of the %d kills left a transaction open", inTxn, *availKills)
	if inTxn < *availKills/2 {
		t.Errorf("only %d of the %d kills landed in an open transaction", inTxn, *availKills)
	}
	stopChild(t, ch, "the last instance")
	exact := func(m map[string]int64) bool { return maps.Equal(m, want) }
	seqs, store := finishCampaign(t, env, c, want, true, exact)
	checkGrowing(t, seqs)
	if !maps.Equal(store, want) {
		t.Errorf("store differs from the input's counts: %s", diffCounts(store, want))
	}
}

// groupState is what the coordinator says about a group: each static
// member's assigned partitions.
type groupState struct {
	members map[string]map[string][]int32 // instance id → topic → partitions
}

func describeGroup(ctx context.Context, t *testing.T, adm *kadm.Client, group string) (groupState, string) {
	t.Helper()
	ds, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	d := ds[group]
	if d.Err != nil {
		t.Fatalf("describe group %s: %v", group, d.Err)
	}
	st := groupState{members: map[string]map[string][]int32{}}
	for _, m := range d.Members {
		if m.InstanceID == nil {
			t.Fatalf("group %s: member %s is not a static member", group, m.MemberID)
		}
		parts := map[string][]int32{}
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, at := range ca.Topics {
				parts[at.Topic] = slices.Sorted(slices.Values(at.Partitions))
			}
		}
		st.members[*m.InstanceID] = parts
	}
	return st, d.State
}

func (g groupState) equal(o groupState) bool {
	return maps.EqualFunc(g.members, o.members, func(a, b map[string][]int32) bool {
		return maps.EqualFunc(a, b, slices.Equal)
	})
}

// assignedRE finds the generations and tasks an instance's log says it
// was assigned.
var assignedRE = regexp.MustCompile(`msg=assigned .*?generation=(\d+) tasks="?\[([^\]]*)\]`)

// revokedRE finds the tasks an instance's log says were revoked.
var revokedRE = regexp.MustCompile(`msg=revoked .*?tasks="?\[([^\]]*)\]`)

// abortedRE matches an instance's log line of a transaction it aborted.
var abortedRE = regexp.MustCompile(`msg="aborting the transaction"|msg="transaction aborted by a rebalance`)

// Three exactly-once instances at the default configuration, each restarted
// in turn five times (SIGTERM, then started again at once): no task moves
// (every member's partitions stay as they were, and every assignment an
// instance logs gives it the tasks it had), and the output is exact. The
// longest pause of the output of the instances not restarting (by the
// broker's append times) is reported.
func TestAvailabilityRollingRestart(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("five restarts under load; not with -short")
	}
	seed := campaignSeed(t)
	c := newCrashTopicsN(t, env, "avail-roll", 6)
	c.eos, c.defaults = true, true
	input := newCrashInput(t, env, c.in, seed, 42)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	adm := kadm.NewClient(input.cl)
	// The broker's append time on the output: when each count was written.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "message.timestamp.type", Value: kadm.StringPtr("LogAppendTime")}}, c.out); err != nil {
		t.Fatal(err)
	}
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	type slot struct {
		c     crashConfig
		child *crashChild
	}
	slots := make([]*slot, 3)
	for i := range slots {
		sc := c
		sc.id, sc.stateDir = fmt.Sprintf("roll-%d", i), t.TempDir()
		slots[i] = &slot{c: sc, child: startCrashChild(t, sc)}
	}
	t.Cleanup(func() {
		for _, s := range slots {
			select {
			case <-s.child.exited:
			default:
				s.child.kill(t)
			}
		}
	})
	for _, s := range slots {
		awaitReady(t, s.child, s.c.id)
	}
	// Every member in one stable generation with every task placed.
	before := settle(ctx, t, adm, c, 3, 6)
	// The generation they settled in, and where their logs stand.
	settled, mark := "", map[string]int{}
	for _, s := range slots {
		l := s.child.fullOutput()
		mark[s.c.id] = len(l)
		for _, m := range assignedRE.FindAllStringSubmatch(l, -1) {
			if len(m[1]) > len(settled) || len(m[1]) == len(settled) && m[1] > settled {
				settled = m[1]
			}
		}
	}
	// Each instance's tasks in the settled group, from what it consumes
	// (its log may not have caught up yet).
	settledTasks := map[string][]string{}
	for id, parts := range before.members {
		for _, p := range parts[c.in] {
			settledTasks[id] = append(settledTasks[id], fmt.Sprintf("0_%d", p))
		}
		for _, p := range parts[c.appID+"-by-word-repartition"] {
			settledTasks[id] = append(settledTasks[id], fmt.Sprintf("1_%d", p))
		}
		slices.Sort(settledTasks[id])
	}
	// Pauses count from here: before, the group formed and tasks moved.
	settledAt := time.Now()
	feed := startFeeder(t, input)
	time.Sleep(2 * time.Second)
	type window struct {
		id       string
		from, to time.Time
	}
	var windows []window
	var logs []string
	for i := range 5 {
		s := slots[i%len(slots)]
		for _, o := range slots {
			alive(t, o.child, o.c.id)
		}
		from := time.Now()
		stopChild(t, s.child, s.c.id)
		logs = append(logs, s.c.id+"\n"+s.child.outputSince(mark[s.c.id]))
		mark[s.c.id] = 0
		s.child = startCrashChild(t, s.c)
		awaitReady(t, s.child, s.c.id)
		windows = append(windows, window{s.c.id, from, time.Now()})
		t.Logf("restart %d: %s down and back in %v", i, s.c.id, time.Since(from).Round(time.Millisecond))
		time.Sleep(2 * time.Second)
	}
	want := feed.stop(t)
	after, _ := describeGroup(ctx, t, adm, c.appID)
	if !after.equal(before) {
		t.Errorf("the assignment changed over the restarts: before %v, after %v", before.members, after.members)
	}
	// Every assignment an instance logged since gives it the tasks it had
	// when the group settled: no task moved. (A rebalance that moves
	// nothing is allowed, and counted: CI saw one, in a run whose
	// restarts took 1.3s.)
	for _, s := range slots {
		logs = append(logs, s.c.id+"\n"+s.child.outputSince(mark[s.c.id]))
	}
	restarted, rebalances := 0, map[string]bool{}
	for _, l := range logs {
		id, _, _ := strings.Cut(l, "\n")
		for _, m := range assignedRE.FindAllStringSubmatch(l, -1) {
			if got := slices.Sorted(slices.Values(strings.Fields(m[2]))); !slices.Equal(got, settledTasks[id]) {
				t.Errorf("%s was assigned %v in generation %s; it had %v when the group settled (its log's latest generation then: %s): a task moved", id, got, m[1], settledTasks[id], settled)
			}
			if m[1] != settled {
				rebalances[m[1]] = true
			}
			restarted++
		}
	}
	if restarted < 5 {
		t.Errorf("%d assignments logged since the group settled; want at least one per restart (5)", restarted)
	}
	t.Logf("rebalances since the group settled in generation %s (none moving a task): %d", settled, len(rebalances))
	seqs := readCounts(t, env, c.out, want, true, func(m map[string]int64) bool { return maps.Equal(m, want) }, 3*time.Minute)
	checkGrowing(t, seqs)
	checkEcho(t, env, c, total(want), true)

	// The count task of partition p writes output partition p (the output
	// is keyed and partitioned as the repartition topic): its owner is the
	// member assigned repartition partition p.
	owner := map[int32]string{}
	repartition := c.appID + "-by-word-repartition"
	for id, parts := range before.members {
		for _, p := range parts[repartition] {
			owner[p] = id
		}
	}
	if len(owner) != 6 {
		t.Fatalf("owners of the count tasks: %v (assignment %v)", owner, before.members)
	}
	times := appendTimes(t, env, c.out, 6)
	var worst time.Duration
	var worstAt time.Time
	var worstPart int32
	for p, ts := range times {
		for i := 1; i < len(ts); i++ {
			gap := ts[i].Sub(ts[i-1])
			excused := ts[i-1].Before(settledAt)
			for _, w := range windows {
				if w.id == owner[p] && ts[i-1].Before(w.to.Add(time.Second)) && ts[i].After(w.from.Add(-time.Second)) {
					excused = true
				}
			}
			if !excused && gap > worst {
				worst, worstAt, worstPart = gap, ts[i-1], p
			}
			if !excused && gap > time.Second {
				// The bound of the availability issue, asserted: before
				// the loop committed ahead of a rebalance's callbacks and
				// members joined a follow-up rebalance at once
				// (runtime/rebalancing.go), CI saw 1.27-1.32s.
				t.Errorf("output partition %d (task of %s, not restarting) paused %v at %v; want at most 1s", p, owner[p], gap, ts[i-1].Format(time.StampMilli))
			}
		}
	}
	t.Logf("longest pause of an instance not restarting: %v (output partition %d, task of %s, at %v)", worst, worstPart, owner[worstPart], worstAt.Format(time.StampMilli))
	for _, s := range slots {
		stopChild(t, s.child, s.c.id)
	}
}

// appendTimes reads a topic that no longer grows and returns each
// partition's record timestamps in offset order. Read committed, its end
// offsets count transaction markers the reader never sees, so it reads
// until every partition had records and a poll of 3s finds no more.
func appendTimes(t *testing.T, env *kafkaenv.Env, topic string, partitions int) map[int32][]time.Time {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[int32][]time.Time{}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r.Timestamp)
			n++
		})
		if n == 0 && len(out) == partitions {
			return out
		}
	}
	t.Fatalf("reading %s: records in %d of %d partitions after 2m", topic, len(out), partitions)
	return nil
}

// settle waits until the group is stable with n members that hold every
// partition of the input and of the repartition topic (every task of both
// sub-topologies: a cooperative move leaves a task unheld for one
// generation), and returns its assignment.
func settle(ctx context.Context, t *testing.T, adm *kadm.Client, c crashConfig, n, partitions int) groupState {
	t.Helper()
	var settled groupState
	await.NoError(t, 2*time.Minute, fmt.Sprintf("the group to settle with %d members", n), func() error {
		st, state := describeGroup(ctx, t, adm, c.appID)
		// Balanced too: a member still warming up its tasks' state holds
		// fewer until the probing rebalance moves them.
		held, balanced := 0, true
		for _, m := range st.members {
			h := len(m[c.in]) + len(m[c.appID+"-by-word-repartition"])
			held += h
			balanced = balanced && h >= 2*partitions/n
		}
		if state == "Stable" && len(st.members) == n && held == 2*partitions && balanced {
			settled = st
			return nil
		}
		return fmt.Errorf("%s, %v", state, st.members)
	})
	return settled
}

// owners maps each partition of topic to the member assigned it.
func (g groupState) owners(topic string) map[int32]string {
	out := map[int32]string{}
	for id, parts := range g.members {
		for _, p := range parts[topic] {
			out[p] = id
		}
	}
	return out
}

// Two exactly-once instances at the default configuration scale out to
// three and back in to two under load: only the tasks that move are
// revoked, so those that stay keep writing output (the longest pause of
// their output partitions across it, by the broker's append times, is
// logged), and the output is exact.
func TestAvailabilityScaleOutIn(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("scaling under load; not with -short")
	}
	seed := campaignSeed(t)
	c := newCrashTopicsN(t, env, "avail-scale", 6)
	c.eos, c.defaults, c.leave = true, true, true
	input := newCrashInput(t, env, c.in, seed, 82)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	adm := kadm.NewClient(input.cl)
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "message.timestamp.type", Value: kadm.StringPtr("LogAppendTime")}}, c.out); err != nil {
		t.Fatal(err)
	}
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	children := map[string]*crashChild{}
	start := func(id string) {
		sc := c
		sc.id, sc.stateDir = id, filepath.Join(t.TempDir(), id)
		ch := startCrashChild(t, sc)
		children[id] = ch
		t.Cleanup(func() {
			select {
			case <-ch.exited:
			default:
				ch.kill(t)
			}
		})
		awaitReady(t, ch, id)
	}
	start("scale-0")
	start("scale-1")
	repartition := c.appID + "-by-word-repartition"
	two := settle(ctx, t, adm, c, 2, 6)
	mark := map[string]int{}
	for id, ch := range children {
		mark[id] = len(ch.fullOutput())
	}
	feed := startFeeder(t, input)
	time.Sleep(3 * time.Second)

	outFrom := time.Now()
	start("scale-2")
	three := settle(ctx, t, adm, c, 3, 6)
	outTo := time.Now()
	time.Sleep(3 * time.Second)

	inFrom := time.Now()
	stopChild(t, children["scale-2"], "scale-2")
	back := settle(ctx, t, adm, c, 2, 6)
	inTo := time.Now()
	time.Sleep(3 * time.Second)
	for id, ch := range children {
		if id != "scale-2" {
			alive(t, ch, id)
		}
	}
	want := feed.stop(t)
	seqs := readCounts(t, env, c.out, want, true, func(m map[string]int64) bool { return maps.Equal(m, want) }, 3*time.Minute)
	checkGrowing(t, seqs)
	checkEcho(t, env, c, total(want), true)

	times := appendTimes(t, env, c.out, 6)
	check := func(what string, before, after map[int32]string, from, to time.Time) {
		var worst time.Duration
		stayed := 0
		for p, owner := range before {
			if after[p] != owner {
				continue
			}
			stayed++
			ts := times[p]
			for i := 1; i < len(ts); i++ {
				if ts[i].Before(from) || ts[i-1].After(to.Add(time.Second)) {
					continue
				}
				worst = max(worst, ts[i].Sub(ts[i-1]))
			}
		}
		t.Logf("%s (%v): %d tasks stayed; their longest pause: %v", what, to.Sub(from).Round(time.Millisecond), stayed, worst)
		if stayed == 0 {
			t.Errorf("%s: no task stayed where it was (%v, then %v)", what, before, after)
		}
		// That no such task was revoked is what the revocation check
		// below asserts (an eager rebalance would fail it); this, that
		// none waited long for the others' commits.
		if worst > time.Second {
			t.Errorf("%s: a task that stayed paused %v; want at most 1s", what, worst)
		}
	}
	// Every task revoked was one that moved (cooperative rebalancing); the
	// re-keying tasks (sub-topology 0) read the input, the counts (1) the
	// repartition topic.
	moved := func(task string) bool {
		sub, p, _ := strings.Cut(task, "_")
		n, _ := strconv.Atoi(p)
		topic := c.in
		if sub == "1" {
			topic = repartition
		}
		a, b, d := two.owners(topic)[int32(n)], three.owners(topic)[int32(n)], back.owners(topic)[int32(n)]
		return a != b || b != d
	}
	revokes := 0
	for id, ch := range children {
		for _, m := range revokedRE.FindAllStringSubmatch(ch.outputSince(mark[id]), -1) {
			for _, task := range strings.Fields(m[1]) {
				revokes++
				if !moved(task) {
					t.Errorf("%s revoked task %s, which stayed where it was", id, task)
				}
			}
		}
	}
	if revokes == 0 {
		t.Error("no task was revoked while scaling out and in")
	}
	// The instances that stayed committed every transaction: each revoke
	// came between two (the loop commits before it lets a rebalance's
	// callbacks run), and no End waited on a join until the session gave
	// up on it (runtime/rebalancing.go).
	for _, id := range []string{"scale-0", "scale-1"} {
		if n := len(abortedRE.FindAllString(children[id].outputSince(mark[id]), -1)); n > 0 {
			t.Errorf("%s aborted %d transactions while scaling out and in", id, n)
		}
	}
	check("scaling out to three", two.owners(repartition), three.owners(repartition), outFrom, outTo)
	check("scaling in to two", three.owners(repartition), back.owners(repartition), inFrom, inTo)
	for id, ch := range children {
		if id != "scale-2" {
			stopChild(t, ch, id)
		}
	}
}
