package hanging

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupOffsets asks a consumer group's coordinator for the group's
// offsets of the partitions in set as a read-committed consumer does,
// requiring stable offsets. It returns the committed offset of each
// partition that has one, and the partitions the coordinator answers
// UNSTABLE_OFFSET_COMMIT for: there a transaction committed an offset
// that waits for its marker, and no member of the group can start on the
// partition until the marker comes (franz-go retries such a fetch without
// end). A fetch of all the group's offsets, as kadm's, names only the
// committed ones, not those a transaction holds.
func GroupOffsets(ctx context.Context, cl *kgo.Client, group string, set kadm.TopicsSet) (committed kadm.Offsets, unstable kadm.TopicsSet, err error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = group, true
	for topic, ps := range set {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		for p := range ps {
			rt.Partitions = append(rt.Partitions, p)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("hanging: the offsets of group %s: %w", group, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, nil, fmt.Errorf("hanging: the offsets of group %s: %w", group, err)
	}
	committed, unstable = kadm.Offsets{}, kadm.TopicsSet{}
	note := func(topic string, partition int32, offset int64, epoch int32, code int16) {
		switch err := kerr.ErrorForCode(code); {
		case err == nil && offset >= 0:
			committed.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset, LeaderEpoch: epoch})
		case errors.Is(err, kerr.UnstableOffsetCommit):
			unstable.Add(topic, partition)
		}
	}
	for _, t := range resp.Topics { // up to v7
		for _, p := range t.Partitions {
			note(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode)
		}
	}
	for _, g := range resp.Groups { // v8 on
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return nil, nil, fmt.Errorf("hanging: the offsets of group %s: %w", group, err)
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				note(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode)
			}
		}
	}
	return committed, unstable, nil
}
