package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// A stream-stream inner join gives each pair of records within the windows
// once, in any order, while both sides keep their records (the grace here
// keeps them all); an outer join, given the records in time order and
// looking for non-joined results on every record, also gives each record
// that has no partner once, as the definition says. (Out of order, a
// record that arrives after its window has passed and meets no partner yet
// gives its null-joined result at once, and may still join a partner that
// comes later within the grace: Kafka Streams' rule.)
func TestStreamJoinsMatchTheirDefinition(t *testing.T) {
	type rec struct {
		left bool
		key  string
		ts   int64
		id   string
	}
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 9))
		before, after := int64(rng.IntN(15)), int64(1+rng.IntN(15))
		var recs []rec
		for i := range 2 + rng.IntN(30) {
			recs = append(recs, rec{left: rng.IntN(2) == 0, key: string(rune('a' + rng.IntN(3))), ts: 1000 + int64(rng.IntN(100)), id: fmt.Sprint(i)})
		}
		w := engine.JoinTimeDifference(0).Before(time.Duration(before) * time.Millisecond).After(time.Duration(after) * time.Millisecond).Grace(time.Hour)
		b := engine.NewBuilder()
		l, r := engine.NewStream(b, "l", serde.String, serde.String), engine.NewStream(b, "r", serde.String, serde.String)
		engine.JoinStreams(l, r, w, func(k string, lv, rv string) string { return fmt.Sprintf("%s:%s+%s", k, lv, rv) }, engine.Named("inner")).To("inner")
		ol, or := engine.NewStream(b, "ol", serde.String, serde.String), engine.NewStream(b, "or", serde.String, serde.String)
		engine.OuterJoinStreams(ol, or, w, func(k string, lv string, lok bool, rv string, rok bool) string {
			return fmt.Sprintf("%s:%s+%s", k, dslOrNull(lv, lok), dslOrNull(rv, rok))
		}, engine.Named("outer"), engine.EmitInterval(0)).To("outer")
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		d := enginetest.New(t, top)
		pipe := func(recs []rec, prefix string) {
			for _, x := range recs {
				topic := prefix + "r"
				if x.left {
					topic = prefix + "l"
				}
				if err := d.PipeBytes(topic, []byte(x.key), []byte(x.id), enginetest.At(x.ts)); err != nil {
					t.Fatal(err)
				}
			}
		}
		pipe(recs, "")
		inOrder := slices.Clone(recs)
		slices.SortStableFunc(inOrder, func(a, b rec) int { return int(a.ts - b.ts) })
		pipe(inOrder, "o")
		// Move stream time past every window and its grace.
		if err := d.PipeBytes("ol", []byte("end"), []byte("end"), enginetest.At(1000+100+2*time.Hour.Milliseconds())); err != nil {
			t.Fatal(err)
		}
		var wantInner, wantOuter []string
		for _, x := range recs {
			partners := 0
			for _, y := range recs {
				if !x.left || y.left || x.key != y.key || y.ts < x.ts-before || y.ts > x.ts+after {
					continue
				}
				wantInner = append(wantInner, fmt.Sprintf("%s:%s+%s", x.key, x.id, y.id))
			}
			for _, y := range recs {
				if x.left != y.left && x.key == y.key {
					l, r := x, y
					if !x.left {
						l, r = y, x
					}
					if r.ts >= l.ts-before && r.ts <= l.ts+after {
						partners++
					}
				}
			}
			if partners == 0 {
				if x.left {
					wantOuter = append(wantOuter, fmt.Sprintf("%s:%s+null", x.key, x.id))
				} else {
					wantOuter = append(wantOuter, fmt.Sprintf("%s:null+%s", x.key, x.id))
				}
			}
		}
		wantOuter = append(wantOuter, wantInner...)
		read := func(topic string) []string {
			var got []string
			for _, kv := range enginetest.NewOutput(d, topic, serde.String, serde.String).ReadKeyValues() {
				got = append(got, kv.Value)
			}
			slices.Sort(got)
			return got
		}
		slices.Sort(wantInner)
		slices.Sort(wantOuter)
		if got := read("inner"); !slices.Equal(got, wantInner) {
			t.Fatalf("seed %d (before %d, after %d), records %v: inner\ngot  %v\nwant %v", seed, before, after, recs, got, wantInner)
		}
		if got := read("outer"); !slices.Equal(got, wantOuter) {
			t.Fatalf("seed %d (before %d, after %d), records in order %v: outer\ngot  %v\nwant %v", seed, before, after, inOrder, got, wantOuter)
		}
	}
}

