package registry_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
)

// orderPlaced is an event of a common shape: ids, counts, money, a time.
type orderPlaced struct {
	OrderID  string `avro:"orderId" json:"orderId"`
	Customer string `avro:"customer" json:"customer"`
	SKU      string `avro:"sku" json:"sku"`
	Pairs    int    `avro:"pairs" json:"pairs"`
	Total    int64  `avro:"total" json:"total"`
	At       int64  `avro:"at" json:"at"`
	Channel  string `avro:"channel" json:"channel"`
	Gift     bool   `avro:"gift" json:"gift"`
}

const orderPlacedSchema = `{"type":"record","name":"OrderPlaced","namespace":"shop","fields":[
	{"name":"orderId","type":"string"},{"name":"customer","type":"string"},{"name":"sku","type":"string"},
	{"name":"pairs","type":"int"},{"name":"total","type":"long"},{"name":"at","type":"long"},
	{"name":"channel","type":"string","default":"shop"},{"name":"gift","type":"boolean","default":false}]}`

// BenchmarkEventRoundTrip encodes and decodes one event per iteration:
// Avro in the wire format (the schema id resolved once, when the serde is
// made) against serde.JSON, the engine's default, for the same event.
func BenchmarkEventRoundTrip(b *testing.B) {
	f := srfake.New()
	defer f.Close()
	r, err := registry.New(registry.Config{URLs: []string{f.URL()}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	a, err := registry.Avro[orderPlaced](context.Background(), r, "orders", orderPlacedSchema, registry.AutoRegister())
	if err != nil {
		b.Fatal(err)
	}
	ev := orderPlaced{OrderID: "o-20261204-000123", Customer: "c-4711", SKU: "oxford-brown-42", Pairs: 2, Total: 25800, At: 1764806400123, Channel: "web"}
	for _, c := range []struct {
		name string
		s    serde.Serde[orderPlaced]
	}{{"avro", a}, {"json", serde.JSON[orderPlaced]()}} {
		b.Run(c.name, func(b *testing.B) {
			enc, _ := c.s.Encode(ev)
			b.ReportMetric(float64(len(enc)), "bytes/record")
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.s.Encode(ev)
				if err != nil {
					b.Fatal(err)
				}
				got, err := c.s.Decode(bs)
				if err != nil || got != ev {
					b.Fatalf("%+v, %v", got, err)
				}
			}
		})
	}
}
