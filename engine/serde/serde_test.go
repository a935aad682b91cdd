package serde_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

func roundTrip[T any](t *testing.T, s serde.Serde[T], v T) T {
	t.Helper()
	b, err := s.Encode(v)
	if err != nil {
		t.Fatalf("Encode(%v): %v", v, err)
	}
	if b == nil {
		t.Fatalf("Encode(%v) returned nil bytes, which the engine would take for a tombstone", v)
	}
	got, err := s.Decode(b)
	if err != nil {
		t.Fatalf("Decode(%x): %v", b, err)
	}
	return got
}

func TestString(t *testing.T) {
	for _, v := range []string{"", "a", "héllo, 世界", "\x00\xff not utf-8 \xc3", strings.Repeat("x", 1<<16)} {
		if got := roundTrip(t, serde.String, v); got != v {
			t.Errorf("round trip of %q = %q", v, got)
		}
		b, _ := serde.String.Encode(v)
		if !bytes.Equal(b, []byte(v)) {
			t.Errorf("String encodes %q as %q, want the bytes themselves", v, b)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, v := range [][]byte{{}, {0}, {1, 2, 3}, bytes.Repeat([]byte{0xff}, 1000)} {
		if got := roundTrip(t, serde.Bytes, v); !bytes.Equal(got, v) {
			t.Errorf("round trip of %x = %x", v, got)
		}
	}
	// Like Kafka's ByteArraySerializer, Encode and Decode do not copy: both
	// results share the input's bytes (which is why neither may be changed).
	in := []byte("abc")
	enc, _ := serde.Bytes.Encode(in)
	dec, _ := serde.Bytes.Decode(in)
	in[0] = 'X'
	if string(enc) != "Xbc" || string(dec) != "Xbc" {
		t.Errorf("results are copies: encoded %q, decoded %q", enc, dec)
	}
	// A nil value encodes as empty bytes, never as nil (a tombstone).
	if b, _ := serde.Bytes.Encode(nil); b == nil || len(b) != 0 {
		t.Errorf("Encode(nil) = %#v, want empty non-nil bytes", b)
	}
}

func TestInt64(t *testing.T) {
	tests := []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0, 0, 0, 0, 0, 0, 0, 0}},
		{1, []byte{0, 0, 0, 0, 0, 0, 0, 1}},
		{-1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{256, []byte{0, 0, 0, 0, 0, 0, 1, 0}},
		{math.MaxInt64, []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{math.MinInt64, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
		{-42, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xd6}},
	}
	for _, tt := range tests {
		b, err := serde.Int64.Encode(tt.v)
		if err != nil || !bytes.Equal(b, tt.want) {
			t.Errorf("Encode(%d) = %x, %v; want %x (Kafka's LongSerializer)", tt.v, b, err, tt.want)
		}
		if got := roundTrip(t, serde.Int64, tt.v); got != tt.v {
			t.Errorf("round trip of %d = %d", tt.v, got)
		}
	}
}

func TestFloat64(t *testing.T) {
	negZero := math.Copysign(0, -1)
	for _, v := range []float64{0, negZero, 1.5, -1.5, math.Pi, -math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1)} {
		got := roundTrip(t, serde.Float64, v)
		if math.Float64bits(got) != math.Float64bits(v) {
			t.Errorf("round trip of %v = %v (bits %x, want %x)", v, got, math.Float64bits(got), math.Float64bits(v))
		}
	}
	// NaNs keep their exact bits, payload and sign included.
	for _, bits := range []uint64{0x7ff8000000000000, 0x7ff8000000000001, 0xfff8000000000000, 0x7ff0000000000001} {
		got := roundTrip(t, serde.Float64, math.Float64frombits(bits))
		if math.Float64bits(got) != bits {
			t.Errorf("NaN %x came back as %x", bits, math.Float64bits(got))
		}
	}
	b, _ := serde.Float64.Encode(1)
	if want := []byte{0x3f, 0xf0, 0, 0, 0, 0, 0, 0}; !bytes.Equal(b, want) {
		t.Errorf("Encode(1) = %x, want %x (Kafka's DoubleSerializer)", b, want)
	}
}

type order struct {
	ID    string            `json:"id"`
	Items []string          `json:"items,omitempty"`
	Total float64           `json:"total"`
	Tags  map[string]string `json:"tags,omitempty"`
	Next  *order            `json:"next,omitempty"`
}

