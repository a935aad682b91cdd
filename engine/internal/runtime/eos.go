package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Exactly-once.
//
// The group client is a franz-go GroupTransactSession with the instance's
// transactional id, reading read-committed. Every record a task produces
// (outputs, changelogs, repartitions, dead letters) is produced inside the
// open transaction; a commit flushes the record caches, awaits every
// produced record, and ends the transaction with the input offsets in it
// (TxnOffsetCommit, fenced by the group generation: KIP-447). Only when the
// transaction has committed is the tasks' pending state applied to pebble,
// with the changelog offsets it corresponds to, so local state never holds
// anything Kafka does not.
//
// Two things differ from at-least-once:
//
//   - The session commits the offsets the client has polled, not the ones the
//     tasks processed. Before ending a transaction, every partition whose
//     queue still holds records (a task waiting for another partition, or
//     restoring) is rewound with SetOffsets to its first unprocessed record,
//     and the queue dropped: those records are fetched again.
//   - The rebalance callbacks must not take r.mu: the session calls them with
//     its own lock held, the lock End needs, and the loop holds r.mu while it
//     ends a transaction. They only record what happened; the loop, at the
//     start of its next round and before it queues what it polled, aborts
//     the transaction if it was doomed (a revoke or a loss since it began),
//     closes every task without committing, and opens the tasks of the
//     current assignment, which restore the short tail their changelogs have
//     beyond their checkpoints. Kafka Streams does the same ("close dirty and
//     revive") after an aborted transaction. The abort moves every partition
//     back to its committed offset, so what that round polled is dropped: it
//     is fetched again. A revoke normally comes between two transactions
//     (the loop commits before it lets the callbacks run: rebalancing.go);
//     then it dooms nothing, only the revoked tasks close, and an End with
//     no transaction open clears the session's note of the revoke.
//
// A produce error of any record aborts the transaction and fails the
// instance: franz-go's End reports a commit even when records of the
// transaction failed (measured: every produce to a missing topic failed, End
// said committed, and the input offsets moved on), so the collector's
// errors are checked before End is called.

// onAssignedEOS records what the group added to the assignment, for the
// loop.
func (r *Runtime) onAssignedEOS(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	defer r.joinFollowUp(cl)
	r.assignMu.Lock()
	defer r.assignMu.Unlock()
	r.assigned = addParts(r.assigned, assigned)
	r.assignChanged = true
}

// onRevokedEOS records what the group took away, and that the open
// transaction, if any, must be aborted: franz-go's session aborts a
// transaction across any revocation (it cannot commit in the callback).
// The loop commits before it lets the callback run (rebalancing.go), so
// normally none is open and only the revoked tasks close; were one open,
// every task would redo its work since the last commit (closed dirty and
// reopened, restoring the few records their changelogs have beyond their
// checkpoints).
func (r *Runtime) onRevokedEOS(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.assignMu.Lock()
	defer r.assignMu.Unlock()
	if len(revoked) == 0 {
		return
	}
	r.assigned = removeParts(r.assigned, revoked)
	r.assignChanged = true
	r.txnDoomed = true
	r.log.Info("revoked", "tasks", taskList(r.tasksOf(revoked)))
}

// onLostEOS: everything is gone, and the open transaction with it.
func (r *Runtime) onLostEOS(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
	r.assignMu.Lock()
	defer r.assignMu.Unlock()
	r.assigned = nil
	r.assignChanged = true
	r.txnDoomed = true
}

