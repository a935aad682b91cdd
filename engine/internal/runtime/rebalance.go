package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// onAssigned creates the tasks of the newly assigned partitions (the
// balancer is cooperative: franz-go passes what was added); their state is
// restored by the loop before they process anything.
func (r *Runtime) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	defer r.joinFollowUp(cl)
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.balancer.Current()
	r.owned = addParts(r.owned, assigned)
	ids := r.tasksOf(r.owned)
	// Standbys first: one that became active must have checkpointed what it
	// applied before the active task plans its restore.
	if err := r.restorer.syncStandbys(cur.Standby); err != nil {
		r.fail(err)
		return
	}
	for id := range ids {
		if r.tasks[id] != nil {
			continue
		}
		if err := r.openTask(id); err != nil {
			r.fail(err)
			return
		}
	}
	r.noteAssignEnds(ctx, ids)
	r.reassigned = true
	r.log.Info("assigned", "generation", cur.Generation, "tasks", taskList(ids))
}

func taskList(ids map[topo.TaskID]bool) []string {
	var s []string
	for id := range ids {
		s = append(s, id.String())
	}
	slices.Sort(s)
	return s
}

// refOf maps a real topic name back to the graph's reference.
func (r *Runtime) refOf(topic string) topo.TopicRef {
	if p := r.cfg.Group + "-"; len(topic) > len(p) && topic[:len(p)] == p {
		ref := topo.TopicRef{Name: topic[len(p):], Internal: true}
		if r.topo.SubFor(ref) != nil {
			return ref
		}
	}
	return topo.TopicRef{Name: topic}
}

func (r *Runtime) openTask(id topo.TaskID) error {
	var sub *topo.SubTopology
	for _, s := range r.topo.Subs {
		if s.ID == id.Sub {
			sub = s
		}
	}
	if sub == nil {
		return fmt.Errorf("engine: assigned task %s of an unknown sub-topology", id)
	}
	t := &rtask{r: r, id: id, sub: sub, queues: map[topicPartition]*partQueue{}}
	t.out = newCollector(r, t)
	t.st = r.db.Task()
	mem := map[string]*topo.MemStore{}
	for _, spec := range sub.Stores {
		if spec.Logged {
			t.logged = append(t.logged, loggedStore{store: spec.Name, changelog: r.plan.name(topo.TopicRef{Name: topo.ChangelogTopic(spec.Name), Internal: true}), inMemory: spec.InMemory})
		}
	}
	var cacheBytes int64
	if r.cfg.CacheBytes > 0 {
		n := int64(len(r.balancer.Current().Active))
		cacheBytes = r.cfg.CacheBytes / max(n, 1)
	}
	// Opening the task runs the processors' Init: user code (a panic in it
	// is a *PanicError).
	task, err := topo.NewTask(topo.TaskConfig{
		ID:        id,
		Topology:  r.topo,
		Sub:       sub,
		TopicName: r.plan.name,
		OpenStore: func(spec *topo.StoreSpec, id topo.TaskID) (topo.KVStore, error) {
			if spec.Global {
				// A global table's store, to read: the global task keeps it
				// (in pebble whatever its options) and commits each update
				// before the tasks process anything.
				return t.st.OpenStore(spec, topo.TaskID{Sub: id.Sub, Partition: globalPartition})
			}
			if spec.InMemory {
				m := topo.NewMemStore(spec.Name)
				mem[spec.Name] = m
				return m, nil
			}
			return t.st.OpenStore(spec, id)
		},
		Collector:     t.out,
		Now:           r.cfg.Now,
		Logger:        r.log,
		CacheBytes:    cacheBytes,
		OnDecodeError: func(in topo.Input, err error) error { return t.onDecodeError(in, err) },
		OnLate: func(reason string) error {
			rec := t.cur
			if !r.cfg.DeadLetterLate || rec == nil {
				return nil
			}
			var hs []topo.Header
			for _, h := range rec.Headers {
				hs = append(hs, topo.Header{Key: h.Key, Value: h.Value})
			}
			return t.deadLetter(rec.Topic, rec.Partition, rec.Offset, rec.Key, rec.Value, rec.Timestamp.UnixMilli(), hs, "late", errors.New(reason))
		},
		OnSkip: func(reason string) {
			// Decode errors are counted where their policy is applied.
			if reason != "decode-error" {
				r.m.dropped(context.Background(), reason)
			}
		},
	})
	if err != nil {
		r.noteIfPanic(err, "task "+id.String())
		t.st.Close()
		return err
	}
	t.t = task
	t.lastPunc = r.cfg.Now()
	for ref := range sub.Sources {
		tp := topicPartition{r.plan.name(ref), id.Partition}
		if task.Source(tp.topic) == nil {
			t.st.Close()
			r.closeTask(task)
			return fmt.Errorf("engine: task %s has no source for topic %s", id, tp.topic)
		}
	}
	for ref := range sub.Sources {
		tp := topicPartition{r.plan.name(ref), id.Partition}
		q := &partQueue{consumed: -1, processed: -1, committedTo: -1, src: task.Source(tp.topic), spanName: "oxbow process " + tp.topic, topicAttr: metric.WithAttributeSet(attribute.NewSet(attribute.String("topic", tp.topic))),
			endAtAssign: -1, tp: tp}
		t.queues[tp] = q
		t.qs = append(t.qs, q)
		r.byPart[tp] = t
	}
	r.tasks[id] = t
	return r.restorer.add(t, mem)
}

