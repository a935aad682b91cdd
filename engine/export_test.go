package engine

import (
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