// reconcileEOS brings the tasks in line with what the callbacks recorded:
// an aborted transaction and freshly opened tasks after a revoke or a loss,
// new tasks after an assignment. The caller holds r.mu.
//
// rewound reports that it aborted an open transaction: the session then
// moved every partition back to its committed offset, so whatever the
// caller polled before is fetched again and must be dropped, not queued (it
// was queued once, and an eager rebalance whose new assignment returned
// records in the same poll then had them processed twice).
func (r *Runtime) reconcileEOS(ctx context.Context) (rewound bool, err error) {
	r.assignMu.Lock()
	doomed, changed, assigned := r.txnDoomed, r.assignChanged, r.assigned
	r.txnDoomed, r.assignChanged = false, false
	r.assignMu.Unlock()
	switch {
	case doomed && r.inTxn && !r.txnEmpty():
		rewound = true
		if err := r.abortLocked(ctx, "the group rebalanced"); err != nil {
			return rewound, err
		}
	case doomed:
		// The revoke came between a commit and the next transaction:
		// nothing is uncommitted, so the tasks that stay keep their
		// state. The session still holds the revoke against the next
		// transaction it ends, which would be their work since: an End
		// with no transaction open clears it (and moves the partitions
		// back to their committed offsets, so what was polled is
		// dropped). Measured before: on a scale-out, the staying tasks
		// were closed and reopened, and their next 500ms of work
		// aborted and done again.
		rewound = true
		ectx, cancel := context.WithTimeout(ctx, endTimeout)
		done := r.waiting("the session to forget a revoke, with no transaction of " + r.cfg.TransactionalID + " open")
		_, err := r.sess.End(ectx, kgo.TryAbort)
		done()
		cancel()
		r.inTxn = false // if one was open, nothing was in it
		if err != nil {
			r.closeDirtyLocked()
			return rewound, r.fenced(fmt.Errorf("engine: clear the session after a revoke: %w", err))
		}
	}
	if !doomed && !changed {
		return rewound, nil
	}
	ids := map[topo.TaskID]bool{}
	for topic, parts := range assigned {
		sub := r.topo.SubFor(r.refOf(topic))
		if sub == nil {
			continue
		}
		for _, p := range parts {
			ids[topo.TaskID{Sub: sub.ID, Partition: p}] = true
		}
	}
	var gone []topo.TaskID
	for id := range r.tasks {
		if !ids[id] {
			gone = append(gone, id)
		}
	}
	r.closeTasksLocked(gone)
	if err := r.restorer.syncStandbys(r.balancer.Current().Standby); err != nil {
		return rewound, err
	}
	for id := range ids {
		if r.tasks[id] == nil {
			if err := r.openTask(id); err != nil {
				return rewound, err
			}
		}
	}
	r.noteAssignEnds(ctx, ids)
	r.reassigned = true
	r.log.Info("assigned", "generation", r.balancer.Current().Generation, "tasks", taskList(ids))
	return rewound, nil
}

// polledHook, when set, runs after every poll of every Runtime with the
// number of records polled: a test's way to make something happen at that
// moment (see SetPolledHook).
var polledHook atomic.Pointer[func(r *Runtime, records int)]

// SetPolledHook installs fn as the hook every Runtime calls right after a
// poll, before it looks at what the poll returned (nil removes it). For
// tests only: with RevokeForTest it lands a rebalance between a poll and
// its records.
func SetPolledHook(fn func(r *Runtime, records int)) {
	if fn == nil {
		polledHook.Store(nil)
		return
	}
	polledHook.Store(&fn)
}

// RevokeForTest makes the loop act as though the group had just revoked
// every task and assigned the same ones again (an eager rebalance that moved
// nothing): under exactly-once the open transaction is aborted and the
// tasks are closed dirty and reopened. For tests only.
func (r *Runtime) RevokeForTest() {
	r.assignMu.Lock()
	defer r.assignMu.Unlock()
	r.txnDoomed, r.assignChanged = true, true
}

// beginTxn opens a transaction if none is open. If a connection to a
// broker closed since the last one began, it first ends the transactions
// of the producer's own that Kafka left open (own.go): a broker that went
// away may have taken the markers of the last one with it, and this one
// would end those with its own.
func (r *Runtime) beginTxn(ctx context.Context) error {
	if r.inTxn {
		return nil
	}
	if r.lost.Swap(false) {
		done := r.waiting("the producer id and epoch of " + r.cfg.TransactionalID)
		pid, epoch, err := r.cl.ProducerID(ctx)
		done()
		if err == nil {
			err = r.endOwnLeftOpen(ctx, pid, epoch)
		}
		if err != nil {
			r.lost.Store(true)
			return fmt.Errorf("%w: %w", errOwnLook, err)
		}
	}
	if err := r.sess.Begin(); err != nil {
		return r.fenced(fmt.Errorf("engine: begin a transaction: %w", err))
	}
	r.inTxn, r.txnBegan = true, r.cfg.Now()
	return nil
}

// abortLocked aborts the open transaction (the session rewinds every
// partition to its committed offset) and closes every task without
// committing; reconcileEOS reopens the assigned ones.
func (r *Runtime) abortLocked(ctx context.Context, why string) error {
	r.log.Info("aborting the transaction", "reason", why, "tasks", len(r.tasks))
	var err error
	if r.inTxn {
		actx, cancel := context.WithTimeout(ctx, endTimeout)
		done := r.waiting("the transaction coordinator to abort the transaction of " + r.cfg.TransactionalID)
		_, err = r.sess.End(actx, kgo.TryAbort)
		done()
		cancel()
		r.inTxn = false
		if err == nil {
			r.awaitTxnComplete(ctx)
		}
	}
	r.closeDirtyLocked()
	if err != nil {
		return fmt.Errorf("engine: abort the transaction: %w", err)
	}
	return nil
}

// closeDirtyLocked drops every task's uncommitted work and closes it.
func (r *Runtime) closeDirtyLocked() {
	for _, t := range r.tasks {
		t.discard()
	}
	r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
}

