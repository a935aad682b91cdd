package engine

import "github.com/oxbow-dev/oxbow/engine/internal/topo"

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
