// Package serde turns typed values into bytes and back at the edges of an
// Oxbow topology: source and sink topics, changelogs and state stores.
//
// Inside a topology values travel as Go values; a serde is needed only where
// they touch Kafka or a store. Every serde here is a small value that is safe
// for concurrent use.
//
// A Kafka record whose value is null is a tombstone. Tombstones never reach a
// serde: the engine maps a null value to a deleted key (or a tombstone record)
// itself. A serde therefore always sees real bytes, possibly empty ones, and
// must never return nil bytes for a real value (the engine would mistake them
// for a tombstone); the serdes here return empty, non-nil slices instead.
//
// Plugging in another format (Protobuf, Avro with a schema registry, …) means
// implementing [Serde] — two methods — or wrapping two functions with [Func].
//
//	s := serde.JSON[Order]()
//	b, _ := s.Encode(Order{ID: "o-1"})
//	o, _ := s.Decode(b)
package serde

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
)

// Serde encodes values of type T to bytes and decodes them back.
type Serde[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// ErrUnavailable marks an error that is not the record's fault: something
// the serde needs, such as a schema registry, cannot be reached. The engine
// never skips or dead-letters a record for it, whatever its error policies:
// the instance stops with the error, nothing after its last commit is
// committed, and the record is read again once it restarts. A serde wraps
// it (fmt.Errorf("...: %w", serde.ErrUnavailable)) only after retrying for a
// while itself.
var ErrUnavailable = errors.New("serde: unavailable")

// Func builds a Serde from two functions; either may be nil if the serde is
// used in one direction only (using the missing direction returns an error).
func Func[T any](encode func(T) ([]byte, error), decode func([]byte) (T, error)) Serde[T] {
	return funcSerde[T]{enc: encode, dec: decode}
}

type funcSerde[T any] struct {
	enc func(T) ([]byte, error)
	dec func([]byte) (T, error)
}

func (f funcSerde[T]) Encode(v T) ([]byte, error) {
	if f.enc == nil {
		return nil, fmt.Errorf("serde: no encoder for %s", typeName[T]())
	}
	b, err := f.enc(v)
	if err == nil && b == nil {
		b = []byte{}
	}
	return b, err
}

func (f funcSerde[T]) Decode(b []byte) (T, error) {
	if f.dec == nil {
		var zero T
		return zero, fmt.Errorf("serde: no decoder for %s", typeName[T]())
	}
	return f.dec(b)
}

// String is UTF-8 text, byte for byte (Kafka's StringSerializer).
var String Serde[string] = stringSerde{}

type stringSerde struct{}

func (stringSerde) Encode(v string) ([]byte, error) { return append([]byte{}, v...), nil }
func (stringSerde) Decode(b []byte) (string, error) { return string(b), nil }

// Bytes passes bytes through unchanged, without copying them, as Kafka's
// ByteArraySerializer does: a decoded value shares the record's bytes, and an
// encoded one is the value itself, so neither may be modified afterwards.
// (Copy a decoded value to change or keep it.)
var Bytes Serde[[]byte] = bytesSerde{}

type bytesSerde struct{}

func (bytesSerde) Encode(v []byte) ([]byte, error) {
	if v == nil {
		return []byte{}, nil // a value, not a tombstone
	}
	return v, nil
}

func (bytesSerde) Decode(b []byte) ([]byte, error) { return b, nil }

// Int64 is an 8-byte big-endian two's-complement integer, the format of
// Kafka's LongSerializer. Non-negative keys sort by value as bytes; negative
// ones sort after the positive ones.
var Int64 Serde[int64] = int64Serde{}

type int64Serde struct{}

func (int64Serde) Encode(v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(v)), nil
}

func (int64Serde) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, &SizeError{Type: "int64", Want: 8, Got: len(b)}
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// Float64 is an 8-byte big-endian IEEE 754 double, the format of Kafka's
// DoubleSerializer.
var Float64 Serde[float64] = float64Serde{}

type float64Serde struct{}

func (float64Serde) Encode(v float64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), math.Float64bits(v)), nil
}

func (float64Serde) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, &SizeError{Type: "float64", Want: 8, Got: len(b)}
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// JSON encodes values with encoding/json.
func JSON[T any]() Serde[T] { return jsonSerde[T]{} }

type jsonSerde[T any] struct{}

func (jsonSerde[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

func (jsonSerde[T]) Decode(b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("serde: json into %s: %w", typeName[T](), err)
	}
	return v, nil
}

// For returns the default serde of a type: String for string, Bytes for
// []byte, Int64 for int64, Float64 for float64, and JSON for anything else.
// The engine uses it when an operation produces a new key or value type and
// the program names no serde for it.
func For[T any]() Serde[T] {
	var zero T
	var s any
	switch any(zero).(type) {
	case string:
		s = String
	case []byte:
		s = Bytes
	case int64:
		s = Int64
	case float64:
		s = Float64
	default:
		return JSON[T]()
	}
	return s.(Serde[T])
}

// SizeError reports bytes of the wrong length for a fixed-size type.
type SizeError struct {
	Type      string
	Want, Got int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("serde: %s needs %d bytes, got %d", e.Type, e.Want, e.Got)
}

func typeName[T any]() string {
	return reflect.TypeFor[T]().String()
}

// Error is a failure to encode or decode a key or value. It says where the
// bytes came from or were going: a topic (with the partition and offset of an
// input record, -1 when unknown) or a store.
type Error struct {
	Topic     string
	Store     string
	Partition int32
	Offset    int64
	Part      string // "key" or "value"
	Encode    bool   // encoding a Go value, not decoding bytes
	Bytes     []byte // the bytes that failed to decode
	Err       error
}

func (e *Error) Error() string {
	where := "topic " + e.Topic
	if e.Store != "" {
		where = "store " + e.Store
	} else if e.Offset >= 0 {
		where = fmt.Sprintf("topic %s partition %d offset %d", e.Topic, e.Partition, e.Offset)
	}
	if e.Encode {
		return fmt.Sprintf("serde: encode %s for %s: %v", e.Part, where, e.Err)
	}
	b := e.Bytes
	more := ""
	if len(b) > 32 {
		b, more = b[:32], "…"
	}
	return fmt.Sprintf("serde: decode %s from %s (bytes %q%s): %v", e.Part, where, b, more, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
