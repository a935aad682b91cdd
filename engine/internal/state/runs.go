package state

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A run is a restore batch that overlaps what its Restorer has written
// before, kept sorted in a file of the staging directory rather than
// ingested: tables ingested over each other land in level 0, and pebble's
// compactions would merge them again and again (two thirds of a restore's
// CPU for a changelog of keys in random order). The runs are merged once,
// with the last batch, into tables that are ingested together.
//
// A run file is its records in key order, each key once: the key's length
// (uvarint), the value's length plus one, or 0 for a deletion (uvarint),
// the timestamp (varint), the key, the value. Run files are not synced: a
// crash loses them with the records since the checkpoint, which the
// restore applies again; Open empties the staging directory.
type run struct {
	path  string
	bytes int64
}

// Runs are merged once they hold maxRunBytes (the records a crash would
// make the restore fetch again) or number maxRuns (the files the merge
// reads at once).
const maxRunBytes = 1 << 30

var maxRuns = 128 // a variable for tests

// tableBytes is the size at which a merge starts a new table, so that
// pebble's compactions later rewrite no more than one at a time.
const tableBytes = 64 << 20

// bytesPerSync is how much of a table is written before its writeback
// starts: pebble's default for its own tables.
const bytesPerSync = 512 << 10

// runBuffer is each run file's read and write buffer: a merge of maxRuns
// runs reads through 4 MiB.
const runBuffer = 32 << 10

// writeRun writes the sorted records of recs (r.order) as a run.
func (r *Restorer) writeRun(recs *batch) (err error) {
	path := filepath.Join(r.db.ingestDir, fmt.Sprintf("%d.run", r.db.ingests.Add(1)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	w := bufio.NewWriterSize(f, runBuffer)
	var head [3 * binary.MaxVarintLen64]byte
	var size int64
	for _, o := range r.order {
		rec := &recs.recs[o.i]
		vlen := uint64(0)
		if !rec.del {
			vlen = uint64(rec.vlen) + 1
		}
		n := binary.PutUvarint(head[:], uint64(rec.klen))
		n += binary.PutUvarint(head[n:], vlen)
		n += binary.PutVarint(head[n:], rec.ts)
		// A write error stays in w and comes back from Flush.
		_, _ = w.Write(head[:n])
		_, _ = w.Write(recs.key(o.i))
		_, _ = w.Write(recs.value(o.i))
		size += int64(n) + int64(rec.klen) + int64(rec.vlen)
	}
	if err = errors.Join(w.Flush(), f.Close()); err != nil {
		return err
	}
	r.runs = append(r.runs, run{path: path, bytes: size})
	return nil
}

// runBytes is what the pending runs hold.
func (r *Restorer) runBytes() int64 {
	var n int64
	for _, rn := range r.runs {
		n += rn.bytes
	}
	return n
}

// dropRuns deletes the pending runs: their records are fetched again.
func (r *Restorer) dropRuns() {
	for _, rn := range r.runs {
		_ = os.Remove(rn.path)
	}
	r.runs = r.runs[:0]
}

// source is one sorted input of a merge: a run file or the last batch.
type source struct {
	age   int // later sources win a key
	key   []byte
	value []byte
	del   bool
	ts    int64
	// next reads the next record into the fields above; false at the end.
	next func() (bool, error)
}

// runSource reads a run file.
func runSource(path string, age int) (*source, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	rd := bufio.NewReaderSize(f, runBuffer)
	s := &source{age: age}
	s.next = func() (bool, error) {
		klen, err := binary.ReadUvarint(rd)
		if err == io.EOF {
			return false, nil
		}
		vlen, err1 := binary.ReadUvarint(rd)
		ts, err2 := binary.ReadVarint(rd)
		if err = errors.Join(err, err1, err2); err != nil {
			return false, fmt.Errorf("run %s: %w", path, err)
		}
		s.del = vlen == 0
		s.ts = ts
		s.key = slices.Grow(s.key[:0], int(klen))[:klen]
		s.value = slices.Grow(s.value[:0], int(max(vlen, 1)-1))[:max(vlen, 1)-1]
		if _, err := io.ReadFull(rd, s.key); err != nil {
			return false, fmt.Errorf("run %s: %w", path, err)
		}
		if _, err := io.ReadFull(rd, s.value); err != nil {
			return false, fmt.Errorf("run %s: %w", path, err)
		}
		return true, nil
	}
	return s, f, nil
}

// batchSource reads the sorted records of recs (r.order).
func (r *Restorer) batchSource(recs *batch, age int) *source {
	s := &source{age: age}
	i := 0
	s.next = func() (bool, error) {
		if i == len(r.order) {
			return false, nil
		}
		o := r.order[i]
		i++
		rec := &recs.recs[o.i]
		s.key, s.value, s.del, s.ts = recs.key(o.i), recs.value(o.i), rec.del, rec.ts
		return true, nil
	}
	return s
}

// mergeHeap orders sources by their current key, the latest first among
// equal keys.
type mergeHeap []*source

func (h mergeHeap) less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].age > h[j].age
}

