package registry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde/registry"
)

const shoeJSONSchema = `{
	"$schema": "http://json-schema.org/draft-07/schema#",
	"title": "shoes.ShoeJSON",
	"type": "object",
	"properties": {
		"sku": {"type": "string", "minLength": 1},
		"price": {"type": "integer", "minimum": 0}
	},
	"required": ["sku", "price"]
}`

type shoeJSON struct {
	SKU   string `json:"sku"`
	Price int64  `json:"price"`
}

func TestJSONSchemaRoundTripAndValidation(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	if _, err := registry.JSONSchema[shoeJSON](ctx, r, e.topic("shoes"), shoeJSONSchema); !errors.Is(err, registry.ErrNotRegistered) {
		t.Fatalf("without AutoRegister: %v", err)
	}
	plain, err := registry.JSONSchema[shoeJSON](ctx, r, e.topic("shoes"), shoeJSONSchema, registry.AutoRegister(), registry.Subject(registry.RecordName))
	if err != nil {
		t.Fatal(err)
	}
	ss := e.schemaAt("shoes.ShoeJSON", 1) // the title is the record name
	if ss.Schema.Type != sr.TypeJSON {
		t.Fatalf("shoes.ShoeJSON: %+v", ss)
	}
	b, err := plain.Encode(shoeJSON{SKU: "derby", Price: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if want := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), `{"sku":"derby","price":8000}`...); !bytes.Equal(b, want) {
		t.Fatalf("encoded %q, want %q", b, want)
	}
	if v, err := plain.Decode(b); err != nil || v != (shoeJSON{SKU: "derby", Price: 8000}) {
		t.Fatalf("decoded %+v, %v", v, err)
	}

	// Without Validate, as Confluent's default, a value that does not
	// conform is written and read; with it, neither.
	bad, err := plain.Encode(shoeJSON{SKU: "", Price: -1})
	if err != nil {
		t.Fatalf("not validating, a value that does not conform: %v", err)
	}
	strict, err := registry.JSONSchema[shoeJSON](ctx, r, e.topic("shoes"), shoeJSONSchema, registry.Subject(registry.RecordName), registry.Validate())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Encode(shoeJSON{SKU: "", Price: -1}); err == nil || !strings.Contains(err.Error(), "does not conform") {
		t.Errorf("validating, Encode: %v", err)
	}
	if _, err := strict.Decode(bad); !errors.Is(err, registry.ErrMalformed) || !strings.Contains(err.Error(), "minLength") && !strings.Contains(err.Error(), "minimum") {
		t.Errorf("validating, Decode: %v", err)
	}
	if v, err := strict.Decode(b); err != nil || v.SKU != "derby" {
		t.Errorf("validating, a good record: %+v, %v", v, err)
	}

	avroID := e.register(e.topic("avro")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: shoeV1})
	header := func(id int) []byte { return binary.BigEndian.AppendUint32([]byte{0}, uint32(id)) }
	for _, c := range []struct {
		name string
		b    []byte
		want error
		says string
	}{
		{"not json", append(header(ss.ID), "derby"...), registry.ErrMalformed, "invalid character"},
		{"avro id", append(header(avroID), b[5:]...), registry.ErrIncompatible, "AVRO, not JSON"},
		{"unknown id", append(header(unknownID), b[5:]...), registry.ErrUnknownSchema, strconv.Itoa(unknownID)},
		{"plain json", b[5:], registry.ErrNotWireFormat, "magic byte"},
	} {
		if _, err := plain.Decode(c.b); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
	if _, err := registry.JSONSchema[shoeJSON](ctx, r, e.topic("shoes"), `{"type": 12}`, registry.Validate(), registry.AutoRegister()); err == nil {
		t.Error("a JSON Schema that does not compile was accepted")
	}
}

// A JSON Schema whose $ref names a schema of another subject (a
// reference): validating, its rules hold too.
func TestJSONSchemaReferences(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	money := e.topic("money") + "-value"
	// "$schema" too: Apicurio tells a JSON Schema by it.
	e.register(money, sr.Schema{Type: sr.TypeJSON, Schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"integer","minimum":0}`})
	const priced = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"sku":{"type":"string"},"price":{"$ref":"money.json"}},"required":["sku","price"]}`
	s, err := registry.JSONSchema[shoeJSON](ctx, newRegistry(t, e.URL), e.topic("priced"), priced, registry.AutoRegister(), registry.Validate(),
		registry.References(sr.SchemaReference{Name: "money.json", Subject: money, Version: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Encode(shoeJSON{SKU: "a", Price: 5}); err != nil {
		t.Errorf("a value that conforms: %v", err)
	}
	if _, err := s.Encode(shoeJSON{SKU: "a", Price: -5}); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Errorf("a price below the referenced schema's minimum: %v", err)
	}
}
