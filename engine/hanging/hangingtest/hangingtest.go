// Package hangingtest makes hanging transactions on a real broker, for
// tests: records written in a transaction whose coordinator never ends it on
// their partition.
//
// Records reach a partition outside their producer's transaction the way
// brokers before 3.6 let them: with transaction.partition.verification
// off (a dynamic setting, which [VerificationOff] restores when the test
// ends), a producer of transaction version 1 writes to a partition it never
// added. Its coordinator then ends the transaction without a marker there,
// as it does for the partitions whose markers it drops. Producers of
// transaction version 2 (franz-go's, on Kafka 4) are verified whatever the
// setting, so other tests on the broker are not affected.
package hangingtest

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/oxbow-dev/oxbow/internal/await"
)

// Client is a client whose requests speak Kafka 3.5's protocol, for
// [Init]: transactions of version 1.
func Client(brokers []string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxVersions(kversion.V3_5_0()))
}

// VerificationOff turns transaction.partition.verification.enable off for
// the cluster until the test ends. Tests that need it off may run at once,
// in one process or in several (go test runs packages side by side): each
// holds a shared lock on a file named for the cluster while it does, and
// the last to end restores the setting, so that none restores it under
// another.
func VerificationOff(ctx context.Context, t testing.TB, adm *kadm.Client) {
	const name = "transaction.partition.verification.enable"
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "oxbow-verification-"+meta.Cluster+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH); err != nil {
		lock.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer lock.Close()
		// Unlocked, then alone (an exclusive lock no other holds): the
		// last user. A test that locks meanwhile sets it off again.
		_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			return
		}
		defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
		_, err := adm.AlterBrokerConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: name}})
		if err != nil {
			t.Errorf("restoring %s: %v", name, err)
		}
	})
	off := "false"
	if _, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: name, Value: &off}}); err != nil {
		t.Fatal(err)
	}
}

// Partition is a topic's partition.
type Partition struct {
	Topic     string
	Partition int32
}

// LeaveOpen leaves a transaction open on left that its coordinator ended:
// a producer with txnID writes value to added, which is in its
// transaction, and to left, which is not, then commits (or aborts) the
// transaction. Its coordinator writes the marker on added only.
func LeaveOpen(ctx context.Context, t testing.TB, cl *kgo.Client, txnID string, added, left Partition, value string, commit bool) *Producer {
	t.Helper()
	p := Init(ctx, t, cl, txnID, 60_000)
	p.Add(ctx, t, added.Topic, added.Partition)
	p.Produce(ctx, t, added.Topic, added.Partition, value)
	p.Produce(ctx, t, left.Topic, left.Partition, value)
	p.End(ctx, t, commit)
	return p
}

// Ghost leaves a transaction open on a partition that no coordinator
// knows of: a producer without a transactional id writes value there in
// a transaction, naming txnID, which was never initialized.
func Ghost(ctx context.Context, t testing.TB, cl *kgo.Client, txnID string, at Partition, value string) *Producer {
	t.Helper()
	p := Init(ctx, t, cl, "", 0)
	p.TxnID = txnID
	p.Produce(ctx, t, at.Topic, at.Partition, value)
	return p
}

// Producer writes transactional batches with requests of its own, to
// make what a client library never would.
type Producer struct {
	cl *kgo.Client
	// TxnID is the transactional id its requests carry; empty for none.
	TxnID string
	// ID and Epoch are its producer id and epoch.
	ID    int64
	Epoch int16
	seq   map[int32]int32
}

func (p *Producer) txnIDPtr() *string {
	if p.TxnID == "" {
		return nil
	}
	return &p.TxnID
}

// Init has the broker give a producer id and epoch to txnID (none if
// empty), with the transaction timeout given.
func Init(ctx context.Context, t testing.TB, cl *kgo.Client, txnID string, timeoutMillis int32) *Producer {
	t.Helper()
	p := &Producer{cl: cl, TxnID: txnID, seq: map[int32]int32{}}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = p.txnIDPtr()
	req.TransactionTimeoutMillis = timeoutMillis
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID %q: %v", txnID, err)
	}
	p.ID, p.Epoch = resp.ProducerID, resp.ProducerEpoch
	return p
}

