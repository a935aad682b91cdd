package aggregate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Headers of commands, events and outcomes.
const (
	HeaderType             = "oxbow-type"              // a command's or event's type name
	HeaderCommandID        = "oxbow-command-id"        // the command's id (idempotency key)
	HeaderExpectedVersion  = "oxbow-expected-version"  // on a command: the version it expects, decimal
	HeaderAggregateID      = "oxbow-aggregate-id"      // on an event
	HeaderAggregateVersion = "oxbow-aggregate-version" // on an event: the version it made, decimal
	HeaderCorrelationID    = "oxbow-correlation-id"    // carried from the command (default: its id)
	HeaderCausationID      = "oxbow-causation-id"      // on a command: what caused it; on an event: the command id
	// HeaderRequest, on a command, is the fingerprint its outcome records
	// instead of the command's own (RequestedAs).
	HeaderRequest = "oxbow-request"
)

// Config defines an aggregate.
type Config[S, C, E any] struct {
	// Name names the aggregate's stores and nodes ("<name>-state",
	// "<name>-outcomes"), and its topics by default. Keep it stable: the
	// state lives under it.
	Name string
	// CommandTopic, EventTopic and ReplyTopic default to "<name>-commands",
	// "<name>-events" and "<name>-outcomes". Commands are keyed by aggregate
	// id, so one task is the single writer of each aggregate; events are
	// keyed by aggregate id too; outcomes are keyed by command id and read
	// by every Client.
	CommandTopic, EventTopic, ReplyTopic string

	// Initial is the state of an aggregate without events.
	Initial func() S
	// Decide returns the events a command makes from the state, or a
	// domain error (see [Reject]). It must not have side effects: it runs
	// again if a crash interrupts its command.
	Decide func(state S, cmd C) ([]E, error)
	// Evolve applies an event to the state.
	Evolve func(state S, event E) S

	// Commands and Events register the concrete command and event types.
	Commands *Types[C]
	Events   *Types[E]
	// StateSerde writes the state to the store (default: JSON, which must
	// round-trip S).
	StateSerde serde.Serde[S]
	// OutcomeRetention is how long a command's outcome is kept for repeated
	// submissions, in the command topic's time (default: 24 hours).
	OutcomeRetention time.Duration
}

// Aggregate is a checked aggregate definition: add it to a topology with
// AddTo, submit commands with a [Client].
type Aggregate[S, C, E any] struct {
	cfg Config[S, C, E]
}

// New checks an aggregate's definition.
func New[S, C, E any](cfg Config[S, C, E]) (*Aggregate[S, C, E], error) {
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, errors.New("the Name is empty"))
	}
	if cfg.Initial == nil || cfg.Decide == nil || cfg.Evolve == nil {
		errs = append(errs, errors.New("the functions Initial, Decide and Evolve must all be set"))
	}
	if cfg.Commands == nil || cfg.Events == nil {
		errs = append(errs, errors.New("the registries Commands and Events must be set (NewTypes, then Register each type)"))
	} else {
		errs = append(errs, cfg.Commands.check("Commands"), cfg.Events.check("Events"))
	}
	if cfg.OutcomeRetention < 0 {
		errs = append(errs, fmt.Errorf("OutcomeRetention %v is negative", cfg.OutcomeRetention))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("aggregate %q: %w", cfg.Name, err)
	}
	cfg.CommandTopic, cfg.EventTopic, cfg.ReplyTopic = defaultTopics(cfg.Name, cfg.CommandTopic, cfg.EventTopic, cfg.ReplyTopic)
	if cfg.StateSerde == nil {
		cfg.StateSerde = serde.JSON[S]()
	}
	if cfg.OutcomeRetention == 0 {
		cfg.OutcomeRetention = 24 * time.Hour
	}
	return &Aggregate[S, C, E]{cfg: cfg}, nil
}

// Name is the aggregate's name.
func (a *Aggregate[S, C, E]) Name() string { return a.cfg.Name }

