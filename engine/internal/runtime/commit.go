package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The commit.
//
// One pipeline for both guarantees, in this order (DESIGN.md's first
// invariant):
//
//  1. drain: the before-commit hooks run, the record caches are flushed,
//     the position markers sent, and every record produced since the last
//     commit is awaited and its error looked at (drainLocked);
//  2. the input offsets are committed: in an offset commit at least once
//     (commitOffsetsLocked), with the transaction exactly once (endTxnLocked,
//     eos.go);
//  3. only then is the tasks' pending state applied to pebble with the
//     changelog offsets it corresponds to (applyStateLocked), and the
//     committed repartition records are purged.
//
// The guarantees differ in what a failure does. At least once, the
// interval's work is discarded and its inputs are read again from the
// committed offsets after the restart; a produce error may be skipped
// (OnProduceError). Exactly once, the transaction is aborted, or left to
// the broker when this instance was fenced or Kafka is away, and the tasks
// are closed dirty (failTxnLocked).

// commitLocked commits every task. The caller holds r.mu and no worker is
// running.
func (r *Runtime) commitLocked(ctx context.Context) error {
	start := time.Now()
	r.lastCommit, r.uncommitted = r.cfg.Now(), false
	eos := r.cfg.ExactlyOnce
	if eos && !r.inTxn {
		return nil // nothing was processed since the last commit
	}
	if err := r.drainLocked(ctx, !eos && r.cfg.OnProduceError == Skip); err != nil {
		if eos {
			return r.failTxnLocked(ctx, err)
		}
		r.discardAll()
		return err
	}
	var ok bool
	var err error
	if eos {
		// A transaction that neither consumed nor produced anything (a
		// round of punctuators that forwarded nothing, an idle interval)
		// stays open rather than ending empty: franz-go ends an empty
		// transaction without a word to the broker, but then holds the
		// session's next poll for 500ms (for brokers older than KIP-447,
		// which it cannot tell apart when no offsets were committed).
		// Measured by the bench: the first records after an idle spell
		// waited 510–600ms, the latency's p99 434ms where the franz-go
		// passthrough's was 122ms.
		if r.txnEmpty() {
			return r.applyStateLocked()
		}
		ok, err = r.endTxnLocked(ctx)
	} else {
		ok, err = r.commitOffsetsLocked(ctx)
	}
	if !ok {
		return err
	}
	if err := r.applyStateLocked(); err != nil {
		return err
	}
	r.purgeLocked(ctx)
	r.m.commit(ctx, time.Since(start))
	return nil
}

// drainLocked sends what the tasks owe Kafka before their offsets can be
// committed, and waits until Kafka has acknowledged all of it. Round 0
// sends what the tasks processed; round 1, if a processor has a
// before-commit hook, what the hooks send once round 0's records have
// their offsets. skip: a produce error of a user record (not of an
// internal topic) is logged and counted rather than returned.
func (r *Runtime) drainLocked(ctx context.Context, skip bool) error {
	for round := 0; round < 2; round++ {
		if round == 1 {
			hooked := r.hookedTasks()
			if len(hooked) == 0 {
				break
			}
			if err := r.onWorkers(hooked, func(t *rtask) error { return t.t.BeforeCommit() }); err != nil {
				return err
			}
		}
		var flush []*rtask
		for _, t := range r.tasks {
			if !t.restoring && t.t.Pending() > 0 {
				flush = append(flush, t)
			}
		}
		// A failed flush leaves updates neither written nor forwarded: no
		// policy can skip that and commit.
		if err := r.onWorkers(flush, func(t *rtask) error {
			if err := t.t.Flush(); err != nil {
				return fmt.Errorf("engine: task %s: flush the record cache: %w", t.id, err)
			}
			return nil
		}); err != nil {
			return err
		}
		if round == 1 || len(r.hookedTasks()) == 0 {
			r.sendMarkersLocked()
		}
		if err := r.flushProduced(ctx); err != nil {
			return err
		}
		for _, t := range r.tasks {
			t.out.inflight.Wait()
			err, internal := t.out.takeErr()
			if err == nil {
				continue
			}
			if !skip || internal {
				return err
			}
			r.log.Warn("skipped records that could not be produced", "task", t.id.String(), "err", err)
			r.m.dropped(ctx, "produce")
		}
	}
	return nil
}

