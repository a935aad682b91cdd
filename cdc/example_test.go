package cdc_test

import (
	"fmt"
	"log"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

type Customer struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Orders enriched with the customer's current row, from a topic of
// Debezium change events of a customers table (the test driver stands in
// for Kafka).
func ExampleNewTable() {
	b := engine.NewBuilder()
	customers := cdc.NewTable(b, "customers", "shop.public.customers", cdc.Column[int64]("id"), serde.Int64, serde.JSON[Customer]())
	orders := engine.NewStream(b, "orders", serde.Int64, serde.String)
	engine.Join(orders, customers, func(_ int64, order string, c Customer) string {
		return order + " for " + c.Name
	}).To("enriched-orders")
	topology, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	d, err := enginetest.Start(topology)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	change := func(key, value string) {
		if err := d.PipeBytes("shop.public.customers", []byte(key), []byte(value), enginetest.At(1)); err != nil {
			log.Fatal(err)
		}
	}
	change(`{"id":7}`, `{"before":null,"after":{"id":7,"name":"Ada"},"source":{"lsn":100,"commit_lsn":120},"op":"c"}`)
	change(`{"id":7}`, `{"before":null,"after":{"id":7,"name":"Ada L."},"source":{"lsn":200,"commit_lsn":220},"op":"u"}`)
	change(`{"id":7}`, `{"before":null,"after":{"id":7,"name":"Ada"},"source":{"lsn":100,"commit_lsn":120},"op":"c"}`) // replayed: no effect

	enginetest.NewInput(d, "orders", serde.Int64, serde.String).Pipe(7, "order 1", enginetest.At(2))
	for _, kv := range enginetest.NewOutput(d, "enriched-orders", serde.Int64, serde.String).ReadKeyValues() {
		fmt.Println(kv.Key, kv.Value)
	}
	// Output:
	// 7 order 1 for Ada L.
}
