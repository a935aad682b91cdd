package topo

import (
	"fmt"
	"iter"
)

// RangeTableStore is a table store for processors that read ranges of
// their store in key order while they write it (sliding and session
// windows): every update is written to the store at once, so Range and Get
// see it, while the change it forwards and its changelog record go through
// the task's record cache as a TableStore's do: held until the entry is
// flushed or evicted, one forwarded change per key for all the updates
// since the last flush, from the value before the first to the latest, and
// one changelog record, the latest. Kafka Streams' caching window and
// session stores forward and log the same way. Without a cache every
// update is forwarded and logged at once.
type RangeTableStore struct {
	store KVStore
	// local takes the updates at once: the store, without its changelog
	// when it has one and a cache holds the changes.
	local KVStore
	// fwd forwards through the cache; its store counts as the cache's key
	// space and, when flushed, writes only the changelog record (the store
	// has the update already).
	fwd *TableStore
}

// logOnly is the store a RangeTableStore's cache entries write when they
// are flushed, for a logged store: the changelog record only. It is a
// comparable value, as noWrites is.
type logOnly struct{ *loggedStore }

func (s logOnly) Put(key, value []byte, ts int64) error { return s.log(key, value, ts) }
func (s logOnly) Delete(key []byte, ts int64) error     { return s.log(key, nil, ts) }

// noWrites is a store whose writes do nothing: the store a RangeTableStore's
// cache entries write when they are flushed. It is a comparable value, so
// the RangeTableStores of several processors sharing a store (a cogroup's)
// share its cache entries, as TableStores do.
type noWrites struct{ KVStore }

func (noWrites) Put([]byte, []byte, int64) error { return nil }
func (noWrites) Delete([]byte, int64) error      { return nil }

// RangeTableStore opens a store the node declared for table-style writes
// that it also reads in key order.
func (c *Context) RangeTableStore(name string) (*RangeTableStore, error) {
	s, err := c.Store(name)
	if err != nil {
		return nil, err
	}
	fwd := &TableStore{store: s, ctx: c}
	local := s
	if cache := c.inst.task.cache; cache != nil {
		fwd.store, fwd.cache = noWrites{s}, cache
		if l, ok := s.(*loggedStore); ok {
			fwd.store, local = logOnly{l}, l.KVStore
		}
		fwd.byKey = cache.table(fwd.store)
	}
	return &RangeTableStore{store: s, local: local, fwd: fwd}, nil
}

// Cached reports whether the task has a record cache.
func (c *Context) Cached() bool { return c.inst.task.cache != nil }

// EmitEveryRecord reports whether the processors that throttle what they
// emit by the wall clock are to look at every record (a test driver's
// TaskConfig.EmitEveryRecord).
func (c *Context) EmitEveryRecord() bool { return c.inst.task.cfg.EmitEveryRecord }

// SetCodecs is TableStore.SetCodecs.
func (s *RangeTableStore) SetCodecs(kc, vc Codec) { s.fwd.SetCodecs(kc, vc) }

// Name is the store's name.
func (s *RangeTableStore) Name() string { return s.store.Name() }

// Get reads a key.
func (s *RangeTableStore) Get(key []byte) (Entry, bool, error) { return s.store.Get(key) }

// Range iterates the keys in [lo, hi) in order (nil: unbounded).
func (s *RangeTableStore) Range(lo, hi []byte) iter.Seq2[Entry, error] { return s.store.Range(lo, hi) }

// RangeKey iterates one record key's keys in [lo, hi) in order (see
// [RangeKey]).
func (s *RangeTableStore) RangeKey(lo, hi []byte, suffix int) iter.Seq2[Entry, error] {
	return RangeKey(s.store, lo, hi, suffix)
}

// Update sets key to value (nil: deletes it) with timestamp ts, and
// forwards rec (its Key and Headers) with the change from old to new, at
// once or, with a cache, when the key's entry is flushed.
func (s *RangeTableStore) Update(key, value []byte, ts int64, rec Record, old, new any) error {
	return s.update(key, value, false, ts, rec, old, new)
}

// UpdateNew is Update for a key the caller found absent from the store
// (a new session): should a later update delete it before the cache has
// written it (the session merged into a longer one), no tombstone goes to
// the changelog for it.
func (s *RangeTableStore) UpdateNew(key, value []byte, ts int64, rec Record, old, new any) error {
	return s.update(key, value, true, ts, rec, old, new)
}

func (s *RangeTableStore) update(key, value []byte, absent bool, ts int64, rec Record, old, new any) error {
	if s.fwd.cache == nil {
		return s.fwd.write(key, value, ts, rec, old, new, false)
	}
	var err error
	if value == nil {
		err = s.local.Delete(key, ts)
	} else {
		err = s.local.Put(key, value, ts)
	}
	if err != nil {
		return fmt.Errorf("engine: store %q: %w", s.store.Name(), err)
	}
	return s.fwd.update(key, value, false, absent, ts, rec, old, new)
}

// Expire removes key without a change downstream; a change of it still
// waiting in the cache is forwarded first.
func (s *RangeTableStore) Expire(key []byte, ts int64) error {
	if s.fwd.cache != nil {
		if err := s.fwd.Expire(key, ts); err != nil {
			return err
		}
	}
	if err := s.store.Delete(key, ts); err != nil {
		return fmt.Errorf("engine: store %q: %w", s.store.Name(), err)
	}
	return nil
}
