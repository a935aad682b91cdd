package topo

import (
	"bytes"
	"errors"
	"iter"
	"sync"

	"github.com/google/btree"

	"github.com/oxbow-dev/oxbow/engine/kv"
)

// Entry is one key of a key-value store (public: queries hand it out).
type Entry = kv.Entry

// KVStore is the byte-level key-value store a task owns (public: queries
// hand it out).
type KVStore = kv.Store

// ErrStoreClosed is returned by a closed store.
var ErrStoreClosed = errors.New("engine: store is closed")

// MemStore is an ordered in-memory KVStore.
type MemStore struct {
	name   string
	mu     sync.RWMutex
	tree   *btree.BTreeG[Entry]
	closed bool
}

var _ KVStore = (*MemStore)(nil)

// NewMemStore returns an empty in-memory store.
func NewMemStore(name string) *MemStore {
	return &MemStore{name: name, tree: btree.NewG(16, func(a, b Entry) bool { return bytes.Compare(a.Key, b.Key) < 0 })}
}

// Name is the store's name.
func (m *MemStore) Name() string { return m.name }

// Get returns the key's entry.
func (m *MemStore) Get(key []byte) (Entry, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Entry{}, false, ErrStoreClosed
	}
	e, ok := m.tree.Get(Entry{Key: key})
	return e, ok, nil
}

// Put writes a key. The store keeps its own copies of key and value.
func (m *MemStore) Put(key, value []byte, ts int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrStoreClosed
	}
	m.tree.ReplaceOrInsert(Entry{Key: bytes.Clone(key), Value: append([]byte{}, value...), Timestamp: ts})
	return nil
}

// Delete removes a key.
func (m *MemStore) Delete(key []byte, _ int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrStoreClosed
	}
	m.tree.Delete(Entry{Key: key})
	return nil
}

// Range iterates [lo, hi) in key order over a snapshot taken when the
// iteration starts, so the loop body may write to the store.
func (m *MemStore) Range(lo, hi []byte) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		m.mu.RLock()
		if m.closed {
			m.mu.RUnlock()
			yield(Entry{}, ErrStoreClosed)
			return
		}
		var snap []Entry
		visit := func(e Entry) bool {
			if hi != nil && bytes.Compare(e.Key, hi) >= 0 {
				return false
			}
			snap = append(snap, e)
			return true
		}
		if lo == nil {
			m.tree.Ascend(visit)
		} else {
			m.tree.AscendGreaterOrEqual(Entry{Key: lo}, visit)
		}
		m.mu.RUnlock()
		for _, e := range snap {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// Len is the number of keys.
func (m *MemStore) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.tree.Len()
}

// Close releases the store.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.tree = nil
	return nil
}

// KeyRanger is a store that reads one record key's windows or sessions
// faster than Range does (state's segmented stores).
type KeyRanger interface {
	// RangeKey is RangeKey of the store.
	RangeKey(lo, hi []byte, suffix int) iter.Seq2[Entry, error]
}

// RangeKey iterates the keys of s in [lo, hi) that belong to one record
// key of a window or session store, whose keys are the record key then
// suffix bytes of times: lo is a key of it, hi another or the end of its
// keys. Keys of other record keys that sort between (longer ones that
// begin with it) are left out.
func RangeKey(s KVStore, lo, hi []byte, suffix int) iter.Seq2[Entry, error] {
	if l, ok := s.(*loggedStore); ok {
		s = l.KVStore // reads are not logged
	}
	if r, ok := s.(KeyRanger); ok {
		return r.RangeKey(lo, hi, suffix)
	}
	return FilterKey(s.Range(lo, hi), lo, suffix)
}

// FilterKey keeps the entries of seq whose key is lo's record key (all but
// its last suffix bytes) followed by suffix bytes.
func FilterKey(seq iter.Seq2[Entry, error], lo []byte, suffix int) iter.Seq2[Entry, error] {
	rk := lo[:max(len(lo)-suffix, 0)]
	return func(yield func(Entry, error) bool) {
		for e, err := range seq {
			if err == nil && (len(e.Key) != len(rk)+suffix || !bytes.HasPrefix(e.Key, rk)) {
				continue
			}
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

// loggedStore writes every change to the store's changelog topic, on the
// partition of the task that owns it.
type loggedStore struct {
	KVStore
	topic     string
	partition int32
	collector Collector
}

func (l *loggedStore) Put(key, value []byte, ts int64) error {
	if err := l.KVStore.Put(key, value, ts); err != nil {
		return err
	}
	return l.log(key, value, ts)
}

func (l *loggedStore) Delete(key []byte, ts int64) error {
	if err := l.KVStore.Delete(key, ts); err != nil {
		return err
	}
	return l.log(key, nil, ts)
}

// log sends a changelog record (value nil: a tombstone).
func (l *loggedStore) log(key, value []byte, ts int64) error {
	return l.collector.Send(Output{Topic: l.topic, Partition: l.partition, Key: key, Value: value, Timestamp: ts})
}

// PrefixEnd returns the smallest key greater than every key with the prefix,
// or nil if there is none.
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
