package hanging

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStatePartition checks the partition of __transaction_state against
// Java's String.hashCode and Kafka's Utils.abs.
func TestStatePartition(t *testing.T) {
	for _, c := range []struct {
		id   string
		n    int
		want int32
	}{
		{"hello", 50, 99162322 % 50},
		{"", 50, 0},
		{"polygenelubricants", 50, 0}, // hashCode is Integer.MIN_VALUE: Utils.abs makes it 0
		{"shop-inventory-0", 1, 0},
		{"é€𝄞", 50, 16751501 % 50}, // a character outside the BMP counts as two UTF-16 units
	} {
		if got := statePartition(c.id, c.n); got != c.want {
			t.Errorf("statePartition(%q, %d) = %d, want %d", c.id, c.n, got, c.want)
		}
	}
}

// TestDecide checks the decisions that a broker cannot easily be made to
// need: transaction version 2's epochs, disagreeing and compacted logs.
func TestDecide(t *testing.T) {
	const pid = 7
	now := time.Now()
	val := func(state kmsg.TransactionState, epoch int16, tv int16, parts ...int32) kmsg.TxnMetadataValue {
		v := kmsg.TxnMetadataValue{ProducerID: pid, ProducerEpoch: epoch, State: state, ClientTransactionVersion: tv}
		if len(parts) > 0 {
			v.Topics = []kmsg.TxnMetadataValueTopic{{Topic: "t", Partitions: parts}}
		}
		return v
	}
	var (
		empty    = kmsg.TransactionStateEmpty
		ongoing  = kmsg.TransactionStateOngoing
		pcommit  = kmsg.TransactionStatePrepareCommit
		ccommit  = kmsg.TransactionStateCompleteCommit
		pabort   = kmsg.TransactionStatePrepareAbort
		cabort   = kmsg.TransactionStateCompleteAbort
		coordTV2 = kadm.DescribedTransaction{TxnID: "x", State: "CompleteCommit", ProducerID: pid, ProducerEpoch: 6, TimeoutMillis: 10_000}
		coordTV1 = kadm.DescribedTransaction{TxnID: "x", State: "CompleteAbort", ProducerID: pid, ProducerEpoch: 5, TimeoutMillis: 10_000}
	)
	for _, c := range []struct {
		name    string
		log     []kmsg.TxnMetadataValue
		coord   kadm.DescribedTransaction
		written time.Duration // ago
		want    Decision
		epoch   int16 // the marker's
		hanging bool
		reason  string
	}{
		{"tv2 commit at the next epoch", []kmsg.TxnMetadataValue{val(ongoing, 5, 2, 0), val(pcommit, 6, 2, 0), val(ccommit, 6, 2)},
			coordTV2, time.Second, Commit, 6, true, "listed in it"},
		{"tv2: a decision at the records' own epoch is the previous transaction's",
			[]kmsg.TxnMetadataValue{val(pabort, 5, 2, 0), val(cabort, 5, 2), val(ongoing, 5, 2, 1), val(pcommit, 6, 2, 1), val(ccommit, 6, 2)},
			coordTV2, time.Second, Commit, 6, true, "decided to commit"},
		{"tv1: the partition listed wins over other transactions of the epoch",
			[]kmsg.TxnMetadataValue{val(empty, 5, 1), val(pcommit, 5, 1, 0), val(ccommit, 5, 1), val(pabort, 5, 1, 1), val(cabort, 5, 1)},
			coordTV1, time.Second, Commit, 5, true, "listed in it"},
		{"tv1: a commit and an abort of the epoch, neither listing it",
			[]kmsg.TxnMetadataValue{val(empty, 5, 1), val(pcommit, 5, 1, 1), val(ccommit, 5, 1), val(pabort, 5, 1, 1), val(cabort, 5, 1)},
			coordTV1, time.Second, Refuse, 0, true, "both a commit and an abort"},
		{"tv1: the epoch's beginning compacted away",
			[]kmsg.TxnMetadataValue{val(cabort, 5, 1)},
			coordTV1, time.Minute, Refuse, 0, true, "no longer holds the beginning"},
		{"tv1: fenced on its timeout, aborted at the next epoch",
			[]kmsg.TxnMetadataValue{val(empty, 5, 1), val(ongoing, 5, 1, 1), val(pabort, 6, 1, 1), val(cabort, 6, 1)},
			kadm.DescribedTransaction{TxnID: "x", State: "CompleteAbort", ProducerID: pid, ProducerEpoch: 6, TimeoutMillis: 10_000}, time.Minute, Abort, 6, true, "decided to abort"},
		{"no decision, coordinator moved on, young: not yet",
			[]kmsg.TxnMetadataValue{val(empty, 9, 1)},
			kadm.DescribedTransaction{TxnID: "x", State: "Empty", ProducerID: pid, ProducerEpoch: 9, TimeoutMillis: 10_000}, time.Second, Refuse, 0, false, ""},
		{"no decision, coordinator moved on, old: refused",
			[]kmsg.TxnMetadataValue{val(empty, 9, 1)},
			kadm.DescribedTransaction{TxnID: "x", State: "Empty", ProducerID: pid, ProducerEpoch: 9, TimeoutMillis: 10_000}, time.Minute, Refuse, 0, true, "at epoch 9 (Empty)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx := Txn{Topic: "t", Partition: 0, ProducerID: pid, ProducerEpoch: 5, LastWrite: now.Add(-c.written), Timeout: 10 * time.Second}
			got := decide(&tx, &txnLog{values: c.log}, c.coord, now)
			if got != c.hanging || (got && (tx.Decision != c.want || tx.MarkerEpoch != c.epoch || !strings.Contains(tx.Reason, c.reason))) {
				t.Fatalf("decide: hanging %v, %v at epoch %d: %s; want hanging %v, %v at epoch %d: …%s…", got, tx.Decision, tx.MarkerEpoch, tx.Reason, c.hanging, c.want, c.epoch, c.reason)
			}
		})
	}
}

// TestInProgress checks which open transactions a coordinator's present
// state has in progress: never one of an earlier epoch than an Ongoing
// transaction's, which is the one a restarted broker's dropped marker left
// while its producer went on to the next.
func TestInProgress(t *testing.T) {
	listed := kadm.TopicsSet{}
	listed.Add("t", 0)
	for _, c := range []struct {
		name   string
		state  string
		coord  int16 // the coordinator's epoch
		epoch  int16 // the records'
		topics kadm.TopicsSet
		want   bool
	}{
		{"ongoing, its epoch, listed", "Ongoing", 6, 6, listed, true},
		{"ongoing, its epoch, not listed (tv1: an earlier transaction's)", "Ongoing", 6, 6, nil, false},
		{"ongoing at the next epoch (tv2: the previous transaction ended)", "Ongoing", 6, 5, listed, false},
		{"ongoing, much later", "Ongoing", 9, 5, listed, false},
		{"preparing a commit, bumped (tv2)", "PrepareCommit", 6, 5, nil, true},
		{"preparing an abort, same epoch (tv1)", "PrepareAbort", 5, 5, nil, true},
		{"preparing, much later", "PrepareCommit", 9, 5, nil, false},
		{"complete", "CompleteCommit", 6, 5, nil, false},
		{"empty", "Empty", 5, 5, nil, false},
	} {
		d := kadm.DescribedTransaction{State: c.state, ProducerEpoch: c.coord, Topics: c.topics}
		p := kadm.DescribedProducer{Topic: "t", Partition: 0, ProducerEpoch: c.epoch}
		if got := inProgress(d, p); got != c.want {
			t.Errorf("%s: inProgress = %v, want %v", c.name, got, c.want)
		}
	}
}
