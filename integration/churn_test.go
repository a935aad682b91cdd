package integration

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

var churnEvents = flag.Int("oxbow.churn.events", 9, "joins, leaves and crashes in the exactly-once churn campaign")

// The churn campaign: three instances, each a child process with its own
// state directory, count a continuous input while, at random moments from a
// seed, one of them crashes (SIGKILL), leaves (SIGTERM: it commits and
// leaves the group) or, if it is down, joins again; every third event one
// joins or leaves and another crashes in the rebalance that follows. Then
// all three run until the output is complete. With exactly-once the
// output, read committed, holds the exact counts and each key's counts
// only grow; with at-least-once no count is short.

// churnSlot is one of the campaign's instances.
type churnSlot struct {
	c     crashConfig
	child *crashChild // nil while down
	down  bool        // the campaign stopped or killed it
	left  bool        // it went down by leaving the group, not by a crash
}

func (s *churnSlot) running() bool {
	if s.child == nil {
		return false
	}
	select {
	case <-s.child.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *churnSlot) stop(t *testing.T) {
	t.Helper()
	stopChild(t, s.child, "instance "+s.c.id)
}

// The campaign's events, in turn: an instance goes down (crashes or
// leaves, alternately) or one that is down joins, at random; every third
// event an instance joins or leaves and another crashes in the middle of
// the rebalance that follows. One instance always runs.
func runChurn(t *testing.T, env *kafkaenv.Env, c crashConfig, events int, seed uint64) ([]*churnSlot, map[string]int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 21))
	input := newCrashInput(t, env, c.in, seed, 22)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	slots := make([]*churnSlot, 3)
	for i := range slots {
		sc := c
		sc.id, sc.stateDir = fmt.Sprintf("churn-%d", i), t.TempDir()
		sc.leave = true // SIGTERM means leaving here: the others take the tasks at once
		slots[i] = &churnSlot{c: sc}
	}
	t.Cleanup(func() {
		for _, s := range slots {
			if s.running() {
				s.child.kill(t)
			}
		}
	})
	for _, s := range slots {
		s.child = startCrashChild(t, s.c)
	}
	awaitReady(t, slots[0].child, "instance "+slots[0].c.id)
	// A rebalance waits for every member the group knows: at the default
	// configuration, for a crashed static member's session to end.
	rebalanceWait := c.engineConfig().SessionTimeout + time.Minute
	if c.defaults {
		rebalanceWait = 45*time.Second + time.Minute
	}
	counts := map[string]int{}
	for i := range events {
		// Input between events, 0.5s to 3s apart.
		input.feed(ctx, t, time.Duration(500+rng.IntN(2500))*time.Millisecond)
		// Every instance the campaign did not take down is still running.
		var up, down []*churnSlot
		for _, o := range slots {
			if o.child != nil && !o.down && !o.running() {
				t.Fatalf("event %d: instance %s exited by itself:\n%s", i, o.c.id, o.child.output())
			}
			if o.running() {
				up = append(up, o)
			} else {
				down = append(down, o)
			}
		}
		switch {
		case i%3 == 2:
			// One instance joins (if one is down) or leaves, and the first
			// other one to log its part of the rebalance (tasks revoked or
			// assigned) is killed at once.
			marks := map[*churnSlot]int{}
			for _, o := range up {
				marks[o] = len(o.child.fullOutput())
			}
			// A crashed static member that comes back takes its tasks
			// back without a rebalance: the one to join is one that left.
			var left []*churnSlot
			for _, o := range down {
				if o.left {
					left = append(left, o)
				}
			}
			if len(left) == 0 && len(up) < 2 {
				s := down[rng.IntN(len(down))]
				s.child, s.down = startCrashChild(t, s.c), false
				awaitReady(t, s.child, "instance "+s.c.id)
				up = append(up, s)
				marks[s] = len(s.child.fullOutput())
				t.Logf("event %d: %s comes back, so that another may leave", i, s.c.id)
			}
			var s *churnSlot
			what := "joins"
			if len(left) > 0 {
				s = left[rng.IntN(len(left))]
				s.child, s.down = startCrashChild(t, s.c), false
			} else {
				s = up[rng.IntN(len(up))]
				delete(marks, s)
				what = "leaves"
				s.stop(t)
				s.down, s.left = true, true
			}
			t.Logf("event %d: %s %s (%d records written)", i, s.c.id, what, input.n)
			v := awaitRebalanceLog(t, marks, rebalanceWait)
			killRunning(t, v.child, "instance "+v.c.id)
			v.down, v.left = true, false
			counts["crash in a rebalance"]++
			t.Logf("event %d: %s crashes in the rebalance", i, v.c.id)
		// A join when one or none runs (a crash in a rebalance can take
		// the last one down), else a join, a crash or a leave.
		case len(down) > 0 && (len(up) <= 1 || rng.IntN(2) == 0):
			s := down[rng.IntN(len(down))]
			s.child, s.down = startCrashChild(t, s.c), false
			counts["join"]++
			t.Logf("event %d: %s joins (%d records written)", i, s.c.id, input.n)
		case (counts["crash"]+counts["leave"])%2 == 0:
			s := up[rng.IntN(len(up))]
			killRunning(t, s.child, "instance "+s.c.id)
			s.down, s.left = true, false
			counts["crash"]++
			t.Logf("event %d: %s crashes (%d records written)", i, s.c.id, input.n)
		default:
			s := up[rng.IntN(len(up))]
			s.stop(t)
			s.down, s.left = true, true
			counts["leave"]++
			t.Logf("event %d: %s leaves (%d records written)", i, s.c.id, input.n)
		}
	}
	t.Logf("events: %v", counts)
	if events >= 3 && counts["crash in a rebalance"] != events/3 {
		t.Fatalf("%d crashes in a rebalance; the campaign's %d events plan %d", counts["crash in a rebalance"], events, events/3)
	}
	if counts["crash"]+counts["leave"]+counts["crash in a rebalance"] == 0 {
		t.Fatalf("the campaign's %d events took no instance down", events)
	}
	for _, s := range slots {
		if s.running() {
			continue
		}
		if !s.down {
			t.Fatalf("instance %s exited by itself:\n%s", s.c.id, s.child.output())
		}
		s.child, s.down = startCrashChild(t, s.c), false
	}
	input.feed(ctx, t, time.Second)
	return slots, input.want
}

