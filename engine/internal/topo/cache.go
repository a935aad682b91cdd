package topo

import (
	"container/list"
	"fmt"
	"sync/atomic"
)

// The record cache sits between a table processor (an aggregation, a
// materialized table) and its store. Without it every update is written to
// the store and its changelog and forwarded downstream at once. With it the
// update waits in the cache: a later update of the same key replaces it,
// keeping the value from before the first one, so that when the entry is
// finally flushed — on commit, or when the cache is over its byte budget and
// the entry is the least recently written — one store write and one
// forwarded change stand for all of them. After a flush every key has the
// value it would have without the cache; only the intermediate updates are
// gone. One consequence, as in Kafka Streams: a row that moves to another
// group and back between two flushes never touches the other group, so an
// aggregate that would have been created and taken back to zero in between
// does not appear at all.
//
// One cache serves a task and is used by one goroutine at a time, like the
// task.

// Cache is a task's record cache.
type Cache struct {
	// Hits and Misses count reads of cached stores that the cache answered
	// or passed to the store.
	Hits, Misses atomic.Int64

	max  int64
	size int64
	lru  *list.List // of *cacheEntry, least recently written first
	// entries, by store then key: processors that share a store (a
	// cogroup's aggregators) share its entries, so each sees the others'
	// pending updates. Two levels, so that a lookup by a []byte key does not
	// allocate.
	entries map[KVStore]map[string]*list.Element
}

// cacheKey is a key of a store.
type cacheKey struct {
	store KVStore
	key   string
}

type cacheEntry struct {
	ck       cacheKey
	fwd      *TableStore // the latest writer, whose node forwards the change
	value    []byte      // nil: delete
	ts       int64
	rec      Record // key and headers of the latest update
	old, new any
}

// NewCache returns a cache holding at most maxBytes of keys and values; 0
// or less disables caching.
func NewCache(maxBytes int64) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	return &Cache{max: maxBytes, lru: list.New(), entries: map[KVStore]map[string]*list.Element{}}
}

const entryOverhead = 64

func (e *cacheEntry) bytes() int64 { return int64(len(e.ck.key)+len(e.value)) + entryOverhead }

// Len is the number of entries waiting to be flushed.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	return c.lru.Len()
}

// Flush writes and forwards every entry, oldest first, including those that
// flushing itself adds downstream.
func (c *Cache) Flush() error {
	if c == nil {
		return nil
	}
	for c.lru.Len() > 0 {
		if err := c.flushFront(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cache) flushFront() error {
	el := c.lru.Front()
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.entries[e.ck.store], e.ck.key)
	c.size -= e.bytes()
	return e.fwd.write([]byte(e.ck.key), e.value, e.ts, e.rec, e.old, e.new)
}

// TableStore is how a table processor writes its store: each update both
// changes the store and forwards the change, through the task's record cache
// when there is one.
type TableStore struct {
	store KVStore
	cache *Cache
	ctx   *Context
}

// TableStore opens a store the node declared for table-style writes.
func (c *Context) TableStore(name string) (*TableStore, error) {
	s, err := c.Store(name)
	if err != nil {
		return nil, err
	}
	return &TableStore{store: s, cache: c.inst.task.cache, ctx: c}, nil
}

// Name is the store's name.
func (s *TableStore) Name() string { return s.store.Name() }

// Get reads a key, seeing updates still in the cache.
func (s *TableStore) Get(key []byte) (Entry, bool, error) {
	if s.cache != nil {
		if el, ok := s.cache.entries[s.store][string(key)]; ok {
			s.cache.Hits.Add(1)
			e := el.Value.(*cacheEntry)
			if e.value == nil {
				return Entry{}, false, nil
			}
			return Entry{Key: key, Value: e.value, Timestamp: e.ts}, true, nil
		}
		s.cache.Misses.Add(1)
	}
	return s.store.Get(key)
}

// Update sets key to value (nil: deletes it) with timestamp ts, and forwards
// rec (its Key and Headers) with the change from old to new as its value.
// With a cache both happen when the entry is flushed.
func (s *TableStore) Update(key, value []byte, ts int64, rec Record, old, new any) error {
	if s.cache == nil {
		return s.write(key, value, ts, rec, old, new)
	}
	c := s.cache
	byKey := c.entries[s.store]
	if byKey == nil {
		byKey = map[string]*list.Element{}
		c.entries[s.store] = byKey
	}
	if el, ok := byKey[string(key)]; ok {
		e := el.Value.(*cacheEntry)
		c.size -= e.bytes()
		e.fwd, e.value, e.ts, e.rec, e.new = s, value, ts, rec, new
		c.size += e.bytes()
		c.lru.MoveToBack(el)
	} else {
		e := &cacheEntry{ck: cacheKey{s.store, string(key)}, fwd: s, value: value, ts: ts, rec: rec, old: old, new: new}
		byKey[e.ck.key] = c.lru.PushBack(e)
		c.size += e.bytes()
	}
	for c.size > c.max && c.lru.Len() > 1 {
		if err := c.flushFront(); err != nil {
			return err
		}
	}
	return nil
}

func (s *TableStore) write(key, value []byte, ts int64, rec Record, old, new any) error {
	var err error
	if value == nil {
		err = s.store.Delete(key, ts)
	} else {
		err = s.store.Put(key, value, ts)
	}
	if err != nil {
		return fmt.Errorf("engine: store %q: %w", s.store.Name(), err)
	}
	if old == nil && new == nil {
		return nil
	}
	rec.Value = Change{Old: old, New: new}
	rec.Timestamp = TimeOf(ts)
	return s.ctx.Forward(rec)
}
