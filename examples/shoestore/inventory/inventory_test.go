package inventory_test

import (
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/aggregate/aggregatetest"
	inv "github.com/oxbow-dev/oxbow/examples/shoestore/inventory"
)

func fixture(t *testing.T) *aggregatetest.Fixture[inv.State, inv.Command, inv.Event] {
	a, err := inv.New("inventory")
	if err != nil {
		t.Fatal(err)
	}
	return aggregatetest.For(t, a)
}

func TestShipmentArrives(t *testing.T) {
	fixture(t).Given("red").
		When(inv.ReceiveShipment{Quantity: 3, UnitCost: 2000}).
		ThenEvents(inv.ShipmentReceived{Quantity: 3, UnitCost: 2000}).
		ThenVersion(1).
		ThenState(inv.State{InStock: 3})
}

func TestEmptyShipmentRejected(t *testing.T) {
	fixture(t).Given("red").
		When(inv.ReceiveShipment{Quantity: 0}).
		ThenRejected(inv.BadQuantity).
		ThenVersion(0)
}

// A negative cost or refund is refused: a refund below zero would add to
// the till.
func TestNegativeAmountsRejected(t *testing.T) {
	fixture(t).Given("red").
		When(inv.ReceiveShipment{Quantity: 2, UnitCost: -1}).
		ThenRejected(inv.BadCost).
		ThenVersion(0)
	fixture(t).Given("blue", inv.ShipmentReceived{Quantity: 1}, inv.PairSold{Price: 6000}).
		When(inv.AcceptReturn{Price: -6000}).
		ThenRejected(inv.BadPrice).
		ThenVersion(2)
}

// A command with a field its type lacks is malformed (a typo in "price"
// would otherwise sell at the catalog's price).
func TestUnknownFieldRejected(t *testing.T) {
	if _, err := inv.Commands().Decode([]byte(`{"type":"SellPair","data":{"prise":100}}`)); err == nil || !strings.Contains(err.Error(), `unknown field "prise"`) {
		t.Errorf("a sale with a misspelt price: %v", err)
	}
	if _, err := inv.Commands().Decode([]byte(`{"type":"SellPair","data":{"price":100}}`)); err != nil {
		t.Errorf("a sale: %v", err)
	}
}

func TestSaleInStock(t *testing.T) {
	fixture(t).Given("blue", inv.ShipmentReceived{Quantity: 1, UnitCost: 2500}).
		When(inv.SellPair{Price: 6000}).
		ThenEvents(inv.PairSold{Price: 6000}).
		ThenVersion(2).
		ThenState(inv.State{InStock: 0, Sold: 1})
}

func TestSaleOutOfStockRejected(t *testing.T) {
	f := fixture(t)
	f.Given("green").When(inv.SellPair{Price: 6000}).ThenRejected(inv.OutOfStock)
	f.Given("blue", inv.ShipmentReceived{Quantity: 1}, inv.PairSold{Price: 6000}).
		When(inv.SellPair{Price: 6000}).
		ThenRejected(inv.OutOfStock).
		ThenVersion(2).
		ThenState(inv.State{InStock: 0, Sold: 1})
}

func TestReturnOfASoldPair(t *testing.T) {
	fixture(t).Given("blue", inv.ShipmentReceived{Quantity: 1}, inv.PairSold{Price: 6000}).
		When(inv.AcceptReturn{Price: 6000, Reason: "too small"}).
		ThenEvents(inv.PairReturned{Price: 6000, Reason: "too small"}).
		ThenVersion(3).
		ThenState(inv.State{InStock: 1, Sold: 1, Returned: 1})
}

func TestReturnOfAShoeNeverSoldRejected(t *testing.T) {
	fixture(t).Given("red", inv.ShipmentReceived{Quantity: 2}).
		When(inv.AcceptReturn{Price: 6000}).
		ThenRejected(inv.NothingToReturn)
	fixture(t).Given("blue", inv.ShipmentReceived{Quantity: 1}, inv.PairSold{Price: 1}, inv.PairReturned{Price: 1}).
		When(inv.AcceptReturn{Price: 1}).
		ThenRejected(inv.NothingToReturn)
}

