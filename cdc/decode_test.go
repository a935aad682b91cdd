package cdc_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/cdc"
)

// The shapes of the Debezium PostgreSQL connector's events for a table
// customers(id serial primary key, first_name, last_name, email), with the
// JSON converter, with and without schemas.
const (
	keyWithSchema    = `{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"server1.public.customers.Key"},"payload":{"id":1}}`
	keyPlain         = `{"id":1}`
	createWithSchema = `{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"first_name"}],"optional":true,"name":"server1.public.customers.Value","field":"before"},{"type":"struct","fields":[],"optional":true,"field":"after"},{"type":"struct","fields":[],"optional":false,"field":"source"},{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"server1.public.customers.Envelope"},` +
		`"payload":{"before":null,"after":{"id":1,"first_name":"Anne","last_name":"Kretchmar","email":"annek@noanswer.org"},"source":{"version":"2.5.0.Final","connector":"postgresql","name":"PostgreSQL_server","ts_ms":1559033904863,"snapshot":"false","db":"postgres","sequence":"[\"24023119\",\"24023128\"]","schema":"public","table":"customers","txId":555,"lsn":24023128,"xmin":null},"op":"c","ts_ms":1559033904863}}`
	updatePlain = `{"before":{"id":1,"first_name":"Anne","last_name":"Kretchmar","email":"annek@noanswer.org"},"after":{"id":1,"first_name":"Anne Marie","last_name":"Kretchmar","email":"annek@noanswer.org"},"source":{"version":"2.5.0.Final","connector":"postgresql","name":"PostgreSQL_server","ts_ms":1559033904863,"snapshot":"false","db":"postgres","schema":"public","table":"customers","txId":556,"lsn":24023130,"xmin":null},"op":"u","ts_ms":1465584025523}`
	deletePlain = `{"before":{"id":1,"first_name":null,"last_name":null,"email":null},"after":null,"source":{"version":"2.5.0.Final","connector":"postgresql","name":"PostgreSQL_server","ts_ms":1559033904863,"snapshot":"false","db":"postgres","schema":"public","table":"customers","txId":556,"lsn":46523128,"xmin":null},"op":"d","ts_ms":1465581902461}`
	readPlain   = `{"before":null,"after":{"id":2,"first_name":"Bo","last_name":"Lee","email":"bo@example.org"},"source":{"connector":"postgresql","ts_ms":1559033900000,"snapshot":"last","schema":"public","table":"customers","txId":550,"lsn":24000000},"op":"r","ts_ms":1559033900001}`
	truncate    = `{"before":null,"after":null,"source":{"connector":"postgresql","ts_ms":1559033904863,"snapshot":false,"schema":"public","table":"customers","txId":557,"lsn":46523200},"op":"t","ts_ms":1559033904961}`
	toastUpdate = `{"before":null,"after":{"id":1,"first_name":"Anne","bio":"__debezium_unavailable_value"},"source":{"lsn":46523300,"txId":558,"ts_ms":1},"op":"u","ts_ms":2}`
)

func TestDecodeEnvelopes(t *testing.T) {
	for _, c := range []struct {
		name, key, value string
		op               cdc.Op
		key0, after      string // a key column and an after column, as JSON
		lsn, txID        int64
		snapshot         bool
	}{
		{"create with schemas", keyWithSchema, createWithSchema, cdc.Create, "1", `"Anne"`, 24023128, 555, false},
		{"update without schemas", keyPlain, updatePlain, cdc.Update, "1", `"Anne Marie"`, 24023130, 556, false},
		{"delete: a before image of the key columns", keyPlain, deletePlain, cdc.Delete, "1", "", 46523128, 556, false},
		{"a snapshot read", `{"id":2}`, readPlain, cdc.Read, "2", `"Bo"`, 24000000, 550, true},
	} {
		ev, err := cdc.Decode([]byte(c.key), []byte(c.value))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ev.Op != c.op || string(ev.Key["id"]) != c.key0 || ev.Source.LSN != c.lsn || ev.Source.TxID != c.txID || ev.Source.Snapshot != c.snapshot ||
			ev.Source.Table != "customers" || ev.Source.Schema != "public" {
			t.Errorf("%s: %+v", c.name, ev)
		}
		if c.after != "" && string(ev.After["first_name"]) != c.after {
			t.Errorf("%s: after %v", c.name, ev.After)
		}
		if c.op == cdc.Delete && (ev.After != nil || string(ev.Before["id"]) != "1") {
			t.Errorf("%s: before %v after %v", c.name, ev.Before, ev.After)
		}
	}
}

