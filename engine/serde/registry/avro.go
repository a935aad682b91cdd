package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// maxAvroBytes bounds a string or bytes in a record (hamba/avro's default
// is 1 MiB, which a Kafka record may exceed; Java's Avro has no bound), and
// maxAvroItems the items of an array or map, which hamba allocates before
// it reads them: a corrupt length or count fails past these instead of
// allocating more.
const (
	maxAvroBytes = 16 << 20
	maxAvroItems = 1 << 20
)

var (
	avroAPI     = avro.Config{MaxByteSliceSize: maxAvroBytes, MaxSliceAllocSize: maxAvroItems}.Freeze()
	avroReaders = sync.Pool{New: func() any { return avro.NewReader(nil, 0, avro.WithReaderConfig(avroAPI)) }}
)

// Avro is a serde of T in Avro (github.com/hamba/avro/v2: fields map to
// struct fields by their `avro` tags), for topic's values or, with [Key],
// keys. schema is T's schema: the reader's schema, and the writer's unless
// [UseLatest] says otherwise. Making the serde finds the writer schema's id
// (see the package doc), so it needs the registry, within ctx.
//
// Reading, a record written with another schema under the subject is read
// as T by Avro's schema resolution (a field the writer did not have takes
// its default, one the reader does not have is skipped), provided the
// writer's schema can be read as the reader's; otherwise the record fails
// with [ErrIncompatible]. References name the schemas of named types that
// schema uses without defining.
func Avro[T any](ctx context.Context, r *Registry, topic, schema string, opts ...Option) (serde.Serde[T], error) {
	return newAvro[T](ctx, r, topic, schema, makeOptions(opts))
}

func newAvro[T any](ctx context.Context, r *Registry, topic, schema string, o options) (*avroSerde[T], error) {
	reader, err := r.parseAvro(ctx, schema, o.references)
	if err != nil {
		return nil, fmt.Errorf("registry: the Avro schema: %w", err)
	}
	var name string
	if n, ok := reader.(avro.NamedSchema); ok {
		name = n.FullName()
	}
	subject, err := o.subjectFor(topic, name)
	if err != nil {
		return nil, err
	}
	id, written, err := r.resolveWriter(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro, References: o.references}, o)
	if err != nil {
		return nil, err
	}
	writer := reader
	if o.useLatest {
		if written.Type != sr.TypeAvro {
			return nil, fmt.Errorf("registry: subject %q's latest schema (id %d) is %s, not Avro", subject, id, written.Type)
		}
		if writer, err = r.parseAvro(ctx, written.Schema, written.References); err != nil {
			return nil, fmt.Errorf("registry: subject %q's latest schema (id %d): %w", subject, id, err)
		}
	}
	return &avroSerde[T]{r: r, id: id, name: name, header: appendHeader(nil, id), writer: writer, reader: reader}, nil
}

type avroSerde[T any] struct {
	r      *Registry
	id     int
	name   string // the schema's full name, if it has one
	header []byte
	writer avro.Schema
	reader avro.Schema

	// readers holds, by writer schema id, the schema to read its records
	// with (*avroReader).
	readers sync.Map
}

// avroReader is how records of one writer schema are read: the resolved
// schema, or why they cannot be.
type avroReader struct {
	schema avro.Schema
	err    error
}

func (s *avroSerde[T]) Encode(v T) ([]byte, error) {
	b, err := avroAPI.Marshal(s.writer, v)
	if err != nil {
		return nil, fmt.Errorf("registry: encoding %T with schema %d: %w", v, s.id, err)
	}
	return append(append(make([]byte, 0, headerLen+len(b)), s.header...), b...), nil
}

func (s *avroSerde[T]) Decode(b []byte) (T, error) {
	id, payload, err := splitHeader(b)
	if err != nil {
		var v T
		return v, err
	}
	return s.decodePayload(id, payload)
}

// decodePayload reads the payload of a record of writer schema id.
func (s *avroSerde[T]) decodePayload(id int, payload []byte) (T, error) {
	var v T
	rd, err := s.readerFor(id)
	if err != nil {
		return v, err
	}
	// Not avroAPI.Unmarshal: it takes a payload cut short for a whole one.
	// Bytes after the value are ignored, as Avro's Java reader does.
	r := avroReaders.Get().(*avro.Reader)
	r.Reset(payload)
	r.Error = nil // Reset keeps it
	r.ReadVal(rd, &v)
	err = r.Error
	r.Reset(nil)
	avroReaders.Put(r)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%d bytes end before the value does", len(payload))
	}
	if err != nil {
		return v, fmt.Errorf("%w %d: %w", ErrMalformed, id, err)
	}
	return v, nil
}

// readerFor is the schema that reads what writer schema id wrote as T.
func (s *avroSerde[T]) readerFor(id int) (avro.Schema, error) {
	if rd, ok := s.readers.Load(id); ok {
		rd := rd.(*avroReader)
		return rd.schema, rd.err
	}
	rd := &avroReader{}
	if id == s.id && s.writer == s.reader {
		rd.schema = s.reader
	} else {
		ws, err := s.r.schemaByID(id)
		if err != nil {
			if errors.Is(err, serde.ErrUnavailable) {
				return nil, err // not the record's fault, nor for good
			}
			rd.err = err
		} else {
			rd.schema, rd.err = s.r.resolveAvro(ws, id, s.reader)
		}
	}
	if rd.err == nil || s.r.cacheFailure(rd.err) {
		s.readers.Store(id, rd)
	}
	return rd.schema, rd.err
}

// resolveAvro is the schema reading records of writer schema ws (id) as
// the reader schema.
func (r *Registry) resolveAvro(ws sr.Schema, id int, reader avro.Schema) (avro.Schema, error) {
	if ws.Type != sr.TypeAvro {
		return nil, fmt.Errorf("%w: schema %d is %s, not Avro", ErrIncompatible, id, ws.Type)
	}
	writer, err := r.parseAvro(r.ctx, ws.Schema, ws.References)
	if errors.Is(err, serde.ErrUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: schema %d does not parse: %w", ErrIncompatible, id, err)
	}
	if writer.Fingerprint() == reader.Fingerprint() {
		return reader, nil
	}
	resolved, err := avro.NewSchemaCompatibility().Resolve(reader, writer)
	if err != nil {
		return nil, fmt.Errorf("%w: schema %d: %w", ErrIncompatible, id, err)
	}
	return resolved, nil
}

// parseAvro parses an Avro schema after the schemas it refers to, each
// fetched from the registry, all in a cache of its own: two versions of a
// named type never meet.
func (r *Registry) parseAvro(ctx context.Context, schema string, refs []sr.SchemaReference) (avro.Schema, error) {
	cache := &avro.SchemaCache{}
	err := r.eachReference(ctx, refs, func(_ sr.SchemaReference, ss sr.SubjectSchema) error {
		_, err := avro.ParseWithCache(ss.Schema.Schema, "", cache)
		return err
	})
	if err != nil {
		return nil, err
	}
	return avro.ParseWithCache(schema, "", cache)
}

func appendHeader(b []byte, id int) []byte {
	b, _ = wire.AppendEncode(b, id, nil) // never fails
	return b
}
