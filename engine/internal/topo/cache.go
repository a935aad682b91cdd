package topo

import (
	"bytes"
	"fmt"
	"iter"
	"slices"
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

// Cache is a task's record cache. Entries stay after a flush, clean, so the
// next update of a key finds its current value without reading the store.
// Over budget, clean entries leave first, the least recently used
// approximated by a clock (a read marks an entry used; eviction passes over
// a used entry once, clearing the mark), so that a read moves nothing; dirty
// ones are written early only when no clean one is left, so caching reads
// never costs the write compaction. The lists are linked through the
// entries, so moving an entry between them allocates nothing: with keys
// spread over more entries than the CPU caches hold, each pointer followed
// is a cache miss, and a lookup is most of the cost of an update.
type Cache struct {
	// Hits and Misses count reads of cached stores that the cache answered
	// or passed to the store.
	Hits, Misses atomic.Int64

	max   int64
	size  int64
	clean entryList // written already, in the clock's order
	dirty entryList // not written yet, least recently updated first
	// entries, by store then key: processors that share a store (a
	// cogroup's aggregators) share its entries, so each sees the others'
	// pending updates.
	entries map[KVStore]*entryTable
	// last is the entry the latest Get found, so that the Update that
	// usually follows does not look it up again.
	last *cacheEntry
	// free holds entries that left, for new keys to reuse: a cache far
	// smaller than its stores evicts an entry for nearly every update
	// (a third of a windowed count's allocation at 100,000 keys).
	free []*cacheEntry
}

// maxFree bounds the entries kept for reuse.
const maxFree = 256

// release keeps an entry that left the cache (no list, table or field
// holds it any more) for reuse, with its key's buffer.
func (c *Cache) release(e *cacheEntry) {
	if len(c.free) < maxFree {
		*e = cacheEntry{key: e.key[:0]}
		c.free = append(c.free, e)
	}
}

// newEntry returns an empty entry of key, not in a table yet.
func (c *Cache) newEntry(key []byte) *cacheEntry {
	var e *cacheEntry
	if n := len(c.free); n > 0 {
		e, c.free = c.free[n-1], c.free[:n-1]
	} else {
		e = new(cacheEntry)
	}
	e.key = append(e.key[:0], key...)
	return e
}

type cacheEntry struct {
	key        []byte      // owned by the entry: copied to anything that outlives it
	tbl        *entryTable // its store's, nil once it has left
	slot       int         // in tbl
	value      []byte      // nil: deleted
	ts         int64
	prev, next *cacheEntry // in clean or dirty (as isDirty says) if listed
	listed     bool
	isDirty    bool
	used       bool // read since it was last passed over for eviction
	// absent: the store did not have the key when the entry was last
	// dirtied (UpdateNew), so a delete need not be written.
	absent bool
	// What writing a dirty entry forwards.
	fwd      *TableStore // the latest writer, whose node forwards the change
	rec      Record      // key and headers of the latest update
	old, new any
}

// table is the table of store's entries.
func (c *Cache) table(store KVStore) *entryTable {
	t := c.entries[store]
	if t == nil {
		t = newEntryTable()
		c.entries[store] = t
	}
	return t
}

// NewCache returns a cache holding at most maxBytes of keys and values; 0
// or less disables caching.
func NewCache(maxBytes int64) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	return &Cache{max: maxBytes, entries: map[KVStore]*entryTable{}}
}

// entryList is a doubly linked list of entries.
type entryList struct {
	head, tail *cacheEntry
	n          int
}

func (l *entryList) pushBack(e *cacheEntry) {
	e.prev, e.next, e.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

func (l *entryList) remove(e *cacheEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next, e.listed = nil, nil, false
	l.n--
}

func (l *entryList) popFront() *cacheEntry {
	e := l.head
	l.remove(e)
	return e
}

// unlist takes e off the list it is on.
func (c *Cache) unlist(e *cacheEntry) {
	switch {
	case !e.listed:
	case e.isDirty:
		c.dirty.remove(e)
	default:
		c.clean.remove(e)
	}
}

// keyCopy is a copy of the entry's key, empty rather than nil for the
// empty key (a nil key is a record without one).
func (e *cacheEntry) keyCopy() []byte { return append(make([]byte, 0, len(e.key)), e.key...) }

const entryOverhead = 64

func (e *cacheEntry) bytes() int64 { return int64(len(e.key)+len(e.value)) + entryOverhead }

// Len is the number of entries waiting to be flushed.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	return c.dirty.n
}

