package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// StoreKind is what a store holds, and so which query reads it.
type StoreKind int

// The kinds of store, by the query that reads them.
const (
	// KeyValueKind: a table or an aggregation by key ([QueryKeyValueStore],
	// [QueryTable]). The stores the engine keeps for itself (a windowed
	// aggregation's marks, a join's buffers) are key-value stores of bytes.
	KeyValueKind StoreKind = iota
	// WindowKind: an aggregation in time windows, tumbling, hopping or
	// sliding ([QueryWindowStore], [QueryWindowedTable]).
	WindowKind
	// SessionKind: an aggregation in sessions ([QuerySessionStore],
	// [QuerySessionTable]).
	SessionKind
	// CountWindowKind: an aggregation in count windows
	// ([QueryCountWindowStore], [QueryCountWindowedTable]).
	CountWindowKind
	// VersionedKind: a versioned table ([QueryVersionedStore],
	// [QueryVersionedTable]); a key-value query reads its latest values.
	VersionedKind
)

func (k StoreKind) String() string {
	switch k {
	case WindowKind:
		return "window"
	case SessionKind:
		return "session"
	case CountWindowKind:
		return "count-window"
	case VersionedKind:
		return "versioned"
	}
	return "key-value"
}

// StoreInfo is what a store of a topology holds, as queries see it.
type StoreInfo struct {
	Name string
	Kind StoreKind
	// WindowSize is the size of the windows of a window store (of
	// sliding windows: their time difference).
	WindowSize time.Duration
	// WindowRecords is the size of the windows of a count-window store,
	// in records.
	WindowRecords int64
}

func (s StoreInfo) String() string {
	switch s.Kind {
	case WindowKind:
		return fmt.Sprintf("a window store (windows of %v)", s.WindowSize)
	case CountWindowKind:
		return fmt.Sprintf("a count-window store (windows of %d records)", s.WindowRecords)
	}
	return fmt.Sprintf("a %s store", s.Kind)
}

// ErrStoreKind is wrapped by the error of a query or a view that reads a
// store as something it does not hold: a window query of a key-value
// store, windows of another size, a table kept in no store.
var ErrStoreKind = errors.New("the store does not hold what the query reads")

// Store says what the topology's store name holds; false if it has no
// such store.
func (t *Topology) Store(name string) (StoreInfo, bool) {
	if _, ok := t.t.Stores[name]; !ok {
		return StoreInfo{}, false
	}
	if info, ok := t.stores[name]; ok {
		return info, true
	}
	return StoreInfo{Name: name}, true
}

// Topology is the topology the instance runs.
func (a *App) Topology() *Topology { return a.top }

// checkStore refuses a query of store by fn that reads want (and, for
// windows, of that size), when q can say what the store holds (an App, the
// test driver) and it holds something else. A store q's topology does
// not have is left for LocalStore to refuse.
func checkStore(q Queryable, fn, store string, want StoreInfo) error {
	tq, ok := q.(interface{ Topology() *Topology })
	if !ok {
		return nil
	}
	top := tq.Topology()
	if top == nil {
		return nil
	}
	has, ok := top.Store(store)
	if !ok {
		return nil
	}
	return want.reads(fn, has)
}

// reads is nil if a query of want's kind, named fn, reads a store that
// holds has.
func (want StoreInfo) reads(fn string, has StoreInfo) error {
	switch {
	case want.Kind == KeyValueKind && has.Kind == VersionedKind:
		return nil // the latest values
	case want.Kind != has.Kind:
		return fmt.Errorf("engine: store %q is %s: %s reads %s stores: %w", has.Name, has, fn, want.Kind, ErrStoreKind)
	case want.Kind == WindowKind && want.WindowSize != has.WindowSize:
		return fmt.Errorf("engine: store %q holds windows of %v, not %v: %w", has.Name, has.WindowSize, want.WindowSize, ErrStoreKind)
	case want.Kind == CountWindowKind && want.WindowRecords != has.WindowRecords:
		return fmt.Errorf("engine: store %q holds windows of %d records, not %d: %w", has.Name, has.WindowRecords, want.WindowRecords, ErrStoreKind)
	}
	return nil
}

// tableStore is the store a table is kept in, with the serdes it was
// written with (a later WithSerdes does not change them).
type tableStore struct {
	info StoreInfo
	// keys is the serde.Serde of the store's record keys (of a windowed
	// table: the keys its windows are of), values that of its values.
	keys, values any
}

// kept records that t is kept in its store (t.store, if any), written
// with t's serdes, holding what info says (its name aside).
func kept[K, V any](t *Table[K, V], info StoreInfo) *Table[K, V] {
	return keptAs(t, info, t.ks)
}

// keptAs is kept for a windowed table, whose windows are of keys.
func keptAs[K, V, KR any](t *Table[K, V], info StoreInfo, keys serde.Serde[KR]) *Table[K, V] {
	if t.store == "" {
		return t
	}
	info.Name = t.store
	t.kept = &tableStore{info: info, keys: keys, values: t.vs}
	if info.Kind != KeyValueKind {
		t.b.storeInfo[t.store] = info
	}
	return t
}