func TestJSON(t *testing.T) {
	o := order{ID: "o-1", Items: []string{"shoe", "lace"}, Total: 9.5, Tags: map[string]string{"a": "b"}, Next: &order{ID: "o-2"}}
	if got := roundTrip(t, serde.JSON[order](), o); !reflect.DeepEqual(got, o) {
		t.Errorf("round trip of %+v = %+v", o, got)
	}
	b, _ := serde.JSON[order]().Encode(order{ID: "x"})
	if string(b) != `{"id":"x","total":0}` {
		t.Errorf("Encode = %s", b)
	}
	if got := roundTrip(t, serde.JSON[[]int](), []int{}); got == nil || len(got) != 0 {
		t.Errorf("round trip of an empty slice = %#v", got)
	}
	if got := roundTrip(t, serde.JSON[map[string]int](), map[string]int{"a": 1}); got["a"] != 1 {
		t.Errorf("round trip of a map = %v", got)
	}
	if got := roundTrip(t, serde.JSON[int](), -3); got != -3 {
		t.Errorf("round trip of an int = %d", got)
	}

	// A decode error names the type and wraps encoding/json's error.
	_, err := serde.JSON[order]().Decode([]byte("{not json"))
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		t.Errorf("Decode error %v does not wrap a *json.SyntaxError", err)
	}
	if err == nil || !strings.Contains(err.Error(), "serde_test.order") {
		t.Errorf("Decode error %v does not name the type", err)
	}
	_, err = serde.JSON[order]().Decode([]byte(`{"id": 5}`))
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) {
		t.Errorf("Decode of a wrong field type = %v, want a *json.UnmarshalTypeError", err)
	}
	// Empty bytes are not JSON.
	if _, err := serde.JSON[order]().Decode([]byte{}); err == nil {
		t.Error("Decode of empty bytes succeeded")
	}
	// Values encoding/json cannot encode are an error, not a panic.
	if _, err := serde.JSON[chan int]().Encode(make(chan int)); err == nil {
		t.Error("Encode of a channel succeeded")
	}
	if _, err := serde.JSON[float64]().Encode(math.NaN()); err == nil {
		t.Error("JSON Encode of NaN succeeded")
	}
}

func TestFor(t *testing.T) {
	type named string
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"string", serde.For[string](), serde.String},
		{"[]byte", serde.For[[]byte](), serde.Bytes},
		{"int64", serde.For[int64](), serde.Int64},
		{"float64", serde.For[float64](), serde.Float64},
		{"struct", serde.For[order](), serde.JSON[order]()},
		{"pointer", serde.For[*order](), serde.JSON[*order]()},
		// Only the four exact types have binary serdes: the other numbers,
		// and named string types, are JSON.
		{"int", serde.For[int](), serde.JSON[int]()},
		{"int32", serde.For[int32](), serde.JSON[int32]()},
		{"float32", serde.For[float32](), serde.JSON[float32]()},
		{"named string", serde.For[named](), serde.JSON[named]()},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("For[%s]() is a %T, want %T", tt.name, tt.got, tt.want)
		}
	}
	// The pick shows in the bytes.
	b, _ := serde.For[int64]().Encode(1)
	if len(b) != 8 {
		t.Errorf("For[int64] encodes 1 in %d bytes", len(b))
	}
	b, _ = serde.For[int]().Encode(1)
	if string(b) != "1" {
		t.Errorf("For[int] encodes 1 as %q, want JSON", b)
	}
}

func TestSizeError(t *testing.T) {
	tests := []struct {
		name   string
		decode func([]byte) error
		typ    string
	}{
		{"Int64", func(b []byte) error { _, err := serde.Int64.Decode(b); return err }, "int64"},
		{"Float64", func(b []byte) error { _, err := serde.Float64.Decode(b); return err }, "float64"},
	}
	for _, tt := range tests {
		for _, n := range []int{0, 1, 7, 9, 16} {
			b := make([]byte, n)
			if n == 0 {
				b = nil
			}
			err := tt.decode(b)
			var se *serde.SizeError
			if !errors.As(err, &se) {
				t.Errorf("%s.Decode(%d bytes) = %v, want a *serde.SizeError", tt.name, n, err)
				continue
			}
			if se.Type != tt.typ || se.Want != 8 || se.Got != n {
				t.Errorf("%s.Decode(%d bytes): %+v", tt.name, n, *se)
			}
			if want := fmt.Sprintf("serde: %s needs 8 bytes, got %d", tt.typ, n); err.Error() != want {
				t.Errorf("message %q, want %q", err, want)
			}
		}
	}
}

// A serde never returns nil bytes for a value: nil is a tombstone.
func TestEmptyValuesEncodeToNonNil(t *testing.T) {
	check := func(name string, b []byte, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if b == nil {
			t.Errorf("%s returned nil bytes", name)
		}
	}
	b, err := serde.String.Encode("")
	check(`String.Encode("")`, b, err)
	b, err = serde.Bytes.Encode(nil)
	check("Bytes.Encode(nil)", b, err)
	b, err = serde.Bytes.Encode([]byte{})
	check("Bytes.Encode([]byte{})", b, err)
	b, err = serde.Func(func(string) ([]byte, error) { return nil, nil }, nil).Encode("x")
	check("Func with an encoder returning nil", b, err)
	d, err := serde.Bytes.Decode([]byte{})
	check("Bytes.Decode([]byte{})", d, err)
}