// The tombstone after a delete, and a truncate (which has no key).
func TestDecodeTombstoneAndTruncate(t *testing.T) {
	ev, err := cdc.Decode([]byte(keyPlain), nil)
	if err != nil || ev.Op != cdc.Tombstone || string(ev.Key["id"]) != "1" {
		t.Errorf("tombstone: %+v, %v", ev, err)
	}
	ev, err = cdc.Decode(nil, []byte(truncate))
	if err != nil || ev.Op != cdc.Truncate || ev.Key != nil || ev.Source.LSN != 46523200 {
		t.Errorf("truncate: %+v, %v", ev, err)
	}
}

// Rows unwrapped by ExtractNewRecordState: a plain row is an upsert; the
// rewrite mode marks deletes with "__deleted"; "__op" and "__lsn", when
// added, say what and where; metadata fields are not columns.
func TestDecodeUnwrapped(t *testing.T) {
	ev, err := cdc.Decode([]byte(keyPlain), []byte(`{"id":1,"first_name":"Anne"}`))
	if err != nil || ev.Op != cdc.Update || string(ev.After["first_name"]) != `"Anne"` {
		t.Errorf("a plain row: %+v, %v", ev, err)
	}
	ev, err = cdc.Decode([]byte(keyPlain), []byte(`{"id":1,"first_name":null,"__deleted":"true","__lsn":99}`))
	if err != nil || ev.Op != cdc.Delete || ev.After != nil || ev.Source.LSN != 99 || ev.Before["__deleted"] != nil {
		t.Errorf("a rewritten delete: %+v, %v", ev, err)
	}
	ev, err = cdc.Decode([]byte(keyWithSchema), []byte(`{"schema":{"type":"struct","fields":[]},"payload":{"id":1,"first_name":"A","__op":"c","__deleted":"false"}}`))
	if err != nil || ev.Op != cdc.Create || len(ev.After) != 2 {
		t.Errorf("a created row with schema: %+v, %v", ev, err)
	}
}

// An unchanged TOASTed column keeps its previous value.
func TestMergeUnavailableToast(t *testing.T) {
	ev, err := cdc.Decode([]byte(keyPlain), []byte(toastUpdate))
	if err != nil {
		t.Fatal(err)
	}
	prev := cdc.Row{"id": json.RawMessage("1"), "first_name": json.RawMessage(`"Ann"`), "bio": json.RawMessage(`"a long text"`)}
	got := cdc.Merge(prev, ev.After)
	if string(got["bio"]) != `"a long text"` || string(got["first_name"]) != `"Anne"` {
		t.Errorf("merged %v", got)
	}
	if got := cdc.Merge(nil, ev.After); string(got["bio"]) != `"`+cdc.Unavailable+`"` {
		t.Errorf("merged without a previous row: %v", got)
	}
}

// Debezium writes the placeholder in the column's type: every form is
// recognized and merged, and nothing else is taken for one.
func TestMergeUnavailableForms(t *testing.T) {
	forms := map[string]string{
		"text":         `"__debezium_unavailable_value"`,
		"bytea":        `"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="`,
		"text[]":       `["__debezium_unavailable_value"]`,
		"bytea[]":      `["X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="]`,
		"int[]":        `[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101]`,
		"int[] spaced": `[95, 95, 100, 101, 98, 101, 122, 105, 117, 109, 95, 117, 110, 97, 118, 97, 105, 108, 97, 98, 108, 101, 95, 118, 97, 108, 117, 101]`,
		"uuid[]":       `["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]`,
		"hstore json":  `"{\"__debezium_unavailable_value\":\"__debezium_unavailable_value\"}"`,
		"hstore map":   `{"__debezium_unavailable_value":"__debezium_unavailable_value"}`,
	}
	for name, form := range forms {
		if !cdc.IsUnavailable(json.RawMessage(form)) {
			t.Errorf("%s: %s is not taken for the placeholder", name, form)
		}
		got := cdc.Merge(cdc.Row{"c": json.RawMessage(`"previous"`)}, cdc.Row{"c": json.RawMessage(form)})
		if string(got["c"]) != `"previous"` {
			t.Errorf("%s: merged %s", name, got["c"])
		}
	}
	for _, v := range []string{`"__debezium_unavailable_value "`, `["__debezium_unavailable_value", "x"]`, `[95,95]`, `"X19k"`, `null`, `1`, `""`} {
		if cdc.IsUnavailable(json.RawMessage(v)) {
			t.Errorf("%s taken for the placeholder", v)
		}
	}
}

