package state_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// openDB opens a DB that is closed, and checked for leaks (pebble reports
// open iterators), at the end of the test.
func openDB(t testing.TB, dir string, opts state.Options) *state.DB {
	t.Helper()
	db, err := state.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

func mustPut(t testing.TB, s topo.KVStore, key, value string, ts int64) {
	t.Helper()
	if err := s.Put([]byte(key), []byte(value), ts); err != nil {
		t.Fatal(err)
	}
}

// value returns the key's value, or "<absent>".
func value(t testing.TB, s topo.KVStore, key string) string {
	t.Helper()
	e, ok, err := s.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "<absent>"
	}
	return string(e.Value)
}

// dump renders a store as k=v pairs in range order.
func dump(t testing.TB, s topo.KVStore) string {
	t.Helper()
	var b []string
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, fmt.Sprintf("%s=%s", e.Key, e.Value))
	}
	return strings.Join(b, " ")
}

func checkpoint(t testing.TB, db *state.DB, topic string, p int32) string {
	t.Helper()
	off, ok, err := db.Checkpoint(topic, p)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "none"
	}
	return fmt.Sprint(off)
}

func TestCommitDiscardReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	task := db.Task()
	s := task.Store("counts", 0)
	mustPut(t, s, "a", "1", 1)
	mustPut(t, s, "b", "2", 2)
	if err := task.SetCheckpoint("counts-changelog", 0, 2); err != nil {
		t.Fatal(err)
	}
	// Pending: the task sees its writes, nobody else does, no checkpoint yet.
	other := db.Task().Store("counts", 0)
	if got := dump(t, s); got != "a=1 b=2" {
		t.Fatalf("task's own view before Commit = %q", got)
	}
	if got := dump(t, other); got != "" {
		t.Fatalf("another task sees uncommitted writes: %q", got)
	}
	if got := checkpoint(t, db, "counts-changelog", 0); got != "none" {
		t.Fatalf("checkpoint before Commit = %s", got)
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, other); got != "a=1 b=2" {
		t.Fatalf("after Commit, another task sees %q", got)
	}
	if got := checkpoint(t, db, "counts-changelog", 0); got != "2" {
		t.Fatalf("checkpoint after Commit = %s", got)
	}

	// Discard drops writes and checkpoint together.
	mustPut(t, s, "a", "10", 3)
	if err := s.Delete([]byte("b"), 3); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "c", "3", 3)
	if err := task.SetCheckpoint("counts-changelog", 0, 5); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, s); got != "a=10 c=3" {
		t.Fatalf("pending overwrite and delete: %q", got)
	}
	task.Discard()
	if got := dump(t, s); got != "a=1 b=2" {
		t.Fatalf("after Discard the task sees %q", got)
	}
	if got := checkpoint(t, db, "counts-changelog", 0); got != "2" {
		t.Fatalf("checkpoint after Discard = %s", got)
	}

	// The store view still works after Discard; a commit with nothing
	// pending is a no-op.
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "d", "4", 4)
	if err := task.SetCheckpoint("counts-changelog", 0, 6); err != nil {
		t.Fatal(err)
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	// Left pending at close: lost.
	mustPut(t, s, "e", "5", 5)
	if err := task.SetCheckpoint("counts-changelog", 0, 7); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openDB(t, dir, state.Options{})
	s = db.Task().Store("counts", 0)
	if got := dump(t, s); got != "a=1 b=2 d=4" {
		t.Fatalf("after reopen: %q", got)
	}
	if e, _, _ := s.Get([]byte("d")); e.Timestamp != 4 {
		t.Fatalf("timestamp after reopen = %d", e.Timestamp)
	}
	if got := checkpoint(t, db, "counts-changelog", 0); got != "6" {
		t.Fatalf("checkpoint after reopen = %s", got)
	}
}