// sjRecords are the output records of the tests below not read yet: "key
// value @ms", with their headers "k=v" after them.
func sjRecords(out *enginetest.Output[string, string]) []string {
	var got []string
	for _, r := range out.ReadRecords() {
		s := fmt.Sprintf("%s %s @%d", r.Key, r.Value, r.Timestamp.Sub(enginetest.Epoch).Milliseconds())
		for _, h := range r.Headers {
			s += fmt.Sprintf(" %s=%s", h.Key, h.Value)
		}
		got = append(got, s)
	}
	return got
}

func sjLeftJoin(t *testing.T, opts ...engine.Option) (*enginetest.Driver, *enginetest.Output[string, string]) {
	t.Helper()
	b := engine.NewBuilder()
	engine.LeftJoinStreams(engine.NewStream(b, "l", serde.String, serde.String), engine.NewStream(b, "r", serde.String, serde.String),
		engine.JoinTimeDifference(10*time.Millisecond), func(_ string, lv, rv string, ok bool) string { return lv + "+" + dslOrNull(rv, ok) },
		opts...).To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	return d, enginetest.NewOutput(d, "out", serde.String, serde.String)
}

func sjPipe(t *testing.T, d *enginetest.Driver, topic, key, value string, ms int64, headers ...engine.Header) {
	t.Helper()
	if err := d.PipeBytes(topic, []byte(key), []byte(value), enginetest.At(ms), headers...); err != nil {
		t.Fatal(err)
	}
}

func sjExpect(t *testing.T, out *enginetest.Output[string, string], want ...string) {
	t.Helper()
	if got := sjRecords(out); !slices.Equal(got, want) {
		t.Fatalf("out:\ngot  %q\nwant %q", got, want)
	}
}

// A left join looks for the records whose windows closed unmatched at
// most once per EmitInterval of the wall clock (by default a second in
// the runtime, as in Kafka Streams; 0 in the driver, as in its
// TopologyTestDriver): the first look passes, the next waits for the
// driver's clock.
func TestStreamLeftJoinEmitsNonJoinedOncePerInterval(t *testing.T) {
	d, out := sjLeftJoin(t, engine.EmitInterval(time.Second))
	sjPipe(t, d, "l", "a", "A", 0) // looks (nothing yet), then waits
	sjPipe(t, d, "l", "b", "B", 100)
	sjExpect(t, out)
	d.AdvanceWallClock(999 * time.Millisecond)
	sjPipe(t, d, "l", "c", "C", 200)
	sjExpect(t, out)
	d.AdvanceWallClock(time.Millisecond)
	sjPipe(t, d, "l", "d", "D", 300)
	sjExpect(t, out, "a A+null @0", "b B+null @100", "c C+null @200")
	// A record behind stream time does not make the join look.
	d.AdvanceWallClock(time.Hour)
	sjPipe(t, d, "l", "e", "E", 295)
	sjExpect(t, out)
	sjPipe(t, d, "l", "f", "F", 400)
	sjExpect(t, out, "e E+null @295", "d D+null @300")
}

