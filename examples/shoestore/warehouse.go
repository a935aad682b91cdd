package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/projection"
	"github.com/oxbow-dev/oxbow/saga"
)

// The warehouse is a second service beside the store. It knows the store
// only by the inventory's contract (topics and types: package inventory
// as a types package), and has an aggregate of its own, the supply of each
// shoe: a reorder point, and shipments ordered from the supplier,
// delivered, or sent back. Its process manager, restock, follows each
// shoe's stock from the inventory's events; when a shoe with a reorder
// point falls below it, it orders a shipment, has it delivered after the
// supplier's lead time (a timeout stands for the supplier's truck), and
// sends ReceiveShipment to the store's inventory. If the store refuses the
// shipment (the shoe was discontinued meanwhile), it compensates: the
// shipment goes back to the supplier.

// SupplyCommand is a command to a shoe's supply.
type SupplyCommand interface{ isSupplyCommand() }

// SetReorderPoint has the warehouse order Order pairs (at UnitCost) each
// time the shoe's stock falls below Below (0: never).
type SetReorderPoint struct {
	Below    int   `json:"below"`
	Order    int   `json:"order"`
	UnitCost int64 `json:"unitCost"`
}

// OrderShipment orders a shipment from the supplier.
type OrderShipment struct {
	Shipment string `json:"shipment"`
	Quantity int    `json:"quantity"`
	UnitCost int64  `json:"unitCost"`
}

// DeliverShipment: the supplier delivered the open shipment.
type DeliverShipment struct {
	Shipment string `json:"shipment"`
}

// ReturnShipment sends a delivered shipment back to the supplier.
type ReturnShipment struct {
	Shipment string `json:"shipment"`
	Reason   string `json:"reason"`
}

func (SetReorderPoint) isSupplyCommand() {}
func (OrderShipment) isSupplyCommand()   {}
func (DeliverShipment) isSupplyCommand() {}
func (ReturnShipment) isSupplyCommand()  {}

// SupplyEvent is something that happened to a shoe's supply.
type SupplyEvent interface{ isSupplyEvent() }

// ReorderPointSet: see SetReorderPoint.
type ReorderPointSet SetReorderPoint

// ShipmentOrdered: a shipment was ordered.
type ShipmentOrdered OrderShipment

// ShipmentDelivered: a shipment arrived at the warehouse.
type ShipmentDelivered struct {
	Shipment string `json:"shipment"`
	Quantity int    `json:"quantity"`
	UnitCost int64  `json:"unitCost"`
}

// ShipmentReturned: a delivered shipment went back.
type ShipmentReturned ReturnShipment

func (ReorderPointSet) isSupplyEvent()   {}
func (ShipmentOrdered) isSupplyEvent()   {}
func (ShipmentDelivered) isSupplyEvent() {}
func (ShipmentReturned) isSupplyEvent()  {}

// Supply is a shoe's supply.
type Supply struct {
	ReorderPoint SetReorderPoint `json:"reorderPoint"`
	// Open is the shipment ordered and not delivered ("" if none), of
	// OpenQuantity pairs at OpenCost.
	Open         string `json:"open,omitempty"`
	OpenQuantity int    `json:"openQuantity,omitempty"`
	OpenCost     int64  `json:"openCost,omitempty"`
	// Delivered are the shipments delivered and not returned.
	Delivered map[string]int `json:"delivered,omitempty"`
	Ordered   int            `json:"ordered"`
	Returned  int            `json:"returned"`
}

// The codes of the supply's rejections.
const (
	BadReorderPoint = "bad-reorder-point"
	ShipmentOpen    = "shipment-open"
	NoSuchShipment  = "no-such-shipment"
)