func (h mergeHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// mergeRuns merges the pending runs and the sorted records of recs (nil:
// none), each key's latest record, into tables that pebble ingests
// together; the runs are then deleted.
func (r *Restorer) mergeRuns(recs *batch) (err error) {
	if len(r.runs) == 0 && recs != nil {
		return r.ingestBatch(recs)
	}
	defer r.dropRuns()
	var h mergeHeap
	for i, rn := range r.runs {
		s, c, err := runSource(rn.path, i)
		if err != nil {
			return err
		}
		defer c.Close()
		h = append(h, s)
	}
	if recs != nil {
		h = append(h, r.batchSource(recs, len(r.runs)))
	}
	live := h[:0]
	for _, s := range h {
		ok, err := s.next()
		if err != nil {
			return err
		}
		if ok {
			live = append(live, s)
		}
	}
	h = live
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	t := r.newTables()
	defer t.abort()
	var last []byte
	first := true
	for len(h) > 0 {
		s := h[0]
		if first || !bytes.Equal(s.key, last) {
			if err := t.add(s.key, s.value, s.del, s.ts); err != nil {
				return err
			}
			last = append(last[:0], s.key...)
			first = false
		}
		ok, err := s.next()
		if err != nil {
			return err
		}
		if !ok {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		h.down(0)
	}
	if err := t.ingest(); err != nil {
		return err
	}
	if !first {
		r.wrote(last)
	}
	return nil
}

// ingestBatch writes the sorted records of recs as tables that pebble
// ingests.
func (r *Restorer) ingestBatch(recs *batch) error {
	if len(r.order) == 0 {
		return nil
	}
	t := r.newTables()
	defer t.abort()
	for _, o := range r.order {
		rec := &recs.recs[o.i]
		if err := t.add(recs.key(o.i), recs.value(o.i), rec.del, rec.ts); err != nil {
			return err
		}
	}
	if err := t.ingest(); err != nil {
		return err
	}
	r.wrote(recs.key(r.order[len(r.order)-1].i))
	return nil
}

// wrote records that the store now holds key, written by this Restorer:
// a batch whose keys all sort after the largest such key overlaps nothing
// it wrote.
func (r *Restorer) wrote(key []byte) {
	if r.hi == nil || bytes.Compare(key, r.hi) > 0 {
		r.hi = append(r.hi[:0], key...)
	}
}

// tables writes sorted records as tables of about tableBytes each, for
// pebble to ingest together.
type tables struct {
	r     *Restorer
	w     *sstable.Writer
	paths []string
}

func (r *Restorer) newTables() *tables { return &tables{r: r} }

// add writes a record; its key sorts after the previous one's.
func (t *tables) add(key, value []byte, del bool, ts int64) error {
	if t.w != nil && t.w.Raw().EstimatedSize() >= tableBytes {
		if err := t.w.Close(); err != nil {
			t.w = nil
			return err
		}
		t.w = nil
	}
	if t.w == nil {
		path := filepath.Join(t.r.db.ingestDir, fmt.Sprintf("%d.sst", t.r.db.ingests.Add(1)))
		f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		// Written back as it goes, as pebble's own tables are, so that
		// the sync Ingest requires does not wait for the whole table.
		f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: bytesPerSync})
		t.paths = append(t.paths, path)
		t.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), t.r.db.tableOpts)
	}
	r := t.r
	r.scratch = append(append(r.scratch[:0], r.prefix...), key...)
	if del {
		return t.w.Delete(r.scratch)
	}
	r.value = appendEntry(r.value[:0], value, ts)
	return t.w.Set(r.scratch, r.value)
}

// ingest closes the last table (its index and footer written and the file
// synced, as Ingest requires) and has pebble ingest them all.
func (t *tables) ingest() error {
	if t.w != nil {
		err := t.w.Close()
		t.w = nil
		if err != nil {
			return err
		}
	}
	if len(t.paths) == 0 {
		return nil
	}
	return t.r.db.pdb.Ingest(context.Background(), t.paths)
}

// abort closes a table left open and deletes the files: linked into the
// database by Ingest, or never used, these names go either way.
func (t *tables) abort() {
	if t.w != nil {
		_ = t.w.Close()
	}
	for _, p := range t.paths {
		_ = os.Remove(p)
	}
}
