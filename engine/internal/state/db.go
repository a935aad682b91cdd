package state

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/oxbow-dev/oxbow/engine/internal/cmalloc"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// ErrClosed is returned by a closed DB, Task or Restorer. A store view of a
// closed DB or Task returns an error that is both [topo.ErrStoreClosed] and
// ErrClosed.
var ErrClosed = errors.New("engine: state: closed")

// LockedError is returned by Open when the directory is already open: by
// another instance, or by another DB in this process. Pebble holds a lock on
// a LOCK file inside the directory while a DB is open.
type LockedError struct {
	Dir string
	Err error // what taking the lock returned
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("engine: state: directory %q is locked by another instance (%v); give each instance its own state directory", e.Dir, e.Err)
}

func (e *LockedError) Unwrap() error { return e.Err }

// Options configure a DB. The zero value is usable; every field documents
// its default.
type Options struct {
	// CacheSize is the block cache's size in bytes, shared by every store of
	// the instance. Default: 64 MiB.
	CacheSize int64
	// MemTableSize is the size of one memtable in bytes. Every task's
	// committed writes go to the same memtable; pebble flushes a full one in
	// the background while writes go to the next, and stalls writes while two
	// are full, so the instance's write budget is twice this. Default: 16 MiB.
	MemTableSize uint64
	// RestoreBatchSize bounds, in bytes, the records the Restorers of the
	// DB accumulate before they write them with their checkpoints, shared
	// among those open (each takes an equal part, 1 MiB at least); a full
	// batch becomes one table ingested into pebble. While one is written
	// the next fills, so restoring takes up to twice this. Default: four
	// memtables' size (MemTableSize); tables that much smaller leave
	// pebble more compaction (a restore of 1 GB on one CPU took half as
	// long again with one memtable's size, and twice the memory made it
	// no faster: the collector worked harder).
	RestoreBatchSize int
	// ChangelogTopic names the changelog topic whose checkpoint belongs to a
	// store: Wipe deletes that checkpoint, a Restorer writes it, Stores
	// reports it. Default: [topo.ChangelogTopic] (unprefixed); the runtime
	// passes the application-prefixed name.
	ChangelogTopic func(store string) string
	// Logger receives pebble's log messages. Default: discarded.
	Logger *slog.Logger
	// Layout gives each store's layout (see [Layout]). Open wipes the
	// partitions held in another layout, to be restored from their
	// changelogs. Default: every store plain.
	Layout func(store string) Layout
}

func (o Options) withDefaults() Options {
	if o.CacheSize == 0 {
		o.CacheSize = 64 << 20
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 16 << 20
	}
	if o.RestoreBatchSize == 0 {
		o.RestoreBatchSize = int(min(4*o.MemTableSize, maxBatchSize))
	}
	if o.ChangelogTopic == nil {
		o.ChangelogTopic = topo.ChangelogTopic
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Layout == nil {
		o.Layout = func(string) Layout { return Layout{} }
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("engine: state: CacheSize %d is negative", o.CacheSize))
	}
	if o.MemTableSize >= 4<<30 {
		errs = append(errs, fmt.Errorf("engine: state: MemTableSize %d is not under 4 GiB", o.MemTableSize))
	}
	if o.RestoreBatchSize < 0 || o.RestoreBatchSize > maxBatchSize {
		errs = append(errs, fmt.Errorf("engine: state: RestoreBatchSize %d is not between 0 and %d", o.RestoreBatchSize, maxBatchSize))
	}
	return errors.Join(errs...)
}

// maxBatchSize bounds a task's pending batch; pebble panics on a batch over
// 4 GiB, so a task writing that much between commits gets an error first.
const maxBatchSize = 1 << 31

// DB is the local state of one application instance: one pebble database
// shared by every task and store.
type DB struct {
	dir  string
	opts Options
	pdb  *pebble.DB
	// tableOpts write the tables a Restorer ingests, as pebble writes
	// its own; ingestDir holds them until pebble has linked them.
	tableOpts sstable.WriterOptions
	ingestDir string
	ingests   atomic.Int64 // names the tables written to ingestDir
	restorers atomic.Int32 // open Restorers, which share RestoreBatchSize
	lock      *pebble.Lock

	// mu is held shared by every operation that uses pdb and exclusively by
	// Close, so Close waits for operations in flight and later ones fail with
	// ErrClosed instead of reaching a closed pebble DB (which panics).
	mu     sync.RWMutex
	closed bool
	// iters counts Range loops in progress. They run without mu (a loop body
	// may call Put, and a shared lock taken twice deadlocks against a waiting
	// Close), so Close waits for them before closing pdb.
	iters sync.WaitGroup
}

