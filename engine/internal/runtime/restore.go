package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
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
//
// It also keeps the standby tasks: warm copies of other instances' tasks,
// whose persistent stores follow their changelogs for as long as the
// assignment says so, with their checkpoints, so that the balancer can
// move a task to an instance that has its state and its restore reads
// only the little the standby had not yet applied.
type restorer struct {
	r          *Runtime
	base       []kgo.Opt
	cl         *kgo.Client
	jobs       map[topicPartition]*restoreJob
	settling   map[*rtask]*settling // tasks whose changelog offsets are asked for off the loop
	wg         sync.WaitGroup       // the settling goroutines
	total      atomic.Int64         // records restored since the instance started (active tasks)
	standbyN   atomic.Int64         // records standby tasks applied
	standbys   map[topo.TaskID]bool
	standbyLag atomic.Pointer[map[string]int64] // task -> records behind, as of the last round
	// warming: standby tasks that started more than the acceptable
	// recovery lag behind; when one catches up, the instance asks for a
	// probing rebalance (see probeIfCaughtUp).
	warming   map[topo.TaskID]bool
	last      time.Time // last progress log
	lastFlush time.Time // last standby checkpoint
	// list is every active task's restoration, as of the last fetch
	// applied (Restoring).
	list atomic.Pointer[[]RestoreProgress]
}

// RestoreProgress is how far the restoration of one store of a task has
// come.
type RestoreProgress struct {
	Task      string
	Store     string
	Restored  int64 // records applied so far
	Remaining int64 // records up to the changelog's end as the restore began
	Started   time.Time
}

type restoreJob struct {
	// standby: the job of a standby task; it never ends. t is nil, task
	// names the task.
	standby   bool
	task      topo.TaskID
	hwm       int64 // the changelog's high watermark at the last fetch
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
	return &restorer{r: r, base: base, jobs: map[topicPartition]*restoreJob{}, settling: map[*rtask]*settling{}, standbys: map[topo.TaskID]bool{}, warming: map[topo.TaskID]bool{}}
}

// Restored is the number of changelog records restored since the instance
// started.
func (r *Runtime) Restored() int64 { return r.restorer.total.Load() }

