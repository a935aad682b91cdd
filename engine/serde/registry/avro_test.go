package registry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

const shoeV1 = `{"type":"record","name":"Shoe","namespace":"shoes","fields":[
	{"name":"sku","type":"string"},
	{"name":"price","type":"long"}]}`

// v2 adds a field with a default: BACKWARD compatible with v1.
const shoeV2 = `{"type":"record","name":"Shoe","namespace":"shoes","fields":[
	{"name":"sku","type":"string"},
	{"name":"price","type":"long"},
	{"name":"colour","type":"string","default":"black"}]}`

type shoeV1T struct {
	SKU   string `avro:"sku"`
	Price int64  `avro:"price"`
}

type shoeV2T struct {
	SKU    string `avro:"sku"`
	Price  int64  `avro:"price"`
	Colour string `avro:"colour"`
}

func newRegistry(t *testing.T, url string) *registry.Registry {
	t.Helper()
	r, err := registry.New(registry.Config{URLs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// env is a test's registry, real or fake (srtest), with what the tests
// ask of it directly.
type env struct {
	*srtest.Registry
	t *testing.T
}

func newEnv(t *testing.T) *env { return &env{srtest.New(t), t} }

// topic is a topic name of the test's own.
func (e *env) topic(name string) string { return e.Prefix + "-" + name }

func (e *env) register(subject string, s sr.Schema) int {
	e.t.Helper()
	id, err := e.Client.RegisterSchema(context.Background(), subject, s, -1, -1)
	if err != nil {
		e.t.Fatalf("registering under %q: %v", subject, err)
	}
	return id
}

func (e *env) schemaAt(subject string, version int) sr.SubjectSchema {
	e.t.Helper()
	ss, err := e.Client.SchemaByVersion(context.Background(), subject, version)
	if err != nil {
		e.t.Fatalf("subject %q version %d: %v", subject, version, err)
	}
	return ss
}

// exists asks for the subject itself: a registry lists at most 1,000
// subjects (Apicurio), and a shared one holds more.
func (e *env) exists(subject string) bool {
	e.t.Helper()
	_, err := e.Client.SubjectVersions(context.Background(), subject)
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

// unknownID is a schema id no registry in these tests has.
const unknownID = 2_000_000_000

func TestAvroRoundTripInWireFormat(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	s, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	ss := e.schemaAt(e.topic("shoes")+"-value", 1)
	in := shoeV1T{SKU: "oxford-42", Price: 12900}
	b, err := s.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != ss.ID {
		t.Fatalf("header % x, want magic 0 and id %d", b[:5], ss.ID)
	}
	// The payload is plain Avro binary: a string (zigzag length, bytes) and
	// a long (zigzag varint).
	want := append(binary.AppendVarint(nil, int64(len(in.SKU))), in.SKU...)
	want = binary.AppendVarint(want, in.Price)
	if !bytes.Equal(b[5:], want) {
		t.Fatalf("payload % x, want % x", b[5:], want)
	}
	out, err := s.Decode(b)
	if err != nil || out != in {
		t.Fatalf("decoded %+v, %v; want %+v", out, err, in)
	}

	// A key serde registers under "-key"; another serde of the same schema
	// and subject finds the same id by lookup.
	if _, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1, registry.Key(), registry.AutoRegister()); err != nil {
		t.Fatal(err)
	}
	if !e.exists(e.topic("shoes") + "-key") {
		t.Error("a key serde did not register shoes-key")
	}
	again, err := registry.Avro[shoeV1T](ctx, newRegistry(t, e.URL), e.topic("shoes"), shoeV1)
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := again.Encode(in); !bytes.Equal(b2, b) {
		t.Errorf("the looked-up serde wrote % x, want % x", b2, b)
	}
}

// Without AutoRegister a schema must be registered already.
func TestAvroNotRegistered(t *testing.T) {
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	_, err := registry.Avro[shoeV1T](context.Background(), r, e.topic("shoes"), shoeV1)
	if !errors.Is(err, registry.ErrNotRegistered) || !strings.Contains(err.Error(), `"`+e.topic("shoes")+`-value"`) || !strings.Contains(err.Error(), "AutoRegister") {
		t.Fatalf("err %v, want ErrNotRegistered naming the subject and the way out", err)
	}
	if _, err := registry.Avro[shoeV1T](context.Background(), r, e.topic("shoes"), `{"type":"record"`); err == nil || !strings.Contains(err.Error(), "Avro schema") {
		t.Errorf("a schema that does not parse: %v", err)
	}
}

// Records of an older and of a newer schema under the subject are read
// by Avro's resolution: a missing field takes its default, an unknown one
// is skipped.
func TestAvroReadsEvolvedSchemas(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	v1, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := registry.Avro[shoeV2T](ctx, r, e.topic("shoes"), shoeV2, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	old, _ := v1.Encode(shoeV1T{SKU: "brogue", Price: 9900})
	got, err := v2.Decode(old)
	if err != nil || got != (shoeV2T{SKU: "brogue", Price: 9900, Colour: "black"}) {
		t.Errorf("v2 read v1's record as %+v, %v", got, err)
	}
	nw, _ := v2.Encode(shoeV2T{SKU: "loafer", Price: 7900, Colour: "tan"})
	if got, err := v1.Decode(nw); err != nil || got != (shoeV1T{SKU: "loafer", Price: 7900}) {
		t.Errorf("v1 read v2's record as %+v, %v", got, err)
	}

	// UseLatest writes with the subject's latest version whatever its own
	// schema: v1's type, v2's schema (the colour takes its default).
	pinned, err := registry.Avro[shoeV2T](ctx, newRegistry(t, e.URL), e.topic("shoes"), shoeV1, registry.UseLatest())
	if err != nil {
		t.Fatal(err)
	}
	b, err := pinned.Encode(shoeV2T{SKU: "mule", Price: 5000, Colour: "red"})
	if err != nil {
		t.Fatal(err)
	}
	latest := e.schemaAt(e.topic("shoes")+"-value", 2)
	if id := int(binary.BigEndian.Uint32(b[1:5])); id != latest.ID {
		t.Errorf("UseLatest wrote with schema %d, want %d (version 2)", id, latest.ID)
	}
	if got, err := v2.Decode(b); err != nil || got.Colour != "red" {
		t.Errorf("read back %+v, %v", got, err)
	}
}

// Records that cannot be read fail with an error that names the reason.
func TestAvroBadRecords(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	s, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	good, _ := s.Encode(shoeV1T{SKU: "derby", Price: 100})
	id := int(binary.BigEndian.Uint32(good[1:5]))
	// A schema the reader cannot resolve: price is a string.
	otherID := e.register(e.topic("other")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: strings.Replace(shoeV1, `"long"`, `"string"`, 1)})
	protoID := e.register(e.topic("proto")+"-value", sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3"; message M { string a = 1; }`})
	header := func(id int) []byte { return binary.BigEndian.AppendUint32([]byte{0}, uint32(id)) }
	for _, c := range []struct {
		name string
		b    []byte
		want error
		says string
	}{
		{"json", []byte(`{"sku":"x"}`), registry.ErrNotWireFormat, "magic byte"},
		{"short", []byte{0, 0, 1}, registry.ErrNotWireFormat, "shorter"},
		{"unknown id", append(header(unknownID), good[5:]...), registry.ErrUnknownSchema, strconv.Itoa(unknownID)},
		{"truncated", good[:len(good)-1], registry.ErrMalformed, "end before the value"},
		{"incompatible", append(header(otherID), good[5:]...), registry.ErrIncompatible, "not compatible"},
		{"not avro", append(header(protoID), good[5:]...), registry.ErrIncompatible, "PROTOBUF"},
	} {
		_, err := s.Decode(c.b)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || errors.Is(err, serde.ErrUnavailable) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
	if _, err := s.Decode(good); err != nil {
		t.Errorf("the good record after the bad ones (id %d): %v", id, err)
	}
}

// A registry that cannot be reached is retried: a record whose schema it
// has to fetch waits for it and is read once it is back. Closed, the
// registry gives up with serde.ErrUnavailable (not the record's fault).
func TestAvroWaitsForTheRegistry(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	writer := newRegistry(t, e.URL)
	w, err := registry.Avro[shoeV2T](ctx, writer, e.topic("shoes"), shoeV2, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := w.Encode(shoeV2T{SKU: "clog", Price: 3000, Colour: "green"})
	e.register(e.topic("shoes")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: shoeV1})
	r := newRegistry(t, e.URL)
	s, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1) // looked up while up
	if err != nil {
		t.Fatal(err)
	}
	e.Down(true)
	type result struct {
		v   shoeV1T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := s.Decode(rec) // v2's id: a fetch
		done <- result{v, err}
	}()
	await.Until(t, time.Minute, "Decode retrying the registry", func() bool { return len(done) > 0 || e.Refused() >= 2 })
	if len(done) > 0 {
		res := <-done
		t.Fatalf("Decode returned %+v, %v while the registry was down", res.v, res.err)
	}
	e.Down(false)
	res := <-done
	if res.err != nil || res.v != (shoeV1T{SKU: "clog", Price: 3000}) {
		t.Fatalf("after the registry came back: %+v, %v", res.v, res.err)
	}

	// Answers that are not the record's fault are not charged to it: a
	// refusal (401), a 404 that is not the registry's (no error code).
	other := e.register(e.topic("shoes2")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: strings.Replace(shoeV2, "black", "white", 1)})
	otherRec := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(other)), rec[5:]...)
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound} {
		e.Answer(code)
		if _, err := s.Decode(otherRec); !errors.Is(err, serde.ErrUnavailable) {
			t.Errorf("the registry answering %d: %v, want serde.ErrUnavailable", code, err)
		}
	}
	e.Answer(0)
	// An id the registry does not know is the record's, and not cached:
	// the next record of it asks again.
	unknown := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(unknownID)), rec[5:]...)
	if _, err := s.Decode(unknown); !errors.Is(err, registry.ErrUnknownSchema) {
		t.Fatalf("an unknown id: %v", err)
	}
	e.Answer(http.StatusForbidden)
	if _, err := s.Decode(unknown); !errors.Is(err, serde.ErrUnavailable) {
		t.Errorf("an unknown id again, the registry refusing: %v, want a request and serde.ErrUnavailable", err)
	}
	e.Answer(0)

	// Closed while a fetch is under way.
	release := e.Hang()
	defer release()
	go func() {
		_, err := s.Decode(otherRec)
		done <- result{err: err}
	}()
	await.Until(t, time.Minute, "Decode asking the registry", func() bool { return len(done) > 0 || e.Held() > 0 })
	if len(done) > 0 {
		t.Fatalf("Decode returned %v before asking the registry", (<-done).err)
	}
	r.Close()
	if res := <-done; !errors.Is(res.err, serde.ErrUnavailable) || !strings.Contains(res.err.Error(), "canceled") {
		t.Fatalf("closed during a fetch: %v, want serde.ErrUnavailable", res.err)
	}
}