// The classic scenario: red, blue and green shoes arrive; blue sold; red
// sold; blue returned; green sold.
func TestClassicScenario(t *testing.T) {
	f := fixture(t)
	red, blue, green := f.Given("red"), f.Given("blue"), f.Given("green")
	red.When(inv.ReceiveShipment{Quantity: 1, UnitCost: 2000}).ThenVersion(1)
	blue.When(inv.ReceiveShipment{Quantity: 1, UnitCost: 2500}).ThenVersion(1)
	green.When(inv.ReceiveShipment{Quantity: 1, UnitCost: 3000}).ThenVersion(1)
	blue.When(inv.SellPair{Price: 6000}).ThenEvents(inv.PairSold{Price: 6000})
	red.When(inv.SellPair{Price: 5000}).ThenEvents(inv.PairSold{Price: 5000})
	blue.When(inv.AcceptReturn{Price: 6000, Reason: "wrong colour"}).ThenVersion(3).ThenState(inv.State{InStock: 1, Sold: 1, Returned: 1})
	green.When(inv.SellPair{Price: 7000}).ThenVersion(2).ThenState(inv.State{Sold: 1})
	red.When(inv.SellPair{Price: 5000}).ThenRejected(inv.OutOfStock)
}

// Expected versions: a command expecting another version is a conflict
// and changes nothing; one expecting the current version runs.
func TestExpectedVersion(t *testing.T) {
	s := fixture(t).Given("red", inv.ShipmentReceived{Quantity: 5})
	r := s.When(inv.SellPair{Price: 1}, aggregate.ExpectedVersion(0)).ThenConflict().ThenVersion(1)
	if r.Outcome.ExpectedVersion == nil || *r.Outcome.ExpectedVersion != 0 {
		t.Errorf("the conflict does not say what was expected: %+v", r.Outcome)
	}
	s.When(inv.SellPair{Price: 1}, aggregate.ExpectedVersion(1)).ThenEvents(inv.PairSold{Price: 1}).ThenVersion(2)
	s.When(inv.SellPair{Price: 1}, aggregate.ExpectedVersion(1)).ThenConflict().ThenVersion(2)
}

// A command sent again with its id is not decided again: the first outcome
// comes back, marked as a duplicate, and no event is written — even when
// the state has changed since (it would now be rejected).
func TestDuplicateCommandID(t *testing.T) {
	s := fixture(t).Given("blue", inv.ShipmentReceived{Quantity: 1})
	first := s.When(inv.SellPair{Price: 6000}, aggregate.CommandID("sale-1")).ThenEvents(inv.PairSold{Price: 6000})
	again := s.When(inv.SellPair{Price: 6000}, aggregate.CommandID("sale-1"))
	if len(again.Events) != 0 {
		t.Errorf("the repeated command wrote %v", again.Events)
	}
	if !again.Outcome.Duplicate || again.Outcome.Status != aggregate.Accepted || again.Outcome.Version != first.Outcome.Version ||
		len(again.Outcome.Events) != 1 || again.Outcome.Events[0] != first.Outcome.Events[0] {
		t.Errorf("the repeated command's outcome %+v, want the first's %+v as a duplicate", again.Outcome, first.Outcome)
	}
	// A rejection is recorded too.
	s.When(inv.SellPair{Price: 1}, aggregate.CommandID("sale-2")).ThenRejected(inv.OutOfStock)
	s.When(inv.SellPair{Price: 1}, aggregate.CommandID("sale-2")).ThenRejected(inv.OutOfStock)
}

// An accepted outcome says where its events are.
func TestOutcomePositions(t *testing.T) {
	f := fixture(t)
	f.Given("red").When(inv.ReceiveShipment{Quantity: 1})
	r := f.Given("blue").When(inv.ReceiveShipment{Quantity: 2})
	if len(r.Outcome.Events) != 1 {
		t.Fatalf("outcome %+v", r.Outcome)
	}
	if p := r.Outcome.Events[0]; p.Topic != "inventory-events" || p.Offset != 1 {
		t.Errorf("the event is at %+v, want inventory-events offset 1", p)
	}
}
