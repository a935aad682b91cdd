package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka can leave a transaction hanging, and no client can end it.
//
// A transaction coordinator that comes back with a transaction it had
// prepared (PrepareCommit or PrepareAbort written, markers not all sent)
// sends the markers again, but drops those of partitions that have no
// leader at that moment, taking them for deleted (its marker channel logs
// "Couldn't find leader endpoint for partitions ... likely deleted
// already"), and records the transaction complete. A single broker in
// KRaft combined mode that is killed and started again is fenced about 9s
// after it starts (its controller waits out the old incarnation's session:
// DUPLICATE_BROKER_REGISTRATION until then), every partition it leads is
// leaderless for a moment, and the coordinator completes its prepared
// transactions right then. Seen in one run of eight of
// TestBrokerRestartSingle: a kill between an EndTxn's PrepareCommit and its
// markers. The partitions keep an open transaction forever:
// read-committed readers stop at it, and the group's offsets answer
// UNSTABLE_OFFSET_COMMIT, so no member can start. Kafka's remedy is an
// operator's (kafka-transactions.sh find-hanging, then abort), and so is
// this: hangingRepair finds such transactions and writes the markers the
// coordinator dropped, commit or abort as it had decided (read from
// __transaction_state), which is what the instance's state assumes.

// hangingAfter is how long an open transaction must outlive its
// coordinator's (which is no longer in progress) to count as hanging:
// markers otherwise land within milliseconds.
const hangingAfter = 5 * time.Second

// hangingRepair repairs the hanging transactions of an application's
// producers on its topics and its group's offsets.
type hangingRepair struct {
	t       *testing.T
	adm     *kadm.Client
	brokers []string
	app     string   // the application id: its internal topics' prefix
	topics  []string // its user topics
	seen    map[hangKey]time.Time
}

// hangKey is one producer's open transaction on one partition.
type hangKey struct {
	topic     string
	partition int32
	producer  int64
	epoch     int16
}

func newHangingRepair(t *testing.T, adm *kadm.Client, c crashConfig) *hangingRepair {
	return &hangingRepair{t: t, adm: adm, brokers: c.brokers, app: c.appID, topics: []string{c.in, c.out}, seen: map[hangKey]time.Time{}}
}

// check looks once, and repairs what has been hanging for hangingAfter.
// It reports what it repaired; errors (a broker away) count as nothing
// found.
func (h *hangingRepair) check(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	open, err := h.openTxns(ctx)
	if err != nil || len(open) == 0 {
		clear(h.seen)
		return nil
	}
	pids := map[int64]bool{}
	for k := range open {
		pids[k.producer] = true
	}
	// Which transactional ids these producers are, and whether their
	// coordinators still have a transaction in progress.
	listed, err := h.adm.ListTransactions(ctx, slices.Collect(maps.Keys(pids)), nil)
	if err != nil {
		return nil
	}
	described, err := h.adm.DescribeTransactions(ctx, listed.TransactionalIDs()...)
	if err != nil {
		return nil
	}
	coord := map[int64]kadm.DescribedTransaction{}
	for _, d := range described {
		// The offsets' topic is every group's: only this application's
		// producers are its to repair.
		if d.Err == nil && strings.HasPrefix(d.TxnID, h.app+"-") {
			coord[d.ProducerID] = d
		}
	}
	now := time.Now()
	due := map[hangKey]bool{}
	for k := range open {
		d, ok := coord[k.producer]
		if !ok || inProgress(d.State) || k.epoch > d.ProducerEpoch {
			delete(h.seen, k)
			continue
		}
		if _, ok := h.seen[k]; !ok {
			h.seen[k] = now
		}
		if now.Sub(h.seen[k]) >= hangingAfter {
			due[k] = true
		}
	}
	for k := range h.seen {
		if !open[k] {
			delete(h.seen, k)
		}
	}
	if len(due) == 0 {
		return nil
	}
	return h.repair(ctx, due, coord)
}

func inProgress(state string) bool {
	switch state {
	case "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
		return true
	}
	return false
}

// openTxns lists the open transactions on the application's partitions
// and on the group offsets' topic.
func (h *hangingRepair) openTxns(ctx context.Context) (map[hangKey]bool, error) {
	all, err := h.adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	set := kadm.TopicsSet{}
	for _, d := range all.Sorted() {
		if strings.HasPrefix(d.Topic, h.app+"-") || slices.Contains(h.topics, d.Topic) {
			set.Add(d.Topic, d.Partitions.Numbers()...)
		}
	}
	offsets, err := h.adm.ListTopicsWithInternal(ctx, "__consumer_offsets")
	if err != nil {
		return nil, err
	}
	for _, d := range offsets.Sorted() {
		set.Add(d.Topic, d.Partitions.Numbers()...)
	}
	ps, err := h.adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, err
	}
	open := map[hangKey]bool{}
	ps.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			open[hangKey{p.Topic, p.Partition, p.ProducerID, p.ProducerEpoch}] = true
		}
	})
	return open, nil
}