// Flush writes and forwards every dirty entry, least recently updated first,
// including those that flushing itself dirties downstream. The entries stay,
// clean.
func (c *Cache) Flush() error {
	if c == nil {
		return nil
	}
	for c.dirty.n > 0 {
		e := c.dirty.popFront()
		e.isDirty, e.used = false, false
		c.clean.pushBack(e)
		if err := e.write(); err != nil {
			return err
		}
	}
	return nil
}

// write writes an entry to its store and forwards the change, then forgets
// what only the write needed.
func (e *cacheEntry) write() error {
	fwd, rec, old, new := e.fwd, e.rec, e.old, e.new
	e.fwd, e.rec, e.old, e.new = nil, Record{}, nil, nil
	if e.value == nil && e.absent && old == nil && new == nil {
		// Made and gone again since the store last had the key: nothing
		// to write (not even a tombstone to the changelog) or forward.
		return nil
	}
	return fwd.write(e.keyCopy(), e.value, e.ts, rec, old, new, false)
}

// evict brings the cache within its budget: clean entries leave first; then
// the least recently updated dirty entries are written and leave. An entry leaves every list
// before it is written, since writing forwards downstream, where other
// updates may evict in turn.
func (c *Cache) evict() error {
	for c.size > c.max && c.clean.n+c.dirty.n > 1 {
		var e *cacheEntry
		if c.clean.n > 0 {
			e = c.clean.popFront()
			if e.used {
				// Read since the clock last passed it: a second chance.
				e.used = false
				c.clean.pushBack(e)
				continue
			}
		} else {
			e = c.dirty.popFront()
		}
		e.tbl.remove(e)
		if c.last == e {
			c.last = nil
		}
		c.size -= e.bytes()
		if e.isDirty {
			e.isDirty = false
			if err := e.write(); err != nil {
				return err
			}
		}
		c.release(e)
	}
	return nil
}

// TableStore is how a table processor writes its store: each update both
// changes the store and forwards the change, through the task's record cache
// when there is one.
type TableStore struct {
	store KVStore
	cache *Cache
	ctx   *Context
	byKey *entryTable // the cache's entries of the store
	// The codecs of the store's keys and values, if known (SetCodecs), and
	// the bytes of the last record it forwarded, for a sink to reuse.
	kc, vc Codec
	raw    rawBytes
	// scratch is reused for the bounds GetMany gives the store.
	scratch []byte
	// forwardAbsent: an update from no value to none, written at once,
	// is forwarded too (SetForwardAbsent).
	forwardAbsent bool
}

// SetForwardAbsent makes an update from no value to none (the delete of an
// absent key) go downstream as a change from nil to nil when it is written
// at once, without the record cache, as Kafka Streams' tuple forwarder
// forwards every update it is given. From the cache such an update is
// dropped, as Kafka Streams' caching store drops an entry whose old and new
// values are both null when it flushes. Default: dropped either way.
func (s *TableStore) SetForwardAbsent(on bool) { s.forwardAbsent = on }

// SetCodecs tells the store the codecs of its keys and values: then a sink
// downstream with the same codecs writes the bytes the store wrote instead
// of encoding the key and the new value again.
func (s *TableStore) SetCodecs(kc, vc Codec) { s.kc, s.vc = kc, vc }

// TableStore opens a store the node declared for table-style writes.
func (c *Context) TableStore(name string) (*TableStore, error) {
	s, err := c.Store(name)
	if err != nil {
		return nil, err
	}
	ts := &TableStore{store: s, cache: c.inst.task.cache, ctx: c}
	if ts.cache != nil {
		ts.byKey = ts.cache.table(s)
	}
	return ts, nil
}

// DirectTableStore is TableStore without the record cache: every update is
// written and forwarded at once, and the store can be read in key order
// with Range. For processors that scan ranges of their store (sliding and
// session windows), which the cache, a hash map, cannot serve in order.
func (c *Context) DirectTableStore(name string) (*TableStore, error) {
	s, err := c.Store(name)
	if err != nil {
		return nil, err
	}
	return &TableStore{store: s, ctx: c}, nil
}

// Range iterates the keys in [lo, hi) in order (nil: unbounded), for a
// store opened with DirectTableStore.
func (s *TableStore) Range(lo, hi []byte) iter.Seq2[Entry, error] {
	if s.cache != nil {
		return func(yield func(Entry, error) bool) {
			yield(Entry{}, fmt.Errorf("engine: store %q: a range over a cached table store (open it with DirectTableStore)", s.store.Name()))
		}
	}
	return s.store.Range(lo, hi)
}

