package cdc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

// The Avro schemas Debezium's PostgreSQL connector gets from the Avro
// converter for customers(id serial primary key, first_name, email):
// optional columns and images as unions with null.
const (
	customersKeySchema   = `{"type":"record","name":"Key","namespace":"server1.public.customers","fields":[{"name":"id","type":"int"}],"connect.name":"server1.public.customers.Key"}`
	customersValueSchema = `{"type":"record","name":"Envelope","namespace":"server1.public.customers","fields":[
		{"name":"before","type":["null",{"type":"record","name":"Value","fields":[
			{"name":"id","type":"int"},
			{"name":"first_name","type":["null","string"],"default":null},
			{"name":"email","type":["null","string"],"default":null},
			{"name":"balance","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
			{"name":"joined","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null}],
			"connect.name":"server1.public.customers.Value"}],"default":null},
		{"name":"after","type":["null","Value"],"default":null},
		{"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
			{"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},
			{"name":"ts_ms","type":"long"},
			{"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,last,false,incremental"},"connect.default":"false","connect.name":"io.debezium.data.Enum"},"null"],"default":"false"},
			{"name":"db","type":"string"},{"name":"sequence","type":["null","string"],"default":null},
			{"name":"schema","type":"string"},{"name":"table","type":"string"},
			{"name":"txId","type":["null","long"],"default":null},{"name":"lsn","type":["null","long"],"default":null},
			{"name":"xmin","type":["null","long"],"default":null}]}},
		{"name":"op","type":"string"},
		{"name":"ts_ms","type":["null","long"],"default":null}],
		"connect.name":"server1.public.customers.Envelope"}`
)

// The same changes as the JSON converter writes them (without schemas).
const (
	customersKeyJSON    = `{"id":7}`
	customersUpdateJSON = `{"before":{"id":7,"first_name":"Anne","email":null,"balance":"MDk=","joined":1700000000123456},` +
		`"after":{"id":7,"first_name":"Anne Marie","email":"anne@example.org","balance":"AMg=","joined":1700000000123456},` +
		`"source":{"version":"2.7.3.Final","connector":"postgresql","name":"server1","ts_ms":1764806400000,"snapshot":"false","db":"oxbow","sequence":"[\"24023119\",\"24023128\"]","schema":"public","table":"customers","txId":556,"lsn":24023128,"xmin":null},` +
		`"op":"u","ts_ms":1764806400100}`
)

func TestDecodeAvro(t *testing.T) {
	e := srtest.New(t)
	topic := e.Prefix + ".public.customers"
	ctx := context.Background()
	keyID, err := e.Client.RegisterSchema(ctx, topic+"-key", sr.Schema{Type: sr.TypeAvro, Schema: customersKeySchema}, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	valueID, err := e.Client.RegisterSchema(ctx, topic+"-value", sr.Schema{Type: sr.TypeAvro, Schema: customersValueSchema}, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	wire := func(id int, schema string, v any) []byte {
		b, err := avro.Marshal(avro.MustParse(schema), v)
		if err != nil {
			t.Fatal(err)
		}
		return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), b...)
	}
	str := func(s string) map[string]any { return map[string]any{"string": s} }
	long := func(n int64) map[string]any { return map[string]any{"long": n} }
	dec := func(unscaled []byte) map[string]any { return map[string]any{"bytes": unscaled} }
	// The decimal branch's name is its underlying type's; hamba writes
	// []byte for it only without the logical type, so the value is
	// written against a schema without it (the bytes are the same).
	valueSchema := strings.ReplaceAll(customersValueSchema, `,"logicalType":"decimal"`, ``)
	key := wire(keyID, customersKeySchema, map[string]any{"id": 7})
	value := wire(valueID, valueSchema, map[string]any{
		"before": map[string]any{"server1.public.customers.Value": map[string]any{"id": 7, "first_name": str("Anne"), "email": nil, "balance": dec([]byte{0x30, 0x39}), "joined": long(1700000000123456)}},
		"after":  map[string]any{"server1.public.customers.Value": map[string]any{"id": 7, "first_name": str("Anne Marie"), "email": str("anne@example.org"), "balance": dec([]byte{0, 0xc8}), "joined": long(1700000000123456)}},
		"source": map[string]any{"version": "2.7.3.Final", "connector": "postgresql", "name": "server1", "ts_ms": int64(1764806400000),
			"snapshot": str("false"), "db": "oxbow", "sequence": str(`["24023119","24023128"]`), "schema": "public", "table": "customers",
			"txId": long(556), "lsn": long(24023128), "xmin": nil},
		"op": "u", "ts_ms": long(1764806400100),
	})

	reg, err := registry.New(registry.Config{URLs: []string{e.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	got, err := cdc.Decode(key, value, cdc.Avro(reg))
	if err != nil {
		t.Fatal(err)
	}
	want, err := cdc.Decode([]byte(customersKeyJSON), []byte(customersUpdateJSON))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from Avro:\n%+v\nfrom JSON:\n%+v", got, want)
	}
	if got.Op != cdc.Update || got.Source.LSN != 24023128 || got.Source.CommitLSN != 24023119 || string(got.After["first_name"]) != `"Anne Marie"` {
		t.Errorf("decoded %+v", got)
	}

	// Without the option, Avro is refused saying what it is; a tombstone
	// needs no registry.
	var de *cdc.DecodeError
	if _, err := cdc.Decode(key, value); !errors.As(err, &de) || !strings.Contains(err.Error(), "cdc.Avro") {
		t.Errorf("Avro without cdc.Avro: %v", err)
	}
	if ev, err := cdc.Decode(key, nil, cdc.Avro(reg)); err != nil || ev.Op != cdc.Tombstone || ev.Key["id"] == nil {
		t.Errorf("a tombstone: %+v, %v", ev, err)
	}
	if _, err := cdc.Decode(key, append(value[:5:5], 0xff), cdc.Avro(reg)); !errors.As(err, &de) || !errors.Is(err, registry.ErrMalformed) {
		t.Errorf("a value cut short: %v", err)
	}
}