// A joined result carries the headers of the record that arrived; a
// non-joined one emitted once its window closed, those of the record
// whose arrival emitted it (the join keeps values only), as in Kafka
// Streams; one given at once, its own.
func TestStreamJoinResultHeaders(t *testing.T) {
	h := func(v string) engine.Header { return engine.Header{Key: "h", Value: []byte(v)} }
	d, out := sjLeftJoin(t, engine.EmitInterval(0))
	sjPipe(t, d, "l", "a", "A", 10, h("1"))
	sjPipe(t, d, "r", "a", "x", 15, h("2"))
	sjExpect(t, out, "a A+x @15 h=2")
	sjPipe(t, d, "l", "b", "B", 20, h("3"))
	sjPipe(t, d, "l", "c", "C", 40, h("4"))
	sjExpect(t, out, "b B+null @20 h=4")
	sjPipe(t, d, "l", "e", "E", 5, h("5"))
	sjExpect(t, out, "e E+null @5 h=5")

	// ResultHeaders gets those headers.
	d, out = sjLeftJoin(t, engine.EmitInterval(0), engine.ResultHeaders(func(hs []engine.Header) []engine.Header {
		return append(slices.Clone(hs), engine.Header{Key: "joined", Value: []byte("y")})
	}))
	sjPipe(t, d, "l", "b", "B", 20, h("3"))
	sjPipe(t, d, "l", "c", "C", 40, h("4"))
	sjExpect(t, out, "b B+null @20 h=4 joined=y")
}

// Records of one side with the same key and time are all kept, in the
// order they came, even when one input record made them (the store tells
// them apart by a sequence number, not by their offset).
func TestStreamJoinKeepsRecordsOfOneKeyAndTime(t *testing.T) {
	b := engine.NewBuilder()
	l := engine.FlatMapValues(engine.NewStream(b, "l", serde.String, serde.String), func(_ string, v string) []string {
		return strings.Split(v, ",")
	})
	engine.JoinStreams(l, engine.NewStream(b, "r", serde.String, serde.String), engine.JoinTimeDifference(10*time.Millisecond),
		func(_ string, lv, rv string) string { return lv + "+" + rv }).To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	out := enginetest.NewOutput(d, "out", serde.String, serde.String)
	sjPipe(t, d, "l", "k", "3,1,2", 10)
	sjPipe(t, d, "l", "k", "0", 10)
	sjPipe(t, d, "r", "k", "x", 12)
	sjExpect(t, out, "k 3+x @12", "k 1+x @12", "k 2+x @12", "k 0+x @12")
}

// Join windows may be empty (records of the same time join) or shifted
// (a negative before or after), as in Kafka Streams, as long as before
// plus after is not negative; with no window, no grace and so no
// retention, nothing is kept and nothing joins (Kafka Streams' window
// stores find no record older than their latest time less the
// retention).
func TestJoinWindowsBounds(t *testing.T) {
	build := func(w engine.JoinWindows) (*engine.Topology, error) {
		b := engine.NewBuilder()
		engine.JoinStreams(engine.NewStream(b, "l", serde.String, serde.String), engine.NewStream(b, "r", serde.String, serde.String), w,
			func(_ string, lv, rv string) string { return lv + "+" + rv }).To("out")
		return b.Build()
	}
	for _, tc := range []struct {
		w    engine.JoinWindows
		want []string
	}{
		{engine.JoinTimeDifference(0), nil},
		{engine.JoinTimeDifference(0).Grace(time.Millisecond), []string{"k A+a @10", "k B+a @10"}},
		{engine.JoinTimeDifference(0).Before(-2 * time.Millisecond).After(5 * time.Millisecond).Grace(time.Second), []string{"k A+b @13", "k B+b @13"}},
	} {
		top, err := build(tc.w)
		if err != nil {
			t.Fatalf("%+v: %v", tc.w, err)
		}
		d := enginetest.New(t, top)
		sjPipe(t, d, "l", "k", "A", 10)
		sjPipe(t, d, "r", "k", "a", 10)
		sjPipe(t, d, "l", "k", "B", 10)
		sjPipe(t, d, "r", "k", "b", 13)
		if got := sjRecords(enginetest.NewOutput(d, "out", serde.String, serde.String)); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: got %q, want %q", tc.w, got, tc.want)
		}
	}
	for _, w := range []engine.JoinWindows{
		engine.JoinTimeDifference(-time.Millisecond),
		engine.JoinTimeDifference(time.Millisecond).Before(-2 * time.Millisecond),
		engine.JoinTimeDifference(time.Millisecond).Grace(-time.Millisecond),
	} {
		if _, err := build(w); err == nil {
			t.Errorf("%+v: Build succeeded", w)
		}
	}
}
