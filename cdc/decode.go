package cdc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
)

// Op is what a change event did to its row.
type Op string

// The operations of Debezium's change events.
const (
	Create   Op = "c"
	Update   Op = "u"
	Delete   Op = "d"
	Read     Op = "r" // a row of a snapshot
	Truncate Op = "t"
	// Message is a logical decoding message (PostgreSQL's
	// pg_logical_emit_message), which Debezium writes with op "m": no row
	// change, see [Event.Message].
	Message Op = "m"
	// Tombstone is the null-valued record Debezium writes after a delete,
	// so that compaction can drop the key.
	Tombstone Op = "tombstone"
)

// Unavailable is the value Debezium's PostgreSQL connector writes for an
// unchanged TOASTed column it did not receive (without REPLICA IDENTITY
// FULL): the column keeps its previous value. Columns that are not text
// get it in their type's form; [IsUnavailable] knows them all.
const Unavailable = "__debezium_unavailable_value"

// The forms of the placeholder by column type, as Debezium writes them with
// the JSON converter: text (and json, xml, ...), bytea (base64 of its
// bytes), text and bytea arrays (a one-element array), int and bigint
// arrays (its bytes as numbers), uuid arrays (the name-based UUID of its
// bytes, Java's UUID.nameUUIDFromBytes), hstore (a map of it to itself, as
// a JSON document in a string by hstore.handling.mode=json or as an object
// by map).
var unavailableForms = func() map[string]bool {
	const b64 = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="
	const ints = "[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101]"
	forms := map[string]bool{}
	for _, f := range []string{
		`"` + Unavailable + `"`, `"` + b64 + `"`, `["` + Unavailable + `"]`, `["` + b64 + `"]`, ints,
		`["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]`,
		`"{\"` + Unavailable + `\":\"` + Unavailable + `\"}"`,
		`{"` + Unavailable + `":"` + Unavailable + `"}`,
	} {
		forms[f] = true
	}
	return forms
}()

// IsUnavailable reports whether a column's JSON value is Debezium's
// unavailable-TOAST placeholder, in any of the forms its PostgreSQL
// connector writes (by the column's type).
func IsUnavailable(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || len(v) > 160 {
		return false
	}
	if unavailableForms[string(v)] {
		return true
	}
	if bytes.ContainsAny(v, " \t\r\n") { // written by another encoder: compact it
		var c bytes.Buffer
		if json.Compact(&c, v) == nil {
			return unavailableForms[c.String()]
		}
	}
	return false
}

// mayHaveUnavailable: a row's JSON may hold a placeholder (a quick test
// before IsUnavailable on each column).
func mayHaveUnavailable(row []byte) bool {
	return bytes.Contains(row, []byte(Unavailable)) || bytes.Contains(row, []byte("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ")) ||
		bytes.Contains(row, []byte("95,95,100,101,98,101,122,105,117,109")) || bytes.Contains(row, []byte("b68a35a7-17ad-35b3-af2a-ae46edb4545a"))
}

// Row is a row's columns, as JSON values.
type Row map[string]json.RawMessage

// Source is where in the database's log a change happened.
type Source struct {
	// LSN is the log position of the change (PostgreSQL's lsn; 0 if the
	// event does not say), TxID its transaction.
	LSN  int64
	TxID int64
	// TsMs is when the database made the change, Unix milliseconds.
	TsMs int64
	// Table and Schema name the row's table.
	Schema, Table string
	// Snapshot: the row comes from an initial snapshot.
	Snapshot bool
	// CommitLSN orders the change's transaction: the log position of its
	// own commit (Oxbow's source writes it as "commit_lsn") or, from a
	// Debezium connector, the commit of the transaction before it (the
	// first element of "sequence"); 0 if the event has neither.
	CommitLSN int64
}

// Position is where a change stands in the order of a row's changes: by
// transaction (CommitLSN), then within it (LSN). Changes to one row are
// made in this order, so a change at a position no later than the last one
// applied to its row is a duplicate.
func (s Source) Position() Position { return Position{s.CommitLSN, s.LSN} }

// Position is a change's place in the database's commit order; see
// [Source.Position]. The zero Position is before every other.
type Position struct {
	Commit int64 `json:"c,omitempty"`
	LSN    int64 `json:"l,omitempty"`
}

