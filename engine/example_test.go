package engine_test

import (
	"fmt"
	"strings"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Words from lines of text are counted by a topology that re-keys the stream
// by word, so the count runs after a repartition.
func Example() {
	b := engine.NewBuilder()
	lines := engine.NewStream(b, "lines", serde.String, serde.String)
	words := engine.FlatMapValues(lines, func(_ string, line string) []string {
		return strings.Fields(line)
	})
	counts := engine.GroupBy(words, func(_ string, w string) string { return w }, engine.Named("by-word")).
		Count(engine.Materialized("word-counts"))
	counts.ToStream().To("word-counts")

	topology, err := b.Build()
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

	in := enginetest.NewInput(d, "lines", serde.String, serde.String)
	in.Pipe("", "the cat", enginetest.At(1))
	in.Pipe("", "the dog", enginetest.At(2))

	out := enginetest.NewOutput(d, "word-counts", serde.String, serde.Int64)
	for _, kv := range out.ReadKeyValues() {
		fmt.Println(kv.Key, kv.Value)
	}
	// Output:
	// the 1
	// cat 1
	// the 2
	// dog 1
}
