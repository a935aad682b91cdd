// Package sagatest tests process managers given, when, then: given the
// events an instance already took, when an event comes (or the outcome of
// a command it sent, or time passes), then it sends these commands. Each
// scenario runs the process manager's real processor in the engine's
// in-memory test driver, with its repartition topic, stores, headers and
// command ids as on Kafka.
//
//	f := sagatest.For(t, restock)
//	shoes := sagatest.From(inv)
//	f.Given(shoes.Event("blue", inventory.ShipmentReceived{Quantity: 2})).
//		When(shoes.Event("blue", inventory.PairSold{})).
//		ThenSends(orders.Send("blue", OrderPairs{Quantity: 10}))
//	f.WhenOutcome(aggregate.Rejected, "discontinued").
//		ThenSends(…)
//	f.WhenTime(24 * time.Hour).ThenTimeouts("blue", nil)
package sagatest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/saga"
)

// Fixture runs one process manager in a test driver. Its clocks start at
// enginetest.Epoch; each input is a millisecond after the one before, on
// the wall clock as in its timestamp.
type Fixture[S any] struct {
	t        testing.TB
	m        *saga.Manager[S]
	d        *enginetest.Driver
	now      time.Time
	versions map[string]int64 // by source and aggregate id
	targets  []saga.TargetInfo
	read     map[string]int // records of each command topic looked at
	// unanswered are the commands sent that no outcome was given to yet,
	// oldest first.
	unanswered []Sent
}

// Sent is a command the process manager sent.
type Sent struct {
	Target, AggregateID, CommandID, CorrelationID, CausationID string
	Command                                                    any
}

func (s Sent) String() string {
	return fmt.Sprintf("send %T%+v to %s %q", s.Command, s.Command, s.Target, s.AggregateID)
}

// For starts a fixture for the process manager, with a driver of its own.
func For[S any](t testing.TB, m *saga.Manager[S]) *Fixture[S] {
	t.Helper()
	b := engine.NewBuilder()
	m.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return &Fixture[S]{t: t, m: m, d: enginetest.New(t, top), now: enginetest.Epoch, versions: map[string]int64{},
		targets: m.Targets(), read: map[string]int{}}
}

// Driver is the fixture's test driver.
func (f *Fixture[S]) Driver() *enginetest.Driver { return f.d }

// Input is an event for a process manager: see [Source.Event].
type Input struct {
	source, topic, aggregateID, typeName string
	value                                []byte
	err                                  error
}

// Source makes inputs of one source's events: see [From].
type Source[C, E any] struct {
	c   aggregate.Contract[C, E]
	err error
}

// From makes inputs from the events of the contract's aggregate.
func From[C, E any](c aggregate.Contract[C, E]) *Source[C, E] {
	c, err := c.Check()
	return &Source[C, E]{c: c, err: err}
}

// Event is an event of the aggregate aggregateID. The fixture gives it the
// aggregate's next version, as the aggregate would.
func (s *Source[C, E]) Event(aggregateID string, ev E) Input {
	if s.err != nil {
		return Input{err: s.err}
	}
	in := Input{source: s.c.Name, topic: s.c.EventTopic, aggregateID: aggregateID}
	if in.typeName, in.err = s.c.Events.NameOf(ev); in.err == nil {
		in.value, in.err = s.c.Events.Encode(ev)
	}
	return in
}

// Given gives the process manager events that happened before the
// scenario; the commands they make it send are taken as sent, without an
// outcome yet (see [Fixture.WhenOutcome]).
func (f *Fixture[S]) Given(inputs ...Input) *Fixture[S] {
	f.t.Helper()
	for _, in := range inputs {
		f.pipe(in)
	}
	f.collect()
	return f
}

// When gives the process manager an event and returns what it sent.
func (f *Fixture[S]) When(in Input) *Result[S] {
	f.t.Helper()
	f.pipe(in)
	return &Result[S]{f: f, what: fmt.Sprintf("%s's event %s on %q", in.source, in.typeName, in.aggregateID), Sent: f.collect()}
}

// WhenOutcome answers the oldest command sent that has no outcome yet with
// the status (and for a rejection, the code), as its aggregate would, and
// returns what the process manager sent in reaction.
func (f *Fixture[S]) WhenOutcome(status aggregate.Status, rejectionCode string) *Result[S] {
	f.t.Helper()
	o := aggregate.Outcome{Status: status}
	if status == aggregate.Rejected {
		o.Rejection = &aggregate.Rejection{Code: rejectionCode, Message: "rejected by the scenario"}
	}
	return f.WhenOutcomeIs(o)
}

