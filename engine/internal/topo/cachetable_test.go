package topo

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The entry table against a Go map, under random adds and removes over a
// few keys (long probe runs, wrapping past the table's end) and many
// (growing): every key the map holds is found at its entry, every other
// key is not, and every entry's slot is where the table keeps it.
func TestEntryTableAgainstMap(t *testing.T) {
	for _, keys := range []int{7, 50, 5000} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(keys), 1))
			tbl := newEntryTable()
			want := map[string]*cacheEntry{}
			for step := range 40 * keys {
				k := []byte(fmt.Sprintf("k%d", rng.IntN(keys)))
				e, h := tbl.get(k)
				if e != want[string(k)] {
					t.Fatalf("step %d: get(%s) = %p, want %p", step, k, e, want[string(k)])
				}
				if h != tbl.hash(k) {
					t.Fatalf("step %d: get(%s) gave another hash than hash", step, k)
				}
				switch {
				case e == nil:
					e = &cacheEntry{key: k}
					tbl.add(e, h)
					want[string(k)] = e
				case rng.IntN(3) > 0:
					tbl.remove(e)
					if e.tbl != nil {
						t.Fatalf("step %d: a removed entry still names its table", step)
					}
					delete(want, string(k))
				}
				if tbl.n != len(want) {
					t.Fatalf("step %d: %d entries, want %d", step, tbl.n, len(want))
				}
			}
			seen := 0
			tbl.each(func(e *cacheEntry) {
				seen++
				if want[string(e.key)] != e || tbl.slots[e.slot].e != e || e.tbl != tbl {
					t.Errorf("entry %s: not the map's, or not at its slot %d", e.key, e.slot)
				}
			})
			if seen != len(want) {
				t.Errorf("each gave %d entries, want %d", seen, len(want))
			}
			if 2*tbl.n > len(tbl.slots) {
				t.Errorf("%d entries in %d slots: more than half full", tbl.n, len(tbl.slots))
			}
		})
	}
}

// Keys that all hash to one home slot (the table's seed fixed to make
// them) leave no gap in their run when one in the middle goes.
func TestEntryTableRemoveMidRun(t *testing.T) {
	tbl := newEntryTable()
	mask := uint64(len(tbl.slots) - 1)
	var same [][]byte
	home := tbl.hash([]byte("a")) & mask
	for i := 0; len(same) < 4; i++ {
		k := []byte(fmt.Sprintf("x%d", i))
		if tbl.hash(k)&mask == home {
			same = append(same, k)
		}
	}
	es := make([]*cacheEntry, len(same))
	for i, k := range same {
		es[i] = &cacheEntry{key: k}
		_, h := tbl.get(k)
		tbl.add(es[i], h)
	}
	tbl.remove(es[1])
	for i, k := range same {
		e, _ := tbl.get(k)
		if i == 1 && e != nil || i != 1 && e != es[i] {
			t.Errorf("after removing %s: get(%s) = %v", same[1], k, e)
		}
	}
}
