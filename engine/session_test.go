package engine_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

func TestSessionWindowedSerde(t *testing.T) {
	s := engine.SessionWindowedSerde(serde.String)
	w := engine.Windowed[string]{Key: "u1", Window: engine.Window{Start: time.UnixMilli(1000).UTC(), End: time.UnixMilli(2000).UTC()}}
	b, err := s.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	// Kafka Streams' session key: the key, the end, the start.
	if want := "u1\x00\x00\x00\x00\x00\x00\x07\xd0\x00\x00\x00\x00\x00\x00\x03\xe8"; string(b) != want {
		t.Errorf("encoded %q, want %q", b, want)
	}
	got, err := s.Decode(b)
	if err != nil || got != w {
		t.Errorf("decoded %+v, %v; want %+v", got, err, w)
	}
	if _, err := s.Decode([]byte("too short")); err == nil {
		t.Error("a key shorter than 16 bytes decoded")
	}
}

// Bad session definitions and missing functions are build errors.
func TestSessionErrors(t *testing.T) {
	for _, w := range []engine.Sessions{engine.SessionWindows(0), engine.SessionWindows(time.Minute).Grace(-time.Second)} {
		b := engine.NewBuilder()
		engine.SessionCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().SessionWindowedBy(w))
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "SessionWindowedBy") {
			t.Errorf("%+v: Build error %v", w, err)
		}
	}
	b := engine.NewBuilder()
	ss := engine.NewStream(b, "in", serde.String, serde.Int64).GroupByKey().SessionWindowedBy(engine.SessionWindows(time.Minute))
	engine.SessionAggregate(ss, func() int64 { return 0 }, func(_ string, v, a int64) int64 { return a + v }, nil)
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "merge") {
		t.Errorf("Build error %v, want one naming the missing merge function", err)
	}
}

// sessionModel computes sessions from their definition: a key's records,
// in time order, are in one session while each is at most gap after the
// one before. Keys are "<key>@<start>-<end>", values the sums.
func sessionModel(recs []slidingRec, gap int64) map[string]int64 {
	byKey := map[string][]slidingRec{}
	for _, r := range recs {
		byKey[r.key] = append(byKey[r.key], r)
	}
	out := map[string]int64{}
	for k, rs := range byKey {
		slices.SortFunc(rs, func(a, b slidingRec) int { return int(a.ts - b.ts) })
		start, end, sum := rs[0].ts, rs[0].ts, int64(0)
		for _, r := range rs {
			if r.ts-end > gap {
				out[fmt.Sprintf("%s@%d-%d", k, start, end)] = sum
				start, sum = r.ts, 0
			}
			end = r.ts
			sum += r.v
		}
		out[fmt.Sprintf("%s@%d-%d", k, start, end)] = sum
	}
	return out
}

// In any order, the sessions end up as their definition says: merged
// sessions are retracted, and what remains is each session once, with the
// sum of its records.
func TestSessionsMatchTheirDefinition(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 4))
		gap := int64(1 + rng.IntN(15))
		var recs []slidingRec
		for range 1 + rng.IntN(30) {
			recs = append(recs, slidingRec{key: string(rune('a' + rng.IntN(2))), ts: int64(rng.IntN(120)), v: int64(1 + rng.IntN(9))})
		}
		b := engine.NewBuilder()
		ss := engine.NewStream(b, "in", serde.String, serde.Int64).GroupByKey().SessionWindowedBy(engine.SessionWindows(time.Duration(gap) * time.Millisecond).Grace(time.Hour))
		sums := engine.SessionReduce(ss, func(a, v int64) int64 { return a + v }, engine.Materialized("sums"))
		text := serde.Func(func(k engine.Windowed[string]) ([]byte, error) {
			return fmt.Appendf(nil, "%s@%d-%d", k.Key, k.Window.Start.UnixMilli(), k.Window.End.UnixMilli()), nil
		}, func([]byte) (engine.Windowed[string], error) { return engine.Windowed[string]{}, nil })
		sums.ToStream().WithSerdes(text, serde.Int64).To("out")
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		drv := enginetest.New(t, top)
		in := enginetest.NewInput(drv, "in", serde.String, serde.Int64)
		for _, r := range recs {
			in.Pipe(r.key, r.v, time.UnixMilli(r.ts))
		}
		want := sessionModel(recs, gap)
		got := enginetest.ReadTable(enginetest.NewOutput(drv, "out", serde.String, serde.Int64))
		if !maps.Equal(got, want) {
			t.Fatalf("seed %d, gap %d, records %v:\ngot  %v\nwant %v", seed, gap, recs, got, want)
		}
		// The store holds the same sessions.
		store, err := engine.QuerySessionStore(drv, "sums", serde.String, serde.Int64)
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string]int64{}
		for kv, err := range store.All() {
			if err != nil {
				t.Fatal(err)
			}
			stored[fmt.Sprintf("%s@%d-%d", kv.Key.Key, kv.Key.Window.Start.UnixMilli(), kv.Key.Window.End.UnixMilli())] = kv.Value
		}
		if !maps.Equal(stored, want) {
			t.Fatalf("seed %d: store %v, want %v", seed, stored, want)
		}
	}
}