// Open opens (creating if needed) the state database in dir.
func Open(dir string, opts Options) (*DB, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: state: create directory: %w", err)
	}
	// Take pebble's lock ourselves, so a held lock is reported as such and
	// not as a generic open failure.
	lock, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			return nil, fmt.Errorf("engine: state: lock directory %q: %w", dir, err)
		}
		return nil, &LockedError{Dir: dir, Err: err}
	}
	cmalloc.Limit() // before pebble's first C allocation
	popts := &pebble.Options{
		CacheSize:          opts.CacheSize,
		MemTableSize:       opts.MemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{opts.Logger},
		Lock:               lock,
		// One compaction at a time, more when compactions fall behind
		// (a restore, a burst of new keys), up to a core each.
		CompactionConcurrencyRange: func() (int, int) { return 1, max(1, runtime.GOMAXPROCS(0)) },
	}
	// Tables end where a store partition's keys do (groupEnd).
	popts.Experimental.SpanPolicyFunc = func(start []byte) (pebble.SpanPolicy, []byte, error) {
		return pebble.SpanPolicy{}, groupEnd(start), nil
	}
	// Point reads of absent keys are common (a first aggregate, a join
	// miss); a bloom filter answers most of them without reading a block.
	popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	pdb, err := pebble.Open(dir, popts)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("engine: state: open %q: %w", dir, err)
	}
	db := &DB{dir: dir, opts: opts, pdb: pdb, lock: lock, ingestDir: filepath.Join(dir, "ingest")}
	// Level 0's options: an ingested table lands wherever it overlaps
	// nothing, at the bottom for a store's first table, in level 0 when
	// it covers the same keys as earlier ones.
	popts = popts.Clone()
	popts.EnsureDefaults()
	db.tableOpts = popts.MakeWriterOptions(0, pdb.TableFormat())
	// Tables written but never ingested (a crash in between) are
	// replayed from the changelog.
	err = errors.Join(os.RemoveAll(db.ingestDir), os.Mkdir(db.ingestDir, 0o755), db.checkFormat())
	if err == nil {
		err = db.openLayouts()
	}
	if err != nil {
		return nil, errors.Join(err, pdb.Close(), lock.Close())
	}
	return db, nil
}

// checkFormat records the layout version in a new database and refuses one
// written in another layout.
func (db *DB) checkFormat() error {
	v, closer, err := db.pdb.Get(formatKey)
	if errors.Is(err, pebble.ErrNotFound) {
		// Flushed alone: a level 0 table holding it and a checkpoint would
		// span every store key between (the format's tag sorts first), and
		// its compaction would rewrite the tables of every store.
		if err := db.pdb.Set(formatKey, []byte{formatVersion}, pebble.Sync); err != nil {
			return err
		}
		return db.pdb.Flush()
	}
	if err != nil {
		return fmt.Errorf("engine: state: read layout version in %q: %w", db.dir, err)
	}
	defer closer.Close()
	if !bytes.Equal(v, []byte{formatVersion}) {
		return fmt.Errorf("engine: state: %q holds state in layout %x, this version reads layout %d; delete the directory to restore from the changelogs", db.dir, v, formatVersion)
	}
	return nil
}

// Dir is the directory the DB was opened in.
func (db *DB) Dir() string { return db.dir }

// Close waits for operations and Range loops in progress, then closes the
// database and releases its lock. Uncommitted writes of every Task are lost.
// Close must not be called from inside a Range loop (it would wait for
// itself). Closing twice returns nil.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.mu.Unlock()
	db.iters.Wait()
	return errors.Join(db.pdb.Close(), db.lock.Close())
}

