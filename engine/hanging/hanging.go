// Package hanging finds the transactions Kafka leaves open on a partition
// after their coordinator has finished with them, and ends them with the
// marker their coordinator decided.
//
// A transaction is hanging when a partition holds records of it without an
// end marker while its coordinator no longer has it in progress. Its
// partition's last stable offset then stops: read-committed consumers wait
// at it forever and, on __consumer_offsets, every group whose offsets sit in
// that partition answers UNSTABLE_OFFSET_COMMIT to offset fetches that
// require stable offsets. No client can end it. Kafka causes it itself
// (a coordinator that completes a prepared transaction while a partition
// has no known leader drops that partition's marker, KAFKA-20716 and the
// restart of a single KRaft broker), and so does a producer that wrote
// without the partition in its transaction (brokers before 3.6, or with
// transaction.partition.verification.enable=false).
//
// [Find] lists them with the decision for each; [Repair] writes the
// markers. The decision is never one the coordinator did not take:
//
//   - Commit or abort, where the coordinator's log (__transaction_state)
//     holds a PrepareCommit/CompleteCommit or PrepareAbort/CompleteAbort of
//     the producer for the epoch the partition's records carry (the same
//     epoch, or the next one for a transaction ended under transaction
//     version 2 or fenced on its timeout). The marker is that one, with the
//     epoch the coordinator's own markers carry. The coordinator has
//     already written it to every other partition of the transaction, so
//     the repair makes this partition agree with them.
//   - Abort, where the coordinator has not completed a transaction of that
//     epoch at all (its state is Empty at that epoch) and the records are
//     older than the transaction's timeout: no commit was ever decided, and
//     the coordinator would abort such a transaction itself.
//   - Refuse, where the decision cannot be known: no coordinator knows the
//     producer (its transactional id expired), the coordinator has moved
//     past the epoch and its log no longer holds what it decided, or the log
//     holds decisions of that epoch that disagree. The reason says which;
//     the operator decides (kafka-transactions.sh abort).
//
// A repair needs ClusterAction on the cluster (WriteTxnMarkers) besides
// Describe on the topics and transactional ids and Read on
// __transaction_state.
package hanging

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Decision is what a hanging transaction's repair writes.
type Decision int

const (
	// Refuse: the coordinator's decision cannot be known; nothing is
	// written.
	Refuse Decision = iota
	// Commit writes a COMMIT marker.
	Commit
	// Abort writes an ABORT marker.
	Abort
)

func (d Decision) String() string {
	switch d {
	case Commit:
		return "commit"
	case Abort:
		return "abort"
	}
	return "refuse"
}

// Txn is a transaction left open on one partition.
type Txn struct {
	Topic     string
	Partition int32
	// ProducerID and ProducerEpoch are those of the open records.
	ProducerID    int64
	ProducerEpoch int16
	// FirstOffset is the open transaction's first offset on the
	// partition: its last stable offset.
	FirstOffset int64
	// LastWrite is when the producer last wrote to the partition (its
	// records' timestamp); zero if the broker does not know.
	LastWrite time.Time

	// TxnID is the producer's transactional id; empty if no coordinator
	// knows the producer.
	TxnID string
	// State and Epoch are what the coordinator reports for TxnID now;
	// Timeout its transaction timeout.
	State   string
	Epoch   int16
	Timeout time.Duration

	// Decision is what a repair writes, Reason why.
	Decision Decision
	Reason   string
	// MarkerEpoch is the producer epoch the marker carries,
	// CoordinatorEpoch the coordinator epoch.
	MarkerEpoch      int16
	CoordinatorEpoch int32
}

// Age is how long ago the producer last wrote to the partition, at now;
// zero if unknown.
func (t Txn) Age(now time.Time) time.Duration {
	if t.LastWrite.IsZero() {
		return 0
	}
	return max(0, now.Sub(t.LastWrite)).Truncate(time.Second)
}

