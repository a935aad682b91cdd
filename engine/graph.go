package engine

import (
	"maps"
	"slices"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// TopologyGraph is a topology's structure as data: what Describe prints, for
// a program to draw or check (httpapi's /topology answers it as JSON, and
// its console draws it). Internal topics have the "${app}-" prefix Describe
// shows; an App's are its group's name followed by "-".
type TopologyGraph struct {
	SubTopologies  []SubTopologyGraph `json:"subTopologies"`
	Stores         []StoreGraph       `json:"stores"`
	InternalTopics []TopicGraph       `json:"internalTopics"`
}

// SubTopologyGraph is one sub-topology: the nodes a task runs for one
// partition of its inputs (for a global store's, every instance runs them
// for every partition, with no task).
type SubTopologyGraph struct {
	ID     int         `json:"id"`
	Global bool        `json:"global,omitempty"`
	Nodes  []NodeGraph `json:"nodes"` // in the order the DSL recorded them
}

// NodeGraph is one node of a sub-topology.
type NodeGraph struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // "source", "processor" or "sink"
	// Op is what the DSL called it: "filter", "count", "sink", ….
	Op string `json:"op"`
	// Topic is what a source reads or a sink writes; Internal says it is
	// one of the application's internal topics.
	Topic    string   `json:"topic,omitempty"`
	Internal bool     `json:"internal,omitempty"`
	Stores   []string `json:"stores,omitempty"` // the stores a processor uses
	Children []string `json:"children,omitempty"`
	Parents  []string `json:"parents,omitempty"`
}

// StoreGraph is one store of the topology.
type StoreGraph struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // "key-value", "window" or "session"
	InMemory bool   `json:"inMemory,omitempty"`
	// Changelog is the topic that backs the store (none for a store
	// without one, or a global store, which its Topic fills).
	Changelog string `json:"changelog,omitempty"`
	Global    bool   `json:"global,omitempty"`
	Topic     string `json:"topic,omitempty"` // a global store's source topic
}

// TopicGraph is one internal topic.
type TopicGraph struct {
	Name string `json:"name"` // with the "${app}-" prefix
	Kind string `json:"kind"` // "repartition" or "changelog"
}

// Graph returns the topology's structure as data.
func (t *Topology) Graph() TopologyGraph {
	g := TopologyGraph{SubTopologies: []SubTopologyGraph{}, Stores: []StoreGraph{}, InternalTopics: []TopicGraph{}}
	names := func(ns []*topo.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return out
	}
	for _, sub := range t.t.Subs {
		sg := SubTopologyGraph{ID: sub.ID, Global: sub.Global, Nodes: []NodeGraph{}}
		for _, n := range sub.Nodes {
			ng := NodeGraph{Name: n.Name, Op: n.Op, Children: names(n.Children), Parents: names(n.Parents)}
			switch n.Kind {
			case topo.SourceNode:
				ng.Kind = "source"
			case topo.SinkNode:
				ng.Kind = "sink"
			default:
				ng.Kind = "processor"
				ng.Stores = slices.Clone(n.Stores)
			}
			if n.Kind != topo.ProcessorNode {
				ng.Topic, ng.Internal = n.Ref().String(), n.Internal
			}
			sg.Nodes = append(sg.Nodes, ng)
		}
		g.SubTopologies = append(g.SubTopologies, sg)
	}
	for _, name := range slices.Sorted(maps.Keys(t.t.Stores)) {
		s := t.t.Stores[name]
		sg := StoreGraph{Name: s.Name, Kind: s.Kind.String(), InMemory: s.InMemory, Global: s.Global}
		switch {
		case s.Global:
			sg.Topic = s.Topic
		case s.Logged:
			sg.Changelog = topo.TopicRef{Name: topo.ChangelogTopic(s.Name), Internal: true}.String()
		}
		g.Stores = append(g.Stores, sg)
	}
	for _, it := range t.t.InternalTopics {
		g.InternalTopics = append(g.InternalTopics, TopicGraph{Name: topo.TopicRef{Name: it.Name, Internal: true}.String(), Kind: it.Kind.String()})
	}
	return g
}
