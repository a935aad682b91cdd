// Package storetest is the conformance suite of the [topo.KVStore] seam:
// every store implementation runs it.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) topo.KVStore { return topo.NewMemStore("s") })
//	}
//
// The semantics it pins down, beyond the interface's doc:
//   - Get of an absent key returns ok == false and no error; an empty value
//     is present, and comes back as a non-nil empty slice.
//   - Put and Delete keep their own copies of their arguments. Entries
//     returned to the caller are read-only, and stay unchanged when the key
//     is later overwritten or deleted.
//   - A store keeps the timestamp of the write, negative ones included.
//   - Range(lo, hi) yields [lo, hi) in byte order; a nil bound is unbounded,
//     lo >= hi is empty. Breaking out of the loop releases whatever the
//     iteration held: the store stays usable.
//   - Writing to the store inside a Range loop never panics, deadlocks or
//     fails; the loop sees either the writes or a snapshot from when it
//     started (MemStore and the pebble store take a snapshot), but each
//     key at most once and in order, and every key present before the loop
//     and not deleted in it.
//   - After Close, every operation returns an error that is
//     [topo.ErrStoreClosed]; a second Close does not panic.
//
// An implementation that shares a key space between stores (the pebble
// store) should populate neighbouring stores in open, so that a range that
// leaks out of its store's bounds shows up as an unexpected key.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Run runs the suite; open returns a new, empty store for each sub-test and
// arranges its cleanup with t.Cleanup. The suite closes the store only in
// the Close sub-test.
func Run(t *testing.T, open func(t *testing.T) topo.KVStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s topo.KVStore)
	}{
		{"GetPutDelete", testGetPutDelete},
		{"Overwrite", testOverwrite},
		{"Timestamps", testTimestamps},
		{"EmptyValue", testEmptyValue},
		{"Copies", testCopies},
		{"RangeBounds", testRangeBounds},
		{"RangeOrder", testRangeOrder},
		{"RangeBreak", testRangeBreak},
		{"WriteInRange", testWriteInRange},
		{"ExtremeKeys", testExtremeKeys},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			if s == nil {
				t.Fatal("open returned nil")
			}
			tc.fn(t, s)
		})
	}
}

func put(t *testing.T, s topo.KVStore, key, value string, ts int64) {
	t.Helper()
	if err := s.Put([]byte(key), []byte(value), ts); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func get(t *testing.T, s topo.KVStore, key string) (topo.Entry, bool) {
	t.Helper()
	e, ok, err := s.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if ok && !bytes.Equal(e.Key, []byte(key)) {
		t.Fatalf("Get(%q) returned key %q", key, e.Key)
	}
	return e, ok
}

func del(t *testing.T, s topo.KVStore, key string) {
	t.Helper()
	if err := s.Delete([]byte(key), 1); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
}

// keys collects the keys of a range, failing on any error or disorder.
func keys(t *testing.T, s topo.KVStore, lo, hi []byte) []string {
	t.Helper()
	var out []string
	var prev []byte
	for e, err := range s.Range(lo, hi) {
		if err != nil {
			t.Fatalf("Range(%q, %q): %v", lo, hi, err)
		}
		if prev != nil && bytes.Compare(prev, e.Key) >= 0 {
			t.Fatalf("Range(%q, %q): %q after %q", lo, hi, e.Key, prev)
		}
		prev = e.Key
		out = append(out, string(e.Key))
	}
	return out
}

func wantKeys(t *testing.T, s topo.KVStore, lo, hi []byte, want ...string) {
	t.Helper()
	got := keys(t, s, lo, hi)
	if !slices.Equal(got, want) {
		t.Errorf("Range(%q, %q) = %q, want %q", lo, hi, got, want)
	}
}

func testGetPutDelete(t *testing.T, s topo.KVStore) {
	if s.Name() == "" {
		t.Error("Name is empty")
	}
	if _, ok := get(t, s, "a"); ok {
		t.Fatal("empty store has key a")
	}
	put(t, s, "a", "1", 10)
	e, ok := get(t, s, "a")
	if !ok || string(e.Value) != "1" {
		t.Fatalf("Get(a) = %q, %v; want 1", e.Value, ok)
	}
	del(t, s, "a")
	if _, ok := get(t, s, "a"); ok {
		t.Fatal("a survived Delete")
	}
	del(t, s, "never-written") // deleting an absent key is not an error
	wantKeys(t, s, nil, nil)
}

func testOverwrite(t *testing.T, s topo.KVStore) {
	put(t, s, "k", "first", 1)
	put(t, s, "k", "second", 2)
	e, _ := get(t, s, "k")
	if string(e.Value) != "second" || e.Timestamp != 2 {
		t.Fatalf("after overwrite: %q@%d, want second@2", e.Value, e.Timestamp)
	}
	put(t, s, "k", "", 3)
	put(t, s, "k", "third", 4)
	wantKeys(t, s, nil, nil, "k")
}

func testTimestamps(t *testing.T, s topo.KVStore) {
	for i, ts := range []int64{0, 1, -1, 1_700_000_000_000, math.MaxInt64, math.MinInt64} {
		k := fmt.Sprintf("k%d", i)
		put(t, s, k, "v", ts)
		if e, _ := get(t, s, k); e.Timestamp != ts {
			t.Errorf("Get(%s).Timestamp = %d, want %d", k, e.Timestamp, ts)
		}
	}
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		var i int
		fmt.Sscanf(string(e.Key), "k%d", &i)
		want := []int64{0, 1, -1, 1_700_000_000_000, math.MaxInt64, math.MinInt64}[i]
		if e.Timestamp != want {
			t.Errorf("Range: %s has timestamp %d, want %d", e.Key, e.Timestamp, want)
		}
	}
}

