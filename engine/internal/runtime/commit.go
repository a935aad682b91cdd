package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitLocked commits every task (at least once; commitEOS for exactly
// once): caches flushed, every produced record
// acknowledged, input offsets committed, and only then local state applied
// with the changelog offsets it corresponds to. The caller holds r.mu and no
// worker is running.
func (r *Runtime) commitLocked(ctx context.Context) error {
	if r.cfg.ExactlyOnce {
		return r.commitEOS(ctx)
	}
	start := time.Now()
	r.lastCommit, r.uncommitted = r.cfg.Now(), false
	// Round 0 sends what the tasks processed; round 1, if a processor has
	// a before-commit hook, what the hooks send once round 0's records
	// have their offsets.
	for round := 0; round < 2; round++ {
		if round == 1 {
			hooked := r.hookedTasks()
			if len(hooked) == 0 {
				break
			}
			if err := r.onWorkers(hooked, func(t *rtask) error { return t.t.BeforeCommit() }); err != nil {
				r.discardAll()
				return err
			}
		}
		var flush []*rtask
		for _, t := range r.tasks {
			if !t.restoring && t.t.Pending() > 0 {
				flush = append(flush, t)
			}
		}
		// A failed flush leaves updates neither written nor forwarded: no
		// policy can skip that and commit.
		if err := r.onWorkers(flush, func(t *rtask) error {
			if err := t.t.Flush(); err != nil {
				return fmt.Errorf("engine: task %s: flush the record cache: %w", t.id, err)
			}
			return nil
		}); err != nil {
			r.discardAll()
			return err
		}
		if round == 1 || len(r.hookedTasks()) == 0 {
			r.sendMarkersLocked()
		}
		if err := r.flushProduced(ctx); err != nil {
			r.discardAll()
			return err
		}
		for _, t := range r.tasks {
			t.out.inflight.Wait()
			if err, internal := t.out.takeErr(); err != nil {
				if r.cfg.OnProduceError != Skip || internal {
					// Nothing of this interval is committed: the inputs are
					// processed again after the restart.
					r.discardAll()
					return err
				}
				r.log.Warn("skipped records that could not be produced", "task", t.id.String(), "err", err)
				r.m.dropped(ctx, "produce")
			}
		}
	}

	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, t := range r.tasks {
		for tp, q := range t.queues {
			if q.consumed < 0 {
				continue
			}
			if offsets[tp.topic] == nil {
				offsets[tp.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: q.consumed}
		}
	}
	if len(offsets) > 0 {
		var cerr error
		times := r.commitTimes()
		r.cl.CommitOffsetsSync(withStreamTimes(ctx, times), offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
						cerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err)
					}
				}
			}
		})
		if cerr != nil {
			// The group moved on without us (a rebalance or a session
			// timeout): another member may own the tasks now. Drop the
			// uncommitted state and rejoin; the tasks that come back restore
			// their changelog tail, and the inputs are read again from the
			// committed offsets.
			r.log.Warn("offset commit failed; closing tasks and rejoining", "err", cerr)
			r.discardAll()
			r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
			r.cl.ForceRebalance()
			if errors.Is(cerr, context.Canceled) {
				return cerr
			}
			return nil
		}
		r.times.set(times)
		r.committedLocked()
		r.recovered()
	}
	if err := r.applyStateLocked(); err != nil {
		return err
	}
	r.purgeLocked(ctx)
	r.m.commit(ctx, time.Since(start))
	return nil
}

// flushTimeout bounds the wait for Kafka to acknowledge what a commit
// produced (Kafka Streams' delivery.timeout.ms).
const flushTimeout = 2 * time.Minute

// hookedTasks are the active tasks with before-commit hooks.
func (r *Runtime) hookedTasks() []*rtask {
	var out []*rtask
	for _, t := range r.tasks {
		if !t.restoring && t.t.HasCommitHooks() {
			out = append(out, t)
		}
	}
	return out
}

func (r *Runtime) discardAll() {
	for _, t := range r.tasks {
		t.discard()
	}
}