// repair writes the markers the coordinator dropped.
func (h *hangingRepair) repair(ctx context.Context, due map[hangKey]bool, coord map[int64]kadm.DescribedTransaction) []string {
	coordEpoch, err := h.coordinatorEpoch(ctx)
	if err != nil {
		return nil
	}
	type txn struct {
		producer int64
		epoch    int16
	}
	parts := map[txn]kadm.TopicsSet{}
	for k := range due {
		id := txn{k.producer, k.epoch}
		set := parts[id]
		if set == nil {
			set = kadm.TopicsSet{}
			parts[id] = set
		}
		set.Add(k.topic, k.partition)
	}
	var done []string
	for id, set := range parts {
		d := coord[id.producer]
		commit, epoch, found, err := h.decision(ctx, d.TxnID, id.producer, id.epoch)
		if err != nil {
			h.t.Logf("hanging transaction of %s (producer %d, epoch %d) on %v: reading its coordinator's decision: %v", d.TxnID, id.producer, id.epoch, set.Sorted(), err)
			continue
		}
		if !found {
			// Never prepared: the coordinator would have aborted it,
			// with the epoch it has now.
			commit, epoch = false, d.ProducerEpoch
		}
		resps, err := h.adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: id.producer, ProducerEpoch: epoch, Commit: commit, CoordinatorEpoch: coordEpoch, Topics: set})
		resps.EachPartition(func(r kadm.TxnMarkersPartitionResponse) {
			if r.Err != nil && err == nil {
				err = fmt.Errorf("%s[%d]: %w", r.Topic, r.Partition, r.Err)
			}
		})
		verb := map[bool]string{true: "commit", false: "abort"}[commit]
		if err != nil {
			h.t.Logf("hanging transaction of %s (producer %d, epoch %d) on %v: writing %s markers: %v", d.TxnID, id.producer, id.epoch, set.Sorted(), verb, err)
			continue
		}
		msg := fmt.Sprintf("Kafka left a transaction of %s hanging (producer %d, epoch %d, open on %v for %v with its coordinator %s); wrote the %s markers its coordinator had dropped, as an operator would",
			d.TxnID, id.producer, id.epoch, set.Sorted(), hangingAfter, d.State, verb)
		h.t.Log(msg)
		done = append(done, msg)
		for k := range due {
			if k.producer == id.producer && k.epoch == id.epoch {
				delete(h.seen, k)
			}
		}
	}
	return done
}

// coordinatorEpoch is a coordinator epoch no marker has exceeded: the
// highest leader epoch of the transaction log's partitions (a coordinator's
// epoch is its partition's leader epoch).
func (h *hangingRepair) coordinatorEpoch(ctx context.Context) (int32, error) {
	m, err := h.adm.Metadata(ctx, "__transaction_state")
	if err != nil {
		return 0, err
	}
	epoch := int32(-1)
	for _, d := range m.Topics {
		for _, p := range d.Partitions {
			epoch = max(epoch, p.LeaderEpoch)
		}
	}
	if epoch < 0 {
		return 0, fmt.Errorf("no leader epoch for __transaction_state")
	}
	return epoch, nil
}

// decision reads from the transaction log what the coordinator last
// prepared for the transaction that wrote with epoch: commit or abort, and
// the epoch of its markers (the same, or one more where the transaction
// bumped it, KIP-890). found is false if it never prepared one.
func (h *hangingRepair) decision(ctx context.Context, txnID string, producer int64, epoch int16) (commit bool, markerEpoch int16, found bool, err error) {
	ends, err := h.adm.ListEndOffsets(ctx, "__transaction_state")
	if err != nil {
		return false, 0, false, err
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics("__transaction_state"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return false, 0, false, err
	}
	defer cl.Close()
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return false, 0, false, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			var k kmsg.TxnMetadataKey
			var v kmsg.TxnMetadataValue
			if r.Value == nil || k.ReadFrom(r.Key) != nil || k.TransactionalID != txnID || v.ReadFrom(r.Value) != nil {
				return
			}
			if v.ProducerID != producer || (v.ProducerEpoch != epoch && v.ProducerEpoch != epoch+1) {
				return
			}
			switch v.State {
			case kmsg.TransactionStatePrepareCommit:
				commit, markerEpoch, found = true, v.ProducerEpoch, true
			case kmsg.TransactionStatePrepareAbort:
				commit, markerEpoch, found = false, v.ProducerEpoch, true
			}
		})
	}
	return commit, markerEpoch, found, nil
}