// String names the transaction, its coordinator's state and the decision,
// in one line.
func (t Txn) String() string {
	id := t.TxnID
	if id == "" {
		id = "(unknown transactional id)"
	}
	s := fmt.Sprintf("%s[%d] open since offset %d by producer %d epoch %d (%s", t.Topic, t.Partition, t.FirstOffset, t.ProducerID, t.ProducerEpoch, id)
	if t.State != "" {
		s += fmt.Sprintf(", coordinator %s at epoch %d", t.State, t.Epoch)
	}
	if age := t.Age(time.Now()); age > 0 {
		s += fmt.Sprintf(", last write %v ago", age)
	}
	return s + fmt.Sprintf("): %s: %s", t.Decision, t.Reason)
}

// Remedy is what an operator does about t, in one sentence.
func (t Txn) Remedy() string {
	if t.Decision == Refuse {
		return fmt.Sprintf("decide whether producer %d's transaction committed; if it did not, end it with kafka-transactions.sh abort --topic %s --partition %d --start-offset %d", t.ProducerID, t.Topic, t.Partition, t.FirstOffset)
	}
	return fmt.Sprintf("oxbow transactions repair --topic %s writes the %s marker its coordinator decided", t.Topic, t.Decision)
}

// TransactionStateTopic is the coordinators' log.
const TransactionStateTopic = "__transaction_state"

// Find lists the hanging transactions on the partitions of topics (every
// topic of the cluster, internal ones included, when none is named), with
// the decision for each, sorted by topic and partition. A transaction
// still in progress at its coordinator is never listed, and a partition
// is listed only if it is still open after its coordinator was asked.
func Find(ctx context.Context, cl *kgo.Client, topics ...string) ([]Txn, error) {
	set, err := partitions(ctx, kadm.NewClient(cl), topics)
	if err != nil {
		return nil, err
	}
	return FindIn(ctx, cl, set)
}

// FindIn is Find on the partitions of set. Partitions whose producers the
// client may not describe are skipped: then the error is a
// *NotAllowedError, returned with what was found elsewhere.
func FindIn(ctx context.Context, cl *kgo.Client, set kadm.TopicsSet) ([]Txn, error) {
	return find(ctx, cl, set, -1)
}

// FindOf is FindIn for one producer's transactions only.
func FindOf(ctx context.Context, cl *kgo.Client, set kadm.TopicsSet, producerID int64) ([]Txn, error) {
	return find(ctx, cl, set, producerID)
}

