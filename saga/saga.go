package saga

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Clock is the clock a process manager's timeouts follow.
type Clock int

const (
	// WallClock timeouts fire when the wall clock passes them (checked every
	// Config.TimeoutCheck), whether or not events come.
	WallClock Clock = iota
	// StreamTime timeouts fire when the stream time of the process
	// manager's task reaches them: the largest timestamp of the inputs it
	// took. They fire as inputs come, before the first input at or past
	// their time, the same way on every replay.
	StreamTime
)

// Config defines a process manager.
type Config[S any] struct {
	// Name names the process manager's stores ("<name>-state",
	// "<name>-timeouts"), nodes and internal topic, and prefixes the ids of
	// the commands it sends. Keep it stable: the instances live under it.
	Name string
	// Sources are the events it reacts to ([On]); Targets the aggregates it
	// sends commands to ([To]), whose outcomes it reacts to as well.
	Sources []Source
	Targets []Destination

	// Initial is the state of an instance that has seen nothing.
	Initial func() S
	// React is given an instance's state and what happened to it — an event
	// of a source, the [Outcome] of a command it sent, or a [Timeout] — and
	// returns the new state and what to do: commands to send
	// ([Target.Send]), timeouts to set or cancel ([SetTimeout],
	// [CancelTimeout]), [End]. It must not have side effects: after a crash
	// it runs again on the same input from the same state. An error (or a
	// panic) is a processing error of the application (its
	// OnProcessingError policy says whether the task stops, or the input is
	// skipped or dead-lettered); nothing it returned is done. A timeout
	// whose reaction fails stays set, and is tried again at the next check.
	React func(state S, ev Event) (S, []Action, error)

	// StateSerde writes an instance's state (default: JSON, which must
	// round-trip S).
	StateSerde serde.Serde[S]
	// TimeoutClock is the clock of the timeouts (default: WallClock).
	TimeoutClock Clock
	// TimeoutCheck is how often due wall-clock timeouts are looked for
	// (default: a second; at least a millisecond).
	TimeoutCheck time.Duration
	// StartAt, if set, passes over the events with a timestamp before it.
	// A process manager added to a running system reads its sources from
	// their beginning, and would otherwise react to the whole history
	// (sending commands for old events, and setting wall-clock timeouts
	// that are already due).
	StartAt time.Time
}

// Manager is a checked process manager: add it to a topology with AddTo.
type Manager[S any] struct {
	cfg       Config[S]
	sources   []*source
	targets   []*target
	byName    map[string]*target
	jsonState bool // the state is StateSerde's default, JSON
}

// New checks a process manager's definition.
func New[S any](cfg Config[S]) (*Manager[S], error) {
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, errors.New("the Name is empty"))
	} else if strings.Contains(cfg.Name, "/") {
		errs = append(errs, fmt.Errorf("the Name %q has a slash: it begins the ids of the commands sent, before one", cfg.Name))
	}
	if cfg.Initial == nil || cfg.React == nil {
		errs = append(errs, errors.New("the functions Initial and React must both be set"))
	}
	if len(cfg.Sources) == 0 {
		errs = append(errs, errors.New("no Sources: a process manager reacts to the events of at least one (On)"))
	}
	if cfg.TimeoutCheck < 0 || (cfg.TimeoutCheck > 0 && cfg.TimeoutCheck < time.Millisecond) {
		errs = append(errs, fmt.Errorf("TimeoutCheck %v is less than a millisecond", cfg.TimeoutCheck))
	}
	if cfg.TimeoutClock != WallClock && cfg.TimeoutClock != StreamTime {
		errs = append(errs, fmt.Errorf("TimeoutClock %d is neither WallClock nor StreamTime", cfg.TimeoutClock))
	}
	m := &Manager[S]{byName: map[string]*target{}, jsonState: cfg.StateSerde == nil}
	topics := map[string]string{}
	read := func(topic, what string) {
		if prev, ok := topics[topic]; ok {
			errs = append(errs, fmt.Errorf("topic %s is read as %s and as %s: read each once", topic, prev, what))
		}
		topics[topic] = what
	}
	sourceNames := map[string]bool{}
	for i, s := range cfg.Sources {
		if s == nil {
			errs = append(errs, fmt.Errorf("source %d is nil", i))
			continue
		}
		src := s.source()
		if src.err != nil {
			errs = append(errs, src.err)
			continue
		}
		if sourceNames[src.name] {
			errs = append(errs, fmt.Errorf("source %q is given twice", src.name))
		}
		sourceNames[src.name] = true
		if src.stream == nil {
			read(src.topic, "the events of "+src.name)
		}
		m.sources = append(m.sources, src)
	}
	for i, d := range cfg.Targets {
		if d == nil {
			errs = append(errs, fmt.Errorf("target %d is nil", i))
			continue
		}
		t := d.target()
		if t.err != nil {
			errs = append(errs, t.err)
			continue
		}
		if m.byName[t.name] != nil {
			errs = append(errs, fmt.Errorf("target %q is given twice", t.name))
			continue
		}
		read(t.replyTopic, "the outcomes of "+t.name)
		m.byName[t.name] = t
		m.targets = append(m.targets, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("saga %q: %w", cfg.Name, err)
	}
	if cfg.StateSerde == nil {
		cfg.StateSerde = serde.JSON[S]()
	}
	if cfg.TimeoutCheck == 0 {
		cfg.TimeoutCheck = time.Second
	}
	m.cfg = cfg
	return m, nil
}

