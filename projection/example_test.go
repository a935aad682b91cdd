package projection_test

import (
	"fmt"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/projection"
)

// A view of a table, named as its store, answers reads by keys written as
// in a URL, with values as JSON would give them.
func ExampleOf() {
	b := engine.NewBuilder()
	stock := engine.NewTable(b, "stock-changes", serde.String, serde.Int64, engine.Materialized("stock"))
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	view, err := projection.Of(stock)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	enginetest.NewInput(d, "stock-changes", serde.String, serde.Int64).Pipe("runner-42", 7, enginetest.At(1))

	e, ok, err := view.Get(d, "runner-42")
	fmt.Println(view.Name(), view.Kind(), e.Key, e.Value, ok, err)
	// Output:
	// stock key-value runner-42 7 true <nil>
}