// Name is the store's name.
func (s *TableStore) Name() string { return s.store.Name() }

// Get reads a key, seeing updates still in the cache.
func (s *TableStore) Get(key []byte) (Entry, bool, error) {
	if s.cache != nil {
		if e, _ := s.byKey.get(key); e != nil {
			s.cache.last = e
			s.cache.Hits.Add(1)
			e.used = true
			if e.value == nil {
				return Entry{}, false, nil
			}
			return Entry{Key: key, Value: e.value, Timestamp: e.ts}, true, nil
		}
		s.cache.Misses.Add(1)
	}
	return s.store.Get(key)
}

// GetMany reads keys of one record key of a window or session store (the
// record key, then suffix bytes), ascending, seeing updates still in the
// cache: fn gets each key's index, entry and presence, in order. The keys
// the cache does not hold are read from the store with one range
// (RangeKey), from the first of them to just past the last, so that keys
// near each other cost one seek of the store rather than one each.
func (s *TableStore) GetMany(keys [][]byte, suffix int, fn func(i int, e Entry, ok bool) error) error {
	var missBuf [8]int
	miss := missBuf[:0]
	for i, k := range keys {
		if s.cache != nil {
			if e, _ := s.byKey.get(k); e != nil {
				s.cache.last = e
				s.cache.Hits.Add(1)
				e.used = true
				var err error
				if e.value == nil {
					err = fn(i, Entry{}, false)
				} else {
					err = fn(i, Entry{Key: k, Value: e.value, Timestamp: e.ts}, true)
				}
				if err != nil {
					return err
				}
				continue
			}
			s.cache.Misses.Add(1)
		}
		miss = append(miss, i)
	}
	switch len(miss) {
	case 0:
		return nil
	case 1:
		e, ok, err := s.store.Get(keys[miss[0]])
		if err != nil {
			return err
		}
		return fn(miss[0], e, ok)
	}
	lo, last := keys[miss[0]], keys[miss[len(miss)-1]]
	s.scratch = append(append(s.scratch[:0], last...), 0) // the store copies its bounds
	hi := s.scratch
	j := 0
	for e, err := range RangeKey(s.store, lo, hi, suffix) {
		if err != nil {
			return err
		}
		for j < len(miss) && bytes.Compare(keys[miss[j]], e.Key) < 0 {
			if err := fn(miss[j], Entry{}, false); err != nil {
				return err
			}
			j++
		}
		if j < len(miss) && bytes.Equal(keys[miss[j]], e.Key) {
			if err := fn(miss[j], e, true); err != nil {
				return err
			}
			j++
		}
		if j == len(miss) {
			break // no step past the last key
		}
	}
	for ; j < len(miss); j++ {
		if err := fn(miss[j], Entry{}, false); err != nil {
			return err
		}
	}
	return nil
}

