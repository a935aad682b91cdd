package registry_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/engine/serde/registry/internal/testpb"
)

// Whatever the bytes, every serde returns a value or an error: never a
// panic, never an allocation past the bounds.
func FuzzDecode(f *testing.F) {
	fake := srfake.New()
	defer fake.Close()
	r, err := registry.New(registry.Config{URLs: []string{fake.URL()}})
	if err != nil {
		f.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	av, err := registry.Avro[shoeV2T](ctx, r, "shoes", shoeV2, registry.AutoRegister())
	if err != nil {
		f.Fatal(err)
	}
	pb, err := registry.Protobuf[*testpb.Order](ctx, r, "orders", registry.AutoRegister())
	if err != nil {
		f.Fatal(err)
	}
	js, err := registry.JSONSchema[shoeJSON](ctx, r, "shoes-json", shoeJSONSchema, registry.AutoRegister(), registry.Validate())
	if err != nil {
		f.Fatal(err)
	}
	un, err := registry.AvroUnion(ctx, r, "events", []registry.Member[shoeEvent]{
		registry.AvroMember[shoeSold, shoeEvent](soldSchema), registry.AvroMember[shoeReturned, shoeEvent](returnedSchema),
	}, registry.AutoRegister())
	if err != nil {
		f.Fatal(err)
	}
	// For AvroToJSON: arrays, maps and a union of several types.
	const listsSchema = `{"type":"record","name":"Lists","fields":[
		{"name":"a","type":{"type":"array","items":["null","long","string"]}},
		{"name":"m","type":{"type":"map","values":{"type":"array","items":"null"}}}]}`
	lists, err := registry.Avro[map[string]any](ctx, r, "lists", listsSchema, registry.AutoRegister())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(must(lists.Encode(map[string]any{"a": []any{nil, map[string]any{"long": int64(3)}, map[string]any{"string": "x"}}, "m": map[string]any{"k": []any{nil}}})))
	f.Add(must(av.Encode(shoeV2T{SKU: "oxford", Price: 12900, Colour: "tan"})))
	f.Add(must(pb.Encode(&testpb.Order{Id: "o-1", Shoe: &testpb.Shoe{Sku: "x", Colour: &testpb.Shoe_Colour{Name: "red"}}})))
	f.Add(must(js.Encode(shoeJSON{SKU: "derby", Price: 1})))
	f.Add(must(un.Encode(shoeReturned{SKU: "a", Reason: "b"})))
	f.Add([]byte{0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = av.Decode(b)
		_, _ = pb.Decode(b)
		_, _ = js.Decode(b)
		_, _ = un.Decode(b)
		_, _ = r.AvroToJSON(b)
	})
}
