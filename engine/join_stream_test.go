package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// In any order within the grace, a stream-stream outer join gives each
// pair of records within the windows once, and each record that has no
// partner once, as the definition says; the inner join gives the pairs.
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
		engine.OuterJoinStreams(l, r, w, func(k string, lv string, lok bool, rv string, rok bool) string {
			return fmt.Sprintf("%s:%s+%s", k, dslOrNull(lv, lok), dslOrNull(rv, rok))
		}, engine.Named("outer")).To("outer")
		engine.JoinStreams(l, r, w, func(k string, lv, rv string) string { return fmt.Sprintf("%s:%s+%s", k, lv, rv) }, engine.Named("inner")).To("inner")
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		d := enginetest.New(t, top)
		for _, x := range recs {
			topic := "r"
			if x.left {
				topic = "l"
			}
			if err := d.PipeBytes(topic, []byte(x.key), []byte(x.id), enginetest.At(x.ts)); err != nil {
				t.Fatal(err)
			}
		}
		// Move stream time past every window and its grace.
		if err := d.PipeBytes("l", []byte("end"), []byte("end"), enginetest.At(1000+100+2*time.Hour.Milliseconds())); err != nil {
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
			t.Fatalf("seed %d (before %d, after %d), records %v: outer\ngot  %v\nwant %v", seed, before, after, recs, got, wantOuter)
		}
	}
}