func TestFunc(t *testing.T) {
	upper := serde.Func(
		func(s string) ([]byte, error) { return []byte(strings.ToUpper(s)), nil },
		func(b []byte) (string, error) { return strings.ToLower(string(b)), nil },
	)
	b, _ := upper.Encode("abc")
	if string(b) != "ABC" {
		t.Errorf("Encode = %q", b)
	}
	if got := roundTrip(t, upper, "abc"); got != "abc" {
		t.Errorf("round trip = %q", got)
	}
	encOnly := serde.Func(func(int) ([]byte, error) { return []byte{1}, nil }, nil)
	if _, err := encOnly.Decode([]byte{1}); err == nil || !strings.Contains(err.Error(), "no decoder for int") {
		t.Errorf("Decode without a decoder = %v", err)
	}
	decOnly := serde.Func(nil, func([]byte) (int, error) { return 1, nil })
	if _, err := decOnly.Encode(1); err == nil || !strings.Contains(err.Error(), "no encoder for int") {
		t.Errorf("Encode without an encoder = %v", err)
	}
}

func TestError(t *testing.T) {
	inner := &serde.SizeError{Type: "int64", Want: 8, Got: 3}
	long := bytes.Repeat([]byte("a"), 40)
	tests := []struct {
		name string
		err  *serde.Error
		want string
	}{
		{
			"decode from an input record",
			&serde.Error{Topic: "orders", Partition: 2, Offset: 17, Part: "key", Bytes: []byte{1, 2, 3}, Err: inner},
			`serde: decode key from topic orders partition 2 offset 17 (bytes "\x01\x02\x03"): serde: int64 needs 8 bytes, got 3`,
		},
		{
			"decode without an offset",
			&serde.Error{Topic: "orders", Partition: -1, Offset: -1, Part: "value", Bytes: []byte("x"), Err: inner},
			`serde: decode value from topic orders (bytes "x"): serde: int64 needs 8 bytes, got 3`,
		},
		{
			"decode from a store",
			&serde.Error{Store: "counts", Partition: -1, Offset: -1, Part: "value", Bytes: []byte("abc"), Err: inner},
			`serde: decode value from store counts (bytes "abc"): serde: int64 needs 8 bytes, got 3`,
		},
		{
			"encode to a topic",
			&serde.Error{Topic: "out", Partition: -1, Offset: -1, Part: "value", Encode: true, Err: inner},
			`serde: encode value for topic out: serde: int64 needs 8 bytes, got 3`,
		},
		{
			"encode to a store",
			&serde.Error{Store: "counts", Partition: -1, Offset: -1, Part: "key", Encode: true, Err: inner},
			`serde: encode key for store counts: serde: int64 needs 8 bytes, got 3`,
		},
		{
			"long bytes are cut at 32",
			&serde.Error{Topic: "t", Offset: 0, Part: "value", Bytes: long, Err: inner},
			`serde: decode value from topic t partition 0 offset 0 (bytes "` + strings.Repeat("a", 32) + `"…): serde: int64 needs 8 bytes, got 3`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() =\n%s\nwant\n%s", got, tt.want)
			}
			var wrapped error = fmt.Errorf("context: %w", tt.err)
			var se *serde.SizeError
			if !errors.As(wrapped, &se) || se != inner {
				t.Error("errors.As does not find the inner *serde.SizeError")
			}
			if !errors.Is(wrapped, inner) {
				t.Error("errors.Is does not find the inner error")
			}
			var e *serde.Error
			if !errors.As(wrapped, &e) || e != tt.err {
				t.Error("errors.As does not find the *serde.Error")
			}
		})
	}
}

// Shoe is the value of the example.
type Shoe struct {
	Model string  `json:"model"`
	Size  float64 `json:"size"`
}

func Example() {
	// A serde per type at the edges of a topology.
	b, _ := serde.JSON[Shoe]().Encode(Shoe{Model: "runner", Size: 42.5})
	fmt.Printf("%s\n", b)
	s, _ := serde.JSON[Shoe]().Decode(b)
	fmt.Println(s.Model, s.Size)

	// Int64 is Kafka's LongSerializer format: 8 bytes, big-endian.
	n, _ := serde.Int64.Encode(-2)
	fmt.Printf("% x\n", n)

	// serde.For picks the default for a type.
	c, _ := serde.For[string]().Encode("héllo")
	fmt.Println(len(c))

	// Bytes of the wrong size say where they came from when the engine
	// wraps the error.
	_, err := serde.Int64.Decode([]byte{1, 2, 3})
	err = &serde.Error{Topic: "orders", Partition: 0, Offset: 7, Part: "value", Bytes: []byte{1, 2, 3}, Err: err}
	fmt.Println(err)
	var size *serde.SizeError
	fmt.Println(errors.As(err, &size), size.Got)
	// Output:
	// {"model":"runner","size":42.5}
	// runner 42.5
	// ff ff ff ff ff ff ff fe
	// 6
	// serde: decode value from topic orders partition 0 offset 7 (bytes "\x01\x02\x03"): serde: int64 needs 8 bytes, got 3
	// true 3
}