// A crash-like stop: the process goes away with a pending batch (the DB is
// closed without committing it, as the batch lives only in memory).
func TestCrashLosesPendingOnly(t *testing.T) {
	dir := t.TempDir()
	db, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	task := db.Task()
	s := task.Store("agg", 3)
	for i := range 100 {
		mustPut(t, s, fmt.Sprintf("k%03d", i), "committed", int64(i))
	}
	if err := task.SetCheckpoint("agg-changelog", 3, 100); err != nil {
		t.Fatal(err)
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		mustPut(t, s, fmt.Sprintf("k%03d", i), "pending", int64(i))
	}
	if err := task.SetCheckpoint("agg-changelog", 3, 300); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The task's views are closed with the DB.
	if err := s.Put([]byte("x"), nil, 0); !errors.Is(err, topo.ErrStoreClosed) || !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Put after DB Close: %v", err)
	}
	if err := task.Commit(); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Commit after DB Close: %v", err)
	}

	db = openDB(t, dir, state.Options{})
	s = db.Task().Store("agg", 3)
	n := 0
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Value) != "committed" {
			t.Fatalf("%s = %s after the crash", e.Key, e.Value)
		}
		n++
	}
	if n != 100 {
		t.Fatalf("%d keys after the crash, want 100", n)
	}
	if got := checkpoint(t, db, "agg-changelog", 3); got != "100" {
		t.Fatalf("checkpoint after the crash = %s, want 100", got)
	}
}

func TestStoresAndPartitionsIsolated(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{})
	t0, t1 := db.Task(), db.Task()
	a0, b0 := t0.Store("a", 0), t0.Store("b", 0)
	a1, b1 := t1.Store("a", 1), t1.Store("b", 1)
	for _, s := range []struct {
		kv   topo.KVStore
		name string
	}{{a0, "a0"}, {b0, "b0"}, {a1, "a1"}, {b1, "b1"}} {
		mustPut(t, s.kv, "k", s.name, 1)
		mustPut(t, s.kv, s.name, s.name, 1)
	}
	if err := t0.Commit(); err != nil {
		t.Fatal(err)
	}
	// t1 is pending; committed and pending neighbours must not show.
	for _, c := range []struct {
		kv   topo.KVStore
		want string
	}{{a0, "a0=a0 k=a0"}, {b0, "b0=b0 k=b0"}, {a1, "a1=a1 k=a1"}, {b1, "b1=b1 k=b1"}} {
		if got := dump(t, c.kv); got != c.want {
			t.Errorf("%s: %q, want %q", c.kv.Name(), got, c.want)
		}
	}
	if got := value(t, a0, "a1"); got != "<absent>" {
		t.Errorf("a/0 sees a/1's key: %s", got)
	}
	if got := dump(t, db.Task().Store("a", 1)); got != "" {
		t.Errorf("t1's pending writes are visible elsewhere: %q", got)
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, db.Task().Store("b", 1)); got != "b1=b1 k=b1" {
		t.Errorf("b/1 after commit: %q", got)
	}
}

