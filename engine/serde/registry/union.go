package registry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// A Member is one concrete type of a sum type T with its Avro schema, for
// [AvroUnion].
type Member[T any] struct {
	goType reflect.Type
	schema string
	make   func(ctx context.Context, r *Registry, topic string, o options) (member[T], error)
}

// AvroMember is the concrete type V of T (a struct that implements the
// interface T) with its Avro schema, a named record.
func AvroMember[V, T any](schema string) Member[T] {
	return Member[T]{goType: reflect.TypeFor[V](), schema: schema, make: func(ctx context.Context, r *Registry, topic string, o options) (member[T], error) {
		var zero V
		if _, ok := any(zero).(T); !ok {
			return nil, fmt.Errorf("registry: %v cannot be used as %v", reflect.TypeFor[V](), reflect.TypeFor[T]())
		}
		s, err := newAvro[V](ctx, r, topic, schema, o)
		if err != nil {
			return nil, err
		}
		if s.name == "" {
			return nil, fmt.Errorf("registry: the schema of %v is not a named record", reflect.TypeFor[V]())
		}
		return avroMember[V, T]{s}, nil
	}}
}

// member is a Member made for a topic.
type member[T any] interface {
	encode(T) ([]byte, error)
	decodePayload(id int, payload []byte) (T, error)
	fullName() string
}

type avroMember[V, T any] struct{ s *avroSerde[V] }

func (m avroMember[V, T]) encode(v T) ([]byte, error) { return m.s.Encode(any(v).(V)) }
func (m avroMember[V, T]) fullName() string           { return m.s.name }
func (m avroMember[V, T]) decodePayload(id int, payload []byte) (T, error) {
	v, err := m.s.decodePayload(id, payload)
	if err != nil {
		var zero T
		return zero, err
	}
	return any(v).(T), nil
}

// AvroUnion is a serde of the sum type T (an interface: events, commands)
// whose concrete types each have an Avro record schema of their own, in
// one topic: Confluent's way of keeping several event types in a topic,
// each registered under its own subject, "<topic>-<record's full name>"
// ([TopicRecordName], the default here; [Subject] changes it). Writing, a
// value's Go type picks its schema; reading, the writer schema's record
// name picks the type, and Avro's resolution reads an older or newer
// version of it (a record whose name is not a member's fails with
// [ErrIncompatible]).
func AvroUnion[T any](ctx context.Context, r *Registry, topic string, members []Member[T], opts ...Option) (serde.Serde[T], error) {
	o := makeOptions(append([]Option{Subject(TopicRecordName)}, opts...))
	u := &union[T]{r: r, byType: map[reflect.Type]member[T]{}, byName: map[string]member[T]{}}
	var errs []error
	for _, m := range members {
		if u.byType[m.goType] != nil {
			errs = append(errs, fmt.Errorf("registry: %v is a member twice", m.goType))
			continue
		}
		mm, err := m.make(ctx, r, topic, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if u.byName[mm.fullName()] != nil {
			errs = append(errs, fmt.Errorf("registry: two members' schemas are named %s", mm.fullName()))
			continue
		}
		u.byType[m.goType], u.byName[mm.fullName()] = mm, mm
	}
	if len(members) == 0 {
		errs = append(errs, errors.New("registry: a union needs members"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return u, nil
}

type union[T any] struct {
	r      *Registry
	byType map[reflect.Type]member[T]
	byName map[string]member[T]

	// names holds, by writer schema id, its record's full name (string) or
	// why it has none (error).
	names sync.Map
}

func (u *union[T]) Encode(v T) ([]byte, error) {
	m := u.byType[reflect.TypeOf(v)]
	if m == nil {
		return nil, fmt.Errorf("registry: %T is not a member of the union (members: %s)", v, u.members())
	}
	return m.encode(v)
}

func (u *union[T]) Decode(b []byte) (T, error) {
	var zero T
	id, payload, err := splitHeader(b)
	if err != nil {
		return zero, err
	}
	name, err := u.nameOf(id)
	if err != nil {
		return zero, err
	}
	m := u.byName[name]
	if m == nil {
		return zero, fmt.Errorf("%w: schema %d is %s, not a member of the union (members: %s)", ErrIncompatible, id, name, u.members())
	}
	return m.decodePayload(id, payload)
}

// nameOf is the full name of writer schema id's record.
func (u *union[T]) nameOf(id int) (string, error) {
	if n, ok := u.names.Load(id); ok {
		if err, ok := n.(error); ok {
			return "", err
		}
		return n.(string), nil
	}
	ws, err := u.r.schemaByID(id)
	if errors.Is(err, serde.ErrUnavailable) {
		return "", err
	}
	var name any = err
	if err == nil && ws.Type != sr.TypeAvro {
		name = fmt.Errorf("%w: schema %d is %s, not Avro", ErrIncompatible, id, ws.Type)
	} else if err == nil {
		var s avro.Schema
		s, err = u.r.parseAvro(u.r.ctx, ws.Schema, ws.References)
		switch {
		case errors.Is(err, serde.ErrUnavailable):
			return "", err
		case err != nil:
			name = fmt.Errorf("%w: schema %d does not parse: %w", ErrIncompatible, id, err)
		default:
			if n, ok := s.(avro.NamedSchema); ok {
				name = n.FullName()
			} else {
				name = fmt.Errorf("%w: schema %d is not a named record", ErrIncompatible, id)
			}
		}
	}
	n := name
	if err, failed := name.(error); !failed || u.r.cacheFailure(err) {
		n, _ = u.names.LoadOrStore(id, name)
	}
	if err, ok := n.(error); ok {
		return "", err
	}
	return n.(string), nil
}

func (u *union[T]) members() string {
	var names []string
	for n := range u.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
