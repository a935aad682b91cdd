package hanging

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Readable reports whether a read-committed reader at offset from of a
// topic's partition has a record to read below offset to: a committed
// record, not a transaction's marker or an aborted record. A group's
// committed offset can stay below the partition's end with nothing left
// to read (the marker of the last transaction, or an aborted tail): then
// nothing waits there, whereas records that can be read, and are not,
// wait on something. It reads at most a few fetches' worth; beyond that
// it answers true.
func Readable(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, to int64) (bool, error) {
	if from >= to {
		return false, nil
	}
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("hanging: %s's metadata: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return false, fmt.Errorf("hanging: %s's metadata: %v", topic, td.Err)
	}
	pd, ok := td.Partitions[partition]
	if !ok || pd.Err != nil {
		return false, fmt.Errorf("hanging: %s[%d]'s metadata: %v", topic, partition, pd.Err)
	}
	const fetches = 8
	for offset, i := from, 0; offset < to; i++ {
		if i == fetches {
			return true, nil
		}
		fp, err := fetch(ctx, cl, td, pd, offset, 1<<20, true)
		if err != nil {
			return false, err
		}
		got, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: offset, Topic: topic, Partition: partition, IsolationLevel: kgo.ReadCommitted()},
			fp, kgo.DefaultDecompressor(), nil)
		if got.Err != nil {
			return false, fmt.Errorf("hanging: reading %s[%d] at %d: %w", topic, partition, offset, got.Err)
		}
		for _, r := range got.Records {
			if r.Offset >= from && r.Offset < to {
				return true, nil
			}
		}
		next := batchesEnd(fp.RecordBatches)
		switch {
		case next > offset:
			offset = next
		case fp.LogStartOffset > offset:
			offset = fp.LogStartOffset // deleted under the reader
		default:
			return false, nil // nothing more below the last stable offset
		}
	}
	return false, nil
}

// batchesEnd is the offset after the last whole record batch in raw (-1
// if it holds none).
func batchesEnd(raw []byte) int64 {
	end := int64(-1)
	for len(raw) >= 61 {
		base := int64(binary.BigEndian.Uint64(raw))
		size := 12 + int(int32(binary.BigEndian.Uint32(raw[8:])))
		if size < 61 || size > len(raw) {
			break
		}
		lastDelta := int64(int32(binary.BigEndian.Uint32(raw[23:])))
		end = max(end, base+lastDelta+1)
		raw = raw[size:]
	}
	return end
}

// fetch fetches the partition pd of topic td from offset, from its leader.
func fetch(ctx context.Context, cl *kgo.Client, td kadm.TopicDetail, pd kadm.PartitionDetail, offset int64, maxBytes int32, committed bool) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxBytes = maxBytes
	if committed {
		req.IsolationLevel = 1
	}
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = td.Topic, td.ID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = pd.Partition, offset, maxBytes, pd.LeaderEpoch
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctx, cl.Broker(int(pd.Leader)))
	if err == nil && (len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1) {
		err = errors.New("a fetch response without the partition asked for")
	}
	if err != nil {
		return nil, fmt.Errorf("hanging: reading %s[%d] at %d: %w", td.Topic, pd.Partition, offset, err)
	}
	return &resp.Topics[0].Partitions[0], nil
}