// WhenOutcomeIs answers the oldest command sent that has no outcome yet
// with o (its command and aggregate ids filled in): an outcome with a
// version, a conflict's expected version, a rejection's message.
func (f *Fixture[S]) WhenOutcomeIs(o aggregate.Outcome) *Result[S] {
	f.t.Helper()
	status, rejectionCode := o.Status, ""
	if o.Rejection != nil {
		rejectionCode = o.Rejection.Code
	}
	if len(f.unanswered) == 0 {
		f.t.Fatalf("sagatest: an outcome (%s) but no command waits for one", status)
	}
	s := f.unanswered[0]
	f.unanswered = f.unanswered[1:]
	o.CommandID, o.AggregateID = s.CommandID, s.AggregateID
	value, err := json.Marshal(o)
	if err != nil {
		f.t.Fatal(err)
	}
	topic := ""
	for _, t := range f.targets {
		if t.Name == s.Target {
			topic = t.ReplyTopic
		}
	}
	f.tick()
	hs := []engine.Header{{Key: aggregate.HeaderCommandID, Value: []byte(s.CommandID)}, {Key: aggregate.HeaderCorrelationID, Value: []byte(s.CorrelationID)}}
	if err := f.d.PipeBytes(topic, []byte(s.CommandID), value, f.now, hs...); err != nil {
		f.t.Fatalf("sagatest: the outcome of %s: %v", s, err)
	}
	what := fmt.Sprintf("the outcome %s of %s", status, s)
	if rejectionCode != "" {
		what = fmt.Sprintf("the outcome %s (%s) of %s", status, rejectionCode, s)
	}
	return &Result[S]{f: f, what: what, Sent: f.collect()}
}

// WhenTime lets d pass (on the wall clock and for the time of the next
// inputs), runs the timeouts that come due, and returns what the
// process manager sent. (Timeouts on stream time come due with the next
// input after their time.)
func (f *Fixture[S]) WhenTime(d time.Duration) *Result[S] {
	f.t.Helper()
	f.now = f.now.Add(d)
	if err := f.d.TryAdvanceWallClock(d); err != nil {
		f.t.Fatalf("sagatest: %v passing: %v", d, err)
	}
	return &Result[S]{f: f, what: fmt.Sprintf("%v passing", d), Sent: f.collect()}
}

// tick moves both clocks a millisecond on.
func (f *Fixture[S]) tick() {
	f.t.Helper()
	f.now = f.now.Add(time.Millisecond)
	if err := f.d.TryAdvanceWallClock(time.Millisecond); err != nil {
		f.t.Fatalf("sagatest: a millisecond passing: %v", err)
	}
}

func (f *Fixture[S]) pipe(in Input) {
	f.t.Helper()
	if in.err != nil {
		f.t.Fatalf("sagatest: an input: %v", in.err)
	}
	k := in.source + "\x00" + in.aggregateID
	f.versions[k]++
	f.tick()
	hs := []engine.Header{
		{Key: aggregate.HeaderType, Value: []byte(in.typeName)},
		{Key: aggregate.HeaderAggregateID, Value: []byte(in.aggregateID)},
		{Key: aggregate.HeaderAggregateVersion, Value: []byte(strconv.FormatInt(f.versions[k], 10))},
	}
	if err := f.d.PipeBytes(in.topic, []byte(in.aggregateID), in.value, f.now, hs...); err != nil {
		f.t.Fatalf("sagatest: %s's event %s on %q: %v", in.source, in.typeName, in.aggregateID, err)
	}
}

// collect reads the commands sent since it last looked, in the order each
// instance sent them, and keeps them as waiting for an outcome.
func (f *Fixture[S]) collect() []Sent {
	f.t.Helper()
	var out []Sent
	for _, t := range f.targets {
		msgs := f.d.Messages(t.CommandTopic)[f.read[t.CommandTopic]:]
		f.read[t.CommandTopic] += len(msgs)
		for _, m := range msgs {
			cmd, err := t.DecodeCommand(m.Value)
			if err != nil {
				f.t.Fatalf("sagatest: a command to %s: %v", t.Name, err)
			}
			s := Sent{Target: t.Name, AggregateID: string(m.Key), Command: cmd}
			for _, h := range m.Headers {
				switch h.Key {
				case aggregate.HeaderCommandID:
					s.CommandID = string(h.Value)
				case aggregate.HeaderCorrelationID:
					s.CorrelationID = string(h.Value)
				case aggregate.HeaderCausationID:
					s.CausationID = string(h.Value)
				}
			}
			out = append(out, s)
		}
	}
	// The targets' topics were read one after the other: the count that
	// ends each command id gives back the order of sending.
	slices.SortStableFunc(out, func(a, b Sent) int { return cmp.Compare(sentCount(a.CommandID), sentCount(b.CommandID)) })
	f.unanswered = append(f.unanswered, out...)
	return out
}