// commitOffsetsLocked commits the offsets the tasks processed, at least
// once. ok: the commit went through (or there was nothing to commit) and
// state may be applied. When the group moved on without this instance, the
// tasks are closed and it rejoins: not ok, and no error unless ctx ended.
func (r *Runtime) commitOffsetsLocked(ctx context.Context) (ok bool, err error) {
	r.learnMarkersLocked(ctx)
	offsets := map[string]map[int32]kgo.EpochOffset{}
	committing := map[*partQueue]int64{}
	for _, t := range r.tasks {
		for tp, q := range t.queues {
			o := q.commitOffset()
			if o < 0 {
				continue
			}
			if offsets[tp.topic] == nil {
				offsets[tp.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
			committing[q] = o
		}
	}
	if len(offsets) == 0 {
		return true, nil
	}
	var cerr error
	times := r.commitTimes()
	done := r.waiting("the group coordinator to commit the offsets of " + r.cfg.Group)
	r.cl.CommitOffsetsSync(withStreamTimes(ctx, times), offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	done()
	if cerr != nil {
		// The group moved on without us (a rebalance or a session
		// timeout): another member may own the tasks now. Drop the
		// uncommitted state and rejoin; the tasks that come back restore
		// their changelog tail, and the inputs are read again from the
		// committed offsets.
		r.log.Warn("offset commit failed; closing tasks and rejoining", "err", cerr)
		r.discardAll()
		r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
		r.cl.ForceRebalance()
		if errors.Is(cerr, context.Canceled) {
			return false, cerr
		}
		return false, nil
	}
	for q, o := range committing {
		q.committedTo = o
	}
	r.offsetsCommittedLocked(times)
	return true, nil
}

// learnMarkersLocked asks the brokers how the partitions end whose last
// record, processed, was transactional while its fetch did not say the
// transaction had ended — reading uncommitted, at least once, a record
// comes before its marker, and the fetch that brings only the marker
// reaches no one (franz-go hands over fetches with records or errors).
// Told that the marker is all that follows, commitOffset moves past it, as
// Kafka Streams' consumer position does. Asked again at each commit until
// then (a transaction left open); an error leaves things as they were.
func (r *Runtime) learnMarkersLocked(ctx context.Context) {
	want := map[topicPartition]*partQueue{}
	var topics []string
	for _, t := range r.tasks {
		for tp, q := range t.queues {
			if q.len() == 0 && q.lastTxn && q.processed >= 0 && q.processed == q.next && !q.markerAfter() && q.committedTo <= q.next {
				want[tp] = q
				if !slices.Contains(topics, tp.topic) {
					topics = append(topics, tp.topic)
				}
			}
		}
	}
	if len(want) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hwm, err := r.adm.ListEndOffsets(lctx, topics...)
	if err != nil {
		return
	}
	lso, err := r.adm.ListCommittedOffsets(lctx, topics...)
	if err != nil {
		return
	}
	for tp, q := range want {
		h, ok1 := hwm.Lookup(tp.topic, tp.partition)
		l, ok2 := lso.Lookup(tp.topic, tp.partition)
		if ok1 && ok2 && h.Err == nil && l.Err == nil && h.Offset >= q.hwm {
			q.hwm, q.lso = h.Offset, l.Offset
		}
	}
}

// offsetsCommittedLocked records that Kafka has the input offsets (and the
// stream times, in their metadata) of this commit.
func (r *Runtime) offsetsCommittedLocked(times commitMeta) {
	r.times.set(times)
	r.committedLocked()
	r.recovered()
	for _, t := range r.tasks {
		t.out.sent = 0
	}
}

// flushTimeout bounds the wait for Kafka to acknowledge what a commit
// produced (Kafka Streams' delivery.timeout.ms).
const flushTimeout = 2 * time.Minute

// hookedTasks are the active tasks with before-commit hooks.
func (r *Runtime) hookedTasks() []*rtask {
	var out []*rtask
	for _, t := range r.tasks {
		if !t.restoring && t.t.HasCommitHooks() {
			out = append(out, t)
		}
	}
	return out
}

func (r *Runtime) discardAll() {
	for _, t := range r.tasks {
		t.discard()
	}
}
