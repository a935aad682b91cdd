package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Riding out a Kafka that is away.
//
// A broker that restarts, hangs or loses leadership makes a round fail in
// ways that say nothing about the records: a flush that Kafka does not
// acknowledge in time, a transaction the coordinator aborted while it was
// away (its epoch bumped: INVALID_PRODUCER_EPOCH on the next produce), an
// EndTxn or a Begin that finds no coordinator. Such a failure does not stop
// the instance (Kafka Streams' task.timeout.ms): the loop closes every task
// without committing, replaces the group client with a new one (under
// exactly-once its new producer id aborts whatever transaction the old one
// left open), and starts over from the committed offsets, as after a
// restart of the process but without leaving the group: a static member
// rejoins with its instance id and gets its tasks back with no rebalance.
// Meanwhile the state is Degraded. The instance fails only when Kafka has
// been unreachable for TaskTimeout, with the last error.
//
// A hung broker (it accepts connections and answers nothing) costs more
// than a dead one: every request sent to it waits out a timeout before
// the client tries elsewhere. The cluster fences it after its session
// and moves its leaders and coordinators, and an instance whose produce
// stalls (flushStall) or whose transaction does not end (endTimeout)
// reconnects once the coordinators answer (coordinatorsAnswer). What is
// left is Kafka's: the aborts the new producer ids ask for wait on the
// markers the other brokers had sent the hung one (their request
// timeout, 30s), and a new client's first requests may go to it (a seed,
// metadata not yet refreshed). Measured, on three brokers: a hung broker
// that was no coordinator cost 9–10s; the group coordinator's, hung for
// 60s, stalled processing until it answered again (hung for 40s, 31s).
//
// Kafka can also leave a transaction hanging, which no client can end: a
// coordinator that completes a prepared transaction while the partitions
// have no leader (a single KRaft broker restarted is fenced about 9s
// later, while it does that) drops their markers and records the
// transaction complete. The group's offsets then answer
// UNSTABLE_OFFSET_COMMIT and no member gets its tasks, or a
// read-committed fetch waits at the partition's last stable offset. That
// is no round failing: the stall watcher finds it and ends the transaction
// the way its coordinator had decided (stall.go; kafka-transactions.sh's
// abort would be right only for a transaction the coordinator was
// aborting: after a prepared commit the instance's stores already hold
// the transaction's updates, so the markers must commit).
//
// What is not Kafka's absence still fails at once: a record the policies
// do not skip, a missing topic, an authorization error, another instance
// with this one's id (FENCED_INSTANCE_ID).

