package projection_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/projection"
)

type sku struct {
	Model string `json:"model"`
	Size  int    `json:"size"`
}

func TestNewKeyValueProblems(t *testing.T) {
	_, err := projection.NewKeyValue[string, int64]("bad name!", "", nil, serde.Int64)
	for _, want := range []string{`view name "bad name!"`, "the store name is empty", "serdes must be set"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	_, err = projection.NewKeyValue("v", "s", serde.String, serde.Int64, projection.ParseKey(func(string) (int64, error) { return 0, nil }))
	if err == nil || !strings.Contains(err.Error(), "ParseKey is given a func(string) (int64, error), but the keys are string") {
		t.Errorf("a ParseKey of the wrong type: %v", err)
	}
	v, _ := projection.NewKeyValue("v", "s", serde.String, serde.Int64)
	if _, err := projection.NewRegistry(v, v); err == nil || !strings.Contains(err.Error(), `"v" is registered twice`) {
		t.Errorf("a view registered twice: %v", err)
	}
}

// Keys of other types are JSON in URLs, unless ParseKey says otherwise;
// a key that does not parse is ErrBadKey.
func TestKeyParsing(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewTable(b, "skus", serde.JSON[sku](), serde.Int64, engine.Materialized("skus"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	enginetest.NewInput(d, "skus", serde.JSON[sku](), serde.Int64).Pipe(sku{"runner", 42}, 3, enginetest.At(1))
	jsonKeys, err := projection.NewKeyValue("skus", "skus", serde.JSON[sku](), serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := jsonKeys.Get(d, `{"model":"runner","size":42}`)
	if err != nil || !ok || e.Value != int64(3) || e.Key != (sku{"runner", 42}) {
		t.Errorf("a JSON key: %+v, %v, %v", e, ok, err)
	}
	if _, _, err := jsonKeys.Get(d, "runner"); !errors.Is(err, projection.ErrBadKey) || !strings.Contains(err.Error(), "want JSON (object)") || strings.Contains(err.Error(), "projection_test.sku") {
		t.Errorf("a key that is not JSON: %v (want ErrBadKey, in JSON's terms)", err)
	}
	parsed, err := projection.NewKeyValue("skus2", "skus", serde.JSON[sku](), serde.Int64, projection.ParseKey(func(s string) (sku, error) {
		var k sku
		_, err := fmt.Sscanf(s, "%s %d", &k.Model, &k.Size)
		return k, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok, err := parsed.Get(d, "runner 42"); err != nil || !ok || e.Value != int64(3) {
		t.Errorf("a key parsed by ParseKey: %+v, %v, %v", e, ok, err)
	}
}

// A view folded from events, in one call.
func TestFold(t *testing.T) {
	b := engine.NewBuilder()
	view, err := projection.Fold(b, "balance", "payments", serde.String, serde.Int64, serde.Int64,
		func() int64 { return 0 }, func(_ string, amount, balance int64) int64 { return balance + amount })
	if err != nil {
		t.Fatal(err)
	}
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "payments", serde.String, serde.Int64)
	in.Pipe("ann", 5, enginetest.At(1))
	in.Pipe("ann", -2, enginetest.At(2))
	in.Pipe("bob", 7, enginetest.At(3))
	if e, ok, err := view.Get(d, "ann"); err != nil || !ok || e.Value != int64(3) {
		t.Errorf("ann: %+v, %v, %v", e, ok, err)
	}
	if view.Store() != "balance" || view.Schema().ValueType != "integer" {
		t.Errorf("schema %+v", view.Schema())
	}
}
