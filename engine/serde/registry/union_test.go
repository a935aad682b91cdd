package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde/registry"
)

type shoeEvent interface{ isShoeEvent() }

type shoeSold struct {
	SKU   string `avro:"sku"`
	Price int64  `avro:"price"`
}

type shoeReturned struct {
	SKU    string `avro:"sku"`
	Reason string `avro:"reason"`
}

// shoeSoldV2 is shoeSold with a field added, as a later program has it.
type shoeSoldV2 struct {
	SKU     string `avro:"sku"`
	Price   int64  `avro:"price"`
	Channel string `avro:"channel"`
}

func (shoeSold) isShoeEvent()     {}
func (shoeReturned) isShoeEvent() {}
func (shoeSoldV2) isShoeEvent()   {}

const (
	soldSchema = `{"type":"record","name":"ShoeSold","namespace":"shop","fields":[
		{"name":"sku","type":"string"},{"name":"price","type":"long"}]}`
	soldV2Schema = `{"type":"record","name":"ShoeSold","namespace":"shop","fields":[
		{"name":"sku","type":"string"},{"name":"price","type":"long"},
		{"name":"channel","type":"string","default":"shop"}]}`
	returnedSchema = `{"type":"record","name":"ShoeReturned","namespace":"shop","fields":[
		{"name":"sku","type":"string"},{"name":"reason","type":"string"}]}`
)

// Several event types in one topic, each under "<topic>-<record name>";
// the writer schema's name picks the type, and an evolved one resolves.
func TestAvroUnion(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	topic := e.topic("shoe-events")
	v1, err := registry.AvroUnion(ctx, newRegistry(t, e.URL), topic, []registry.Member[shoeEvent]{
		registry.AvroMember[shoeSold, shoeEvent](soldSchema),
		registry.AvroMember[shoeReturned, shoeEvent](returnedSchema),
	}, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{topic + "-shop.ShoeSold", topic + "-shop.ShoeReturned"} {
		if !e.exists(subject) {
			t.Errorf("no subject %q", subject)
		}
	}
	sold := must(v1.Encode(shoeSold{SKU: "oxford", Price: 100}))
	returned := must(v1.Encode(shoeReturned{SKU: "oxford", Reason: "too small"}))
	if got, err := v1.Decode(sold); err != nil || got != (shoeSold{SKU: "oxford", Price: 100}) {
		t.Errorf("sold: %#v, %v", got, err)
	}
	if got, err := v1.Decode(returned); err != nil || got != (shoeReturned{SKU: "oxford", Reason: "too small"}) {
		t.Errorf("returned: %#v, %v", got, err)
	}

	// A later program: ShoeSold has a channel; it reads the old events.
	v2, err := registry.AvroUnion(ctx, newRegistry(t, e.URL), topic, []registry.Member[shoeEvent]{
		registry.AvroMember[shoeSoldV2, shoeEvent](soldV2Schema),
		registry.AvroMember[shoeReturned, shoeEvent](returnedSchema),
	}, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v2.Decode(sold); err != nil || got != (shoeSoldV2{SKU: "oxford", Price: 100, Channel: "shop"}) {
		t.Errorf("v2 read v1's sale as %#v, %v", got, err)
	}
	if got, err := v1.Decode(must(v2.Encode(shoeSoldV2{SKU: "derby", Price: 5, Channel: "web"}))); err != nil || got != (shoeSold{SKU: "derby", Price: 5}) {
		t.Errorf("v1 read v2's sale as %#v, %v", got, err)
	}

	// A record of a type the union does not have.
	other, err := registry.Avro[shoeV1T](ctx, newRegistry(t, e.URL), topic, shoeV1, registry.Subject(registry.TopicRecordName), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.Decode(must(other.Encode(shoeV1T{SKU: "x"}))); !errors.Is(err, registry.ErrIncompatible) || !strings.Contains(err.Error(), "shoes.Shoe, not a member") {
		t.Errorf("a shoes.Shoe: %v", err)
	}
	protoID := e.register(topic+"-proto", sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3"; message M { string a = 1; }`})
	if _, err := v1.Decode(append([]byte{0, byte(protoID >> 24), byte(protoID >> 16), byte(protoID >> 8), byte(protoID)}, sold[5:]...)); !errors.Is(err, registry.ErrIncompatible) {
		t.Errorf("a Protobuf schema: %v", err)
	}
	if _, err := v1.Encode(shoeSoldV2{}); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Errorf("encoding a type that is not a member: %v", err)
	}
	if _, err := registry.AvroUnion(ctx, newRegistry(t, e.URL), topic, []registry.Member[shoeEvent]{
		registry.AvroMember[shoeSold, shoeEvent](soldSchema),
		registry.AvroMember[shoeSoldV2, shoeEvent](soldV2Schema),
	}, registry.AutoRegister()); err == nil || !strings.Contains(err.Error(), "named shop.ShoeSold") {
		t.Errorf("two members of one name: %v", err)
	}
}