func TestWipe(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{})
	task := db.Task()
	for p := range int32(2) {
		for _, name := range []string{"s", "s2"} {
			s := task.Store(name, p)
			for i := range 50 {
				mustPut(t, s, fmt.Sprintf("k%d", i), "v", 1)
			}
			if err := task.SetCheckpoint(name+"-changelog", p, 50); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := task.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Wipe("s", 1); err != nil {
		t.Fatal(err)
	}
	fresh := db.Task()
	if got := dump(t, fresh.Store("s", 1)); got != "" {
		t.Fatalf("s/1 after Wipe: %q", got)
	}
	if got := checkpoint(t, db, "s-changelog", 1); got != "none" {
		t.Fatalf("s/1 checkpoint after Wipe: %s", got)
	}
	for _, sp := range []struct {
		name string
		p    int32
	}{{"s", 0}, {"s2", 0}, {"s2", 1}} {
		if n := len(strings.Fields(dump(t, fresh.Store(sp.name, sp.p)))); n != 50 {
			t.Errorf("%s/%d has %d keys after wiping s/1", sp.name, sp.p, n)
		}
		if got := checkpoint(t, db, sp.name+"-changelog", sp.p); got != "50" {
			t.Errorf("%s/%d checkpoint after wiping s/1: %s", sp.name, sp.p, got)
		}
	}
	stores, err := db.Stores()
	if err != nil {
		t.Fatal(err)
	}
	want := []state.StorePartition{
		{Store: "s", Partition: 0, Changelog: "s-changelog", Offset: 50, HasCheckpoint: true},
		{Store: "s2", Partition: 0, Changelog: "s2-changelog", Offset: 50, HasCheckpoint: true},
		{Store: "s2", Partition: 1, Changelog: "s2-changelog", Offset: 50, HasCheckpoint: true},
	}
	if !slices.Equal(stores, want) {
		t.Fatalf("Stores after Wipe = %+v\nwant %+v", stores, want)
	}
	// Wiping what is not there is fine.
	if err := db.Wipe("nothing", 9); err != nil {
		t.Fatal(err)
	}
}

func TestStores(t *testing.T) {
	prefixed := func(store string) string { return "app-" + store + "-changelog" }
	db := openDB(t, t.TempDir(), state.Options{ChangelogTopic: prefixed})
	if got, err := db.Stores(); err != nil || len(got) != 0 {
		t.Fatalf("empty DB: Stores = %v, %v", got, err)
	}
	task := db.Task()
	mustPut(t, task.Store("b", 2), "k", "v", 1)
	task.Store("a", 2) // opened, never written: held locally, empty
	if err := task.SetCheckpoint("app-b-changelog", 2, 17); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Stores(); len(got) != 0 {
		t.Fatalf("Stores lists uncommitted partitions: %+v", got)
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := db.Restorer("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(5); err != nil { // an empty changelog up to offset 5
		t.Fatal(err)
	}
	got, err := db.Stores()
	if err != nil {
		t.Fatal(err)
	}
	want := []state.StorePartition{
		{Store: "a", Partition: 2, Changelog: "app-a-changelog"},
		{Store: "b", Partition: 2, Changelog: "app-b-changelog", Offset: 17, HasCheckpoint: true},
		{Store: "c", Partition: 0, Changelog: "app-c-changelog", Offset: 5, HasCheckpoint: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Stores = %+v\nwant %+v", got, want)
	}
}

func TestRestore(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir, state.Options{RestoreBatchSize: 512})
	r, err := db.Restorer("agg", 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic() != "agg-changelog" || r.Position() != 0 {
		t.Fatalf("fresh restorer: %s at %d", r.Topic(), r.Position())
	}
	reader := db.Task().Store("agg", 4)
	// Offsets with gaps, as after compaction; each record overwrites or
	// deletes an earlier one now and then.
	want := map[string]string{}
	var offsets []int64
	lastCheckpoint := "none"
	batches := 0
	for i := range 200 {
		off := int64(10 + 3*i)
		offsets = append(offsets, off)
		key := fmt.Sprintf("k%03d", i%70)
		var v []byte
		if i%11 != 10 {
			v = []byte(fmt.Sprintf("v%d", off))
		}
		if err := r.Apply(off, []byte(key), v, off*1000); err != nil {
			t.Fatal(err)
		}
		if v == nil {
			delete(want, key)
		} else {
			want[key] = string(v)
		}
		// Whenever a batch was written, the checkpoint is the offset after
		// its last record and the committed state is exactly the records
		// before it.
		if cp := checkpoint(t, db, "agg-changelog", 4); cp != lastCheckpoint {
			lastCheckpoint = cp
			batches++
			if cp != fmt.Sprint(off+1) {
				t.Fatalf("after applying offset %d the checkpoint is %s", off, cp)
			}
			for k, v := range want {
				if got := value(t, reader, k); got != v {
					t.Fatalf("at checkpoint %s: %s = %s, want %s", cp, k, got, v)
				}
			}
			if n := len(strings.Fields(dump(t, reader))); n != len(want) {
				t.Fatalf("at checkpoint %s: %d keys, want %d", cp, n, len(want))
			}
		}
	}
	if batches < 5 {
		t.Fatalf("only %d batches for 200 records of a 512-byte bound", batches)
	}
	if err := r.Apply(offsets[len(offsets)-1], []byte("late"), []byte("x"), 0); err == nil {
		t.Fatal("Apply accepted an offset already applied")
	}
	// The fetch position is past a transaction marker.
	end := offsets[len(offsets)-1] + 2
	if err := r.Flush(end); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(end - 1); err == nil {
		t.Fatal("Flush accepted a position behind the last")
	}
	if got := checkpoint(t, db, "agg-changelog", 4); got != fmt.Sprint(end) {
		t.Fatalf("checkpoint after Flush = %s, want %d", got, end)
	}
	for k, v := range want {
		if got := value(t, reader, k); got != v {
			t.Fatalf("after Flush: %s = %s, want %s", k, got, v)
		}
	}
	if e, _, _ := reader.Get([]byte("k000")); e.Timestamp%1000 != 0 || e.Timestamp == 0 {
		t.Fatalf("restored timestamp %d", e.Timestamp)
	}
	// A new Restorer resumes at the checkpoint; Close commits its tail.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = db.Restorer("agg", 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Position() != end {
		t.Fatalf("resumed restorer at %d, want %d", r.Position(), end)
	}
	if err := r.Apply(end+5, []byte("tail"), []byte("t"), 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(end+6, []byte("x"), nil, 1); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
	if got := checkpoint(t, db, "agg-changelog", 4); got != fmt.Sprint(end+6) {
		t.Fatalf("checkpoint after Close = %s, want %d", got, end+6)
	}
	if got := value(t, reader, "tail"); got != "t" {
		t.Fatalf("tail = %s", got)
	}
}

// A batch writes each key's last record: many updates and deletions of a
// few keys in one batch leave the store as applying them one by one would,
// timestamps included, and a key deleted last is gone.
func TestRestoreKeepsEachKeysLast(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{})
	r, err := db.Restorer("agg", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	wantTS := map[string]int64{}
	for i := range 1000 {
		key := fmt.Sprintf("k%d", i%7)
		var v []byte
		if i%5 == 4 || i >= 990 && i%7 == 3 {
			delete(want, key)
		} else {
			v = []byte(fmt.Sprintf("v%d", i))
			want[key], wantTS[key] = string(v), int64(i)
		}
		if err := r.Apply(int64(i), []byte(key), v, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(1000); err != nil {
		t.Fatal(err)
	}
	reader := db.Task().Store("agg", 0)
	if n := len(strings.Fields(dump(t, reader))); n != len(want) {
		t.Fatalf("%d keys restored, want %d: %s", n, len(want), dump(t, reader))
	}
	for k, v := range want {
		e, ok, err := reader.Get([]byte(k))
		if err != nil || !ok || string(e.Value) != v || e.Timestamp != wantTS[k] {
			t.Errorf("%s = %q at %d (%v, %v), want %q at %d", k, e.Value, e.Timestamp, ok, err, v, wantTS[k])
		}
	}
	if got := checkpoint(t, db, "agg-changelog", 0); got != "1000" {
		t.Errorf("checkpoint %s, want 1000", got)
	}
}

// changeRecord is a changelog record of a restore test: a nil value
// deletes its key.
type changeRecord struct {
	key, value []byte
	ts         int64
}

// randomChangelog is n records of keys drawn from keys distinct ones
// ("k%06d"), each record at offset and timestamp i; one in ten deletes its
// key, the others carry a value of valueLen digits.
func randomChangelog(seed uint64, n, keys, valueLen int) []changeRecord {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	log := make([]changeRecord, n)
	for i := range log {
		log[i] = changeRecord{key: fmt.Appendf(nil, "k%06d", rng.IntN(keys)), ts: int64(i)}
		if rng.IntN(10) > 0 {
			log[i].value = fmt.Appendf(nil, "%0*d", valueLen, i)
		}
	}
	return log
}

// lastRecords is the store that log leaves: each key's last record,
// deleted keys absent.
func lastRecords(log []changeRecord) map[string]changeRecord {
	m := map[string]changeRecord{}
	for _, r := range log {
		if r.value == nil {
			delete(m, string(r.key))
		} else {
			m[string(r.key)] = r
		}
	}
	return m
}

// Batches past a megabyte are written as tables and ingested: the store
// holds each key's last record, deletions included, beside its neighbours
// (the same store's other partitions, written through a task, and another
// store) untouched; a restore resumed from an earlier checkpoint (a crash
// after an ingestion, before its checkpoint) writes the same state again;
// and all of it survives a reopen, with nothing left in the staging
// directory.
func TestRestoreIngests(t *testing.T) {
	dir := t.TempDir()
	db, err := state.Open(dir, state.Options{RestoreBatchSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	task := db.Task()
	for _, p := range []int32{3, 5} {
		for i := range 100 {
			mustPut(t, task.Store("agg", p), fmt.Sprintf("k%05d", i), fmt.Sprintf("neighbour%d", p), 1)
		}
	}
	mustPut(t, task.Store("other", 4), "k00001", "other", 1)
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	const records, keys = 60_000, 15_000
	log := randomChangelog(5, records, keys, 100)
	model := func(upTo int) map[string]changeRecord { return lastRecords(log[:upTo]) }
	restore := func(db *state.DB, from int) {
		t.Helper()
		r, err := db.Restorer("agg", 4)
		if err != nil {
			t.Fatal(err)
		}
		if r.Position() != int64(from) {
			t.Fatalf("restorer at %d, want %d", r.Position(), from)
		}
		for i := from; i < records; i++ {
			if err := r.Apply(int64(i), log[i].key, log[i].value, log[i].ts); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(records); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(db *state.DB) {
		t.Helper()
		want := model(records)
		reader := db.Task().Store("agg", 4)
		n := 0
		for e, err := range reader.Range(nil, nil) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			w, ok := want[string(e.Key)]
			if !ok || string(e.Value) != string(w.value) || e.Timestamp != w.ts {
				t.Fatalf("%s = %.12q… at %d, want %.12q… at %d (present %v)", e.Key, e.Value, e.Timestamp, w.value, w.ts, ok)
			}
		}
		if n != len(want) {
			t.Fatalf("%d keys restored, want %d", n, len(want))
		}
		for _, p := range []int32{3, 5} {
			if got := value(t, db.Task().Store("agg", p), "k00042"); got != fmt.Sprintf("neighbour%d", p) {
				t.Fatalf("partition %d's k00042 = %q", p, got)
			}
		}
		if got := value(t, db.Task().Store("other", 4), "k00001"); got != "other" {
			t.Fatalf("the other store's key = %q", got)
		}
		if got := checkpoint(t, db, "agg-changelog", 4); got != fmt.Sprint(records) {
			t.Fatalf("checkpoint %s, want %d", got, records)
		}
	}
	restore(db, 0)
	if db.PebbleMetrics().Total().TableBytesIngested == 0 {
		t.Fatal("no table was ingested")
	}
	check(db)
	// The checkpoint of a batch ingested but not recorded: back to a
	// third of the way.
	task = db.Task()
	if err := task.SetCheckpoint("agg-changelog", 4, records/3); err != nil {
		t.Fatal(err)
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	restore(db, records/3)
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, dir, state.Options{})
	check(db)
	left, err := os.ReadDir(filepath.Join(dir, "ingest"))
	if err != nil || len(left) != 0 {
		t.Fatalf("the staging directory holds %d files (%v)", len(left), err)
	}
}

// A restore's batches are sorted by 16 bytes of each key after the prefix
// that the batch's keys share, then by the whole key: keys alike for long
// stretches, keys that differ only past those 16 bytes, keys that are
// prefixes of others and keys with zero bytes (which the heads' padding
// resembles) come out in the store's order, each key's last record kept,
// through both writes (ingested tables and a small last batch).
func TestRestoreSortsKeysAlike(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{RestoreBatchSize: 1 << 20})
	r, err := db.Restorer("agg", 2)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	alphabet := []byte{0, 1, 'a', 'b', 0xff}
	const records = 120_000
	want := map[string]string{}
	for i := range records {
		key := []byte("customer-")
		if rng.IntN(3) == 0 {
			key = append(key, "0123456789abcdefghij"[:rng.IntN(21)]...)
		}
		for range rng.IntN(4) {
			key = append(key, alphabet[rng.IntN(len(alphabet))])
		}
		var v []byte
		if rng.IntN(8) > 0 {
			v = fmt.Appendf(nil, "%040d", i)
			want[string(key)] = string(v)
		} else {
			delete(want, string(key))
		}
		if err := r.Apply(int64(i), key, v, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(r.Flush(records), r.Close()); err != nil {
		t.Fatal(err)
	}
	if db.PebbleMetrics().Total().TableBytesIngested == 0 {
		t.Fatal("no table was ingested")
	}
	keys := slices.Sorted(maps.Keys(want))
	var got []string
	for e, err := range db.Task().Store("agg", 2).Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Value) != want[string(e.Key)] {
			t.Fatalf("%q = %q, want %q", e.Key, e.Value, want[string(e.Key)])
		}
		got = append(got, string(e.Key))
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("%d keys restored, want %d in order", len(got), len(keys))
	}
}

// Batches whose keys overlap what the Restorer wrote before are kept as
// sorted runs aside, and merged into tables once maxRuns of them are kept
// (the checkpoint moving with each merge) or at the end. A crash between
// merges loses the runs and nothing else: the store holds exactly the
// records before its checkpoint, and a restore resumed there ends where
// an uninterrupted one does, with the staging directory empty.
func TestRestoreRunsMergeAndResume(t *testing.T) {
	defer state.SetMaxRuns(3)()
	dir := t.TempDir()
	opts := state.Options{RestoreBatchSize: 1 << 20}
	db, err := state.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const records = 90_000 // about 9 MiB: 9 batches, 8 of them runs
	log := randomChangelog(9, records, 40_000, 60)
	check := func(db *state.DB, upTo int) {
		t.Helper()
		want := lastRecords(log[:upTo])
		n := 0
		for e, err := range db.Task().Store("agg", 1).Range(nil, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; string(e.Value) != string(want[string(e.Key)].value) {
				t.Fatalf("%s = %.10q…, want %.10q… (of the first %d records)", e.Key, e.Value, want[string(e.Key)].value, upTo)
			}
		}
		if n != len(want) {
			t.Fatalf("%d keys, want %d (of the first %d records)", n, len(want), upTo)
		}
	}
	runs := func() int {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "ingest", "*.run"))
		if err != nil {
			t.Fatal(err)
		}
		return len(files)
	}
	r, err := db.Restorer("agg", 1)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for i := range records {
		if err := r.Apply(int64(i), log[i].key, log[i].value, log[i].ts); err != nil {
			t.Fatal(err)
		}
		most = max(most, runs())
	}
	if most == 0 || most > 3 {
		t.Fatalf("at most %d runs kept, want 1 to 3", most)
	}
	// The crash: the DB goes, the Restorer with it.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, dir, opts)
	cp := checkpoint(t, db, "agg-changelog", 1)
	var at int
	if _, err := fmt.Sscan(cp, &at); err != nil || at == 0 || at >= records {
		t.Fatalf("checkpoint %s after the crash, want one from a merge before the end", cp)
	}
	check(db, at)
	r, err = db.Restorer("agg", 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := at; i < records; i++ {
		if err := r.Apply(int64(i), log[i].key, log[i].value, log[i].ts); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(r.Flush(records), r.Close()); err != nil {
		t.Fatal(err)
	}
	check(db, records)
	if got := checkpoint(t, db, "agg-changelog", 1); got != fmt.Sprint(records) {
		t.Fatalf("checkpoint %s, want %d", got, records)
	}
	if left, err := os.ReadDir(filepath.Join(dir, "ingest")); err != nil || len(left) != 0 {
		t.Fatalf("the staging directory holds %d files (%v)", len(left), err)
	}
}

// A Restorer closed with runs kept (a restore abandoned: the task was
// revoked) does not merge them: the records since the checkpoint go, runs
// and all, the store holds exactly what the checkpoint covers, and the
// run files are deleted.
func TestRestoreClosedWithRuns(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir, state.Options{RestoreBatchSize: 1 << 20})
	r, err := db.Restorer("agg", 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	value := make([]byte, 100)
	const records = 30_000 // about 4 MiB: a run or more, and records after
	for i := range records {
		if err := r.Apply(int64(i), fmt.Appendf(nil, "k%06d", rng.IntN(1_000_000)), value, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := filepath.Glob(filepath.Join(dir, "ingest", "*.run"))
	if err != nil || len(runs) == 0 {
		t.Fatalf("%d runs kept (%v), want some", len(runs), err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := checkpoint(t, db, "agg-changelog", 0); got != "none" {
		t.Fatalf("checkpoint %s after closing with every batch in runs, want none", got)
	}
	if n := len(strings.Fields(dump(t, db.Task().Store("agg", 0)))); n != 0 {
		t.Fatalf("%d keys stored without a checkpoint", n)
	}
	if left, err := os.ReadDir(filepath.Join(dir, "ingest")); err != nil || len(left) != 0 {
		t.Fatalf("the staging directory holds %d files (%v)", len(left), err)
	}
}

// Partitions restored at once from changelogs in key order leave every
// store key at the bottom of the tree, their last small batches included:
// through the memtable, those would be flushed into one level 0 table
// spanning all the partitions, whose compaction rewrites every table
// between them. A standby's small batches, after its restore, go through
// the memtable.
func TestRestoreInOrderStaysAtTheBottom(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{RestoreBatchSize: 6 << 20})
	const parts, records = 6, 120_000 // about 3 MiB a partition: runs, tables and a last batch
	rs := make([]*state.Restorer, parts)
	for p := range rs {
		r, err := db.Restorer("agg", int32(p))
		if err != nil {
			t.Fatal(err)
		}
		rs[p] = r
	}
	value := make([]byte, 100)
	for i := range records {
		if err := rs[i%parts].Apply(int64(i/parts), fmt.Appendf(nil, "k%08d", i), value, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rs {
		if err := r.Flush(r.Position()); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.FlushMemtable(); err != nil {
		t.Fatal(err)
	}
	if n, err := db.DataTablesAbove(); err != nil || n != 0 {
		t.Fatalf("%d tables of store keys above the bottom level (%v)\n%s", n, err, db.TableList())
	}
	// Followed as a standby: a few records a flush.
	for i := range 10 {
		for p, r := range rs {
			if err := r.Apply(r.Position(), fmt.Appendf(nil, "k%08d", records+i*parts+p), value, 0); err != nil {
				t.Fatal(err)
			}
			if err := r.Flush(r.Position()); err != nil {
				t.Fatal(err)
			}
		}
	}
	ingested := db.PebbleMetrics().Total().TableBytesIngested
	for _, r := range rs {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.FlushMemtable(); err != nil {
		t.Fatal(err)
	}
	if n, err := db.DataTablesAbove(); err != nil || n == 0 {
		t.Fatalf("%d tables of store keys above the bottom level after the standby's writes, want the memtable's (%v)", n, err)
	}
	if got := db.PebbleMetrics().Total().TableBytesIngested; got != ingested {
		t.Fatalf("the standby's batches ingested %d bytes", got-ingested)
	}
	n := 0
	for p := range parts {
		for _, err := range db.Task().Store("agg", int32(p)).Range(nil, nil) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n != records+10*parts {
		t.Fatalf("%d keys, want %d", n, records+10*parts)
	}
}

// A DB closed under a restore whose batch is being written: the batch is
// written in full or not at all, the Restorer then fails with ErrClosed,
// and its position falls back to the checkpoint the database holds, from
// which a restore resumes.
func TestRestoreClosedInFlight(t *testing.T) {
	dir := t.TempDir()
	db, err := state.Open(dir, state.Options{RestoreBatchSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Restorer("agg", 0)
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 200)
	var off int64
	for ; off < 20_000; off++ { // about 5 MiB: two batches handed over
		if err := r.Apply(off, fmt.Appendf(nil, "k%06d", off), value, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(off); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Flush after the DB closed: %v", err)
	}
	db = openDB(t, dir, state.Options{})
	cp := checkpoint(t, db, "agg-changelog", 0)
	if cp == "none" {
		// Closed before the first batch was written: the restore starts
		// over from the beginning.
		cp = "0"
	}
	if fmt.Sprint(r.Position()) != cp {
		t.Fatalf("position %d after the failure, the database's checkpoint %s", r.Position(), cp)
	}
	// The store holds exactly the records before the checkpoint.
	n := len(strings.Fields(dump(t, db.Task().Store("agg", 0))))
	if fmt.Sprint(n) != cp {
		t.Fatalf("%d keys restored under checkpoint %s", n, cp)
	}
}

// A Commit, Discard or Close of the task inside a Range loop lets the loop
// finish over its snapshot, and leaks nothing (openDB checks at Close).
func TestCommitAndDiscardInRange(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{})
	task := db.Task()
	s := task.Store("s", 0)
	for i := range 10 {
		mustPut(t, s, fmt.Sprintf("k%d", i), "v", 1)
	}
	n := 0
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		switch string(e.Key) {
		case "k2":
			if err := task.Commit(); err != nil {
				t.Fatal(err)
			}
		case "k4":
			if err := s.Delete([]byte("k7"), 2); err != nil {
				t.Fatal(err)
			}
			task.Discard()
		case "k6":
			if err := s.Delete([]byte("k8"), 2); err != nil {
				t.Fatal(err)
			}
			if err := task.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != 10 {
		t.Fatalf("the loop saw %d keys, want its snapshot's 10", n)
	}
	if got := dump(t, s); got != "k0=v k1=v k2=v k3=v k4=v k5=v k6=v k7=v k9=v" {
		t.Fatalf("after the loop: %q", got)
	}
	// Close inside a loop, too.
	for _, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Get([]byte("k0")); !errors.Is(err, topo.ErrStoreClosed) || !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Get after the task closed: %v", err)
	}
	if err := task.SetCheckpoint("t", 0, 1); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("SetCheckpoint after the task closed: %v", err)
	}
}

// Close waits for a Range loop in progress; the loop's writes fail with
// ErrClosed meanwhile instead of deadlocking, and its iteration goes on.
func TestCloseDuringRange(t *testing.T) {
	db, err := state.Open(t.TempDir(), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	task := db.Task()
	s := task.Store("s", 0)
	for i := range 5 {
		mustPut(t, s, fmt.Sprintf("k%d", i), "v", 1)
	}
	closed := make(chan error, 1)
	n := 0
	for _, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 2 {
			go func() { closed <- db.Close() }()
			await.Until(t, 10*time.Second, "Put to see the DB closing", func() bool {
				return s.Put([]byte("x"), nil, 1) != nil
			})
			select {
			case err := <-closed:
				t.Fatalf("Close returned (%v) during a Range loop", err)
			default:
			}
		}
	}
	if n != 5 {
		t.Fatalf("the loop saw %d keys, want 5", n)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, err := range s.Range(nil, nil) {
		if !errors.Is(err, topo.ErrStoreClosed) {
			t.Fatalf("Range after Close: %v", err)
		}
	}
}

func TestConcurrentTasks(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{})
	const tasks, rounds, keys = 8, 20, 50
	var wg sync.WaitGroup
	errs := make(chan error, tasks)
	for p := range int32(tasks) {
		wg.Go(func() {
			task := db.Task()
			defer task.Close()
			s := task.Store("s", p)
			for r := range rounds {
				for k := range keys {
					if err := s.Put(fmt.Appendf(nil, "k%02d", k), fmt.Appendf(nil, "%d", r), int64(r)); err != nil {
						errs <- err
						return
					}
				}
				n := 0
				for _, err := range s.Range(nil, nil) {
					if err != nil {
						errs <- err
						return
					}
					n++
				}
				if n != keys {
					errs <- fmt.Errorf("partition %d sees %d keys", p, n)
					return
				}
				if err := task.SetCheckpoint("s-changelog", p, int64(r+1)); err != nil {
					errs <- err
					return
				}
				var err error
				if r%4 == 3 {
					task.Discard()
				} else {
					err = task.Commit()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var readers sync.WaitGroup
	stop := make(chan struct{})
	readers.Go(func() { // the balancer polling progress meanwhile
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Stores(); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for p := range int32(tasks) {
		// Round 19 is discarded (19%4 == 3): the last commit is round 18.
		if got := checkpoint(t, db, "s-changelog", p); got != "19" {
			t.Errorf("partition %d checkpoint %s, want 19", p, got)
		}
		if got := value(t, db.Task().Store("s", p), "k00"); got != "18" {
			t.Errorf("partition %d k00 = %s, want 18", p, got)
		}
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	openDB(t, dir, state.Options{})
	_, err := state.Open(dir, state.Options{})
	var le *state.LockedError
	if !errors.As(err, &le) || le.Dir != dir || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open of %s: %v, want a LockedError naming the directory", dir, err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := state.Open(t.TempDir(), state.Options{CacheSize: -1, RestoreBatchSize: -1}); err == nil ||
		!strings.Contains(err.Error(), "CacheSize") || !strings.Contains(err.Error(), "RestoreBatchSize") {
		t.Fatalf("bad options: %v, want both problems", err)
	}
	// A database in another layout is refused, not misread.
	dir := t.TempDir()
	pdb, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pdb.Set([]byte{0}, []byte{99}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := pdb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Open(dir, state.Options{}); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Fatalf("Open of another layout: %v", err)
	}
	// The refused directory is not left locked.
	openDB(t, t.TempDir(), state.Options{})
}

func TestOpenStoreAdapter(t *testing.T) {
	db := openDB(t, t.TempDir(), state.Options{})
	task := db.Task()
	var cfg topo.TaskConfig
	cfg.OpenStore = task.OpenStore
	s, err := cfg.OpenStore(&topo.StoreSpec{Name: "x"}, topo.TaskID{Sub: 1, Partition: 5})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "k", "v", 1)
	if got := value(t, task.Store("x", 5), "k"); got != "v" {
		t.Fatalf("OpenStore's view is not partition 5 of x: %s", got)
	}
	task.Close()
	if _, err := task.OpenStore(&topo.StoreSpec{Name: "x"}, topo.TaskID{}); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("OpenStore after Close: %v", err)
	}
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
