package registry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/engine/serde/registry/internal/testpb"
)

func TestProtobufRoundTripWithReferences(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	// Without AutoRegister, the first thing missing is named: the import,
	// unless an earlier test on a shared registry registered it.
	missing := `"shoe.proto"`
	if e.exists("shoe.proto") {
		missing = `"` + e.topic("orders") + `-value"`
	}
	if _, err := registry.Protobuf[*testpb.Order](ctx, r, e.topic("orders")); !errors.Is(err, registry.ErrNotRegistered) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("without AutoRegister: %v, want ErrNotRegistered naming %s", err, missing)
	}
	s, err := registry.Protobuf[*testpb.Order](ctx, r, e.topic("orders"), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	ss := e.schemaAt(e.topic("orders")+"-value", 1)
	if len(ss.References) != 1 || ss.References[0] != (sr.SchemaReference{Name: "shoe.proto", Subject: "shoe.proto", Version: 1}) {
		t.Errorf("references %+v, want shoe.proto only (the well-known import needs none)", ss.References)
	}
	if !strings.Contains(ss.Schema.Schema, "message Order") || !strings.Contains(ss.Schema.Schema, `import "shoe.proto"`) {
		t.Errorf("registered schema:\n%s", ss.Schema.Schema)
	}
	in := &testpb.Order{Id: "o-7", Shoe: &testpb.Shoe{Sku: "oxford", Price: 12900, Size: &testpb.Size{Eu: 42}}, At: timestamppb.New(time.Unix(1700000000, 0))}
	b, err := s.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	// Order is the file's only message: index [0], written as one 0.
	payload, _ := proto.Marshal(in)
	want := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), 0)
	if !bytes.Equal(b, append(want, payload...)) {
		t.Fatalf("encoded % x, want % x then the message", b[:min(len(b), 8)], want)
	}
	out, err := s.Decode(b)
	if err != nil || !proto.Equal(out, in) {
		t.Fatalf("decoded %v, %v", out, err)
	}
	// Another instance finds the same ids by lookup alone.
	again, err := registry.Protobuf[*testpb.Order](ctx, newRegistry(t, e.URL), e.topic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := again.Encode(in); !bytes.Equal(b2, b) {
		t.Errorf("looked up: % x, want % x", b2[:6], b[:6])
	}
}

// Message indexes as Confluent writes them: the varint count, then each
// index (zigzag varints).
func TestProtobufMessageIndexes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	shoe, err := registry.Protobuf[*testpb.Shoe](ctx, r, e.topic("shoes"), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	colour, err := registry.Protobuf[*testpb.Shoe_Colour](ctx, r, e.topic("colours"), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	size, err := registry.Protobuf[*testpb.Size](ctx, r, e.topic("sizes"), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		b     []byte
		index []byte
	}{
		{"Size [0]", must(size.Encode(&testpb.Size{Eu: 40})), []byte{0}},
		{"Shoe [1]", must(shoe.Encode(&testpb.Shoe{Sku: "a"})), []byte{2, 2}},
		{"Shoe.Colour [1 0]", must(colour.Encode(&testpb.Shoe_Colour{Name: "tan"})), []byte{4, 2, 0}},
	} {
		if !bytes.Equal(c.b[5:5+len(c.index)], c.index) {
			t.Errorf("%s: indexes % x, want % x", c.name, c.b[5:5+len(c.index)], c.index)
		}
	}
	b := must(size.Encode(&testpb.Size{Eu: 40}))
	if _, err := shoe.Decode(b); !errors.Is(err, registry.ErrIncompatible) || !strings.Contains(err.Error(), "oxbow.test.Size, not oxbow.test.Shoe") {
		t.Errorf("a Size read as a Shoe: %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A record of an evolved schema under the subject reads by field number;
// records that cannot be read say why.
func TestProtobufEvolvedAndBadRecords(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	s, err := registry.Protobuf[*testpb.Shoe](ctx, r, e.topic("shoes"), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	ss := e.schemaAt(e.topic("shoes")+"-value", 1)
	evolved := strings.Replace(ss.Schema.Schema, "message Shoe {", "message Shoe {\n  string brand = 5;", 1)
	evolvedID := e.register(e.topic("shoes")+"-value", sr.Schema{Type: sr.TypeProtobuf, Schema: evolved})
	if evolvedID == ss.ID {
		t.Fatalf("the evolved schema has the first one's id %d", evolvedID)
	}
	in := &testpb.Shoe{Sku: "brogue", Price: 9900}
	good := must(s.Encode(in))
	withID := func(id int, rest []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), rest...)
	}
	brand := append(append([]byte{}, good[5:]...), 0x2a, 3, 'a', 'c', 'e') // field 5, "ace"
	out, err := s.Decode(withID(evolvedID, brand))
	if err != nil || out.Sku != "brogue" || out.Price != 9900 {
		t.Fatalf("the evolved record: %v, %v", out, err)
	}
	if !bytes.Contains(out.ProtoReflect().GetUnknown(), []byte("ace")) {
		t.Error("the field the reader does not know was dropped, not kept as unknown")
	}
	avroID := e.register(e.topic("avro")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: shoeV1})
	for _, c := range []struct {
		name string
		b    []byte
		want error
		says string
	}{
		{"no header", []byte("brogue"), registry.ErrNotWireFormat, "magic byte"},
		{"bad index count", withID(ss.ID, []byte{0x7f, 1, 1}), registry.ErrMalformed, "indexes"},
		{"too many indexes", withID(ss.ID, []byte{80, 2, 2}), registry.ErrMalformed, "more than 32"},
		{"no such message", withID(ss.ID, []byte{2, 20}), registry.ErrMalformed, "no message at index [10]"},
		{"garbage", withID(ss.ID, []byte{2, 2, 0xff, 0xff}), registry.ErrMalformed, "does not match"},
		{"avro schema", withID(avroID, good[5:]), registry.ErrIncompatible, "AVRO, not Protobuf"},
		{"unknown id", withID(unknownID, good[5:]), registry.ErrUnknownSchema, strconv.Itoa(unknownID)},
	} {
		if _, err := s.Decode(c.b); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}