func decideSupply(s Supply, c SupplyCommand) ([]SupplyEvent, error) {
	switch c := c.(type) {
	case SetReorderPoint:
		if c.Below < 0 || (c.Below > 0 && c.Order <= 0) || c.UnitCost < 0 {
			return nil, aggregate.Reject(BadReorderPoint, "below %d, order %d at %d cents: want below ≥ 0 and, if above 0, an order of at least one pair at a cost ≥ 0", c.Below, c.Order, c.UnitCost)
		}
		return []SupplyEvent{ReorderPointSet(c)}, nil
	case OrderShipment:
		if s.Open != "" {
			return nil, aggregate.Reject(ShipmentOpen, "shipment %s is still open", s.Open)
		}
		if c.Shipment == "" || c.Quantity <= 0 {
			return nil, aggregate.Reject(BadReorderPoint, "a shipment %q of %d pairs", c.Shipment, c.Quantity)
		}
		return []SupplyEvent{ShipmentOrdered(c)}, nil
	case DeliverShipment:
		if s.Open == "" || s.Open != c.Shipment {
			return nil, aggregate.Reject(NoSuchShipment, "shipment %q is not open", c.Shipment)
		}
		return []SupplyEvent{ShipmentDelivered{Shipment: s.Open, Quantity: s.OpenQuantity, UnitCost: s.OpenCost}}, nil
	case ReturnShipment:
		if _, ok := s.Delivered[c.Shipment]; !ok {
			return nil, aggregate.Reject(NoSuchShipment, "shipment %q was not delivered, or went back", c.Shipment)
		}
		return []SupplyEvent{ShipmentReturned(c)}, nil
	}
	return nil, aggregate.Reject("unknown-command", "%T", c)
}

func evolveSupply(s Supply, e SupplyEvent) Supply {
	switch e := e.(type) {
	case ReorderPointSet:
		s.ReorderPoint = SetReorderPoint(e)
	case ShipmentOrdered:
		s.Open, s.OpenQuantity, s.OpenCost = e.Shipment, e.Quantity, e.UnitCost
		s.Ordered++
	case ShipmentDelivered:
		s.Open, s.OpenQuantity, s.OpenCost = "", 0, 0
		d := make(map[string]int, len(s.Delivered)+1)
		for k, v := range s.Delivered {
			d[k] = v
		}
		d[e.Shipment] = e.Quantity
		s.Delivered = d
	case ShipmentReturned:
		d := make(map[string]int, len(s.Delivered))
		for k, v := range s.Delivered {
			if k != e.Shipment {
				d[k] = v
			}
		}
		s.Delivered = d
		s.Returned++
	}
	return s
}

// newSupply is the supply aggregate of the warehouse called name.
func newSupply(name string) (*aggregate.Aggregate[Supply, SupplyCommand, SupplyEvent], error) {
	cmds := aggregate.NewTypes[SupplyCommand]()
	aggregate.Register[SetReorderPoint](cmds, "SetReorderPoint")
	aggregate.Register[OrderShipment](cmds, "OrderShipment")
	aggregate.Register[DeliverShipment](cmds, "DeliverShipment")
	aggregate.Register[ReturnShipment](cmds, "ReturnShipment")
	cmds.RejectUnknownFields()
	events := aggregate.NewTypes[SupplyEvent]()
	aggregate.Register[ReorderPointSet](events, "ReorderPointSet")
	aggregate.Register[ShipmentOrdered](events, "ShipmentOrdered")
	aggregate.Register[ShipmentDelivered](events, "ShipmentDelivered")
	aggregate.Register[ShipmentReturned](events, "ShipmentReturned")
	return aggregate.New(aggregate.Config[Supply, SupplyCommand, SupplyEvent]{
		Name:     name + "-supply",
		Initial:  func() Supply { return Supply{} },
		Decide:   decideSupply,
		Evolve:   evolveSupply,
		Commands: cmds,
		Events:   events,
	})
}

// Restock is the restock process manager's state for a shoe.
type Restock struct {
	// InStock is the shoe's stock, from the inventory's events.
	InStock int `json:"inStock"`
	// ReorderPoint is the supply's.
	ReorderPoint SetReorderPoint `json:"reorderPoint"`
	// Shipment is the shipment under way: ordered and not yet in the
	// store's stock or back at the supplier ("" if none); Shipments counts
	// the shipments ordered.
	Shipment  string `json:"shipment,omitempty"`
	Shipments int    `json:"shipments"`
	// Discontinued: the store takes no more shipments of the shoe.
	Discontinued bool `json:"discontinued,omitempty"`
}

// deliveryTimeout is the timeout that stands for the supplier's truck.
const deliveryTimeout = "delivery"

