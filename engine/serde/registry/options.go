package registry

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
)

// SubjectStrategy names the subject a serde's schema is registered under,
// from the topic, whether the serde is for keys, and the full name of the
// schema's record (Avro), message (Protobuf) or title (JSON Schema).
type SubjectStrategy func(topic string, key bool, record string) string

// The subject name strategies of Confluent's serializers.
var (
	// TopicName: "<topic>-key" or "<topic>-value", the default.
	TopicName SubjectStrategy = func(topic string, key bool, _ string) string {
		if key {
			return topic + "-key"
		}
		return topic + "-value"
	}
	// RecordName: the record's full name, whatever the topic.
	RecordName SubjectStrategy = func(_ string, _ bool, record string) string { return record }
	// TopicRecordName: "<topic>-<record's full name>".
	TopicRecordName SubjectStrategy = func(topic string, _ bool, record string) string { return topic + "-" + record }
)

// An Option changes how a serde finds its schema.
type Option func(*options)

type options struct {
	key          bool
	subject      SubjectStrategy
	autoRegister bool
	useLatest    bool
	validate     bool
	references   []sr.SchemaReference
}

func makeOptions(opts []Option) options {
	o := options{subject: TopicName}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// subjectFor is the subject of a serde of topic whose schema's record (or
// message, or title) is record, "" for none.
func (o options) subjectFor(topic, record string) (string, error) {
	s := o.subject(topic, o.key, record)
	if s == "" || record == "" && strings.HasSuffix(s, "-") {
		return "", fmt.Errorf("registry: topic %q: the subject strategy needs a named schema (an Avro record, enum or fixed; a JSON Schema title)", topic)
	}
	return s, nil
}

// Key makes a serde of keys (subject "<topic>-key" under TopicName).
func Key() Option { return func(o *options) { o.key = true } }

// Subject sets the subject name strategy (default TopicName).
func Subject(s SubjectStrategy) Option { return func(o *options) { o.subject = s } }

// AutoRegister registers the serde's schema under its subject when the
// serde is made, if it is not there yet (Confluent's auto.register.schemas;
// off by default, so that a service never changes a subject by accident).
// The registry refuses a schema its compatibility rule does not allow.
func AutoRegister() Option { return func(o *options) { o.autoRegister = true } }

// UseLatest writes with the subject's latest version, whatever the serde's
// own schema (Confluent's use.latest.version), found when the serde is made:
// the version a team pinned by registering it. The serde's type must be
// writable with that schema.
func UseLatest() Option { return func(o *options) { o.useLatest = true } }

// References are the schemas the serde's schema refers to (Avro named types
// defined elsewhere, Protobuf imports), each registered under a subject of
// its own. Reading, a writer schema's references come from the registry.
func References(refs ...sr.SchemaReference) Option {
	return func(o *options) { o.references = append(o.references, refs...) }
}

// The header is Confluent's: the magic byte 0 and the schema id,
// big-endian; for Protobuf, then the message's indexes (sr.ConfluentHeader
// writes them).
const headerLen = 5

var wire sr.ConfluentHeader

// splitHeader reads the schema id off a record in the wire format.
func splitHeader(b []byte) (int, []byte, error) {
	if len(b) < headerLen {
		return 0, nil, fmt.Errorf("%w: %d bytes, shorter than the 5-byte header", ErrNotWireFormat, len(b))
	}
	if b[0] != 0 {
		return 0, nil, fmt.Errorf("%w: first byte %#02x, not the magic byte 0", ErrNotWireFormat, b[0])
	}
	return int(binary.BigEndian.Uint32(b[1:headerLen])), b[headerLen:], nil
}
