package projection_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/projection"
)

// tables is a topology with a table of each kind a view reads, and one
// in sessions, which no view reads.
type tables struct {
	top      *engine.Topology
	counts   *engine.Table[string, int64]
	minutes  *engine.Table[engine.Windowed[string], int64]
	threes   *engine.Table[engine.CountWindowed[string], int64]
	sessions *engine.Table[engine.Windowed[string], int64]
	unkept   *engine.Table[string, int64] // kept in no store
}

func newTables(t *testing.T) tables {
	t.Helper()
	b := engine.NewBuilder()
	g := engine.NewStream(b, "clicks", serde.String, serde.String).GroupByKey()
	tb := tables{
		counts:   g.Count(engine.Materialized("counts")),
		minutes:  engine.WindowedCount(g.WindowedBy(engine.TumblingWindows(time.Minute)), engine.Materialized("minutes")),
		threes:   engine.CountWindowedCount(g.WindowedByCount(engine.TumblingCountWindows(3)), engine.Materialized("threes")),
		sessions: engine.SessionCount(g.SessionWindowedBy(engine.SessionWindows(time.Second)), engine.Materialized("sessions")),
	}
	tb.unkept = tb.counts.Filter(func(string, int64) bool { return true })
	tb.unkept.ToStream().To("kept-nowhere")
	var err error
	if tb.top, err = b.Build(); err != nil {
		t.Fatal(err)
	}
	return tb
}

// A view made from a table reads its store by the table's name, serdes
// and windows, and answers as one declared with each of them given.
func TestViewsOfTables(t *testing.T) {
	tb := newTables(t)
	counts, err := projection.Of(tb.counts)
	if err != nil {
		t.Fatal(err)
	}
	minutes, err := projection.OfWindowed(tb.minutes, projection.Named("per-minute"))
	if err != nil {
		t.Fatal(err)
	}
	threes, err := projection.OfCountWindowed(tb.threes)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v           *projection.View
		name, store string
		kind        projection.Kind
	}{
		{counts, "counts", "counts", projection.KeyValue},
		{minutes, "per-minute", "minutes", projection.Windowed},
		{threes, "threes", "threes", projection.CountWindowed},
	} {
		if c.v.Name() != c.name || c.v.Store() != c.store || c.v.Kind() != c.kind {
			t.Errorf("view %s of store %s is %s, want %s of %s, %s", c.v.Name(), c.v.Store(), c.v.Kind(), c.name, c.store, c.kind)
		}
	}
	reg, err := projection.NewRegistry(counts, minutes, threes)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Check(tb.top); err != nil {
		t.Errorf("views of the topology's own tables: %v", err)
	}

	d := enginetest.New(t, tb.top)
	in := enginetest.NewInput(d, "clicks", serde.String, serde.String)
	for i := range 7 {
		in.Pipe("ann", "c", enginetest.At(int64(i)*20_000))
	}
	if e, ok, err := counts.Get(d, "ann"); err != nil || !ok || e.Value != int64(7) {
		t.Errorf("counts of ann: %+v %v %v, want 7", e, ok, err)
	}
	ws, err := minutes.Fetch(d, "ann", enginetest.At(0), enginetest.At(120_000))
	if err != nil {
		t.Fatal(err)
	}
	// Clicks at 0, 20, …, 120 s: three in each of the first two minutes,
	// one in the third.
	var got []int64
	for _, w := range ws {
		if w.End.Sub(w.Start) != time.Minute {
			t.Errorf("window %v–%v is not a minute", w.Start, w.End)
		}
		got = append(got, w.Value.(int64))
	}
	if len(got) != 3 || got[0] != 3 || got[1] != 3 || got[2] != 1 {
		t.Errorf("ann's minutes: %v, want [3 3 1]", got)
	}
	cws, err := threes.FetchCount(d, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if len(cws) == 0 || cws[0].End-cws[0].Start != 3 || cws[0].Value != int64(3) {
		t.Errorf("ann's count windows: %+v, want the first of 3 records holding 3", cws)
	}
}

// A table no view can read is refused at once, with engine.ErrStoreKind;
// so is a registry whose views do not match the topology's stores.
func TestViewsOfTheWrongStore(t *testing.T) {
	tb := newTables(t)
	if _, err := projection.Of(tb.unkept); !errors.Is(err, engine.ErrStoreKind) || !strings.Contains(err.Error(), "kept in no store") {
		t.Errorf("Of a table in no store: %v", err)
	}
	if _, err := projection.OfWindowed(tb.sessions); !errors.Is(err, engine.ErrStoreKind) || !strings.Contains(err.Error(), `store "sessions" is a session store`) {
		t.Errorf("OfWindowed of sessions: %v", err)
	}

	hourly, _ := projection.NewWindowed("hourly", "minutes", serde.String, serde.Int64, time.Hour)
	flat, _ := projection.NewKeyValue("flat", "minutes", serde.String, serde.Int64)
	windowed, _ := projection.NewWindowed("windowed", "counts", serde.String, serde.Int64, time.Minute)
	fours, _ := projection.NewCountWindowed("fours", "threes", serde.String, serde.Int64, 4)
	missing, _ := projection.NewKeyValue("missing", "nope", serde.String, serde.Int64)
	reg, err := projection.NewRegistry(hourly, flat, windowed, fours, missing)
	if err != nil {
		t.Fatal(err)
	}
	err = reg.Check(tb.top)
	if !errors.Is(err, engine.ErrStoreKind) {
		t.Fatalf("Check: %v, want ErrStoreKind", err)
	}
	for _, want := range []string{
		`view "hourly" reads windows of 1h0m0s from store "minutes", which is a window store (windows of 1m0s)`,
		`view "flat" reads key-value from store "minutes", which is a window store`,
		`view "windowed" reads windows of 1m0s from store "counts", which is a key-value store`,
		`view "fours" reads windows of 4 records from store "threes", which is a count-window store (windows of 3 records)`,
		`view "missing" reads store "nope", which the topology does not have`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check does not say %q:\n%v", want, err)
		}
	}
}
