package saga

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
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
	// Correlation is the instance's correlation id; Sent the number of
	// commands it sent.
	Correlation string `json:"correlation"`
	Sent        int64  `json:"sent"`
	// Pending are the commands sent whose outcomes have not come, by id.
	Pending map[string]pending `json:"pending,omitempty"`
	// Timeouts are the timeouts set, by name: when due, in Unix ms.
	Timeouts map[string]int64 `json:"timeouts,omitempty"`
}

type pending struct {
	Target      string          `json:"target"`
	AggregateID string          `json:"aggregateId"`
	Command     json.RawMessage `json:"command"`
}

// Instance is an instance of a process manager as its state store keeps
// it (see [Manager.DecodeInstance]).
type Instance[S any] struct {
	State S `json:"state"`
	// CorrelationID is carried by the instance's commands.
	CorrelationID string `json:"correlationId"`
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
	// Command is the command's envelope, as sent.
	Command json.RawMessage `json:"command"`
}

// DecodeInstance reads a value of the state store.
func (m *Manager[S]) DecodeInstance(b []byte) (Instance[S], error) {
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return Instance[S]{}, fmt.Errorf("saga %s: a stored instance: %w", m.cfg.Name, err)
	}
	s, err := m.decodeState(&st)
	if err != nil {
		return Instance[S]{}, err
	}
	in := Instance[S]{State: s, CorrelationID: st.Correlation, Sent: st.Sent, Pending: map[string]PendingCommand{}, Timeouts: map[string]time.Time{}}
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
		return s, fmt.Errorf("saga %s: a stored state: %w", m.cfg.Name, err)
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
	clock := engine.WallClockTime
	if p.m.cfg.TimeoutClock == StreamTime {
		clock = engine.StreamTime
	}
	_, err = ctx.Schedule(p.m.cfg.TimeoutCheck, clock, p.fire)
	return err
}

func (p *processor[S]) Process(ctx *engine.ProcessorContext[string, []byte], rec engine.Record[string, []byte]) error {
	input, _ := header(rec.Headers, headerInput)
	id, _ := header(rec.Headers, headerOrigin)
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
			return fmt.Errorf("saga %s: an event of %s at %s: %w", p.m.cfg.Name, name, id, err)
		}
		ev.Type, _ = header(rec.Headers, aggregate.HeaderType)
		ev.AggregateID, _ = header(rec.Headers, aggregate.HeaderAggregateID)
		if !found {
			st = &stored{Correlation: id}
			if c, ok := header(rec.Headers, aggregate.HeaderCorrelationID); ok && c != "" {
				st.Correlation = c
			}
		}
	case "outcome":
		t := p.m.byName[name]
		o, err := aggregate.DecodeOutcome(rec.Value)
		if err != nil {
			return fmt.Errorf("saga %s: an outcome of %s at %s: %w", p.m.cfg.Name, name, id, err)
		}
		sent, ok := st.Pending[o.CommandID]
		if t == nil || !found || !ok {
			return nil // a repeat, or the outcome of an ended instance's command
		}
		delete(st.Pending, o.CommandID)
		cmd, err := t.decode(sent.Command)
		if err != nil {
			return fmt.Errorf("saga %s: instance %q: the command %s as sent: %w", p.m.cfg.Name, inst, o.CommandID, err)
		}
		ev.Value, ev.AggregateID = &Outcome{Target: name, Command: cmd, Outcome: o}, o.AggregateID
	default:
		return fmt.Errorf("saga %s: a record of the repartition topic without its input (header %s %q)", p.m.cfg.Name, headerInput, input)
	}
	return p.react(inst, st, found, ev)
}