// failTxnLocked is exactly-once's answer to a commit that failed before
// the transaction ended: abort it and close the tasks dirty, or, when
// this instance was fenced or Kafka is away, leave the transaction to the
// broker (see teardown): the loop replaces the client, whose new producer
// id aborts it (trouble.go).
func (r *Runtime) failTxnLocked(ctx context.Context, err error) error {
	if isFenced(err) || brokerTrouble(err) {
		r.inTxn = false
		r.closeDirtyLocked()
		return r.fenced(err)
	}
	if aerr := r.abortLocked(ctx, "commit failed"); aerr != nil {
		r.log.Warn("abort after a failed commit", "err", aerr)
	}
	return r.fenced(err)
}

// endTxnLocked commits the open transaction with the processed input
// offsets. ok: it committed, and state may be applied. A transaction the
// session aborted because of a rebalance is not ok without an error: the
// tasks are reopened from the committed state.
func (r *Runtime) endTxnLocked(ctx context.Context) (ok bool, err error) {
	// Rewind what was polled but not processed, so that the transaction
	// commits only the processed offsets.
	// And move past the commit marker that is all that follows a
	// partition's last record (commitOffset).
	rewind := map[string]map[int32]kgo.EpochOffset{}
	committing := map[*partQueue]int64{}
	for _, t := range r.tasks {
		for tp, q := range t.queues {
			set := int64(-1)
			if q.len() > 0 {
				first, dropped := q.rewind()
				t.buffered -= dropped
				set = first
			} else if o := q.commitOffset(); o > q.consumed {
				set = o
			}
			if set >= 0 {
				if rewind[tp.topic] == nil {
					rewind[tp.topic] = map[int32]kgo.EpochOffset{}
				}
				rewind[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: set}
			}
			if set >= 0 || q.consumed >= 0 {
				committing[q] = max(set, q.consumed)
			}
		}
	}
	if len(rewind) > 0 {
		r.cl.SetOffsets(rewind)
	}
	ectx, cancel := context.WithTimeout(ctx, endTimeout)
	times := r.commitTimes()
	done := r.waiting("the group coordinator to take the input offsets and the transaction coordinator to commit the transaction of " + r.cfg.TransactionalID)
	committed, err := r.sess.End(withStreamTimes(ectx, times), kgo.TryCommit)
	done()
	cancel()
	r.inTxn = false
	if err != nil {
		r.closeDirtyLocked()
		return false, r.fenced(fmt.Errorf("engine: commit the transaction: %w", err))
	}
	if !committed {
		// A rebalance since the transaction began: the session aborted it
		// and rewound the partitions; start over from the committed state.
		r.log.Info("transaction aborted by a rebalance; reopening the tasks")
		r.closeDirtyLocked()
		r.assignMu.Lock()
		r.assignChanged = true
		r.assignMu.Unlock()
		return false, nil
	}
	for q, o := range committing {
		q.committedTo = o
	}
	r.offsetsCommittedLocked(times)
	if r.awaitEnd {
		r.awaitTxnComplete(ctx)
	}
	return true, nil
}

// awaitTxnComplete waits, briefly, until the coordinator has finished the
// transaction that just ended. EndTxn answers once the coordinator has
// logged its decision (PrepareCommit); the markers go to the partitions
// after that. A transaction that begins meanwhile has its first records
// held by the partition leader, which asks the coordinator to verify them
// (KIP-890), is told CONCURRENT_TRANSACTIONS, and asks again only after
// add.partitions.to.txn.retry.backoff.ms (20ms by default).
//
// That costs little under load, where the instance goes on processing
// while the leader holds the records, but it is most of a command's round
// trip, where a commit is asked for as soon as the commands are decided:
// with commands at 200/s on one Kafka 4.4 broker, every other commit took
// 25–35ms instead of 5–9ms. Waiting here (DescribeTransactions, a request
// or two, 2ms at the median) took the commands' round trip from p50 35–64ms
// / p99 81–114ms to p50 13–38ms / p99 38–74ms (runs of 10s, same hour).
// So the loop waits after the commits a processor asked for
// (RequestCommit) or that the input running dry set off (awaitEnd), not
// after those of the interval: there, under load, a wait stops the
// processing (measured: one in eleven took 150ms).
//
// At most maxTxnCompleteWait: past that the leader's retries take over, as
// without the wait. A broker or an ACL that does not allow the request
// turns the wait off for the rest of the run.
func (r *Runtime) awaitTxnComplete(ctx context.Context) {
	if r.noTxnDescribe {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, maxTxnCompleteWait)
	defer cancel()
	pause := 500 * time.Microsecond
	for {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{r.cfg.TransactionalID}
		resp, err := req.RequestWith(ctx, r.cl)
		if err == nil && len(resp.TransactionStates) == 1 {
			err = kerr.ErrorForCode(resp.TransactionStates[0].ErrorCode)
		}
		switch {
		case errors.Is(err, kerr.UnsupportedVersion), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
			r.log.Info("not waiting for transactions to complete before the next: the broker does not describe them", "err", err)
			r.noTxnDescribe = true
			return
		case err != nil || len(resp.TransactionStates) != 1:
			return
		}
		switch resp.TransactionStates[0].State {
		case "PrepareCommit", "PrepareAbort":
		default:
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 8*time.Millisecond)
	}
}

