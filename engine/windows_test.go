package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// WindowedSerde writes the key then the window start, 8 bytes big-endian,
// and reads the window back with its size.
func TestWindowedSerde(t *testing.T) {
	s := engine.WindowedSerde(serde.String, time.Minute)
	w := engine.Windowed[string]{Key: "acme", Window: engine.Window{Start: time.UnixMilli(120_000).UTC(), End: time.UnixMilli(180_000).UTC()}}
	b, err := s.Encode(w)
	if err != nil {
		t.Fatal(err)
	}
	if want := "acme\x00\x00\x00\x00\x00\x01\xd4\xc0"; string(b) != want {
		t.Errorf("encoded %q, want %q", b, want)
	}
	got, err := s.Decode(b)
	if err != nil || got != w {
		t.Errorf("decoded %+v, %v; want %+v", got, err, w)
	}
	if _, err := s.Decode([]byte("short")); err == nil {
		t.Error("a key shorter than 8 bytes decoded")
	}
}

// Bad window definitions are build errors.
func TestWindowErrors(t *testing.T) {
	for _, w := range []engine.TimeWindows{
		engine.TumblingWindows(0),
		engine.HoppingWindows(time.Minute, 2*time.Minute),
		engine.TumblingWindows(time.Minute).Grace(-time.Second),
	} {
		b := engine.NewBuilder()
		engine.WindowedCount(engine.NewStream(b, "in", serde.String, serde.String).GroupByKey().WindowedBy(w))
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "WindowedBy") {
			t.Errorf("%+v: Build error %v", w, err)
		}
	}
}

// On Kafka a windowed count keeps its windows in a store with a changelog:
// the output and the store agree, and the store answers for a window.
func TestAppWindowedCount(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	b := engine.NewBuilder()
	counts := engine.WindowedCount(engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		WindowedBy(engine.TumblingWindows(time.Minute)), engine.Materialized("per-minute"))
	counts.ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{})
	base := enginetest.Epoch
	var recs []*kgo.Record
	for i, s := range []int{0, 10, 59, 60, 61, 130} {
		recs = append(recs, &kgo.Record{Key: []byte("acme"), Value: []byte{byte('a' + i)}, Timestamp: base.Add(time.Duration(s) * time.Second)})
	}
	k.produce(in, recs...)
	ws := engine.WindowedSerde(serde.String, time.Minute)
	key := func(minute int) string {
		b, _ := ws.Encode(engine.Windowed[string]{Key: "acme", Window: engine.Window{Start: base.Add(time.Duration(minute) * time.Minute)}})
		return string(b)
	}
	want := map[string]int64{key(0): 3, key(1): 2, key(2): 1}
	k.table(out, 60*time.Second, func(m map[string]int64) bool {
		return len(m) == 3 && m[key(0)] == 3 && m[key(1)] == 2 && m[key(2)] == 1
	})
	store, err := engine.QueryKeyValueStore(a.App, "per-minute", ws, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	for minute, n := range []int64{3, 2, 1} {
		w := engine.Windowed[string]{Key: "acme", Window: engine.Window{Start: base.Add(time.Duration(minute) * time.Minute)}}
		var got int64
		wait(t, 10*time.Second, "the window's count to be committed", func() bool {
			v, _, err := store.Get(w)
			if errors.Is(err, engine.ErrNotReady) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			got = v
			return v == n
		})
		if got != want[key(minute)] {
			t.Errorf("minute %d: %d", minute, got)
		}
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}