// TableStore is the store a table is kept in, as a query or a view reads
// it: what it holds, and the serdes it was written with. Get it with
// [Table.Store], [WindowedStore] or [CountWindowedStore].
type TableStore[K, V any] struct {
	StoreInfo
	// Keys is the serde of the store's record keys: of a windowed table,
	// of the keys its windows are of.
	Keys   serde.Serde[K]
	Values serde.Serde[V]
}

// Store is the store the table is kept in: a key-value or a versioned
// store. The table must have one (see [Materialized]); a windowed table's
// is read with [WindowedStore] or [CountWindowedStore].
func (t *Table[K, V]) Store() (TableStore[K, V], error) {
	return tableStoreOf[K, V](t.kept, t.node.Name, "Table.Store", KeyValueKind, VersionedKind)
}

// WindowedStore is the store of an aggregation in time windows or in
// sessions.
func WindowedStore[K, V any](t *Table[Windowed[K], V]) (TableStore[K, V], error) {
	return tableStoreOf[K, V](t.kept, t.node.Name, "WindowedStore", WindowKind, SessionKind)
}

// CountWindowedStore is the store of an aggregation in count windows.
func CountWindowedStore[K, V any](t *Table[CountWindowed[K], V]) (TableStore[K, V], error) {
	return tableStoreOf[K, V](t.kept, t.node.Name, "CountWindowedStore", CountWindowKind)
}

// tableStoreOf is st as a TableStore, if it is one of kinds.
func tableStoreOf[K, V any](st *tableStore, node, fn string, kinds ...StoreKind) (TableStore[K, V], error) {
	if st == nil {
		return TableStore[K, V]{}, fmt.Errorf("engine: table %s is kept in no store of its own (give it Materialized): %w", node, ErrStoreKind)
	}
	if !slices.Contains(kinds, st.info.Kind) {
		return TableStore[K, V]{}, fmt.Errorf("engine: table %s is kept in %s: %s reads %v: %w", node, st.info, fn, kinds, ErrStoreKind)
	}
	// The kind says what the keys were: the assertions hold unless a
	// serde was nil.
	ks, _ := st.keys.(serde.Serde[K])
	vs, _ := st.values.(serde.Serde[V])
	if ks == nil || vs == nil {
		return TableStore[K, V]{}, fmt.Errorf("engine: table %s: %w", node, nilSerdes(ks == nil, vs == nil))
	}
	return TableStore[K, V]{StoreInfo: st.info, Keys: ks, Values: vs}, nil
}

// QueryTable opens the store of a table of a running topology for
// reading, with the serdes it was written with: a key-value store, or
// the latest values of a versioned one.
func QueryTable[K, V any](q Queryable, t *Table[K, V], opts ...QueryOption) (ReadOnlyKeyValueStore[K, V], error) {
	st, err := t.Store()
	if err != nil {
		return nil, err
	}
	return QueryKeyValueStore(q, st.Name, st.Keys, st.Values, opts...)
}

// QueryVersionedTable opens a versioned table of a running topology for
// reading (see [Versioned]).
func QueryVersionedTable[K, V any](q Queryable, t *Table[K, V], opts ...QueryOption) (ReadOnlyVersionedStore[K, V], error) {
	st, err := tableStoreOf[K, V](t.kept, t.node.Name, "QueryVersionedTable", VersionedKind)
	if err != nil {
		return nil, err
	}
	return QueryVersionedStore(q, st.Name, st.Keys, st.Values, opts...)
}

// QueryWindowedTable opens the store of an aggregation in time windows
// of a running topology for reading.
func QueryWindowedTable[K, V any](q Queryable, t *Table[Windowed[K], V], opts ...QueryOption) (ReadOnlyWindowStore[K, V], error) {
	st, err := tableStoreOf[K, V](t.kept, t.node.Name, "QueryWindowedTable", WindowKind)
	if err != nil {
		return nil, err
	}
	return QueryWindowStore(q, st.Name, st.Keys, st.Values, st.WindowSize, opts...)
}

// QuerySessionTable opens the store of an aggregation in sessions of a
// running topology for reading.
func QuerySessionTable[K, V any](q Queryable, t *Table[Windowed[K], V], opts ...QueryOption) (ReadOnlySessionStore[K, V], error) {
	st, err := tableStoreOf[K, V](t.kept, t.node.Name, "QuerySessionTable", SessionKind)
	if err != nil {
		return nil, err
	}
	return QuerySessionStore(q, st.Name, st.Keys, st.Values, opts...)
}

// QueryCountWindowedTable opens the store of an aggregation in count
// windows of a running topology for reading.
func QueryCountWindowedTable[K, V any](q Queryable, t *Table[CountWindowed[K], V], opts ...QueryOption) (ReadOnlyCountWindowStore[K, V], error) {
	st, err := CountWindowedStore(t)
	if err != nil {
		return nil, err
	}
	return QueryCountWindowStore(q, st.Name, st.Keys, st.Values, st.WindowRecords, opts...)
}
