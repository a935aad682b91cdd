package main

import (
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
