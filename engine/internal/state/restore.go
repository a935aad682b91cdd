package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Restorer writes a changelog's records into one store partition directly,
// without a Task, in batches of at most Options.RestoreBatchSize bytes of
// records applied. What is written carries the checkpoint of the records
// in it, so an interrupted restore resumes after the last records written
// and never skips one.
//
// A batch writes each key's last record only: a store is a map, so a key's
// last write (a value with its timestamp, or a deletion) leaves it as all
// its writes in order would. A changelog not yet compacted holds every
// update of a busy key (an aggregate's every update, with no record cache),
// and writing each of them into pebble was most of a restore's time.
//
// A full batch is sorted and written as a table that pebble ingests, with
// no write-ahead log, memtable or flush, where its keys follow everything
// the Restorer wrote before: a changelog in key order lands at the bottom
// of the tree, table after table. A batch whose keys overlap what came
// before (a compacted changelog holds its keys in the order of their last
// updates, and every batch spans the store) is kept sorted in a run file
// aside instead, and the runs are merged once, with the last batch, into
// tables ingested together (runs.go): ingested over each other, the tables
// would land in level 0 and pebble's compactions merge them again and
// again. The first full batch is a run too, until the next shows which
// order the changelog is in. The checkpoint moves with each table written
// or merge, at least every maxRunBytes of runs; a crash in between loses
// the runs, and the restore fetches their records again.
//
// A batch is written on a goroutine of its own while the caller goes on
// fetching and applying the next one (one batch in flight: Apply waits for
// the previous one before it hands over the next). A smaller batch (the
// last one, a standby's few records) with no runs kept is an ordinary
// write. If the process dies between a table's ingestion and its
// checkpoint, the restore resumes at the previous checkpoint and writes
// the same keys again, last values last: a map's state is the same.
//
// The open Restorers of a DB share Options.RestoreBatchSize: each batches
// its share, so that restoring many partitions at once takes no more memory
// than one.
//
// A Restorer is used by one goroutine at a time. No Task may write the same
// store partition while it restores.
type Restorer struct {
	db        *DB
	store     string
	partition int32
	topic     string
	prefix    []byte
	layout    Layout
	// The pending batch: the records applied since the last batch handed
	// over, in order.
	cur       batch
	spare     batch  // a written batch's buffers, for the next one
	next      int64  // checkpoint to write: the offset after the last record applied
	committed int64  // the checkpoint in the database
	seg       []byte // Apply's, for a segmented key
	// inflight is the batch being written, nil if none. The fields below
	// it are the writer's: the goroutine's while a batch is in flight.
	inflight *batchWrite
	scratch  []byte
	value    []byte    // an ingested record's stored value
	order    []sortKey // the batch's records, sorted
	runs     []run     // batches kept sorted aside, not yet ingested
	hi       []byte    // the largest key written, or in runs; nil: none
	// bulk is whether a full batch was handed over since the last
	// commit: a restore under way, not a standby following its changelog.
	bulk   bool
	closed bool
}

// batchWrite is a batch written on its own goroutine.
type batchWrite struct {
	b    batch
	next int64 // its checkpoint
	done chan struct{}
	// Set before done closes: whether the checkpoint was written (not if
	// the batch went to a run), and the error.
	checkpointed bool
	err          error
}

// batch is records copied into one buffer: the caller's fetched records go
// as soon as they are applied, and the collector, which would scan a
// pointer to each key and value for as long as a batch fills, finds none.
type batch struct {
	buf  []byte
	recs []pendingRecord
}

// pendingRecord is a record of a batch: its key at buf[off:off+klen], its
// value right after it.
type pendingRecord struct {
	off, klen, vlen uint32
	del             bool // a deletion (a nil value)
	ts              int64
}

func (b *batch) add(key, value []byte, ts int64) {
	b.recs = append(b.recs, pendingRecord{off: uint32(len(b.buf)), klen: uint32(len(key)), vlen: uint32(len(value)), del: value == nil, ts: ts})
	b.buf = append(append(b.buf, key...), value...)
}

func (b *batch) key(i uint32) []byte {
	r := &b.recs[i]
	return b.buf[r.off : r.off+r.klen]
}

func (b *batch) value(i uint32) []byte {
	r := &b.recs[i]
	return b.buf[r.off+r.klen : r.off+r.klen+r.vlen]
}

func (b *batch) reset() { b.buf, b.recs = b.buf[:0], b.recs[:0] }

// size is what the batch counts for against the batch size: its keys and
// values and recordOverhead a record.
func (b *batch) size() int { return len(b.buf) + recordOverhead*len(b.recs) }

// sortKey is a pending record's place in the sorted order.
type sortKey struct {
	hi, lo uint64 // the key's 16 bytes after the batch's common prefix
	i      uint32 // its index in recs
}