// Subject name strategies, and a named type defined in another subject.
func TestAvroSubjectsAndReferences(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := newRegistry(t, e.URL)
	if _, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1, registry.Subject(registry.RecordName), registry.AutoRegister()); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Avro[shoeV1T](ctx, r, e.topic("shoes"), shoeV1, registry.Subject(registry.TopicRecordName), registry.AutoRegister()); err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"shoes.Shoe", e.topic("shoes") + "-shoes.Shoe"} {
		if !e.exists(subject) {
			t.Errorf("no subject %q", subject)
		}
	}
	if _, err := registry.Avro[string](ctx, r, e.topic("names"), `"string"`, registry.Subject(registry.RecordName), registry.AutoRegister()); err == nil || !strings.Contains(err.Error(), "named schema") {
		t.Errorf("RecordName with an unnamed schema: %v", err)
	}

	// An order refers to shoes.Shoe, registered under shoes.Shoe.
	const order = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"string"},{"name":"shoe","type":"shoes.Shoe"}]}`
	type orderT struct {
		ID   string  `avro:"id"`
		Shoe shoeV1T `avro:"shoe"`
	}
	ref := sr.SchemaReference{Name: "shoes.Shoe", Subject: "shoes.Shoe", Version: 1}
	s, err := registry.Avro[orderT](ctx, r, e.topic("orders"), order, registry.References(ref), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	in := orderT{ID: "o-1", Shoe: shoeV1T{SKU: "boot", Price: 20000}}
	b, err := s.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	// A reader of a later version that has never seen this one fetches it
	// and its reference.
	const orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"string"},{"name":"shoe","type":"shoes.Shoe"},{"name":"qty","type":"int","default":1}]}`
	type orderV2T struct {
		ID   string  `avro:"id"`
		Shoe shoeV1T `avro:"shoe"`
		Qty  int     `avro:"qty"`
	}
	fresh, err := registry.Avro[orderV2T](ctx, newRegistry(t, e.URL), e.topic("orders"), orderV2, registry.References(ref), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := fresh.Decode(b); err != nil || out != (orderV2T{ID: in.ID, Shoe: in.Shoe, Qty: 1}) {
		t.Errorf("decoded %+v, %v; want %+v with qty 1", out, err, in)
	}
}

// A URL that is not the registry's API (a server's own 404 page) is named
// as the likely mistake, not passed on as a bare "404 page not found".
func TestWrongRegistryURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler()) // as Apicurio answers outside /apis/ccompat/v7
	defer srv.Close()
	_, err := registry.Avro[shoeV1T](context.Background(), newRegistry(t, srv.URL), "shoes", shoeV1, registry.AutoRegister())
	if err == nil || !strings.Contains(err.Error(), "is the URL the base of its Confluent-compatible API") || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("a URL outside the registry's API: %v", err)
	}
}
