package saga

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
)

// stored is an instance as the state store keeps it.
type stored struct {
	// State is the state as StateSerde wrote it: JSON in place, anything
	// else in StateBytes.
	State      json.RawMessage `json:"state,omitempty"`
	StateBytes []byte          `json:"stateBytes,omitempty"`
	// Correlation is the instance's correlation id; Run names this run of
	// it (see commandID); Sent is the number of commands it sent.
	Correlation string `json:"correlation"`
	Run         string `json:"run"`
	Sent        int64  `json:"sent"`
	// Pending are the commands sent whose outcomes have not come, by id.
	Pending map[string]pending `json:"pending,omitempty"`
	// Timeouts are the timeouts set, by name: when due, in Unix ms.
	Timeouts map[string]int64 `json:"timeouts,omitempty"`
}

type pending struct {
	Target      string `json:"target"`
	AggregateID string `json:"aggregateId"`
	// Command is the command as sent: JSON in place, anything else (a
	// command in Avro, say) in CommandBytes.
	Command      json.RawMessage `json:"command,omitempty"`
	CommandBytes []byte          `json:"commandBytes,omitempty"`
	Request      string          `json:"request"`
}

// sentAs keeps a command as sent in p.
func (p *pending) sentAs(value []byte) {
	if json.Valid(value) {
		p.Command = value
	} else {
		p.CommandBytes = value
	}
}

// sent is the command as sent.
func (p pending) sent() []byte {
	if p.CommandBytes != nil {
		return p.CommandBytes
	}
	return p.Command
}

// Instance is an instance of a process manager as its state store keeps
// it (see [Manager.DecodeInstance]).
type Instance[S any] struct {
	State S `json:"state"`
	// CorrelationID is carried by the instance's commands; Run names the
	// run of the instance (it starts again after End in another), part of
	// its commands' ids.
	CorrelationID string `json:"correlationId"`
	Run           string `json:"run"`
	// Sent is the number of commands it sent; Pending those whose outcome
	// has not come, by command id.
	Sent    int64                     `json:"sent"`
	Pending map[string]PendingCommand `json:"pending"`
	// Timeouts are the timeouts set, by name.
	Timeouts map[string]time.Time `json:"timeouts"`
}

// PendingCommand is a command an instance waits for the outcome of.
type PendingCommand struct {
	Target      string `json:"target"`
	AggregateID string `json:"aggregateId"`
	// Command is the command's envelope, as sent; a command in another
	// format than JSON (aggregate.Types.Use) is in CommandBytes instead.
	Command      json.RawMessage `json:"command,omitempty"`
	CommandBytes []byte          `json:"commandBytes,omitempty"`
	// Request is its fingerprint (aggregate.Fingerprint), which the
	// target's outcome repeats.
	Request string `json:"request"`
}

// DecodeInstance reads a value of the state store.
func (m *Manager[S]) DecodeInstance(b []byte) (Instance[S], error) {
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return Instance[S]{}, fmt.Errorf("saga %s: a stored instance: %w", m.cfg.Name, err)
	}
	s, err := m.decodeState(&st)
	if err != nil {
		return Instance[S]{}, fmt.Errorf("saga %s: %w", m.cfg.Name, err)
	}
	in := Instance[S]{State: s, CorrelationID: st.Correlation, Run: st.Run, Sent: st.Sent, Pending: map[string]PendingCommand{}, Timeouts: map[string]time.Time{}}
	for id, p := range st.Pending {
		in.Pending[id] = PendingCommand(p)
	}
	for n, due := range st.Timeouts {
		in.Timeouts[n] = time.UnixMilli(due)
	}
	return in, nil
}

func (m *Manager[S]) decodeState(st *stored) (S, error) {
	b := []byte(st.State)
	if st.StateBytes != nil {
		b = st.StateBytes
	}
	s, err := m.cfg.StateSerde.Decode(b)
	if err != nil {
		return s, fmt.Errorf("the stored state: %w", err)
	}
	return s, nil
}

