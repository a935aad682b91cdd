package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// handles are the tables of handlesTopology, each kept in a store of
// another kind.
type handles struct {
	counts   *engine.Table[string, int64]
	minutes  *engine.Table[engine.Windowed[string], int64]
	sessions *engine.Table[engine.Windowed[string], int64]
	threes   *engine.Table[engine.CountWindowed[string], int64]
	latest   *engine.Table[string, string]
	filtered *engine.Table[string, int64] // kept in no store
}

// handlesTopology counts the words of "words" by key, in minutes, in
// sessions (10 s of quiet) and in windows of three records, and keeps
// "prices" as a versioned table.
func handlesTopology(t *testing.T) (*engine.Topology, handles) {
	t.Helper()
	b := engine.NewBuilder()
	words := engine.NewStream(b, "words", serde.String, serde.String)
	g := words.GroupByKey()
	var h handles
	h.counts = g.Count(engine.Materialized("counts"))
	h.minutes = engine.WindowedCount(g.WindowedBy(engine.TumblingWindows(time.Minute)), engine.Materialized("minutes"))
	h.sessions = engine.SessionCount(g.SessionWindowedBy(engine.SessionWindows(10*time.Second)), engine.Materialized("sessions"))
	h.threes = engine.CountWindowedCount(g.WindowedByCount(engine.TumblingCountWindows(3)), engine.Materialized("threes"))
	h.latest = engine.NewTable(b, "prices", serde.String, serde.String, engine.Materialized("latest"), engine.Versioned(time.Hour))
	h.filtered = h.counts.Filter(func(_ string, n int64) bool { return n > 1 })
	h.filtered.ToStream().To("filtered")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top, h
}

// A table handle opens its store with the serdes it was written with and
// the windows' size, and answers as the query by name with everything
// given does; both agree with what the input says.
func TestQueryByTableHandle(t *testing.T) {
	top, h := handlesTopology(t)
	d := enginetest.New(t, top)
	words := enginetest.NewInput(d, "words", serde.String, serde.String)
	prices := enginetest.NewInput(d, "prices", serde.String, serde.String)
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []string{"ant", "bee", "cat"}
	counts := map[string]int64{}
	perMinute := map[string]map[int64]int64{}
	var at int64
	for i := range 60 {
		k := keys[rng.IntN(len(keys))]
		at += int64(rng.IntN(9000))
		words.Pipe(k, fmt.Sprint(i), enginetest.At(at))
		counts[k]++
		if perMinute[k] == nil {
			perMinute[k] = map[int64]int64{}
		}
		perMinute[k][at/60000*60000]++
	}
	prices.Pipe("ant", "1.00", enginetest.At(1000))
	prices.Pipe("ant", "1.50", enginetest.At(5000))

	kv, err := engine.QueryTable(d, h.counts)
	if err != nil {
		t.Fatal(err)
	}
	byName := enginetest.StoreContents(d, "counts", serde.String, serde.Int64)
	for _, k := range keys {
		n, ok, err := kv.Get(k)
		if err != nil || !ok || n != counts[k] || byName[k] != n {
			t.Errorf("counts %s: handle %d %v %v, by name %d, input %d", k, n, ok, err, byName[k], counts[k])
		}
	}

	win, err := engine.QueryWindowedTable(d, h.minutes)
	if err != nil {
		t.Fatal(err)
	}
	named, err := engine.QueryWindowStore(d, "minutes", serde.String, serde.Int64, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		got, want := map[int64]int64{}, perMinute[k]
		for w, err := range win.Fetch(k, enginetest.At(0), enginetest.At(at)) {
			if err != nil {
				t.Fatal(err)
			}
			if w.Key.Window.End.Sub(w.Key.Window.Start) != time.Minute {
				t.Errorf("%s: window %v is not a minute", k, w.Key.Window)
			}
			got[w.Key.Window.Start.Sub(enginetest.Epoch).Milliseconds()] = w.Value
		}
		var byNameN int
		for _, err := range named.Fetch(k, enginetest.At(0), enginetest.At(at)) {
			if err != nil {
				t.Fatal(err)
			}
			byNameN++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || byNameN != len(want) {
			t.Errorf("minutes of %s: handle %v (%d by name), input %v", k, got, byNameN, want)
		}
	}

	sess, err := engine.QuerySessionTable(d, h.sessions)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var total int64
		for s, err := range sess.Fetch(k) {
			if err != nil {
				t.Fatal(err)
			}
			total += s.Value
		}
		if total != counts[k] {
			t.Errorf("sessions of %s hold %d records, input %d", k, total, counts[k])
		}
	}

	threes, err := engine.QueryCountWindowedTable(d, h.threes)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var n int
		for w, err := range threes.Fetch(k) {
			if err != nil {
				t.Fatal(err)
			}
			if w.Key.Window.End-w.Key.Window.Start != 3 {
				t.Errorf("%s: count window %v is not of 3 records", k, w.Key.Window)
			}
			n++
		}
		if n == 0 {
			t.Errorf("no count window of %s", k)
		}
	}

	ver, err := engine.QueryVersionedTable(d, h.latest)
	if err != nil {
		t.Fatal(err)
	}
	if v, _, ok, err := ver.GetAsOf("ant", enginetest.At(2000)); err != nil || !ok || v != "1.00" {
		t.Errorf("versioned ant as of 2 s: %q %v %v, want 1.00", v, ok, err)
	}
	// A key-value read of a versioned table gives its latest values.
	latest, err := engine.QueryTable(d, h.latest)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := latest.Get("ant"); err != nil || !ok || v != "1.50" {
		t.Errorf("latest ant: %q %v %v, want 1.50", v, ok, err)
	}

	// WithSerdes changes what follows the table, not how its store was
	// written: the handle keeps reading with the store's serdes.
	other := h.counts.WithSerdes(serde.String, serde.JSON[int64]())
	kv2, err := engine.QueryTable(d, other)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := kv2.Get("ant"); err != nil || n != counts["ant"] {
		t.Errorf("counts through WithSerdes: %d %v, want %d", n, err, counts["ant"])
	}
}