// fire reacts to the timeouts due at now.
func (p *processor[S]) fire(now time.Time) error {
	hi := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli()+1))
	var keys [][]byte
	for kv, err := range p.timeouts.Range([]byte{}, hi) {
		if err != nil {
			return err
		}
		keys = append(keys, kv.Key)
	}
	for _, k := range keys {
		if err := p.timeouts.Delete(k); err != nil {
			return err
		}
		due, inst, name, ok := parseTimeoutKey(k)
		if !ok {
			continue
		}
		st, found, err := p.load(inst)
		if err != nil {
			return err
		}
		if !found || st.Timeouts[name] != due {
			continue // cancelled, moved or ended
		}
		delete(st.Timeouts, name)
		at := time.UnixMilli(due)
		ev := Event{Instance: inst, Value: Timeout{Name: name, At: at}, Time: at, ID: "timeout/" + name + "/" + strconv.FormatInt(due, 10)}
		if err := p.react(inst, st, true, ev); err != nil {
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

// send is a command of a reaction, ready to go.
type send struct {
	t           *target
	aggregateID string
	typeName    string
	value       []byte
	expected    *int64
}

// react runs React on an instance and does what it says.
func (p *processor[S]) react(inst string, st *stored, found bool, ev Event) error {
	cfg := &p.m.cfg
	fail := func(format string, args ...any) error {
		return fmt.Errorf("saga %s: instance %q: reacting to %s: %w", cfg.Name, inst, ev.ID, fmt.Errorf(format, args...))
	}
	state := cfg.Initial()
	if found {
		var err error
		if state, err = p.m.decodeState(st); err != nil {
			return err
		}
	}
	ev.CorrelationID = st.Correlation
	next, actions, err := p.call(state, ev)
	if err != nil {
		return fail("%w", err)
	}
	// Everything is checked and encoded before anything is done.
	sends := make([]send, 0, len(actions))
	ended := false
	for i, a := range actions {
		switch a.kind {
		case actSend:
			t := a.target
			if t == nil || p.m.byName[t.name] != t {
				return fail("action %d sends to %v, which is not among Config.Targets", i, t)
			}
			if a.aggregateID == "" {
				return fail("action %d sends %T to %s without an aggregate id", i, a.command, t.name)
			}
			s := send{t: t, aggregateID: a.aggregateID, expected: a.expected}
			if s.typeName, err = t.typeName(a.command); err == nil {
				s.value, err = t.encode(a.command)
			}
			if err != nil {
				return fail("action %d: %w", i, err)
			}
			sends = append(sends, s)
		case actSetTimeout:
			if a.name == "" || a.at.IsZero() {
				return fail("action %d sets a timeout without a name or a time", i)
			}
		case actCancelTimeout, actEnd:
			ended = ended || a.kind == actEnd
		default:
			return fail("action %d is not made by Send, SetTimeout, CancelTimeout or End", i)
		}
	}
	if st.Pending == nil {
		st.Pending = map[string]pending{}
	}
	if st.Timeouts == nil {
		st.Timeouts = map[string]int64{}
	}
	for _, s := range sends {
		st.Sent++
		id := commandID(cfg.Name, inst, st.Sent)
		hs := []engine.Header{
			{Key: aggregate.HeaderType, Value: []byte(s.typeName)},
			{Key: aggregate.HeaderCommandID, Value: []byte(id)},
			{Key: aggregate.HeaderCorrelationID, Value: []byte(st.Correlation)},
			{Key: aggregate.HeaderCausationID, Value: []byte(ev.ID)},
		}
		if s.expected != nil {
			hs = append(hs, engine.Header{Key: aggregate.HeaderExpectedVersion, Value: []byte(strconv.FormatInt(*s.expected, 10))})
		}
		rec := engine.Record[string, []byte]{Key: s.aggregateID, Value: s.value, Timestamp: ev.Time, Headers: hs}
		if err := p.ctx.ForwardTo(cfg.Name+"-to-"+s.t.name, rec); err != nil {
			return err
		}
		st.Pending[id] = pending{Target: s.t.name, AggregateID: s.aggregateID, Command: s.value}
	}
	if len(sends) > 0 {
		// The commands go out with the commit: commit soon, as the
		// aggregate does for its callers.
		p.ctx.RequestCommit()
	}
	for _, a := range actions {
		switch a.kind {
		case actSetTimeout, actCancelTimeout:
			if old, ok := st.Timeouts[a.name]; ok {
				if err := p.timeouts.Delete(timeoutKey(old, inst, a.name)); err != nil {
					return err
				}
				delete(st.Timeouts, a.name)
			}
			if a.kind == actSetTimeout {
				due := a.at.UnixMilli()
				if err := p.timeouts.Put(timeoutKey(due, inst, a.name), []byte{}); err != nil {
					return err
				}
				st.Timeouts[a.name] = due
			}
		}
	}
	if ended {
		for _, name := range slices.Sorted(maps.Keys(st.Timeouts)) {
			if err := p.timeouts.Delete(timeoutKey(st.Timeouts[name], inst, name)); err != nil {
				return err
			}
		}
		if !found {
			return nil
		}
		return p.state.Delete(inst)
	}
	b, err := cfg.StateSerde.Encode(next)
	if err != nil {
		return fail("the state: %w", err)
	}
	if !found && len(actions) == 0 && bytes.Equal(b, p.initial) {
		return nil // nothing started
	}
	st.State, st.StateBytes = nil, nil
	if json.Valid(b) {
		st.State = b
	} else {
		st.StateBytes = b
	}
	out, err := json.Marshal(st)
	if err != nil {
		return err
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
