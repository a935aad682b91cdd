package runtime

import (
	"context"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// A task with several input partitions — a stream joined with a table, say
// — chooses its next record by event time among the partitions that have
// records buffered. Just after an assignment, one partition's first fetch
// may come back before another's: the stream's records would then be
// processed before the table they join, which is there, is loaded (and,
// in an inner join, dropped). So a partition known to have records (its end
// offset at the assignment at least two past the group's committed offset:
// one may be a transaction's commit marker) holds the task back until its
// first records arrive, as Kafka Streams waits for a partition with unknown
// or positive lag. Later too, a partition whose queue ran empty while its
// last fetch said the broker has more (behind: a fetch cut short by its
// size limit, the rest of a table's partition still to come) holds the
// task back until they arrive. bootstrapWait bounds either wait (the
// records may all be aborted, or deleted meanwhile); after it the task goes
// on with the records it has.
//
// Found by the bench: a stream joined at start with a table whose
// partitions came in two fetches joined 2,330 of 5.35M records fewer than
// Kafka Streams, its stream records processed between the two.
const bootstrapWait = 10 * time.Second

// noteAssignEnds records, for the new tasks with several input
// partitions, each partition's end offset at the assignment. It is called
// with r.mu held; a failure to list them only means no waiting.
func (r *Runtime) noteAssignEnds(ctx context.Context, ids map[topo.TaskID]bool) {
	var qs []*partQueue
	topics := map[string]bool{}
	for id := range ids {
		t := r.tasks[id]
		if t == nil || len(t.qs) < 2 {
			continue
		}
		for _, q := range t.qs {
			if q.endAtAssign < 0 && !q.seen {
				qs = append(qs, q)
				topics[q.tp.topic] = true
			}
		}
	}
	if len(qs) == 0 {
		return
	}
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := r.adm.ListEndOffsets(lctx, names...)
	if err != nil {
		return
	}
	for _, q := range qs {
		if o, ok := ends.Lookup(q.tp.topic, q.tp.partition); ok && o.Err == nil {
			q.endAtAssign = o.Offset
		}
	}
}

// behind reports whether the empty queue q holds its task back because its
// last fetch said the broker has records beyond it: two or more offsets
// (one may be a transaction marker, which is not fetched as a record), up
// to the last stable offset when reading committed.
func (t *rtask) behind(q *partQueue) bool {
	if !q.seen || q.gaveUp {
		return false
	}
	end := q.hwm
	if t.r.cfg.ExactlyOnce && q.lso >= 0 {
		end = q.lso
	}
	return end-q.next >= 2
}

// bootstrapping reports whether the empty queue q holds its task back:
// it had records at the assignment that have not arrived yet.
func (t *rtask) bootstrapping(q *partQueue) bool {
	switch {
	case q.boot == 2:
		return false
	case q.seen || q.endAtAssign <= 0: // records came, or none were there (or unknown)
		q.boot = 2
		return false
	case q.boot == 1:
		return true
	}
	committed, ok := t.r.times.committedOffset(q.tp)
	if !ok {
		return true // the group's offsets are not fetched yet
	}
	// One offset past the commit may be just the commit marker of the
	// transaction that wrote the last record (an exactly-once input, a
	// repartition topic): records are there only if there are two or more.
	if q.endAtAssign-max(committed, 0) < 2 {
		q.boot = 2
		return false
	}
	q.boot = 1
	return true
}
