package runtime

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/oxbow-dev/oxbow/engine/internal/assign"
	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/kv"
)

// Instance is an instance of the application, as the group knows it.
type Instance = assign.Instance

// NotLocalError says that a key of a store lives on another instance.
type NotLocalError struct {
	Store string
	Task  topo.TaskID
	Owner Instance // zero when no instance owns the task right now
}

func (e *NotLocalError) Error() string {
	if e.Owner.MemberID == "" {
		return fmt.Sprintf("engine: store %s: task %s has no owner right now (the group is rebalancing)", e.Store, e.Task)
	}
	return fmt.Sprintf("engine: store %s: the key belongs to task %s on instance %s (%s)", e.Store, e.Task, e.Owner.InstanceID, e.Owner.Addr)
}

// ErrNotRunning is returned by queries before the instance has joined its
// group or after it stopped.
var ErrNotRunning = kv.ErrNotRunning

// ErrNotReady is wrapped by queries of a partition whose state is still
// being restored: its answers would be stale.
var ErrNotReady = kv.ErrNotReady

// Owner returns the instance that owns key of store (the serialized key, as
// the producer partitioned it), and whether it is this one.
func (r *Runtime) Owner(store string, key []byte) (Instance, bool, error) {
	sh := r.shared.Load()
	if sh == nil {
		return Instance{}, false, ErrNotRunning
	}
	sub := sh.plan.storeSub[store]
	if sub == nil {
		return Instance{}, false, fmt.Errorf("engine: no store %q", store)
	}
	cur := r.balancer.Current()
	if sub.Global {
		return cur.Self, true, nil
	}
	id, pl, ok := cur.KeyOwner(sub.ID, r.topo.Stores[store].Kind.PartitionKey(key))
	if !ok {
		return Instance{}, false, &NotLocalError{Store: store, Task: id}
	}
	return pl.Active, pl.Active.MemberID == cur.Self.MemberID, nil
}

// Members are the instances of the group's current generation (nil before
// the first assignment).
func (r *Runtime) Members() []Instance {
	return r.balancer.Current().Members
}

// TaskPlacement is where a task runs, and why its standbys are where they
// are (assign.Assignment.Explain).
type TaskPlacement struct {
	Task     topo.TaskID
	Active   Instance
	Standbys []Instance
	Why      string
}

// Placements is every task's placement as of the last rebalance, in task
// order.
func (r *Runtime) Placements() []TaskPlacement {
	cur := r.balancer.Current()
	why := cur.Explain()
	out := make([]TaskPlacement, 0, len(cur.Tasks))
	for t, p := range cur.Tasks {
		out = append(out, TaskPlacement{Task: t, Active: p.Active, Standbys: p.Standbys, Why: why[t]})
	}
	slices.SortFunc(out, func(a, b TaskPlacement) int {
		return cmp.Or(cmp.Compare(a.Task.Sub, b.Task.Sub), cmp.Compare(a.Task.Partition, b.Task.Partition))
	})
	return out
}

// LocalStore returns a read-only view of the committed state of a store on
// this instance; it implements engine.Queryable. A Get for a key another
// instance owns returns a *NotLocalError naming it. Ranges cover the
// partitions this instance owns, merged in key order.
func (r *Runtime) LocalStore(name string) (topo.KVStore, error) {
	return r.localStore(name, -1)
}

// StandbyStore is LocalStore that also reads the partitions this instance
// keeps as standby tasks, when they are at most maxLag changelog records
// behind their active task (as of the standby's last checkpoint, at most
// half a second old): stale reads, for availability while the active
// instance is away.
func (r *Runtime) StandbyStore(name string, maxLag int64) (topo.KVStore, error) {
	if maxLag < 0 {
		return nil, fmt.Errorf("engine: store %s: a maximum lag of %d records; it cannot be negative", name, maxLag)
	}
	return r.localStore(name, maxLag)
}

// standbyOK reports whether this instance keeps task id as a standby at
// most maxLag records behind; maxLag < 0: standbys are not read.
func (r *Runtime) standbyOK(id topo.TaskID, maxLag int64) bool {
	if maxLag < 0 {
		return false
	}
	lag, ok := r.StandbyLag()[id.String()]
	return ok && lag <= maxLag
}

func (r *Runtime) localStore(name string, maxLag int64) (topo.KVStore, error) {
	sh := r.shared.Load()
	if sh == nil {
		return nil, ErrNotRunning
	}
	sub := sh.plan.storeSub[name]
	if sub == nil {
		return nil, fmt.Errorf("engine: no store %q", name)
	}
	spec := r.topo.Stores[name]
	if spec.InMemory && !sub.Global {
		return nil, fmt.Errorf("engine: store %q is in memory; it cannot be queried from outside its task yet", name)
	}
	return &queryStore{r: r, db: sh.db, name: name, sub: sub, maxLag: maxLag}, nil
}

