package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// JSONSchema is a serde of T as JSON (encoding/json) described by a JSON
// Schema, for topic's values or, with [Key], keys: the wire format's header,
// then the JSON text. schema is the JSON Schema document; its "title" is
// the record name of the RecordName strategies. Making the serde finds the
// schema's id (see the package doc), within ctx.
//
// As with Confluent's serdes (json.fail.invalid.schema), values are not
// validated unless [Validate] is given: then a value is checked against
// the serde's schema before it is written, and a record against its
// writer's schema before it is read ([ErrMalformed] when it does not
// conform). References name schemas that $ref points to by their names.
func JSONSchema[T any](ctx context.Context, r *Registry, topic, schema string, opts ...Option) (serde.Serde[T], error) {
	o := makeOptions(opts)
	var doc struct {
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(schema), &doc); err != nil {
		return nil, fmt.Errorf("registry: the JSON Schema is not JSON: %w", err)
	}
	subject, err := o.subjectFor(topic, doc.Title)
	if err != nil {
		return nil, err
	}
	s := &jsonSerde[T]{r: r, validate: o.validate}
	own := sr.Schema{Schema: schema, Type: sr.TypeJSON, References: o.references}
	if o.validate { // a schema that does not compile is refused before it is registered
		if s.writer, err = r.compileJSON(ctx, own); err != nil {
			return nil, fmt.Errorf("registry: the JSON Schema: %w", err)
		}
	}
	id, written, err := r.resolveWriter(ctx, subject, own, o)
	if err != nil {
		return nil, err
	}
	if written.Type != sr.TypeJSON {
		return nil, fmt.Errorf("registry: subject %q's schema %d is %s, not JSON", subject, id, written.Type)
	}
	if o.validate && o.useLatest {
		if s.writer, err = r.compileJSON(ctx, written); err != nil {
			return nil, fmt.Errorf("registry: subject %q's latest schema (id %d): %w", subject, id, err)
		}
	}
	s.id = id
	s.header = appendHeader(nil, id)
	if s.writer != nil {
		s.checks.Store(id, &jsonCheck{schema: s.writer})
	}
	return s, nil
}

// Validate checks values against their JSON Schemas, writing and reading.
func Validate() Option { return func(o *options) { o.validate = true } }

type jsonSerde[T any] struct {
	r        *Registry
	id       int
	header   []byte
	validate bool
	writer   *jsonschema.Schema

	// checks holds, by writer schema id, how its records are checked
	// (*jsonCheck).
	checks sync.Map
}

type jsonCheck struct {
	schema *jsonschema.Schema
	err    error
}

func (s *jsonSerde[T]) Encode(v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("registry: encoding %T: %w", v, err)
	}
	if s.validate {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err == nil {
			err = s.writer.Validate(doc)
		}
		if err != nil {
			return nil, fmt.Errorf("registry: %T does not conform to schema %d: %w", v, s.id, err)
		}
	}
	return append(append(make([]byte, 0, len(s.header)+len(b)), s.header...), b...), nil
}

func (s *jsonSerde[T]) Decode(b []byte) (T, error) {
	var v T
	id, payload, err := splitHeader(b)
	if err != nil {
		return v, err
	}
	if id != s.id || s.validate {
		if err := s.check(id, payload); err != nil {
			return v, err
		}
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		return v, fmt.Errorf("%w %d: %w", ErrMalformed, id, err)
	}
	return v, nil
}

// check says whether a record of writer schema id may be read: a JSON
// schema, and, validating, a payload that conforms to it.
func (s *jsonSerde[T]) check(id int, payload []byte) error {
	c, ok := s.checks.Load(id)
	if !ok {
		ws, err := s.r.schemaByID(id)
		if errors.Is(err, serde.ErrUnavailable) {
			return err
		}
		jc := &jsonCheck{err: err}
		switch {
		case err != nil:
		case ws.Type != sr.TypeJSON:
			jc.err = fmt.Errorf("%w: schema %d is %s, not JSON", ErrIncompatible, id, ws.Type)
		case s.validate:
			jc.schema, jc.err = s.r.compileJSON(s.r.ctx, ws)
			if errors.Is(jc.err, serde.ErrUnavailable) {
				return jc.err
			}
			if jc.err != nil {
				jc.err = fmt.Errorf("%w: schema %d does not compile: %w", ErrIncompatible, id, jc.err)
			}
		}
		c = jc
		if jc.err == nil || s.r.cacheFailure(jc.err) {
			c, _ = s.checks.LoadOrStore(id, jc)
		}
	}
	jc := c.(*jsonCheck)
	if jc.err != nil || jc.schema == nil {
		return jc.err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err == nil {
		err = jc.schema.Validate(doc)
	}
	if err != nil {
		return fmt.Errorf("%w %d: %w", ErrMalformed, id, err)
	}
	return nil
}

// compileJSON compiles a JSON Schema with the schemas its references name.
// A reference's name is what the schema's $ref says, resolved against the
// schema's $id or, without one, against a base of no network
// (jsonschemaBase): nothing is ever fetched but from the registry.
func (r *Registry) compileJSON(ctx context.Context, s sr.Schema) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(s.Schema)))
	if err != nil {
		return nil, err
	}
	base, _ := url.Parse(jsonschemaBase)
	if m, ok := doc.(map[string]any); ok {
		if id, ok := m["$id"].(string); ok {
			if u, err := url.Parse(id); err == nil && u.IsAbs() {
				base = u
			}
		}
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no files, no network: the references only
	c.DefaultDraft(jsonschema.Draft7)         // Confluent's, for a schema without "$schema"
	err = r.eachReference(ctx, s.References, func(ref sr.SchemaReference, ss sr.SubjectSchema) error {
		at, err := base.Parse(ref.Name)
		if err != nil {
			return err
		}
		rdoc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(ss.Schema.Schema)))
		if err == nil {
			err = c.AddResource(at.String(), rdoc)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := c.AddResource(base.String(), doc); err != nil {
		return nil, err
	}
	return c.Compile(base.String())
}

// jsonschemaBase is the base of a JSON Schema without an $id: a host that
// does not exist, so that a $ref the references do not name fails.
const jsonschemaBase = "https://schemas.oxbow.invalid/schema.json"
