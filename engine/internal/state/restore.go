package state

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Restorer writes a changelog's records into one store partition directly,
// without a Task, in batches of at most Options.RestoreBatchSize bytes. Each
// batch carries the checkpoint of the records in it, so an interrupted
// restore resumes after the last batch written and never re-applies or
// skips a record.
//
// A Restorer is used by one goroutine at a time. No Task may write the same
// store partition while it restores.
type Restorer struct {
	db        *DB
	store     string
	partition int32
	topic     string
	prefix    []byte
	b         *pebble.Batch // nil when nothing is pending
	next      int64         // checkpoint to write: the offset after the last record applied
	committed int64         // the checkpoint in the database
	scratch   []byte
	closed    bool
}

// Restorer starts restoring a store partition from its changelog topic
// (Options.ChangelogTopic), at its committed checkpoint, or at 0 without
// one.
func (db *DB) Restorer(store string, partition int32) (*Restorer, error) {
	topic := db.opts.ChangelogTopic(store)
	off, _, err := db.Checkpoint(topic, partition)
	if err != nil {
		return nil, err
	}
	return &Restorer{db: db, store: store, partition: partition, topic: topic, prefix: dataPrefix(store, partition), next: off, committed: off}, nil
}

// Topic is the changelog topic the Restorer reads.
func (r *Restorer) Topic() string { return r.topic }

// Position is the offset the next record must have at least: the committed
// checkpoint, or the offset after the last record applied.
func (r *Restorer) Position() int64 { return r.next }

// Apply writes one changelog record at offset: a nil value deletes the key.
// Offsets must grow; a gap (compaction, transaction markers) is fine.
func (r *Restorer) Apply(offset int64, key, value []byte, ts int64) error {
	if r.closed {
		return ErrClosed
	}
	if offset < r.next {
		return fmt.Errorf("engine: state: restore %s/%d: record at offset %d is behind position %d", r.topic, r.partition, offset, r.next)
	}
	if err := r.db.enter(); err != nil {
		return err
	}
	defer r.db.exit()
	if r.b == nil {
		r.b = r.db.pdb.NewBatch()
	}
	r.scratch = append(append(r.scratch[:0], r.prefix...), key...)
	var err error
	if value == nil {
		err = r.b.Delete(r.scratch, nil)
	} else {
		err = setEntry(r.b, r.scratch, value, ts)
	}
	if err != nil {
		return fmt.Errorf("engine: state: restore %s/%d: %w", r.topic, r.partition, err)
	}
	r.next = offset + 1
	if r.b.Len() >= r.db.opts.RestoreBatchSize {
		return r.commit()
	}
	return nil
}

// Flush commits the records applied so far with checkpoint next, the
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
	return r.commit()
}

// commit writes the pending batch with its checkpoint; the caller is inside
// db.enter.
func (r *Restorer) commit() error {
	if r.b == nil && r.next == r.committed {
		return nil
	}
	if r.b == nil {
		r.b = r.db.pdb.NewBatch()
	}
	b := r.b
	r.b = nil
	defer b.Close()
	err := errors.Join(
		b.Set(checkpointKey(r.topic, r.partition), encodeOffset(r.next), nil),
		b.Set(storeKey(r.store, r.partition), []byte(r.topic), nil),
	)
	if err == nil {
		// NoSync, as Task.Commit: a lost batch is replayed from the changelog.
		err = b.Commit(pebble.NoSync)
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
	if r.b == nil {
		return nil
	}
	if err := r.db.enter(); err != nil {
		r.b = nil
		return err
	}
	defer r.db.exit()
	return r.commit()
}
