package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Commits around a rebalance, exactly once.
//
// franz-go's session ends a transaction that committed input offsets only
// once a heartbeat it forces has come back, and it aborts any transaction
// open when a revoke's callback runs. Two pauses followed for the tasks
// that stayed where they were. While this member's JoinGroup or SyncGroup
// waits at the coordinator no heartbeat loop runs, so an End waits for the
// join to end: on a scale-out, the cooperative rebalance's second round,
// which waits for the members that gave nothing up, and those notice it
// by a heartbeat half a second after the first round. And a revoke that
// came while a transaction was open threw away the work of every task
// since the last commit. (CI measured 1.27–1.32 s for both together.)
//
// Kafka Streams commits every task in its revoke callback and, while a
// rebalance is in progress, skips its commits and processes on. franz-go
// cannot end a transaction in a callback, but with BlockRebalanceOnPoll
// the callbacks wait until the loop allows them, and OnPartitionsCallback-
// Blocked tells the loop that they wait. So, in round:
//
//   - the callbacks wait while a transaction with work in it is open (the
//     loop allows them only once it has committed, see allowRebalance);
//   - when a callback waits and no join is under way (the heartbeat loop
//     runs: the one before the join, waiting for its revoke, or the one
//     that starts as soon as SyncGroup has answered), the loop commits the
//     open transaction before it allows the rebalance. The revoke then
//     comes between transactions, and only the revoked tasks close
//     (reconcileEOS);
//   - while a join is under way it ends no transaction, and processes on:
//     what the tasks produce is appended, and visible once the commit after
//     the join has ended it. A join that lasts past half the transaction
//     timeout (a member that does not rejoin holds it for the rebalance
//     timeout) does not hold the commit longer: the broker would abort the
//     transaction at its timeout.

// groupPhase notes, from the group client's requests and callbacks, what
// the loop needs to place its commits around a rebalance.
type groupPhase struct {
	joining atomic.Bool // a JoinGroup written and no SyncGroup answered since
	blocked atomic.Bool // a rebalance callback waits for the loop to allow it
}

func (g *groupPhase) reset() {
	g.joining.Store(false)
	g.blocked.Store(false)
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (g *groupPhase) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key == keyJoinGroup {
		g.joining.Store(true)
	}
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (g *groupPhase) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key == keySyncGroup {
		g.joining.Store(false)
	}
}

// onCallbackBlocked is the group client's OnPartitionsCallbackBlocked.
func (g *groupPhase) onCallbackBlocked(context.Context, *kgo.Client) { g.blocked.Store(true) }

// commitDue says whether the round's open transaction is to be committed
// now, given whether it would be by the interval or a request (due).
func (r *Runtime) commitDue(due bool) bool {
	if !r.cfg.ExactlyOnce || !r.inTxn {
		return due
	}
	if r.phase.joining.Load() {
		// End would wait for the join's end, then likely abort.
		return due && r.cfg.Now().Sub(r.txnBegan) >= r.cfg.TransactionTimeout/2
	}
	return due || r.phase.blocked.Load()
}

// allowRebalance lets the group client run the rebalance callbacks that
// wait for the round's end, unless a transaction with work in it is open:
// then they wait for its commit, which the next round makes if one waits.
// (A poll that waits for records holds none back itself: a revoke could
// run while the loop waited in the next round's poll, and doom the
// transaction that the loop had kept open through a join.)
func (r *Runtime) allowRebalance() {
	if r.cfg.ExactlyOnce && r.inTxn && !r.txnEmpty() {
		return
	}
	r.phase.blocked.Store(false)
	r.cl.AllowRebalance()
}

// joinFollowUp joins at once the rebalance that follows one that left out
// of this member's partitions tasks another member still owned (see
// assign.Assignment.FollowUp): that member has revoked them, or will, and
// rejoined; the rebalance that moves them waits for every member.
func (r *Runtime) joinFollowUp(cl *kgo.Client) {
	if r.balancer.Current().FollowUp {
		r.log.Info("tasks wait for their owners to revoke them; joining the rebalance that moves them at once")
		cl.ForceRebalance()
	}
}