// newRestock is the warehouse's process manager: see the top of the file.
func newRestock(inv aggregate.Contract[inventory.Command, inventory.Event], supply aggregate.Contract[SupplyCommand, SupplyEvent], leadTime time.Duration) (*saga.Manager[Restock], error) {
	toStore, toSupply := saga.To(inv), saga.To(supply)
	// An instance per shoe: the aggregate id of both.
	byShoe := func(m saga.Meta) (string, bool) { return m.AggregateID, true }
	return saga.New(saga.Config[Restock]{
		Name: "restock",
		Sources: []saga.Source{
			saga.On(inv, func(_ inventory.Event, m saga.Meta) (string, bool) { return byShoe(m) }),
			saga.On(supply, func(_ SupplyEvent, m saga.Meta) (string, bool) { return byShoe(m) }),
		},
		Targets: []saga.Destination{toStore, toSupply},
		Initial: func() Restock { return Restock{} },
		React: func(s Restock, ev saga.Event) (Restock, []saga.Action, error) {
			shoe := ev.Instance
			// order orders a shipment if the stock is below the reorder
			// point and none is under way.
			order := func(acts ...saga.Action) []saga.Action {
				rp := s.ReorderPoint
				if rp.Below == 0 || s.Discontinued || s.Shipment != "" || s.InStock >= rp.Below {
					return acts
				}
				s.Shipments++
				s.Shipment = fmt.Sprintf("%s-%d", shoe, s.Shipments)
				return append(acts, toSupply.Send(shoe, OrderShipment{Shipment: s.Shipment, Quantity: rp.Order, UnitCost: rp.UnitCost}))
			}
			switch e := ev.Value.(type) {
			// The store's inventory.
			case inventory.ShipmentReceived:
				s.InStock += e.Quantity
				if e.Shipment != "" && e.Shipment == s.Shipment {
					s.Shipment = ""
				}
				return s, order(), nil
			case inventory.PairSold:
				s.InStock--
				return s, order(), nil
			case inventory.PairReturned:
				s.InStock++
			case inventory.Discontinued:
				s.Discontinued = true
			// The shoe's supply.
			case ReorderPointSet:
				s.ReorderPoint = SetReorderPoint(e)
				return s, order(), nil
			case ShipmentOrdered:
				// Ours, or one ordered through the warehouse's API: the
				// supplier delivers it after the lead time.
				s.Shipment = e.Shipment
				return s, []saga.Action{saga.SetTimeout(deliveryTimeout, ev.Time.Add(leadTime))}, nil
			case ShipmentDelivered:
				return s, []saga.Action{saga.CancelTimeout(deliveryTimeout),
					toStore.Send(shoe, inventory.ReceiveShipment{Quantity: e.Quantity, UnitCost: e.UnitCost, Shipment: e.Shipment})}, nil
			case ShipmentReturned:
				if e.Shipment == s.Shipment {
					s.Shipment = ""
				}
				return s, order(), nil
			case saga.Timeout:
				if s.Shipment != "" {
					return s, []saga.Action{toSupply.Send(shoe, DeliverShipment{Shipment: s.Shipment})}, nil
				}
			case saga.Outcome:
				if e.Status != aggregate.Rejected {
					break
				}
				switch c := e.Command.(type) {
				case inventory.ReceiveShipment:
					// The store refused the shipment: it goes back, and
					// (discontinued) no other is ordered.
					if e.Rejection.Code == inventory.IsDiscontinued {
						s.Discontinued = true
					}
					return s, []saga.Action{toSupply.Send(shoe, ReturnShipment{Shipment: c.Shipment, Reason: e.Rejection.Message})}, nil
				case OrderShipment:
					// Another shipment was open (ordered through the API):
					// its ShipmentOrdered makes it the one under way.
					if s.Shipment == c.Shipment {
						s.Shipment = ""
					}
				}
			}
			return s, nil, nil
		},
	})
}

// warehouseTopology is the warehouse: its supply aggregate and the restock
// process manager, with views of both.
func warehouseTopology(name string, inv aggregate.Contract[inventory.Command, inventory.Event], leadTime time.Duration) (*engine.Topology, *projection.Registry, *aggregate.Aggregate[Supply, SupplyCommand, SupplyEvent], error) {
	supply, err := newSupply(name + "-warehouse")
	if err != nil {
		return nil, nil, nil, err
	}
	restock, err := newRestock(inv, supply.Contract(), leadTime)
	if err != nil {
		return nil, nil, nil, err
	}
	b := engine.NewBuilder()
	supply.AddTo(b)
	restock.AddTo(b)
	top, err := b.Build()
	if err != nil {
		return nil, nil, nil, err
	}
	supplyView, err := projection.NewKeyValue("supply", supply.StateStore(), serde.String, serde.Func(
		func(Supply) ([]byte, error) { return nil, errors.New("read only") },
		func(b []byte) (Supply, error) { _, s, err := supply.DecodeState(b); return s, err }))
	if err != nil {
		return nil, nil, nil, err
	}
	restockView, err := projection.NewKeyValue("restock", restock.StateStore(), serde.String, serde.Func(
		func(saga.Instance[Restock]) ([]byte, error) { return nil, errors.New("read only") },
		restock.DecodeInstance))
	if err != nil {
		return nil, nil, nil, err
	}
	views, err := projection.NewRegistry(supplyView, restockView)
	if err != nil {
		return nil, nil, nil, err
	}
	return top, views, supply, nil
}