// Before reports whether p comes before q.
func (p Position) Before(q Position) bool {
	if p.Commit != q.Commit {
		return p.Commit < q.Commit
	}
	return p.LSN < q.LSN
}

// IsZero reports whether p says nothing of the change's place.
func (p Position) IsZero() bool { return p == Position{} }

// Event is a decoded change event.
type Event struct {
	Op     Op
	Key    Row // the primary key's columns (nil for a truncate)
	Before Row // the row before (updates and deletes, when the connector has it)
	After  Row // the row after (creates, reads and updates)
	Source Source
	// Message is a logical decoding message's (Op Message): nil otherwise.
	Message *LogicalMessage
}

// LogicalMessage is what pg_logical_emit_message wrote, as Debezium passes
// it on: its prefix and content. Debezium keys it by the prefix.
type LogicalMessage struct {
	Prefix  string
	Content []byte
}

// DecodeError is an event that is not a Debezium change event.
type DecodeError struct {
	Part string // "key" or "value"
	Err  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("cdc: the %s is not a Debezium change event: %v", e.Part, e.Err)
}
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode reads a Debezium change event from a Kafka record's key and value:
// JSON with or without the embedded schema ({"schema":…,"payload":…}),
// the full envelope (before, after, source, op) or the unwrapped row of
// ExtractNewRecordState (with its "__deleted" and "__op" fields when the
// transform adds them). A nil value is the tombstone after a delete. With
// [Avro], keys and values in Avro read as well.
func Decode(key, value []byte, opts ...Option) (Event, error) {
	o := makeOptions(opts)
	key, value, err := o.toJSON(key, value)
	if err != nil {
		return Event{}, err
	}
	ev, _, err := decode(key, value, true)
	return ev, err
}

// An Option changes how change events are read.
type Option func(*options)

type options struct {
	avro func([]byte) ([]byte, error)
}

func makeOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Avro reads keys and values in Avro with their schemas in reg, as
// Debezium writes them with the Avro converter in Confluent's wire format
// (Confluent's AvroConverter, or Apicurio's set to Confluent's id
// handling), besides JSON: each is read as the JSON that Kafka Connect's
// JsonConverter writes for the same value ([registry.Registry.AvroToJSON]),
// so that an event decodes to what its JSON twin gives (checked against
// Debezium itself, cdc/postgres's differential test), but for names
// Debezium adjusted to be valid in Avro (schema.name.adjustment.mode,
// field.name.adjustment.mode), which stay adjusted. A registry that
// cannot be reached stops the application rather than a record being
// skipped (serde.ErrUnavailable).
func Avro(reg *registry.Registry) Option {
	return func(o *options) { o.avro = reg.AvroToJSON }
}

// toJSON turns a key and a value in Avro into JSON; JSON passes through.
func (o options) toJSON(key, value []byte) ([]byte, []byte, error) {
	var err error
	if key, err = o.convert("key", key); err != nil {
		return nil, nil, err
	}
	if value, err = o.convert("value", value); err != nil {
		return nil, nil, err
	}
	return key, value, nil
}

func (o options) convert(part string, b []byte) ([]byte, error) {
	if len(b) < 5 || b[0] != 0 { // JSON never starts with a zero byte
		return b, nil
	}
	if o.avro == nil {
		return nil, &DecodeError{part, fmt.Errorf("in Confluent's wire format (schema id %d), not JSON: read Avro with cdc.Avro", binary.BigEndian.Uint32(b[1:5]))}
	}
	j, err := o.avro(b)
	if errors.Is(err, serde.ErrUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, &DecodeError{part, err}
	}
	return j, nil
}

// envelope is the top level of a change event, or of its schema wrapper.
type envelope struct {
	Schema  json.RawMessage `json:"schema"`
	Payload json.RawMessage `json:"payload"`
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after"`
	Source  *sourceJSON     `json:"source"`
	Op      json.RawMessage `json:"op"`
	TsMs    json.RawMessage `json:"ts_ms"`
	Message *struct {
		Prefix  string `json:"prefix"`
		Content []byte `json:"content"`
	} `json:"message"`
}