// onRevoked commits every task and closes the revoked ones: a cooperative
// rebalance revokes only the tasks that move (all of them when the
// instance leaves, or under the eager protocol), and the others go on.
func (r *Runtime) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owned = removeParts(r.owned, revoked)
	gone := r.tasksOf(revoked)
	if len(r.tasks) == 0 || len(gone) == 0 {
		return
	}
	var ids []topo.TaskID
	for id := range r.tasks {
		if gone[id] {
			ids = append(ids, id)
		}
	}
	if r.fatal != nil || r.State() == Failed {
		// The instance is going down with an error: commit nothing, so the
		// failed interval is processed again after a restart.
		for _, t := range r.tasks {
			t.discard()
		}
		r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.commitLocked(cctx); err != nil {
		r.log.Error("commit on revoke", "err", err)
		r.fail(err)
	}
	r.closeTasksLocked(ids)
	r.log.Info("revoked", "tasks", taskList(gone))
}

// tasksOf lists the tasks of partitions.
func (r *Runtime) tasksOf(parts map[string][]int32) map[topo.TaskID]bool {
	ids := map[topo.TaskID]bool{}
	for topic, ps := range parts {
		sub := r.topo.SubFor(r.refOf(topic))
		if sub == nil {
			continue
		}
		for _, p := range ps {
			ids[topo.TaskID{Sub: sub.ID, Partition: p}] = true
		}
	}
	return ids
}

// addParts returns to with the partitions of add added.
func addParts(to, add map[string][]int32) map[string][]int32 {
	if to == nil {
		to = map[string][]int32{}
	}
	for topic, ps := range add {
		for _, p := range ps {
			if !slices.Contains(to[topic], p) {
				to[topic] = append(to[topic], p)
			}
		}
	}
	return to
}

// removeParts returns from without the partitions of rm.
func removeParts(from, rm map[string][]int32) map[string][]int32 {
	for topic, ps := range rm {
		from[topic] = slices.DeleteFunc(from[topic], func(p int32) bool { return slices.Contains(ps, p) })
		if len(from[topic]) == 0 {
			delete(from, topic)
		}
	}
	return from
}

// onLost drops every task without committing: another member may own them
// already.
func (r *Runtime) onLost(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log.Warn("partitions lost; dropping uncommitted work", "tasks", len(r.tasks))
	r.owned = nil // franz-go loses everything at once
	// Records not sent yet would land after the new owner restored: drop
	// them. (Records already in flight cannot be called back; only
	// exactly-once fences such a zombie completely.)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := r.cl.AbortBufferedRecords(actx); err != nil {
		r.log.Warn("abort buffered records", "err", err)
	}
	cancel()
	var ids []topo.TaskID
	for id, t := range r.tasks {
		t.discard()
		ids = append(ids, id)
	}
	r.closeTasksLocked(ids)
}

func (r *Runtime) closeTasksLocked(ids []topo.TaskID) {
	for _, id := range ids {
		t := r.tasks[id]
		if t == nil {
			continue
		}
		r.restorer.remove(t)
		r.posMu.Lock()
		for tp := range t.queues {
			delete(r.byPart, tp)
			delete(r.positions, tp)
		}
		for _, spec := range t.sub.Stores {
			delete(r.storePos[spec.Name], id.Partition)
		}
		r.posMu.Unlock()
		resume := map[string][]int32{}
		for tp, q := range t.queues {
			if q.paused {
				resume[tp.topic] = append(resume[tp.topic], tp.partition)
			}
		}
		if len(resume) > 0 {
			r.cl.ResumeFetchPartitions(resume)
		}
		if r.skippedClosed == nil {
			r.skippedClosed = map[string]int64{}
		}
		for k, v := range t.skippedAtCommit {
			r.skippedClosed[k] += v
		}
		r.closeTask(t.t)
		t.st.Close()
		delete(r.tasks, id)
	}
}

// closeTask closes a task: its processors' Close (user code) and its
// stores. A processor's Close that panicked fails the instance (its error
// a *PanicError); another error is logged.
func (r *Runtime) closeTask(t *topo.Task) {
	if r.nodesClosed == nil {
		r.nodesClosed = map[string]int64{}
	}
	t.NodeRecords(r.nodesClosed)
	err := t.Close()
	if err == nil {
		return
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		r.notePanic(pe, "task "+t.ID().String()+": closing")
		r.fail(err)
		return
	}
	r.log.Warn("close task", "task", t.ID().String(), "err", err)
}