func testEmptyValue(t *testing.T, s topo.KVStore) {
	if err := s.Put([]byte("empty"), []byte{}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("nil"), nil, 2); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"empty", "nil"} {
		e, ok := get(t, s, k)
		if !ok {
			t.Fatalf("%s: an empty value reads as absent", k)
		}
		if e.Value == nil || len(e.Value) != 0 {
			t.Errorf("%s: value = %#v, want a non-nil empty slice", k, e.Value)
		}
	}
	if _, ok := get(t, s, "absent"); ok {
		t.Error("absent key is present")
	}
	n := 0
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Value == nil {
			t.Errorf("Range: %s has a nil value", e.Key)
		}
		n++
	}
	if n != 2 {
		t.Errorf("Range saw %d keys, want 2", n)
	}
}

func testCopies(t *testing.T, s topo.KVStore) {
	k, v := []byte("key"), []byte("value")
	if err := s.Put(k, v, 1); err != nil {
		t.Fatal(err)
	}
	k[0], v[0] = 'X', 'X'
	e, ok := get(t, s, "key")
	if !ok || string(e.Value) != "value" {
		t.Fatalf("store kept the caller's slices: Get(key) = %q, %v", e.Value, ok)
	}
	// Returned entries are read-only, and stay as they were when the key is
	// overwritten or the loop moves on.
	put(t, s, "key2", "value2", 2)
	var all []topo.Entry
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
	}
	put(t, s, "key", "VALUE", 3)
	del(t, s, "key2")
	if string(e.Key) != "key" || string(e.Value) != "value" || e.Timestamp != 1 {
		t.Errorf("an entry from Get changed after an overwrite: %q=%q@%d", e.Key, e.Value, e.Timestamp)
	}
	if len(all) != 2 || string(all[0].Key) != "key" || string(all[0].Value) != "value" || string(all[1].Key) != "key2" || string(all[1].Value) != "value2" {
		t.Errorf("entries kept from a range changed: %+v", all)
	}
}

func testRangeBounds(t *testing.T, s topo.KVStore) {
	for _, k := range []string{"a", "b", "c", "d"} {
		put(t, s, k, k, 1)
	}
	b := func(s string) []byte { return []byte(s) }
	wantKeys(t, s, nil, nil, "a", "b", "c", "d")
	wantKeys(t, s, b("b"), b("d"), "b", "c")
	wantKeys(t, s, b("b"), nil, "b", "c", "d")
	wantKeys(t, s, nil, b("c"), "a", "b")
	wantKeys(t, s, b("bb"), b("cc"), "c")
	wantKeys(t, s, b("a"), b("a"))
	wantKeys(t, s, b("d"), b("b"))
	wantKeys(t, s, b("e"), nil)
	wantKeys(t, s, nil, b("a"))
	wantKeys(t, s, []byte{}, nil, "a", "b", "c", "d")
}

func testRangeOrder(t *testing.T, s topo.KVStore) {
	// Inserted out of order; byte order is not length order.
	in := []string{"b", "\xff", "a\x00", "ab", "a", "\x00", "aa\xff", "B", "a\xff\xff", "10", "9"}
	for i, k := range in {
		put(t, s, k, k, int64(i))
	}
	want := slices.Clone(in)
	slices.Sort(want) // Go compares strings bytewise
	wantKeys(t, s, nil, nil, want...)
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Value) != string(e.Key) {
			t.Errorf("Range: %q has value %q", e.Key, e.Value)
		}
	}
}

func testRangeBreak(t *testing.T, s topo.KVStore) {
	for i := range 10 {
		put(t, s, fmt.Sprintf("k%02d", i), "v", 1)
	}
	for range 3 { // a leaked iteration would show up on the second pass or at close
		n := 0
		for _, err := range s.Range(nil, nil) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if n == 2 {
				break
			}
		}
		if n != 2 {
			t.Fatalf("saw %d entries before break, want 2", n)
		}
	}
	put(t, s, "k99", "v", 1)
	if got := keys(t, s, nil, nil); len(got) != 11 {
		t.Fatalf("after breaking out of ranges: %d keys, want 11", len(got))
	}
	// Breaking in a nested loop.