// Topics are the command, event and reply topics, which must exist before
// an application with the aggregate starts (co-partitioning is not needed:
// each is keyed on its own).
func (a *Aggregate[S, C, E]) Topics() (commands, events, replies string) {
	return a.cfg.CommandTopic, a.cfg.EventTopic, a.cfg.ReplyTopic
}

// StateStore is the store of the aggregates' states: aggregate id → the
// state's version and the state (see [DecodeState]).
func (a *Aggregate[S, C, E]) StateStore() string { return a.cfg.Name + "-state" }

// EventSerde reads and writes the aggregate's events (self-describing
// JSON, upcast on read): for a projection's NewStream on the event topic.
func (a *Aggregate[S, C, E]) EventSerde() serde.Serde[E] { return a.Contract().EventSerde() }

// CommandSerde reads and writes the aggregate's commands.
func (a *Aggregate[S, C, E]) CommandSerde() serde.Serde[C] { return a.Contract().CommandSerde() }

// Fold applies events to the initial state, as the command processor does:
// the state and version of an aggregate with these events.
func (a *Aggregate[S, C, E]) Fold(events ...E) (version int64, state S) {
	state = a.cfg.Initial()
	for _, e := range events {
		state = a.cfg.Evolve(state, e)
	}
	return int64(len(events)), state
}

// stored is a state as the state store keeps it.
type stored struct {
	Version int64           `json:"version"`
	State   json.RawMessage `json:"state"`
}

// DecodeState reads a value of the state store: the version and the state.
func (a *Aggregate[S, C, E]) DecodeState(b []byte) (version int64, state S, err error) {
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, state, fmt.Errorf("aggregate %s: a stored state: %w", a.cfg.Name, err)
	}
	state, err = a.cfg.StateSerde.Decode(st.State)
	return st.Version, state, err
}

// EncodeState writes a value of the state store (for tests that start an
// aggregate at a state, and tools).
func (a *Aggregate[S, C, E]) EncodeState(version int64, state S) ([]byte, error) {
	b, err := a.cfg.StateSerde.Encode(state)
	if err != nil {
		return nil, err
	}
	return json.Marshal(stored{Version: version, State: b})
}

// AddTo adds the aggregate's command processor to a topology: it reads the
// command topic and writes the event and reply topics. The application
// runs engine.ExactlyOnce unless its Config says otherwise (the topology
// decides: engine.Builder.DecidesExactlyOnce): then a command's events,
// its state change, its recorded outcome and its reply commit in one
// transaction with the command's offset, and a crash anywhere neither loses nor repeats a
// command's events. (Under at-least-once a crash may write a command's
// events twice.)
func (a *Aggregate[S, C, E]) AddTo(b *engine.Builder) {
	name := a.cfg.Name
	b.DecidesExactlyOnce("aggregate " + name)
	state := engine.NewKeyValueStore(a.StateStore(), serde.String, serde.Bytes)
	outcomes := engine.NewKeyValueStore(name+"-outcomes", serde.String, serde.Bytes)
	expiry := engine.NewKeyValueStore(name+"-outcomes-expiry", serde.Bytes, serde.Bytes)
	cmds := engine.NewStream(b, a.cfg.CommandTopic, serde.String, serde.Bytes, engine.Named(name+"-commands"))
	out := engine.Process(cmds, func() engine.Processor[string, []byte, string, []byte] {
		return &processor[S, C, E]{a: a, stateDef: state, outcomesDef: outcomes, expiryDef: expiry, pending: map[string]*pendingOutcome{}}
	}, engine.Named(name+"-decide"), engine.WithStores(state, outcomes, expiry))
	pass := func(string, []byte) bool { return true }
	out.WithSerdes(serde.String, serde.Bytes).Filter(pass, engine.Named(name+"-events")).To(a.cfg.EventTopic, engine.Named(name+"-event-sink"))
	out.WithSerdes(serde.String, serde.Bytes).Filter(pass, engine.Named(name+"-replies")).To(a.cfg.ReplyTopic, engine.Named(name+"-reply-sink"))
}

