package aggregate_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
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

// With a serde of registered schemas (Types.Use): a command the serde
// cannot read is rejected as malformed, but one it cannot read because its
// registry is unreachable stops the processing (the engine then stops the
// instance) and records no outcome, so that it is decided once the
// registry is back.
func TestCommandsInAnotherFormat(t *testing.T) {
	cmds := aggregate.NewTypes[counterCmd]()
	aggregate.Register[counterCmd](cmds, "Add")
	cmds.Use(serde.Func(func(c counterCmd) ([]byte, error) { return []byte(strconv.Itoa(c.N)), nil }, func(b []byte) (counterCmd, error) {
		switch string(b) {
		case "down":
			return counterCmd{}, fmt.Errorf("registry: fetching schema 3: %w", serde.ErrUnavailable)
		case "junk":
			return counterCmd{}, errors.New("registry: payload does not match its schema 3")
		}
		n, err := strconv.Atoi(string(b))
		return counterCmd{N: n}, err
	}))
	events := aggregate.NewTypes[event]()
	aggregate.Register[added](events, "Added")
	a, err := aggregate.New(aggregate.Config[int, counterCmd, event]{
		Name: "counter", Initial: func() int { return 0 },
		Decide:   func(s int, c counterCmd) ([]event, error) { return []event{added{N: c.N}}, nil },
		Evolve:   func(s int, e event) int { return s + e.(added).N },
		Commands: cmds, Events: events,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := startCounter(t, a)
	if o, _ := r.pipe("c", "2", 1, id("a")); o.Status != aggregate.Accepted || o.Version != 1 {
		t.Fatalf("a command in the format: %+v", o)
	}
	if o, _ := r.pipe("c", "junk", 2, id("b")); o.Status != aggregate.Rejected || o.Rejection.Code != aggregate.CodeMalformedCommand {
		t.Fatalf("a command the serde cannot read: %+v", o)
	}
	err = r.d.PipeBytes("counter-commands", []byte("c"), []byte("down"), enginetest.At(3), id("c"))
	if !errors.Is(err, serde.ErrUnavailable) {
		t.Fatalf("a command read while the registry is down: %v, want serde.ErrUnavailable", err)
	}
	if n := len(r.d.Messages("counter-outcomes")); n != r.replies {
		t.Errorf("%d outcomes after it, want none", n-r.replies)
	}
	// Not a registered type either way.
	if _, err := cmds.Encode(counterCmd{N: 1}); err != nil {
		t.Error(err)
	}
	bad := aggregate.NewTypes[event]()
	aggregate.Register[added](bad, "Added")
	bad.Use(serde.Func(nil, func([]byte) (event, error) { return unregistered{}, nil }))
	if _, err := bad.Decode([]byte("x")); err == nil || !strings.Contains(err.Error(), "not a registered type") {
		t.Errorf("a decoded value of a type not registered: %v", err)
	}
	none := aggregate.NewTypes[event]()
	aggregate.Register[added](none, "Added")
	none.Use(nil)
	if _, err := aggregate.New(aggregate.Config[int, counterCmd, event]{Name: "x", Initial: func() int { return 0 },
		Decide: func(int, counterCmd) ([]event, error) { return nil, nil }, Evolve: func(s int, _ event) int { return s },
		Commands: aggregate.NewTypes[counterCmd](), Events: none}); err == nil || !strings.Contains(err.Error(), "serde is nil") {
		t.Errorf("Use(nil): %v", err)
	}
}