// processor is one task's process manager: the instances whose ids hash to
// its partition.
type processor[S any] struct {
	m           *Manager[S]
	stateDef    *engine.KeyValueStoreDef[string, []byte]
	timeoutsDef *engine.KeyValueStoreDef[[]byte, []byte]
	state       engine.KeyValueStore[string, []byte]
	timeouts    engine.KeyValueStore[[]byte, []byte]
	ctx         *engine.ProcessorContext[string, []byte]
	sources     map[string]*source
	initial     []byte // the initial state, encoded
}

func (p *processor[S]) Init(ctx *engine.ProcessorContext[string, []byte]) error {
	var err error
	if p.state, err = p.stateDef.Open(ctx); err != nil {
		return err
	}
	if p.timeouts, err = p.timeoutsDef.Open(ctx); err != nil {
		return err
	}
	if p.initial, err = p.m.cfg.StateSerde.Encode(p.m.cfg.Initial()); err != nil {
		return fmt.Errorf("saga %s: the initial state: %w", p.m.cfg.Name, err)
	}
	p.ctx = ctx
	p.sources = map[string]*source{}
	for _, s := range p.m.sources {
		p.sources[s.name] = s
	}
	if p.m.cfg.TimeoutClock == WallClock {
		_, err = ctx.Schedule(p.m.cfg.TimeoutCheck, engine.WallClockTime, p.fire)
	}
	return err
}

func (p *processor[S]) Process(ctx *engine.ProcessorContext[string, []byte], rec engine.Record[string, []byte]) error {
	if p.m.cfg.TimeoutClock == StreamTime {
		// The timeouts that this input's time reaches come due first.
		now := rec.Timestamp
		if t := ctx.StreamTime(); t.After(now) {
			now = t
		}
		if err := p.fire(now); err != nil {
			return err
		}
	}
	input, _ := aggregate.HeaderValue(rec.Headers, headerInput)
	id, _ := aggregate.HeaderValue(rec.Headers, headerOrigin)
	kind, name, _ := strings.Cut(input, ":")
	inst := rec.Key
	st, found, err := p.load(inst)
	if err != nil {
		return err
	}
	ev := Event{Instance: inst, Time: rec.Timestamp, ID: id, Source: name}
	switch kind {
	case "event":
		src := p.sources[name]
		if src == nil {
			ctx.Skip("an event of a source the process manager no longer has: " + name)
			return nil
		}
		if ev.Value, err = src.decode(rec.Value); err != nil {
			return fmt.Errorf("saga %s: the event of %s at %s: %w", p.m.cfg.Name, name, id, err)
		}
		ev.Type, _ = aggregate.HeaderValue(rec.Headers, aggregate.HeaderType)
		ev.AggregateID, _ = aggregate.HeaderValue(rec.Headers, headerKey)
		if !found {
			st = &stored{Correlation: id, Run: runOf(id)}
			if c, ok := aggregate.HeaderValue(rec.Headers, aggregate.HeaderCorrelationID); ok && c != "" {
				st.Correlation = c
			}
		}
	case "outcome":
		t := p.m.byName[name]
		if t == nil {
			ctx.Skip("an outcome of a target the process manager no longer has: " + name)
			return nil
		}
		cmdID, ok := aggregate.HeaderValue(rec.Headers, aggregate.HeaderCommandID)
		if !ok {
			o, err := aggregate.DecodeOutcome(rec.Value)
			if err != nil {
				return fmt.Errorf("saga %s: the outcome of %s at %s: %w", p.m.cfg.Name, name, id, err)
			}
			cmdID = o.CommandID
		}
		sent, ok := st.Pending[cmdID]
		if !found || !ok {
			return nil // a repeat, or the outcome of an ended run's command
		}
		o, err := aggregate.DecodeOutcome(rec.Value)
		if err != nil {
			return fmt.Errorf("saga %s: the outcome of %s at %s: %w", p.m.cfg.Name, name, id, err)
		}
		if o.CommandID != cmdID || (o.Request != "" && o.Request != sent.Request) {
			ctx.Skip("an outcome of another request than the command sent with its id: " + cmdID)
			return nil
		}
		delete(st.Pending, cmdID)
		cmd, err := t.decode(sent.sent())
		if err != nil {
			return fmt.Errorf("saga %s: instance %q: the command %s as sent: %w", p.m.cfg.Name, inst, cmdID, err)
		}
		ev.Value, ev.AggregateID = Outcome{Target: name, Command: cmd, Outcome: o}, o.AggregateID
	default:
		return fmt.Errorf("saga %s: a record of the repartition topic without its input (header %s %q)", p.m.cfg.Name, headerInput, input)
	}
	return p.react(inst, st, found, ev, nil)
}

