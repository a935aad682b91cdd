package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/projection"
)

// instance is the test driver as a running instance.
type instance struct {
	*enginetest.Driver
	state engine.AppState
	id    string
}

func (i *instance) State() engine.AppState { return i.state }
func (i *instance) ID() string             { return i.id }

// shop has two views: "stock" (shoe → pairs, string keys) and "orders"
// (order number → total, int64 keys).
func shop(t *testing.T) (*instance, *projection.Registry) {
	t.Helper()
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
	engine.NewTable(b, "orders", serde.Int64, serde.Int64, engine.Materialized("orders"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	stock := enginetest.NewInput(d, "stock", serde.String, serde.Int64)
	for i, shoe := range []string{"blue", "green", "red", "red-high", "red-low", "white"} {
		stock.Pipe(shoe, int64(10+i), enginetest.At(int64(i)))
	}
	orders := enginetest.NewInput(d, "orders", serde.Int64, serde.Int64)
	orders.Pipe(7, 700, enginetest.At(1))
	sv, err := projection.NewKeyValue("stock", "stock", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	ov, err := projection.NewKeyValue("orders", "orders", serde.Int64, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := projection.NewRegistry(sv, ov)
	if err != nil {
		t.Fatal(err)
	}
	return &instance{Driver: d, state: engine.AppRunning, id: "i1"}, reg
}

func serve(t *testing.T, in httpapi.Instance, reg *projection.Registry) *httptest.Server {
	t.Helper()
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, DefaultLimit: 2, MaxLimit: 3, PositionWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// get returns a response's status, content type and body.
func get(t *testing.T, s *httptest.Server, path string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