// find is FindIn on the transactions of producerID, or of every producer
// if it is negative.
func find(ctx context.Context, cl *kgo.Client, set kadm.TopicsSet, producerID int64) ([]Txn, error) {
	adm := kadm.NewClient(cl)
	open, err := openTxns(ctx, adm, set)
	var denied *NotAllowedError
	if err != nil && !errors.As(err, &denied) {
		return nil, err
	}
	if producerID >= 0 {
		open = slices.DeleteFunc(open, func(p kadm.DescribedProducer) bool { return p.ProducerID != producerID })
	}
	if len(open) == 0 {
		return nil, err
	}
	pids := map[int64]bool{}
	for _, p := range open {
		pids[p.ProducerID] = true
	}
	listed, err := adm.ListTransactions(ctx, slices.Sorted(maps.Keys(pids)), nil)
	if err != nil {
		return nil, fmt.Errorf("hanging: listing transactions: %w", err)
	}
	byPID := map[int64]kadm.DescribedTransaction{}
	if ids := listed.TransactionalIDs(); len(ids) > 0 {
		described, err := adm.DescribeTransactions(ctx, ids...)
		if err != nil {
			return nil, fmt.Errorf("hanging: describing transactions: %w", err)
		}
		for _, d := range described.Sorted() {
			byPID[d.ProducerID] = d
		}
		for _, l := range listed {
			if _, ok := byPID[l.ProducerID]; !ok { // no answer for it
				byPID[l.ProducerID] = kadm.DescribedTransaction{TxnID: l.TxnID, ProducerID: l.ProducerID, Err: errors.New("not described")}
			}
		}
	}
	// First what the coordinators say; the transactions they have in
	// progress are not hanging.
	var found, toDecide []Txn
	for _, p := range open {
		t := Txn{Topic: p.Topic, Partition: p.Partition, ProducerID: p.ProducerID, ProducerEpoch: p.ProducerEpoch,
			FirstOffset: p.CurrentTxnStartOffset, CoordinatorEpoch: p.CoordinatorEpoch}
		if p.LastTimestamp > 0 {
			t.LastWrite = time.UnixMilli(p.LastTimestamp)
		}
		d, known := byPID[p.ProducerID]
		switch {
		case !known:
			t.Reason = "no coordinator lists the producer (its transactional id expired, it never had one, or this client may not describe it), so what it decided cannot be known"
			found = append(found, t)
		case d.Err != nil:
			t.TxnID = d.TxnID
			t.Reason = fmt.Sprintf("its coordinator does not describe the transaction (%v), so what it decided cannot be known now", d.Err)
			found = append(found, t)
		case !inProgress(d, p):
			t.TxnID, t.State, t.Epoch, t.Timeout = d.TxnID, d.State, d.ProducerEpoch, time.Duration(d.TimeoutMillis)*time.Millisecond
			toDecide = append(toDecide, t)
		}
	}
	// A transaction that ended between the two looks is no longer open:
	// look again before reading the coordinators' logs, which costs a
	// read of a __transaction_state partition each.
	if toDecide, err = stillOpen(ctx, adm, toDecide); err != nil {
		return nil, err
	}
	logs := map[string]*txnLog{}
	now := time.Now()
	for _, t := range toDecide {
		l, ok := logs[t.TxnID]
		if !ok {
			l, err = readLog(ctx, cl, adm, t.TxnID)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				l = &txnLog{err: err}
			}
			logs[t.TxnID] = l
		}
		if l.err != nil {
			t.Reason = fmt.Sprintf("its coordinator's log cannot be read now: %v", l.err)
			found = append(found, t)
			continue
		}
		t.CoordinatorEpoch = max(t.CoordinatorEpoch, l.coordinatorEpoch)
		if decide(&t, l, byPID[t.ProducerID], now) {
			found = append(found, t)
		}
	}
	slices.SortFunc(found, func(a, b Txn) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.ProducerID - b.ProducerID)
	})
	found, err = stillOpen(ctx, adm, found)
	if err != nil {
		return nil, err
	}
	if denied != nil {
		return found, denied
	}
	return found, nil
}

// partitions is every partition of topics, or of the cluster.
func partitions(ctx context.Context, adm *kadm.Client, topics []string) (kadm.TopicsSet, error) {
	var (
		td  kadm.TopicDetails
		err error
	)
	if len(topics) == 0 {
		td, err = adm.ListTopicsWithInternal(ctx)
	} else {
		td, err = adm.ListTopicsWithInternal(ctx, topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("hanging: listing topics: %w", err)
	}
	set := kadm.TopicsSet{}
	for _, d := range td.Sorted() {
		if d.Err != nil {
			return nil, fmt.Errorf("hanging: topic %s: %w", d.Topic, d.Err)
		}
		if d.Topic == TransactionStateTopic {
			continue // written by coordinators, never in a transaction
		}
		set.Add(d.Topic, d.Partitions.Numbers()...)
	}
	return set, nil
}

// openTxns is every producer with a transaction open on a partition of set.
func openTxns(ctx context.Context, adm *kadm.Client, set kadm.TopicsSet) ([]kadm.DescribedProducer, error) {
	if len(set) == 0 {
		return nil, nil
	}
	ps, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("hanging: describing producers: %w", err)
	}
	var open []kadm.DescribedProducer
	var perr error
	var denied []string
	ps.EachPartition(func(p kadm.DescribedProducersPartition) {
		switch {
		case p.Err == nil:
		case errors.Is(p.Err, kerr.TopicAuthorizationFailed):
			denied = append(denied, fmt.Sprintf("%s[%d]", p.Topic, p.Partition))
		case perr == nil:
			perr = fmt.Errorf("hanging: describing producers of %s[%d]: %w", p.Topic, p.Partition, p.Err)
		}
	})
	if perr != nil {
		return nil, perr
	}
	if len(denied) > 0 {
		slices.Sort(denied)
		err = &NotAllowedError{Partitions: denied}
	}
	ps.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			open = append(open, p)
		}
	})
	slices.SortFunc(open, func(a, b kadm.DescribedProducer) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.ProducerID - b.ProducerID)
	})
	return open, err
}