// decode is Decode that also returns the after image's JSON; without
// images, Before and After are left nil when the event is an envelope
// (NewTable reads the JSON).
func decode(key, value []byte, images bool) (Event, json.RawMessage, error) {
	var ev Event
	if len(key) > 0 && !isNull(key) {
		var k envelope
		if err := json.Unmarshal(key, &k); err != nil {
			var v any
			if json.Unmarshal(key, &v) != nil {
				return ev, nil, &DecodeError{"key", fmt.Errorf("not JSON: %w", err)}
			}
			return ev, nil, &DecodeError{"key", errors.New("want the primary key's columns as an object")}
		}
		kb := json.RawMessage(key)
		if k.Schema != nil && k.Payload != nil {
			kb = k.Payload
		}
		if !isNull(kb) {
			if err := json.Unmarshal(kb, &ev.Key); err != nil {
				return ev, nil, &DecodeError{"key", fmt.Errorf("want the primary key's columns as an object: %w", err)}
			}
		}
	}
	if value == nil {
		ev.Op = Tombstone
		return ev, nil, nil
	}
	var env envelope
	if err := json.Unmarshal(value, &env); err != nil {
		var v any
		if json.Unmarshal(value, &v) != nil {
			return ev, nil, &DecodeError{"value", fmt.Errorf("not JSON: %w", err)}
		}
		if _, ok := v.(map[string]any); ok {
			return ev, nil, &DecodeError{"value", err}
		}
		return ev, nil, &DecodeError{"value", errors.New("the payload is not an object")}
	}
	p := json.RawMessage(value)
	if env.Schema != nil && env.Payload != nil && env.Op == nil {
		p = env.Payload
		env = envelope{}
		if err := json.Unmarshal(p, &env); err != nil {
			var v any
			if json.Unmarshal(p, &v) == nil {
				if _, ok := v.(map[string]any); ok {
					return ev, nil, &DecodeError{"value", err}
				}
			}
			return ev, nil, &DecodeError{"value", errors.New("the payload is not an object")}
		}
	}
	var op string
	if env.Op != nil {
		if err := json.Unmarshal(env.Op, &op); err != nil {
			return ev, nil, &DecodeError{"value", fmt.Errorf("op: %w", err)}
		}
	}
	if op == string(Message) {
		if env.Message == nil {
			return ev, nil, &DecodeError{"value", errors.New(`op "m" without a message`)}
		}
		ev.Op, ev.Key = Message, nil
		ev.Message = &LogicalMessage{Prefix: env.Message.Prefix, Content: env.Message.Content}
		if env.Source != nil {
			ev.Source = source(env.Source)
		}
		return ev, nil, nil
	}
	if env.Op == nil || !(env.After != nil || env.Before != nil || op == "t") {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(p, &fields); err != nil || fields == nil {
			return ev, nil, &DecodeError{"value", errors.New("the payload is not an object")}
		}
		ev, err := decodeUnwrapped(ev, fields)
		if err != nil || ev.After == nil {
			return ev, nil, err
		}
		after, err := json.Marshal(ev.After)
		return ev, after, err
	}
	ev.Op = Op(op)
	switch ev.Op {
	case Create, Update, Delete, Read, Truncate:
	default:
		return ev, nil, &DecodeError{"value", fmt.Errorf("unknown op %q", op)}
	}
	var err error
	if images {
		if ev.Before, err = row(env.Before); err != nil {
			return ev, nil, &DecodeError{"value", fmt.Errorf("before: %w", err)}
		}
		if ev.After, err = row(env.After); err != nil {
			return ev, nil, &DecodeError{"value", fmt.Errorf("after: %w", err)}
		}
	}
	after := env.After
	if after == nil || isNull(after) {
		after = nil
	} else if t := bytes.TrimSpace(after); len(t) == 0 || t[0] != '{' {
		return ev, nil, &DecodeError{"value", errors.New("after: not an object")}
	}
	if env.Source != nil {
		ev.Source = source(env.Source)
	}
	if ev.Source.TsMs == 0 && env.TsMs != nil {
		ev.Source.TsMs, _ = number(env.TsMs)
	}
	switch {
	case (ev.Op == Create || ev.Op == Read || ev.Op == Update) && after == nil:
		return ev, nil, &DecodeError{"value", fmt.Errorf("op %q without an after image", op)}
	case ev.Op == Truncate:
		ev.Key = nil
	}
	return ev, after, nil
}

