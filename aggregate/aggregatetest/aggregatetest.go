// Package aggregatetest tests aggregates given, when, then: given the
// events an aggregate already has, when a command comes, then these events
// (or this rejection, or a conflict). Each scenario runs the aggregate's
// real command processor in the engine's in-memory test driver, so what
// it checks is what runs on Kafka: the envelopes and headers of the events,
// versions, idempotency by command id, and the outcome a Client would get.
//
//	aggregatetest.For(t, agg).
//		Given("blue", inventory.ShipmentReceived{Quantity: 1}).
//		When(inventory.SellPair{Price: 100}).
//		ThenEvents(inventory.PairSold{Price: 100})
package aggregatetest

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
)

// Fixture runs one aggregate in a test driver.
type Fixture[S, C, E any] struct {
	t   testing.TB
	a   *aggregate.Aggregate[S, C, E]
	d   *enginetest.Driver
	now int64 // ms after enginetest.Epoch
	// read: how many records of the event and reply topics were looked at
	events, replies int
}

// For starts a fixture for the aggregate, with a driver of its own.
func For[S, C, E any](t testing.TB, a *aggregate.Aggregate[S, C, E]) *Fixture[S, C, E] {
	t.Helper()
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return &Fixture[S, C, E]{t: t, a: a, d: enginetest.New(t, top)}
}

// Driver is the fixture's test driver.
func (f *Fixture[S, C, E]) Driver() *enginetest.Driver { return f.d }

// Scenario is one aggregate of a fixture.
type Scenario[S, C, E any] struct {
	f  *Fixture[S, C, E]
	id string
}

// Given starts a scenario for the aggregate with the given id, which has
// these events (its state is their fold, its version their number).
func (f *Fixture[S, C, E]) Given(id string, events ...E) *Scenario[S, C, E] {
	f.t.Helper()
	if len(events) > 0 {
		version, state := f.a.Fold(events...)
		b, err := f.a.EncodeState(version, state)
		if err != nil {
			f.t.Fatalf("aggregatetest: the state of %q: %v", id, err)
		}
		st, err := f.d.LocalStore(f.a.StateStore())
		if err != nil {
			f.t.Fatal(err)
		}
		if err := st.Put([]byte(id), b, enginetest.Epoch.UnixMilli()+f.now); err != nil {
			f.t.Fatal(err)
		}
	}
	return &Scenario[S, C, E]{f: f, id: id}
}

// Result is what a command did.
type Result[S, C, E any] struct {
	s       *Scenario[S, C, E]
	cmd     C
	Outcome aggregate.Outcome
	// Events are the events the command wrote to the event topic.
	Events []E
}

