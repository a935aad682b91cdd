package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Close does not wait for a join the group holds back. A static member that
// crashed (here: closed without leaving) still counts in its group until
// its session times out, so the rebalance that a new instance's join starts
// waits for it; franz-go's leave and close wait for a join in flight. Close
// ends the join instead: it returns while the crashed member is still in
// the group (it took 42s, the rest of that member's session, before).
func TestAppCloseDuringHeldJoin(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	top := countByKey(in, out)
	cfg := func(id string) engine.Config {
		return engine.Config{InstanceID: id, SessionTimeout: 45 * time.Second, Guarantee: engine.ExactlyOnce}
	}
	a := k.start(top, cfg("a"))
	waitRunning(t, k, a)
	if err := a.Close(); err != nil { // static: stays a member until its session ends
		t.Fatal(err)
	}
	b := k.start(top, cfg("b"))
	describe := func() kadm.DescribedGroup {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := k.adm.DescribeGroups(ctx, k.prefix)
		if err != nil {
			t.Fatal(err)
		}
		return gs[k.prefix]
	}
	hasA := func(g kadm.DescribedGroup) bool {
		for _, m := range g.Members {
			if m.InstanceID != nil && *m.InstanceID == "a" {
				return true
			}
		}
		return false
	}
	await.Until(t, 30*time.Second, "b's join to start a rebalance", func() bool { return describe().State == "PreparingRebalance" })
	if s := b.State(); s == engine.AppRunning {
		t.Fatalf("b is %v: its join was not held", s)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if g := describe(); !hasA(g) {
		t.Errorf("Close returned after the crashed member's session ended (group %s, members %v): it waited for the join", g.State, g.Members)
	}
}