// Add adds a partition to the producer's transaction.
func (p *Producer) Add(ctx context.Context, t testing.TB, topic string, partition int32) {
	t.Helper()
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = p.TxnID, p.ID, p.Epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{partition}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p.cl)
	if err == nil {
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if err == nil {
					err = kerr.ErrorForCode(rp.ErrorCode)
				}
			}
		}
	}
	if err != nil {
		t.Fatalf("AddPartitionsToTxn %s[%d]: %v", topic, partition, err)
	}
}

// Produce writes one transactional record, retrying while the broker has
// not yet seen verification turned off.
func (p *Producer) Produce(ctx context.Context, t testing.TB, topic string, partition int32, value string) {
	t.Helper()
	batch := p.batch(value, p.seq[partition])
	await.NoError(t, 30*time.Second, fmt.Sprintf("a transactional write to %s[%d]", topic, partition), func() error {
		req := kmsg.NewPtrProduceRequest()
		req.TransactionID = &p.TxnID
		req.Acks, req.TimeoutMillis = -1, 10_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = partition, batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, p.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	})
	p.seq[partition]++
}

// batch is a record batch of one transactional record, value as key and
// value.
func (p *Producer) batch(value string, seq int32) []byte {
	var rec []byte
	rec = append(rec, 0)             // attributes
	rec = kbin.AppendVarlong(rec, 0) // timestamp delta
	rec = kbin.AppendVarint(rec, 0)  // offset delta
	rec = kbin.AppendVarintBytes(rec, []byte(value))
	rec = kbin.AppendVarintBytes(rec, []byte(value))
	rec = kbin.AppendVarint(rec, 0) // headers
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, // transactional
		FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: p.ID, ProducerEpoch: p.Epoch, FirstSequence: seq, NumRecords: 1,
		Records: kbin.AppendVarint(nil, int32(len(rec))),
	}
	b.Records = append(b.Records, rec...)
	out := b.AppendTo(nil)
	kbin.AppendInt32(out[8:8], int32(len(out)-12))
	kbin.AppendInt32(out[17:17], int32(crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli))))
	return out
}

// AddOffsets adds group's offsets to the producer's transaction, as a
// transactional consumer does before it commits them: the transaction's
// end then writes a marker on the group's partition of __consumer_offsets.
func (p *Producer) AddOffsets(ctx context.Context, t testing.TB, group string) {
	t.Helper()
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = p.TxnID, p.ID, p.Epoch, group
	resp, err := req.RequestWith(ctx, p.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("AddOffsetsToTxn %s: %v", group, err)
	}
}

// CommitOffset commits, in the producer's transaction, group's offset of
// a partition. Until the transaction ends, the group's offsets are
// unstable (UNSTABLE_OFFSET_COMMIT) for every consumer that asks for
// stable ones. Without AddOffsets first, its coordinator ends the
// transaction without a marker on the group's partition of
// __consumer_offsets, and they stay so.
func (p *Producer) CommitOffset(ctx context.Context, t testing.TB, group, topic string, partition int32, offset int64) {
	t.Helper()
	await.NoError(t, 30*time.Second, fmt.Sprintf("a transactional offset commit of %s", group), func() error {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = p.TxnID, group, p.ID, p.Epoch
		req.Generation = -1
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = partition, offset, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, p.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	})
}

// End ends the producer's transaction: commit or abort.
func (p *Producer) End(ctx context.Context, t testing.TB, commit bool) {
	t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = p.TxnID, p.ID, p.Epoch, commit
	resp, err := req.RequestWith(ctx, p.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("EndTxn %s: %v", p.TxnID, err)
	}
}

// AbortOn ends the producer's transaction on a partition with an ABORT
// marker of its own.
func (p *Producer) AbortOn(ctx context.Context, t testing.TB, topic string, partition int32) {
	set := kadm.TopicsSet{}
	set.Add(topic, partition)
	_, err := kadm.NewClient(p.cl).WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: p.ID, ProducerEpoch: p.Epoch, Topics: set})
	if err != nil {
		t.Logf("ending the test's own transaction on %s[%d]: %v", topic, partition, err)
	}
}
