package registry_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/oxbow-dev/oxbow/engine/serde/registry"
)

func Example() {
	ctx := context.Background()
	fake := srfake.New() // a registry in memory; in production, its URL
	defer fake.Close()
	reg, err := registry.New(registry.Config{URLs: []string{fake.URL()}})
	if err != nil {
		panic(err)
	}
	defer reg.Close()

	type Shoe struct {
		SKU   string `avro:"sku"`
		Price int64  `avro:"price"`
	}
	const schema = `{"type":"record","name":"Shoe","namespace":"shop","fields":[
		{"name":"sku","type":"string"},{"name":"price","type":"long"}]}`
	// The serde of topic shoes' values, registering its schema under
	// shoes-value: pass it to engine.NewStream or a sink like any serde.
	shoes, err := registry.Avro[Shoe](ctx, reg, "shoes", schema, registry.AutoRegister())
	if err != nil {
		panic(err)
	}
	b, err := shoes.Encode(Shoe{SKU: "oxford", Price: 12900})
	if err != nil {
		panic(err)
	}
	fmt.Printf("magic byte %d, schema id %d, %d bytes of Avro\n", b[0], binary.BigEndian.Uint32(b[1:5]), len(b)-5)
	v, err := shoes.Decode(b)
	fmt.Println(v, err)
	// Output:
	// magic byte 0, schema id 1, 10 bytes of Avro
	// {oxford 12900} <nil>
}