// Unwritten lists the keys whose updates wait in the cache, not yet in the
// store.
func (s *TableStore) Unwritten() [][]byte {
	if s.cache == nil {
		return nil
	}
	var keys [][]byte
	s.byKey.each(func(e *cacheEntry) {
		if e.isDirty {
			keys = append(keys, e.keyCopy())
		}
	})
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

// Update sets key to value (nil: deletes it) with timestamp ts, and forwards
// rec (its Key and Headers) with the change from old to new as its value.
// With a cache both happen when the entry is flushed or evicted.
func (s *TableStore) Update(key, value []byte, ts int64, rec Record, old, new any) error {
	return s.update(key, value, false, false, ts, rec, old, new)
}

// UpdateNew is Update for a key the caller found absent from the store:
// should a later update delete it before the cache has written it,
// nothing is written for it, as if it had never been.
func (s *TableStore) UpdateNew(key, value []byte, ts int64, rec Record, old, new any) error {
	return s.update(key, value, false, true, ts, rec, old, new)
}

// UpdateOwned is Update for a value the caller gives away: bytes that
// nobody else holds or changes, which the cache keeps without a copy.
func (s *TableStore) UpdateOwned(key, value []byte, ts int64, rec Record, old, new any) error {
	return s.update(key, value, true, false, ts, rec, old, new)
}

func (s *TableStore) update(key, value []byte, owned, absent bool, ts int64, rec Record, old, new any) error {
	if s.cache == nil {
		return s.write(key, value, ts, rec, old, new, true)
	}
	c := s.cache
	e := c.last
	found := e != nil && e.tbl == s.byKey && string(e.key) == string(key)
	if !found {
		var h uint64
		e, h = s.byKey.get(key)
		if found = e != nil; !found {
			e = c.newEntry(key)
			s.byKey.add(e, h)
		}
	}
	if found {
		c.size -= e.bytes()
	}
	if !e.isDirty {
		// The first update since the key was last written: the change
		// downstream starts from the value before it.
		c.unlist(e)
		e.old, e.isDirty, e.absent = old, true, absent
		c.dirty.pushBack(e)
	} else if c.dirty.tail != e {
		// Updated again: to the back, as Kafka Streams' cache moves a key
		// it dirties again, so keys are flushed (and evicted) in the order
		// of their last update.
		c.dirty.remove(e)
		c.dirty.pushBack(e)
	}
	// Keep nothing that points into a fetched batch: value bytes may share
	// its buffer (serde.Bytes does not copy), and so may the raw key bytes
	// the record carries; an entry that lives until the next commit would
	// keep the whole batch in memory.
	if value != nil && !owned {
		value = bytes.Clone(value)
	}
	rec.src, rec.srcKey, rec.rawKey, rec.Value = nil, nil, nil, nil
	if len(rec.Headers) > 0 {
		hs := make([]Header, len(rec.Headers))
		for i, h := range rec.Headers {
			hs[i] = Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		rec.Headers = hs
	}
	e.fwd, e.value, e.ts, e.rec, e.new = s, value, ts, rec, new
	c.size += e.bytes()
	return c.evict()
}

// DeleteAbsent is Update for the delete of a key the caller found absent
// (with Get). With a cache, it replaces an update of the key still waiting
// there (which then goes downstream as a change from that update's old
// value to none), and otherwise does nothing: Kafka Streams' caching store,
// flushing such an entry, neither writes it nor forwards it. Without a
// cache the delete is written and, with SetForwardAbsent, forwarded.
func (s *TableStore) DeleteAbsent(key []byte, ts int64, rec Record) error {
	if s.cache != nil {
		if e, _ := s.byKey.get(key); e == nil || !e.isDirty {
			return nil
		}
	}
	return s.update(key, nil, false, false, ts, rec, nil, nil)
}

// Expire removes key from the store (and its changelog) without a change
// downstream: state that has outlived its use, like an old window. An
// update of it still waiting in the cache is written and forwarded first,
// so expiring never swallows a change.
func (s *TableStore) Expire(key []byte, ts int64) error {
	if c := s.cache; c != nil {
		if e, _ := s.byKey.get(key); e != nil {
			wasDirty := e.isDirty
			c.unlist(e)
			e.isDirty = false
			if wasDirty {
				if err := e.write(); err != nil {
					return err
				}
			}
			e.tbl.remove(e)
			if c.last == e {
				c.last = nil
			}
			c.size -= e.bytes()
			if !e.listed { // not updated again downstream of its write
				c.release(e)
			}
		}
	}
	if err := s.store.Delete(key, ts); err != nil {
		return fmt.Errorf("engine: store %q: %w", s.store.Name(), err)
	}
	return nil
}

// write writes key's value and forwards the change from old to new; at
// once tells a write of an update (not of a cache entry).
func (s *TableStore) write(key, value []byte, ts int64, rec Record, old, new any, atOnce bool) error {
	var err error
	if value == nil {
		err = s.store.Delete(key, ts)
	} else {
		err = s.store.Put(key, value, ts)
	}
	if err != nil {
		return fmt.Errorf("engine: store %q: %w", s.store.Name(), err)
	}
	if old == nil && new == nil && !(atOnce && s.forwardAbsent) {
		return nil
	}
	rec.Value = Change{Old: old, New: new}
	rec.Timestamp = TimeOf(ts)
	if s.kc != nil {
		// Shared by the records this store forwards: a sink checks that
		// the key and value are still these before it uses the bytes, so
		// a later write replacing them (while an earlier record is still
		// on its way down) costs only the reuse.
		s.raw = rawBytes{key: key, keyOf: rec.Key, kc: s.kc}
		if new != nil && value != nil {
			s.raw.value, s.raw.valueOf, s.raw.vc = value, new, s.vc
		}
		rec.raw = &s.raw
	}
	return s.ctx.Forward(rec)
}