// NotAllowedError is the error of a look that skipped partitions whose
// producers the client may not describe (it needs READ on their topics);
// what the look found elsewhere is returned with it.
type NotAllowedError struct {
	Partitions []string // "topic[partition]"
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("hanging: not allowed to describe the producers of %s (DescribeProducers needs READ on the topic): not looked at", strings.Join(e.Partitions, ", "))
}

// inProgress reports whether p's open transaction is the one its
// coordinator d has in progress, whose markers are still to come.
func inProgress(d kadm.DescribedTransaction, p kadm.DescribedProducer) bool {
	switch d.State {
	case "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
	default:
		return false
	}
	if d.State == "Ongoing" {
		// The transaction in progress writes at the coordinator's epoch
		// (under version 2 the epoch moves on when the previous one
		// prepared; under version 1 when the producer was initialised
		// again, which ended the previous epoch's). Records of an
		// earlier epoch are an ended transaction's: a decider whose
		// marker was dropped while its producer runs the next one.
		// A partition joins a transaction before its records are
		// written, so one the coordinator does not list was left by an
		// earlier transaction of the same epoch (version 1).
		return p.ProducerEpoch == d.ProducerEpoch && d.Topics.Lookup(p.Topic, p.Partition)
	}
	// Under transaction version 2 the coordinator bumps the epoch when
	// it prepares, so its epoch is one past the records'.
	return p.ProducerEpoch >= d.ProducerEpoch-1
}

// decision is one of the coordinator's decisions for the producer in its
// log.
type decision struct {
	commit bool
	epoch  int16
	tv2    bool
	listed bool // the partition is among the transaction's
}

// decide sets t's decision from the coordinator's log l and its present
// state d. It reports false if t is not (yet) hanging.
func decide(t *Txn, l *txnLog, d kadm.DescribedTransaction, now time.Time) bool {
	var matches []decision
	for _, dec := range l.decisions(t.ProducerID, t.Topic, t.Partition) {
		switch {
		case dec.tv2 && dec.epoch == t.ProducerEpoch+1,
			!dec.tv2 && (dec.epoch == t.ProducerEpoch || dec.epoch == t.ProducerEpoch+1):
			matches = append(matches, dec)
		}
	}
	if slices.ContainsFunc(matches, func(dec decision) bool { return dec.listed }) {
		matches = slices.DeleteFunc(matches, func(dec decision) bool { return !dec.listed })
	}
	if len(matches) > 0 {
		first := matches[0]
		for _, m := range matches[1:] {
			if m.commit != first.commit {
				t.Reason = fmt.Sprintf("the coordinator's log holds both a commit and an abort of producer epoch %d, and which one these records belong to cannot be known", t.ProducerEpoch)
				return true
			}
		}
		last := matches[len(matches)-1]
		if !last.listed && !last.tv2 && !l.holdsEpoch(t.ProducerID, t.ProducerEpoch) {
			// Under transaction version 1 every transaction of a producer
			// epoch has that epoch: only the whole epoch's history says
			// that no other transaction of it could have left these
			// records, and compaction has removed its beginning.
			t.Reason = fmt.Sprintf("the coordinator's log no longer holds the beginning of producer epoch %d (compacted), so which of its transactions these records belong to cannot be known", t.ProducerEpoch)
			return true
		}
		t.Decision, t.MarkerEpoch = Abort, last.epoch
		if first.commit {
			t.Decision = Commit
		}
		how := "was not listed in it"
		if last.listed {
			how = "was listed in it and its marker was not written"
		}
		t.Reason = fmt.Sprintf("its coordinator decided to %s the transaction of producer epoch %d; this partition %s", t.Decision, t.ProducerEpoch, how)
		return true
	}
	age := t.Age(now)
	if d.State == "Empty" && d.ProducerEpoch == t.ProducerEpoch {
		if t.LastWrite.IsZero() || age < t.Timeout {
			return false // a producer may still add it and end it
		}
		t.Decision, t.MarkerEpoch = Abort, t.ProducerEpoch
		t.Reason = fmt.Sprintf("its coordinator has no transaction of producer epoch %d (Empty) and the records are %v old, past the transaction timeout %v: nothing was committed, and the coordinator would abort it", t.ProducerEpoch, age, t.Timeout)
		return true
	}
	if !t.LastWrite.IsZero() && age < t.Timeout {
		return false
	}
	t.Reason = fmt.Sprintf("its coordinator is at epoch %d (%s) and its log no longer holds what it decided for epoch %d", d.ProducerEpoch, d.State, t.ProducerEpoch)
	return true
}

