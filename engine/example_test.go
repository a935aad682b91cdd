package engine_test

import (
	"fmt"
	"strings"
	"time"

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

// A count that changes downstream at most once a minute per key: the
// updates wait in SuppressUntil's buffer and leave as one when stream time
// has moved a minute past the first of them.
func ExampleTable_SuppressUntil() {
	b := engine.NewBuilder()
	engine.NewStream(b, "clicks", serde.String, serde.String).GroupByKey().Count().
		SuppressUntil(time.Minute).ToStream().To("clicks-per-minute")
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

	in := enginetest.NewInput(d, "clicks", serde.String, serde.String)
	out := enginetest.NewOutput(d, "clicks-per-minute", serde.String, serde.Int64)
	at := func(d time.Duration) time.Time { return enginetest.Epoch.Add(d) }
	in.Pipe("ann", "/home", at(0))
	in.Pipe("ann", "/cart", at(10*time.Second))
	in.Pipe("bob", "/home", at(30*time.Second))
	fmt.Println("after 30s:", out.ReadKeyValues())
	in.Pipe("ann", "/pay", at(70*time.Second))
	fmt.Println("after 70s:", out.ReadKeyValues())
	in.Pipe("cat", "/home", at(2*time.Minute))
	fmt.Println("after 2m:", out.ReadKeyValues())
	// Output:
	// after 30s: []
	// after 70s: [{ann 3}]
	// after 2m: [{bob 1}]
}
