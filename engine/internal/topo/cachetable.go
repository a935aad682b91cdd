package topo

import "hash/maphash"

// entryTable holds the record cache's entries of one store by key: an
// open-addressed hash table with linear probing, at most half full. It is
// the cache's own rather than a Go map because of what the cache does most
// with a store far larger than itself: for nearly every update it evicts
// its least recently used entry, cold in the CPU's caches. A map deletes
// by key, so it hashes the key's bytes and compares them with the slot's,
// one cache miss each; the table knows the entry's slot and empties it
// without reading the key. Each slot keeps its key's hash, so that a probe
// passes over other keys without following their entries. An entry's key
// is a buffer of its own, kept when the entry is reused for another key.
type entryTable struct {
	seed  maphash.Seed
	slots []entrySlot // a power of two long
	n     int
}

type entrySlot struct {
	h uint64
	e *cacheEntry // nil: empty
}

// minSlots is a new table's length.
const minSlots = 16

func newEntryTable() *entryTable {
	return &entryTable{seed: maphash.MakeSeed(), slots: make([]entrySlot, minSlots)}
}

func (t *entryTable) hash(key []byte) uint64 { return maphash.Bytes(t.seed, key) }

// get returns key's entry, or nil, and key's hash.
func (t *entryTable) get(key []byte) (*cacheEntry, uint64) {
	h := t.hash(key)
	if t.n == 0 {
		return nil, h
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil, h
		}
		if s.h == h && string(s.e.key) == string(key) {
			return s.e, h
		}
	}
}

// add puts e, whose key (with hash h) the table does not hold, in the
// table.
func (t *entryTable) add(e *cacheEntry, h uint64) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	t.place(e, h)
	e.tbl = t
	t.n++
}

// place puts e in the first empty slot from its hash's.
func (t *entryTable) place(e *cacheEntry, h uint64) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = entrySlot{h, e}
	e.slot = int(i)
}

func (t *entryTable) grow() {
	old := t.slots
	t.slots = make([]entrySlot, 2*len(old))
	for _, s := range old {
		if s.e != nil {
			t.place(s.e, s.h)
		}
	}
}

// remove takes e out of the table. The slots after it move back into the
// gap where their probe would pass it (deletion by backward shift), so no
// tombstone is left for later probes to step over.
func (t *entryTable) remove(e *cacheEntry) {
	mask := len(t.slots) - 1
	i := e.slot
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if s.e == nil {
			break
		}
		// s may fill the gap at i if i lies on its probe from its home
		// slot to j: i is no further from j than its home is.
		if home := int(s.h) & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i] = s
			s.e.slot = i
			i = j
		}
	}
	t.slots[i] = entrySlot{}
	e.tbl = nil
	t.n--
}

// each calls fn with every entry, in no order.
func (t *entryTable) each(fn func(*cacheEntry)) {
	for _, s := range t.slots {
		if s.e != nil {
			fn(s.e)
		}
	}
}