// stillOpen keeps the transactions of found still open on their partition,
// with the same first offset, now that their coordinator has been asked:
// markers in flight when the partitions were first described have landed.
func stillOpen(ctx context.Context, adm *kadm.Client, found []Txn) ([]Txn, error) {
	if len(found) == 0 {
		return nil, nil
	}
	set := kadm.TopicsSet{}
	for _, t := range found {
		set.Add(t.Topic, t.Partition)
	}
	open, err := openTxns(ctx, adm, set)
	if err != nil { // partitions looked at once are allowed
		return nil, err
	}
	type key struct {
		topic     string
		partition int32
		producer  int64
		offset    int64
	}
	now := map[key]bool{}
	for _, p := range open {
		now[key{p.Topic, p.Partition, p.ProducerID, p.CurrentTxnStartOffset}] = true
	}
	return slices.DeleteFunc(found, func(t Txn) bool {
		return !now[key{t.Topic, t.Partition, t.ProducerID, t.FirstOffset}]
	}), nil
}

// txnLog is what a transactional id's partition of __transaction_state
// holds for it.
type txnLog struct {
	err    error                   // it could not be read
	values []kmsg.TxnMetadataValue // oldest first, since its last tombstone
	// coordinatorEpoch is the partition's leader epoch: the epoch its
	// coordinator writes markers with.
	coordinatorEpoch int32
}

// decisions lists the commits and aborts the coordinator prepared or
// completed for producer, oldest first.
func (l *txnLog) decisions(producer int64, topic string, partition int32) []decision {
	var out []decision
	for _, v := range l.values {
		if v.ProducerID != producer {
			continue
		}
		dec := decision{epoch: v.ProducerEpoch, tv2: v.ClientTransactionVersion >= 2}
		switch v.State {
		case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStateCompleteCommit:
			dec.commit = true
		case kmsg.TransactionStatePrepareAbort, kmsg.TransactionStateCompleteAbort:
		default:
			continue
		}
		for _, tp := range v.Topics {
			if tp.Topic == topic && slices.Contains(tp.Partitions, partition) {
				dec.listed = true
			}
		}
		out = append(out, dec)
	}
	return out
}

// holdsEpoch reports whether the log still holds the record that began
// producer's epoch (Empty, written when the producer got it): then
// compaction has removed none of the epoch's later records.
func (l *txnLog) holdsEpoch(producer int64, epoch int16) bool {
	return slices.ContainsFunc(l.values, func(v kmsg.TxnMetadataValue) bool {
		return v.ProducerID == producer && v.ProducerEpoch == epoch && v.State == kmsg.TransactionStateEmpty
	})
}

// CoordinatorPartition is the partition of its coordinator's topic that
// holds a group's offsets (in __consumer_offsets) or a transactional id's
// state (in __transaction_state), of partitions: Kafka's hash of the name
// (Java's String.hashCode, its absolute value).
func CoordinatorPartition(name string, partitions int) int32 { return statePartition(name, partitions) }

func statePartition(txnID string, partitions int) int32 {
	var h int32
	for _, c := range utf16.Encode([]rune(txnID)) {
		h = 31*h + int32(c)
	}
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % int32(partitions)
}

