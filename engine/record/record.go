// Package record holds what the engine shares with its users about the
// records it processes: their headers, the names of the headers the engine
// writes, and the errors a record can raise on its way through a topology.
//
// Package engine re-exports everything here (engine.Header is
// record.Header); the package exists so that the engine's internals and
// its users handle the same types, with nothing converted on the way. It
// imports nothing of the engine.
//
// A reader of a dead-letter topic finds why and where a record failed in
// its headers:
//
//	for _, h := range rec.Headers {
//		if h.Key == record.HeaderStage {
//			stage = string(h.Value) // "decode", "process", …
//		}
//	}
package record

import "fmt"

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Headers of a record on the dead-letter topic (Config.DeadLetterTopic),
// added after the headers the record had. Values are UTF-8 text.
const (
	HeaderError     = "oxbow.error"     // the error's text
	HeaderTopic     = "oxbow.topic"     // the topic the record was read from
	HeaderPartition = "oxbow.partition" // its partition, in decimal
	HeaderOffset    = "oxbow.offset"    // its offset, in decimal
	// HeaderStage is where it failed: "decode" (its key, value or
	// timestamp), "process" (a processor), "produce" (what it caused could
	// not be written) or "late" (too late for every window it belongs to).
	HeaderStage = "oxbow.stage"
)

// PositionHeader marks the position markers the engine writes to its
// repartition topics: records with no key and no value whose header value
// says which input positions the writer's records reflect. They never
// reach a processor; a reader of a repartition topic skips them.
const PositionHeader = "oxbow-position"

// TimestampError is a record whose event time is invalid: negative, or
// refused by the source's timestamp function. It follows the
// deserialization error policy, like a record that cannot be decoded.
type TimestampError struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp int64 // the invalid timestamp, Unix ms; 0 when the function failed
	Err       error // why: the function's error, or the negative timestamp
}

func (e *TimestampError) Error() string {
	return fmt.Sprintf("engine: invalid timestamp of the record at topic %s partition %d offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *TimestampError) Unwrap() error { return e.Err }

// PanicError is a panic in user code (a processor, a punctuator, a serde,
// a hook), recovered by the engine. Recovered while a record was
// processed, it follows the processing error policy like any error the
// record caused: skipped, dead-lettered (the panic's value in
// HeaderError) or stopping the instance; the goroutine that ran it
// carries on with the next record. Elsewhere it stops the instance.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap gives the panic's value if it is an error (panic(err)).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
