package aggregate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Status is how a command ended.
type Status string

// The statuses of an outcome.
const (
	// Accepted: Decide returned events (perhaps none); they are in the event
	// topic at the outcome's positions, and the aggregate is at Version.
	Accepted Status = "accepted"
	// Rejected: Decide returned an error (the Rejection); nothing changed.
	Rejected Status = "rejected"
	// Conflict: the command expected another version than the aggregate's
	// (Version); nothing changed.
	Conflict Status = "conflict"
)

// Outcome is what became of a command. It is recorded under the
// aggregate's and the command's id for Config.OutcomeRetention (of stream
// time): a command submitted again to the aggregate with that id gets the
// same outcome back, with Duplicate set, and changes nothing; the same id
// on another aggregate names another command.
type Outcome struct {
	CommandID   string `json:"commandId"`
	AggregateID string `json:"aggregateId"`
	Status      Status `json:"status"`
	// Version is the aggregate's version after the command: the number of
	// events it has. For a conflict, its version when the command came.
	Version int64 `json:"version"`
	// ExpectedVersion is what a conflicting command expected.
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
	// Events are where the accepted command's events are, in order: with
	// these a reader can wait until a view reflects them.
	Events    []Position `json:"events,omitempty"`
	Rejection *Rejection `json:"rejection,omitempty"`
	Duplicate bool       `json:"duplicate,omitempty"`
	// Request fingerprints the command the id was first used for: its
	// aggregate id, encoded command and expected version (Fingerprint).
	// A command submitted again with the id but another request is no
	// repeat: Client.Submit then fails with ErrCommandIDReused.
	Request string `json:"request,omitempty"`
}

// Fingerprint is an Outcome's Request: a hash of a command's aggregate
// id, its encoded envelope and the version it expects ("" if none).
func Fingerprint(aggregateID string, command []byte, expectedVersion string) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(aggregateID), command, []byte(expectedVersion)} {
		h.Write(binary.AppendUvarint(nil, uint64(len(part))))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ErrCommandIDReused wraps the error of a command submitted with the id
// of another: another aggregate, command or expected version. Nothing was
// done; the id's first outcome stands.
var ErrCommandIDReused = errors.New("aggregate: command id reused for another request")

// Position is a record's place in Kafka.
type Position struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Rejection is a domain error as data: what a rejected command's caller
// learns. Decide may return one (see [Reject]); any other error becomes one
// with the code "rejected" and the error's text.
type Rejection struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (r *Rejection) Error() string { return r.Code + ": " + r.Message }

// Reject makes a Rejection for Decide to return.
func Reject(code, format string, args ...any) error {
	return &Rejection{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Codes of the rejections the command processor makes itself.
const (
	CodeRejected         = "rejected"          // Decide returned an error that is not a *Rejection
	CodeMalformedCommand = "malformed-command" // the command could not be read
	CodeNoAggregateID    = "no-aggregate-id"   // the command record has no key
	CodePanicked         = "panicked"          // Decide or Evolve panicked
	CodeEncode           = "encode-error"      // an event or the state could not be written
)

func rejectionOf(err error) *Rejection {
	var r *Rejection
	if errors.As(err, &r) {
		return r
	}
	return &Rejection{Code: CodeRejected, Message: err.Error()}
}
