package state

import (
	"bytes"
	"errors"
	"fmt"
	"iter"

	"github.com/cockroachdb/pebble/v2"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Task is the pending state of one task: the writes and checkpoints since
// its last commit, held in a pebble indexed batch that the task's reads see.
// Commit applies them to the database in one atomic batch; Discard drops
// them.
//
// A Task and its store views are used by one goroutine at a time, as the
// task itself is (the single writer of its partitions). Different Tasks may
// be used concurrently.
type Task struct {
	db      *DB
	p       *pending // nil until the first operation after a commit or discard
	pending map[string]storePartition
	closed  bool
	// size is the length of the last batch committed: the next starts
	// that large, rather than doubling its way there, copying as it goes
	// (a fifth of a windowed count's allocation at 100,000 keys).
	size int
}

// pending is one indexed batch. A Commit or Discard during a Range loop
// retires it instead of closing it: the loop goes on over its snapshot, and
// the last iterator to close closes the batch.
type pending struct {
	b       *pebble.Batch
	iters   int
	retired bool
}

type storePartition struct {
	name      string
	partition int32
}

// maxPresize bounds the batch a task starts with: a commit of a burst
// (a task's first after a restore, say) does not make every later batch
// take as much.
const maxPresize = 16 << 20

// Task returns a new, empty pending state.
func (db *DB) Task() *Task {
	return &Task{db: db, pending: map[string]storePartition{}}
}

// Store returns a view of one store partition that reads and writes through
// the task's pending state. Closing the view does not discard the task's
// writes.
func (t *Task) Store(name string, partition int32) topo.KVStore {
	t.pending[string(storeKey(name, partition))] = storePartition{name, partition}
	return t.db.newStore(t, name, partition)
}

// OpenStore opens the task's partition of a store; it fits
// [topo.TaskConfig].OpenStore.
func (t *Task) OpenStore(spec *topo.StoreSpec, id topo.TaskID) (topo.KVStore, error) {
	if t.closed {
		return nil, ErrClosed
	}
	return t.Store(spec.Name, id.Partition), nil
}

// batch returns the current pending batch for a write, starting one if
// needed. The caller is inside db.enter.
func (t *Task) batch() *pending {
	if t.p == nil {
		t.p = &pending{b: t.db.pdb.NewIndexedBatchWithSize(t.size)}
	}
	return t.p
}

// retire drops the current batch: closed now, or by the last Range loop
// still reading it.
func (t *Task) retire() {
	if t.p == nil {
		return
	}
	t.p.retired = true
	if t.p.iters == 0 {
		_ = t.p.b.Close()
	}
	t.p = nil
}

func (t *Task) enter() error {
	if err := t.db.enter(); err != nil {
		return err
	}
	if t.closed {
		t.db.exit()
		return ErrClosed
	}
	return nil
}

// SetCheckpoint records, in the pending state, that the task's writes so far
// correspond to a changelog position: offset is the next offset to restore
// from (the offset after the last changelog record those writes produced).
func (t *Task) SetCheckpoint(topic string, partition int32, offset int64) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.db.exit()
	return t.batch().b.Set(checkpointKey(topic, partition), encodeOffset(offset), nil)
}

// Commit applies the pending writes and checkpoints to the database in one
// atomic pebble batch and starts a fresh one. The runtime commits only after
// the Kafka commit (or transaction) that produced the matching changelog
// records succeeded.
//
// The batch is not yet durable when Commit returns: pebble keeps the
// write-ahead log's last block (up to 32 KiB) in memory until it fills or
// something syncs it, so a crash, of the process or of the machine, may
// lose the last commits. [DB.Sync] makes every commit before it durable;
// the runtime calls it once per commit round. Either way a batch is
// recovered whole or not at all, so local state is the state at the
// checkpoints stored with it, and restoring replays the changelog from
// there: the changelog is the source of truth, and a lost commit costs only
// a longer replay. (Before the runtime synced, an instance killed seconds
// after a restore of a few keys lost the restore whole — every write since
// it opened fit in the block — and the next start restored everything.)
// After an error the pending writes are gone.
func (t *Task) Commit() error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.db.exit()
	if t.p == nil || t.p.b.Empty() {
		return nil
	}
	b := t.p.b
	var err error
	for k, sp := range t.pending {
		err = errors.Join(err, b.Set([]byte(k), []byte(t.db.opts.ChangelogTopic(sp.name)), nil))
	}
	t.size = min(len(b.Repr()), maxPresize)
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	t.retire()
	if err != nil {
		return fmt.Errorf("engine: state: commit: %w", err)
	}
	clear(t.pending)
	return nil
}

// Discard drops the pending writes and checkpoints, as when a transaction
// aborts; reads then see the last committed state.
func (t *Task) Discard() {
	t.retire()
}

// Close discards the pending state; the task's store views then return
// [topo.ErrStoreClosed]. Closing twice is harmless.
func (t *Task) Close() error {
	t.retire()
	t.closed = true
	return nil
}

// store is a view of one store partition through a task's pending state.
type store struct {
	t      *Task
	name   string
	layout Layout
	// prefix is tagData | name | partition, or, segmented, tagSegData |
	// name | partition | segment length; a key follows it, segmented after
	// its segment.
	prefix  []byte
	end     []byte // PrefixEnd(prefix): every key of the partition is below it
	scratch []byte // reused for full keys; pebble copies them
	closed  bool
}