// processor is one task's command processor.
type processor[S, C, E any] struct {
	a                     *Aggregate[S, C, E]
	stateDef, outcomesDef *engine.KeyValueStoreDef[string, []byte]
	expiryDef             *engine.KeyValueStoreDef[[]byte, []byte]
	state, outcomes       engine.KeyValueStore[string, []byte]
	expiry                engine.KeyValueStore[[]byte, []byte]

	// Outcomes of accepted commands waiting for their events' positions,
	// recorded and replied to before the commit; in order.
	mu      sync.Mutex
	pending map[string]*pendingOutcome
	order   []*pendingOutcome
	lastExp int64 // the stream time outcomes were last expired at
}

type pendingOutcome struct {
	o          Outcome
	ts         time.Time
	headers    []engine.Header
	duplicates int // repeated submissions seen meanwhile
}

func (p *processor[S, C, E]) Init(ctx *engine.ProcessorContext[string, []byte]) error {
	var err error
	if p.state, err = p.stateDef.Open(ctx); err != nil {
		return err
	}
	if p.outcomes, err = p.outcomesDef.Open(ctx); err != nil {
		return err
	}
	if p.expiry, err = p.expiryDef.Open(ctx); err != nil {
		return err
	}
	ctx.BeforeCommit(func() error { return p.flush(ctx) })
	return nil
}