// rebalanceRE finds an instance's part in a rebalance in its log.
var rebalanceRE = regexp.MustCompile(`msg=(revoked|assigned) `)

// awaitRebalanceLog waits for one of the instances to log, after its mark,
// that the group took tasks from it or gave it some, and returns it.
func awaitRebalanceLog(t *testing.T, marks map[*churnSlot]int, timeout time.Duration) *churnSlot {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for o, mark := range marks {
			if !o.running() {
				t.Fatalf("instance %s exited by itself:\n%s", o.c.id, o.child.output())
			}
			if rebalanceRE.MatchString(o.child.outputSince(mark)) {
				return o
			}
		}
	}
	t.Fatalf("no instance logged a rebalance within %v", timeout)
	return nil
}

// stopAll stops every instance of the campaign, each of which must have
// run to the end and stop cleanly.
func stopAll(t *testing.T, slots []*churnSlot) {
	t.Helper()
	for _, s := range slots {
		if !s.running() {
			t.Fatalf("instance %s exited by itself:\n%s", s.c.id, s.child.output())
		}
		s.stop(t)
	}
}

// Exactly-once through joins, leaves and crashes: exact counts, only
// growing.
func TestChurnExactlyOnce(t *testing.T) {
	churnExactlyOnce(t, "churn-eos", 0, *churnEvents)
}

// Exactly-once with a commit every 10ms: tasks then move while the markers
// of transactions just committed are still being written, so a restore
// must not stop at a last stable offset that lags behind them (it did, and
// about a sixth of one task's counts went missing; see settledOffsets in
// the runtime).
func TestChurnExactlyOnceFrequentCommits(t *testing.T) {
	churnExactlyOnce(t, "churn-eos-10ms", 10*time.Millisecond, 6)
}

// Exactly-once through joins, leaves and crashes at the engine's default
// configuration (a crashed static member's tasks wait for it to come back,
// or for its 45s session).
func TestChurnExactlyOnceDefaults(t *testing.T) {
	churnExactlyOnce(t, "churn-eos-defaults", -1, *churnEvents)
}

// churnExactlyOnce runs an exactly-once campaign of events with the given
// commit interval (0: the campaigns' default; negative: the engine's
// defaults for everything).
func churnExactlyOnce(t *testing.T, name string, commit time.Duration, events int) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("a churn campaign takes a minute or so; not with -short")
	}
	seed := campaignSeed(t)
	c := newCrashTopics(t, env, name)
	c.eos, c.commit = true, commit
	if commit < 0 {
		c.commit, c.defaults = 0, true
	}
	slots, want := runChurn(t, env, c, events, seed)
	// Read with every instance running.
	seqs := readCounts(t, env, c.out, want, true, func(m map[string]int64) bool { return maps.Equal(m, want) }, 3*time.Minute)
	checkGrowing(t, seqs)
	checkEcho(t, env, c, total(want), true)
	stopAll(t, slots)
}

// At-least-once through joins, leaves and crashes: nothing lost.
func TestChurnAtLeastOnce(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("a churn campaign; not with -short")
	}
	seed := campaignSeed(t)
	c := newCrashTopics(t, env, "churn-alos")
	slots, want := runChurn(t, env, c, 6, seed)
	readCounts(t, env, c.out, want, false, atLeast(want), 3*time.Minute)
	checkEcho(t, env, c, total(want), false)
	stopAll(t, slots)
}

// total is the number of records counts add up to.
func total(counts map[string]int64) int {
	n := 0
	for _, k := range counts {
		n += int(k)
	}
	return n
}