// sentCount is the count that ends a process manager's command id.
func sentCount(id string) int {
	n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:])
	return n
}

// Result is what the process manager sent in reaction to one input.
type Result[S any] struct {
	f    *Fixture[S]
	what string
	// Sent are the commands it sent, in the order sent.
	Sent []Sent
}

// And goes on with the scenario.
func (r *Result[S]) And() *Fixture[S] { return r.f }

// ThenSends checks that the process manager sent exactly these commands
// (made with Target.Send), each with an id, a correlation id and a
// causation id.
func (r *Result[S]) ThenSends(want ...saga.Action) *Result[S] {
	t := r.f.t
	t.Helper()
	var wants []Sent
	for _, a := range want {
		target, id, cmd, ok := a.Command()
		if !ok {
			t.Fatalf("sagatest: ThenSends is given %v, which sends nothing", a)
		}
		wants = append(wants, Sent{Target: target, AggregateID: id, Command: cmd})
	}
	got := make([]Sent, len(r.Sent))
	for i, s := range r.Sent {
		if s.CommandID == "" || s.CorrelationID == "" || s.CausationID == "" {
			t.Errorf("after %s: %s lacks an id (command %q, correlation %q, causation %q)", r.what, s, s.CommandID, s.CorrelationID, s.CausationID)
		}
		got[i] = Sent{Target: s.Target, AggregateID: s.AggregateID, Command: s.Command}
	}
	if !reflect.DeepEqual(got, wants) && !(len(got) == 0 && len(wants) == 0) {
		t.Errorf("after %s: sent\n  %s\nwant\n  %s", r.what, list(got), list(wants))
	}
	return r
}

// ThenNothing checks that the process manager sent no command.
func (r *Result[S]) ThenNothing() *Result[S] {
	r.f.t.Helper()
	return r.ThenSends()
}

// ThenState checks an instance's state.
func (r *Result[S]) ThenState(instance string, want S) *Result[S] {
	t := r.f.t
	t.Helper()
	in, ok := r.f.Instance(instance)
	if !ok {
		t.Errorf("after %s: instance %q has no state (it has ended or never started), want %+v", r.what, instance, want)
		return r
	}
	if !reflect.DeepEqual(in.State, want) {
		t.Errorf("after %s: instance %q: state %+v, want %+v", r.what, instance, in.State, want)
	}
	return r
}

// ThenTimeouts checks an instance's timeouts: exactly these, by name,
// due at these times.
func (r *Result[S]) ThenTimeouts(instance string, want map[string]time.Time) *Result[S] {
	t := r.f.t
	t.Helper()
	in, _ := r.f.Instance(instance)
	got := in.Timeouts
	if len(got) == 0 && len(want) == 0 {
		return r
	}
	same := len(got) == len(want)
	for n, at := range want {
		same = same && got[n].Equal(at)
	}
	if !same {
		t.Errorf("after %s: instance %q: timeouts %v, want %v", r.what, instance, got, want)
	}
	return r
}

// ThenEnded checks that an instance has no state: it ended (or never
// started).
func (r *Result[S]) ThenEnded(instance string) *Result[S] {
	t := r.f.t
	t.Helper()
	if in, ok := r.f.Instance(instance); ok {
		t.Errorf("after %s: instance %q has not ended: state %+v", r.what, instance, in.State)
	}
	return r
}

// Instance is an instance as the process manager keeps it (false: it has
// no state).
func (f *Fixture[S]) Instance(id string) (saga.Instance[S], bool) {
	f.t.Helper()
	st, err := f.d.LocalStore(f.m.StateStore())
	if err != nil {
		f.t.Fatal(err)
	}
	e, ok, err := st.Get([]byte(id))
	if err != nil {
		f.t.Fatal(err)
	}
	if !ok {
		return saga.Instance[S]{}, false
	}
	in, err := f.m.DecodeInstance(e.Value)
	if err != nil {
		f.t.Fatal(err)
	}
	return in, true
}

func list(ss []Sent) string {
	if len(ss) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	return strings.Join(parts, "\n  ")
}
