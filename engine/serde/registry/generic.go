package registry

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/javajson"
)

// AvroToJSON reads a record in the wire format whatever its Avro schema,
// and writes it as JSON text the way Kafka Connect's JsonConverter writes
// the same value without its schema (as Debezium's change events are read
// from a JSON topic): records as objects with their fields in order, a
// union as its branch's value (null for null), bytes and fixed as base64
// strings, enums as their symbols, and logical types as their underlying
// Avro types (a decimal as the base64 of its unscaled bytes, dates and
// timestamps as numbers), non-finite doubles as "NaN", "Infinity" and
// "-Infinity", and numbers and strings byte for byte as the JsonConverter
// writes them (Java's Double.toString, Jackson's escapes). The writer's
// schema is fetched once per id.
func (r *Registry) AvroToJSON(b []byte) ([]byte, error) {
	id, payload, err := splitHeader(b)
	if err != nil {
		return nil, err
	}
	s, err := r.parsedAvro(id)
	if err != nil {
		return nil, err
	}
	rd := avroReaders.Get().(*avro.Reader)
	rd.Reset(payload)
	rd.Error = nil
	var out bytes.Buffer
	// Arrays and maps may hold no more items than the payload has bytes
	// (and a thousand more, for items of no bytes: nulls, empty records):
	// a corrupt count fails instead of looping or filling memory.
	budget := int64(len(payload)) + 1024
	writeJSON(&out, rd, s, &budget)
	err = rd.Error
	rd.Reset(nil)
	avroReaders.Put(rd)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%d bytes end before the value does", len(payload))
	}
	if err != nil {
		return nil, fmt.Errorf("%w %d: %w", ErrMalformed, id, err)
	}
	return out.Bytes(), nil
}

// parsedAvro is writer schema id, parsed, cached on the registry.
func (r *Registry) parsedAvro(id int) (avro.Schema, error) {
	if s, ok := r.parsed.Load(id); ok {
		if err, ok := s.(error); ok {
			return nil, err
		}
		return s.(avro.Schema), nil
	}
	ws, err := r.schemaByID(id)
	if errors.Is(err, serde.ErrUnavailable) {
		return nil, err
	}
	var v any = err
	if err == nil {
		if ws.Type != sr.TypeAvro {
			v = fmt.Errorf("%w: schema %d is %s, not Avro", ErrIncompatible, id, ws.Type)
		} else if s, err := r.parseAvro(r.ctx, ws.Schema, ws.References); errors.Is(err, serde.ErrUnavailable) {
			return nil, err
		} else if err != nil {
			v = fmt.Errorf("%w: schema %d does not parse: %w", ErrIncompatible, id, err)
		} else {
			v = s
		}
	}
	if err, failed := v.(error); !failed || r.cacheFailure(err) {
		v, _ = r.parsed.LoadOrStore(id, v)
	}
	if err, ok := v.(error); ok {
		return nil, err
	}
	return v.(avro.Schema), nil
}

