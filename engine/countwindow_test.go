package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// QueryCountWindowStore reads a key's count windows in order — the full
// ones Keep keeps and the one filling — and never another key's, not even
// those of a key that begins with it and whose windows sort between its
// own ("a\x00" beside "a").
func TestQueryCountWindowStore(t *testing.T) {
	b := engine.NewBuilder()
	engine.CountWindowedCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().
		WindowedByCount(engine.TumblingCountWindows(2)), engine.Materialized("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	for i, k := range []string{"a", "a\x00", "a", "a\x00", "a", "ab", "a", "a\x00", "a", "b"} {
		in.Pipe(k, "x", enginetest.At(int64(i)))
	}
	// a has 5 records: #[0,2) full, then gone when #[2,4) filled (Keep 1),
	// and #[4,6) filling.
	cs, err := engine.QueryCountWindowStore(d, "counts", serde.String, serde.Int64, 2)
	if err != nil {
		t.Fatal(err)
	}
	show := func(seq func(func(engine.KeyValue[engine.CountWindowed[string], int64], error) bool)) string {
		var got []string
		for kv, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%q%s=%d", kv.Key.Key, kv.Key.Window, kv.Value))
		}
		return strings.Join(got, " ")
	}
	for key, want := range map[string]string{
		"a":     `"a"#[2,4)=2 "a"#[4,6)=1`,
		"a\x00": `"a\x00"#[0,2)=2 "a\x00"#[2,4)=1`,
		"ab":    `"ab"#[0,2)=1`,
		"c":     ``,
	} {
		if got := show(cs.Fetch(key)); got != want {
			t.Errorf("Fetch(%q) = %s, want %s", key, got, want)
		}
	}
	if got, want := show(cs.FetchKeys("a\x00", "b")), `"a\x00"#[0,2)=2 "a\x00"#[2,4)=1 "ab"#[0,2)=1`; got != want {
		t.Errorf("FetchKeys(a\\x00, b) = %s, want %s", got, want)
	}
	if v, ok, err := cs.Get("a", 2); err != nil || !ok || v != 2 {
		t.Errorf("Get(a, 2) = %d, %v, %v; want 2", v, ok, err)
	}
	if _, ok, err := cs.Get("a", 0); err != nil || ok {
		t.Errorf("Get(a, 0) found %v (%v); want the window dropped once a later one was full", ok, err)
	}
	if got := strings.Count(show(cs.All()), "="); got != 6 {
		t.Errorf("All: %d windows, want 6", got)
	}
	if _, err := engine.QueryCountWindowStore(d, "counts", serde.String, serde.Int64, 0); err == nil {
		t.Error("a window size of 0 was accepted")
	}
}

// On Kafka, with keys spread over three partitions: every key's windows
// are read from the partition that holds them.
func TestAppQueryCountWindowStore(t *testing.T) {
	k := newKT(t)
	in := k.topic("in")
	k.create(3, in)
	b := engine.NewBuilder()
	engine.CountWindowedCount(engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		WindowedByCount(engine.TumblingCountWindows(2)), engine.Materialized("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var recs []*kgo.Record
	for i, key := range keys {
		for range i + 1 { // key i has i+1 records
			recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte("x")})
		}
	}
	k.produce(in, recs...)
	a := k.start(top, engine.Config{})
	waitRunning(t, k, a)
	cs, err := engine.QueryCountWindowStore(a.App, "counts", serde.String, serde.Int64, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range keys {
		n := int64(i + 1)
		// The latest full window, if any, and the one filling, if any.
		var want []string
		if full := n / 2 * 2; full > 0 {
			want = append(want, fmt.Sprintf("#[%d,%d)=2", full-2, full))
		}
		if n%2 == 1 {
			want = append(want, fmt.Sprintf("#[%d,%d)=1", n-1, n+1))
		}
		var got []string
		await.Until(t, 30*time.Second, "the windows of "+key, func() bool {
			got = got[:0]
			for kv, err := range cs.Fetch(key) {
				if errors.Is(err, engine.ErrNotReady) {
					return false
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%s=%d", kv.Key.Window, kv.Value))
			}
			return slices.Equal(got, want)
		})
		if v, ok, err := cs.Get(key, (n-1)/2*2); err != nil || !ok {
			t.Errorf("Get(%s, %d) = %d, %v, %v; want its latest window", key, (n-1)/2*2, v, ok, err)
		}
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}
