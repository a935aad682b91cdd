package topo

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// countingStore counts the reads and writes that reach the store.
type countingStore struct {
	*MemStore
	gets, puts int
}

func (s *countingStore) Get(k []byte) (Entry, bool, error) { s.gets++; return s.MemStore.Get(k) }
func (s *countingStore) Put(k, v []byte, ts int64) error   { s.puts++; return s.MemStore.Put(k, v, ts) }

type bytesCodec struct{}

func (bytesCodec) Encode(v any) ([]byte, error) { return v.([]byte), nil }
func (bytesCodec) Decode(b []byte) (any, error) { return b, nil }

type discard struct{ n int }

func (d *discard) Send(Output) error { d.n++; return nil }

// upserter writes each record's value under its key through a TableStore;
// the value "?" only reads the key.
type upserter struct{ ts *TableStore }

func (u *upserter) Init(c *Context) (err error) { u.ts, err = c.TableStore("s"); return err }
func (u *upserter) Process(r Record) error {
	k := r.Key.([]byte)
	if _, _, err := u.ts.Get(k); err != nil || string(r.Value.([]byte)) == "?" {
		return err
	}
	return u.ts.Update(k, r.Value.([]byte), r.Timestamp.UnixMilli(), r, nil, r.Value)
}
func (u *upserter) Close() error { return nil }

func cacheTask(t *testing.T, cacheBytes int64) (*Task, *countingStore, *discard) {
	t.Helper()
	g := &Graph{}
	src := g.AddNode(&Node{Name: "src", Kind: SourceNode, Topic: "in", KeyCodec: bytesCodec{}, ValueCodec: bytesCodec{}})
	g.AddStore(&StoreSpec{Name: "s", Logged: false})
	g.AddNode(&Node{Name: "up", Kind: ProcessorNode, Parents: []*Node{src}, Stores: []string{"s"}, New: func() Processor { return &upserter{} }})
	top, err := Build(g)
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{MemStore: NewMemStore("s")}
	out := &discard{}
	task, err := NewTask(TaskConfig{
		Topology: top, Sub: top.Subs[0], TopicName: func(r TopicRef) string { return r.Name },
		OpenStore:  func(*StoreSpec, TaskID) (KVStore, error) { return store, nil },
		Collector:  out,
		Now:        time.Now,
		CacheBytes: cacheBytes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	return task, store, out
}

func pipe(t *testing.T, task *Task, key, value string) {
	t.Helper()
	if err := task.Process(Input{Topic: "in", Key: []byte(key), Value: []byte(value), Timestamp: 1}); err != nil {
		t.Fatal(err)
	}
}

// After a flush a key's entry stays in the cache, clean: its next update
// reads the cache, not the store.
func TestCacheKeepsCleanEntriesAfterFlush(t *testing.T) {
	task, store, _ := cacheTask(t, 1<<20)
	pipe(t, task, "a", "1")
	pipe(t, task, "a", "2")
	if store.puts != 0 {
		t.Fatalf("%d writes reached the store before the flush", store.puts)
	}
	if err := task.Flush(); err != nil {
		t.Fatal(err)
	}
	if store.puts != 1 || task.Pending() != 0 {
		t.Fatalf("after the flush: %d writes, %d pending; want 1, 0", store.puts, task.Pending())
	}
	gets := store.gets
	pipe(t, task, "a", "3")
	if store.gets != gets {
		t.Errorf("the update after the flush read the store")
	}
	if hits, _ := task.CacheStats(); hits < 2 {
		t.Errorf("cache hits %d, want at least 2", hits)
	}
}

// Over budget, clean entries leave before a dirty one is written early.
func TestCacheEvictsCleanEntriesFirst(t *testing.T) {
	// Room for about three entries.
	task, store, _ := cacheTask(t, 3*(entryOverhead+2))
	pipe(t, task, "a", "1")
	pipe(t, task, "b", "1")
	if err := task.Flush(); err != nil {
		t.Fatal(err)
	}
	puts := store.puts
	pipe(t, task, "c", "1") // dirty
	pipe(t, task, "d", "1") // dirty: a and b (clean) make room
	if store.puts != puts {
		t.Errorf("a dirty entry was written early while clean ones could leave (%d writes)", store.puts-puts)
	}
	pipe(t, task, "e", "1")
	pipe(t, task, "f", "1") // only dirty entries left: the oldest is written
	if store.puts == puts {
		t.Error("nothing was written although the cache holds only dirty entries over its budget")
	}
	if err := task.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if _, ok, _ := store.MemStore.Get([]byte(k)); !ok {
			t.Errorf("key %s never reached the store", k)
		}
	}
}

// A clean entry read since the clock last passed it stays over one that was
// not: the least recently used leaves first.
func TestCacheEvictsUnreadCleanEntriesFirst(t *testing.T) {
	task, store, _ := cacheTask(t, 3*(entryOverhead+2))
	for _, k := range []string{"a", "b", "c"} {
		pipe(t, task, k, "1")
	}
	if err := task.Flush(); err != nil {
		t.Fatal(err)
	}
	pipe(t, task, "a", "?")
	pipe(t, task, "c", "?")
	pipe(t, task, "d", "1") // over budget: b, the only clean entry not read, leaves
	gets := store.gets
	pipe(t, task, "a", "?")
	pipe(t, task, "c", "?")
	if store.gets != gets {
		t.Errorf("reading a and c went to the store %d times: a recently read entry was evicted", store.gets-gets)
	}
	pipe(t, task, "b", "?")
	if store.gets != gets+1 {
		t.Errorf("reading b went to the store %d times, want 1: the unread entry was kept", store.gets-gets)
	}
}

// Entries that leave the cache are reused for new keys. Updates of many
// keys through a cache of a few entries, flushed now and then, leave the
// store with each key's last value and timestamp, as a model says: no
// reused entry carries another key's value, time or place in a list.
func TestCacheReusedEntriesKeepNothing(t *testing.T) {
	task, store, _ := cacheTask(t, 4*(entryOverhead+8))
	rng := rand.New(rand.NewPCG(1, 2))
	type last struct {
		value string
		ts    int64
	}
	model := map[string]last{}
	for i := range 5000 {
		k := fmt.Sprintf("k%d", rng.IntN(40))
		v := fmt.Sprintf("v%d", i)
		ts := int64(1 + rng.IntN(1000))
		if err := task.Process(Input{Topic: "in", Key: []byte(k), Value: []byte(v), Timestamp: ts}); err != nil {
			t.Fatal(err)
		}
		model[k] = last{v, ts}
		if rng.IntN(100) == 0 {
			if err := task.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(task.cache.free) == 0 {
		t.Fatal("no entry was kept for reuse")
	}
	if err := task.Flush(); err != nil {
		t.Fatal(err)
	}
	for k, want := range model {
		e, ok, err := store.MemStore.Get([]byte(k))
		if err != nil || !ok || string(e.Value) != want.value || e.Timestamp != want.ts {
			t.Errorf("key %s: %q at %d (found %v, %v), want %q at %d", k, e.Value, e.Timestamp, ok, err, want.value, want.ts)
		}
	}
}
