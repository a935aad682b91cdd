package registry_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde/registry"
)

// Every Avro type, written as Kafka Connect's JsonConverter writes it.
func TestAvroToJSON(t *testing.T) {
	const schema = `{"type":"record","name":"Row","namespace":"db.public.items","fields":[
		{"name":"n","type":"null"},
		{"name":"ok","type":"boolean"},
		{"name":"i","type":"int"},
		{"name":"l","type":"long"},
		{"name":"f","type":"float"},
		{"name":"d","type":"double"},
		{"name":"nan","type":"double"},
		{"name":"s","type":"string"},
		{"name":"b","type":"bytes"},
		{"name":"fx","type":{"type":"fixed","name":"Four","size":4}},
		{"name":"e","type":{"type":"enum","name":"Colour","symbols":["RED","TAN"]}},
		{"name":"a","type":{"type":"array","items":"long"}},
		{"name":"m","type":{"type":"map","values":"string"}},
		{"name":"opt","type":["null","string"],"default":null},
		{"name":"none","type":["null","string"],"default":null},
		{"name":"nested","type":{"type":"record","name":"Point","fields":[{"name":"x","type":"double"},{"name":"srid","type":["null","int"]}]}},
		{"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2,"connect.name":"org.apache.kafka.connect.data.Decimal"}},
		{"name":"day","type":{"type":"int","logicalType":"date","connect.name":"io.debezium.time.Date"}},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},
		{"name":"self","type":["null","Point"]}
	]}`
	e := newEnv(t)
	id := e.register(e.topic("rows")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: schema})
	s := avro.MustParse(schema)
	value := map[string]any{
		"n": nil, "ok": true, "i": -3, "l": int64(1) << 40, "f": float32(1.1), "d": 2.5e-7, "nan": math.NaN(),
		"s": "a \"quoted\" <tag> é", "b": []byte{0, 1, 254}, "fx": [4]byte{'o', 'x', 'b', 'w'}, "e": "TAN",
		"a": []int64{1, 2, 3}, "m": map[string]any{"k": "v"}, "opt": map[string]any{"string": "here"}, "none": nil,
		"nested": map[string]any{"x": 1.5, "srid": map[string]any{"int": 4326}},
		"dec":    big.NewRat(12345, 100), "day": time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		"ts": time.UnixMicro(1_700_000_000_123_456).UTC(), "self": nil,
	}
	payload, err := avro.Marshal(s, value)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, e.URL)
	got, err := r.AvroToJSON(append([]byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, payload...))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"n":null,"ok":true,"i":-3,"l":1099511627776,"f":1.1,"d":2.5E-7,"nan":"NaN",` +
		`"s":"a \"quoted\" <tag> é","b":"AAH+","fx":"b3hidw==","e":"TAN","a":[1,2,3],"m":{"k":"v"},"opt":"here","none":null,` +
		`"nested":{"x":1.5,"srid":4326},"dec":"MDk=","day":20791,"ts":1700000000123456,"self":null}`
	if !json.Valid(got) || string(got) != want {
		t.Errorf("got\n%s\nwant, byte for byte as the JsonConverter writes it,\n%s", got, want)
	}
	if _, err := r.AvroToJSON(append([]byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, payload[:10]...)); !errors.Is(err, registry.ErrMalformed) {
		t.Errorf("cut short: %v", err)
	}
	if _, err := r.AvroToJSON([]byte(`{"a":1}`)); !errors.Is(err, registry.ErrNotWireFormat) {
		t.Errorf("JSON: %v", err)
	}
}

// A union of several types is an object with a field per branch, as
// AvroData makes it; bytes that are not UTF-8 become U+FFFD; a corrupt
// item count fails at once instead of filling memory.
func TestAvroToJSONEdges(t *testing.T) {
	const schema = `{"type":"record","name":"Edge","fields":[
		{"name":"u","type":["null","int","string",{"type":"record","name":"P","fields":[{"name":"x","type":"int"}]}]},
		{"name":"u2","type":["null","int","string"]},
		{"name":"s","type":"string"},
		{"name":"a","type":{"type":"array","items":"null"}}]}`
	e := newEnv(t)
	id := e.register(e.topic("edges")+"-value", sr.Schema{Type: sr.TypeAvro, Schema: schema})
	header := binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
	r := newRegistry(t, e.URL)
	// u: branch 3 (P{x: 1}); u2: branch 0 (null); s: "a\xffb"; a: 2 nulls.
	payload := []byte{6, 2, 0, 6, 'a', 0xff, 'b', 4, 0}
	got, err := r.AvroToJSON(append(header, payload...))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"u":{"int":null,"string":null,"P":{"x":1}},"u2":null,"s":"a` + "\uFFFD" + `b","a":[null,null]}`; string(got) != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	// 2^40 nulls in a record of 9 bytes.
	huge := binary.AppendVarint([]byte{0, 0, 0}, 1<<40) // u, u2 null; s ""; a: a block of 2^40
	if _, err := r.AvroToJSON(append(header, huge...)); !errors.Is(err, registry.ErrMalformed) || !strings.Contains(err.Error(), "more than the record can hold") {
		t.Errorf("a count of 2^40: %v", err)
	}
}