type queryStore struct {
	r      *Runtime
	db     *state.DB
	name   string
	sub    *topo.SubTopology
	maxLag int64 // standby partitions this far behind are read too; -1: none
}

var _ topo.KVStore = (*queryStore)(nil)

func (q *queryStore) Name() string { return q.name }

func (q *queryStore) partitions() []int32 {
	if q.sub.Global {
		return []int32{globalPartition}
	}
	var ps []int32
	cur := q.r.balancer.Current()
	for _, id := range cur.Active {
		if id.Sub == q.sub.ID {
			ps = append(ps, id.Partition)
		}
	}
	for _, id := range cur.Standby {
		if id.Sub == q.sub.ID && q.r.standbyOK(id, q.maxLag) {
			ps = append(ps, id.Partition)
		}
	}
	slices.Sort(ps)
	return ps
}

// readable reports whether partition p can be read now: restored if
// active, close enough if standby.
func (q *queryStore) readable(id topo.TaskID) bool {
	if qs := q.r.queryable.Load(); qs != nil && (*qs)[id] {
		return true
	}
	return q.r.standbyOK(id, q.maxLag)
}

func (q *queryStore) Get(key []byte) (topo.Entry, bool, error) {
	p, err := q.keyPartition(key)
	if err != nil {
		return topo.Entry{}, false, err
	}
	st := q.db.Task()
	defer st.Close()
	return st.Store(q.name, p).Get(key)
}

// keyPartition is the partition holding key, if this instance can read
// it now.
func (q *queryStore) keyPartition(key []byte) (int32, error) {
	if q.sub.Global {
		return globalPartition, nil
	}
	owner, local, err := q.r.Owner(q.name, key)
	if err != nil {
		return 0, err
	}
	id, _, _ := q.r.balancer.Current().KeyOwner(q.sub.ID, q.r.topo.Stores[q.name].Kind.PartitionKey(key))
	switch {
	case !local && !q.r.standbyOK(id, q.maxLag):
		return 0, &NotLocalError{Store: q.name, Task: id, Owner: owner}
	case local && !q.readable(id):
		return 0, fmt.Errorf("engine: store %s: task %s is restoring its state: %w", q.name, id, ErrNotReady)
	}
	return id.Partition, nil
}

// RangeKey reads one record key's windows or sessions (topo.RangeKey)
// from the partition holding them.
func (q *queryStore) RangeKey(lo, hi []byte, suffix int) iter.Seq2[topo.Entry, error] {
	return func(yield func(topo.Entry, error) bool) {
		p, err := q.keyPartition(lo)
		if err != nil {
			yield(topo.Entry{}, err)
			return
		}
		st := q.db.Task()
		defer st.Close()
		for e, err := range topo.RangeKey(st.Store(q.name, p), lo, hi, suffix) {
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

func (q *queryStore) Range(lo, hi []byte) iter.Seq2[topo.Entry, error] {
	return func(yield func(topo.Entry, error) bool) {
		if !q.sub.Global {
			for _, p := range q.partitions() {
				id := topo.TaskID{Sub: q.sub.ID, Partition: p}
				if !q.readable(id) {
					yield(topo.Entry{}, fmt.Errorf("engine: store %s: task %s is restoring its state: %w", q.name, id, ErrNotReady))
					return
				}
			}
		}
		st := q.db.Task()
		defer st.Close()
		var pulls []func() (topo.Entry, error, bool)
		var heads []*topo.Entry
		var errs []error
		for _, p := range q.partitions() {
			next, stop := iter.Pull2(st.Store(q.name, p).Range(lo, hi))
			defer stop()
			pulls = append(pulls, next)
			heads = append(heads, nil)
			errs = append(errs, nil)
		}
		advance := func(i int) {
			e, err, ok := pulls[i]()
			if !ok {
				heads[i] = nil
				return
			}
			if err != nil {
				errs[i] = err
			}
			heads[i] = &e
		}
		for i := range pulls {
			advance(i)
		}
		for {
			best := -1
			for i, h := range heads {
				if errs[i] != nil {
					yield(topo.Entry{}, errs[i])
					return
				}
				if h != nil && (best < 0 || bytes.Compare(h.Key, heads[best].Key) < 0) {
					best = i
				}
			}
			if best < 0 {
				return
			}
			if !yield(*heads[best], nil) {
				return
			}
			advance(best)
		}
	}
}

func (q *queryStore) Put([]byte, []byte, int64) error { return kv.ErrReadOnly }
func (q *queryStore) Delete([]byte, int64) error      { return kv.ErrReadOnly }
func (q *queryStore) Close() error                    { return nil }

func partitionFor(key []byte, n int32) int32 { return assign.Partition(key, n) }

func kgoRetriable(err error) bool { return kerr.IsRetriable(err) }

func isExists(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }
