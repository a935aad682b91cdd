package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile/parser"
	"github.com/bufbuild/protocompile/reporter"
	"github.com/jhump/protoreflect/v2/protoprint"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Protobuf is a serde of the generated message type T (a pointer, such as
// *pb.Order) for topic's values or, with [Key], keys. Its schema is T's
// .proto file, printed from the descriptor compiled into the program; the
// files it imports are its references, each under the subject named by
// its import path (as Confluent's serializer names them), but for the
// well-known google/protobuf ones, which registries know. Making the serde
// finds the ids (see the package doc), within ctx.
//
// A record carries, after the schema id, the message's indexes in its
// file (Confluent's wire format; [0] is written as a single 0). Reading,
// a writer schema other than the serde's must name T's message at the
// record's indexes ([ErrIncompatible] otherwise); fields are matched by
// number, as Protobuf does, so evolved messages read as T.
func Protobuf[T proto.Message](ctx context.Context, r *Registry, topic string, opts ...Option) (serde.Serde[T], error) {
	o := makeOptions(opts)
	var zero T
	md := zero.ProtoReflect().Descriptor()
	refs, err := r.protoReferences(ctx, md.ParentFile(), o)
	if err != nil {
		return nil, err
	}
	text, err := printProto(md.ParentFile())
	if err != nil {
		return nil, err
	}
	subject, err := o.subjectFor(topic, string(md.FullName()))
	if err != nil {
		return nil, err
	}
	id, written, err := r.resolveWriter(ctx, subject, sr.Schema{Schema: text, Type: sr.TypeProtobuf, References: append(o.references, refs...)}, o)
	if err != nil {
		return nil, err
	}
	index := messageIndex(md)
	s := &protoSerde[T]{r: r, id: id, index: index, name: string(md.FullName()), newT: func() T { return zero.ProtoReflect().New().Interface().(T) }}
	s.header, _ = wire.AppendEncode(nil, id, index)
	if o.useLatest {
		if written.Type != sr.TypeProtobuf {
			return nil, fmt.Errorf("registry: subject %q's latest schema (id %d) is %s, not Protobuf", subject, id, written.Type)
		}
		if err := s.check(id, index, written); err != nil {
			return nil, fmt.Errorf("registry: subject %q's latest schema: %w", subject, err)
		}
	}
	return s, nil
}

type protoSerde[T proto.Message] struct {
	r      *Registry
	id     int
	index  []int
	name   string
	header []byte
	newT   func() T

	// files holds, by writer schema id, its parsed file (*protoFile).
	files sync.Map
}

// protoFile is a writer schema's messages by index, or why it has none.
type protoFile struct {
	fd  *descriptorpb.FileDescriptorProto
	err error
}

func (s *protoSerde[T]) Encode(v T) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend(append(make([]byte, 0, len(s.header)+proto.Size(v)), s.header...), v)
	if err != nil {
		return nil, fmt.Errorf("registry: encoding %s with schema %d: %w", s.name, s.id, err)
	}
	return b, nil
}

// maxIndexes bounds the message indexes a record may carry: a message
// nested that deep is not met in practice, and a corrupt count must not
// allocate.
const maxIndexes = 32

func (s *protoSerde[T]) Decode(b []byte) (T, error) {
	id, rest, err := splitHeader(b)
	if err != nil {
		return *new(T), err
	}
	index, payload, err := wire.DecodeIndex(rest, maxIndexes)
	if errors.Is(err, sr.ErrNotRegistered) { // what DecodeIndex says of too many
		err = fmt.Errorf("more than %d", maxIndexes)
	}
	if err != nil {
		return *new(T), fmt.Errorf("%w %d: the message indexes: %v", ErrMalformed, id, err)
	}
	if id != s.id || !slices.Equal(index, s.index) {
		ws, err := s.r.schemaByID(id)
		if err != nil {
			return *new(T), err
		}
		if err := s.check(id, index, ws); err != nil {
			return *new(T), err
		}
	}
	v := s.newT()
	if err := proto.Unmarshal(payload, v); err != nil {
		return v, fmt.Errorf("%w %d: %w", ErrMalformed, id, err)
	}
	return v, nil
}

