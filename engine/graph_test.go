package engine_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// grTopology: a line the DSL fuses (lines -> words -> long words -> a
// topic), and a count of that topic's words, re-keyed through a
// repartition topic.
func grTopology(in, long, out string) *engine.Topology {
	b := engine.NewBuilder()
	lines := engine.NewStream(b, in, serde.String, serde.String, engine.Named("lines"))
	words := engine.FlatMapValues(lines, func(_ string, l string) []string { return strings.Fields(l) }, engine.Named("words"))
	words.Filter(func(_ string, w string) bool { return len(w) > 3 }, engine.Named("long")).To(long, engine.Named("long-sink"))
	longWords := engine.NewStream(b, long, serde.String, serde.String, engine.Named("long-source"))
	engine.GroupBy(longWords, func(_ string, w string) string { return w }, engine.Named("by-word")).
		Count(engine.Materialized("counts"), engine.Named("count")).ToStream(engine.Named("changes")).To(out, engine.Named("out-sink"))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// The graph holds what Describe prints, node for node, as data that
// encodes to JSON.
func TestTopologyGraph(t *testing.T) {
	top := grTopology("in", "long", "out")
	g := top.Graph()
	nodes := map[string]engine.NodeGraph{}
	var subs []int
	for _, sub := range g.SubTopologies {
		subs = append(subs, sub.ID)
		for _, n := range sub.Nodes {
			nodes[n.Name] = n
		}
	}
	if len(subs) != 3 {
		t.Fatalf("sub-topologies %v, want three (the line, the re-keying, the count)", subs)
	}
	desc := top.Describe()
	for name, n := range nodes {
		var line string
		switch n.Kind {
		case "source":
			line = "Source: " + name + " (topics: [" + n.Topic + "])"
		case "sink":
			line = "Sink: " + name + " (topic: " + n.Topic + ")"
		case "processor":
			line = "Processor: " + name + " (stores: [" + strings.Join(n.Stores, ", ") + "])"
		default:
			t.Errorf("node %s: kind %q", name, n.Kind)
		}
		if !strings.Contains(desc, line) {
			t.Errorf("node %s: Describe has no line %q:\n%s", name, line, desc)
		}
		for _, c := range n.Children {
			if !slices.Contains(nodes[c].Parents, name) {
				t.Errorf("node %s has the child %s, which does not have it as a parent", name, c)
			}
		}
	}
	if n := nodes["lines"]; n.Op != "source" || n.Topic != "in" || n.Internal || !slices.Equal(n.Children, []string{"words"}) {
		t.Errorf("lines: %+v", n)
	}
	if n := nodes["count"]; !slices.Equal(n.Stores, []string{"counts"}) {
		t.Errorf("count: stores %v, want [counts]", n.Stores)
	}
	var internalSources int
	for _, n := range nodes {
		if n.Internal {
			internalSources++
			if !strings.HasPrefix(n.Topic, "${app}-") {
				t.Errorf("node %s reads or writes the internal topic %q, without the ${app}- prefix", n.Name, n.Topic)
			}
		}
	}
	if internalSources != 2 {
		t.Errorf("%d nodes on internal topics, want 2 (the repartition topic's sink and source)", internalSources)
	}
	if len(g.Stores) != 1 || g.Stores[0] != (engine.StoreGraph{Name: "counts", Kind: "key-value", Changelog: "${app}-counts-changelog"}) {
		t.Errorf("stores %+v", g.Stores)
	}
	var kinds []string
	for _, it := range g.InternalTopics {
		kinds = append(kinds, it.Kind)
		if !strings.Contains(desc, it.Name+" ("+it.Kind+")") {
			t.Errorf("internal topic %+v is not in Describe", it)
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"changelog", "repartition"}) {
		t.Errorf("internal topics %+v", g.InternalTopics)
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back engine.TopologyGraph
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(back.SubTopologies, g.SubTopologies, func(a, b engine.SubTopologyGraph) bool {
		return a.ID == b.ID && len(a.Nodes) == len(b.Nodes)
	}) {
		t.Errorf("the graph does not survive JSON: %s", b)
	}
}

// NodeRecords counts the records that reached each node, the same on the
// fused line as on the generic path: what the input says each node sees.
func TestAppNodeRecords(t *testing.T) {
	for _, fused := range []bool{true, false} {
		name := "fused"
		if !fused {
			name = "unfused"
		}
		t.Run(name, func(t *testing.T) {
			k := newKT(t)
			in, long, out := k.topic("in"), k.topic("long"), k.topic("out")
			k.create(3, in, long, out)
			top := grTopology(in, long, out)
			if fused {
				if got := engine.FusedSources(top); !slices.Equal(got, []string{"lines", "long-source"}) {
					t.Fatalf("fused sources %v, want [lines long-source]", got)
				}
			} else {
				top = engine.Unfused(top)
			}
			recs := genLines(11, 300)
			var words, longWords int64
			distinct := map[string]bool{}
			for _, r := range recs {
				for _, w := range strings.Fields(string(r.Value)) {
					words++
					if len(w) > 3 {
						longWords++
						distinct[w] = true
					}
				}
			}
			a := k.start(top, engine.Config{})
			k.produce(in, recs...)
			k.table(out, time.Minute, func(m map[string]int64) bool {
				var n int64
				for _, c := range m {
					n += c
				}
				return n == longWords
			})
			want := map[string]int64{
				"lines": int64(len(recs)), "words": int64(len(recs)), "long": words, "long-sink": longWords,
				"long-source": longWords, "by-word-key": longWords, "by-word-sink": longWords, "by-word-source": longWords, "count": longWords,
			}
			var got map[string]int64
			defer func() {
				if t.Failed() {
					t.Logf("counts %v, want %v", got, want)
				}
			}()
			// The count forwards a change per record, fewer where the cache
			// holds some back, at least one per word (a commit's flush of
			// the cache shows at the end of the next round); every change
			// reaches the sink.
			await.Until(t, 30*time.Second, "the counts of every node", func() bool {
				got = a.NodeRecords()
				for n, c := range want {
					if got[n] != c {
						return false
					}
				}
				return got["changes"] >= int64(len(distinct)) && got["out-sink"] == got["changes"]
			})
			if c := got["changes"]; c > longWords {
				t.Errorf("changes %d: want at most %d", c, longWords)
			}
			for n := range got {
				if _, ok := nodesOf(top)[n]; !ok {
					t.Errorf("a count for %q, which is no node of the topology", n)
				}
			}
			k.checkApps()
		})
	}
}

func nodesOf(top *engine.Topology) map[string]bool {
	out := map[string]bool{}
	for _, sub := range top.Graph().SubTopologies {
		for _, n := range sub.Nodes {
			out[n.Name] = true
		}
	}
	return out
}
