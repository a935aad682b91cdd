package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// restorer brings the stores of newly assigned tasks up to the end of their
// changelogs before the tasks process anything. It reads only the tail after
// the local checkpoint, or everything when there is no usable checkpoint
// (no local state, an in-memory store, or a checkpoint older than the
// changelog's log start).
type restorer struct {
	r     *Runtime
	base  []kgo.Opt
	cl    *kgo.Client
	jobs  map[topicPartition]*restoreJob
	total atomic.Int64 // records restored since the instance started
	last  time.Time    // last progress log
}

type restoreJob struct {
	t         *rtask
	store     string
	partition int32
	from, end int64
	pos       int64
	rs        *state.Restorer // persistent stores
	mem       *topo.MemStore  // in-memory stores
	count     int64
	started   time.Time
}

func newRestorer(r *Runtime, base []kgo.Opt) *restorer {
	return &restorer{r: r, base: base, jobs: map[topicPartition]*restoreJob{}}
}

// Restored is the number of changelog records restored since the instance
// started.
func (r *Runtime) Restored() int64 { return r.restorer.total.Load() }

// add plans the restoration of a task's logged stores.
func (rs *restorer) add(t *rtask, mem map[string]*topo.MemStore) error {
	if len(t.logged) == 0 {
		return nil
	}
	r := rs.r
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var topics []string
	for _, l := range t.logged {
		topics = append(topics, l.changelog)
	}
	starts, ends, err := listOffsets(ctx, r.adm, topics, t.id.Partition)
	if err != nil {
		return fmt.Errorf("engine: task %s: changelog offsets: %w", t.id, err)
	}
	add := map[string]map[int32]kgo.Offset{}
	p := t.id.Partition
	for _, l := range t.logged {
		so, ok1 := starts.Lookup(l.changelog, p)
		eo, ok2 := ends.Lookup(l.changelog, p)
		if !ok1 || !ok2 || so.Err != nil || eo.Err != nil {
			return fmt.Errorf("engine: task %s: changelog %s[%d] offsets: %w", t.id, l.changelog, p, errors.Join(so.Err, eo.Err))
		}
		job := &restoreJob{t: t, store: l.store, partition: p, end: eo.Offset, started: time.Now()}
		if l.inMemory {
			job.mem = mem[l.store]
			job.from = so.Offset
		} else {
			ckpt, has, err := r.db.Checkpoint(l.changelog, p)
			if err != nil {
				return err
			}
			if !has || ckpt < so.Offset || ckpt > eo.Offset {
				// No usable checkpoint: whatever is local is of unknown
				// position (older than what the changelog still has, or
				// ahead of a changelog that was deleted and recreated);
				// start over from the log start.
				if has {
					r.log.Info("local checkpoint outside the changelog; restoring from the start", "store", l.store, "partition", p, "checkpoint", ckpt, "logStart", so.Offset, "logEnd", eo.Offset)
				}
				if err := r.db.Wipe(l.store, p); err != nil {
					return err
				}
				ckpt = so.Offset
			}
			job.from = ckpt
			if job.from < job.end {
				if job.rs, err = r.db.Restorer(l.store, p); err != nil {
					return err
				}
			}
		}
		if job.from >= job.end {
			continue
		}
		job.pos = job.from
		tp := topicPartition{l.changelog, p}
		rs.jobs[tp] = job
		if add[l.changelog] == nil {
			add[l.changelog] = map[int32]kgo.Offset{}
		}
		add[l.changelog][p] = kgo.NewOffset().At(job.from)
		t.restoring = true
		r.log.Info("restoring", "task", t.id.String(), "store", l.store, "partition", p, "from", job.from, "to", job.end)
	}
	if len(add) == 0 {
		return nil
	}
	if rs.cl == nil {
		cl, err := kgo.NewClient(append(rs.base, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
		if err != nil {
			return fmt.Errorf("engine: restore client: %w", err)
		}
		rs.cl = cl
	}
	rs.cl.AddConsumePartitions(add)
	return nil
}

// remove abandons the restoration of a task's stores (it was revoked); what
// was restored so far is committed, so the next attempt resumes there.
func (rs *restorer) remove(t *rtask) {
	drop := map[string][]int32{}
	for tp, j := range rs.jobs {
		if j.t != t {
			continue
		}
		if j.rs != nil {
			if err := j.rs.Close(); err != nil {
				rs.r.log.Warn("close restorer", "store", j.store, "err", err)
			}
		}
		delete(rs.jobs, tp)
		drop[tp.topic] = append(drop[tp.topic], tp.partition)
	}
	if len(drop) > 0 && rs.cl != nil {
		rs.cl.RemoveConsumePartitions(drop)
	}
}

// step restores for a bounded time, so the loop stays responsive to
// rebalances.
func (rs *restorer) step(ctx context.Context) error {
	if len(rs.jobs) == 0 {
		return nil
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	for len(rs.jobs) > 0 && time.Now().Before(deadline) {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		fetches := rs.cl.PollRecords(pctx, 10000)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := rs.r.fetchErrors(fetches, "restore"); err != nil {
			return err
		}
		var apply error
		fetches.EachRecord(func(rec *kgo.Record) {
			j := rs.jobs[topicPartition{rec.Topic, rec.Partition}]
			if j == nil || apply != nil || rec.Offset < j.pos {
				return
			}
			if rec.Attrs.IsControl() {
				// A transaction marker: it takes an offset, so the
				// position moves past it, but it is no state.
				j.pos = rec.Offset + 1
				return
			}
			apply = j.apply(rec)
			rs.total.Add(1)
			rs.r.m.restored(ctx, 1)
		})
		if apply != nil {
			return apply
		}
		if err := rs.finishDone(); err != nil {
			return err
		}
	}
	rs.progress()
	return nil
}

func (j *restoreJob) apply(rec *kgo.Record) error {
	j.pos = rec.Offset + 1
	j.count++
	ts := rec.Timestamp.UnixMilli()
	if j.mem != nil {
		if rec.Value == nil {
			return j.mem.Delete(rec.Key, ts)
		}
		return j.mem.Put(rec.Key, rec.Value, ts)
	}
	return j.rs.Apply(rec.Offset, rec.Key, rec.Value, ts)
}

// finishDone completes the jobs that reached their end offset.
func (rs *restorer) finishDone() error {
	drop := map[string][]int32{}
	for tp, j := range rs.jobs {
		if j.pos < j.end {
			continue
		}
		if j.rs != nil {
			err := j.rs.Flush(j.pos)
			if cerr := j.rs.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("engine: task %s: restore store %s: %w", j.t.id, j.store, err)
			}
		}
		delete(rs.jobs, tp)
		drop[tp.topic] = append(drop[tp.topic], tp.partition)
		el := time.Since(j.started)
		rs.r.log.Info("restored", "task", j.t.id.String(), "store", j.store, "partition", j.partition, "records", j.count, "took", el.Round(time.Millisecond))
		still := false
		for _, o := range rs.jobs {
			still = still || o.t == j.t
		}
		if !still {
			j.t.restoring = false
		}
	}
	if len(drop) > 0 {
		rs.cl.RemoveConsumePartitions(drop)
	}
	return nil
}

// progress logs, at most once a second, how the restoration goes.
func (rs *restorer) progress() {
	if len(rs.jobs) == 0 || time.Since(rs.last) < time.Second {
		return
	}
	rs.last = time.Now()
	var done, left int64
	var started time.Time
	for _, j := range rs.jobs {
		done += j.count
		left += j.end - j.pos
		if started.IsZero() || j.started.Before(started) {
			started = j.started
		}
	}
	rate := float64(done) / max(time.Since(started).Seconds(), 1e-3)
	eta := time.Duration(0)
	if rate > 0 {
		eta = time.Duration(float64(left) / rate * float64(time.Second))
	}
	rs.r.log.Info("restore progress", "partitions", len(rs.jobs), "records", done, "remaining", left, "recordsPerSecond", int64(rate), "eta", eta.Round(time.Second))
	rs.r.m.restoreRemaining.Store(left)
}

func (rs *restorer) close() {
	for _, j := range rs.jobs {
		if j.rs != nil {
			_ = j.rs.Close()
		}
	}
	rs.jobs = map[topicPartition]*restoreJob{}
	if rs.cl != nil {
		rs.cl.Close()
	}
}

// listOffsets lists the start and end (last stable) offsets of one
// partition of each topic, retrying while a topic just created is not in the metadata yet.
func listOffsets(ctx context.Context, adm *kadm.Client, topics []string, p int32) (starts, ends kadm.ListedOffsets, err error) {
	for {
		starts, err = adm.ListStartOffsets(ctx, topics...)
		if err == nil {
			// The last stable offset: a read-committed reader gets no
			// further while a transaction is open.
			ends, err = adm.ListCommittedOffsets(ctx, topics...)
		}
		missing := err != nil
		if err == nil {
			for _, topic := range topics {
				so, ok1 := starts.Lookup(topic, p)
				eo, ok2 := ends.Lookup(topic, p)
				if !ok1 || !ok2 || so.Err != nil || eo.Err != nil {
					missing = true
					err = fmt.Errorf("%s[%d]: %w", topic, p, errors.Join(so.Err, eo.Err, errIf(!ok1 || !ok2, "no offsets listed")))
				}
			}
		}
		if !missing {
			return starts, ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func errIf(cond bool, msg string) error {
	if cond {
		return errors.New(msg)
	}
	return nil
}