// A logical decoding message (Debezium's op "m") is a message, never a
// row change.
func TestDecodeMessage(t *testing.T) {
	const value = `{"op":"m","ts_ms":1700000000001,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"pg","ts_ms":1700000000000,"snapshot":"false","db":"db","sequence":"[null,\"24023128\"]","schema":"","table":"","txId":560,"lsn":24023128,"xmin":null},"message":{"prefix":"audit","content":"aGVsbG8="}}`
	ev, err := cdc.Decode([]byte(`{"prefix":"audit"}`), []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Op != cdc.Message || ev.Message == nil || ev.Message.Prefix != "audit" || string(ev.Message.Content) != "hello" {
		t.Fatalf("decoded %+v (message %+v), want a message with prefix audit and content hello", ev, ev.Message)
	}
	if ev.After != nil || ev.Before != nil || ev.Key != nil || ev.Source.LSN != 24023128 || ev.Source.TxID != 560 {
		t.Errorf("a message decoded with a row, a key or the wrong source: %+v", ev)
	}
	if _, err := cdc.Decode(nil, []byte(`{"op":"m","source":{}}`)); err == nil {
		t.Error(`op "m" without its message decoded`)
	}
}

// What is not a change event says so, and which part.
func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{keyPlain, `not json`, "the value is not a Debezium change event: not JSON"},
		{`[1]`, updatePlain, "the key is not a Debezium change event"},
		{keyPlain, `{"before":null,"after":{"id":1},"op":"x"}`, `unknown op "x"`},
		{keyPlain, `{"before":null,"after":null,"op":"c"}`, `op "c" without an after image`},
		{keyPlain, `[]`, "the payload is not an object"},
	} {
		_, err := cdc.Decode([]byte(c.key), []byte(c.value))
		var de *cdc.DecodeError
		if err == nil || !errors.As(err, &de) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%s, %s): %v, want an error saying %q", c.key, c.value, err, c.want)
		}
	}
}

// A change's position: by its transaction's commit (Oxbow's commit_lsn, or
// Debezium's lastCommitLsn from "sequence"), then its own LSN.
func TestDecodePosition(t *testing.T) {
	src := func(fields string) string {
		return `{"before":null,"after":{"id":1},"source":{` + fields + `},"op":"c"}`
	}
	for _, c := range []struct {
		name, value string
		want        cdc.Position
	}{
		{"Debezium's sequence", src(`"sequence":"[\"24023119\",\"24023128\"]","lsn":24023128`), cdc.Position{Commit: 24023119, LSN: 24023128}},
		{"a snapshot's sequence", src(`"sequence":"[null,\"500\"]","lsn":500`), cdc.Position{LSN: 500}},
		{"Oxbow's commit_lsn first", src(`"sequence":"[\"1\",\"7\"]","lsn":7,"commit_lsn":9`), cdc.Position{Commit: 9, LSN: 7}},
		{"only an lsn", src(`"lsn":42`), cdc.Position{LSN: 42}},
		{"nothing", src(`"table":"t"`), cdc.Position{}},
	} {
		ev, err := cdc.Decode([]byte(`{"id":1}`), []byte(c.value))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ev.Source.Position(); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	a, b := cdc.Position{Commit: 1, LSN: 9}, cdc.Position{Commit: 2, LSN: 3}
	if !a.Before(b) || b.Before(a) || a.Before(a) || !(cdc.Position{}).IsZero() || a.IsZero() {
		t.Error("Position.Before orders by commit, then LSN")
	}
}
