package engine_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// versionedPrices is a versioned table of prices by product, kept for
// history, with its changes written to "changes".
func versionedPrices(t *testing.T, history time.Duration) *enginetest.Driver {
	t.Helper()
	b := engine.NewBuilder()
	engine.NewTable(b, "prices", serde.String, serde.Int64, engine.Materialized("prices"), engine.Versioned(history)).ToStream().To("changes")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return enginetest.New(t, top)
}

// QueryVersionedStore reads a key's value as of any time in the history,
// whatever the order the updates arrived in.
func TestQueryVersionedStore(t *testing.T) {
	d := versionedPrices(t, time.Hour)
	in := enginetest.NewInput(d, "prices", serde.String, serde.Int64)
	in.Pipe("shoe", 10, enginetest.At(10))
	in.Pipe("shoe", 20, enginetest.At(30))
	in.Pipe("shoe", 15, enginetest.At(20)) // out of order
	in.Delete("shoe", enginetest.At(50))
	in.Pipe("shoe", 12, enginetest.At(40)) // out of order, before the deletion
	in.Pipe("shoe", 30, enginetest.At(70))
	in.Pipe("sock", 3, enginetest.At(5))

	changes := enginetest.NewOutput(d, "changes", serde.String, serde.Int64).ReadRecords()
	var got []string
	for _, r := range changes {
		got = append(got, fmt.Sprintf("%s=%d@%d", r.Key, r.Value, r.Timestamp.Sub(enginetest.Epoch).Milliseconds()))
	}
	// Out-of-order updates change nothing downstream; the deletion is a
	// tombstone (value 0 here).
	if want := []string{"shoe=10@10", "shoe=20@30", "shoe=0@50", "shoe=30@70", "sock=3@5"}; !slices.Equal(got, want) {
		t.Errorf("changes %v, want %v", got, want)
	}

	st, err := engine.QueryVersionedStore(d, "prices", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	v, from, ok, err := st.Get("shoe")
	if err != nil || !ok || v != 30 || !from.Equal(enginetest.At(70)) {
		t.Errorf("Get(shoe) = %d, %v, %v, %v; want 30 from 70", v, from, ok, err)
	}
	for _, c := range []struct {
		at, from int64 // from < 0: no value then
		v        int64
	}{
		{5, -1, 0}, {10, 10, 10}, {19, 10, 10}, {20, 20, 15}, {29, 20, 15}, {30, 30, 20}, {39, 30, 20},
		{40, 40, 12}, {49, 40, 12}, {50, -1, 0}, {69, -1, 0}, {70, 70, 30}, {1000, 70, 30},
	} {
		v, from, ok, err := st.GetAsOf("shoe", enginetest.At(c.at))
		if err != nil {
			t.Fatal(err)
		}
		if c.from < 0 {
			if ok {
				t.Errorf("GetAsOf(shoe, %d) = %d from %v, want none", c.at, v, from)
			}
			continue
		}
		if !ok || v != c.v || !from.Equal(enginetest.At(c.from)) {
			t.Errorf("GetAsOf(shoe, %d) = %d from %v (%v), want %d from %d", c.at, v, from.Sub(enginetest.Epoch), ok, c.v, c.from)
		}
	}
	if _, _, ok, err := st.GetAsOf("boot", enginetest.At(100)); ok || err != nil {
		t.Errorf("GetAsOf(boot) = %v, %v; want none", ok, err)
	}
}

// Past versions go once stream time has passed their end by the history:
// the history store does not grow with updates long past.
func TestVersionedHistoryExpires(t *testing.T) {
	d := versionedPrices(t, 10*time.Millisecond)
	in := enginetest.NewInput(d, "prices", serde.String, serde.Int64)
	for i := range int64(5) {
		in.Pipe("shoe", i, enginetest.At(1+i)) // versions from 1, 2, 3, 4; the latest from 5
	}
	in.Delete("boot", enginetest.At(2))
	in.Pipe("boot", 1, enginetest.At(1))
	in.Delete("boot", enginetest.At(3))
	history := func() int {
		st, err := d.LocalStore("prices-history")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for e, err := range st.Range(nil, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Key) >= 8 { // not the table's stream time
				n++
			}
		}
		return n
	}
	// shoe's four past versions; boot's deletions from 2 (of a key it did not
	// have) and 3, and its value from 1 (out of order: it ended at 2).
	if n := history(); n != 7 {
		t.Fatalf("history holds %d versions, want 7", n)
	}
	st, err := engine.QueryVersionedStore(d, "prices", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	if v, _, ok, _ := st.GetAsOf("shoe", enginetest.At(2)); !ok || v != 1 {
		t.Errorf("GetAsOf(shoe, 2) = %d, %v; want 1", v, ok)
	}
	// Stream time 14: no time in the history (from 4) falls in shoe's
	// versions that ended at 2, 3 and 4, nor in boot's value from 1 to 2
	// and its deletions from 2 and 3.
	in.Pipe("sock", 1, enginetest.At(14))
	if n := history(); n != 1 {
		t.Errorf("at 14 the history holds %d versions, want 1 (shoe from 4)", n)
	}
	in.Pipe("sandal", 1, enginetest.At(100))
	if n := history(); n != 0 {
		t.Errorf("at 100 the history holds %d versions, want 0", n)
	}
	if v, _, ok, _ := st.Get("shoe"); !ok || v != 4 {
		t.Errorf("the latest value went with the history: %d, %v", v, ok)
	}
}

// A foreign-key join's result carries the headers of the update that made
// it (the left row's or the right row's), or those ResultHeaders chooses.
func TestForeignKeyJoinResultHeaders(t *testing.T) {
	for _, withOption := range []bool{false, true} {
		b := engine.NewBuilder()
		orders := engine.NewTable(b, "orders", serde.String, serde.String)
		customers := engine.NewTable(b, "customers", serde.String, serde.String)
		var opts []engine.Option
		if withOption {
			opts = append(opts, engine.ResultHeaders(func(hs []engine.Header) []engine.Header {
				return append(slices.Clone(hs), engine.Header{Key: "joined", Value: []byte("yes")})
			}))
		}
		engine.JoinForeignKey(orders, customers, func(_ string, customer string) string { return customer },
			func(_ string, customer, name string) string { return customer + "=" + name }, opts...).ToStream().To("out")
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		d := enginetest.New(t, top)
		enginetest.NewInput(d, "customers", serde.String, serde.String).Pipe("c1", "Ann", enginetest.At(1), engine.Header{Key: "from", Value: []byte("customer")})
		enginetest.NewInput(d, "orders", serde.String, serde.String).Pipe("o1", "c1", enginetest.At(2), engine.Header{Key: "from", Value: []byte("order")})
		enginetest.NewInput(d, "customers", serde.String, serde.String).Pipe("c1", "Bob", enginetest.At(3), engine.Header{Key: "from", Value: []byte("rename")})
		var got []string
		for _, r := range enginetest.NewOutput(d, "out", serde.String, serde.String).ReadRecords() {
			line := r.Key + " " + r.Value
			for _, h := range r.Headers {
				line += " " + h.Key + ":" + string(h.Value)
			}
			got = append(got, line)
		}
		want := []string{"o1 c1=Ann from:order", "o1 c1=Bob from:rename"}
		if withOption {
			want = []string{"o1 c1=Ann from:order joined:yes", "o1 c1=Bob from:rename joined:yes"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("option %v: results %q, want %q", withOption, got, want)
		}
	}
}

// A version written again with a later end (a deletion and a value at the
// same time, then a newer value) outlives the first end's expiry.
func TestVersionedRewrittenVersionKept(t *testing.T) {
	d := versionedPrices(t, 10*time.Millisecond)
	in := enginetest.NewInput(d, "prices", serde.String, serde.Int64)
	in.Pipe("shoe", 1, enginetest.At(1))
	in.Delete("shoe", enginetest.At(5))
	in.Pipe("shoe", 2, enginetest.At(5)) // replaces the deletion
	in.Pipe("shoe", 3, enginetest.At(12))
	in.Pipe("sock", 1, enginetest.At(16)) // past 5 + 10, the deletion's expiry
	st, err := engine.QueryVersionedStore(d, "prices", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	if v, from, ok, err := st.GetAsOf("shoe", enginetest.At(7)); err != nil || !ok || v != 2 || !from.Equal(enginetest.At(5)) {
		t.Errorf("GetAsOf(shoe, 7) = %d from %v, %v, %v; want 2 from 5", v, from.Sub(enginetest.Epoch), ok, err)
	}
	in.Pipe("sock", 1, enginetest.At(23)) // past 12 + 10
	if _, _, ok, err := st.GetAsOf("shoe", enginetest.At(7)); err != nil || ok {
		t.Errorf("GetAsOf(shoe, 7) after its version expired: %v, %v", ok, err)
	}
}

// A record waiting out a join's grace keeps its headers (nil and empty
// values apart), and records of one time leave in the order of their keys.
func TestJoinGraceKeepsHeadersAndKeyOrder(t *testing.T) {
	b := engine.NewBuilder()
	prices := engine.NewTable(b, "prices", serde.String, serde.Int64, engine.Versioned(time.Hour))
	orders := engine.NewStream(b, "orders", serde.String, serde.String)
	engine.LeftJoin(orders, prices, func(_ string, o string, p int64, ok bool) string { return fmt.Sprintf("%s@%d/%v", o, p, ok) },
		engine.JoinGrace(5*time.Millisecond)).To("priced")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "orders", serde.String, serde.String)
	hs := []engine.Header{{Key: "trace", Value: []byte("t1")}, {Key: "none"}, {Key: "empty", Value: []byte{}}}
	in.Pipe("sock", "o1", enginetest.At(10), hs...)
	in.Pipe("boot", "o2", enginetest.At(10))
	enginetest.NewInput(d, "prices", serde.String, serde.Int64).Pipe("sock", 3, enginetest.At(8)) // late, within the grace
	in.Pipe("shoe", "o3", enginetest.At(15))                                                      // lets the records of 10 go
	got := enginetest.NewOutput(d, "priced", serde.String, serde.String).ReadRecords()
	if len(got) != 2 || got[0].Key != "boot" || got[1].Key != "sock" || got[1].Value != "o1@3/true" {
		t.Fatalf("priced %v; want boot then sock, joined with 3", got)
	}
	if !slices.EqualFunc(got[1].Headers, hs, func(a, b engine.Header) bool {
		return a.Key == b.Key && (a.Value == nil) == (b.Value == nil) && string(a.Value) == string(b.Value)
	}) || got[0].Headers != nil {
		t.Errorf("headers %v and %v; want %v and none", got[1].Headers, got[0].Headers, hs)
	}
}
