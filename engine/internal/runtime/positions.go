package runtime

import (
	"github.com/oxbow-dev/oxbow/engine/record"

	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Positions that follow the data through repartition topics.
//
// A store reflects an input record once its task has processed every
// record derived from it. For a store fed straight from an input topic
// that is the task's position on the input. Behind a repartition topic it
// is not: the record that the input's offset o became sits somewhere in a
// partition of the repartition topic, written by another task. So each
// task, at each commit, writes a position marker to every partition of
// every repartition topic it writes: a record with no key and no value and
// the header PositionHeader, saying which input positions everything it
// wrote before reflects. Records of one writer keep their order in a
// partition, so a task that has read a marker has read every record its
// writer derived from those positions. Markers go wherever the records go
// (the next repartition carries them on as the task's own positions), and
// never reach a processor.
//
// What one repartition partition tells of an input partition O:p depends
// on its writers: if they read O themselves (O's partition p is read by
// the writer of partition p only), the marker of that one writer says it
// all (exclusive); if they have O from a repartition of their own, every
// writer may hold records of O:p, and a reader knows O:p once each has
// said so, at the least of their positions (shared). The committed offsets'
// metadata keeps what a task knew (with the stream time), so that a task
// moved or restarted knows it again before any new marker.

// PositionHeader marks a position marker; its value is the writer's
// partition and its positions (encodePositions).
const PositionHeader = record.PositionHeader

// flowPlan is what flows where, worked out once from the topology.
type flowPlan struct {
	// writer is the sub-topology writing each repartition topic (real
	// name).
	writer map[string]int
	// carried: per sub-topology and repartition topic it reads, the
	// input topics whose positions the topic carries (true: exclusively,
	// each partition's by one writer).
	carried map[int]map[string]map[string]bool
	// sinks: per sub-topology, the repartition topics it writes and the
	// source topics their records come from.
	sinks map[int][]flowSink
	// storeSources: per store, the source topics of its sub-topology that
	// lead to it.
	storeSources map[string][]string
	// origins: per store, the input topics it derives from.
	origins map[string][]string
	// internal are the internal topics the tasks read.
	internal map[string]bool
}

type flowSink struct {
	topic   string
	sources []string
}

// planFlow works out the flow plan of a topology whose topics plan has
// named.
func planFlow(t *topo.Topology, plan *topicPlan) *flowPlan {
	f := &flowPlan{writer: map[string]int{}, carried: map[int]map[string]map[string]bool{}, sinks: map[int][]flowSink{}, storeSources: map[string][]string{}, origins: map[string][]string{}, internal: map[string]bool{}}
	subs := map[int]*topo.SubTopology{}
	for _, s := range t.Subs {
		if s.Global {
			continue
		}
		subs[s.ID] = s
		srcOf := map[*topo.Node]string{}
		for ref, n := range s.Sources {
			srcOf[n] = plan.name(ref)
			if ref.Internal {
				f.internal[plan.name(ref)] = true
			}
		}
		ancestors := func(n *topo.Node) []string {
			seen := map[*topo.Node]bool{}
			var out []string
			var walk func(*topo.Node)
			walk = func(n *topo.Node) {
				if seen[n] {
					return
				}
				seen[n] = true
				if topic, ok := srcOf[n]; ok {
					out = append(out, topic)
				}
				for _, p := range n.Parents {
					walk(p)
				}
			}
			walk(n)
			slices.Sort(out)
			return slices.Compact(out)
		}
		for _, n := range s.Nodes {
			if n.Kind == topo.SinkNode && n.Internal && n.InternalTopic != nil && n.InternalTopic.Kind == topo.RepartitionTopic {
				topic := plan.name(topo.TopicRef{Name: n.Topic, Internal: true})
				f.writer[topic] = s.ID
				f.sinks[s.ID] = append(f.sinks[s.ID], flowSink{topic: topic, sources: ancestors(n)})
			}
			for _, st := range n.Stores {
				f.storeSources[st] = append(f.storeSources[st], ancestors(n)...)
			}
		}
	}
	for st, srcs := range f.storeSources {
		slices.Sort(srcs)
		f.storeSources[st] = slices.Compact(srcs)
	}
	// origins of a set of source topics of a sub-topology: input topic ->
	// read only directly (not through a repartition topic). Records flow
	// along a DAG of nodes even where sub-topologies feed each other both
	// ways (a foreign-key join's subscription and response): visiting
	// guards the repartition topics on the way, not the sub-topologies.
	var originsOf func(sub int, sources []string, visiting map[string]bool) map[string]bool
	originsOf = func(sub int, sources []string, visiting map[string]bool) map[string]bool {
		out := map[string]bool{}
		derived := map[string]bool{}
		for _, src := range sources {
			w, internal := f.writer[src]
			if !internal {
				if !f.internal[src] {
					out[src] = true
				}
				continue
			}
			if visiting[src] {
				continue // cannot happen in a DAG; a guard all the same
			}
			visiting[src] = true
			for _, sk := range f.sinks[w] {
				if sk.topic != src {
					continue
				}
				for o, direct := range originsOf(w, sk.sources, visiting) {
					if f.carried[sub] == nil {
						f.carried[sub] = map[string]map[string]bool{}
					}
					if f.carried[sub][src] == nil {
						f.carried[sub][src] = map[string]bool{}
					}
					f.carried[sub][src][o] = direct
					derived[o] = true
				}
			}
			delete(visiting, src)
		}
		for o := range derived {
			out[o] = false
		}
		return out
	}
	for id, sinks := range f.sinks {
		for _, sk := range sinks {
			originsOf(id, sk.sources, map[string]bool{})
		}
	}
	for st, srcs := range f.storeSources {
		sub := plan.storeSub[st]
		if sub == nil {
			continue
		}
		f.origins[st] = slices.Sorted(maps.Keys(originsOf(sub.ID, srcs, map[string]bool{})))
	}
	return f
}

// originSlot is what a task knows of one input partition through one
// repartition topic it reads.
type originSlot struct {
	exclusive bool
	floor     int64   // known at least this far (-1: nothing known)
	writers   []int64 // shared: each writer's position (-1: not heard)
}

func (s *originSlot) value() int64 {
	if s.exclusive || len(s.writers) == 0 {
		return s.floor
	}
	least := s.writers[0]
	for _, v := range s.writers[1:] {
		least = min(least, v)
	}
	if least < 0 {
		return s.floor
	}
	return max(s.floor, least)
}

// slot is the task's slot of input partition o through repartition topic
// src, made on first use; nil if src does not carry o's topic.
func (t *rtask) slot(src string, o topicPartition) *originSlot {
	exclusive, ok := t.r.flow.carried[t.sub.ID][src][o.topic]
	if !ok {
		return nil
	}
	if t.derived == nil {
		t.derived = map[string]map[topicPartition]*originSlot{}
	}
	m := t.derived[src]
	if m == nil {
		m = map[topicPartition]*originSlot{}
		t.derived[src] = m
	}
	s := m[o]
	if s == nil {
		s = &originSlot{exclusive: exclusive, floor: -1}
		if !exclusive {
			s.writers = make([]int64, t.r.plan.tasks[t.r.flow.writer[src]])
			for i := range s.writers {
				s.writers[i] = -1
			}
		}
		m[o] = s
	}
	return s
}

// applyMarker takes in a position marker read from repartition topic src.
func (t *rtask) applyMarker(src string, writer int32, pos map[topicPartition]int64) {
	for o, at := range pos {
		s := t.slot(src, o)
		switch {
		case s == nil:
		case s.exclusive:
			if writer == o.partition {
				s.floor = max(s.floor, at)
			}
		case int(writer) < len(s.writers):
			s.writers[writer] = max(s.writers[writer], at)
		}
	}
}

// reflects is what the records the task processed from sources reflect:
// per input partition, the offset after the last input record they have
// all processed everything derived from. An input partition some source
// knows nothing of yet is missing.
func (t *rtask) reflects(sources []string) map[topicPartition]int64 {
	out := map[topicPartition]int64{}
	unknown := map[topicPartition]bool{}
	note := func(o topicPartition, at int64) {
		if at < 0 {
			unknown[o] = true
			return
		}
		if prev, ok := out[o]; !ok || at < prev {
			out[o] = at
		}
	}
	for _, src := range sources {
		if !t.r.flow.internal[src] {
			if q := t.queues[topicPartition{src, t.id.Partition}]; q != nil {
				note(q.tp, q.processed)
			}
			continue
		}
		for topic := range t.r.flow.carried[t.sub.ID][src] {
			for p := range t.r.plan.partitions[topic] {
				o := topicPartition{topic, p}
				note(o, t.slot(src, o).value())
			}
		}
	}
	for o := range unknown {
		delete(out, o)
	}
	return out
}

// sendMarkers writes a position marker to every partition of each
// repartition topic the task writes whose positions moved since its last
// marker. Only the commit calls it, with no worker running, before the
// producer is flushed.
func (t *rtask) sendMarkers() {
	t.readCommitted()
	for _, sk := range t.r.flow.sinks[t.sub.ID] {
		pos := t.reflects(sk.sources)
		if len(pos) == 0 || maps.Equal(pos, t.marked[sk.topic]) {
			continue
		}
		if t.marked == nil {
			t.marked = map[string]map[topicPartition]int64{}
		}
		t.marked[sk.topic] = pos
		hv := encodePositions(t.id.Partition, pos)
		ts := t.t.StreamTime()
		if ts == topo.NoTime {
			ts = 0
		}
		for p := range t.r.plan.partitions[sk.topic] {
			t.out.produce(topo.Output{Topic: sk.topic, Timestamp: ts, Headers: []topo.Header{{Key: PositionHeader, Value: hv}}}, p)
		}
	}
}

// markerOf decodes a record's position marker; false if it is none.
func markerOf(rec *kgo.Record) (writer int32, pos map[topicPartition]int64, ok bool) {
	if rec.Key != nil || rec.Value != nil {
		return 0, nil, false
	}
	for _, h := range rec.Headers {
		if h.Key == PositionHeader {
			w, pos, err := decodePositions(h.Value)
			return w, pos, err == nil
		}
	}
	return 0, nil, false
}

func isMarker(rec *kgo.Record) bool {
	_, _, ok := markerOf(rec)
	return ok
}

// encodePositions: the writer's partition, then per position its topic
// (length-prefixed), partition and offset, as varints.
func encodePositions(writer int32, pos map[topicPartition]int64) []byte {
	b := binary.AppendUvarint(nil, uint64(writer))
	for _, o := range slices.SortedFunc(maps.Keys(pos), compareTP) {
		b = binary.AppendUvarint(b, uint64(len(o.topic)))
		b = append(b, o.topic...)
		b = binary.AppendUvarint(b, uint64(o.partition))
		b = binary.AppendVarint(b, pos[o])
	}
	return b
}

var errBadMarker = errors.New("engine: a malformed position marker")

func decodePositions(b []byte) (int32, map[topicPartition]int64, error) {
	w, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errBadMarker
	}
	b = b[n:]
	pos := map[topicPartition]int64{}
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return 0, nil, errBadMarker
		}
		topic := string(b[n : n+int(l)])
		b = b[n+int(l):]
		p, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, nil, errBadMarker
		}
		b = b[n:]
		o, n := binary.Varint(b)
		if n <= 0 {
			return 0, nil, errBadMarker
		}
		b = b[n:]
		pos[topicPartition{topic, int32(p)}] = o
	}
	return int32(w), pos, nil
}

