package topo

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// TopicRef names a topic as the graph knows it: a user topic by its full
// name, an internal one by its base name.
type TopicRef struct {
	Name     string
	Internal bool
}

func (r TopicRef) String() string {
	if r.Internal {
		return "${app}-" + r.Name
	}
	return r.Name
}

// Ref is the topic a source or sink node reads or writes.
func (n *Node) Ref() TopicRef { return TopicRef{Name: n.Topic, Internal: n.Internal} }

// SubTopology is a connected part of the graph: the processors that a single
// task runs for one partition of its source topics.
type SubTopology struct {
	ID      int
	Global  bool
	Nodes   []*Node // in creation order
	Sources map[TopicRef]*Node
	Stores  []*StoreSpec
	// GlobalStores are the global stores its nodes read.
	GlobalStores []*StoreSpec
}

// SourceTopics lists the sub-topology's input topics, sorted.
func (s *SubTopology) SourceTopics() []TopicRef {
	refs := make([]TopicRef, 0, len(s.Sources))
	for r := range s.Sources {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// Topology is a validated, immutable graph split into sub-topologies.
type Topology struct {
	Subs           []*SubTopology // the global sub-topologies, if any, come last
	Stores         map[string]*StoreSpec
	InternalTopics []*InternalTopic
	// Unfused: tasks run every node through the generic path, even where
	// the DSL compiled a fused line (for tests comparing the two).
	Unfused  bool
	sourceOf map[TopicRef]*SubTopology
}

// SubFor returns the sub-topology that reads a topic.
func (t *Topology) SubFor(ref TopicRef) *SubTopology { return t.sourceOf[ref] }

// Build validates a graph and splits it into sub-topologies. Every problem is
// reported, each naming the node or store it concerns.
func Build(g *Graph) (*Topology, error) {
	errs := slices.Clone(g.Errs)
	nodeErr := func(n *Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("engine: node %q: %s", n.Name, fmt.Sprintf(format, args...)))
	}

	names := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.Err != nil {
			for _, e := range flatten(n.Err) {
				nodeErr(n, "%v", e)
			}
		}
		if n.Name == "" {
			errs = append(errs, fmt.Errorf("engine: a %s node has an empty name", n.Op))
		} else if names[n.Name] != nil {
			nodeErr(n, "the name is used by another node; give one of them another name with engine.Named")
		}
		names[n.Name] = n
	}

	stores := map[string]*StoreSpec{}
	for _, s := range g.Stores {
		if stores[s.Name] != nil {
			errs = append(errs, fmt.Errorf("engine: store %q is declared twice; store names must be unique", s.Name))
		}
		if err := CheckName(s.Name); err != nil {
			errs = append(errs, fmt.Errorf("engine: store %q: %v", s.Name, err))
		}
		stores[s.Name] = s
	}

	// Connected components: a node joins its parents, and processors that share
	// a store join each other.
	parent := map[*Node]*Node{}
	var find func(*Node) *Node
	find = func(n *Node) *Node {
		p, ok := parent[n]
		if !ok || p == n {
			parent[n] = n
			return n
		}
		r := find(p)
		parent[n] = r
		return r
	}
	union := func(a, b *Node) {
		ra, rb := find(a), find(b)
		if ra != rb {
			parent[rb] = ra
		}
	}
	storeOwner := map[string]*Node{}
	for _, n := range g.Nodes {
		find(n)
		for _, p := range n.Parents {
			union(n, p)
		}
		for _, s := range n.Stores {
			if stores[s] == nil {
				nodeErr(n, "uses store %q, which is not declared", s)
				continue
			}
			if o := storeOwner[s]; o != nil {
				if o.Global != n.Global {
					nodeErr(n, "uses global store %q outside the global table that fills it", s)
					continue
				}
				union(o, n)
			} else {
				storeOwner[s] = n
			}
		}
	}

	t := &Topology{Stores: stores, sourceOf: map[TopicRef]*SubTopology{}}
	byRoot := map[*Node]*SubTopology{}
	var globals []*SubTopology
	for _, n := range g.Nodes {
		r := find(n)
		sub := byRoot[r]
		if sub == nil {
			sub = &SubTopology{Global: n.Global, Sources: map[TopicRef]*Node{}}
			byRoot[r] = sub
			if n.Global {
				globals = append(globals, sub)
			} else {
				t.Subs = append(t.Subs, sub)
			}
		}
		sub.Nodes = append(sub.Nodes, n)
		for _, s := range n.Stores {
			if spec := stores[s]; spec != nil && !slices.Contains(sub.Stores, spec) {
				sub.Stores = append(sub.Stores, spec)
			}
		}
		for _, s := range n.GlobalStores {
			spec := stores[s]
			switch {
			case spec == nil:
				nodeErr(n, "reads global store %q, which is not declared", s)
			case !spec.Global:
				nodeErr(n, "reads store %q as a global store, but it is not one", s)
			case n.Global:
				nodeErr(n, "a global table's node cannot read another global store (%q)", s)
			case !slices.Contains(sub.GlobalStores, spec):
				sub.GlobalStores = append(sub.GlobalStores, spec)
			}
		}
		if n.Kind == SourceNode {
			if err := checkTopic(n); err != nil {
				nodeErr(n, "%v", err)
			}
			ref := n.Ref()
			if other := t.sourceOf[ref]; other != nil {
				nodeErr(n, "topic %s is already read by another source; read it once and share the stream", ref)
				continue
			}
			sub.Sources[ref] = n
			t.sourceOf[ref] = sub
		}
		if n.Kind == SinkNode {
			if err := checkTopic(n); err != nil {
				nodeErr(n, "%v", err)
			}
		}
	}
	t.Subs = append(t.Subs, globals...)
	for i, s := range t.Subs {
		s.ID = i
	}

	// A sink that writes a topic some source reads feeds that source: a cycle
	// through such links would send every record round forever.
	if sink, cyc := nodeCycle(g.Nodes, t.sourceOf); sink != nil {
		nodeErr(sink, "writes topic %s, which leads back to it (%s): the records would loop forever", sink.Ref(), cyc)
	}

	seenTopic := map[string]bool{}
	for _, n := range g.Nodes {
		if n.InternalTopic != nil && !seenTopic[n.InternalTopic.Name] {
			seenTopic[n.InternalTopic.Name] = true
			t.InternalTopics = append(t.InternalTopics, n.InternalTopic)
		}
	}
	for _, s := range g.Stores {
		if s.Logged && !s.Global {
			t.InternalTopics = append(t.InternalTopics, &InternalTopic{Name: ChangelogTopic(s.Name), Kind: ChangelogTopicKind})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

func checkTopic(n *Node) error {
	if n.Topic == "" {
		return errors.New("the topic name is empty")
	}
	return CheckName(n.Topic)
}

// CheckName checks that a name can be (part of) a Kafka topic name.
func CheckName(name string) error {
	if name == "" {
		return errors.New("the name is empty")
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%q is not a legal topic name", name)
	}
	if len(name) > 200 {
		return fmt.Errorf("the name is %d characters long; at most 200 leave room for the application prefix", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q has the character %q; topic names allow only letters, digits, '.', '_' and '-'", name, r)
		}
	}
	return nil
}

// Describe prints the topology the way Kafka Streams does: sub-topologies
// with their sources, processors and sinks, then stores and internal topics.
func (t *Topology) Describe() string {
	var b strings.Builder
	b.WriteString("Topologies:\n")
	for _, sub := range t.Subs {
		if sub.Global {
			fmt.Fprintf(&b, "  Sub-topology: %d for global store (will not generate tasks)\n", sub.ID)
		} else {
			fmt.Fprintf(&b, "  Sub-topology: %d\n", sub.ID)
		}
		for _, n := range sub.Nodes {
			switch n.Kind {
			case SourceNode:
				fmt.Fprintf(&b, "    Source: %s (topics: [%s])\n", n.Name, n.Ref())
			case SinkNode:
				how := ""
				if n.Partitioner != nil {
					how = ", partitioned by a function"
				}
				fmt.Fprintf(&b, "    Sink: %s (topic: %s%s)\n", n.Name, n.Ref(), how)
			default:
				fmt.Fprintf(&b, "    Processor: %s (stores: [%s])\n", n.Name, strings.Join(n.Stores, ", "))
			}
			if len(n.Children) > 0 {
				fmt.Fprintf(&b, "      --> %s\n", joinNames(n.Children))
			}
			if len(n.Parents) > 0 {
				fmt.Fprintf(&b, "      <-- %s\n", joinNames(n.Parents))
			}
		}
	}
	if len(t.Stores) > 0 {
		b.WriteString("Stores:\n")
		names := make([]string, 0, len(t.Stores))
		for n := range t.Stores {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s := t.Stores[n]
			log := "changelog: " + TopicRef{Name: ChangelogTopic(s.Name), Internal: true}.String()
			switch {
			case s.Global:
				log = "global, from topic: " + s.Topic
			case !s.Logged:
				log = "no changelog"
			}
			mem := "persistent"
			if s.InMemory {
				mem = "in-memory"
			}
			fmt.Fprintf(&b, "  %s (%s, %s, %s)\n", s.Name, s.Kind, mem, log)
		}
	}
	if len(t.InternalTopics) > 0 {
		b.WriteString("Internal topics:\n")
		for _, it := range t.InternalTopics {
			fmt.Fprintf(&b, "  %s (%s)\n", TopicRef{Name: it.Name, Internal: true}, it.Kind)
		}
	}
	return b.String()
}

func joinNames(ns []*Node) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.Name
	}
	return strings.Join(s, ", ")
}

// nodeCycle finds a cycle among the nodes, where a node leads to its
// children and a sink to the source that reads its topic, and describes it,
// with the first sink on it, or returns nil.
func nodeCycle(nodes []*Node, sourceOf map[TopicRef]*SubTopology) (*Node, string) {
	next := func(n *Node) []*Node {
		if n.Kind != SinkNode {
			return n.Children
		}
		if n.Feedback {
			return nil
		}
		if sub := sourceOf[n.Ref()]; sub != nil {
			return []*Node{sub.Sources[n.Ref()]}
		}
		return nil
	}
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[*Node]int{}
	var path []*Node
	var found string
	var sink *Node
	var visit func(n *Node) bool
	visit = func(n *Node) bool {
		mark[n] = onPath
		path = append(path, n)
		for _, c := range next(n) {
			if c == nil {
				continue
			}
			if mark[c] == onPath {
				var parts []string
				for i := len(path) - 1; i >= 0; i-- {
					if path[i] == c {
						for _, p := range path[i:] {
							if p.Kind == SinkNode {
								if sink == nil {
									sink = p
								}
								parts = append(parts, fmt.Sprintf("%s (writes %s)", p.Name, p.Ref()))
							} else {
								parts = append(parts, p.Name)
							}
						}
						break
					}
				}
				found = strings.Join(append(parts, c.Name), " -> ")
				return true
			}
			if mark[c] == unseen && visit(c) {
				return true
			}
		}
		path = path[:len(path)-1]
		mark[n] = done
		return false
	}
	for _, n := range nodes {
		if mark[n] == unseen && visit(n) {
			return sink, found
		}
	}
	return nil, ""
}

// flatten splits joined errors, so that each gets its own line with the
// node's name.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		if e != nil {
			out = append(out, flatten(e)...)
		}
	}
	return out
}
