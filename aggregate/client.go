package aggregate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"

	"github.com/oxbow-dev/oxbow/engine/kafkasec"
)

// ClientConfig configures a [Client].
type ClientConfig struct {
	Brokers []string
	// KafkaSecurity is how to reach secured brokers (TLS, SASL);
	// KafkaOptions are added to the Kafka clients' after it.
	KafkaSecurity kafkasec.Config
	KafkaOptions  []kgo.Opt
	// Timeout bounds how long Submit waits for an outcome when its context
	// has no earlier deadline (default: 30 seconds).
	Timeout time.Duration
	// Logger gets the errors of reading outcomes (default: discarded).
	Logger *slog.Logger
}

// Client submits commands to an aggregate from any instance (or any
// program) and waits for their outcomes, whichever instance owns the
// aggregate. It writes each command to the command topic, keyed by
// aggregate id, and reads the reply topic (every partition, from its end
// when the client started, read-committed) for the outcome with the
// command's id. Safe for concurrent use; Close it when done.
type Client[C any] struct {
	types                   *Types[C]
	name, commands, replies string
	prod, cons              *kgo.Client
	timeout                 time.Duration
	log                     *slog.Logger
	cancel                  context.CancelFunc
	done                    chan struct{}
	mu                      sync.Mutex
	waiters                 map[string][]chan Outcome
	closed                  bool
}

// ErrNoOutcome is the error of a Submit that got no outcome in time.
var ErrNoOutcome = errors.New("aggregate: no outcome")

// NewClient starts a client of the aggregate. The reply topic must exist.
func (a *Aggregate[S, C, E]) NewClient(ctx context.Context, cfg ClientConfig) (*Client[C], error) {
	return a.Contract().NewClient(ctx, cfg)
}

