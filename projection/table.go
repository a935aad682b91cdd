package projection

import (
	"errors"
	"fmt"

	"github.com/oxbow-dev/oxbow/engine"
)

// Of declares a view of a table kept in a key-value store (or of the
// latest values of a versioned table), with the store's name and serdes
// taken from the table: its name is the store's unless [Named] says
// otherwise.
func Of[K, V any](t *engine.Table[K, V], opts ...Option) (*View, error) {
	st, err := t.Store()
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return NewKeyValue(nameOf(st.Name, opts), st.Name, st.Keys, st.Values, opts...)
}

// OfWindowed declares a view of an aggregation in time windows, with its
// store's name, serdes and window size taken from the table. An
// aggregation in sessions has no view.
func OfWindowed[K, V any](t *engine.Table[engine.Windowed[K], V], opts ...Option) (*View, error) {
	st, err := engine.WindowedStore(t)
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	if st.Kind != engine.WindowKind {
		return nil, fmt.Errorf("projection: store %q is %s: views read time windows: %w", st.Name, st.StoreInfo, engine.ErrStoreKind)
	}
	return NewWindowed(nameOf(st.Name, opts), st.Name, st.Keys, st.Values, st.WindowSize, opts...)
}

// OfCountWindowed declares a view of an aggregation in count windows,
// with its store's name, serdes and window size taken from the table.
func OfCountWindowed[K, V any](t *engine.Table[engine.CountWindowed[K], V], opts ...Option) (*View, error) {
	st, err := engine.CountWindowedStore(t)
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return NewCountWindowed(nameOf(st.Name, opts), st.Name, st.Keys, st.Values, st.WindowRecords, opts...)
}

// Named names a view made with [Of], [OfWindowed] or [OfCountWindowed]
// (default: its store's name).
func Named(name string) Option {
	return func(o *viewOptions) { o.name = name }
}

// nameOf is the name opts give, or store.
func nameOf(store string, opts []Option) string {
	var o viewOptions
	for _, f := range opts {
		f(&o)
	}
	if o.name != "" {
		return o.name
	}
	return store
}

// Check says whether every view reads a store that the topology has and
// that holds what the view reads: a key-value view a key-value or
// versioned store, a windowed view windows of its size. A mismatch wraps
// engine.ErrStoreKind; httpapi.New checks its views so.
func (r *Registry) Check(top *engine.Topology) error {
	var errs []error
	for _, v := range r.Views() {
		has, ok := top.Store(v.store)
		if !ok {
			errs = append(errs, fmt.Errorf("view %q reads store %q, which the topology does not have", v.name, v.store))
			continue
		}
		if err := v.reads(has); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("projection: %w", err)
	}
	return nil
}

// reads is nil if the view reads what a store holding has holds.
func (v *View) reads(has engine.StoreInfo) error {
	var ok bool
	switch v.kind {
	case KeyValue:
		ok = has.Kind == engine.KeyValueKind || has.Kind == engine.VersionedKind
	case Windowed:
		ok = has.Kind == engine.WindowKind && has.WindowSize == v.windowSize
	case CountWindowed:
		ok = has.Kind == engine.CountWindowKind && has.WindowRecords == v.windowRecords
	}
	if ok {
		return nil
	}
	want := string(v.kind)
	switch v.kind {
	case Windowed:
		want = fmt.Sprintf("windows of %v", v.windowSize)
	case CountWindowed:
		want = fmt.Sprintf("windows of %d records", v.windowRecords)
	}
	return fmt.Errorf("view %q reads %s from store %q, which is %s: %w", v.name, want, v.store, has, engine.ErrStoreKind)
}