// HeaderValue is the value of the last header called key (false if none):
// of a command, an event or an outcome's record.
func HeaderValue(hs []engine.Header, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

func (p *processor[S, C, E]) Process(ctx *engine.ProcessorContext[string, []byte], rec engine.Record[string, []byte]) error {
	// Whoever sent the command waits for its outcome, which goes out with
	// the commit: commit once the commands polled are decided.
	ctx.RequestCommit()
	if err := p.expire(ctx); err != nil {
		return err
	}
	md := ctx.Metadata()
	id, ok := HeaderValue(rec.Headers, HeaderCommandID)
	if !ok || id == "" {
		// A command from elsewhere, without an id: its place in the topic
		// names it, the same each time it is read.
		id = fmt.Sprintf("%s-%d-%d", md.Topic, md.Partition, md.Offset)
	}
	correlation, ok := HeaderValue(rec.Headers, HeaderCorrelationID)
	if !ok || correlation == "" {
		correlation = id
	}
	replyHeaders := []engine.Header{{Key: HeaderCommandID, Value: []byte(id)}, {Key: HeaderCorrelationID, Value: []byte(correlation)}}
	expected, _ := HeaderValue(rec.Headers, HeaderExpectedVersion)
	request, ok := HeaderValue(rec.Headers, HeaderRequest)
	if !ok || request == "" {
		request = Fingerprint(rec.Key, rec.Value, expected)
	}
	o := Outcome{CommandID: id, AggregateID: rec.Key, Request: request}

	// The same command again: its recorded outcome (its caller tells a
	// repeat from another request with the id by o.Request). Command ids
	// are the aggregate's: the same id for another names another command.
	p.mu.Lock()
	if po := p.pending[outcomeKey(rec.Key, id)]; po != nil {
		po.duplicates++
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	if prev, found, err := p.recorded(rec.Key, id); err != nil {
		return err
	} else if found {
		prev.Duplicate = true
		return p.reply(ctx, prev, rec.Timestamp, replyHeaders)
	}

	if rec.Key == "" {
		o.Status, o.Rejection = Rejected, &Rejection{Code: CodeNoAggregateID, Message: "the command record has no key: commands are keyed by aggregate id"}
		return p.record(ctx, o, rec.Timestamp, replyHeaders)
	}
	cmd, err := p.a.cfg.Commands.Decode(rec.Value)
	if errors.Is(err, serde.ErrUnavailable) {
		return err // not the command's fault: the instance stops, the command stays
	}
	if err != nil {
		o.Status, o.Rejection = Rejected, &Rejection{Code: CodeMalformedCommand, Message: err.Error()}
		return p.record(ctx, o, rec.Timestamp, replyHeaders)
	}
	version, st, err := p.load(rec.Key)
	if err != nil {
		return err
	}
	o.Version = version
	if ev, ok := HeaderValue(rec.Headers, HeaderExpectedVersion); ok {
		want, err := strconv.ParseInt(ev, 10, 64)
		if err != nil {
			o.Status, o.Rejection = Rejected, &Rejection{Code: CodeMalformedCommand, Message: fmt.Sprintf("header %s: %q is not a version", HeaderExpectedVersion, ev)}
			return p.record(ctx, o, rec.Timestamp, replyHeaders)
		}
		if want != version {
			o.Status, o.ExpectedVersion = Conflict, &want
			return p.record(ctx, o, rec.Timestamp, replyHeaders)
		}
	}
	events, next, rej := p.decide(st, cmd)
	if rej != nil {
		o.Status, o.Rejection = Rejected, rej
		return p.record(ctx, o, rec.Timestamp, replyHeaders)
	}
	// Everything is encoded before anything is sent: an event that does
	// not encode rejects the command whole.
	encoded := make([][]byte, len(events))
	names := make([]string, len(events))
	for i, e := range events {
		if names[i], err = p.a.cfg.Events.NameOf(e); err == nil {
			encoded[i], err = p.a.cfg.Events.Encode(e)
		}
		if errors.Is(err, serde.ErrUnavailable) {
			return err
		}
		if err != nil {
			o.Status, o.Rejection = Rejected, &Rejection{Code: CodeEncode, Message: err.Error()}
			return p.record(ctx, o, rec.Timestamp, replyHeaders)
		}
	}
	stateBytes, err := p.a.EncodeState(version+int64(len(events)), next)
	if err != nil {
		o.Status, o.Rejection = Rejected, &Rejection{Code: CodeEncode, Message: "the state: " + err.Error()}
		return p.record(ctx, o, rec.Timestamp, replyHeaders)
	}

	o.Status, o.Version = Accepted, version+int64(len(events))
	o.Events = make([]Position, len(events))
	po := &pendingOutcome{o: o, ts: rec.Timestamp, headers: replyHeaders}
	for i := range events {
		v := version + int64(i) + 1
		hs := []engine.Header{
			{Key: HeaderType, Value: []byte(names[i])},
			{Key: HeaderAggregateID, Value: []byte(rec.Key)},
			{Key: HeaderAggregateVersion, Value: []byte(strconv.FormatInt(v, 10))},
			{Key: HeaderCommandID, Value: []byte(id)},
			{Key: HeaderCorrelationID, Value: []byte(correlation)},
			{Key: HeaderCausationID, Value: []byte(id)},
		}
		pos := &po.o.Events[i]
		pos.Topic, pos.Offset = p.a.cfg.EventTopic, -1
		err := ctx.ForwardToProduced(p.a.cfg.Name+"-events", engine.Record[string, []byte]{Key: rec.Key, Value: encoded[i], Timestamp: rec.Timestamp, Headers: hs},
			func(partition int32, offset int64) {
				p.mu.Lock()
				pos.Partition, pos.Offset = partition, offset
				p.mu.Unlock()
			})
		if err != nil {
			return err
		}
	}
	if err := p.state.Put(rec.Key, stateBytes); err != nil {
		return err
	}
	if len(events) == 0 {
		return p.record(ctx, po.o, rec.Timestamp, replyHeaders)
	}
	p.mu.Lock()
	p.pending[outcomeKey(rec.Key, id)] = po
	p.order = append(p.order, po)
	p.mu.Unlock()
	return nil
}

// decide runs Decide and Evolve; a panic in either rejects the command.
func (p *processor[S, C, E]) decide(st S, cmd C) (events []E, next S, rej *Rejection) {
	defer func() {
		if r := recover(); r != nil {
			events, rej = nil, &Rejection{Code: CodePanicked, Message: fmt.Sprint(r)}
		}
	}()
	events, err := p.a.cfg.Decide(st, cmd)
	if err != nil {
		return nil, st, rejectionOf(err)
	}
	next = st
	for _, e := range events {
		next = p.a.cfg.Evolve(next, e)
	}
	return events, next, nil
}

func (p *processor[S, C, E]) load(id string) (int64, S, error) {
	b, ok, err := p.state.Get(id)
	if err != nil {
		return 0, *new(S), err
	}
	if !ok {
		return 0, p.a.cfg.Initial(), nil
	}
	return p.a.DecodeState(b)
}

// outcomeKey is where an outcome is kept: the aggregate's id and the
// command's.
func outcomeKey(aggregateID, commandID string) string { return aggregateID + "\x00" + commandID }

// recorded is the outcome recorded for an aggregate's command id: under
// outcomeKey, or under the command id alone as versions before keys were
// scoped kept it (if it is the aggregate's).
func (p *processor[S, C, E]) recorded(aggregateID, id string) (Outcome, bool, error) {
	for _, k := range []string{outcomeKey(aggregateID, id), id} {
		b, found, err := p.outcomes.Get(k)
		if err != nil || !found {
			if err != nil {
				return Outcome{}, false, err
			}
			continue
		}
		var o Outcome
		if err := json.Unmarshal(b, &o); err != nil {
			return Outcome{}, false, fmt.Errorf("aggregate %s: the recorded outcome of command %s: %w", p.a.cfg.Name, id, err)
		}
		if o.AggregateID == aggregateID {
			return o, true, nil
		}
	}
	return Outcome{}, false, nil
}

// record keeps an outcome under its command id and replies with it.
func (p *processor[S, C, E]) record(ctx *engine.ProcessorContext[string, []byte], o Outcome, ts time.Time, hs []engine.Header) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	key := outcomeKey(o.AggregateID, o.CommandID)
	if err := p.outcomes.Put(key, b); err != nil {
		return err
	}
	exp := binary.BigEndian.AppendUint64(nil, uint64(ts.Add(p.a.cfg.OutcomeRetention).UnixMilli()))
	if err := p.expiry.Put(append(exp, key...), []byte{}); err != nil {
		return err
	}
	return p.reply(ctx, o, ts, hs)
}

func (p *processor[S, C, E]) reply(ctx *engine.ProcessorContext[string, []byte], o Outcome, ts time.Time, hs []engine.Header) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return ctx.ForwardTo(p.a.cfg.Name+"-replies", engine.Record[string, []byte]{Key: o.CommandID, Value: b, Timestamp: ts, Headers: hs})
}