// SessionAggregate merges the aggregates of the sessions a record bridges,
// earliest first, starting from init, then adds the record.
func TestSessionAggregateMerges(t *testing.T) {
	b := engine.NewBuilder()
	// Grace keeps [0,0] in the store's retention when [30,30] is written.
	ss := engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().SessionWindowedBy(engine.SessionWindows(20 * time.Millisecond).Grace(20 * time.Millisecond))
	engine.SessionAggregate(ss, func() string { return "" },
		func(_ string, v, agg string) string { return agg + v },
		func(_ string, a, b string) string { return a + "+" + b },
		engine.Materialized("words"), engine.ValueSerde(serde.String))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	in.Pipe("k", "a", enginetest.At(0))
	in.Pipe("k", "b", enginetest.At(30))
	in.Pipe("k", "c", enginetest.At(15)) // bridges [0,0] and [30,30]
	store, err := engine.QuerySessionStore(d, "words", serde.String, serde.String)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for kv, err := range store.Fetch("k") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("[%d,%d]=%s", kv.Key.Window.Start.Sub(enginetest.Epoch).Milliseconds(), kv.Key.Window.End.Sub(enginetest.Epoch).Milliseconds(), kv.Value))
	}
	// init "" merged with "a" gives "+a", then "b": "+a+b"; then the record.
	if want := "[0,30]=+a+bc"; strings.Join(got, " ") != want {
		t.Errorf("sessions %v, want %s", got, want)
	}
}

// FindSessions gives one key's sessions that reach into a time range, and
// no session of another key, even one whose bytes begin with it.
func TestQuerySessionStore(t *testing.T) {
	b := engine.NewBuilder()
	engine.SessionCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().
		SessionWindowedBy(engine.SessionWindows(5*time.Millisecond)), engine.Materialized("sessions"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	for _, p := range []struct {
		key string
		ms  int64
	}{{"a", 0}, {"a", 3}, {"ab", 4}, {"a", 20}, {"a", 40}, {"a", 44}, {"b", 45}} {
		in.Pipe(p.key, "x", enginetest.At(p.ms))
	}
	ss, err := engine.QuerySessionStore(d, "sessions", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	find := func(key string, earliestEnd, latestStart int64) string {
		var got []string
		for kv, err := range ss.FindSessions(key, enginetest.At(earliestEnd), enginetest.At(latestStart)) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s[%d,%d]=%d", kv.Key.Key, kv.Key.Window.Start.Sub(enginetest.Epoch).Milliseconds(), kv.Key.Window.End.Sub(enginetest.Epoch).Milliseconds(), kv.Value))
		}
		return strings.Join(got, " ")
	}
	for _, tc := range []struct {
		key        string
		end, start int64
		want       string
	}{
		{"a", 0, 100, "a[0,3]=2 a[20,20]=1 a[40,44]=2"},
		{"a", 4, 100, "a[20,20]=1 a[40,44]=2"},
		{"a", 3, 20, "a[0,3]=2 a[20,20]=1"},
		{"a", 21, 39, ""},
		{"ab", 0, 100, "ab[4,4]=1"},
		{"c", 0, 100, ""},
	} {
		if got := find(tc.key, tc.end, tc.start); got != tc.want {
			t.Errorf("FindSessions(%s, %d, %d) = %q, want %q", tc.key, tc.end, tc.start, got, tc.want)
		}
	}
	findKeys := func(from, to string, earliestEnd, latestStart int64) string {
		var got []string
		for kv, err := range ss.FindSessionsKeys(from, to, enginetest.At(earliestEnd), enginetest.At(latestStart)) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s[%d,%d]=%d", kv.Key.Key, kv.Key.Window.Start.Sub(enginetest.Epoch).Milliseconds(), kv.Key.Window.End.Sub(enginetest.Epoch).Milliseconds(), kv.Value))
		}
		return strings.Join(got, " ")
	}
	for _, tc := range []struct {
		from, to   string
		end, start int64
		want       string
	}{
		{"a", "b", 0, 100, "a[0,3]=2 a[20,20]=1 a[40,44]=2 ab[4,4]=1"},
		{"a", "c", 21, 100, "a[40,44]=2 b[45,45]=1"},
		{"ab", "b", 0, 3, ""},
		{"b", "a", 0, 100, ""},
	} {
		if got := findKeys(tc.from, tc.to, tc.end, tc.start); got != tc.want {
			t.Errorf("FindSessionsKeys(%s, %s, %d, %d) = %q, want %q", tc.from, tc.to, tc.end, tc.start, got, tc.want)
		}
	}
}