// fire reacts to the timeouts due at now, earliest first. A timeout's key
// goes with its reaction: one whose reaction fails stays, due.
func (p *processor[S]) fire(now time.Time) error {
	hi := binary.BigEndian.AppendUint64(nil, uint64(max(now.UnixMilli()+1, 0)))
	var keys [][]byte
	for kv, err := range p.timeouts.Range([]byte{}, hi) {
		if err != nil {
			return err
		}
		keys = append(keys, kv.Key)
	}
	for _, k := range keys {
		due, inst, name, ok := parseTimeoutKey(k)
		st, found := &stored{}, false
		if ok {
			var err error
			if st, found, err = p.load(inst); err != nil {
				return err
			}
		}
		if !found || st.Timeouts[name] != due {
			// Cancelled, moved or ended: a key left behind.
			if err := p.timeouts.Delete(k); err != nil {
				return err
			}
			continue
		}
		delete(st.Timeouts, name)
		at := time.UnixMilli(due)
		ev := Event{Instance: inst, Value: Timeout{Name: name, At: at}, Time: at, ID: "timeout/" + name + "/" + strconv.FormatInt(due, 10)}
		if err := p.react(inst, st, true, ev, k); err != nil {
			return err
		}
	}
	return nil
}

// timeoutKey files a timeout by when it is due: due (8 bytes, big-endian),
// the instance's length (uvarint), the instance, the name.
func timeoutKey(due int64, inst, name string) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(due))
	k = binary.AppendUvarint(k, uint64(len(inst)))
	return append(append(k, inst...), name...)
}

func parseTimeoutKey(k []byte) (due int64, inst, name string, ok bool) {
	if len(k) < 9 {
		return 0, "", "", false
	}
	due = int64(binary.BigEndian.Uint64(k))
	n, w := binary.Uvarint(k[8:])
	if w <= 0 || uint64(len(k)-8-w) < n {
		return 0, "", "", false
	}
	rest := k[8+w:]
	return due, string(rest[:n]), string(rest[n:]), true
}

func (p *processor[S]) load(inst string) (*stored, bool, error) {
	b, found, err := p.state.Get(inst)
	if err != nil || !found {
		return &stored{}, false, err
	}
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, false, fmt.Errorf("saga %s: instance %q: the stored instance: %w", p.m.cfg.Name, inst, err)
	}
	return &st, true, nil
}