// warehouseConfig is what the warehouse runs with.
type warehouseConfig struct {
	// Name is the store's: the warehouse is "<Name>-warehouse" and
	// reads "<Name>-inventory"'s topics.
	Name       string
	Addr       string
	Brokers    []string
	Kafka      kafkasec.Config
	StateDir   string // none: a temporary directory
	InstanceID string // default "warehouse-0"
	Token      string
	// LeadTime is how long the supplier takes to deliver (default: 5
	// seconds).
	LeadTime     time.Duration
	Logger       *slog.Logger
	EngineLogger *slog.Logger
	Ready        func(url string)
	// Registry is the store's: where the inventory's schemas are, if its
	// commands and events travel in Avro.
	Registry *registry.Registry
}

// runWarehouse runs the warehouse until ctx is done.
func runWarehouse(ctx context.Context, cfg warehouseConfig) error {
	log := cmp.Or(cfg.Logger, slog.Default())
	cfg.Name, cfg.InstanceID = cmp.Or(cfg.Name, "shoestore"), cmp.Or(cfg.InstanceID, "warehouse-0")
	cfg.EngineLogger, cfg.LeadTime = cmp.Or(cfg.EngineLogger, log), cmp.Or(cfg.LeadTime, 5*time.Second)
	if len(cfg.Brokers) == 0 {
		return errors.New("warehouse: no brokers: the warehouse runs beside a store, on its brokers")
	}
	if cfg.StateDir == "" {
		dir, err := os.MkdirTemp("", "warehouse-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	cmdTypes, eventTypes, err := inventoryTypes(ctx, cfg.Registry, cfg.Name+"-inventory")
	if err != nil {
		return err
	}
	inv := inventory.ContractWith(cfg.Name+"-inventory", cmdTypes, eventTypes)
	top, views, supply, err := warehouseTopology(cfg.Name, inv, cfg.LeadTime)
	if err != nil {
		return err
	}
	inv, _ = inv.Check()
	sc, se, sr := supply.Topics()
	if err := createTopics(ctx, config{Brokers: cfg.Brokers, Kafka: cfg.Kafka}, sc, se, sr, inv.CommandTopic, inv.EventTopic, inv.ReplyTopic); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	app, err := engine.NewApp(top, engine.Config{AppID: cfg.Name + "-warehouse", Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka,
		StateDir: filepath.Join(cfg.StateDir, "engine"), InstanceID: cfg.InstanceID, Guarantee: engine.ExactlyOnce,
		AdvertisedAddr: ln.Addr().String(), Logger: cfg.EngineLogger})
	if err != nil {
		ln.Close()
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	appDone := make(chan error, 1)
	go func() { appDone <- app.Run(runCtx) }()
	client, err := supply.NewClient(ctx, aggregate.ClientConfig{Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka, Timeout: 10 * time.Second})
	if err != nil {
		cancel()
		ln.Close()
		return errors.Join(err, app.Close())
	}
	defer client.Close()
	hcfg := httpapi.Config{Instance: app, Views: views, Topology: top, Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka,
		Commands: map[string]httpapi.Submitter{"supply": client}, Deciders: map[string]httpapi.Decider{"supply": app}, Logger: log, Console: true}
	if cfg.Token != "" {
		hcfg.Authenticator = httpapi.Tokens(map[string]httpapi.Identity{cfg.Token: {Subject: "warehouse", Permissions: httpapi.AllPermissions()}})
	}
	h, err := httpapi.New(hcfg)
	if err != nil {
		cancel()
		ln.Close()
		return errors.Join(err, app.Close())
	}
	return serve(ctx, app, appDone, cancel, h, ln, cfg.Addr, func() error {
		if cfg.Ready != nil {
			cfg.Ready(url)
		}
		return nil
	})
}
