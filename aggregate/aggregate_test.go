package aggregate_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
)

// A counter: add n; "panic" panics in Decide; n = 13 panics in Evolve; n
// = 99 returns an event type that is not registered; n < 0 is a plain
// error.
type counterCmd struct {
	N     int  `json:"n"`
	Panic bool `json:"panic"`
}

type unregistered struct{}

func (unregistered) isEvent() {}

func counter(t *testing.T, retention time.Duration) *aggregate.Aggregate[int, counterCmd, event] {
	t.Helper()
	cmds := aggregate.NewTypes[counterCmd]()
	aggregate.Register[counterCmd](cmds, "Add")
	events := aggregate.NewTypes[event]()
	aggregate.Register[added](events, "Added")
	a, err := aggregate.New(aggregate.Config[int, counterCmd, event]{
		Name:    "counter",
		Initial: func() int { return 0 },
		Decide: func(s int, c counterCmd) ([]event, error) {
			switch {
			case c.Panic:
				panic("boom")
			case c.N < 0:
				return nil, errors.New("negative")
			case c.N == 99:
				return []event{added{N: 1}, unregistered{}}, nil
			}
			var out []event
			for range c.N {
				out = append(out, added{N: 1})
			}
			return out, nil
		},
		Evolve: func(s int, e event) int {
			if a, ok := e.(added); ok && s+a.N == 13 {
				panic("thirteen")
			}
			return s + 1
		},
		Commands: cmds, Events: events, OutcomeRetention: retention,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type counterRun struct {
	t       *testing.T
	d       *enginetest.Driver
	replies int
	events  int
}

func startCounter(t *testing.T, a *aggregate.Aggregate[int, counterCmd, event]) *counterRun {
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return &counterRun{t: t, d: enginetest.New(t, top)}
}

// pipe writes a raw command and returns its outcome and the events it
// wrote.
func (r *counterRun) pipe(key, value string, at int64, hs ...engine.Header) (aggregate.Outcome, []enginetest.Message) {
	r.t.Helper()
	var kb []byte
	if key != "" {
		kb = []byte(key)
	}
	if err := r.d.PipeBytes("counter-commands", kb, []byte(value), enginetest.At(at), hs...); err != nil {
		r.t.Fatal(err)
	}
	replies := r.d.Messages("counter-outcomes")[r.replies:]
	r.replies += len(replies)
	if len(replies) != 1 {
		r.t.Fatalf("%d outcomes, want 1", len(replies))
	}
	o, err := aggregate.DecodeOutcome(replies[0].Value)
	if err != nil {
		r.t.Fatal(err)
	}
	events := r.d.Messages("counter-events")[r.events:]
	r.events += len(events)
	return o, events
}

func id(s string) engine.Header {
	return engine.Header{Key: aggregate.HeaderCommandID, Value: []byte(s)}
}

func add(n int) string { return fmt.Sprintf(`{"type":"Add","data":{"n":%d}}`, n) }

// What the processor makes of commands it cannot run: each is rejected
// with a code that says why, recorded under its id, and changes nothing;
// the aggregate goes on.
func TestCommandsThatCannotRun(t *testing.T) {
	r := startCounter(t, counter(t, 0))
	for _, c := range []struct {
		name, key, value string
		hs               []engine.Header
		code, message    string
	}{
		{"not JSON", "c", "{", []engine.Header{id("1")}, aggregate.CodeMalformedCommand, "not a type envelope"},
		{"an unknown type", "c", `{"type":"Sub","data":{}}`, []engine.Header{id("2")}, aggregate.CodeMalformedCommand, `unknown type "Sub"`},
		{"no key", "", add(1), []engine.Header{id("3")}, aggregate.CodeNoAggregateID, "keyed by aggregate id"},
		{"a bad expected version", "c", add(1), []engine.Header{id("4"), {Key: aggregate.HeaderExpectedVersion, Value: []byte("x")}}, aggregate.CodeMalformedCommand, `"x" is not a version`},
		{"a domain error", "c", add(-1), []engine.Header{id("5")}, aggregate.CodeRejected, "negative"},
		{"Decide panics", "c", `{"type":"Add","data":{"panic":true}}`, []engine.Header{id("6")}, aggregate.CodePanicked, "boom"},
		{"Evolve panics", "c", add(13), []engine.Header{id("7")}, aggregate.CodePanicked, "thirteen"},
		{"an unregistered event", "c", add(99), []engine.Header{id("8")}, aggregate.CodeEncode, "unregistered is not a registered type"},
	} {
		o, events := r.pipe(c.key, c.value, 1, c.hs...)
		if o.Status != aggregate.Rejected || o.Rejection == nil || o.Rejection.Code != c.code || !strings.Contains(o.Rejection.Message, c.message) || len(events) > 0 {
			t.Errorf("%s: outcome %+v (rejection %+v), %d events; want rejected %s saying %q", c.name, o, o.Rejection, len(events), c.code, c.message)
		}
	}
	// The aggregate is untouched, and runs what it can.
	if o, events := r.pipe("c", add(2), 2, id("9")); o.Status != aggregate.Accepted || o.Version != 2 || len(events) != 2 {
		t.Errorf("after the rejections: %+v, %d events", o, len(events))
	}
}

// A command without an id is named by its place in the command topic.
func TestCommandWithoutID(t *testing.T) {
	r := startCounter(t, counter(t, 0))
	o, _ := r.pipe("c", add(1), 1)
	if o.CommandID != "counter-commands-0-0" || o.Status != aggregate.Accepted {
		t.Errorf("outcome %+v", o)
	}
}

// Each event carries its type, aggregate, version, command and correlation
// in headers, and the command's time.
func TestEventHeaders(t *testing.T) {
	r := startCounter(t, counter(t, 0))
	r.pipe("c", add(1), 1, id("a"))
	_, events := r.pipe("c", add(2), 5, id("b"), engine.Header{Key: aggregate.HeaderCorrelationID, Value: []byte("order-7")})
	var got []string
	for _, e := range events {
		var hs []string
		for _, h := range e.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		got = append(got, fmt.Sprintf("%s %s @%d", e.Key, strings.Join(hs, " "), e.Timestamp.Sub(enginetest.Epoch).Milliseconds()))
	}
	want := []string{
		"c oxbow-type=Added oxbow-aggregate-id=c oxbow-aggregate-version=2 oxbow-command-id=b oxbow-correlation-id=order-7 oxbow-causation-id=b @5",
		"c oxbow-type=Added oxbow-aggregate-id=c oxbow-aggregate-version=3 oxbow-command-id=b oxbow-correlation-id=order-7 oxbow-causation-id=b @5",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// Outcomes are kept for the retention (in command time): a command id
// repeated within it is a duplicate, after it a new command.
func TestOutcomeRetention(t *testing.T) {
	r := startCounter(t, counter(t, time.Minute))
	r.pipe("c", add(1), 1000, id("x"))
	if o, events := r.pipe("c", add(1), 50_000, id("x")); !o.Duplicate || len(events) != 0 || o.Version != 1 {
		t.Errorf("within the retention: %+v, %d events", o, len(events))
	}
	r.pipe("c", add(1), 70_000, id("y")) // stream time passes 61 s: x goes
	if o, events := r.pipe("c", add(1), 70_001, id("x")); o.Duplicate || len(events) != 1 || o.Version != 3 {
		t.Errorf("after the retention: %+v, %d events", o, len(events))
	}
}
