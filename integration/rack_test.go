package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Three instances in two racks, one standby per task: A and B in rack r1, C
// in r2. Every standby sits in the other rack than its task's active
// instance, and the status says so. When A (a child process) is killed, its
// task resumes on C, in the other rack, from C's warm standby: C restores
// only the few updates its standby had not applied, and every key is there.
// At the engine's default configuration: A is a static member, so its task
// moves once A's session (45s) has ended.
func TestRackAwareStandbys(t *testing.T) {
	env := kafkaenv.Real(t)
	c := newCrashTopicsN(t, env, "rack", 3)
	c.table, c.standbys, c.eos, c.defaults = true, 1, true, true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(c.in), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const keys = 30_000
	produce := func(from, to int, value string) { produceKeys(ctx, t, cl, "k%05d", from, to, value) }
	produce(0, keys, "v1")

	// A in a child process (to be killed), B and C here.
	ac := c
	ac.id, ac.rack = "a", "r1"
	a := startCrashChild(t, ac)
	t.Cleanup(func() { a.kill(t) })
	start := func(id, rack string) (*engine.App, func()) {
		t.Helper()
		ic := c
		ic.id, ic.rack, ic.stateDir = id, rack, t.TempDir()
		app, err := engine.NewApp(failoverTopology(c.in), ic.engineConfig())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- app.Run(context.Background()) }()
		t.Cleanup(func() { _ = app.Close() })
		return app, func() {
			t.Helper()
			select {
			case err := <-done:
				t.Fatalf("%s stopped: %v", id, err)
			default:
			}
		}
	}
	select {
	case <-a.ready:
	case <-a.exited:
		t.Fatalf("A exited before it was ready:\n%s", a.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("A not ready after 2m:\n%s", a.output())
	}
	b, checkB := start("b", "r1")
	cc, checkC := start("c", "r2")
	check := func() { checkB(); checkC() }

	// Settled: one active task each, one standby each task, and the
	// standbys caught up.
	rack := map[string]string{"a": "r1", "b": "r1", "c": "r2"}
	await.Until(t, 2*time.Minute, "three instances with a task each, standbys caught up", func() bool {
		check()
		p := b.Assignment()
		if len(p) != 3 {
			return false
		}
		actives := map[string]bool{}
		for _, tp := range p {
			actives[tp.Active.ID] = true
			if len(tp.Standbys) != 1 {
				return false
			}
		}
		if len(actives) != 3 {
			return false
		}
		for _, x := range []*engine.App{b, cc} {
			for _, lag := range x.StandbyLag() {
				if lag != 0 {
					return false
				}
			}
		}
		// And C has the same placement: a probing rebalance may still be
		// on its way to one of them (seen once: C a generation ahead,
		// with a warm-up replica as a second standby).
		return len(cc.StandbyLag()) > 0 && fmt.Sprint(p) == fmt.Sprint(cc.Assignment())
	})
	var fromA string
	for _, tp := range b.Assignment() {
		sb := tp.Standbys[0]
		if rack[sb.ID] == rack[tp.Active.ID] {
			t.Errorf("task %s: active %s and standby %s both in rack %s", tp.Task, tp.Active.ID, sb.ID, rack[sb.ID])
		}
		if sb.Tags["rack"] != rack[sb.ID] || tp.Active.Tags["rack"] != rack[tp.Active.ID] {
			t.Errorf("task %s: the assignment gives the racks %v and %v", tp.Task, tp.Active.Tags, sb.Tags)
		}
		if want := "differs from the active " + tp.Active.ID; !strings.Contains(tp.Why, want) {
			t.Errorf("task %s: Why = %q, want it to say %q", tp.Task, tp.Why, want)
		}
		if tp.Active.ID == "a" {
			fromA = tp.Task
		}
		t.Logf("task %s: active %s (%s), standby %s (%s): %s", tp.Task, tp.Active.ID, rack[tp.Active.ID], sb.ID, rack[sb.ID], tp.Why)
	}
	if pb, pc := fmt.Sprint(b.Assignment()), fmt.Sprint(cc.Assignment()); pb != pc {
		t.Errorf("B and C see different placements:\n%s\n%s", pb, pc)
	}

	// Updates just before the kill; then A dies.
	const updates = 500
	produce(0, updates, "v2")
	adm := kadm.NewClient(cl)
	await.Until(t, time.Minute, "the updates committed", func() bool { return committedInput(ctx, t, adm, c) == keys+updates })
	restoredBefore := cc.RestoredRecords()
	killRunning(t, a, "A")
	killed := time.Now()
	await.Until(t, 2*time.Minute, "C to run A's task "+fromA, func() bool {
		check()
		return slices.Contains(cc.Tasks(), fromA)
	})

	// Every key once, on B or C, with its latest value.
	await.Until(t, time.Minute, "every key readable on B or C", func() bool {
		check()
		got := map[string]string{}
		for _, x := range []*engine.App{b, cc} {
			s, err := engine.QueryKeyValueStore(x, "kv", serde.String, serde.String)
			if err != nil {
				return false
			}
			for kv, err := range s.All() {
				if err != nil {
					return false
				}
				got[kv.Key] = kv.Value
			}
		}
		if len(got) != keys {
			return false
		}
		for i := range keys {
			want := "v1"
			if i < updates {
				want = "v2"
			}
			if got[fmt.Sprintf("k%05d", i)] != want {
				return false
			}
		}
		return true
	})
	// Counted once every key is readable with its latest value: the
	// restore has ended.
	restored := cc.RestoredRecords() - restoredBefore
	t.Logf("C took over %s %v after the kill, restoring %d records", fromA, time.Since(killed).Round(time.Millisecond), restored)
	if restored > updates+keys/100 {
		t.Errorf("C restored %d records: its standby should have spared it all but the last updates (%d)", restored, updates)
	}
}
