package saga_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/saga"
	"github.com/oxbow-dev/oxbow/saga/sagatest"
)

// A supplier takes orders of pairs of a shoe (its aggregate id), and
// refuses those of a shoe it no longer makes.
type (
	supplierCommand interface{ isSupplierCommand() }
	OrderPairs      struct {
		Quantity int `json:"quantity"`
	}
	Discontinue   struct{}
	supplierEvent interface{ isSupplierEvent() }
	PairsOrdered  struct{ Quantity int }
	Discontinued  struct{}
	supplierState struct{ Discontinued bool }
	restockState  struct {
		InStock  int  `json:"inStock"`
		Ordered  bool `json:"ordered"`
		Attempts int  `json:"attempts"`
	}
)

func (OrderPairs) isSupplierCommand()  {}
func (Discontinue) isSupplierCommand() {}
func (PairsOrdered) isSupplierEvent()  {}
func (Discontinued) isSupplierEvent()  {}

func newSupplier(t testing.TB) *aggregate.Aggregate[supplierState, supplierCommand, supplierEvent] {
	t.Helper()
	cmds := aggregate.NewTypes[supplierCommand]()
	aggregate.Register[OrderPairs](cmds, "OrderPairs")
	aggregate.Register[Discontinue](cmds, "Discontinue")
	evs := aggregate.NewTypes[supplierEvent]()
	aggregate.Register[PairsOrdered](evs, "PairsOrdered")
	aggregate.Register[Discontinued](evs, "Discontinued")
	a, err := aggregate.New(aggregate.Config[supplierState, supplierCommand, supplierEvent]{
		Name:    "supplier",
		Initial: func() supplierState { return supplierState{} },
		Decide: func(s supplierState, c supplierCommand) ([]supplierEvent, error) {
			switch c := c.(type) {
			case OrderPairs:
				if s.Discontinued {
					return nil, aggregate.Reject("discontinued", "no longer made")
				}
				return []supplierEvent{PairsOrdered(c)}, nil
			case Discontinue:
				return []supplierEvent{Discontinued{}}, nil
			}
			return nil, errors.New("unknown command")
		},
		Evolve: func(s supplierState, e supplierEvent) supplierState {
			if _, ok := e.(Discontinued); ok {
				s.Discontinued = true
			}
			return s
		},
		Commands: cmds,
		Events:   evs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newInventory(t testing.TB) *aggregate.Aggregate[inventory.State, inventory.Command, inventory.Event] {
	t.Helper()
	a, err := inventory.New("inventory")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// restock orders 10 pairs of a shoe from the supplier when its stock falls
// below 2, waits a day for them, orders again if they do not come (three
// times at most), and stops looking after the shoe if the supplier
// refuses.
func newRestock(t testing.TB, inv aggregate.Contract[inventory.Command, inventory.Event], supplier *saga.Target[supplierCommand], clock saga.Clock) *saga.Manager[restockState] {
	t.Helper()
	m, err := saga.New(saga.Config[restockState]{
		Name: "restock",
		Sources: []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) {
			return m.AggregateID, true
		})},
		Targets:      []saga.Destination{supplier},
		Initial:      func() restockState { return restockState{} },
		TimeoutClock: clock,
		React: func(s restockState, ev saga.Event) (restockState, []saga.Action, error) {
			order := func() []saga.Action {
				s.Ordered = true
				s.Attempts++
				return []saga.Action{supplier.Send(ev.Instance, OrderPairs{Quantity: 10}), saga.SetTimeout("delivery", ev.Time.Add(24*time.Hour))}
			}
			switch v := ev.Value.(type) {
			case inventory.ShipmentReceived:
				s.InStock += v.Quantity
				if s.Ordered {
					s.Ordered, s.Attempts = false, 0
					return s, []saga.Action{saga.CancelTimeout("delivery")}, nil
				}
			case inventory.PairSold:
				s.InStock--
				if s.InStock < 2 && !s.Ordered {
					return s, order(), nil
				}
			case inventory.PairReturned:
				s.InStock++
			case saga.Outcome:
				if v.Status == aggregate.Rejected && v.Rejection.Code == "discontinued" {
					return s, []saga.Action{saga.End()}, nil
				}
			case saga.Timeout:
				if s.Attempts >= 3 {
					return s, []saga.Action{saga.End()}, nil
				}
				return s, order(), nil
			}
			return s, nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRestockGivenWhenThen(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	f := sagatest.For(t, newRestock(t, inv, supplier, saga.WallClock))
	shoes := sagatest.From(inv)
	f.Given(shoes.Event("blue", inventory.ShipmentReceived{Quantity: 3}),
		shoes.Event("blue", inventory.PairSold{})).
		When(shoes.Event("blue", inventory.PairSold{})).
		ThenSends(supplier.Send("blue", OrderPairs{Quantity: 10})).
		ThenState("blue", restockState{InStock: 1, Ordered: true, Attempts: 1}).
		ThenTimeouts("blue", map[string]time.Time{"delivery": enginetest.Epoch.Add(24*time.Hour + 3*time.Millisecond)})
	// Another sale while the order is out orders nothing more.
	f.When(shoes.Event("blue", inventory.PairSold{})).ThenNothing()
	f.WhenOutcomeIs(aggregate.Outcome{Status: aggregate.Accepted, Version: 1}).ThenNothing()
	// No delivery in a day: order again, and again, then give up.
	f.WhenTime(24 * time.Hour).ThenSends(supplier.Send("blue", OrderPairs{Quantity: 10}))
	f.WhenTime(24*time.Hour).ThenSends(supplier.Send("blue", OrderPairs{Quantity: 10})).
		ThenState("blue", restockState{InStock: 0, Ordered: true, Attempts: 3})
	f.WhenTime(24 * time.Hour).ThenNothing().ThenEnded("blue")

	// Another shoe: the delivery comes, and cancels the timeout.
	f.Given(shoes.Event("red", inventory.ShipmentReceived{Quantity: 1})).
		When(shoes.Event("red", inventory.PairSold{})).
		ThenSends(supplier.Send("red", OrderPairs{Quantity: 10}))
	f.When(shoes.Event("red", inventory.ShipmentReceived{Quantity: 10})).ThenNothing().
		ThenState("red", restockState{InStock: 10}).
		ThenTimeouts("red", nil)
	f.WhenTime(48 * time.Hour).ThenNothing()

	// A third: the supplier refuses; the instance ends.
	f.Given(shoes.Event("green", inventory.ShipmentReceived{Quantity: 1}),
		shoes.Event("green", inventory.PairSold{}))
	// Blue's second and third orders (blue has ended: their outcomes are
	// passed over) and red's are still unanswered.
	for range 3 {
		f.WhenOutcome(aggregate.Accepted, "").ThenNothing()
	}
	f.WhenOutcome(aggregate.Rejected, "discontinued").ThenNothing().ThenEnded("green")
}

// An instance that is never started leaves nothing in the store: an event
// that changes nothing of the initial state and does nothing is passed
// over.
func TestEventsThatStartNothingKeepNothing(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	m, err := saga.New(saga.Config[restockState]{
		Name: "watch",
		Sources: []saga.Source{saga.On(inv, func(e inventory.Event, m saga.Meta) (string, bool) {
			return m.AggregateID, true
		})},
		Targets: []saga.Destination{supplier},
		Initial: func() restockState { return restockState{} },
		React: func(s restockState, ev saga.Event) (restockState, []saga.Action, error) {
			if _, ok := ev.Value.(inventory.PairReturned); ok {
				s.InStock++
			}
			return s, nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := sagatest.For(t, m)
	shoes := sagatest.From(inv)
	f.When(shoes.Event("blue", inventory.PairSold{})).ThenNothing().ThenEnded("blue")
	f.When(shoes.Event("blue", inventory.PairReturned{})).ThenState("blue", restockState{InStock: 1})
}

// The commands carry ids made from the instance and a count, the
// instance's correlation id (its first event's) and as causation the place
// of the event reacted to.
func TestCommandHeaders(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	f := sagatest.For(t, newRestock(t, inv, supplier, saga.WallClock))
	shoes := sagatest.From(inv)
	f.Given(shoes.Event("a/b c", inventory.ShipmentReceived{Quantity: 1}))
	r := f.When(shoes.Event("a/b c", inventory.PairSold{}))
	r2 := f.WhenTime(24 * time.Hour)
	if len(r.Sent) != 1 || len(r2.Sent) != 1 {
		t.Fatalf("sent %v and %v, want one command each", r.Sent, r2.Sent)
	}
	s, s2 := r.Sent[0], r2.Sent[0]
	in, _ := f.Instance("a/b c")
	if want := "restock/a%2Fb%20c/" + in.Run + "/"; len(in.Run) != 8 || s.CommandID != want+"1" || s2.CommandID != want+"2" {
		t.Errorf("command ids %q and %q, want %s1 and …2 (the run %q of 8 hex digits)", s.CommandID, s2.CommandID, want, in.Run)
	}
	if s.CorrelationID != "inventory-events/0/0" || s2.CorrelationID != s.CorrelationID {
		t.Errorf("correlation ids %q and %q, want the first event's place, inventory-events/0/0", s.CorrelationID, s2.CorrelationID)
	}
	if s.CausationID != "inventory-events/0/1" || !strings.HasPrefix(s2.CausationID, "timeout/delivery/") {
		t.Errorf("causation ids %q and %q, want inventory-events/0/1 and timeout/delivery/…", s.CausationID, s2.CausationID)
	}
	// The outcome of the first order comes back through its id: the
	// instance no longer waits for it.
	f.WhenOutcome(aggregate.Accepted, "")
	in, ok := f.Instance("a/b c")
	if !ok || len(in.Pending) != 1 || in.Pending[s2.CommandID].Target != "supplier" {
		t.Errorf("pending after the first outcome: %+v, want only the second order", in.Pending)
	}
}

// Timeouts on stream time come due with the first event after them.
func TestStreamTimeTimeouts(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	f := sagatest.For(t, newRestock(t, inv, supplier, saga.StreamTime))
	shoes := sagatest.From(inv)
	f.Given(shoes.Event("blue", inventory.ShipmentReceived{Quantity: 1})).
		When(shoes.Event("blue", inventory.PairSold{})).
		ThenSends(supplier.Send("blue", OrderPairs{Quantity: 10}))
	f.WhenTime(48 * time.Hour).ThenNothing() // the wall clock does not count
	// An event of another shoe moves stream time past blue's deadline.
	f.When(shoes.Event("red", inventory.PairReturned{})).
		ThenSends(supplier.Send("blue", OrderPairs{Quantity: 10}))
}

// The whole loop in one application: the inventory and the supplier
// decide, the process manager reacts to the inventory's events and the
// supplier's outcomes.
func TestLoopThroughAggregates(t *testing.T) {
	invAgg, supAgg := newInventory(t), newSupplier(t)
	inv := invAgg.Contract()
	supplier := saga.To(supAgg.Contract())
	m := newRestock(t, inv, supplier, saga.WallClock)
	b := engine.NewBuilder()
	invAgg.AddTo(b)
	supAgg.AddTo(b)
	m.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	// What decides makes the application exactly once by default.
	if got, want := top.Decides(), []string{"aggregate " + invAgg.Name(), "aggregate " + supAgg.Name(), "process manager restock"}; !slices.Equal(got, want) {
		t.Errorf("the topology decides %v, want %v", got, want)
	}
	d := enginetest.New(t, top)
	cmd := func(a interface {
		CommandSerde() serde.Serde[inventory.Command]
	}, id string, c inventory.Command) {
		t.Helper()
		v, err := a.CommandSerde().Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.PipeBytes("inventory-commands", []byte(id), v, d.Now()); err != nil {
			t.Fatal(err)
		}
	}
	cmd(invAgg, "blue", inventory.ReceiveShipment{Quantity: 2, UnitCost: 100})
	cmd(invAgg, "blue", inventory.SellPair{Price: 200})
	orders := d.Messages("supplier-events")
	if len(orders) != 1 {
		t.Fatalf("the supplier has %d events after the stock fell to 1, want 1 (an order)", len(orders))
	}
	// Discontinued: the next order is refused, and the instance ends.
	dv, err := supAgg.CommandSerde().Encode(Discontinue{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.PipeBytes("supplier-commands", []byte("green"), dv, d.Now()); err != nil {
		t.Fatal(err)
	}
	cmd(invAgg, "green", inventory.ReceiveShipment{Quantity: 1, UnitCost: 100})
	cmd(invAgg, "green", inventory.SellPair{Price: 200})
	var rejected int
	for _, msg := range d.Messages("supplier-outcomes") {
		o, err := aggregate.DecodeOutcome(msg.Value)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == aggregate.Rejected && o.AggregateID == "green" {
			rejected++
		}
	}
	if rejected != 1 {
		t.Errorf("%d rejected orders for green, want 1", rejected)
	}
	st, err := d.LocalStore(m.StateStore())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := st.Get([]byte("green")); ok {
		t.Error("green's instance has not ended after the refusal")
	}
	e, ok, err := st.Get([]byte("blue"))
	if err != nil || !ok {
		t.Fatalf("blue's instance: %v %v", ok, err)
	}
	in, err := m.DecodeInstance(e.Value)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != (restockState{InStock: 1, Ordered: true, Attempts: 1}) || len(in.Pending) != 0 {
		t.Errorf("blue: %+v, want 1 in stock, ordered once, the order's outcome taken", in)
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	inv := newInventory(t).Contract()
	_, err := saga.New(saga.Config[restockState]{
		Name:    "a/b",
		Sources: []saga.Source{saga.On[inventory.Command, inventory.Event](inv, nil), saga.On(aggregate.Contract[inventory.Command, inventory.Event]{}, func(inventory.Event, saga.Meta) (string, bool) { return "", false })},
		Targets: []saga.Destination{saga.To(inv), saga.To(inv)},
	})
	if err == nil {
		t.Fatal("New accepts a definition with every problem")
	}
	for _, want := range []string{"slash", "Initial and React", "correlate function is nil", "Name is empty", `target "inventory" is given twice`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// A reaction that fails — an error, a panic, a command to an aggregate
// that is not a target — does nothing: nothing is sent, the state stays,
// and the error is the application's processing error.
func TestFailedReactionsDoNothing(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	stranger := saga.To(newInventory(t).Contract())
	m, err := saga.New(saga.Config[restockState]{
		Name:    "fail",
		Sources: []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return m.AggregateID, true })},
		Targets: []saga.Destination{supplier},
		Initial: func() restockState { return restockState{} },
		React: func(s restockState, ev saga.Event) (restockState, []saga.Action, error) {
			s.InStock++
			sent := supplier.Send(ev.Instance, OrderPairs{Quantity: 1})
			switch v := ev.Value.(type) {
			case inventory.PairReturned:
				return s, []saga.Action{sent}, errors.New("no returns here")
			case inventory.PairSold:
				panic("sold")
			case inventory.ShipmentReceived:
				if v.Quantity == 2 {
					return s, []saga.Action{sent, stranger.Send(ev.Instance, inventory.SellPair{})}, nil
				}
			}
			return s, []saga.Action{sent}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := drive(t, m)
	pipe := func(e inventory.Event) error {
		v, err := inv.Events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		return d.PipeBytes("inventory-events", []byte("blue"), v, d.Now(), engine.Header{Key: aggregate.HeaderAggregateID, Value: []byte("blue")})
	}
	if err := pipe(inventory.ShipmentReceived{Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		e    inventory.Event
		want string
	}{
		{inventory.PairReturned{}, "no returns here"},
		{inventory.PairSold{}, "panic in React: sold"},
		{inventory.ShipmentReceived{Quantity: 2}, "not among Config.Targets"},
	} {
		err := pipe(tc.e)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `saga fail: instance "blue"`) {
			t.Errorf("%T: error %v, want one naming the process manager, the instance and %q", tc.e, err, tc.want)
		}
	}
	if n := len(d.Messages("supplier-commands")); n != 1 {
		t.Errorf("%d commands sent, want 1: the failed reactions sent nothing", n)
	}
	st, _ := d.LocalStore(m.StateStore())
	e, _, _ := st.Get([]byte("blue"))
	if in, err := m.DecodeInstance(e.Value); err != nil || in.State.InStock != 1 || in.Sent != 1 {
		t.Errorf("blue after the failures: %+v %v, want the state of the first event alone", in, err)
	}
}

// A topology that reads an event topic for something else gives the
// process manager its stream.
func TestOnStream(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	b := engine.NewBuilder()
	events := engine.NewStream(b, "inventory-events", serde.String, serde.Bytes)
	events.GroupByKey().Count(engine.Named("events-per-shoe"), engine.Materialized("events-per-shoe"))
	m, err := saga.New(saga.Config[int]{
		Name: "on-stream",
		Sources: []saga.Source{saga.OnStream(inv, events, func(_ inventory.Event, m saga.Meta) (string, bool) {
			return m.AggregateID, true
		})},
		Targets: []saga.Destination{supplier},
		Initial: func() int { return 0 },
		React: func(n int, ev saga.Event) (int, []saga.Action, error) {
			if _, ok := ev.Value.(inventory.PairSold); ok {
				return n + 1, []saga.Action{supplier.Send(ev.Instance, OrderPairs{Quantity: 1})}, nil
			}
			return n, nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	v, _ := inv.Events.Encode(inventory.PairSold{})
	if err := d.PipeBytes("inventory-events", []byte("red"), v, d.Now(), engine.Header{Key: aggregate.HeaderAggregateID, Value: []byte("red")}); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Messages("supplier-commands")); n != 1 {
		t.Errorf("%d commands, want 1", n)
	}
}

// logSaga keeps what each instance saw, in order; react decides what it
// does besides.
func logSaga(t *testing.T, cfg saga.Config[[]string], react func(seen []string, ev saga.Event) ([]saga.Action, error)) *saga.Manager[[]string] {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "log"
	}
	cfg.Initial = func() []string { return nil }
	cfg.React = func(seen []string, ev saga.Event) ([]string, []saga.Action, error) {
		what := fmt.Sprintf("%T", ev.Value)
		if to, ok := ev.Value.(saga.Timeout); ok {
			what = "timeout " + to.Name
		}
		seen = append(slices.Clone(seen), what)
		acts, err := react(seen, ev)
		return seen, acts, err
	}
	m, err := saga.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// An instance that ends and starts again runs with other command ids: its
// target, which remembers the ids of the last run, decides the new
// commands, and an outcome of the last run's is passed over.
func TestEndThenStartAgain(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	m := logSaga(t, saga.Config[[]string]{
		Sources: []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return m.AggregateID, true })},
		Targets: []saga.Destination{supplier},
	}, func(_ []string, ev saga.Event) ([]saga.Action, error) {
		if _, ok := ev.Value.(inventory.PairSold); ok {
			// A policy with no memory: every sale orders a pair.
			return []saga.Action{supplier.Send(ev.Instance, OrderPairs{Quantity: 1}), saga.End()}, nil
		}
		return nil, nil
	})
	f := sagatest.For(t, m)
	shoes := sagatest.From(inv)
	first := f.When(shoes.Event("blue", inventory.PairSold{})).ThenSends(supplier.Send("blue", OrderPairs{Quantity: 1})).ThenEnded("blue")
	second := f.When(shoes.Event("blue", inventory.PairSold{})).ThenSends(supplier.Send("blue", OrderPairs{Quantity: 1})).ThenEnded("blue")
	if first.Sent[0].CommandID == second.Sent[0].CommandID {
		t.Errorf("both runs sent command %s", first.Sent[0].CommandID)
	}
	f.Given(shoes.Event("blue", inventory.PairReturned{})) // a third run, waiting
	f.WhenOutcome(aggregate.Rejected, "late").ThenNothing()
	if in, _ := f.Instance("blue"); !slices.Equal(in.State, []string{"inventory.PairReturned"}) {
		t.Errorf("the third run saw %v, want only its own event", in.State)
	}
}

// A reaction is worked out whole before anything is done: a state that
// cannot be encoded fails the input with nothing sent or kept.
func TestReactionThatCannotBeKeptDoesNothing(t *testing.T) {
	inv := newInventory(t).Contract()
	supplier := saga.To(newSupplier(t).Contract())
	m := logSaga(t, saga.Config[[]string]{
		Sources: []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return m.AggregateID, true })},
		Targets: []saga.Destination{supplier},
		StateSerde: serde.Func(func(seen []string) ([]byte, error) {
			if len(seen) > 1 {
				return nil, errors.New("too long to keep")
			}
			return []byte(strings.Join(seen, ",")), nil
		}, func(b []byte) ([]string, error) { return strings.Split(string(b), ","), nil }),
	}, func(_ []string, ev saga.Event) ([]saga.Action, error) {
		return []saga.Action{supplier.Send(ev.Instance, OrderPairs{Quantity: 1}), saga.SetTimeout("t", ev.Time.Add(time.Hour))}, nil
	})
	d := drive(t, m)
	v, _ := inv.Events.Encode(inventory.PairSold{})
	if err := d.PipeBytes("inventory-events", []byte("blue"), v, d.Now()); err != nil {
		t.Fatal(err)
	}
	if err := d.PipeBytes("inventory-events", []byte("blue"), v, d.Now()); err == nil || !strings.Contains(err.Error(), "too long to keep") {
		t.Fatalf("the second sale: %v, want the state's encoding error", err)
	}
	if n := len(d.Messages("supplier-commands")); n != 1 {
		t.Errorf("%d commands sent, want the first sale's alone", n)
	}
	st, _ := d.LocalStore(m.StateStore())
	e, _, _ := st.Get([]byte("blue"))
	in, err := m.DecodeInstance(e.Value)
	if err != nil || in.Sent != 1 || len(in.Pending) != 1 || !slices.Equal(in.State, []string{"inventory.PairSold"}) {
		t.Errorf("blue: %+v %v, want the first sale's instance, not StateBytes-encoded JSON", in, err)
	}
	if !json.Valid(e.Value) || strings.Contains(string(e.Value), `"state"`) {
		t.Errorf("a non-JSON state is kept as bytes in the stored instance: %s", e.Value)
	}
}

// Timeouts: several per instance, moved, cancelled; a timeout whose
// reaction fails stays due and comes again.
func TestTimeouts(t *testing.T) {
	inv := newInventory(t).Contract()
	failOnce := true
	m := logSaga(t, saga.Config[[]string]{
		Sources: []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return m.AggregateID, true })},
	}, func(seen []string, ev saga.Event) ([]saga.Action, error) {
		switch v := ev.Value.(type) {
		case inventory.ShipmentReceived:
			return []saga.Action{saga.SetTimeout("a", ev.Time.Add(time.Second)), saga.SetTimeout("b", ev.Time.Add(3*time.Second)),
				saga.SetTimeout("c", ev.Time.Add(2*time.Second))}, nil
		case inventory.PairSold:
			return []saga.Action{saga.SetTimeout("a", ev.Time.Add(10*time.Second)), saga.CancelTimeout("c"), saga.CancelTimeout("never set")}, nil
		case saga.Timeout:
			if v.Name == "b" && failOnce {
				failOnce = false
				return nil, errors.New("not now")
			}
		}
		return nil, nil
	})
	f := sagatest.For(t, m)
	shoes := sagatest.From(inv)
	f.Given(shoes.Event("blue", inventory.ShipmentReceived{Quantity: 1}), shoes.Event("blue", inventory.PairSold{}))
	if in, _ := f.Instance("blue"); len(in.Timeouts) != 2 {
		t.Fatalf("timeouts %v, want a (moved) and b", in.Timeouts)
	}
	if err := f.Driver().TryAdvanceWallClock(5 * time.Second); err == nil || !strings.Contains(err.Error(), "not now") {
		t.Fatalf("b's failed reaction: %v", err)
	}
	f.WhenTime(time.Second).ThenState("blue", []string{"inventory.ShipmentReceived", "inventory.PairSold", "timeout b"})
	f.WhenTime(10*time.Second).ThenState("blue", []string{"inventory.ShipmentReceived", "inventory.PairSold", "timeout b", "timeout a"})
	if in, _ := f.Instance("blue"); len(in.Timeouts) != 0 {
		t.Errorf("timeouts left: %v", in.Timeouts)
	}
}

// On stream time, a timeout comes due before the first input at or past
// its time is reacted to.
func TestStreamTimeoutBeforeTheInputPastIt(t *testing.T) {
	inv := newInventory(t).Contract()
	m := logSaga(t, saga.Config[[]string]{
		TimeoutClock: saga.StreamTime,
		Sources:      []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return m.AggregateID, true })},
	}, func(seen []string, ev saga.Event) ([]saga.Action, error) {
		if len(seen) == 1 {
			return []saga.Action{saga.SetTimeout("t", ev.Time.Add(10*time.Millisecond))}, nil
		}
		return nil, nil
	})
	f := sagatest.For(t, m)
	shoes := sagatest.From(inv)
	f.Given(shoes.Event("blue", inventory.ShipmentReceived{Quantity: 1}))
	f.WhenTime(time.Second) // moves the next input's time past the timeout
	f.When(shoes.Event("blue", inventory.PairSold{})).
		ThenState("blue", []string{"inventory.ShipmentReceived", "timeout t", "inventory.PairSold"})
}

// What a source passes over: events before StartAt, events of types the
// contract does not register (with a type header or not); an event of a
// registered type at a newer schema version is an error.
func TestSourcePassesOver(t *testing.T) {
	inv := newInventory(t).Contract()
	start := enginetest.Epoch.Add(time.Hour)
	m := logSaga(t, saga.Config[[]string]{
		StartAt: start,
		Sources: []saga.Source{saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return m.AggregateID, true })},
	}, func([]string, saga.Event) ([]saga.Action, error) { return nil, nil })
	d := drive(t, m)
	sold, _ := inv.Events.Encode(inventory.PairSold{})
	pipe := func(value string, at time.Time, hs ...engine.Header) error {
		return d.PipeBytes("inventory-events", []byte("blue"), []byte(value), at, hs...)
	}
	if err := pipe(string(sold), enginetest.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := pipe(`{"type":"PairRepaired","data":{}}`, start); err != nil {
		t.Fatal(err)
	}
	if err := pipe(`{"type":"PairRepaired","data":{}}`, start, engine.Header{Key: aggregate.HeaderType, Value: []byte("PairRepaired")}); err != nil {
		t.Fatal(err)
	}
	if err := pipe(string(sold), start); err != nil {
		t.Fatal(err)
	}
	err := pipe(`{"type":"PairSold","version":2,"data":{}}`, start)
	if err == nil || !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), "saga log: the event of inventory at inventory-events/0/4") {
		t.Errorf("an event of a newer version: %v, want an error naming the process manager, the place and the version", err)
	}
	st, _ := d.LocalStore(m.StateStore())
	e, _, _ := st.Get([]byte("blue"))
	if in, err := m.DecodeInstance(e.Value); err != nil || !slices.Equal(in.State, []string{"inventory.PairSold"}) {
		t.Errorf("blue saw %v (%v), want the sale at StartAt alone", in.State, err)
	}
	if d.Skipped()["log-correlate-inventory: an event of a type the contract does not register: PairRepaired"] != 2 {
		t.Errorf("skipped: %v, want the two events of an unregistered type counted at the correlator", d.Skipped())
	}
}

// drive runs the process manager alone in a driver.
func drive[S any](t *testing.T, m *saga.Manager[S]) *enginetest.Driver {
	t.Helper()
	b := engine.NewBuilder()
	m.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return enginetest.New(t, top)
}
