package runtime

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// partQueue holds a task's fetched and not yet processed records of one
// input partition, and what the choice of the next record, the fetch's
// backpressure and the commit need to know of that partition.
type partQueue struct {
	recs []*kgo.Record
	head int
	// headTime is the event time of recs[head], once looked up (headSet).
	headTime int64
	headSet  bool
	hwm      int64 // the high watermark of the last fetch
	lso      int64 // the last stable offset of the last fetch
	next     int64 // the offset after the last record enqueued
	// lastTxn: the last record enqueued was written in a transaction.
	lastTxn bool
	paused  bool // its fetching is paused (backpressure, restoring)
	// gaveUp: records known to be on the broker were waited for in vain
	// (behind); not again until records arrive.
	gaveUp bool
	// endAtAssign is the partition's end offset when the task was
	// assigned (-1: unknown); seen: records of it have arrived since.
	// boot: 0 undecided, 1 waiting for its first records, 2 not waiting.
	endAtAssign int64
	seen        bool
	boot        uint8
	tp          topicPartition
	// consumed is the offset after the last record processed since the last
	// commit, or -1.
	consumed int64
	// processed is the offset after the last record processed (or
	// committed, at the start), or -1.
	processed int64
	// committedTo is the offset this instance last committed for the
	// partition, or -1.
	committedTo int64
	// metaRead: the commit's metadata was looked up (positions.go).
	metaRead bool
	src      *topo.Source // the task's source of the partition's topic
	// Per-topic values made once rather than per record.
	spanName  string
	topicAttr metric.MeasurementOption
}

func (q *partQueue) len() int { return len(q.recs) - q.head }

func (q *partQueue) peek() *kgo.Record { return q.recs[q.head] }

// eventTime is the head's event time as its source gives it.
func (q *partQueue) eventTime() int64 {
	if !q.headSet {
		rec := q.peek()
		if q.src == nil || q.src.RecordTimed() || (rec.Value == nil && isMarker(rec)) {
			q.headTime = rec.Timestamp.UnixMilli()
		} else {
			q.headTime = q.src.EventTime(topo.Input{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp.UnixMilli()})
		}
		q.headSet = true
	}
	return q.headTime
}

// rewind drops every queued record, so that the partition is fetched
// again from the first of them: it returns that record's offset and how
// many records were dropped.
func (q *partQueue) rewind() (first int64, dropped int) {
	first, dropped = q.peek().Offset, q.len()
	clear(q.recs)
	q.recs, q.head, q.next, q.headSet = q.recs[:0], 0, first, false
	return first, dropped
}

func (q *partQueue) pop() *kgo.Record {
	q.headSet = false
	rec := q.recs[q.head]
	q.recs[q.head] = nil
	q.head++
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
	}
	return rec
}

func (t *rtask) enqueue(fp kgo.FetchTopicPartition) {
	q := t.queues[topicPartition{fp.Topic, fp.Partition}]
	if q == nil {
		return
	}
	q.hwm, q.lso = fp.HighWatermark, fp.LastStableOffset
	if len(fp.Records) > 0 {
		t.startStreamTime()
		q.seen, q.gaveUp = true, false
	}
	for _, rec := range fp.Records {
		q.recs = append(q.recs, rec)
		q.next, q.lastTxn = rec.Offset+1, rec.Attrs.IsTransactional()
		t.buffered++
	}
}

// next picks the record to process: the head with the smallest event time
// (as its source gives it: a source with a timestamp function decodes the
// head to tell). If an input partition is empty although the broker has
// more for it, the task waits up to MaxTaskIdle for it, so that records are
// processed in event-time order across partitions.
func (t *rtask) next(now time.Time) (*kgo.Record, *partQueue) {
	var best *partQueue
	waiting, booting := false, false
	for _, q := range t.qs {
		if q.len() == 0 {
			if q.hwm > q.next && t.r.cfg.MaxTaskIdle > 0 {
				waiting = true
			}
			if len(t.qs) > 1 && (t.bootstrapping(q) || t.behind(q)) {
				booting = true
			}
			continue
		}
		// Only a choice between heads needs their event times.
		if best == nil || q.eventTime() < best.eventTime() {
			best = q
		}
	}
	if best == nil {
		return nil, nil
	}
	if booting {
		if t.bootSince.IsZero() {
			t.bootSince = now
		}
		if now.Sub(t.bootSince) < bootstrapWait {
			return nil, nil
		}
		t.r.log.Warn("a task's partition known to have records sent none; processing the others", "task", t.id.String(), "waited", bootstrapWait)
		for _, q := range t.qs {
			q.boot = 2
			if q.len() == 0 {
				q.gaveUp = true
			}
		}
	}
	t.bootSince = time.Time{}
	if waiting {
		if t.idleSince.IsZero() {
			t.idleSince = now
		}
		if now.Sub(t.idleSince) < t.r.cfg.MaxTaskIdle {
			return nil, nil
		}
	}
	t.idleSince = time.Time{}
	return best.pop(), best
}

// markerAfter reports whether the partition's one offset after the last
// record enqueued is the commit marker of that record's transaction: when
// the fetch that brought the record said that every transaction below the
// partition's end had ended (its last stable offset is its high
// watermark), the record's marker lies after it and below that end; if
// the end is one past the offset after the record, the marker is there.
// Kafka's consumers move their position past markers; a position short of
// one would count an idle partition one record behind. (Reading
// uncommitted, at least once, the record may come before its transaction
// ends, and the marker then goes unseen until more records follow.)
func (q *partQueue) markerAfter() bool {
	return q.lastTxn && q.hwm == q.next+1 && q.lso == q.hwm
}

// commitOffset is the offset to commit for the partition, -1 if none:
// the one after the last record processed since the last commit; or, once
// every record enqueued is processed and a transaction's commit marker is
// all that follows them (markerAfter), the one past the marker — as Kafka
// Streams commits its consumer's position — so that a group that has read
// a transactional input to its end is at its end, not a record behind
// (which is what versions.Lag and Kafka's tools would show for ever).
func (q *partQueue) commitOffset() int64 {
	if q.len() == 0 && q.processed >= 0 && q.processed == q.next && q.markerAfter() && q.committedTo < q.hwm {
		return q.hwm
	}
	return q.consumed
}

// position is the offset after the last record processed since the last
// commit (or -1), past the commit marker that follows it when it is the
// last record enqueued (markerAfter).
func (q *partQueue) position() int64 {
	if q.consumed >= 0 && q.consumed == q.next && q.markerAfter() {
		return q.hwm
	}
	return q.consumed
}