// Restoring lists the stores of active tasks being restored, by task and
// store, as of the end of the restorer's last step. Safe from any
// goroutine.
func (r *Runtime) Restoring() []RestoreProgress {
	if p := r.restorer.list.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// add plans the restoration of a task's logged stores. Under exactly-once
// a changelog may hold an open transaction (a crashed or cut-off owner's,
// until the broker aborts it: up to its transaction timeout and the
// broker's check interval, 20s at Kafka's defaults) or markers still in
// flight (settledOnce): the task then waits, restoring, while the
// offsets are asked again off the loop, and the instance's other tasks go
// on. (The wait held the whole loop once, silently, with the instance's
// own transaction open, which the broker aborted when the wait outlived
// its timeout.)
func (rs *restorer) add(t *rtask, mem map[string]*topo.MemStore) error {
	if len(t.logged) == 0 {
		return nil
	}
	var topics []string
	for _, l := range t.logged {
		topics = append(topics, l.changelog)
	}
	p := t.id.Partition
	list := func(ctx context.Context) (starts, ends kadm.ListedOffsets, err error) {
		if rs.r.cfg.ExactlyOnce {
			return settledOnce(ctx, rs.r.adm, topics, p)
		}
		return listOnce(ctx, rs.r.adm, topics, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	starts, ends, err := list(ctx)
	cancel()
	if err == nil {
		return rs.start(t, mem, starts, ends)
	}
	t.restoring = true
	why := err
	w := &settling{mem: mem, done: make(chan settled, 1)}
	// Kafka's absence counts too: the wait lasts as long as TaskTimeout
	// lets (a transaction left open by a broker's restart took longer
	// than 30s to be aborted once, under -race).
	ctx, w.cancel = context.WithTimeout(context.Background(), max(30*time.Second, rs.r.cfg.TransactionTimeout+10*time.Second, rs.r.cfg.TaskTimeout))
	rs.settling[t] = w
	rs.wg.Go(func() {
		defer w.cancel()
		started, told := time.Now(), time.Duration(0)
		for {
			select {
			case <-ctx.Done():
				w.done <- settled{err: fmt.Errorf("engine: task %s: changelog offsets: %w", t.id, why)}
				return
			case <-time.After(20 * time.Millisecond):
			}
			starts, ends, err := list(ctx)
			if err == nil {
				w.done <- settled{starts: starts, ends: ends}
				return
			}
			why = err
			// Say what the task waits for, once a second has passed and
			// again at each doubling; at WARN past waitBound.
			if waited := time.Since(started); waited >= max(time.Second, 2*told) && ctx.Err() == nil {
				told = waited
				level := slog.LevelInfo
				if waited >= waitBound {
					level = slog.LevelWarn
				}
				rs.r.log.Log(ctx, level, "waiting to restore", "task", t.id.String(), "waited", waited.Round(time.Millisecond), "for", why)
			}
		}
	})
	return nil
}

// listTimeout bounds the first listing of a task's changelog offsets on
// the loop; past it, the listing goes on off the loop.
const listTimeout = 5 * time.Second

// settling is a task waiting for its changelogs' offsets (see add).
type settling struct {
	mem    map[string]*topo.MemStore
	done   chan settled // one result, buffered
	cancel context.CancelFunc
}

type settled struct {
	starts, ends kadm.ListedOffsets
	err          error
}

// startSettled starts the restorations of the tasks whose changelog
// offsets have come, without waiting for the others.
func (rs *restorer) startSettled() error {
	for t, w := range rs.settling {
		select {
		case res := <-w.done:
			delete(rs.settling, t)
			if res.err != nil {
				return res.err
			}
			if err := rs.start(t, w.mem, res.starts, res.ends); err != nil {
				return err
			}
		default:
		}
	}
	return nil
}

// start restores a task's stores from their checkpoints (or from the log
// start) to the ends listed.
func (rs *restorer) start(t *rtask, mem map[string]*topo.MemStore, starts, ends kadm.ListedOffsets) error {
	r := rs.r
	t.restoring = false
	add := map[string]map[int32]kgo.Offset{}
	p := t.id.Partition
	for _, l := range t.logged {
		so, ok1 := starts.Lookup(l.changelog, p)
		eo, ok2 := ends.Lookup(l.changelog, p)
		if !ok1 || !ok2 || so.Err != nil || eo.Err != nil {
			return fmt.Errorf("engine: task %s: changelog %s[%d] offsets: %w", t.id, l.changelog, p, errors.Join(so.Err, eo.Err))
		}
		job := &restoreJob{t: t, task: t.id, store: l.store, partition: p, end: eo.Offset, started: time.Now()}
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
	return rs.consume(add)
}

func (rs *restorer) consume(add map[string]map[int32]kgo.Offset) error {
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

// syncStandbys starts the standby tasks of the current assignment and
// stops the others (those that became active first: their restores must
// start from what the standby applied).
func (rs *restorer) syncStandbys(want []topo.TaskID) error {
	keep := map[topo.TaskID]bool{}
	for _, id := range want {
		keep[id] = true
	}
	for id := range rs.standbys {
		if !keep[id] {
			rs.stopStandby(id)
		}
	}
	for _, id := range want {
		if rs.standbys[id] {
			continue
		}
		if err := rs.startStandby(id); err != nil {
			return err
		}
	}
	return nil
}

// startStandby follows the changelogs of a task's persistent stores from
// their local checkpoints. (In-memory stores keep no standby: their copy
// would not survive the process that a standby is there to outlive.)
func (rs *restorer) startStandby(id topo.TaskID) error {
	r := rs.r
	var sub *topo.SubTopology
	for _, s := range r.topo.Subs {
		if s.ID == id.Sub {
			sub = s
		}
	}
	if sub == nil {
		return fmt.Errorf("engine: standby task %s of an unknown sub-topology", id)
	}
	rs.standbys[id] = true
	var stores []string
	var topics []string
	for _, spec := range sub.Stores {
		if spec.Logged && !spec.InMemory && !spec.Global {
			stores = append(stores, spec.Name)
			topics = append(topics, r.plan.name(topo.TopicRef{Name: topo.ChangelogTopic(spec.Name), Internal: true}))
		}
	}
	if len(topics) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	starts, ends, err := listOffsets(ctx, r.adm, topics, id.Partition)
	if err != nil {
		return fmt.Errorf("engine: standby task %s: changelog offsets: %w", id, err)
	}
	add := map[string]map[int32]kgo.Offset{}
	p := id.Partition
	var behind int64
	for i, topic := range topics {
		so, _ := starts.Lookup(topic, p)
		eo, _ := ends.Lookup(topic, p)
		ckpt, has, err := r.db.Checkpoint(topic, p)
		if err != nil {
			return err
		}
		if !has || ckpt < so.Offset || ckpt > eo.Offset {
			if err := r.db.Wipe(stores[i], p); err != nil {
				return err
			}
			ckpt = so.Offset
		}
		job := &restoreJob{standby: true, task: id, store: stores[i], partition: p, from: ckpt, pos: ckpt, end: math.MaxInt64, hwm: eo.Offset, started: time.Now()}
		if job.rs, err = r.db.Restorer(stores[i], p); err != nil {
			return err
		}
		rs.jobs[topicPartition{topic, p}] = job
		add[topic] = map[int32]kgo.Offset{p: kgo.NewOffset().At(ckpt)}
		behind += max(eo.Offset-ckpt, 0)
		r.log.Info("standby", "task", id.String(), "store", stores[i], "from", ckpt, "end", eo.Offset)
	}
	if behind > r.cfg.AcceptableLag {
		rs.warming[id] = true
	}
	return rs.consume(add)
}

// probeIfCaughtUp asks for a rebalance when a standby task that started
// behind is now within the acceptable recovery lag, and the group runs
// warm-ups: the standby may be a warm-up replica of a task the plan has for
// this instance, which the leader moves here once it sees the state has
// caught up (Kafka Streams' probing rebalance, which its leader schedules
// every probing.rebalance.interval.ms; here the instance that has caught up
// asks, at once). A standby that is only a standby costs one rebalance
// that moves nothing.
func (rs *restorer) probeIfCaughtUp(lag map[string]int64) {
	probe := false
	for id := range rs.warming {
		if lag[id.String()] <= rs.r.cfg.AcceptableLag {
			delete(rs.warming, id)
			probe = true
			rs.r.log.Info("standby caught up", "task", id.String(), "lag", lag[id.String()])
		}
	}
	if probe && rs.r.balancer.Current().Warmups && rs.r.cl != nil {
		rs.r.log.Info("asking for a probing rebalance: a warm-up may have caught up")
		rs.r.cl.ForceRebalance()
	}
}

// stopStandby checkpoints what a standby task applied and stops it.
func (rs *restorer) stopStandby(id topo.TaskID) {
	delete(rs.standbys, id)
	delete(rs.warming, id)
	if p := rs.standbyLag.Load(); p != nil {
		// Stale queries stop reading it at once.
		lag := maps.Clone(*p)
		delete(lag, id.String())
		rs.standbyLag.Store(&lag)
	}
	drop := map[string][]int32{}
	for tp, j := range rs.jobs {
		if !j.standby || j.task != id {
			continue
		}
		if err := errors.Join(j.rs.Flush(j.pos), j.rs.Close()); err != nil {
			rs.r.log.Warn("close standby", "task", id.String(), "store", j.store, "err", err)
		}
		delete(rs.jobs, tp)
		drop[tp.topic] = append(drop[tp.topic], tp.partition)
	}
	if len(drop) > 0 && rs.cl != nil {
		rs.cl.RemoveConsumePartitions(drop)
	}
}

// StandbyLag is, for each standby task of the instance, how many changelog
// records its state is behind (summed over its stores), as of the last
// round.
func (r *Runtime) StandbyLag() map[string]int64 {
	if p := r.restorer.standbyLag.Load(); p != nil {
		return maps.Clone(*p)
	}
	return map[string]int64{}
}

// StandbyRecords is the number of changelog records standby tasks applied
// since the instance started.
func (r *Runtime) StandbyRecords() int64 { return r.restorer.standbyN.Load() }

// remove abandons the restoration of a task's stores (it was revoked); what
// was restored so far is committed (up to the last merge, when the
// Restorer keeps sorted runs), so the next attempt resumes there.
func (rs *restorer) remove(t *rtask) {
	if w := rs.settling[t]; w != nil {
		w.cancel()
		delete(rs.settling, t)
	}
	drop := map[string][]int32{}
	for tp, j := range rs.jobs {
		if j.standby || j.t != t {
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
// rebalances; with only standby tasks to keep, it takes what has arrived
// without waiting.
func (rs *restorer) step(ctx context.Context) error {
	if err := rs.startSettled(); err != nil {
		return err
	}
	if len(rs.jobs) == 0 {
		return nil
	}
	// Restoring active tasks: up to 200ms, waiting for fetches. Standbys
	// only: what the client has buffered, for up to 50ms, never waiting.
	start := time.Now()
	deadline := start.Add(200 * time.Millisecond)
	for {
		restoring := rs.restoring()
		if !restoring {
			deadline = time.Now().Add(time.Millisecond)
		}
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
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			j := rs.jobs[topicPartition{fp.Topic, fp.Partition}]
			if j == nil || apply != nil {
				return
			}
			if fp.HighWatermark > 0 {
				j.hwm = fp.HighWatermark
			}
			var n int64
			for _, rec := range fp.Records {
				if rec.Offset < j.pos {
					continue
				}
				if rec.Attrs.IsControl() {
					// A transaction marker: it takes an offset, so the
					// position moves past it, but it is no state.
					j.pos = rec.Offset + 1
					continue
				}
				if apply = j.apply(rec); apply != nil {
					break
				}
				n++
			}
			if j.standby {
				rs.standbyN.Add(n)
				return
			}
			rs.total.Add(n)
			rs.r.m.restored(ctx, n)
		})
		if apply != nil {
			return apply
		}
		if restoring && !fetches.Empty() {
			rs.publish()
			if h := restoredHook.Load(); h != nil {
				(*h)(rs.r)
			}
		}
		if err := rs.finishDone(); err != nil {
			return err
		}
		if len(rs.jobs) == 0 {
			break
		}
		if restoring && !time.Now().Before(deadline) || !restoring && (fetches.NumRecords() == 0 || time.Since(start) > 50*time.Millisecond) {
			break
		}
	}
	rs.progress()
	return rs.checkpointStandbys()
}

// restoring reports whether some active task is restoring.
func (rs *restorer) restoring() bool {
	for _, j := range rs.jobs {
		if !j.standby {
			return true
		}
	}
	return false
}

// checkpointStandbys commits what the standby tasks applied, at most twice
// a second, and publishes their lag.
func (rs *restorer) checkpointStandbys() error {
	if len(rs.standbys) == 0 || time.Since(rs.lastFlush) < 500*time.Millisecond {
		return nil
	}
	rs.lastFlush = time.Now()
	lag := map[string]int64{}
	for id := range rs.standbys {
		lag[id.String()] = 0
	}
	for _, j := range rs.jobs {
		if !j.standby {
			continue
		}
		if err := j.rs.Flush(j.pos); err != nil {
			return fmt.Errorf("engine: standby task %s: store %s: %w", j.task, j.store, err)
		}
		lag[j.task.String()] += max(j.hwm-j.pos, 0)
	}
	rs.standbyLag.Store(&lag)
	rs.probeIfCaughtUp(lag)
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
		if j.standby || j.pos < j.end {
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
			still = still || !o.standby && o.t == j.t
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

// restoredHook, when set, runs in the loop of every Runtime after it has
// applied records to a restoring task's stores and published its progress.
var restoredHook atomic.Pointer[func(r *Runtime)]

// SetRestoredHook installs fn as the hook every Runtime calls after it has
// applied a fetch of records to restoring active tasks and published
// Restoring (nil removes it). For tests only: it holds a restoration in
// the middle.
func SetRestoredHook(fn func(r *Runtime)) {
	if fn == nil {
		restoredHook.Store(nil)
		return
	}
	restoredHook.Store(&fn)
}

// publish publishes how the restoration goes (Restoring).
func (rs *restorer) publish() {
	var list []RestoreProgress
	for _, j := range rs.jobs {
		if !j.standby {
			list = append(list, RestoreProgress{Task: j.task.String(), Store: j.store, Restored: j.count, Remaining: max(j.end-j.pos, 0), Started: j.started})
		}
	}
	slices.SortFunc(list, func(a, b RestoreProgress) int {
		return cmp.Or(cmp.Compare(a.Task, b.Task), cmp.Compare(a.Store, b.Store))
	})
	if len(list) > 0 || rs.list.Load() != nil {
		rs.list.Store(&list)
	}
}

// progress publishes how the restoration goes, and logs it at most once a
// second.
func (rs *restorer) progress() {
	rs.publish()
	if !rs.restoring() || time.Since(rs.last) < time.Second {
		return
	}
	rs.last = time.Now()
	var done, left int64
	var started time.Time
	for _, j := range rs.jobs {
		if j.standby {
			continue
		}
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
	for t, w := range rs.settling {
		w.cancel()
		delete(rs.settling, t)
	}
	rs.wg.Wait()
	for _, j := range rs.jobs {
		if j.standby {
			_ = j.rs.Flush(j.pos)
		}
		if j.rs != nil {
			_ = j.rs.Close()
		}
	}
	clear(rs.standbys)
	clear(rs.warming)
	rs.jobs = map[topicPartition]*restoreJob{}
	if rs.cl != nil {
		rs.cl.Close()
	}
}

// listOffsets lists the start and end (last stable) offsets of one
// partition of each topic, retrying while a topic just created is not in
// the metadata yet.
func listOffsets(ctx context.Context, adm *kadm.Client, topics []string, p int32) (starts, ends kadm.ListedOffsets, err error) {
	for {
		if starts, ends, err = listOnce(ctx, adm, topics, p); err == nil {
			return starts, ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listOnce lists the start and end (last stable) offsets of one partition
// of each topic, or says why it could not.
func listOnce(ctx context.Context, adm *kadm.Client, topics []string, p int32) (starts, ends kadm.ListedOffsets, err error) {
	starts, err = adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		// The last stable offset: a read-committed reader gets no
		// further while a transaction is open.
		ends, err = adm.ListCommittedOffsets(ctx, topics...)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, topic := range topics {
		so, ok1 := starts.Lookup(topic, p)
		eo, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 || so.Err != nil || eo.Err != nil {
			return nil, nil, fmt.Errorf("%s[%d]: %w", topic, p, errors.Join(so.Err, eo.Err, errIf(!ok1 || !ok2, "no offsets listed")))
		}
	}
	return starts, ends, nil
}

func errIf(cond bool, msg string) error {
	if cond {
		return errors.New(msg)
	}
	return nil
}

// settledOnce is listOnce under exactly-once, for a task about to become
// active: it fails while a transaction is open on a changelog (its last
// stable offset is below its high watermark). Ending a transaction returns
// before its markers are written, so for a moment after a commit the last
// stable offset lags behind records already committed: this instance's
// own, whose checkpoint would then look ahead of the changelog (and the
// state be wiped and restored short), or the previous owner's, whose input
// offsets are already committed. Restoring to that stale end would lose
// the lagging transactions' updates from the state for good, while their
// inputs count as processed (found by the churn campaign with commits
// every 10ms). Nobody else writes a task's changelog once it is ours, so
// the wait is for markers in flight, or for a crashed owner's open
// transaction to be aborted (at most the transaction timeout, and the
// broker's check interval), which the consumer waits for too.
func settledOnce(ctx context.Context, adm *kadm.Client, topics []string, p int32) (starts, lso kadm.ListedOffsets, err error) {
	if starts, lso, err = listOnce(ctx, adm, topics, p); err != nil {
		return nil, nil, err
	}
	hwm, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, err
	}
	for _, topic := range topics {
		h, ok1 := hwm.Lookup(topic, p)
		l, _ := lso.Lookup(topic, p)
		if !ok1 || h.Err != nil {
			return nil, nil, fmt.Errorf("%s[%d]: high watermark: %w", topic, p, errors.Join(h.Err, errIf(!ok1, "not listed")))
		}
		if l.Offset < h.Offset {
			return nil, nil, fmt.Errorf("%s[%d]: a transaction is open (last stable offset %d, high watermark %d)", topic, p, l.Offset, h.Offset)
		}
	}
	return starts, lso, nil
}
