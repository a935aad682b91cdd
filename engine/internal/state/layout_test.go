package state_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/internal/topo/storetest"
)

// everySegmented files every store's keys by their last 8 bytes in
// segments of a millisecond: each distinct time its own segment, the most
// a range has to merge.
func everySegmented(string) state.Layout {
	return state.Layout{Segment: time.Millisecond, TimeAt: 8}
}

func TestConformanceSegmentedPending(t *testing.T) {
	storetest.Run(t, func(t *testing.T) topo.KVStore {
		_, s := openConformance(t, state.Options{Layout: everySegmented})
		return s
	})
}

func TestConformanceSegmentedCommitted(t *testing.T) {
	storetest.Run(t, func(t *testing.T) topo.KVStore {
		task, s := openConformance(t, state.Options{Layout: everySegmented})
		return autoCommit{s, task}
	})
}

// windowKey is a window store's key: the record key, then the start.
func windowKey(rk string, start uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(rk), start)
}

func collect(t *testing.T, seq func(func(topo.Entry, error) bool)) []string {
	t.Helper()
	var out []string
	for e, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%x=%s@%d", e.Key, e.Value, e.Timestamp))
	}
	return out
}

// A segmented store reads as the plain one written alike: random windows
// of record keys that begin alike ("a", "a\x00", "ab"), some committed,
// some pending, some deleted, over many segments; every range, and every
// range of one record key (RangeKey), gives the same keys in the same
// order.
func TestSegmentedReadsAsPlain(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 47))
	plainDB := openDB(t, t.TempDir(), state.Options{})
	segDB := openDB(t, t.TempDir(), state.Options{Layout: func(string) state.Layout {
		return state.Layout{Segment: 10 * time.Millisecond, TimeAt: 8}
	}})
	plainTask, segTask := plainDB.Task(), segDB.Task()
	plain, seg := plainTask.Store("w", 3), segTask.Store("w", 3)
	recordKeys := []string{"", "a", "a\x00", "a\x00\x00", "ab", "b", "\xff"}
	var keys [][]byte
	for round := range 6 {
		for range 200 {
			k := windowKey(recordKeys[rng.IntN(len(recordKeys))], uint64(rng.IntN(100)))
			if rng.IntN(5) == 0 {
				k = k[:rng.IntN(len(k))] // shorter than a time: segment 0
			}
			keys = append(keys, k)
			del := rng.IntN(6) == 0
			for _, s := range []topo.KVStore{plain, seg} {
				var err error
				if del {
					err = s.Delete(k, 1)
				} else {
					err = s.Put(k, []byte(fmt.Sprint(round)), int64(round))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if round%2 == 0 {
			if err := plainTask.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := segTask.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		bound := func() []byte {
			if rng.IntN(8) == 0 {
				return nil
			}
			return keys[rng.IntN(len(keys))]
		}
		for range 50 {
			lo, hi := bound(), bound()
			want, got := collect(t, plain.Range(lo, hi)), collect(t, seg.Range(lo, hi))
			if !slices.Equal(want, got) {
				t.Fatalf("round %d: Range(%x, %x):\nsegmented %q\nplain     %q", round, lo, hi, got, want)
			}
		}
		for range 100 {
			rk := recordKeys[rng.IntN(len(recordKeys))]
			lo := windowKey(rk, uint64(rng.IntN(100)))
			var hi []byte
			switch rng.IntN(3) {
			case 0:
				hi = windowKey(rk, uint64(rng.IntN(110)))
			case 1:
				hi = append(windowKey(rk, uint64(rng.IntN(100))), 0)
			default:
				hi = topo.PrefixEnd([]byte(rk))
			}
			want := collect(t, topo.FilterKey(plain.Range(lo, hi), lo, 8))
			got := collect(t, topo.RangeKey(seg, lo, hi, 8))
			if !slices.Equal(want, got) {
				t.Fatalf("round %d: RangeKey(%x, %x):\nsegmented %q\nplain     %q", round, lo, hi, got, want)
			}
			for _, k := range [][]byte{lo, hi} {
				pe, pok, perr := plain.Get(k)
				se, sok, serr := seg.Get(k)
				if perr != nil || serr != nil || pok != sok || !bytes.Equal(pe.Value, se.Value) || pe.Timestamp != se.Timestamp {
					t.Fatalf("Get(%x): segmented %v %v %v, plain %v %v %v", k, se, sok, serr, pe, pok, perr)
				}
			}
		}
	}
	// Restored from the same changelog, both read alike again.
	var log []topo.Entry
	for e, err := range plain.Range(nil, nil) {
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, e)
	}
	rng.Shuffle(len(log), func(i, j int) { log[i], log[j] = log[j], log[i] })
	for i, e := range log {
		if i%3 == 0 {
			log = append(log, topo.Entry{Key: e.Key}) // deleted later
		}
	}
	restored := map[string]topo.KVStore{}
	for name, db := range map[string]*state.DB{"plain": plainDB, "segmented": segDB} {
		r, err := db.Restorer("r", 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range log {
			if err := r.Apply(int64(i), e.Key, e.Value, e.Timestamp); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		restored[name] = db.Task().Store("r", 1)
	}
	want, got := collect(t, restored["plain"].Range(nil, nil)), collect(t, restored["segmented"].Range(nil, nil))
	if !slices.Equal(want, got) || len(want) == 0 {
		t.Fatalf("restored:\nsegmented %q\nplain     %q", got, want)
	}
}

// A partition written in one layout and opened in another is wiped, its
// checkpoint with it, so that it is restored from its changelog rather
// than misread; one whose layout stays keeps its state.
func TestLayoutChangeWipes(t *testing.T) {
	dir := t.TempDir()
	write := func(layout func(string) state.Layout) {
		db := openDB(t, dir, state.Options{Layout: layout})
		task := db.Task()
		for _, name := range []string{"w", "kv"} {
			s := task.Store(name, 0)
			if err := s.Put(windowKey("k", 5), []byte("v"), 1); err != nil {
				t.Fatal(err)
			}
			if err := task.SetCheckpoint(name+"-changelog", 0, 9); err != nil {
				t.Fatal(err)
			}
		}
		if err := task.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	segmentW := func(seg time.Duration) func(string) state.Layout {
		return func(name string) state.Layout {
			if name == "w" {
				return state.Layout{Segment: seg, TimeAt: 8}
			}
			return state.Layout{}
		}
	}
	check := func(layout func(string) state.Layout, wantW bool) {
		t.Helper()
		db, err := state.Open(dir, state.Options{Layout: layout})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, name := range []string{"w", "kv"} {
			want := name == "kv" || wantW
			_, ok, err := db.Task().Store(name, 0).Get(windowKey("k", 5))
			_, cp, cerr := db.Checkpoint(name+"-changelog", 0)
			if err != nil || cerr != nil || ok != want || cp != want {
				t.Fatalf("store %s: key %v, checkpoint %v (%v, %v), want both %v", name, ok, cp, err, cerr, want)
			}
		}
	}
	write(nil)
	check(nil, true)
	check(segmentW(time.Minute), false) // plain, now segmented
	write(segmentW(time.Minute))
	check(segmentW(time.Minute), true)
	check(segmentW(2*time.Minute), false) // another segment length
	write(segmentW(time.Minute))
	check(nil, false) // segmented, now plain
}

// A flush's and a compaction's tables end where a store partition's keys
// do, a segmented store's where a segment's do: new windows of one
// partition are never in a table with another partition's or an older
// segment's, whose tables compacting them would rewrite (groupEnd).
func TestTablesKeepToTheirGroup(t *testing.T) {
	layout := func(name string) state.Layout {
		if name == "w" {
			return state.Layout{Segment: time.Minute, TimeAt: 8}
		}
		return state.Layout{}
	}
	db := openDB(t, t.TempDir(), state.Options{Layout: layout})
	task := db.Task()
	groups := 0
	for p := range int32(3) {
		w, kv := task.Store("w", p), task.Store("kv", p)
		groups += 4
		for seg := range uint64(3) {
			for k := range 50 {
				if err := w.Put(windowKey(fmt.Sprint("k", k), seg*60_000+uint64(k)), []byte("v"), 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k := range 50 {
			mustPut(t, kv, fmt.Sprint("k", k), "v", 1)
		}
		if err := task.SetCheckpoint("kv-changelog", p, 50); err != nil {
			t.Fatal(err)
		}
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		do   func() error
	}{{"flush", db.FlushMemtable}, {"compaction", db.CompactAll}} {
		if err := step.do(); err != nil {
			t.Fatal(err)
		}
		across, n, err := db.TablesAcrossGroups()
		if err != nil {
			t.Fatal(err)
		}
		if len(across) > 0 || n < groups {
			t.Fatalf("after the %s, %d tables for %d groups of stores' keys; across a group's end:\n%s\nall:\n%s",
				step.name, n, groups, strings.Join(across, "\n"), db.TableList())
		}
	}
}

func TestGroupEnd(t *testing.T) {
	seg := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 60_000), 7)
	data := []byte("\x01\x02st\x00\x00\x00\x05")
	segData := append([]byte("\x04\x02st\x00\x00\x00\x05"), seg...)
	for _, c := range []struct {
		key, want []byte
	}{
		{nil, nil},
		{[]byte{0x00}, []byte{0x01}},
		{append(bytes.Clone(data), "key"...), []byte("\x01\x02st\x00\x00\x00\x06")},
		{data, []byte("\x01\x02st\x00\x00\x00\x06")},
		{append(bytes.Clone(segData), "key"...), append([]byte("\x04\x02st\x00\x00\x00\x05"), binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 60_000), 8)...)},
		{[]byte("\x01\x09st"), []byte{0x02}},                 // the name's length past the key's end
		{[]byte("\x04\x02st\x00\x00\x00\x05"), []byte{0x05}}, // no segment
		{[]byte{0x02, 'x'}, []byte{0x03}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := state.GroupEnd(c.key); !bytes.Equal(got, c.want) {
			t.Errorf("groupEnd(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}