// Name is the process manager's name.
func (m *Manager[S]) Name() string { return m.cfg.Name }

// StateStore is the store of the instances: instance id → its state, the
// commands it waits for the outcomes of, its timeouts (see
// [Manager.DecodeInstance]).
func (m *Manager[S]) StateStore() string { return m.cfg.Name + "-state" }

// Topics are the topics the process manager reads and writes, which must
// exist before an application with it starts: its sources' event topics,
// its targets' command and reply topics. (Its repartition topic is the
// application's, created with the others.)
func (m *Manager[S]) Topics() []string {
	var out []string
	for _, s := range m.sources {
		if s.stream == nil {
			out = append(out, s.topic)
		}
	}
	for _, t := range m.targets {
		out = append(out, t.commandTopic, t.replyTopic)
	}
	return out
}

// Headers of the records of the process manager's repartition topic: which
// source or target a record came from, and where it was.
const (
	headerInput  = "oxbow-saga-input"  // "event:<source>" or "outcome:<target>"
	headerOrigin = "oxbow-saga-origin" // "<topic>/<partition>/<offset>"
	headerKey    = "oxbow-saga-key"    // an event's key: its aggregate's id
)

// AddTo adds the process manager to a topology: it reads its sources'
// event topics and its targets' reply topics, routes each event and
// outcome to its instance through a repartition topic ("<name>"), reacts,
// and writes the commands to the targets' command topics. The application
// runs engine.ExactlyOnce unless its Config says otherwise (the topology
// decides: engine.Builder.DecidesExactlyOnce): then the commands an
// input causes, the instance's new state and the input's offset commit in
// one transaction, and after a crash each input has caused its commands once.
// Under at-least-once, as in Kafka Streams, a crash may leave the restored
// state ahead of the committed input: an input may then be reacted to
// twice, from a state that already took it, and its commands sent twice.
//
// A topology reads a topic once: a process manager reads its targets'
// reply topics itself, so one application holds one process manager per
// target aggregate (a source it shares is given with [OnStream]).
//
// The writes to the command topics are feedback links ([engine.Feedback]):
// an aggregate that a process manager of the same application sends
// commands to may feed it its events and outcomes.
func (m *Manager[S]) AddTo(b *engine.Builder) {
	name := m.cfg.Name
	b.DecidesExactlyOnce("process manager " + name)
	var in *engine.Stream[string, []byte]
	merges := 0
	merge := func(s *engine.Stream[string, []byte]) {
		if in == nil {
			in = s
			return
		}
		merges++
		in = in.Merge(s, engine.Named(fmt.Sprintf("%s-merge-%d", name, merges)))
	}
	for _, src := range m.sources {
		s := src.stream
		if s == nil {
			s = engine.NewStream(b, src.topic, serde.String, serde.Bytes, engine.Named(name+"-events-"+src.name))
		}
		merge(engine.Process(s, func() engine.Processor[string, []byte, string, []byte] {
			return &correlator{saga: name, startAt: m.cfg.StartAt, m: src}
		},
			engine.Named(name+"-correlate-"+src.name)).WithSerdes(serde.String, serde.Bytes))
	}
	for _, t := range m.targets {
		s := engine.NewStream(b, t.replyTopic, serde.String, serde.Bytes, engine.Named(name+"-outcomes-"+t.name))
		merge(engine.Process(s, func() engine.Processor[string, []byte, string, []byte] { return &outcomeRouter{saga: name, t: t} },
			engine.Named(name+"-route-"+t.name)).WithSerdes(serde.String, serde.Bytes))
	}
	state := engine.NewKeyValueStore(m.StateStore(), serde.String, serde.Bytes)
	timeouts := engine.NewKeyValueStore(name+"-timeouts", serde.Bytes, serde.Bytes)
	out := engine.Process(in.Repartition(engine.Named(name)), func() engine.Processor[string, []byte, string, []byte] {
		return &processor[S]{m: m, stateDef: state, timeoutsDef: timeouts}
	}, engine.Named(name+"-react"), engine.WithStores(state, timeouts)).WithSerdes(serde.String, serde.Bytes)
	pass := func(string, []byte) bool { return true }
	for _, t := range m.targets {
		out.Filter(pass, engine.Named(name+"-to-"+t.name)).To(t.commandTopic, engine.Named(name+"-send-"+t.name), engine.Feedback())
	}
}