// keyHead is the 16 bytes of key from skip on as two big-endian numbers,
// zero-padded: keys that share their first skip bytes compare as their
// heads do, unless the heads are equal.
func keyHead(key []byte, skip int) (hi, lo uint64) {
	var b [16]byte
	copy(b[:], key[skip:])
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// commonPrefix is the length of the prefix that every key of recs shares.
func (b *batch) commonPrefix() int {
	if len(b.recs) == 0 {
		return 0
	}
	first := b.key(0)
	n := len(first)
	for i := 1; i < len(b.recs) && n > 0; i++ {
		k := b.key(uint32(i))
		n = min(n, len(k))
		for j := range n {
			if k[j] != first[j] {
				n = j
				break
			}
		}
	}
	return n
}

// recordOverhead is what a pending record counts for besides its bytes.
const recordOverhead = 48

// minIngestBytes is the least batch written as a table rather than through
// the write-ahead log and memtable: below it, a table's fixed costs (its
// file, index, filter and the version edit) outweigh the writes it saves.
const minIngestBytes = 1 << 20

// Restorer starts restoring a store partition from its changelog topic
// (Options.ChangelogTopic), at its committed checkpoint, or at 0 without
// one.
func (db *DB) Restorer(store string, partition int32) (*Restorer, error) {
	topic := db.opts.ChangelogTopic(store)
	off, _, err := db.Checkpoint(topic, partition)
	if err != nil {
		return nil, err
	}
	db.restorers.Add(1)
	r := &Restorer{db: db, store: store, partition: partition, topic: topic, prefix: dataPrefix(store, partition), next: off, committed: off}
	if l := db.opts.Layout(store); l.segmented() {
		// Records are kept (and sorted, and written) by their keys after
		// the prefix: segment, then key.
		r.layout, r.prefix = l, segPrefix(store, partition, l.interval())
	}
	return r, nil
}

// restoreBatch is the batch size of each open Restorer: the DB's
// Options.RestoreBatchSize shared among them, so that their batches, each
// filling while the previous one is written, hold at most twice it
// together; a megabyte at least (or all of it, if less).
func (db *DB) restoreBatch() int {
	size := db.opts.RestoreBatchSize
	return max(min(minIngestBytes, size), size/int(max(1, db.restorers.Load())))
}

// Topic is the changelog topic the Restorer reads.
func (r *Restorer) Topic() string { return r.topic }

// Position is the offset the next record must have at least: the committed
// checkpoint, or the offset after the last record applied.
func (r *Restorer) Position() int64 { return r.next }

// Apply writes one changelog record at offset: a nil value deletes the key.
// Offsets must grow; a gap (compaction, transaction markers) is fine. The
// Restorer copies key and value. An error may be the previous batch's.
func (r *Restorer) Apply(offset int64, key, value []byte, ts int64) error {
	if r.closed {
		return ErrClosed
	}
	if offset < r.next {
		return fmt.Errorf("engine: state: restore %s/%d: record at offset %d is behind position %d", r.topic, r.partition, offset, r.next)
	}
	if r.layout.segmented() {
		r.seg = r.layout.appendPhysical(r.seg[:0], key)
		key = r.seg
	}
	r.cur.add(key, value, ts)
	r.next = offset + 1
	if r.cur.size() < r.db.restoreBatch() {
		return nil
	}
	if err := r.wait(); err != nil {
		return err
	}
	if r.cur.size() < minIngestBytes {
		return r.commit(pebble.NoSync) // too small to be worth a table, or a goroutine
	}
	w := &batchWrite{b: r.cur, next: r.next, done: make(chan struct{})}
	r.cur, r.spare, r.inflight, r.bulk = r.spare, batch{}, w, true
	r.cur.reset()
	go func() {
		defer close(w.done)
		if w.err = r.db.enter(); w.err == nil {
			w.checkpointed, w.err = r.write(&w.b, w.next, pebble.NoSync, false)
			r.db.exit()
		}
	}()
	return nil
}

// wait waits for the batch in flight, if any, and takes its result.
func (r *Restorer) wait() error {
	w := r.inflight
	if w == nil {
		return nil
	}
	<-w.done
	r.inflight = nil
	r.spare = w.b
	if w.err != nil {
		// The records applied since are not written either: resume where
		// the database is.
		r.cur.reset()
		r.dropRuns()
		r.next = r.committed
		return w.err
	}
	if w.checkpointed {
		r.committed = w.next
	}
	return nil
}

// Flush commits, and syncs, the records applied so far with checkpoint next, the
// consumer's position on the changelog partition: at least the offset after
// the last record applied, and beyond it when the fetch stepped over
// transaction markers or compacted offsets.
func (r *Restorer) Flush(next int64) error {
	if r.closed {
		return ErrClosed
	}
	if next < r.next {
		return fmt.Errorf("engine: state: restore %s/%d: position %d is behind the last record applied (%d)", r.topic, r.partition, next, r.next-1)
	}
	if err := r.wait(); err != nil {
		return err
	}
	r.next = next
	return r.commit(pebble.Sync)
}

// commit writes the pending batch with its checkpoint, on the caller's
// goroutine; no batch is in flight.
func (r *Restorer) commit(sync *pebble.WriteOptions) error {
	if len(r.cur.recs) == 0 && len(r.runs) == 0 && r.next == r.committed {
		return nil
	}
	err := r.db.enter()
	if err == nil {
		_, err = r.write(&r.cur, r.next, sync, true)
		r.db.exit()
	}
	r.cur.reset()
	r.bulk = false
	if err != nil {
		r.dropRuns()
		r.next = r.committed // the records are gone; resume where the database is
		return err
	}
	r.committed = r.next
	return nil
}

// write writes a batch's records, each key's last, and the checkpoint
// next after them; the caller is inside db.enter. It reports whether it
// wrote the checkpoint: a full batch (not final) that overlaps what the
// Restorer wrote before, or the first one, goes to a run instead, and the
// checkpoint waits for the merge. A final batch (Flush, Close) is merged
// with the runs, written as a table if large enough, or written through
// the write-ahead log and memtable.
func (r *Restorer) write(recs *batch, next int64, sync *pebble.WriteOptions, final bool) (bool, error) {
	r.sort(recs)
	big := recs.size() >= minIngestBytes && len(r.order) > 0
	b := r.db.pdb.NewBatch()
	defer b.Close()
	var err error
	switch {
	case !final && big:
		switch {
		case r.after(recs):
			// After everything written and in runs: keys come in order, and
			// the batch overlaps nothing it could go below.
			err = r.mergeRuns(recs)
		case len(r.runs)+1 < maxRuns && r.runBytes()+int64(recs.size()) < maxRunBytes:
			r.wrote(recs.key(r.order[len(r.order)-1].i))
			return false, r.writeRun(recs)
		default:
			// Enough runs: a crash would fetch no more than these again.
			err = r.mergeRuns(recs)
		}
	case len(r.runs) > 0 || big || r.bulk && r.after(recs):
		// The last batch of a restore goes where the tables before it
		// went. Through the memtable, the last records of every partition
		// restored would be flushed into one level 0 table that spans
		// them all, and its compaction would rewrite every table between.
		err = r.mergeRuns(recs)
	default:
		err = r.addTo(b, recs)
	}
	if err == nil {
		err = errors.Join(
			b.Set(checkpointKey(r.topic, r.partition), encodeOffset(next), nil),
			b.Set(storeKey(r.store, r.partition), []byte(r.topic), nil),
		)
	}
	if err == nil {
		// A lost batch is replayed from the changelog; Flush syncs.
		err = b.Commit(sync)
	}
	if err != nil {
		return false, fmt.Errorf("engine: state: restore %s/%d: %w", r.topic, r.partition, err)
	}
	return true, nil
}

// after reports whether the sorted records of recs all follow the keys the
// Restorer wrote before (and there are some of each): as a table, they
// would overlap nothing of it.
func (r *Restorer) after(recs *batch) bool {
	return r.hi != nil && len(r.order) > 0 && bytes.Compare(recs.key(r.order[0].i), r.hi) > 0
}

// addTo adds the sorted records to b, a batch written through the
// write-ahead log and memtable.
func (r *Restorer) addTo(b *pebble.Batch, recs *batch) error {
	for _, o := range r.order {
		r.scratch = append(append(r.scratch[:0], r.prefix...), recs.key(o.i)...)
		var err error
		if rec := &recs.recs[o.i]; rec.del {
			err = b.Delete(r.scratch, nil)
		} else {
			err = setEntry(b, r.scratch, recs.value(o.i), rec.ts)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sort orders recs by key into r.order, each key's last record only.
func (r *Restorer) sort(recs *batch) {
	// The records' indexes, each with 16 bytes of its key after the
	// prefix all keys share: keys of one kind ("order-17", a window
	// store's segment) differ only after it. The heads decide most
	// comparisons without reading the keys, scattered over the batch's
	// buffer; a key's records stay in the order applied.
	skip := recs.commonPrefix()
	r.order = r.order[:0]
	for i := range recs.recs {
		hi, lo := keyHead(recs.key(uint32(i)), skip)
		r.order = append(r.order, sortKey{hi, lo, uint32(i)})
	}
	slices.SortFunc(r.order, func(a, b sortKey) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lo, b.lo); c != 0 {
			return c
		}
		if c := bytes.Compare(recs.key(a.i), recs.key(b.i)); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	last := r.order[:0]
	for k, o := range r.order {
		if k+1 < len(r.order) {
			n := r.order[k+1]
			if o.hi == n.hi && o.lo == n.lo && bytes.Equal(recs.key(o.i), recs.key(n.i)) {
				continue // a later record of the same key follows
			}
		}
		last = append(last, o)
	}
	r.order = last
}

// Close waits for the batch in flight, commits the records applied since
// (unless runs are kept: then those records go, and a restore resumes at
// the checkpoint), then releases the Restorer.
func (r *Restorer) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	defer r.db.restorers.Add(-1)
	if err := r.wait(); err != nil {
		return err
	}
	if len(r.runs) > 0 {
		// Merging up to maxRunBytes would hold up whoever closes (a
		// rebalance revoking the task): the records since the checkpoint
		// go, runs and all, and a restore resumes at the checkpoint.
		r.dropRuns()
		r.cur.reset()
		r.next = r.committed
		return nil
	}
	if len(r.cur.recs) == 0 {
		return nil
	}
	return r.commit(pebble.NoSync)
}