outer:
	for _, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range s.Range([]byte("k05"), nil) {
			if err != nil {
				t.Fatal(err)
			}
			break outer
		}
	}
	if _, ok := get(t, s, "k05"); !ok {
		t.Fatal("k05 missing after nested break")
	}
}

func testWriteInRange(t *testing.T, s topo.KVStore) {
	before := map[string]bool{}
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		put(t, s, k, "old", 1)
		before[k] = true
	}
	deleted := map[string]bool{}
	written := map[string]bool{}
	seen := map[string]bool{}
	var prev []byte
	for e, err := range s.Range(nil, nil) {
		if err != nil {
			t.Fatalf("Range with writes in the loop: %v", err)
		}
		k := string(e.Key)
		if seen[k] {
			t.Fatalf("Range yielded %q twice", k)
		}
		if prev != nil && bytes.Compare(prev, e.Key) >= 0 {
			t.Fatalf("Range yielded %q after %q", k, prev)
		}
		prev = e.Key
		seen[k] = true
		if !before[k] && !written[k] {
			t.Fatalf("Range yielded %q, neither present before the loop nor written in it", k)
		}
		// Overwrite the current key, delete a later one, insert before and after.
		put(t, s, k, "new", 2)
		written[k] = true
		var n int
		fmt.Sscanf(k, "k%02d", &n)
		if n%3 == 0 && n+1 < 20 {
			later := fmt.Sprintf("k%02d", n+1)
			del(t, s, later)
			deleted[later] = true
		}
		if before[k] { // only for these, or a store that sees its writes would loop forever
			for _, extra := range []string{k + "+", "a" + k, "z" + k} {
				put(t, s, extra, "x", 3)
				written[extra] = true
			}
		}
	}
	for k := range before {
		if !deleted[k] && !seen[k] {
			t.Errorf("Range skipped %q, which the loop did not delete", k)
		}
	}
	// After the loop, the store holds every write.
	for k := range before {
		e, ok := get(t, s, k)
		if deleted[k] {
			if ok && string(e.Value) != "new" {
				t.Errorf("%q: deleted in the loop but holds %q", k, e.Value)
			}
			continue
		}
		if !ok || string(e.Value) != "new" {
			t.Errorf("%q after the loop = %q, %v; want new", k, e.Value, ok)
		}
	}
	for k := range written {
		if before[k] {
			continue
		}
		if _, ok := get(t, s, k); !ok {
			t.Errorf("%q written in the loop is missing", k)
		}
	}
}

func testExtremeKeys(t *testing.T, s topo.KVStore) {
	ks := []string{"", "\x00", "\x00\x00", "\x00\xff", "\xff", "\xff\x00", "\xff\xff", "\xff\xff\xff\xff", "a", "a\x00", "a\xff"}
	for _, k := range ks {
		put(t, s, k, "v:"+k, 7)
	}
	for _, k := range ks {
		e, ok := get(t, s, k)
		if !ok || string(e.Value) != "v:"+k || e.Timestamp != 7 {
			t.Errorf("Get(%q) = %q@%d, %v", k, e.Value, e.Timestamp, ok)
		}
	}
	sorted := slices.Clone(ks)
	slices.Sort(sorted)
	wantKeys(t, s, nil, nil, sorted...)
	wantKeys(t, s, []byte("\xff"), nil, "\xff", "\xff\x00", "\xff\xff", "\xff\xff\xff\xff")
	wantKeys(t, s, nil, []byte("\x00"), "")
	wantKeys(t, s, []byte("\x00"), []byte("\x00\xff"), "\x00", "\x00\x00")
	wantKeys(t, s, []byte("a"), []byte("a\xff"), "a", "a\x00")
	wantKeys(t, s, []byte("\xff\xff"), []byte("\xff\xff\xff\xff\xff"), "\xff\xff", "\xff\xff\xff\xff")
	if _, ok := get(t, s, "\xff\xff\xff"); ok {
		t.Error("a key that was never written is present")
	}
	for _, k := range ks {
		del(t, s, k)
	}
	wantKeys(t, s, nil, nil)
}

func testClose(t *testing.T, s topo.KVStore) {
	put(t, s, "a", "1", 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, topo.ErrStoreClosed) {
			t.Errorf("%s after Close: %v, want topo.ErrStoreClosed", op, err)
		}
	}
	_, _, err := s.Get([]byte("a"))
	closed("Get", err)
	closed("Put", s.Put([]byte("b"), []byte("2"), 2))
	closed("Delete", s.Delete([]byte("a"), 3))
	n := 0
	for _, err := range s.Range(nil, nil) {
		n++
		closed("Range", err)
	}
	if n != 1 {
		t.Errorf("Range after Close yielded %d times, want one error", n)
	}
	_ = s.Close() // a second Close may return an error, but must not panic
}
