// Package inventory is the shoe store's inventory as an event-sourced
// aggregate: one aggregate per shoe (its id is the shoe, say "blue"),
// shipments arrive, pairs are sold and returned, and a sale of a shoe not
// in stock is rejected.
package inventory

import (
	"github.com/oxbow-dev/oxbow/aggregate"
)

// Command is a command to a shoe's inventory.
type Command interface{ isCommand() }

// ReceiveShipment adds pairs to the stock.
type ReceiveShipment struct {
	Quantity int   `json:"quantity"`
	UnitCost int64 `json:"unitCost"` // cents
}

// SellPair sells one pair: at the catalog price, or at Price if given.
type SellPair struct {
	Price int64 `json:"price,omitempty"` // cents; 0: the catalog's
}

// AcceptReturn takes a sold pair back, refunding the catalog price (or
// Price, if given), and says why.
type AcceptReturn struct {
	Price  int64  `json:"price,omitempty"` // cents; 0: the catalog's
	Reason string `json:"reason"`
}

func (ReceiveShipment) isCommand() {}
func (SellPair) isCommand()        {}
func (AcceptReturn) isCommand()    {}

// Event is something that happened to a shoe's inventory.
type Event interface{ isEvent() }

// ShipmentReceived: pairs arrived.
type ShipmentReceived struct {
	Quantity int   `json:"quantity"`
	UnitCost int64 `json:"unitCost"`
}

// PairSold: a pair left the store (at the catalog price unless Price).
type PairSold struct {
	Price int64 `json:"price,omitempty"`
}

// PairReturned: a sold pair came back (refunded at the catalog price
// unless Price).
type PairReturned struct {
	Price  int64  `json:"price,omitempty"`
	Reason string `json:"reason"`
}

func (ShipmentReceived) isEvent() {}
func (PairSold) isEvent()         {}
func (PairReturned) isEvent()     {}

// State is a shoe's inventory.
type State struct {
	InStock  int `json:"inStock"`
	Sold     int `json:"sold"`
	Returned int `json:"returned"`
}

// The codes of the rejections.
const (
	OutOfStock      = "out-of-stock"
	NothingToReturn = "nothing-to-return"
	BadQuantity     = "bad-quantity"
	BadPrice        = "bad-price"
	BadCost         = "bad-cost"
)

// Decide decides a command.
func Decide(s State, c Command) ([]Event, error) {
	switch c := c.(type) {
	case ReceiveShipment:
		if c.Quantity <= 0 {
			return nil, aggregate.Reject(BadQuantity, "a shipment of %d pairs", c.Quantity)
		}
		if c.UnitCost < 0 {
			return nil, aggregate.Reject(BadCost, "a unit cost of %d cents", c.UnitCost)
		}
		return []Event{ShipmentReceived(c)}, nil
	case SellPair:
		if c.Price < 0 {
			return nil, aggregate.Reject(BadPrice, "a price of %d", c.Price)
		}
		if s.InStock == 0 {
			return nil, aggregate.Reject(OutOfStock, "no pair in stock")
		}
		return []Event{PairSold(c)}, nil
	case AcceptReturn:
		if c.Price < 0 {
			// A negative refund would add to the till.
			return nil, aggregate.Reject(BadPrice, "a refund of %d", c.Price)
		}
		if s.Sold-s.Returned <= 0 {
			return nil, aggregate.Reject(NothingToReturn, "no pair of this shoe was sold")
		}
		return []Event{PairReturned(c)}, nil
	}
	return nil, aggregate.Reject("unknown-command", "%T", c)
}

// Evolve applies an event.
func Evolve(s State, e Event) State {
	switch e := e.(type) {
	case ShipmentReceived:
		s.InStock += e.Quantity
	case PairSold:
		s.InStock--
		s.Sold++
	case PairReturned:
		s.InStock++
		s.Returned++
	}
	return s
}

// Commands and Events are the registered types.
func Commands() *aggregate.Types[Command] {
	ts := aggregate.NewTypes[Command]()
	aggregate.Register[ReceiveShipment](ts, "ReceiveShipment")
	aggregate.Register[SellPair](ts, "SellPair")
	aggregate.Register[AcceptReturn](ts, "AcceptReturn")
	// A misspelt field ("prise") is a malformed command, not a sale at
	// the catalog's price.
	ts.RejectUnknownFields()
	return ts
}

// Events are the registered event types.
func Events() *aggregate.Types[Event] {
	ts := aggregate.NewTypes[Event]()
	aggregate.Register[ShipmentReceived](ts, "ShipmentReceived")
	aggregate.Register[PairSold](ts, "PairSold")
	aggregate.Register[PairReturned](ts, "PairReturned")
	return ts
}

// New returns the inventory aggregate, named name (its topics are
// "<name>-commands", "<name>-events" and "<name>-outcomes").
func New(name string) (*aggregate.Aggregate[State, Command, Event], error) {
	return aggregate.New(aggregate.Config[State, Command, Event]{
		Name:     name,
		Initial:  func() State { return State{} },
		Decide:   Decide,
		Evolve:   Evolve,
		Commands: Commands(),
		Events:   Events(),
	})
}
