package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// batchPoll is how often a batch run looks at the group's commits.
const batchPoll = 200 * time.Millisecond

// runBatch runs the instance until the group has committed the source
// topics' end offsets of the start and then the repartition topics' ends
// of that moment.
func (a *App) runBatch(ctx context.Context) error {
	opts := append([]kgo.Opt{kgo.SeedBrokers(a.cfg.Brokers...)}, a.kopts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("engine: batch: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	sources := a.top.SourceTopics()
	targets, err := endOffsets(ctx, adm, sources)
	if err != nil {
		return err
	}
	var internal []string
	for _, it := range a.top.t.InternalTopics {
		if it.Kind == topo.RepartitionTopic {
			internal = append(internal, a.group+"-"+it.Name)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.rt.Run(rctx) }()
	tick := time.NewTicker(batchPoll)
	defer tick.Stop()
	var internalTargets map[string]map[int32]int64
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		if internalTargets == nil {
			ok, err := committedAll(ctx, adm, opts, a.group, targets)
			if err != nil || !ok {
				continue // the broker may be away a moment; the next tick asks again
			}
			if internalTargets, err = endOffsets(ctx, adm, internal); err != nil {
				internalTargets = nil
				continue
			}
		}
		if ok, err := committedAll(ctx, adm, opts, a.group, internalTargets); err != nil || !ok {
			continue
		}
		a.cfg.Logger.Info("engine: batch done: the inputs are processed up to their ends at the start", "group", a.group)
		cancel()
		return <-done
	}
}

// markerGap bounds the gaps between a commit and an end that noRecords
// looks into.
const markerGap = 64

// noRecords reports whether a partition has no committed records in
// [from, to): what is there is transaction markers (and aborted records).
// It reads the range with the markers kept, which a fetch otherwise
// passes over without a word.
func noRecords(ctx context.Context, opts []kgo.Opt, topic string, partition int32, from, to int64) (bool, error) {
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(fctx)
		if fctx.Err() != nil {
			return false, fctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return false, err
		}
		found, reached := false, false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic != topic || r.Partition != partition || r.Offset >= to {
				reached = true
				return
			}
			if !r.Attrs.IsControl() {
				found = true
			}
			if r.Offset == to-1 {
				reached = true
			}
		})
		if found {
			return false, nil
		}
		if reached {
			return true, nil
		}
	}
}

// endOffsets are the topics' partitions' end offsets.
func endOffsets(ctx context.Context, adm *kadm.Client, topics []string) (map[string]map[int32]int64, error) {
	out := map[string]map[int32]int64{}
	if len(topics) == 0 {
		return out, nil
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("engine: batch: the ends of %v: %w", topics, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, nil
}

// committedAll: the group has committed at least the target of every
// partition (a partition whose target is its start needs no commit).
func committedAll(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, group string, targets map[string]map[int32]int64) (bool, error) {
	if len(targets) == 0 {
		return true, nil
	}
	topics := make([]string, 0, len(targets))
	for t := range targets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil {
		return false, err
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return false, err
	}
	for t, ps := range targets {
		for p, end := range ps {
			at := int64(-1)
			if o, ok := committed.Lookup(t, p); ok && o.Err == nil {
				at = o.At
			}
			if at >= end {
				continue
			}
			if s, ok := starts.Lookup(t, p); ok && s.Err == nil && s.Offset >= end {
				continue // nothing there to read
			}
			// A transactional topic ends with commit markers, which take
			// offsets but are not records: a group that has read every
			// record commits the marker's offset, not the end.
			if at >= 0 && end-at <= markerGap {
				if none, err := noRecords(ctx, opts, t, p, at, end); err == nil && none {
					continue
				}
			}
			return false, nil
		}
	}
	return true, nil
}