// NewClient starts a client of the contract's aggregate, from a service
// that does not run it. The reply topic must exist.
func (ct Contract[C, E]) NewClient(ctx context.Context, cfg ClientConfig) (*Client[C], error) {
	ct, err := ct.Check()
	if err != nil {
		return nil, err
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("aggregate: ClientConfig.Brokers is empty")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	base, err := cfg.KafkaSecurity.ClientOpts(cfg.Brokers, cfg.KafkaOptions...)
	if err != nil {
		return nil, fmt.Errorf("aggregate: ClientConfig.KafkaSecurity: %w", err)
	}
	// A command written twice is decided once (its outcome is recorded
	// under its id), so Submit's deadline may end a write Kafka has not
	// acknowledged: without this, franz-go keeps a record that may have
	// reached a broker until the broker answers, and a Submit to a broker
	// gone for good would never return.
	prod, err := kgo.NewClient(append(slices.Clone(base), kgo.ProducerLinger(0), kgo.AllowIdempotentProduceCancellation())...)
	if err != nil {
		return nil, fmt.Errorf("aggregate: a Kafka client: %w", err)
	}
	if err := kafkasec.Check(ctx, prod); err != nil {
		prod.Close()
		return nil, fmt.Errorf("aggregate %s: %w", ct.Name, err)
	}
	// Every outcome after this point is read: the client starts at the
	// reply topic's current end.
	ends, err := kadm.NewClient(prod).ListEndOffsets(ctx, ct.ReplyTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("aggregate %s: the end of the reply topic %s: %w (create the topics of Aggregate.Topics first)", ct.Name, ct.ReplyTopic, err)
	}
	parts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { parts[o.Partition] = kgo.NewOffset().At(o.Offset) })
	if len(parts) == 0 {
		prod.Close()
		return nil, fmt.Errorf("aggregate %s: the reply topic %s has no partitions (create the topics of Aggregate.Topics first)", ct.Name, ct.ReplyTopic)
	}
	cons, err := kgo.NewClient(append(base,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{ct.ReplyTopic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(time.Second))...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("aggregate: a Kafka client: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	c := &Client[C]{types: ct.Commands, name: ct.Name, commands: ct.CommandTopic, replies: ct.ReplyTopic, prod: prod, cons: cons,
		timeout: cfg.Timeout, log: cfg.Logger, cancel: cancel, done: make(chan struct{}), waiters: map[string][]chan Outcome{}}
	go c.read(rctx)
	return c, nil
}

// read hands each outcome to the Submits waiting for it, until Close.
func (c *Client[C]) read(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		fs := c.cons.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.log.Warn("aggregate: reading outcomes", "topic", topic, "partition", p, "err", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			var o Outcome
			if err := json.Unmarshal(r.Value, &o); err != nil {
				c.log.Warn("aggregate: an unreadable outcome", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			c.mu.Lock()
			ws := c.waiters[o.CommandID]
			delete(c.waiters, o.CommandID)
			c.mu.Unlock()
			for _, w := range ws {
				w <- o
			}
		})
	}
}

// SubmitOption sets a command's metadata.
type SubmitOption func(*submission)

type submission struct {
	id, correlation, causation string
	expected                   *int64
	requested                  []byte // RequestedAs
}

// CommandID sets the command's id, its idempotency key: a command
// submitted again with an id the aggregate has seen (within the outcome
// retention) is not run again; its first outcome comes back, marked
// Duplicate. Default: a random id. Ids are unique per aggregate.
func CommandID(id string) SubmitOption { return func(s *submission) { s.id = id } }

// ExpectedVersion makes the command a Conflict unless the aggregate is at
// version v (its number of events) when the command is decided.
func ExpectedVersion(v int64) SubmitOption { return func(s *submission) { s.expected = &v } }

// CorrelationID sets the correlation id the command's events carry
// (default: the command id).
func CorrelationID(id string) SubmitOption { return func(s *submission) { s.correlation = id } }

// RequestedAs says the command is derived from another, as its caller
// asked for it (a price filled in from a catalog, say, in the encoding of
// the command or its JSON envelope): the outcome records the request's
// fingerprint instead of the command's, so that the caller's retry with
// the same CommandID is a repeat (its first outcome back) even if the
// command derived again differs — the catalog's price changed meanwhile.
func RequestedAs(request []byte) SubmitOption {
	return func(s *submission) { s.requested = request }
}

// CausationID says what caused the command (an event id, a request id).
func CausationID(id string) SubmitOption { return func(s *submission) { s.causation = id } }

// Submission is a command's metadata, as the SubmitOptions set it.
type Submission struct {
	ID, CorrelationID, CausationID string
	ExpectedVersion                *int64
}

// SubmitOptions applies options (for tools that write commands themselves,
// such as aggregatetest).
func SubmitOptions(opts ...SubmitOption) Submission {
	var s submission
	for _, o := range opts {
		o(&s)
	}
	return Submission{ID: s.id, CorrelationID: s.correlation, CausationID: s.causation, ExpectedVersion: s.expected}
}

// DecodeOutcome reads an outcome from the reply topic.
func DecodeOutcome(b []byte) (Outcome, error) {
	var o Outcome
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("aggregate: an outcome: %w", err)
	}
	return o, nil
}

// NewCommandID returns a random command id.
func NewCommandID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Submit writes a command for the aggregate with the given id and waits for
// its outcome: Accepted (with the new version and the events' positions),
// Rejected (with the domain error) or Conflict. The error is for what is
// not an outcome: a command type that is not registered, the command not
// written to Kafka, or no outcome before the context's deadline or the
// client's Timeout (ErrNoOutcome: the aggregate's owner may be down; the
// command may still be decided later — submit it again with the same
// CommandID to learn its outcome without running it twice).
func (c *Client[C]) Submit(ctx context.Context, aggregateID string, cmd C, opts ...SubmitOption) (Outcome, error) {
	var s submission
	for _, o := range opts {
		o(&s)
	}
	if s.id == "" {
		s.id = NewCommandID()
	}
	if aggregateID == "" {
		return Outcome{}, errors.New("aggregate: Submit needs an aggregate id")
	}
	name, err := c.types.NameOf(cmd)
	if err != nil {
		return Outcome{}, err
	}
	value, err := c.types.Encode(cmd)
	if err != nil {
		return Outcome{}, err
	}
	rec := &kgo.Record{Topic: c.commands, Key: []byte(aggregateID), Value: value, Headers: []kgo.RecordHeader{
		{Key: HeaderType, Value: []byte(name)},
		{Key: HeaderCommandID, Value: []byte(s.id)},
	}}
	expected := ""
	if s.expected != nil {
		expected = strconv.FormatInt(*s.expected, 10)
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderExpectedVersion, Value: []byte(expected)})
	}
	request := Fingerprint(aggregateID, value, expected)
	if s.requested != nil {
		request = Fingerprint(aggregateID, s.requested, expected)
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderRequest, Value: []byte(request)})
	}
	if s.correlation != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderCorrelationID, Value: []byte(s.correlation)})
	}
	if s.causation != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderCausationID, Value: []byte(s.causation)})
	}
	propagation.TraceContext{}.Inject(ctx, recordCarrier{rec})

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	w := make(chan Outcome, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Outcome{}, errors.New("aggregate: the client is closed")
	}
	c.waiters[s.id] = append(c.waiters[s.id], w)
	c.mu.Unlock()
	defer c.forget(s.id, w)
	// The deadline ends the wait for Kafka's acknowledgement too: franz-go
	// notices a record's cancelled context only between its retries.
	written := make(chan error, 1)
	c.prod.Produce(ctx, rec, func(_ *kgo.Record, err error) { written <- err })
	notAcked := func(cause error) error {
		return fmt.Errorf("%w for command %s of aggregate %s: Kafka did not acknowledge it in %s: %w; it may still be written and decided: submit it again with the same CommandID to learn its outcome",
			ErrNoOutcome, s.id, c.name, c.commands, cause)
	}
	select {
	case err := <-written:
		switch {
		case err != nil && ctx.Err() != nil:
			// franz-go fails the record with the last error it met
			// (a broker's refused connection, say): a timeout, not a
			// failure of the command.
			return Outcome{}, notAcked(fmt.Errorf("%w (last error: %v)", context.Cause(ctx), err))
		case kafkaAway(err):
			// A record ahead of it on the partition timed out, and
			// franz-go failed the records behind it with the error
			// that kept it: Kafka's absence, not the command's fault.
			return Outcome{}, notAcked(err)
		case err != nil:
			return Outcome{}, fmt.Errorf("aggregate %s: write command %s to %s: %w", c.name, s.id, c.commands, err)
		}
	case <-ctx.Done():
		return Outcome{}, notAcked(context.Cause(ctx))
	}
	select {
	case o := <-w:
		if o.Request != "" && o.Request != request {
			return Outcome{}, fmt.Errorf("%w: command id %s of aggregate %s was first used for another request (of aggregate %q); its outcome stands, and this command was not run: give it an id of its own",
				ErrCommandIDReused, s.id, c.name, o.AggregateID)
		}
		return o, nil
	case <-c.done:
		return Outcome{}, fmt.Errorf("aggregate %s: the client was closed while command %s waited for its outcome", c.name, s.id)
	case <-ctx.Done():
		return Outcome{}, fmt.Errorf("%w for command %s of aggregate %s %q in %s[%d] at offset %d: %w; the instance that owns the partition may be down or restoring, and the command may still be decided: submit it again with the same CommandID to learn its outcome",
			ErrNoOutcome, s.id, c.name, aggregateID, c.commands, rec.Partition, rec.Offset, context.Cause(ctx))
	}
}