// brokerTrouble reports whether err comes from brokers or coordinators
// that are away, restarting or moving, rather than from the records, the
// topics or the configuration.
func brokerTrouble(err error) bool {
	if err == nil || errors.Is(err, kerr.FencedInstanceID) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, e := range []error{
		context.DeadlineExceeded, errFlushTimeout, kgo.ErrRecordTimeout, kgo.ErrRecordRetries, errOwnLook,
		// The producer's state after the coordinator aborted a transaction
		// of ours (it outlived TransactionTimeout while Kafka was away) or
		// lost it.
		kerr.InvalidProducerEpoch, kerr.ProducerFenced, kerr.InvalidTxnState, kerr.TransactionAbortable,
		kerr.InvalidProducerIDMapping, kerr.UnknownProducerID, kerr.OutOfOrderSequenceNumber,
		// Brokers and coordinators away or moving.
		kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.NotEnoughReplicas,
		kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut, kerr.NetworkException,
		kerr.CoordinatorNotAvailable, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress,
		kerr.ConcurrentTransactions, kerr.BrokerNotAvailable, kerr.KafkaStorageError,
		kerr.NotController, kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch, kerr.OffsetNotAvailable,
		kerr.RebalanceInProgress, kerr.IllegalGeneration, kerr.UnknownMemberID,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// errFlushTimeout: Kafka did not acknowledge a commit's records in time.
var errFlushTimeout = errors.New("no acknowledgement from Kafka for the produced records")

// rideOut decides what a failed round means: nil if the loop goes on (the
// failure was Kafka's absence; the tasks were closed and the group client
// replaced), else the error Run returns.
func (r *Runtime) rideOut(ctx context.Context, cause error) error {
	if !brokerTrouble(cause) {
		return cause
	}
	// One spell of trouble lasts from the first failure until a commit
	// goes through; a failure long after the last one begins a new spell
	// (an instance with nothing to commit says nothing of its recovery).
	now := time.Now()
	if r.troubleSince.IsZero() || now.Sub(r.troubleLast) > r.cfg.TaskTimeout {
		r.troubleSince = now
	}
	r.troubleLast = now
	if now.Sub(r.troubleSince) >= r.cfg.TaskTimeout {
		return r.gaveUp(cause)
	}
	if isFenced(cause) && r.takenOver(ctx) {
		return r.fencedInstance(cause)
	}
	r.setTrouble(cause)
	r.reassigned = false
	r.setState(Degraded)
	r.m.recovery(ctx)
	r.log.Warn("Kafka failed the round; closing the tasks and reconnecting", "err", cause, "since", r.troubleSince, "gives_up_after", r.cfg.TaskTimeout)
	r.mu.Lock()
	r.closeDirtyLocked()
	r.inTxn = false
	r.uncommitted, r.commitSoon = false, false
	r.mu.Unlock()
	// The old client goes without leaving the group: a static member
	// comes back as itself. Its callbacks run as it closes: reset what
	// they recorded.
	r.closeGroupClient()
	r.assignMu.Lock()
	r.assigned, r.assignChanged, r.txnDoomed = nil, false, false
	r.assignMu.Unlock()
	r.mu.Lock()
	r.owned = nil
	r.mu.Unlock()
	for attempt := 0; ; attempt++ {
		left := r.cfg.TaskTimeout - time.Since(r.troubleSince)
		if left <= 0 {
			return r.gaveUp(cause)
		}
		cctx, cancel := context.WithTimeout(ctx, left)
		err := r.coordinatorsAnswer(cctx)
		if err == nil {
			ictx, icancel := context.WithTimeout(cctx, initTimeout)
			if err = r.newGroupClient(ictx); err != nil && r.cl != nil {
				r.cl.Close()
				r.clCancel()
			}
			icancel()
		}
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cause = err
		r.setTrouble(err)
		r.log.Warn("reconnecting to Kafka", "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
	r.log.Info("reconnected to Kafka", "after", time.Since(r.troubleSince).Round(time.Millisecond))
	r.kafkaBack.Store(time.Now().UnixNano())
	r.lastCommit = r.cfg.Now()
	return nil
}

// probeTimeout bounds how long coordinatorsAnswer waits for the
// coordinators.
const probeTimeout = 5 * time.Second

// coordinatorsAnswer reports whether the group's coordinator, and under
// exactly-once the transaction coordinator, answer a request within
// probeTimeout, asked through a client of its own (no coordinator cached,
// each request given up after 2s). A new group client joins through the
// broker the cluster names as the coordinator, and a join sent to a hung
// broker waits out the rebalance timeout and franz-go's overhead, 70s,
// even once the cluster has fenced the broker (after its session, 9s by
// default) and moved the coordinator. Until the probe passes, the loop
// tries again.
func (r *Runtime) coordinatorsAnswer(ctx context.Context) error {
	cl, err := kgo.NewClient(append(r.baseOpts(), kgo.RequestTimeoutOverhead(2*time.Second))...)
	if err != nil {
		return fmt.Errorf("engine: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ds, err := adm.DescribeGroups(pctx, r.cfg.Group)
	if err == nil {
		err = ds[r.cfg.Group].Err
	}
	// An answer that is an error (not authorized to describe, say) is
	// an answer.
	if brokerTrouble(err) {
		return fmt.Errorf("engine: the group coordinator of %s does not answer: %w", r.cfg.Group, err)
	}
	if !r.cfg.ExactlyOnce {
		return nil
	}
	ts, err := adm.DescribeTransactions(pctx, r.cfg.TransactionalID)
	if err == nil {
		var d kadm.DescribedTransaction
		if d, err = ts.On(r.cfg.TransactionalID, nil); err == nil {
			err = d.Err
		}
	}
	if brokerTrouble(err) {
		return fmt.Errorf("engine: the transaction coordinator of %s does not answer: %w", r.cfg.TransactionalID, err)
	}
	return nil
}

// takenOver reports whether another instance with this one's instance id
// is in the group: what fenced the producer is then that instance, not a
// coordinator that aborted a transaction which outlived its timeout, and
// reconnecting would only fence it in turn. (Its join takes this static
// member's place, and the group says FENCED_INSTANCE_ID at the next
// heartbeat; the producer may hear first.) A group that cannot be
// described says nothing.
func (r *Runtime) takenOver(ctx context.Context) bool {
	if !r.cfg.StaticMember {
		return false
	}
	self, _ := r.cl.GroupMetadata()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := r.adm.DescribeGroups(dctx, r.cfg.Group)
	if err != nil {
		return false
	}
	for _, m := range ds[r.cfg.Group].Members {
		if m.InstanceID != nil && *m.InstanceID == r.cfg.InstanceID && m.MemberID != self {
			return true
		}
	}
	return false
}

// gaveUp is the error of an instance that rode out Kafka's absence for
// TaskTimeout.
func (r *Runtime) gaveUp(cause error) error {
	hint := ""
	if isFenced(cause) {
		hint = fmt.Sprintf(" (if another instance with InstanceID %q runs, it took over this one's transactions: give every instance its own InstanceID)", r.cfg.InstanceID)
	}
	return fmt.Errorf("engine: Kafka (%v) has failed every round for TaskTimeout (%v)%s: %w", r.cfg.Brokers, r.cfg.TaskTimeout, hint, cause)
}

// recovered ends a spell of trouble: a commit went through.
func (r *Runtime) recovered() {
	if r.troubleSince.IsZero() {
		return
	}
	r.log.Info("Kafka answers again; processing resumed", "after", time.Since(r.troubleSince).Round(time.Millisecond))
	r.troubleSince = time.Time{}
	r.trouble.Store(nil)
}

// setTrouble records err as the instance's trouble. The pointer stored is
// to a copy of its own: the caller's variable may change while readers
// (the HTTP layer's /readyz) load it.
func (r *Runtime) setTrouble(err error) { r.trouble.Store(&err) }

// Trouble is what keeps a Degraded instance from processing: the last
// error Kafka gave it. Nil when it is not degraded.
func (r *Runtime) Trouble() error {
	if p := r.trouble.Load(); p != nil {
		return *p
	}
	return nil
}

// flushStall is how long a commit waits for Kafka to acknowledge one more
// of its records before it gives the flush up as Kafka's absence (and the
// loop reconnects): measured, after a broker restarted under a flush
// franz-go's client sometimes sent nothing more, and the flush would have
// waited out all of flushTimeout.
const flushStall = 10 * time.Second

// endTimeout bounds ending a transaction: its offsets go to the group
// coordinator, its end to the transaction coordinator, each of which
// answers in milliseconds when it answers at all (Kafka's
// request.timeout.ms, 30s). franz-go keeps sending to a coordinator that
// times out, not asking the cluster where it moved: measured, with the
// group coordinator's broker hung, a commit waited on it for the whole
// hang and the instance never said it was Degraded, while the cluster had
// moved the coordinator after 10s.
const endTimeout = 30 * time.Second

// initTimeout bounds, while riding out trouble, how long a new group
// client waits for its producer id (under exactly-once): franz-go retries
// InitProducerID for as long as its context lasts, which was the loop's
// whole TaskTimeout. A run of the broker fault campaign under load went
// silent for over a minute after the restarted broker answered, somewhere
// between reconnecting and processing; now the loop logs an attempt that
// has no producer id in 30s, and tries again with a new client, and says
// when it has reconnected.
const initTimeout = 30 * time.Second

// acks counts the records Kafka acknowledged or failed, for flushProduced.
type acks struct{ n atomic.Int64 }

// OnProduceRecordUnbuffered implements kgo.HookProduceRecordUnbuffered.
func (a *acks) OnProduceRecordUnbuffered(*kgo.Record, error) { a.n.Add(1) }

// flushProduced waits until Kafka has acknowledged every record produced,
// for flushTimeout at most, and gives up sooner if no record is
// acknowledged for flushStall.
func (r *Runtime) flushProduced(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	defer r.waiting("the partitions' leaders to acknowledge the records produced")()
	done := make(chan error, 1)
	go func() { done <- r.cl.Flush(fctx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastAt := r.acks.n.Load(), time.Now()
	for {
		select {
		case err := <-done:
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("engine: %w within %v", errFlushTimeout, flushTimeout)
			}
			if err != nil {
				return fmt.Errorf("engine: flush produced records: %w", err)
			}
			return nil
		case now := <-tick.C:
			if n := r.acks.n.Load(); n != last {
				last, lastAt = n, now
			} else if now.Sub(lastAt) >= flushStall {
				cancel()
				<-done
				return fmt.Errorf("engine: %w: none for %v", errFlushTimeout, flushStall)
			}
		}
	}
}