// flush records and answers the accepted commands whose events now have
// their positions (before each commit).
func (p *processor[S, C, E]) flush(ctx *engine.ProcessorContext[string, []byte]) error {
	p.mu.Lock()
	order := p.order
	p.order, p.pending = nil, map[string]*pendingOutcome{}
	p.mu.Unlock()
	for _, po := range order {
		for _, e := range po.o.Events {
			if e.Offset < 0 {
				return fmt.Errorf("aggregate %s: command %s: an event's position is unknown at commit", p.a.cfg.Name, po.o.CommandID)
			}
		}
		if err := p.record(ctx, po.o, po.ts, po.headers); err != nil {
			return err
		}
		dup := po.o
		dup.Duplicate = true
		for range po.duplicates {
			if err := p.reply(ctx, dup, po.ts, po.headers); err != nil {
				return err
			}
		}
	}
	return nil
}

// expire forgets the outcomes older than the retention.
func (p *processor[S, C, E]) expire(ctx *engine.ProcessorContext[string, []byte]) error {
	now := ctx.StreamTime()
	if now.IsZero() || now.UnixMilli() < p.lastExp+1000 {
		return nil // at most once a second of stream time
	}
	p.lastExp = now.UnixMilli()
	hi := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli()+1))
	var keys [][]byte
	for kv, err := range p.expiry.Range([]byte{}, hi) {
		if err != nil {
			return err
		}
		keys = append(keys, kv.Key)
	}
	for _, k := range keys {
		if err := p.expiry.Delete(k); err != nil {
			return err
		}
		if len(k) > 8 {
			if err := p.outcomes.Delete(string(k[8:])); err != nil {
				return err
			}
		}
	}
	return nil
}
