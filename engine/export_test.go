package engine

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/runtime"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Unfused returns the topology with fusion off: every node runs through the
// generic path.
func Unfused(t *Topology) *Topology {
	c := *t.t
	c.Unfused = true
	return &Topology{t: &c}
}

// FusedSources names the sources of t that have a fused line.
func FusedSources(t *Topology) []string {
	var names []string
	for _, sub := range t.t.Subs {
		for _, n := range sub.Nodes {
			if n.Kind == topo.SourceNode && n.Fuse != nil {
				names = append(names, n.Name)
			}
		}
	}
	return names
}

// RevokeMidStream makes a's loop act, right after the first poll that
// returned records and follows another that did (so the transaction holds
// processed records), as though the group had revoked every task and
// assigned the same ones again: the moment an eager rebalance can land.
// fired reports whether it has.
func RevokeMidStream(t testing.TB, a *App) (fired func() bool) {
	var prev, done atomic.Bool
	runtime.SetPolledHook(func(r *runtime.Runtime, records int) {
		if r != a.rt {
			return
		}
		if records > 0 && prev.Load() && !done.Load() {
			r.RevokeForTest()
			done.Store(true)
		}
		prev.Store(records > 0)
	})
	t.Cleanup(func() { runtime.SetPolledHook(nil) })
	return done.Load
}

// UnreadValueSources names the sources of t that skip decoding values.
func UnreadValueSources(t *Topology) []string {
	var names []string
	for _, sub := range t.t.Subs {
		for _, n := range sub.Nodes {
			if n.Kind == topo.SourceNode && n.ValueUnread {
				names = append(names, n.Name)
			}
		}
	}
	return names
}

// SubTopologyTopics describes one sub-topology of a topology for the tests
// that run it on a broker.
type SubTopologyTopics struct {
	// Sources and Sinks are the topics the sub-topology reads and writes,
	// sorted, internal ones written "${app}-<name>".
	Sources, Sinks []string
	// GlobalStore is, for a global table's sub-topology, the store its
	// topic fills; "" for the others.
	GlobalStore string
}

// SubTopologies describes the sub-topologies of t, global ones last.
func SubTopologies(t *Topology) []SubTopologyTopics {
	var out []SubTopologyTopics
	for _, sub := range t.t.Subs {
		var s SubTopologyTopics
		for _, ref := range sub.SourceTopics() {
			s.Sources = append(s.Sources, ref.String())
		}
		for _, n := range sub.Nodes {
			if n.Kind == topo.SinkNode && !slices.Contains(s.Sinks, n.Ref().String()) {
				s.Sinks = append(s.Sinks, n.Ref().String())
			}
		}
		slices.Sort(s.Sinks)
		if sub.Global {
			for _, st := range sub.Stores {
				if st.Global {
					s.GlobalStore = st.Name
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// RevokeNow makes a's loop act, at its next round, as though the group had
// revoked every task and assigned the same ones again (RevokeForTest).
func RevokeNow(a *App) { a.rt.RevokeForTest() }

// OnRestored calls fn in the loop of every instance, each time it has
// applied records to a restoring task's stores and published Restoring,
// with what Restoring answers then (nil: no more). A test that sets it
// runs no other instance meanwhile.
func OnRestored(fn func([]RestoreProgress)) {
	if fn == nil {
		runtime.SetRestoredHook(nil)
		return
	}
	runtime.SetRestoredHook(func(r *runtime.Runtime) { fn((&App{rt: r}).Restoring()) })
}
