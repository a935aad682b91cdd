package engine

import (
	"errors"
	"fmt"
	"iter"

	"github.com/oxbow-dev/oxbow/engine/internal/runtime"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/kv"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Queryable is what holds running state: an application instance or the
// test driver. Read its stores with [QueryKeyValueStore].
type Queryable interface {
	// LocalStore returns the engine's raw view of a store; it is meant for
	// the engine's own typed wrappers and for layers such as projection.
	LocalStore(name string) (RawStore, error)
}

// RawStore is the byte-level view of a store that a Queryable hands out:
// keys and values as their serdes wrote them, ranges half-open in the
// order of the key bytes, a nil bound unbounded.
type RawStore = kv.Store

// RawEntry is one key of a RawStore, with the event time of the record
// that last wrote it (Unix milliseconds).
type RawEntry = kv.Entry

// QueryOption tunes a query.
type QueryOption func(*queryOptions)

type queryOptions struct {
	stale  bool
	maxLag int64
}

// AllowStale lets a query also read the partitions this instance keeps as
// standby replicas (Config.StandbyReplicas), as long as they are at most
// maxLag changelog records behind their active task: answers that may be
// slightly old, available while the active instance is away. Without it a
// key of another instance's task is a *NotLocalError.
func AllowStale(maxLag int64) QueryOption {
	return func(o *queryOptions) { o.stale, o.maxLag = true, maxLag }
}

// staleQueryable is a Queryable that can read standby state (App).
type staleQueryable interface {
	StandbyStore(name string, maxLag int64) (RawStore, error)
}

// QueryKeyValueStore opens a store of a running topology for reading, with
// the serdes of its keys and values. A store of windows is refused
// (ErrStoreKind); a versioned one gives its latest values. [QueryTable]
// opens a table's store with no name or serde to repeat.
func QueryKeyValueStore[K, V any](q Queryable, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (ReadOnlyKeyValueStore[K, V], error) {
	if err := checkStore(q, "QueryKeyValueStore", store, StoreInfo{Kind: KeyValueKind}); err != nil {
		return nil, err
	}
	return openStore(q, store, keySerde, valueSerde, opts...)
}

// openStore opens a store for reading as keys and values, whatever it
// holds.
func openStore[K, V any](q Queryable, store string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (*kvStore[K, V], error) {
	if keySerde == nil || valueSerde == nil {
		return nil, fmt.Errorf("engine: store %q: %w", store, nilSerdes(keySerde == nil, valueSerde == nil))
	}
	var o queryOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	var raw RawStore
	var err error
	if sq, ok := q.(staleQueryable); ok && o.stale {
		raw, err = sq.StandbyStore(store, o.maxLag)
	} else {
		raw, err = q.LocalStore(store)
	}
	if err != nil {
		return nil, err
	}
	return &kvStore[K, V]{raw: raw, name: store, ks: keySerde, vs: valueSerde, readOnly: true}, nil
}

// LocalStore implements Queryable: read a store of this instance with
// [QueryKeyValueStore]. A Get for a key another instance owns fails with a
// *NotLocalError that names it.
func (a *App) LocalStore(name string) (RawStore, error) {
	return queryStore(a.rt.LocalStore(name))
}

// StandbyStore is LocalStore also reading the standby partitions at most
// maxLag records behind; QueryKeyValueStore uses it with AllowStale.
func (a *App) StandbyStore(name string, maxLag int64) (RawStore, error) {
	return queryStore(a.rt.StandbyStore(name, maxLag))
}

// queryStore is a query store of the runtime's as the engine hands it out.
func queryStore(st RawStore, err error) (RawStore, error) {
	if err != nil {
		return nil, err
	}
	return publicStore{st}, nil
}

// publicStore turns the runtime's *NotLocalError, which names internal
// types, into the engine's. Only Get gives one (a Range reads the
// partitions this instance has), and nothing is converted on the way of
// an answer: the store costs an allocation per LocalStore, none per read.
type publicStore struct{ RawStore }

func (s publicStore) Get(key []byte) (RawEntry, bool, error) {
	e, ok, err := s.RawStore.Get(key)
	if err != nil {
		err = publicErr(err)
	}
	return e, ok, err
}

// RangeKey reads one record key's windows or sessions through the store's
// own way, if it has one (see topo.RangeKey).
func (s publicStore) RangeKey(lo, hi []byte, suffix int) iter.Seq2[RawEntry, error] {
	return topo.RangeKey(s.RawStore, lo, hi, suffix)
}

// KeyOwner returns the instance that owns key in store, and whether it is
// this one. keySerde must be the serde the store's input topic was written
// with, since the owner follows the key's partition.
func KeyOwner[K any](a *App, store string, key K, keySerde serde.Serde[K]) (Instance, bool, error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return Instance{}, false, fmt.Errorf("engine: encode key for store %s: %w", store, err)
	}
	in, local, err := a.rt.Owner(store, kb)
	if err != nil {
		return Instance{}, false, publicErr(err)
	}
	return instanceOf(in), local, nil
}

// NotLocalError says that a key of a store lives on another instance: ask
// Owner, at Owner.Addr. An Owner without an ID means that no instance owns
// the key's task right now (the group is rebalancing): ask again shortly.
// Queries return it unwrapped; test for it with errors.As.
type NotLocalError struct {
	Store     string
	Task      string   // the key's task, "<sub-topology>_<partition>", as App.Tasks names it
	Partition int32    // the key's partition of the store
	Owner     Instance // the instance whose task it is; zero while none is
}

func (e *NotLocalError) Error() string {
	if e.Owner.ID == "" {
		return fmt.Sprintf("engine: store %s: task %s has no owner right now (the group is rebalancing)", e.Store, e.Task)
	}
	return fmt.Sprintf("engine: store %s: the key belongs to task %s on instance %s (%s)", e.Store, e.Task, e.Owner.ID, e.Owner.Addr)
}

// publicErr is err with the runtime's *NotLocalError, if it is one, made
// the engine's (the runtime returns it unwrapped).
func publicErr(err error) error {
	var nl *runtime.NotLocalError
	if !errors.As(err, &nl) {
		return err
	}
	return &NotLocalError{Store: nl.Store, Task: nl.Task.String(), Partition: nl.Task.Partition, Owner: instanceOf(nl.Owner)}
}

// ErrNotReady is wrapped by queries of a partition whose state this
// instance is still restoring (or has not opened yet after a rebalance):
// ask again shortly.
var ErrNotReady = kv.ErrNotReady

// ErrNotRunning is returned by queries (LocalStore, QueryKeyValueStore,
// KeyOwner) of an instance that has not joined its group yet or has
// stopped.
var ErrNotRunning = kv.ErrNotRunning

// ErrReadOnly is returned by writes to a store opened for queries.
var ErrReadOnly = kv.ErrReadOnly