// react runs React on an instance and does what it says: first everything
// is worked out and encoded, then done, so that a reaction that fails
// does nothing. fired, if not nil, is the key of the timeout reacted to,
// deleted with the reaction's other changes.
func (p *processor[S]) react(inst string, st *stored, found bool, ev Event, fired []byte) error {
	cfg := &p.m.cfg
	fail := func(format string, args ...any) error {
		return fmt.Errorf("saga %s: instance %q: reacting to %s: %w", cfg.Name, inst, ev.ID, fmt.Errorf(format, args...))
	}
	state := cfg.Initial()
	if found {
		var err error
		if state, err = p.m.decodeState(st); err != nil {
			return fail("%w", err)
		}
	}
	ev.CorrelationID = st.Correlation
	next, actions, err := p.call(state, ev)
	if err != nil {
		return fail("%w", err)
	}

	// The commands, checked and encoded.
	type send struct {
		child string
		rec   engine.Record[string, []byte]
	}
	var sends []send
	var deletes, puts [][]byte // of the timeouts store
	if fired != nil {
		deletes = append(deletes, fired)
	}
	if st.Pending == nil {
		st.Pending = map[string]pending{}
	}
	if st.Timeouts == nil {
		st.Timeouts = map[string]int64{}
	}
	ended := false
	for i, a := range actions {
		switch a.kind {
		case actSend:
			var t *target
			if a.target != nil {
				t = p.m.byName[a.target.name]
			}
			if t == nil || t.commandTopic != a.target.commandTopic {
				return fail("action %d sends to %v, which is not among Config.Targets", i, a.target)
			}
			if a.aggregateID == "" {
				return fail("action %d sends %T to %s without an aggregate id", i, a.command, t.name)
			}
			typeName, err := t.typeName(a.command)
			var value []byte
			if err == nil {
				value, err = t.encode(a.command)
			}
			if err != nil {
				return fail("action %d: %w", i, err)
			}
			st.Sent++
			id := commandID(cfg.Name, inst, st.Run, st.Sent)
			hs := []engine.Header{
				{Key: aggregate.HeaderType, Value: []byte(typeName)},
				{Key: aggregate.HeaderCommandID, Value: []byte(id)},
				{Key: aggregate.HeaderCorrelationID, Value: []byte(st.Correlation)},
				{Key: aggregate.HeaderCausationID, Value: []byte(ev.ID)},
			}
			expected := ""
			if a.expected != nil {
				expected = strconv.FormatInt(*a.expected, 10)
				hs = append(hs, engine.Header{Key: aggregate.HeaderExpectedVersion, Value: []byte(expected)})
			}
			sends = append(sends, send{cfg.Name + "-to-" + t.name, engine.Record[string, []byte]{Key: a.aggregateID, Value: value, Timestamp: ev.Time, Headers: hs}})
			pc := pending{Target: t.name, AggregateID: a.aggregateID, Request: aggregate.Fingerprint(a.aggregateID, value, expected)}
			pc.sentAs(value)
			st.Pending[id] = pc
		case actSetTimeout, actCancelTimeout:
			if a.kind == actSetTimeout && (a.name == "" || a.at.UnixMilli() < 0) {
				return fail("action %d sets a timeout without a name, or before 1970 (%q at %v)", i, a.name, a.at)
			}
			if old, ok := st.Timeouts[a.name]; ok {
				deletes = append(deletes, timeoutKey(old, inst, a.name))
				delete(st.Timeouts, a.name)
			}
			if a.kind == actSetTimeout {
				due := a.at.UnixMilli()
				puts = append(puts, timeoutKey(due, inst, a.name))
				st.Timeouts[a.name] = due
			}
		case actEnd:
			ended = true
		default:
			return fail("action %d is not made by Send, SetTimeout, CancelTimeout or End", i)
		}
	}

	// The instance, encoded.
	var out []byte
	if ended {
		for name, due := range st.Timeouts {
			deletes = append(deletes, timeoutKey(due, inst, name))
		}
		puts = nil
	} else {
		b, err := cfg.StateSerde.Encode(next)
		if err != nil {
			return fail("the state: %w", err)
		}
		if !found && len(actions) == 0 && bytes.Equal(b, p.initial) {
			return nil // nothing started
		}
		st.State, st.StateBytes = nil, nil
		if p.m.jsonState {
			st.State = b
		} else {
			st.StateBytes = b
		}
		if out, err = json.Marshal(st); err != nil {
			return fail("the instance: %w", err)
		}
	}

	// Done.
	for _, s := range sends {
		if err := p.ctx.ForwardTo(s.child, s.rec); err != nil {
			return err
		}
	}
	if len(sends) > 0 {
		// The commands go out with the commit: commit soon, as the
		// aggregate does for its callers.
		p.ctx.RequestCommit()
	}
	for _, k := range deletes {
		if err := p.timeouts.Delete(k); err != nil {
			return err
		}
	}
	for _, k := range puts {
		if err := p.timeouts.Put(k, []byte{}); err != nil {
			return err
		}
	}
	if ended {
		if !found {
			return nil
		}
		return p.state.Delete(inst)
	}
	return p.state.Put(inst, out)
}

// call runs React; a panic is an error.
func (p *processor[S]) call(state S, ev Event) (next S, actions []Action, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in React: %v", r)
		}
	}()
	return p.m.cfg.React(state, ev)
}
