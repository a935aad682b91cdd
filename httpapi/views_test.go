package httpapi_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/projection"
)

func TestGetKey(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/views/stock/keys/red", 200, `{"key":"red","value":12}`},
		{"/views/stock/keys/red%2Fblue", 404, `view stock has no key \"red/blue\"`},
		{"/views/orders/keys/7", 200, `{"key":7,"value":700}`},
		{"/views/orders/keys/8", 404, `view orders has no key \"8\"`},
		{"/views/orders/keys/seven", 400, `\"seven\" is not an integer`},
		{"/views/nope/keys/x", 404, `there is no view \"nope\"`},
	} {
		status, ct, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
		if status >= 400 && ct != "application/problem+json" {
			t.Errorf("GET %s: an error as %s", c.path, ct)
		}
	}
}

func TestListAndDescribeViews(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	status, _, body := get(t, s, "/views")
	// Types in JSON's terms, not Go's.
	want := `{"views":[{"name":"orders","kind":"key-value","store":"orders","keyType":"integer","valueType":"integer","keySchema":{"type":"integer"},"valueSchema":{"type":"integer"},"prefixScans":false},` +
		`{"name":"stock","kind":"key-value","store":"stock","keyType":"string","valueType":"integer","keySchema":{"type":"string"},"valueSchema":{"type":"integer"},"prefixScans":true}]}`
	if status != 200 || strings.TrimSpace(body) != want {
		t.Errorf("GET /views: %d %s", status, body)
	}
	if status, _, body := get(t, s, "/views/stock"); status != 200 || !strings.Contains(body, `"keyType":"string"`) {
		t.Errorf("GET /views/stock: %d %s", status, body)
	}
}

// A windowed view answers a key's windows over a time range.
func TestWindowedFetch(t *testing.T) {
	b := engine.NewBuilder()
	clicks := engine.NewStream(b, "clicks", serde.String, serde.Int64)
	engine.WindowedCount(clicks.GroupByKey().WindowedBy(engine.TumblingWindows(10*time.Millisecond)), engine.Materialized("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "clicks", serde.String, serde.Int64)
	for _, ms := range []int64{1, 2, 15, 31} {
		in.Pipe("a", 1, enginetest.At(ms))
	}
	in.Pipe("b", 1, enginetest.At(3))
	counts, err := projection.NewWindowed("counts", "counts", serde.String, serde.Int64, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := projection.NewKeyValue("kv", "counts", serde.String, serde.Int64)
	reg, err := projection.NewRegistry(counts, kv)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, &instance{Driver: d, state: engine.AppRunning, id: "i1"}, reg)
	epoch := enginetest.Epoch.UnixMilli()
	at := func(ms int64) string { return time.UnixMilli(epoch + ms).UTC().Format(time.RFC3339Nano) }
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{fmt.Sprintf("/views/counts/keys/a/windows?from=%d&to=%d", epoch, epoch+20), 200,
			fmt.Sprintf(`{"key":"a","windows":[{"start":"%s","end":"%s","value":2},{"start":"%s","end":"%s","value":1}]}`, at(0), at(10), at(10), at(20))},
		{"/views/counts/keys/a/windows?from=" + url.QueryEscape(at(30)), 200, fmt.Sprintf(`"start":"%s","end":"%s","value":1}]}`, at(30), at(40))},
		{"/views/counts/keys/c/windows", 200, `{"key":"c","windows":[]}`},
		{"/views/counts/keys/a/windows?from=yesterday", 400, "want an RFC 3339 time or Unix milliseconds"},
		{fmt.Sprintf("/views/counts/keys/a/windows?from=%d&to=%d", epoch+20, epoch), 400, "to is before from"},
		{"/views/kv/keys/a/windows", 400, "the view is not windowed"},
		{"/views/counts/entries?limit=1", 200, fmt.Sprintf(`"entries":[{"key":{"key":"a","start":"%s","end":"%s"},"value":2}]`, at(0), at(10))},
		{"/views/counts/keys/a", 400, "the view is windowed"},
	} {
		status, _, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
	}
}

// A count-windowed view answers all of a key's windows kept, numbered by
// record; its entries decode as windows; a point read of a windowed view
// says where its windows are.
func TestCountWindowedFetch(t *testing.T) {
	b := engine.NewBuilder()
	readings := engine.NewStream(b, "readings", serde.String, serde.Int64)
	engine.CountWindowedReduce(readings.GroupByKey().WindowedByCount(engine.HoppingCountWindows(3, 2)),
		func(a, b int64) int64 { return a + b }, engine.Materialized("sums"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "readings", serde.String, serde.Int64)
	for i, v := range []int64{1, 2, 3, 4, 5} {
		in.Pipe("boiler", v, enginetest.At(int64(i)))
	}
	in.Pipe("attic", 7, enginetest.At(9))
	sums, err := projection.NewCountWindowed("sums", "sums", serde.String, serde.Int64, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := projection.NewCountWindowed("bad", "sums", serde.String, serde.Int64, 0); err == nil {
		t.Error("a count window of 0 records was accepted")
	}
	reg, err := projection.NewRegistry(sums)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, &instance{Driver: d, state: engine.AppRunning, id: "i1"}, reg)
	// boiler: records 0-4 (values 1-5); windows [0,3) = 1+2+3, gone when
	// [2,5) = 3+4+5 filled (Keep 1), and [4,7) = 5, filling.
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/views/sums/keys/boiler/windows", 200, `{"key":"boiler","windows":[{"start":2,"end":5,"value":12},{"start":4,"end":7,"value":5}]}`},
		{"/views/sums/keys/attic/windows", 200, `{"key":"attic","windows":[{"start":0,"end":3,"value":7}]}`},
		{"/views/sums/keys/cellar/windows", 200, `{"key":"cellar","windows":[]}`},
		{"/views/sums/keys/boiler/windows?from=0", 400, "is not a parameter of a count-windowed fetch"},
		{"/views/sums/keys/boiler", 400, "the view is windowed: read a key's windows (view sums) at /views/sums/keys/boiler/windows"},
		{"/views/sums/entries?limit=2", 200, `"entries":[{"key":{"key":"attic","start":0,"end":3},"value":7},{"key":{"key":"boiler","start":2,"end":5},"value":12}]`},
	} {
		status, _, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
	}
}