// When submits a command to the scenario's aggregate, with the options a
// Client takes (CommandID, ExpectedVersion, …), and returns what it did.
// Outcomes come back as a Client gets them.
func (s *Scenario[S, C, E]) When(cmd C, opts ...aggregate.SubmitOption) *Result[S, C, E] {
	f := s.f
	f.t.Helper()
	o := aggregate.SubmitOptions(opts...)
	if o.ID == "" {
		o.ID = aggregate.NewCommandID()
	}
	value, err := f.a.CommandSerde().Encode(cmd)
	if err != nil {
		f.t.Fatalf("aggregatetest: encode %T: %v", cmd, err)
	}
	hs := []engine.Header{{Key: aggregate.HeaderCommandID, Value: []byte(o.ID)}}
	if o.ExpectedVersion != nil {
		hs = append(hs, engine.Header{Key: aggregate.HeaderExpectedVersion, Value: []byte(strconv.FormatInt(*o.ExpectedVersion, 10))})
	}
	if o.CorrelationID != "" {
		hs = append(hs, engine.Header{Key: aggregate.HeaderCorrelationID, Value: []byte(o.CorrelationID)})
	}
	f.now++
	commands, eventTopic, replyTopic := f.a.Topics()
	if err := f.d.PipeBytes(commands, []byte(s.id), value, enginetest.Epoch.Add(time.Duration(f.now)*time.Millisecond), hs...); err != nil {
		f.t.Fatalf("aggregatetest: command %T: %v", cmd, err)
	}
	r := &Result[S, C, E]{s: s, cmd: cmd}
	events := f.d.Messages(eventTopic)[f.events:]
	f.events += len(events)
	for _, m := range events {
		e, err := f.a.EventSerde().Decode(m.Value)
		if err != nil {
			f.t.Fatalf("aggregatetest: an event of %T: %v", cmd, err)
		}
		r.Events = append(r.Events, e)
	}
	replies := f.d.Messages(replyTopic)[f.replies:]
	f.replies += len(replies)
	if len(replies) != 1 {
		f.t.Fatalf("aggregatetest: command %T gave %d outcomes, want 1", cmd, len(replies))
	}
	if r.Outcome, err = aggregate.DecodeOutcome(replies[0].Value); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// And is another command to the same aggregate.
func (r *Result[S, C, E]) And() *Scenario[S, C, E] { return r.s }

// ThenEvents checks that the command was accepted with exactly these
// events.
func (r *Result[S, C, E]) ThenEvents(want ...E) *Result[S, C, E] {
	t := r.s.f.t
	t.Helper()
	if r.Outcome.Status != aggregate.Accepted {
		t.Errorf("%T on %q: %s, want accepted with %s", r.cmd, r.s.id, describe(r.Outcome), list(want))
		return r
	}
	if len(want) == 0 && len(r.Events) == 0 {
		return r
	}
	if !reflect.DeepEqual(r.Events, want) {
		t.Errorf("%T on %q: events\n  %s\nwant\n  %s", r.cmd, r.s.id, list(r.Events), list(want))
	}
	return r
}

// ThenRejected checks that the command was rejected with the code.
func (r *Result[S, C, E]) ThenRejected(code string) *Result[S, C, E] {
	t := r.s.f.t
	t.Helper()
	if r.Outcome.Status != aggregate.Rejected || r.Outcome.Rejection == nil || r.Outcome.Rejection.Code != code {
		t.Errorf("%T on %q: %s, want rejected (%s)", r.cmd, r.s.id, describe(r.Outcome), code)
	}
	if len(r.Events) > 0 {
		t.Errorf("%T on %q: rejected but wrote events %s", r.cmd, r.s.id, list(r.Events))
	}
	return r
}

// ThenConflict checks that the command was a version conflict.
func (r *Result[S, C, E]) ThenConflict() *Result[S, C, E] {
	t := r.s.f.t
	t.Helper()
	if r.Outcome.Status != aggregate.Conflict {
		t.Errorf("%T on %q: %s, want a conflict", r.cmd, r.s.id, describe(r.Outcome))
	}
	if len(r.Events) > 0 {
		t.Errorf("%T on %q: a conflict but wrote events %s", r.cmd, r.s.id, list(r.Events))
	}
	return r
}

// ThenVersion checks the aggregate's version after the command.
func (r *Result[S, C, E]) ThenVersion(v int64) *Result[S, C, E] {
	t := r.s.f.t
	t.Helper()
	if r.Outcome.Version != v {
		t.Errorf("%T on %q: version %d, want %d", r.cmd, r.s.id, r.Outcome.Version, v)
	}
	return r
}

// ThenState checks the aggregate's stored state after the command.
func (r *Result[S, C, E]) ThenState(want S) *Result[S, C, E] {
	f := r.s.f
	f.t.Helper()
	st, err := f.d.LocalStore(f.a.StateStore())
	if err != nil {
		f.t.Fatal(err)
	}
	e, ok, err := st.Get([]byte(r.s.id))
	if err != nil {
		f.t.Fatal(err)
	}
	var got S
	if ok {
		if _, got, err = f.a.DecodeState(e.Value); err != nil {
			f.t.Fatal(err)
		}
	} else {
		_, got = f.a.Fold()
	}
	if !reflect.DeepEqual(got, want) {
		f.t.Errorf("%T on %q: state %+v, want %+v", r.cmd, r.s.id, got, want)
	}
	return r
}

func describe(o aggregate.Outcome) string {
	switch o.Status {
	case aggregate.Rejected:
		if o.Rejection != nil {
			return fmt.Sprintf("rejected (%s: %s)", o.Rejection.Code, o.Rejection.Message)
		}
	case aggregate.Conflict:
		if o.ExpectedVersion != nil {
			return fmt.Sprintf("a conflict (expected version %d, at %d)", *o.ExpectedVersion, o.Version)
		}
	}
	return fmt.Sprintf("%s at version %d", o.Status, o.Version)
}

func list[E any](es []E) string {
	if len(es) == 0 {
		return "no events"
	}
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("\n  ")
		}
		fmt.Fprintf(&b, "%T%+v", e, e)
	}
	return b.String()
}