// writeJSON writes the next value of schema s, read from rd, to out;
// budget is how many more array and map items the record may have.
func writeJSON(out *bytes.Buffer, rd *avro.Reader, s avro.Schema, budget *int64) {
	if rd.Error != nil {
		return
	}
	switch s.Type() {
	case avro.Null:
		out.WriteString("null")
	case avro.Boolean:
		out.WriteString(strconv.FormatBool(rd.ReadBool()))
	case avro.Int:
		out.WriteString(strconv.FormatInt(int64(rd.ReadInt()), 10))
	case avro.Long:
		out.WriteString(strconv.FormatInt(rd.ReadLong(), 10))
	case avro.Float:
		writeFloat(out, float64(rd.ReadFloat()), 32)
	case avro.Double:
		writeFloat(out, rd.ReadDouble(), 64)
	case avro.String:
		writeString(out, rd.ReadString())
	case avro.Bytes:
		writeBase64(out, rd.ReadBytes())
	case avro.Fixed:
		b := make([]byte, s.(*avro.FixedSchema).Size())
		rd.Read(b)
		writeBase64(out, b)
	case avro.Enum:
		symbols := s.(*avro.EnumSchema).Symbols()
		i := int(rd.ReadInt())
		if i < 0 || i >= len(symbols) {
			rd.ReportError("enum", fmt.Sprintf("symbol %d of %d", i, len(symbols)))
			return
		}
		writeString(out, symbols[i])
	case avro.Record:
		out.WriteByte('{')
		for i, f := range s.(*avro.RecordSchema).Fields() {
			if i > 0 {
				out.WriteByte(',')
			}
			writeString(out, f.Name())
			out.WriteByte(':')
			writeJSON(out, rd, f.Type(), budget)
		}
		out.WriteByte('}')
	case avro.Ref:
		writeJSON(out, rd, s.(*avro.RefSchema).Schema(), budget)
	case avro.Array:
		items := s.(*avro.ArraySchema).Items()
		out.WriteByte('[')
		eachItem(rd, budget, func(i int) {
			if i > 0 {
				out.WriteByte(',')
			}
			writeJSON(out, rd, items, budget)
		})
		out.WriteByte(']')
	case avro.Map:
		values := s.(*avro.MapSchema).Values()
		out.WriteByte('{')
		eachItem(rd, budget, func(i int) {
			if i > 0 {
				out.WriteByte(',')
			}
			writeString(out, rd.ReadString())
			out.WriteByte(':')
			writeJSON(out, rd, values, budget)
		})
		out.WriteByte('}')
	case avro.Union:
		types := s.(*avro.UnionSchema).Types()
		i := int(rd.ReadLong())
		if i < 0 || i >= len(types) {
			rd.ReportError("union", fmt.Sprintf("branch %d of %d", i, len(types)))
			return
		}
		writeUnion(out, rd, types, i, budget)
	default:
		rd.ReportError("value", fmt.Sprintf("unexpected schema type %s", s.Type()))
	}
}

// writeFloat writes f as Java's Double.toString (Float.toString for 32
// bits) does, as the JsonConverter does.
// eachItem calls fn for each item of an array or a map, block by block,
// until the end, an error or the budget runs out.
func eachItem(rd *avro.Reader, budget *int64, fn func(i int)) {
	i := 0
	for rd.Error == nil {
		n, _ := rd.ReadBlockHeader()
		if n == 0 || rd.Error != nil {
			return
		}
		if *budget -= n; n < 0 || *budget < 0 {
			rd.ReportError("items", fmt.Sprintf("a block of %d items, more than the record can hold", n))
			return
		}
		for range n {
			fn(i)
			i++
			if rd.Error != nil {
				return
			}
		}
	}
}

// writeUnion writes branch i of a union. An optional value (a union of
// null and one type) is the value or null; a union of several types
// becomes, as Kafka Connect's AvroData makes it, an object with a field
// per non-null branch, named by its type (a named type by its name), all
// null but the one read.
func writeUnion(out *bytes.Buffer, rd *avro.Reader, types []avro.Schema, i int, budget *int64) {
	var others int
	for _, t := range types {
		if t.Type() != avro.Null {
			others++
		}
	}
	if others <= 1 || types[i].Type() == avro.Null {
		writeJSON(out, rd, types[i], budget)
		return
	}
	out.WriteByte('{')
	n := 0
	for j, t := range types {
		if t.Type() == avro.Null {
			continue
		}
		if n > 0 {
			out.WriteByte(',')
		}
		n++
		writeString(out, branchName(t))
		out.WriteByte(':')
		if j == i {
			writeJSON(out, rd, t, budget)
		} else {
			out.WriteString("null")
		}
	}
	out.WriteByte('}')
}

// branchName is the field AvroData names a union branch by: a named
// type's name, else the type's ("string", "array", ...).
func branchName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.Name()
	}
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema().Name()
	}
	return string(s.Type())
}

func writeFloat(out *bytes.Buffer, f float64, bits int) {
	out.Write(javajson.AppendFloat(out.AvailableBuffer(), f, bits))
}

// writeString writes s escaped as Jackson escapes it; bytes that are not
// UTF-8 become U+FFFD each, as Java's decoding of the string makes them.
func writeString(out *bytes.Buffer, s string) {
	if !utf8.ValidString(s) {
		var b strings.Builder
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r) // utf8.RuneError for each bad byte
			i += n
		}
		s = b.String()
	}
	out.Write(javajson.AppendString(out.AvailableBuffer(), []byte(s)))
}

func writeBase64(out *bytes.Buffer, b []byte) {
	out.WriteByte('"')
	out.WriteString(base64.StdEncoding.EncodeToString(b))
	out.WriteByte('"')
}
