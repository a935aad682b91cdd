// Package kv is the byte-level key-value store of the engine: the seam
// its tasks write state through and its queries read it through, and the
// errors a read of a running instance's state can give.
//
// Package engine re-exports it (engine.RawStore is kv.Store,
// engine.RawEntry is kv.Entry, engine.ErrNotReady is kv.ErrNotReady); the
// package exists so that the engine's internals and its users handle the
// same types, with nothing converted on a store's hot path. It imports
// nothing of the engine.
//
//	for e, err := range st.Range(nil, nil) { // every key, in byte order
//		if err != nil {
//			return err
//		}
//		fmt.Printf("%s=%s at %d\n", e.Key, e.Value, e.Timestamp)
//	}
package kv

import (
	"errors"
	"iter"
)

// Entry is one key of a store, with the event time, in Unix
// milliseconds, of the record that last wrote it.
type Entry struct {
	Key, Value []byte
	Timestamp  int64
}

// Store is a key-value store in bytes: keys and values as their serdes
// wrote them, ranges half-open, [lo, hi), in the order of the key bytes,
// a nil bound unbounded. Timestamps are the event times, in Unix
// milliseconds, of the records that wrote the keys.
type Store interface {
	Name() string
	Get(key []byte) (Entry, bool, error)
	Put(key, value []byte, ts int64) error
	Delete(key []byte, ts int64) error
	Range(lo, hi []byte) iter.Seq2[Entry, error]
	Close() error
}

// ErrReadOnly is returned by writes to a store opened for queries.
var ErrReadOnly = errors.New("engine: the store is open for reading only")

// ErrNotRunning is returned by queries of an instance that has not joined
// its group yet or has stopped.
var ErrNotRunning = errors.New("engine: the instance is not running")

// ErrNotReady is wrapped by queries of a partition whose state the
// instance is still restoring (or has not opened yet after a rebalance):
// ask again shortly.
var ErrNotReady = errors.New("engine: not ready")