// kafkaAway reports whether a write failed because Kafka was out of reach
// or busy (a connection refused or cut, a leader moving) rather than
// because it refused the write (not authorized, no such topic, too
// large).
func kafkaAway(err error) bool {
	if err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) {
		return false
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return kerr.IsRetriable(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrRecordRetries)
}

// ErrMalformedCommand wraps the error of a command envelope that SubmitJSON
// cannot read.
var ErrMalformedCommand = errors.New("aggregate: malformed command")

// SubmitJSON is Submit of a command in its envelope,
// {"type":"<registered name>","data":{…}} (as an HTTP request carries it).
func (c *Client[C]) SubmitJSON(ctx context.Context, aggregateID string, envelope []byte, opts ...SubmitOption) (Outcome, error) {
	cmd, err := c.types.DecodeJSON(envelope)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
	}
	return c.Submit(ctx, aggregateID, cmd, opts...)
}

// CommandTypes are the aggregate's command types by name (Types.GoTypes).
func (c *Client[C]) CommandTypes() map[string]reflect.Type { return c.types.GoTypes() }

// Name is the aggregate's name.
func (c *Client[C]) Name() string { return c.name }

func (c *Client[C]) forget(id string, w chan Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiters[id]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, id)
	} else {
		c.waiters[id] = ws
	}
}

// Close stops the client; Submits waiting end with an error.
func (c *Client[C]) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	<-c.done
	c.cons.Close()
	c.prod.Close()
}

// recordCarrier puts trace context into a record's headers.
type recordCarrier struct{ r *kgo.Record }

func (c recordCarrier) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c recordCarrier) Set(key, value string) {
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c recordCarrier) Keys() []string {
	out := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		out[i] = h.Key
	}
	return out
}