func compareTP(a, b topicPartition) int {
	if c := strings.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return int(a.partition) - int(b.partition)
}

// derivedMeta is what the task knows through repartition topic partition
// tp, for the commit's metadata: "topic/partition/offset" joined by commas.
func (t *rtask) derivedMeta(src string) string {
	m := t.derived[src]
	var parts []string
	for _, o := range slices.SortedFunc(maps.Keys(m), compareTP) {
		if v := m[o].value(); v >= 0 {
			parts = append(parts, o.topic+"/"+strconv.Itoa(int(o.partition))+"/"+strconv.FormatInt(v, 10))
		}
	}
	return strings.Join(parts, ",")
}

// restoreDerived takes in what a commit's metadata kept of repartition
// topic src (derivedMeta).
func (t *rtask) restoreDerived(src, meta string) {
	for part := range strings.SplitSeq(meta, ",") {
		f := strings.Split(part, "/")
		if len(f) != 3 {
			continue
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		o, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if s := t.slot(src, topicPartition{f[0], int32(p)}); s != nil {
			s.floor = max(s.floor, o)
		}
	}
}

// readCommitted takes in, once the group's offsets are known, the
// committed offset of each input partition as its processed position and
// what the commit's metadata kept of the positions derived from it.
func (t *rtask) readCommitted() {
	for tp, q := range t.queues {
		if q.metaRead {
			continue
		}
		o, ok := t.r.times.committedOffset(tp)
		if !ok {
			continue
		}
		q.metaRead = true
		if q.processed < 0 && o >= 0 {
			q.processed = o
		}
		if d := t.r.times.derivedOf(tp); d != "" {
			t.restoreDerived(tp.topic, d)
		}
	}
}

// publishStorePositions records, at the commit, what each store of the
// task reflects. The caller holds r.posMu.
func (t *rtask) publishStorePositions() {
	r := t.r
	t.readCommitted()
	for _, spec := range t.sub.Stores {
		if spec.Global {
			continue
		}
		if r.storePos == nil {
			r.storePos = map[string]map[int32]map[topicPartition]int64{}
		}
		if r.storePos[spec.Name] == nil {
			r.storePos[spec.Name] = map[int32]map[topicPartition]int64{}
		}
		r.storePos[spec.Name][t.id.Partition] = t.reflects(r.flow.storeSources[spec.Name])
	}
}

// StorePosition is what an instance's partitions of a store reflect.
type StorePosition struct {
	// Offsets: per input partition, the offset after the last input
	// record that every partition here has processed everything derived
	// from (input partitions some of them know nothing of yet are
	// missing).
	Offsets map[string]map[int32]int64
	// Inputs are the input topics the store derives from; Derived, those
	// of them it has through a repartition topic (each partition of the
	// store then hears of every partition of them).
	Inputs, Derived []string
	// Partitions are the store's partitions here, once committed.
	Partitions []int32
}

// StorePositions returns what this instance's partitions of a store
// reflect. False: the instance is not running yet.
func (r *Runtime) StorePositions(store string) (StorePosition, bool) {
	r.posMu.Lock()
	defer r.posMu.Unlock()
	if r.flow == nil {
		return StorePosition{}, false
	}
	if spec := r.topo.Stores[store]; spec != nil && spec.Global {
		// A global table's store holds every partition of its topic.
		sp := StorePosition{Inputs: []string{spec.Topic}, Derived: []string{spec.Topic}, Partitions: []int32{globalPartition}, Offsets: map[string]map[int32]int64{}}
		for tp, o := range r.globalPos {
			if tp.topic == spec.Topic {
				if sp.Offsets[tp.topic] == nil {
					sp.Offsets[tp.topic] = map[int32]int64{}
				}
				sp.Offsets[tp.topic][tp.partition] = o
			}
		}
		return sp, true
	}
	sp := StorePosition{Inputs: slices.Clone(r.flow.origins[store]), Offsets: map[string]map[int32]int64{}}
	for _, topic := range sp.Inputs {
		if r.carriedToAll(store, topic) {
			sp.Derived = append(sp.Derived, topic)
		}
	}
	least := map[topicPartition]int64{}
	unknown := map[topicPartition]bool{}
	parts := r.storePos[store]
	sp.Partitions = slices.Sorted(maps.Keys(parts))
	for _, pos := range parts {
		for o, at := range pos {
			if prev, ok := least[o]; !ok || at < prev {
				least[o] = at
			}
		}
	}
	// An input partition carried to every partition of the store counts
	// only if each partition here knows it.
	for o := range least {
		if !slices.Contains(sp.Derived, o.topic) {
			continue
		}
		for _, pos := range parts {
			if _, ok := pos[o]; !ok {
				unknown[o] = true
			}
		}
	}
	for o, at := range least {
		if unknown[o] {
			continue
		}
		if sp.Offsets[o.topic] == nil {
			sp.Offsets[o.topic] = map[int32]int64{}
		}
		sp.Offsets[o.topic][o.partition] = at
	}
	return sp, true
}

// carriedToAll reports whether a store has input topic topic through a
// repartition topic (then every partition of the store has each of its
// partitions), rather than only by reading it.
func (r *Runtime) carriedToAll(store, topic string) bool {
	sub := r.plan.storeSub[store]
	if sub == nil {
		return false
	}
	for _, src := range r.flow.storeSources[store] {
		if _, ok := r.flow.carried[sub.ID][src][topic]; ok {
			return true
		}
	}
	return false
}

// sendMarkersLocked sends every task's position markers (sendMarkers).
// The caller holds r.mu and no worker runs.
func (r *Runtime) sendMarkersLocked() {
	for _, t := range r.tasks {
		if !t.restoring {
			t.sendMarkers()
		}
	}
}