// maxTxnCompleteWait bounds awaitTxnComplete.
const maxTxnCompleteWait = 50 * time.Millisecond

// txnEmpty reports whether the open transaction has nothing in it: no
// task consumed or produced a record since it began.
func (r *Runtime) txnEmpty() bool {
	for _, t := range r.tasks {
		if t.out.sent > 0 {
			return false
		}
		for _, q := range t.queues {
			if q.consumed >= 0 {
				return false
			}
		}
	}
	return true
}

// applyStateLocked applies every task's pending state to pebble with the
// changelog offsets it corresponds to, once Kafka has committed them.
func (r *Runtime) applyStateLocked() error {
	for _, t := range r.tasks {
		t.out.mu.Lock()
		for tp, end := range t.out.logEnd {
			if err := t.st.SetCheckpoint(tp.topic, tp.partition, end); err != nil {
				t.out.mu.Unlock()
				return err
			}
		}
		clear(t.out.logEnd)
		t.out.mu.Unlock()
		if err := t.st.Commit(); err != nil {
			return fmt.Errorf("engine: task %s: apply state: %w", t.id, err)
		}
		r.posMu.Lock()
		for tp, q := range t.queues {
			if q.consumed >= 0 {
				if r.positions == nil {
					r.positions = map[topicPartition]int64{}
				}
				r.positions[tp] = q.position()
			}
			q.consumed = -1
		}
		t.publishStorePositions()
		r.posMu.Unlock()
		t.skippedAtCommit = maps.Clone(t.t.Skipped())
	}
	// One sync for every task's batch: what this commit applied survives a
	// crash (see state.Task.Commit).
	if len(r.tasks) > 0 {
		if err := r.db.Sync(); err != nil {
			return fmt.Errorf("engine: apply state: %w", err)
		}
	}
	return nil
}

// Positions returns, for each input partition of this instance's active
// tasks, the offset after the last record its committed state reflects
// (known once the task has committed here), past the commit marker that
// ends the partition after it (partQueue.position).
func (r *Runtime) Positions() map[string]map[int32]int64 {
	r.posMu.Lock()
	defer r.posMu.Unlock()
	out := map[string]map[int32]int64{}
	for tp, o := range r.positions {
		if out[tp.topic] == nil {
			out[tp.topic] = map[int32]int64{}
		}
		out[tp.topic][tp.partition] = o
	}
	return out
}

// fenced explains an error that means another producer with this
// instance's transactional id took over. One the loop rides out (the
// coordinator bumped the epoch of a transaction that timed out while
// Kafka was away, most likely) is left as it is, until the loop gives up
// (gaveUp).
func (r *Runtime) fenced(err error) error {
	if brokerTrouble(err) {
		return err
	}
	switch {
	case errors.Is(err, kerr.FencedInstanceID):
		return r.fencedInstance(err)
	case errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.ProducerFenced):
		return fmt.Errorf("engine: fenced: another instance with InstanceID %q (transactional id %s) started and took over this one's transactions; give every instance its own InstanceID: %w", r.cfg.InstanceID, r.cfg.TransactionalID, err)
	case errors.Is(err, kerr.InvalidTxnState):
		// With transactions v2 (Kafka 4), a commit that races with the
		// coordinator aborting the transaction, because a producer with
		// the same transactional id started or the transaction timed out,
		// fails with INVALID_TXN_STATE rather than PRODUCER_FENCED
		// (KAFKA-20785).
		return fmt.Errorf("engine: the broker aborted this instance's transaction: another instance with InstanceID %q (transactional id %s) started and took over its transactions, or the transaction outlived TransactionTimeout (%v); give every instance its own InstanceID: %w", r.cfg.InstanceID, r.cfg.TransactionalID, r.cfg.TransactionTimeout, err)
	}
	return err
}

// fencedInstance explains FENCED_INSTANCE_ID: another static member with
// this instance's id joined the group and took its place.
func (r *Runtime) fencedInstance(err error) error {
	return fmt.Errorf("engine: fenced: another instance with InstanceID %q joined group %s and took this one's place; give every instance its own InstanceID: %w", r.cfg.InstanceID, r.cfg.Group, err)
}

// isFenced: err says that another instance took this one's place in the
// group or its transactional id.
func isFenced(err error) bool {
	return errors.Is(err, kerr.FencedInstanceID) || errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}