// readLog reads txnID's records from __transaction_state, up to the
// partition's end when called, with fetches of its own through cl (which
// may be any client: a group's or a producer's included).
func readLog(ctx context.Context, cl *kgo.Client, adm *kadm.Client, txnID string) (*txnLog, error) {
	md, err := adm.Metadata(ctx, TransactionStateTopic)
	if err != nil {
		return nil, fmt.Errorf("hanging: %s's metadata: %w", TransactionStateTopic, err)
	}
	td, ok := md.Topics[TransactionStateTopic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		return nil, fmt.Errorf("hanging: %s has no partitions: %v", TransactionStateTopic, td.Err)
	}
	p := statePartition(txnID, len(td.Partitions))
	pd := td.Partitions[p]
	l := &txnLog{coordinatorEpoch: pd.LeaderEpoch}
	ends, err := adm.ListEndOffsets(ctx, TransactionStateTopic)
	if err != nil {
		return nil, fmt.Errorf("hanging: %s's end offsets: %w", TransactionStateTopic, err)
	}
	end, ok := ends.Lookup(TransactionStateTopic, p)
	if !ok || end.Err != nil {
		return nil, fmt.Errorf("hanging: the end offset of %s[%d]: %v", TransactionStateTopic, p, end.Err)
	}
	decompressor := kgo.DefaultDecompressor()
	for offset := int64(0); offset < end.Offset; {
		fp, err := fetch(ctx, cl, td, pd, offset, 16<<20, false)
		if err != nil {
			return nil, err
		}
		got, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: offset, Topic: TransactionStateTopic, Partition: p},
			fp, decompressor, nil)
		if got.Err != nil {
			return nil, fmt.Errorf("hanging: reading %s[%d] at %d: %w", TransactionStateTopic, p, offset, got.Err)
		}
		next := offset
		for _, r := range got.Records {
			next = r.Offset + 1
			var k kmsg.TxnMetadataKey
			if k.ReadFrom(r.Key) != nil || k.TransactionalID != txnID {
				continue
			}
			if r.Value == nil {
				l.values = l.values[:0] // expired
				continue
			}
			var v kmsg.TxnMetadataValue
			if v.ReadFrom(r.Value) == nil {
				l.values = append(l.values, v)
			}
		}
		switch {
		case next > offset:
		case got.LogStartOffset > offset:
			next = got.LogStartOffset // deleted under the reader
		default:
			return nil, fmt.Errorf("hanging: reading %s[%d]: no records at %d, below its end %d", TransactionStateTopic, p, offset, end.Offset)
		}
		offset = next
	}
	return l, nil
}

// Repair writes the markers of the transactions in txns decided Commit or
// Abort and checks that each partition's transaction then ended. It
// returns those repaired; refused ones are left as they are. Its error
// names every partition it could not repair and why.
func Repair(ctx context.Context, cl *kgo.Client, txns []Txn) ([]Txn, error) {
	adm := kadm.NewClient(cl)
	var done []Txn
	var errs []error
	for _, t := range txns {
		if t.Decision == Refuse {
			continue
		}
		set := kadm.TopicsSet{}
		set.Add(t.Topic, t.Partition)
		resps, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{
			ProducerID: t.ProducerID, ProducerEpoch: t.MarkerEpoch, Commit: t.Decision == Commit,
			CoordinatorEpoch: t.CoordinatorEpoch, Topics: set,
		})
		resps.EachPartition(func(r kadm.TxnMarkersPartitionResponse) {
			if r.Err != nil && err == nil {
				err = r.Err
			}
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: writing the %s marker of producer %d epoch %d: %w", t.Topic, t.Partition, t.Decision, t.ProducerID, t.MarkerEpoch, err))
			continue
		}
		done = append(done, t)
	}
	// A marker is acknowledged once written; the partition's open
	// transaction must be gone.
	left, err := stillOpen(ctx, adm, slices.Clone(done))
	if err != nil {
		errs = append(errs, fmt.Errorf("checking the repairs: %w", err))
	}
	for _, t := range left {
		errs = append(errs, fmt.Errorf("%s[%d]: still open after its %s marker", t.Topic, t.Partition, t.Decision))
		done = slices.DeleteFunc(done, func(d Txn) bool { return d.Topic == t.Topic && d.Partition == t.Partition })
	}
	if len(errs) > 0 {
		return done, fmt.Errorf("hanging: repair: %w", errors.Join(errs...))
	}
	return done, nil
}
