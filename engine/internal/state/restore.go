package state

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Restorer writes a changelog's records into one store partition directly,
// without a Task, in batches of at most Options.RestoreBatchSize bytes of
// records applied. Each batch carries the checkpoint of the records in it,
// so an interrupted restore resumes after the last batch written and never
// re-applies or skips a record.
//
// A batch writes each key's last record only: a store is a map, so a key's
// last write (a value with its timestamp, or a deletion) leaves it as all
// its writes in order would. A changelog not yet compacted holds every
// update of a busy key (an aggregate's every update, with no record cache),
// and writing each of them into pebble was most of a restore's time.
//
// A Restorer is used by one goroutine at a time. No Task may write the same
// store partition while it restores.
type Restorer struct {
	db        *DB
	store     string
	partition int32
	topic     string
	prefix    []byte
	// The pending batch: each key's last record, in recs (its index in
	// pending), and the bytes of every record applied since the last
	// commit. Keys and values are the caller's, kept until the commit.
	pending   map[string]int
	recs      []pendingRecord
	bytes     int
	next      int64 // checkpoint to write: the offset after the last record applied
	committed int64 // the checkpoint in the database
	scratch   []byte
	closed    bool
}

// pendingRecord is a key's last record in the pending batch.
type pendingRecord struct {
	key, value []byte // value nil: a deletion
	ts         int64
}

// recordOverhead is what a pending record counts for besides its bytes.
const recordOverhead = 48

// Restorer starts restoring a store partition from its changelog topic
// (Options.ChangelogTopic), at its committed checkpoint, or at 0 without
// one.
func (db *DB) Restorer(store string, partition int32) (*Restorer, error) {
	topic := db.opts.ChangelogTopic(store)
	off, _, err := db.Checkpoint(topic, partition)
	if err != nil {
		return nil, err
	}
	return &Restorer{db: db, store: store, partition: partition, topic: topic, prefix: dataPrefix(store, partition), pending: map[string]int{}, next: off, committed: off}, nil
}

// Topic is the changelog topic the Restorer reads.
func (r *Restorer) Topic() string { return r.topic }

// Position is the offset the next record must have at least: the committed
// checkpoint, or the offset after the last record applied.
func (r *Restorer) Position() int64 { return r.next }

// Apply writes one changelog record at offset: a nil value deletes the key.
// Offsets must grow; a gap (compaction, transaction markers) is fine. The
// Restorer keeps key and value until the batch is committed: the caller
// must not change them.
func (r *Restorer) Apply(offset int64, key, value []byte, ts int64) error {
	if r.closed {
		return ErrClosed
	}
	if offset < r.next {
		return fmt.Errorf("engine: state: restore %s/%d: record at offset %d is behind position %d", r.topic, r.partition, offset, r.next)
	}
	rec := pendingRecord{key: key, value: value, ts: ts}
	if i, ok := r.pending[string(key)]; ok {
		r.recs[i] = rec
	} else {
		r.pending[string(key)] = len(r.recs)
		r.recs = append(r.recs, rec)
	}
	r.next = offset + 1
	r.bytes += len(key) + len(value) + recordOverhead
	if r.bytes < r.db.opts.RestoreBatchSize {
		return nil
	}
	if err := r.db.enter(); err != nil {
		return err
	}
	defer r.db.exit()
	return r.commit(pebble.NoSync)
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
	r.next = next
	if err := r.db.enter(); err != nil {
		return err
	}
	defer r.db.exit()
	return r.commit(pebble.Sync)
}

// commit writes the pending batch with its checkpoint; the caller is inside
// db.enter.
func (r *Restorer) commit(sync *pebble.WriteOptions) error {
	if len(r.recs) == 0 && r.next == r.committed {
		return nil
	}
	b := r.db.pdb.NewBatch()
	defer b.Close()
	var err error
	for _, rec := range r.recs {
		r.scratch = append(append(r.scratch[:0], r.prefix...), rec.key...)
		if rec.value == nil {
			err = b.Delete(r.scratch, nil)
		} else {
			err = setEntry(b, r.scratch, rec.value, rec.ts)
		}
		if err != nil {
			break
		}
	}
	clear(r.pending)
	clear(r.recs) // let the records' buffers go
	r.recs, r.bytes = r.recs[:0], 0
	if err == nil {
		err = errors.Join(
			b.Set(checkpointKey(r.topic, r.partition), encodeOffset(r.next), nil),
			b.Set(storeKey(r.store, r.partition), []byte(r.topic), nil),
		)
	}
	if err == nil {
		// A lost batch is replayed from the changelog; Flush syncs.
		err = b.Commit(sync)
	}
	if err != nil {
		r.next = r.committed // the records are gone; resume where the database is
		return fmt.Errorf("engine: state: restore %s/%d: %w", r.topic, r.partition, err)
	}
	r.committed = r.next
	return nil
}

// Close commits the records applied since the last batch, then releases the
// Restorer.
func (r *Restorer) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if len(r.recs) == 0 {
		return nil
	}
	if err := r.db.enter(); err != nil {
		return err
	}
	defer r.db.exit()
	return r.commit(pebble.NoSync)
}