// commandID is the id of the n-th command of an instance's run: the
// process manager's name, the instance's id (escaped), the run and n. It
// is the same each time the instance reacts to the same input from the
// same state; the run (made from the input that started it) keeps the ids
// of an instance started again after End apart from its last run's, which
// the targets still remember.
func commandID(saga, instance, run string, n int64) string {
	return fmt.Sprintf("%s/%s/%s/%d", saga, url.PathEscape(instance), run, n)
}

// runOf names an instance's run by the input that started it.
func runOf(input string) string {
	h := sha256.Sum256([]byte(input))
	return hex.EncodeToString(h[:4])
}

// instanceOf is the instance a command id of the process manager names.
func instanceOf(saga, id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, saga+"/")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return "", false
	}
	inst, err := url.PathUnescape(parts[0])
	return inst, err == nil
}

// Event is what an instance reacts to.
type Event struct {
	// Instance is the instance's id: its correlation key.
	Instance string
	// Value is the event of a source (of the type its contract registered),
	// an [Outcome] or a [Timeout]. React switches on its type.
	Value any
	// Source is the name of the aggregate the event or outcome came from
	// ("" for a timeout); Type the registered name of the event's type
	// ("" for an outcome or a timeout).
	Source, Type string
	// AggregateID is the id of the aggregate the event or outcome concerns.
	AggregateID string
	// Time is the record's timestamp; for a timeout, when it was due.
	Time time.Time
	// ID names the input: "<topic>/<partition>/<offset>" of the event or
	// outcome, or "timeout/<name>/<due, Unix ms>". It is the causation id
	// of the commands sent in reaction.
	ID string
	// CorrelationID is the instance's: the correlation id of the first
	// event it took (that event's own id if it had none). Its commands
	// carry it.
	CorrelationID string
}

// Outcome is the outcome of a command an instance sent: Value of the
// Event that brings it.
type Outcome struct {
	// Target is the name of the aggregate the command went to; Command the
	// command as sent (of the type the target's contract registered).
	Target  string
	Command any
	aggregate.Outcome
}

// Timeout is a timeout that came due: Value of the Event that brings it.
type Timeout struct {
	// Name is the name it was set with; At the time it was set to.
	Name string
	At   time.Time
}

// Action is something an instance does in reaction: see [Target.Send],
// [SetTimeout], [CancelTimeout] and [End].
type Action struct {
	kind        actionKind
	target      *target
	aggregateID string
	command     any
	expected    *int64
	name        string
	at          time.Time
}

type actionKind int

const (
	actSend actionKind = iota + 1
	actSetTimeout
	actCancelTimeout
	actEnd
)

// SetTimeout sets the instance's timeout called name to come due at at (on
// Config.TimeoutClock): then React gets a [Timeout]. Setting it again
// moves it. An instance has any number of timeouts, by name.
func SetTimeout(name string, at time.Time) Action {
	return Action{kind: actSetTimeout, name: name, at: at}
}

// CancelTimeout cancels the instance's timeout called name, if it is set.
func CancelTimeout(name string) Action { return Action{kind: actCancelTimeout, name: name} }

// End ends the instance once the reaction's other actions are done,
// wherever it is in the list: the commands of the reaction are sent, and
// then its state, its timeouts and the commands it waits for are
// forgotten (their outcomes, if they come, are passed over). An event for
// it after that starts it again from the initial state, in a new run
// whose command ids differ from the last run's.
func End() Action { return Action{kind: actEnd} }

// SendOption sets a property of a command sent.
type SendOption func(*Action)

// ExpectedVersion makes the command conflict unless the aggregate is at
// version v.
func ExpectedVersion(v int64) SendOption { return func(a *Action) { a.expected = &v } }