func isNull(b []byte) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// decodeUnwrapped reads a row flattened by ExtractNewRecordState: "__deleted"
// ("true") marks a delete in the rewrite mode, "__op" the operation when
// added; "__"-prefixed metadata fields are not columns.
func decodeUnwrapped(ev Event, fields map[string]json.RawMessage) (Event, error) {
	ev.Op = Update
	if op, ok := fields["__op"]; ok {
		var s string
		if json.Unmarshal(op, &s) == nil && s != "" {
			ev.Op = Op(s)
		}
	}
	if d, ok := fields["__deleted"]; ok {
		var s string
		var b bool
		if (json.Unmarshal(d, &s) == nil && s == "true") || (json.Unmarshal(d, &b) == nil && b) {
			ev.Op = Delete
		}
	}
	if lsn, ok := fields["__lsn"]; ok {
		ev.Source.LSN, _ = number(lsn)
	}
	if ts, ok := fields["__source_ts_ms"]; ok {
		ev.Source.TsMs, _ = number(ts)
	}
	r := Row{}
	for k, v := range fields {
		if len(k) > 2 && k[:2] == "__" {
			continue
		}
		r[k] = v
	}
	if ev.Op == Delete {
		ev.Before = r
	} else {
		ev.After = r
	}
	return ev, nil
}

func row(b json.RawMessage) (Row, error) {
	if len(b) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil, nil
	}
	var r Row
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return r, nil
}

// sourceJSON is the source block as it is written.
type sourceJSON struct {
	LSN      json.RawMessage `json:"lsn"`
	TxID     json.RawMessage `json:"txId"`
	TsMs     json.RawMessage `json:"ts_ms"`
	Schema   string          `json:"schema"`
	Table    string          `json:"table"`
	Snapshot json.RawMessage `json:"snapshot"`
	Sequence json.RawMessage `json:"sequence"`
	Commit   json.RawMessage `json:"commit_lsn"`
}

func source(s *sourceJSON) Source {
	out := Source{Schema: s.Schema, Table: s.Table}
	out.LSN, _ = number(s.LSN)
	out.TxID, _ = number(s.TxID)
	out.TsMs, _ = number(s.TsMs)
	if c, ok := number(s.Commit); ok {
		out.CommitLSN = c
	} else if seq := sequence(s.Sequence); len(seq) == 2 {
		// Debezium's ["lastCommitLsn","lsn"], a JSON array in a string.
		out.CommitLSN, _ = number(seq[0])
		if out.LSN == 0 {
			out.LSN, _ = number(seq[1])
		}
	}
	switch snap := string(bytes.Trim(bytes.TrimSpace(s.Snapshot), `"`)); snap {
	case "true", "first", "last", "first_in_data_collection", "last_in_data_collection":
		out.Snapshot = true
	}
	return out
}

// sequence reads Debezium's "sequence": a string holding a JSON array.
func sequence(b json.RawMessage) []json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '"' {
		return nil
	}
	inner := b[1 : len(b)-1]
	if bytes.IndexByte(inner, '\\') >= 0 {
		// Escaped quotes, as Debezium writes them: unquote first.
		var s string
		if json.Unmarshal(b, &s) != nil {
			return nil
		}
		inner = []byte(s)
	}
	inner = bytes.TrimSpace(inner)
	if len(inner) < 2 || inner[0] != '[' || inner[len(inner)-1] != ']' {
		return nil
	}
	var seq []json.RawMessage
	for part := range bytes.SplitSeq(inner[1:len(inner)-1], []byte(",")) {
		seq = append(seq, json.RawMessage(bytes.TrimSpace(part)))
	}
	return seq
}

// number reads a JSON number or a numeric string.
func number(b json.RawMessage) (int64, bool) {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		b = b[1 : len(b)-1]
	}
	if len(b) == 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		// A JSON number with a fraction or exponent that is still whole.
		var n json.Number
		if json.Unmarshal(b, &n) != nil {
			return 0, false
		}
		f, err := n.Float64()
		if err != nil || f != float64(int64(f)) {
			return 0, false
		}
		return int64(f), true
	}
	return v, true
}

// Merge returns the row after an update whose after image may hold the
// unavailable-TOAST placeholder (any of its forms, see [IsUnavailable]):
// those columns keep their previous values.
func Merge(previous, after Row) Row {
	if after == nil {
		return nil
	}
	out := make(Row, len(after))
	for k, v := range after {
		if IsUnavailable(v) {
			if p, ok := previous[k]; ok {
				out[k] = p
				continue
			}
		}
		out[k] = v
	}
	return out
}