// enter starts an operation on pdb; exit must follow when it succeeds.
func (db *DB) enter() error {
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (db *DB) exit() { db.mu.RUnlock() }

// Checkpoint returns the committed changelog position of a topic partition:
// the next offset to restore from.
func (db *DB) Checkpoint(topic string, partition int32) (offset int64, ok bool, err error) {
	if err := db.enter(); err != nil {
		return 0, false, err
	}
	defer db.exit()
	return db.checkpoint(topic, partition)
}

func (db *DB) checkpoint(topic string, partition int32) (int64, bool, error) {
	v, closer, err := db.pdb.Get(checkpointKey(topic, partition))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("engine: state: read checkpoint of %s/%d: %w", topic, partition, err)
	}
	defer closer.Close()
	off, err := decodeOffset(v)
	if err != nil {
		return 0, false, fmt.Errorf("%w (%s/%d)", err, topic, partition)
	}
	return off, true, nil
}

// StorePartition is one partition of a store held locally.
type StorePartition struct {
	Store     string
	Partition int32
	// Changelog is the topic the partition's checkpoint is kept under.
	Changelog string
	// Offset is the committed checkpoint, the next changelog offset to
	// restore from, when HasCheckpoint.
	Offset        int64
	HasCheckpoint bool
}

// Stores lists the store partitions held locally, by store name and
// partition, with their checkpoints: how caught up local state is. A store
// partition is listed once a Task committed with it open or a Restorer
// wrote to it, until it is wiped.
func (db *DB) Stores() ([]StorePartition, error) {
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.exit()
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{tagStore}, UpperBound: []byte{tagStore + 1}})
	if err != nil {
		return nil, fmt.Errorf("engine: state: list stores: %w", err)
	}
	var out []StorePartition
	for ok := it.First(); ok; ok = it.Next() {
		_, name, p, err := parseNamedKey(it.Key())
		if err != nil {
			return nil, errors.Join(fmt.Errorf("engine: state: list stores: %w", err), it.Close())
		}
		sp := StorePartition{Store: name, Partition: p, Changelog: string(it.Value())}
		if sp.Offset, sp.HasCheckpoint, err = db.checkpoint(sp.Changelog, p); err != nil {
			return nil, errors.Join(err, it.Close())
		}
		out = append(out, sp)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("engine: state: list stores: %w", err)
	}
	slices.SortFunc(out, func(a, b StorePartition) int {
		return cmp.Or(cmp.Compare(a.Store, b.Store), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}

// Wipe deletes a store partition: its keys, its checkpoint and its entry in
// Stores, in one atomic batch. The runtime wipes a partition whose
// checkpoint is older than its changelog's log start, then restores it from
// the beginning. No Task may have the partition open meanwhile.
func (db *DB) Wipe(store string, partition int32) error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	b := db.pdb.NewBatch()
	defer b.Close()
	// Both layouts' keys (openLayouts wipes a partition in the old one).
	plain, seg := dataPrefix(store, partition), segDataPrefix(store, partition, 0)
	sk := storeKey(store, partition)
	topics := []string{db.opts.ChangelogTopic(store)}
	v, closer, err := db.pdb.Get(sk)
	switch {
	case err == nil:
		if t := string(v); t != topics[0] {
			topics = append(topics, t) // the naming changed since it was written
		}
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("engine: state: wipe %s/%d: %w", store, partition, err)
	}
	err = errors.Join(b.DeleteRange(plain, topo.PrefixEnd(plain), nil), b.DeleteRange(seg, topo.PrefixEnd(seg), nil))
	for _, t := range topics {
		err = errors.Join(err, b.Delete(checkpointKey(t, partition), nil))
	}
	err = errors.Join(err, b.Delete(sk, nil))
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	if err != nil {
		return fmt.Errorf("engine: state: wipe %s/%d: %w", store, partition, err)
	}
	return nil
}

// pebbleLogger hands pebble's messages to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is pebble's report of an unrecoverable inconsistency (such as
// corruption); pebble expects it not to return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic("engine: state: pebble: " + msg)
}

// Sync writes the write-ahead log out to the file and syncs it: every
// commit before it survives a crash of the process and of the machine.
// Task.Commit and a Restorer's batches do not (see Task.Commit); the
// runtime syncs once per commit round, after every task's commit.
func (db *DB) Sync() error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.exit()
	b := db.pdb.NewBatch()
	defer b.Close()
	if err := b.LogData(nil, nil); err != nil {
		return fmt.Errorf("engine: state: sync: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("engine: state: sync: %w", err)
	}
	return nil
}

// PebbleMetrics is pebble's own account of the database (levels, compactions, caches).
func (db *DB) PebbleMetrics() *pebble.Metrics {
	if err := db.enter(); err != nil {
		return nil
	}
	defer db.exit()
	return db.pdb.Metrics()
}
