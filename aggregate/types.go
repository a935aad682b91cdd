package aggregate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Types is a registry of the concrete types of a sum type T (the commands,
// or the events, of an aggregate: usually an interface that each command
// or event struct implements), by name. A value travels as self-describing
// JSON: an envelope with the type's name, its schema version and the value
// itself, {"type":"ShoeSold","version":2,"data":{…}}, so that any reader —
// a projection, another service, a person with a console consumer — can
// tell what it is. The name also goes in a header (oxbow-type).
//
// Event schemas evolve with upcasters: register the type at its current
// version with [RegisterVersion] and, for each older version still in the
// topic, an [Types.Upcast] that turns its JSON into the next version's. A
// value is upcast when it is read, never rewritten in its topic.
type Types[T any] struct {
	byName   map[string]*typeEntry[T]
	byType   map[reflect.Type]*typeEntry[T]
	upcast   map[string]map[int]Upcaster // by type name, then from version
	problems []error
	strict   bool // RejectUnknownFields
	format   serde.Serde[T]
}

// Use makes the values travel in s instead of the self-describing JSON
// envelope: a serde of registered schemas, such as
// registry.AvroUnion with one member per registered type, so that the
// commands or events are in Confluent's wire format with their schemas in a
// schema registry, readable by any service that reads the format. Their
// schemas then evolve under the registry's compatibility rule for the
// subjects (BACKWARD by default: a field added with a default, say), and
// Avro's resolution reads an older or newer version of a type; upcasters
// and schema versions apply to the JSON envelope only. The registered
// names still name the types (the oxbow-type header, outcomes), and a
// value of a type not registered is refused both ways.
func (ts *Types[T]) Use(s serde.Serde[T]) {
	if s == nil {
		ts.problems = append(ts.problems, errors.New("Use: the serde is nil"))
		return
	}
	ts.format = s
}

// RejectUnknownFields makes Decode refuse a value whose data has a field
// its type does not: a command with a misspelt field ("prise" for
// "price") is malformed rather than taken without it. Meant for commands,
// which come from outside; events, read for years after their schema
// changed, are better decoded leniently (or upcast).
func (ts *Types[T]) RejectUnknownFields() { ts.strict = true }

// Upcaster turns the JSON of a value of one schema version into the JSON of
// the next version, possibly of another type name (a renamed event).
type Upcaster func(data json.RawMessage) (name string, next json.RawMessage, err error)

type typeEntry[T any] struct {
	name    string
	goType  reflect.Type
	version int
	decode  func(json.RawMessage) (T, error)
}

// NewTypes returns an empty registry for the sum type T.
func NewTypes[T any]() *Types[T] {
	return &Types[T]{byName: map[string]*typeEntry[T]{}, byType: map[reflect.Type]*typeEntry[T]{}, upcast: map[string]map[int]Upcaster{}}
}

// Register adds V, a concrete type of T, under name at schema version 1.
// Problems (V is not a T, a name or type registered twice) are reported by
// [New].
func Register[V, T any](ts *Types[T], name string) { RegisterVersion[V](ts, name, 1) }

// RegisterVersion is Register at a schema version above 1: values of older
// versions are upcast to it when read (see [Types.Upcast]).
func RegisterVersion[V, T any](ts *Types[T], name string, version int) {
	var zero V
	if _, ok := any(zero).(T); !ok {
		ts.problems = append(ts.problems, fmt.Errorf("type %q: %v cannot be used as %v", name, reflect.TypeFor[V](), reflect.TypeFor[T]()))
		return
	}
	switch {
	case name == "" || strings.TrimSpace(name) != name:
		ts.problems = append(ts.problems, fmt.Errorf("type name %q: must be non-empty, without surrounding spaces", name))
		return
	case version < 1:
		ts.problems = append(ts.problems, fmt.Errorf("type %q: schema version %d must be at least 1", name, version))
		return
	case ts.byName[name] != nil:
		ts.problems = append(ts.problems, fmt.Errorf("type name %q is registered twice", name))
		return
	case ts.byType[reflect.TypeFor[V]()] != nil:
		ts.problems = append(ts.problems, fmt.Errorf("%v is registered twice (as %q and %q)", reflect.TypeFor[V](), ts.byType[reflect.TypeFor[V]()].name, name))
		return
	}
	e := &typeEntry[T]{name: name, goType: reflect.TypeFor[V](), version: version, decode: func(raw json.RawMessage) (T, error) {
		var v V
		d := json.NewDecoder(bytes.NewReader(raw))
		if ts.strict {
			d.DisallowUnknownFields()
		}
		if err := d.Decode(&v); err != nil {
			var zero T
			return zero, plainJSONError(err)
		}
		return any(v).(T), nil
	}}
	ts.byName[name] = e
	ts.byType[reflect.TypeFor[V]()] = e
}

// plainJSONError says what is wrong with a value's JSON in JSON's terms
// (fields and JSON types, not Go's).
func plainJSONError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		where := "the value"
		if te.Field != "" {
			where = fmt.Sprintf("field %q", te.Field)
		}
		return fmt.Errorf("%s: %s where %s is expected", where, te.Value, jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.EOF):
		return errors.New("no data")
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// Upcast registers how a value of type name at schema version from becomes
// one of version from+1 (of the name fn returns).
func (ts *Types[T]) Upcast(name string, from int, fn Upcaster) {
	if fn == nil || from < 1 {
		ts.problems = append(ts.problems, fmt.Errorf("upcaster of %q from version %d: needs a function and a version of at least 1", name, from))
		return
	}
	if ts.upcast[name] == nil {
		ts.upcast[name] = map[int]Upcaster{}
	}
	if ts.upcast[name][from] != nil {
		ts.problems = append(ts.problems, fmt.Errorf("upcaster of %q from version %d is registered twice", name, from))
		return
	}
	ts.upcast[name][from] = fn
}

// GoTypes are the registered types by name: what their data decodes into
// (for a schema of the commands an API takes, say).
func (ts *Types[T]) GoTypes() map[string]reflect.Type {
	out := make(map[string]reflect.Type, len(ts.byName))
	for n, e := range ts.byName {
		out[n] = e.goType
	}
	return out
}

// Knows says whether a value of the type called name can be read: it is
// registered, or upcast from.
func (ts *Types[T]) Knows(name string) bool {
	return ts.byName[name] != nil || len(ts.upcast[name]) > 0
}

// Names are the registered type names, sorted.
func (ts *Types[T]) Names() []string {
	var out []string
	for n := range ts.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (ts *Types[T]) check(what string) error {
	errs := slices.Clone(ts.problems)
	if len(ts.byName) == 0 {
		errs = append(errs, errors.New("no type is registered"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", what, errors.Join(errs...))
}

// envelope is how a value travels.
type envelope struct {
	Type    string          `json:"type"`
	Version int             `json:"version"`
	Data    json.RawMessage `json:"data"`
}

// NameOf returns the registered name of v's type.
func (ts *Types[T]) NameOf(v T) (string, error) {
	if e := ts.byType[reflect.TypeOf(v)]; e != nil {
		return e.name, nil
	}
	return "", fmt.Errorf("aggregate: %T is not a registered type (registered: %s)", v, strings.Join(ts.Names(), ", "))
}

// Encode writes v in its envelope, or in the serde given to [Types.Use].
func (ts *Types[T]) Encode(v T) ([]byte, error) {
	e := ts.byType[reflect.TypeOf(v)]
	if e == nil {
		return nil, fmt.Errorf("aggregate: %T is not a registered type (registered: %s)", v, strings.Join(ts.Names(), ", "))
	}
	if ts.format != nil {
		b, err := ts.format.Encode(v)
		if err != nil {
			return nil, fmt.Errorf("aggregate: encode %s: %w", e.name, err)
		}
		return b, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("aggregate: encode %s: %w", e.name, err)
	}
	return json.Marshal(envelope{Type: e.name, Version: e.version, Data: data})
}

// Decode reads a value from its envelope, upcasting it to the registered
// schema version, or with the serde given to [Types.Use].
func (ts *Types[T]) Decode(b []byte) (T, error) {
	var zero T
	if ts.format != nil {
		v, err := ts.format.Decode(b)
		if err != nil {
			return zero, fmt.Errorf("aggregate: %w", err)
		}
		if ts.byType[reflect.TypeOf(v)] == nil {
			return zero, fmt.Errorf("aggregate: read a %T, not a registered type (registered: %s)", v, strings.Join(ts.Names(), ", "))
		}
		return v, nil
	}
	return ts.DecodeJSON(b)
}

// DecodeJSON reads a value from its JSON envelope, upcasting it to the
// registered schema version, whatever the serde given to [Types.Use]: the
// envelope is also how a value comes in over HTTP.
func (ts *Types[T]) DecodeJSON(b []byte) (T, error) {
	var zero T
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return zero, fmt.Errorf("aggregate: not a type envelope ({\"type\":…,\"version\":…,\"data\":…}): %w", plainJSONError(err))
	}
	if env.Type == "" {
		return zero, errors.New(`aggregate: the envelope has no "type"`)
	}
	if env.Version == 0 {
		env.Version = 1
	}
	name, version, data := env.Type, env.Version, env.Data
	for {
		e := ts.byName[name]
		if e != nil && version == e.version {
			v, err := e.decode(data)
			if err != nil {
				return zero, fmt.Errorf("aggregate: decode %s (version %d): %w", name, version, err)
			}
			return v, nil
		}
		if e != nil && version > e.version {
			return zero, fmt.Errorf("aggregate: %s has schema version %d, newer than this program's %d", name, version, e.version)
		}
		up := ts.upcast[name][version]
		if up == nil {
			if e == nil && len(ts.upcast[name]) == 0 {
				return zero, fmt.Errorf("aggregate: unknown type %q (registered: %s)", name, strings.Join(ts.Names(), ", "))
			}
			return zero, fmt.Errorf("aggregate: no upcaster for %s from version %d", name, version)
		}
		next, out, err := up(data)
		if err != nil {
			return zero, fmt.Errorf("aggregate: upcast %s from version %d: %w", name, version, err)
		}
		if next == "" {
			next = name
		}
		name, version, data = next, version+1, out
	}
}
