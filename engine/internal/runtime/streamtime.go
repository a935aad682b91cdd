package runtime

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Stream time survives a restart and a move to another instance the way
// Kafka Streams keeps its partition time: in the metadata of the committed
// offsets. Each commit writes, for every input partition it commits, the
// stream time of the partition's task; a task starts from the largest
// stream time committed for its partitions. Without it a window that had
// closed would open again after a restart, and a record its grace had
// excluded would count.

// streamTimes holds what the instance knows of the committed stream time of
// each input partition: fetched with the group's offsets after a
// rebalance, and updated by each commit of the instance.
type streamTimes struct {
	mu sync.Mutex
	m  map[topicPartition]int64
	// committed are the offsets the group had committed, as fetched
	// after a rebalance (for bootstrap.go).
	committed map[topicPartition]int64
	// derived is what the tasks knew through repartition partitions, as
	// committed (positions.go).
	derived map[topicPartition]string
}

// streamTimePrefix starts the offset commit metadata this engine writes.
const streamTimePrefix = "oxbow-st:"

// maxMetadata bounds the metadata of a committed offset (Kafka's
// offset.metadata.max.bytes is 4096 by default).
const maxMetadata = 4000

// encodeStreamTime is a partition's commit metadata: its stream time
// (none: topo.NoTime), and what its task knew through it of the input
// positions, if it is a repartition partition (derivedMeta), after a
// semicolon.
func encodeStreamTime(ms int64, derived string) string {
	s := streamTimePrefix
	if ms != topo.NoTime {
		s += strconv.FormatInt(ms, 10)
	}
	if derived != "" && len(s)+1+len(derived) <= maxMetadata {
		s += ";" + derived
	}
	return s
}

// decodeMeta decodes encodeStreamTime's metadata: the stream time (false
// if none) and the derived positions.
func decodeMeta(meta *string) (int64, string, bool) {
	if meta == nil {
		return 0, "", false
	}
	s, ok := strings.CutPrefix(*meta, streamTimePrefix)
	if !ok {
		return 0, "", false
	}
	s, derived, _ := strings.Cut(s, ";")
	ms, err := strconv.ParseInt(s, 10, 64)
	return ms, derived, err == nil
}

// onOffsetsFetched records the stream times committed with the offsets
// the group consumer fetched (before it fetches any record of them).
func (s *streamTimes) onOffsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[topicPartition]int64{}
	}
	if s.committed == nil {
		s.committed = map[topicPartition]int64{}
	}
	if s.derived == nil {
		s.derived = map[topicPartition]string{}
	}
	add := func(topic string, p int32, offset int64, meta *string) {
		ms, derived, ok := decodeMeta(meta)
		if ok {
			s.m[topicPartition{topic, p}] = ms
		}
		if derived != "" {
			s.derived[topicPartition{topic, p}] = derived
		}
		s.committed[topicPartition{topic, p}] = offset
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.Offset, p.Metadata)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.Offset, p.Metadata)
			}
		}
	}
	return nil
}

// committedOffset is the group's committed offset of a partition, as last
// fetched: -1 if it has none, false if none was fetched.
func (s *streamTimes) committedOffset(tp topicPartition) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.committed[tp]
	return o, ok
}

// derivedOf is what was committed of a repartition partition's derived
// positions.
func (s *streamTimes) derivedOf(tp topicPartition) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.derived[tp]
}

// of is the largest stream time committed for any of the partitions.
func (s *streamTimes) of(tps []topicPartition) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, found := int64(0), false
	for _, tp := range tps {
		if ms, ok := s.m[tp]; ok && (!found || ms > best) {
			best, found = ms, true
		}
	}
	return best, found
}

// set records stream times (and derived positions) the instance
// committed.
func (s *streamTimes) set(times commitMeta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[topicPartition]int64{}
	}
	if s.derived == nil {
		s.derived = map[topicPartition]string{}
	}
	for tp, ms := range times.times {
		s.m[tp] = ms
	}
	for tp, d := range times.derived {
		s.derived[tp] = d
	}
}

// startStreamTime gives a task, before its first record, the stream time
// committed for its partitions. The caller holds r.mu.
func (t *rtask) startStreamTime() {
	if t.timeSet {
		return
	}
	t.timeSet = true
	tps := make([]topicPartition, 0, len(t.queues))
	for tp := range t.queues {
		tps = append(tps, tp)
	}
	if ms, ok := t.r.times.of(tps); ok {
		t.t.RaiseStreamTime(ms)
	}
}

// commitMeta is what a commit writes in its offsets' metadata.
type commitMeta struct {
	times   map[topicPartition]int64  // stream times
	derived map[topicPartition]string // derived positions (derivedMeta)
}

// commitTimes is the stream time of every input partition of a task that
// has one, and the derived positions of its repartition partitions. The
// caller holds r.mu and no worker runs.
func (r *Runtime) commitTimes() commitMeta {
	m := commitMeta{times: map[topicPartition]int64{}, derived: map[topicPartition]string{}}
	for _, t := range r.tasks {
		ms := t.t.StreamTime()
		for tp := range t.queues {
			if ms != topo.NoTime {
				m.times[tp] = ms
			}
			if d := t.derivedMeta(tp.topic); d != "" {
				m.derived[tp] = d
			}
		}
	}
	return m
}

// withStreamTimes returns ctx carrying the functions that put the stream
// times into the commit franz-go is about to send (a plain offset commit
// or, under exactly-once, the transaction's).
func withStreamTimes(ctx context.Context, times commitMeta) context.Context {
	meta := func(topic string, p int32) *string {
		tp := topicPartition{topic, p}
		ms, ok := times.times[tp]
		d := times.derived[tp]
		if !ok && d == "" {
			return nil
		}
		if !ok {
			ms = topo.NoTime
		}
		s := encodeStreamTime(ms, d)
		return &s
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				if m := meta(req.Topics[i].Topic, req.Topics[i].Partitions[j].Partition); m != nil {
					req.Topics[i].Partitions[j].Metadata = m
				}
			}
		}
		return nil
	})
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				if m := meta(req.Topics[i].Topic, req.Topics[i].Partitions[j].Partition); m != nil {
					req.Topics[i].Partitions[j].Metadata = m
				}
			}
		}
		return nil
	})
}
