package main

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// The expected counts, against a record-by-record reckoning: windows placed
// as Kafka Streams' TimeWindows.windowsFor places them.
func TestExpectedCounts(t *testing.T) {
	const records, keys = 3000, 7
	in := &inputModel{keys: keys, base: time.UnixMilli(1_700_000_123_457), step: 30 * time.Minute / records}
	in.letters = make([]byte, 8*records)
	live := time.UnixMilli(1_700_000_123_457).Add(31 * time.Minute)
	for i := range 50 {
		in.addLive(i%3, live.Add(time.Duration(i)*37*time.Millisecond), 100)
	}
	const size, advance = int64(5 * 60_000), int64(60_000)
	windows, counts := map[string]int64{}, map[string]int64{}
	for i := range in.records() {
		k, ts := keyName(in.key(i)), in.eventTime(i)
		counts[k]++
		for s := max(0, ts-size+advance) / advance * advance; s <= ts; s += advance {
			windows[fmt.Sprintf("%s@%d", k, s)]++
		}
	}
	for topology, want := range map[string]map[string]int64{"count": counts, "window": windows} {
		got := expectedCounts(in, topology)
		if len(got) != len(want) {
			t.Errorf("%s: %d keys, want %d", topology, len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: key %s: %d, want %d", topology, k, got[k], w)
			}
		}
	}
	if n := in.generated(); n != records {
		t.Errorf("generated %d, want %d", n, records)
	}
	if h := in.head(records + 3); h[8] != 'b' || in.key(records+3) != 0 {
		t.Errorf("live record 3: head %q, key %d", h, in.key(records+3))
	}
}

// The other window kinds' expected counts, against a record-by-record
// reckoning of a few keys: sliding windows from each record's own window
// and the one after it, sessions from gaps, tumbling windows by start.
func TestExpectedWindowKinds(t *testing.T) {
	const m = int64(60_000)
	base := 1_700_000_000_000 - 1_700_000_000_000%(5*m)
	in := &inputModel{keys: 1, base: time.UnixMilli(base), step: time.Millisecond}
	// Key 0's records at these minutes past base (plus a ms, so that no
	// two windows of the reckoning coincide by accident).
	at := []int64{0, 2, 6, 7, 14, 20, 21}
	for _, mins := range at {
		in.addLive(0, time.UnixMilli(base+mins*m+1), 100)
	}
	count := func(lo, hi int64) (n int64) { // records in [lo, hi]
		for _, mins := range at {
			if t := base + mins*m + 1; lo <= t && t <= hi {
				n++
			}
		}
		return n
	}
	ms := func(mins int64) int64 { return base + mins*m + 1 }
	k := keyName(0)
	want := map[string]map[string]int64{
		"tumbling": {
			fmt.Sprintf("%s@%d", k, base):      2,
			fmt.Sprintf("%s@%d", k, base+5*m):  2,
			fmt.Sprintf("%s@%d", k, base+10*m): 1,
			fmt.Sprintf("%s@%d", k, base+20*m): 2,
		},
		"session": {
			// 0, 2, 6, 7 (gaps of 2, 4, 1 minutes); 14 alone (7 after 7);
			// 20, 21.
			sessionName(k, ms(0), ms(7)):   4,
			sessionName(k, ms(14), ms(14)): 1,
			sessionName(k, ms(20), ms(21)): 2,
		},
		"sliding": {},
	}
	for i, mins := range at {
		t := ms(mins)
		want["sliding"][fmt.Sprintf("%s@%d", k, t-5*m)] = count(t-5*m, t)
		// The window after it, if the next record comes within 5 minutes
		// and a ms: after 0, 2, 6, 20.
		if i+1 < len(at) && ms(at[i+1]) <= t+1+5*m {
			want["sliding"][fmt.Sprintf("%s@%d", k, t+1)] = count(t+1, t+1+5*m)
		}
	}
	if n := len(want["sliding"]); n != 7+4 {
		t.Fatalf("the reckoning has %d sliding windows, want 11", n)
	}
	for topology, w := range want {
		got := expectedCounts(in, topology)
		if len(got) != len(w) {
			t.Errorf("%s: %d windows %v, want %d %v", topology, len(got), got, len(w), w)
			continue
		}
		for key, c := range w {
			if got[key] != c {
				t.Errorf("%s: %s: %d, want %d", topology, key, got[key], c)
			}
		}
	}
	sk := append([]byte(k), make([]byte, 16)...)
	binary.BigEndian.PutUint64(sk[len(k):], uint64(ms(7)))
	binary.BigEndian.PutUint64(sk[len(k)+8:], uint64(ms(0)))
	if got, want := outputKey("session", sk), sessionName(k, ms(0), ms(7)); got != want {
		t.Errorf("session output key %q, want %q", got, want)
	}
}