// The topology says what each of its stores holds.
func TestTopologyStoreInfo(t *testing.T) {
	top, _ := handlesTopology(t)
	for _, c := range []struct {
		store string
		want  engine.StoreInfo
	}{
		{"counts", engine.StoreInfo{Name: "counts", Kind: engine.KeyValueKind}},
		{"minutes", engine.StoreInfo{Name: "minutes", Kind: engine.WindowKind, WindowSize: time.Minute}},
		{"sessions", engine.StoreInfo{Name: "sessions", Kind: engine.SessionKind}},
		{"threes", engine.StoreInfo{Name: "threes", Kind: engine.CountWindowKind, WindowRecords: 3}},
		{"latest", engine.StoreInfo{Name: "latest", Kind: engine.VersionedKind}},
	} {
		if got, ok := top.Store(c.store); !ok || got != c.want {
			t.Errorf("Store(%q) = %+v %v, want %+v", c.store, got, ok, c.want)
		}
	}
	if _, ok := top.Store("nope"); ok {
		t.Error(`Store("nope") is found`)
	}
}

// A query that reads a store as something it does not hold is refused
// with ErrStoreKind, in words that say what the store holds, whether it
// names the store or comes from a table handle; nothing is decoded.
func TestQueryOfTheWrongStoreKind(t *testing.T) {
	top, h := handlesTopology(t)
	d := enginetest.New(t, top)
	enginetest.NewInput(d, "words", serde.String, serde.String).Pipe("ant", "a", enginetest.At(0))
	for _, c := range []struct {
		name string
		open func() error
		says string
	}{
		{"window query of a key-value store", func() error {
			_, err := engine.QueryWindowStore(d, "counts", serde.String, serde.Int64, time.Minute)
			return err
		}, `store "counts" is a key-value store: QueryWindowStore reads window stores`},
		{"key-value query of a window store", func() error {
			_, err := engine.QueryKeyValueStore(d, "minutes", serde.String, serde.Int64)
			return err
		}, `store "minutes" is a window store (windows of 1m0s): QueryKeyValueStore reads key-value stores`},
		{"windows of another size", func() error {
			_, err := engine.QueryWindowStore(d, "minutes", serde.String, serde.Int64, time.Hour)
			return err
		}, `store "minutes" holds windows of 1m0s, not 1h0m0s`},
		{"session query of a window store", func() error {
			_, err := engine.QuerySessionStore(d, "minutes", serde.String, serde.Int64)
			return err
		}, `QuerySessionStore reads session stores`},
		{"count windows of another size", func() error {
			_, err := engine.QueryCountWindowStore(d, "threes", serde.String, serde.Int64, 4)
			return err
		}, `store "threes" holds windows of 3 records, not 4`},
		{"versioned query of a key-value store", func() error {
			_, err := engine.QueryVersionedStore(d, "counts", serde.String, serde.Int64)
			return err
		}, `QueryVersionedStore reads versioned stores`},
		{"table kept in no store", func() error {
			_, err := engine.QueryTable(d, h.filtered)
			return err
		}, `is kept in no store of its own (give it Materialized)`},
		{"versioned query of a table that is not", func() error {
			_, err := engine.QueryVersionedTable(d, h.counts)
			return err
		}, `is kept in a key-value store: QueryVersionedTable reads [versioned]`},
		{"key-value query of a windowed table", func() error {
			_, err := engine.QueryTable(d, h.minutes)
			return err
		}, `is kept in a window store (windows of 1m0s): Table.Store reads [key-value versioned]`},
		{"session query of a time-windowed table", func() error {
			_, err := engine.QuerySessionTable(d, h.minutes)
			return err
		}, `QuerySessionTable reads [session]`},
		{"window query of a session table", func() error {
			_, err := engine.QueryWindowedTable(d, h.sessions)
			return err
		}, `QueryWindowedTable reads [window]`},
	} {
		err := c.open()
		if !errors.Is(err, engine.ErrStoreKind) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrStoreKind saying %q", c.name, err, c.says)
		}
	}
}
