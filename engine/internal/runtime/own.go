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

	"github.com/oxbow-dev/oxbow/engine/hanging"
)

// errOwnLook: the look for the producer's own transactions left open,
// before a transaction, failed or found one it may not end. The loop
// rides it out as Kafka's trouble: it reconnects, and looks again.
var errOwnLook = errors.New("engine: before writing again, the look for this instance's transactions left open")

// brokerLost notes that a connection of the group client to a broker
// closed (kgo.HookBrokerDisconnect): the next transaction looks first.
type brokerLost struct{ atomic.Bool }

// OnBrokerDisconnect implements kgo.HookBrokerDisconnect.
func (b *brokerLost) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { b.Store(true) }

// ownLookTimeout bounds the look for the producer's own transactions left
// open, and their repair.
const ownLookTimeout = 30 * time.Second

// endOwnLeftOpen ends the transactions of the instance's own producer that
// Kafka left open on the partitions it writes, before the producer (at
// epoch) writes again: it has none in progress then (one it began has not
// written yet), so every one its coordinator has ended, and whose marker
// did not reach a partition, is left open there (the package hanging
// leaves alone what the coordinator has in progress, markers still on
// their way included). Measured on Kafka 4.4: a
// broker that fenced itself after a pause dropped the markers of the
// partitions it led ("Couldn't find leader endpoint"), while the instance
// reconnected with a new epoch.
//
// Left so, the producer's next transaction on such a partition ends it
// too: a partition ends a producer's transaction at the next marker of
// that producer, whatever its epoch, so an aborted transaction's records
// were read as committed with the next commit (a sale counted twice in
// the shoe store's broker campaign), and a committed one's would be lost
// with the next abort. So each is ended first with the marker its
// coordinator decided; one whose decision cannot be known, or any when
// repair is off, stops the producer here with an error that names it and
// the remedy (the loop tries again; Setup fails).
func (r *Runtime) endOwnLeftOpen(ctx context.Context, pid int64, epoch int16) error {
	ctx, cancel := context.WithTimeout(ctx, ownLookTimeout)
	defer cancel()
	defer r.waiting("Kafka to tell whether a transaction of " + r.cfg.TransactionalID + " was left open where it writes")()
	set := kadm.TopicsSet{}
	for topic, n := range r.plan.partitions {
		for p := range n {
			set.Add(topic, p)
		}
	}
	if err := addOffsetsPartition(ctx, kadm.NewClient(r.cl), r.cfg.Group, set); err != nil {
		return fmt.Errorf("engine: looking for transactions of %s left open: %w", r.cfg.TransactionalID, err)
	}
	// A topic just created may not be known yet to every broker, a
	// leader may be moving: those answers are tried again.
	found, err := hanging.FindOf(ctx, r.cl, set, pid)
	for try := 1; err != nil && kerr.IsRetriable(err) && ctx.Err() == nil; try++ {
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(try)*100*time.Millisecond, time.Second)):
			found, err = hanging.FindOf(ctx, r.cl, set, pid)
		}
	}
	if denied := (*hanging.NotAllowedError)(nil); errors.As(err, &denied) {
		r.log.Warn("some partitions the instance writes cannot be looked at for its transactions Kafka left open (grant what engine.ACLs lists)", "err", err)
	} else if err != nil {
		return fmt.Errorf("engine: looking for transactions of %s left open: %w", r.cfg.TransactionalID, err)
	}
	var due, left []hanging.Txn
	for _, t := range found {
		switch {
		case t.ProducerEpoch > epoch: // not this producer's (a newer incarnation's)
		case t.Decision == hanging.Refuse || !r.cfg.RepairHanging:
			left = append(left, t)
		default:
			due = append(due, t)
		}
	}
	repaired, err := hanging.Repair(ctx, r.cl, due)
	for _, t := range repaired {
		r.log.Warn("repaired a transaction of this instance's producer Kafka left open, before writing again: wrote the marker its coordinator decided", txnAttrs(t)...)
	}
	if err != nil {
		return fmt.Errorf("engine: ending transactions of %s left open: %w", r.cfg.TransactionalID, err)
	}
	if len(left) == 0 {
		return nil
	}
	var named []string
	for _, t := range left {
		attrs := append(txnAttrs(t), "remedy", t.Remedy())
		if !r.cfg.RepairHanging && t.Decision != hanging.Refuse {
			attrs = append(attrs, "repair", "off (engine.Config.LeaveHangingTransactions)")
		}
		r.log.Error("a transaction of this instance's producer Kafka left open: the instance does not write before it is ended", attrs...)
		named = append(named, fmt.Sprintf("%s[%d] (epoch %d, from offset %d)", t.Topic, t.Partition, t.ProducerEpoch, t.FirstOffset))
	}
	return fmt.Errorf("engine: transactions of %s left open on %s: its next transaction there would end them with its own marker; end them as their coordinator decided (oxbow transactions repair)", r.cfg.TransactionalID, fewOf(named))
}
