package httpapi

import (
	"testing"
	"time"
)

// The history keeps the samples of the last window, oldest first.
func TestLagHistoryWindow(t *testing.T) {
	h := &lagHistory{window: 15 * time.Minute}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i := range 200 { // 5 s apart: 16 min 35 s
		h.add(LagSample{At: t0.Add(time.Duration(i) * lagSampleEvery), Lag: map[string]map[int32]int64{"in": {0: int64(i)}}})
	}
	got := h.get()
	first, last := got[0], got[len(got)-1]
	if last.Lag["in"][0] != 199 || last.At.Sub(first.At) != 15*time.Minute || len(got) != 181 {
		t.Errorf("%d samples from %v to %v, want the last 15 minutes: 181", len(got), first.At, last.At)
	}
}