// newStore returns a view of a store partition through t's pending state.
func (db *DB) newStore(t *Task, name string, partition int32) *store {
	l := db.opts.Layout(name)
	prefix := dataPrefix(name, partition)
	if l.segmented() {
		prefix = segPrefix(name, partition, l.interval())
	} else {
		l = Layout{}
	}
	return &store{t: t, name: name, layout: l, prefix: prefix, end: topo.PrefixEnd(prefix)}
}

var _ topo.KVStore = (*store)(nil)

func (s *store) Name() string { return s.name }

// enter starts an operation; db.exit must follow when it succeeds.
func (s *store) enter() error {
	if err := s.t.db.enter(); err != nil {
		return fmt.Errorf("%w (%w)", topo.ErrStoreClosed, err)
	}
	if s.closed || s.t.closed {
		s.t.db.exit()
		if s.t.closed {
			return fmt.Errorf("%w (%w: task)", topo.ErrStoreClosed, ErrClosed)
		}
		return topo.ErrStoreClosed
	}
	return nil
}

// reader is what reads go to: the pending batch merged with the database,
// or the database alone while nothing is pending (cheaper).
func (s *store) reader() (pebble.Reader, *pending) {
	if p := s.t.p; p != nil && !p.b.Empty() {
		return p.b, p
	}
	return s.t.db.pdb, nil
}

// key is the pebble key of a store key, in s.scratch.
func (s *store) key(k []byte) []byte {
	s.scratch = append(s.scratch[:0], s.prefix...)
	if s.layout.segmented() {
		s.scratch = s.layout.appendPhysical(s.scratch, k)
	} else {
		s.scratch = append(s.scratch, k...)
	}
	return s.scratch
}

func (s *store) Get(key []byte) (topo.Entry, bool, error) {
	if err := s.enter(); err != nil {
		return topo.Entry{}, false, err
	}
	defer s.t.db.exit()
	r, _ := s.reader()
	v, closer, err := r.Get(s.key(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return topo.Entry{}, false, nil
	}
	if err != nil {
		return topo.Entry{}, false, fmt.Errorf("engine: state: get from %q: %w", s.name, err)
	}
	defer closer.Close()
	e, err := decodeEntry(key, v)
	return e, err == nil, err
}

func (s *store) Put(key, value []byte, ts int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.t.db.exit()
	p := s.t.batch()
	k := s.key(key)
	if p.b.Len()+len(k)+len(value)+32 > maxBatchSize {
		return fmt.Errorf("engine: state: store %q: pending writes exceed %d bytes; commit more often", s.name, maxBatchSize)
	}
	return setEntry(p.b, k, value, ts)
}

func (s *store) Delete(key []byte, _ int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.t.db.exit()
	return s.t.batch().b.Delete(s.key(key), nil)
}

// Range iterates [lo, hi) over the pending writes merged with the committed
// state, as of when the loop starts: writes in the loop body are not seen by
// it, and a Commit or Discard in the loop body does not disturb it.
func (s *store) Range(lo, hi []byte) iter.Seq2[topo.Entry, error] {
	if hi != nil && bytes.Compare(lo, hi) >= 0 {
		return func(func(topo.Entry, error) bool) {}
	}
	if s.layout.segmented() {
		return s.rangeSegmented(lo, hi)
	}
	return func(yield func(topo.Entry, error) bool) {
		// Fresh bounds, in one allocation: pebble keeps them for the
		// iterator's life.
		buf := make([]byte, 0, 2*len(s.prefix)+len(lo)+len(hi))
		buf = append(append(buf, s.prefix...), lo...)
		lower, upper := buf[:len(buf):len(buf)], s.end
		if hi != nil {
			upper = append(append(buf[len(buf):], s.prefix...), hi...)
		}
		it, p, err := s.openIter(lower, upper)
		if err != nil || it == nil {
			if err != nil {
				yield(topo.Entry{}, err)
			}
			return
		}
		defer s.closeIter(it, p)
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			var e topo.Entry
			if err == nil {
				e, err = decodeEntry(it.Key()[len(s.prefix):], v)
			}
			if err != nil {
				yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
				return
			}
			if !yield(e, nil) {
				return
			}
		}
		if err := it.Error(); err != nil {
			yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
		}
	}
}

// openIter opens an iterator over the pebble keys in [lower, upper) (which
// pebble keeps: the caller gives them up), nil if the range is empty. The
// pending batch it reads, if any, stays open until closeIter.
func (s *store) openIter(lower, upper []byte) (*pebble.Iterator, *pending, error) {
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	defer s.t.db.exit()
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil, nil
	}
	r, p := s.reader()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, fmt.Errorf("engine: state: range over %q: %w", s.name, err)
	}
	if p != nil {
		p.iters++
	}
	s.t.db.iters.Add(1)
	return it, p, nil
}

func (s *store) closeIter(it *pebble.Iterator, p *pending) {
	_ = it.Close()
	if p != nil {
		p.iters--
		if p.retired && p.iters == 0 {
			_ = p.b.Close()
		}
	}
	s.t.db.iters.Done()
}

// Close closes the view; the task's pending writes stay.
func (s *store) Close() error {
	s.closed = true
	return nil
}