// check says whether the message at index in writer schema ws (id) is
// the serde's.
func (s *protoSerde[T]) check(id int, index []int, ws sr.Schema) error {
	pf, ok := s.files.Load(id)
	if !ok {
		f := &protoFile{}
		if ws.Type != sr.TypeProtobuf {
			f.err = fmt.Errorf("%w: schema %d is %s, not Protobuf", ErrIncompatible, id, ws.Type)
		} else if f.fd, f.err = parseProto(ws.Schema); f.err != nil {
			f.err = fmt.Errorf("%w: schema %d does not parse: %w", ErrIncompatible, id, f.err)
		}
		pf = f
		if f.err == nil || s.r.cacheFailure(f.err) {
			pf, _ = s.files.LoadOrStore(id, f)
		}
	}
	f := pf.(*protoFile)
	if f.err != nil {
		return f.err
	}
	name, ok := messageAt(f.fd, index)
	if !ok {
		return fmt.Errorf("%w %d: no message at index %v", ErrMalformed, id, index)
	}
	if name != s.name {
		return fmt.Errorf("%w: schema %d's message at index %v is %s, not %s", ErrIncompatible, id, index, name, s.name)
	}
	return nil
}

// messageIndex is md's path in its file: its index among the file's
// messages, then among its parent's nested ones, and so on.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var path []int
	for d := protoreflect.Descriptor(md); ; {
		path = append(path, d.Index())
		p, ok := d.Parent().(protoreflect.MessageDescriptor)
		if !ok {
			break
		}
		d = p
	}
	slices.Reverse(path)
	return path
}

// messageAt is the full name of the message at index in fd.
func messageAt(fd *descriptorpb.FileDescriptorProto, index []int) (string, bool) {
	if len(index) == 0 {
		return "", false
	}
	name := fd.GetPackage()
	msgs := fd.GetMessageType()
	for _, i := range index {
		if i < 0 || i >= len(msgs) {
			return "", false
		}
		if name != "" {
			name += "."
		}
		name += msgs[i].GetName()
		msgs = msgs[i].GetNestedType()
	}
	return name, true
}

// parseProto parses a .proto file's text, without resolving its imports:
// enough to name its messages.
func parseProto(text string) (*descriptorpb.FileDescriptorProto, error) {
	h := reporter.NewHandler(nil)
	file, err := parser.Parse("schema.proto", strings.NewReader(text), h)
	if err != nil {
		return nil, err
	}
	res, err := parser.ResultFromAST(file, false, h)
	if err != nil {
		return nil, err
	}
	return res.FileDescriptorProto(), nil
}

func printProto(fd protoreflect.FileDescriptor) (string, error) {
	p := protoprint.Printer{}
	text, err := p.PrintProtoToString(fd)
	if err != nil {
		return "", fmt.Errorf("registry: printing %s: %w", fd.Path(), err)
	}
	return text, nil
}

// wellKnown says whether an import needs no reference: the files
// Confluent's serializer knows without one (its KNOWN_DEPENDENCIES: the
// well-known types, google/type and its own confluent/ files).
func wellKnown(path string) bool {
	for _, p := range []string{"google/protobuf/", "google/type/", "confluent/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// protoReferences registers (with AutoRegister) or looks up the files fd
// imports, theirs first, each under its import path, and returns fd's
// references to them.
func (r *Registry) protoReferences(ctx context.Context, fd protoreflect.FileDescriptor, o options) ([]sr.SchemaReference, error) {
	var refs []sr.SchemaReference
	imports := fd.Imports()
	for i := range imports.Len() {
		dep := imports.Get(i).FileDescriptor
		path := dep.Path()
		if wellKnown(path) {
			continue
		}
		depRefs, err := r.protoReferences(ctx, dep, o)
		if err != nil {
			return nil, err
		}
		text, err := printProto(dep)
		if err != nil {
			return nil, err
		}
		s := sr.Schema{Schema: text, Type: sr.TypeProtobuf, References: depRefs}
		if o.autoRegister {
			if _, _, err := r.resolveWriter(ctx, path, s, options{autoRegister: true}); err != nil {
				return nil, fmt.Errorf("registry: the import %q: %w", path, err)
			}
		}
		var ss sr.SubjectSchema
		err = r.call(ctx, fmt.Sprintf("looking up the import %q", path), func(ctx context.Context) (err error) {
			ss, err = r.cl.LookupSchema(ctx, path, s)
			return err
		})
		if notFound(err) {
			return nil, fmt.Errorf("%w: the import %q is not registered under its path (register it, or make the serde with AutoRegister): %w", ErrNotRegistered, path, err)
		}
		if err != nil {
			return nil, err
		}
		refs = append(refs, sr.SchemaReference{Name: path, Subject: path, Version: ss.Version})
	}
	return refs, nil
}
