package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/projection"
)

// CatalogItem is a row of the catalog table: a shoe model, its name and
// price.
type CatalogItem struct {
	Model      string `json:"model"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
}

// Till is the money side of the store: what the sales brought in minus
// what the returns gave back, and how many of each.
type Till struct {
	RevenueCents int64 `json:"revenueCents"`
	Transactions int64 `json:"transactions"`
	Sales        int64 `json:"sales"`
	Returns      int64 `json:"returns"`
}

// TillV2 is the till as version 2 of the store keeps it: the money the
// sales brought in and the refunds gave back, apart (version 1 kept only
// their difference, RevenueCents).
type TillV2 struct {
	Till
	SalesCents  int64 `json:"salesCents"`
	RefundCents int64 `json:"refundCents"`
}

// ShoeRevenue is a shoe's line in version 2's view "revenue": its pairs
// sold and returned, and the money of each.
type ShoeRevenue struct {
	Sold         int64 `json:"sold"`
	Returned     int64 `json:"returned"`
	SalesCents   int64 `json:"salesCents"`
	RefundCents  int64 `json:"refundCents"`
	RevenueCents int64 `json:"revenueCents"`
}

// Versions are the versions of the store's views this program knows, in
// order: "v1", the first; "v2", whose till counts the refunds apart from
// the sales and which adds the view "revenue", per shoe. Each runs as a
// consumer group of its own ("<name>-v1", "<name>-v2") that computes its
// views from the inventory's whole history (package versions).
var Versions = []string{"v1", "v2"}

// add counts a sale or a return into the till.
func (t Till) add(m movement) Till {
	t.RevenueCents += m.Cents
	t.Transactions++
	if m.Return {
		t.Returns++
	} else {
		t.Sales++
	}
	return t
}

// Return is an entry of the returns log.
type Return struct {
	Shoe   string    `json:"shoe"`
	Reason string    `json:"reason"`
	Refund int64     `json:"refundCents"`
	At     time.Time `json:"at"`
}

// movement is a sale or a return, priced: cents into the till (negative
// for a refund).
type movement struct {
	Shoe   string    `json:"shoe"`
	Cents  int64     `json:"cents"`
	Return bool      `json:"return,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// partitions is the partition count of the store's topics.
const partitions = 3

// catalogTopic is the topic of the catalog's change events: Debezium's
// name for the table public.catalog captured under the store's name.
func catalogTopic(name string) string { return name + ".public.catalog" }

// deciderApp is the application that decides the inventory's commands:
// one, whatever version of the views runs (a version that decided the
// commands again would write their events twice).
func deciderApp(name string) string { return name + "-inventory" }

// decider is the inventory aggregate deciding commands: the store's
// write side.
func decider(inv *aggregate.Aggregate[inventory.State, inventory.Command, inventory.Event]) (*engine.Topology, error) {
	b := engine.NewBuilder()
	inv.AddTo(b)
	return b.Build()
}

// topology is the store's views in a version of them (one of Versions):
// the views over the inventory's events, the sales priced by the catalog.
func topology(name, version string, inv *aggregate.Aggregate[inventory.State, inventory.Command, inventory.Event]) (*engine.Topology, *projection.Registry, error) {
	if !slices.Contains(Versions, version) {
		return nil, nil, fmt.Errorf("shoestore: no version %q of the store (it has %s)", version, strings.Join(Versions, ", "))
	}
	b := engine.NewBuilder()
	_, eventsTopic, _ := inv.Topics()

	events := engine.NewStream(b, eventsTopic, serde.String, inv.EventSerde(), engine.Named("events"))

	// Inventory per shoe: the events folded as the aggregate folds them.
	stock := engine.Aggregate(events.GroupByKey(engine.Named("inventory-by-shoe")),
		func() inventory.State { return inventory.State{} },
		func(_ string, e inventory.Event, s inventory.State) inventory.State { return inventory.Evolve(s, e) },
		engine.Named("inventory"), engine.Materialized("inventory"), engine.ValueSerde(serde.JSON[inventory.State]()))

	// The catalog, captured from PostgreSQL (or seeded, see catalog.go),
	// as a table keyed by model — the shoe's id.
	catalog := cdc.NewTable(b, "catalog", catalogTopic(name), cdc.Column[string]("model"), serde.String, serde.JSON[CatalogItem]())

	// Sales and returns, at the price their events carry: the API prices
	// a command that names none at the catalog's price (inCatalog). An
	// event without one (from another producer) is priced at the
	// catalog's price as the view reads it — in Kafka Streams' terms, a
	// stream–table join sees the table as it is when the stream's record
	// is processed, so a version computing its views from the history
	// would not see the price of that day.
	moves := engine.Process(events, func() engine.Processor[string, inventory.Event, string, movement] {
		return engine.ProcessorFunc[string, inventory.Event, string, movement](func(ctx *engine.ProcessorContext[string, movement], r engine.Record[string, inventory.Event]) error {
			m := movement{Shoe: r.Key, At: r.Timestamp}
			switch e := r.Value.(type) {
			case inventory.PairSold:
				m.Cents = e.Price
			case inventory.PairReturned:
				m.Cents, m.Return, m.Reason = -e.Price, true, e.Reason
			default:
				return nil
			}
			return ctx.Forward(engine.Record[string, movement]{Key: r.Key, Value: m, Timestamp: r.Timestamp, Headers: r.Headers})
		})
	}, engine.Named("movements"))
	priced := engine.LeftJoin(moves.WithSerdes(serde.String, serde.JSON[movement]()), catalog, func(_ string, m movement, c CatalogItem, found bool) movement {
		if m.Cents == 0 && found {
			m.Cents = c.PriceCents
			if m.Return {
				m.Cents = -c.PriceCents
			}
		}
		return m
	}, engine.Named("priced"))

	// The till: one key for the whole store. Version 1 keeps the net
	// revenue; version 2 also the sales' and the refunds' money apart,
	// and each shoe's (the view "revenue").
	byStore := engine.GroupBy(priced.WithSerdes(serde.String, serde.JSON[movement]()), func(string, movement) string { return "till" }, engine.Named("till-by-store"))
	var versioned []func() (*projection.View, error) // the views this version adds or changes
	if version == "v1" {
		till := engine.Aggregate(byStore, func() Till { return Till{} },
			func(_ string, m movement, t Till) Till { return t.add(m) },
			engine.Named("till"), engine.Materialized("till"), engine.ValueSerde(serde.JSON[Till]()))
		versioned = append(versioned, func() (*projection.View, error) { return projection.Of(till) })
	} else {
		till := engine.Aggregate(byStore, func() TillV2 { return TillV2{} },
			func(_ string, m movement, t TillV2) TillV2 {
				t.Till = t.add(m)
				if m.Return {
					t.RefundCents -= m.Cents
				} else {
					t.SalesCents += m.Cents
				}
				return t
			}, engine.Named("till"), engine.Materialized("till"), engine.ValueSerde(serde.JSON[TillV2]()))
		revenue := engine.Aggregate(priced.WithSerdes(serde.String, serde.JSON[movement]()).GroupByKey(engine.Named("revenue-by-shoe")),
			func() ShoeRevenue { return ShoeRevenue{} },
			func(_ string, m movement, r ShoeRevenue) ShoeRevenue {
				if m.Return {
					r.Returned++
					r.RefundCents -= m.Cents
				} else {
					r.Sold++
					r.SalesCents += m.Cents
				}
				r.RevenueCents += m.Cents
				return r
			}, engine.Named("revenue"), engine.Materialized("revenue"), engine.ValueSerde(serde.JSON[ShoeRevenue]()))
		versioned = append(versioned, func() (*projection.View, error) { return projection.Of(till) },
			func() (*projection.View, error) { return projection.Of(revenue) })
	}

	// The returns log, keyed "<shoe>/<aggregate version>": why each pair
	// came back.
	returned := engine.Process(priced.Filter(func(_ string, m movement) bool { return m.Return }, engine.Named("returns-only")),
		func() engine.Processor[string, movement, string, Return] {
			return engine.ProcessorFunc[string, movement, string, Return](func(ctx *engine.ProcessorContext[string, Return], r engine.Record[string, movement]) error {
				version := "0"
				for _, h := range r.Headers {
					if h.Key == aggregate.HeaderAggregateVersion {
						version = string(h.Value)
					}
				}
				var v int64
				_, _ = fmt.Sscan(version, &v)
				key := fmt.Sprintf("%s/%06d", r.Key, v)
				return ctx.Forward(engine.Record[string, Return]{Key: key, Value: Return{Shoe: r.Key, Reason: r.Value.Reason, Refund: -r.Value.Cents, At: r.Value.At}, Timestamp: r.Timestamp})
			})
		}, engine.Named("returns-log"))
	returns := returned.WithSerdes(serde.String, serde.JSON[Return]()).ToTable(engine.Named("returns"), engine.Materialized("returns"))

	// Pairs sold per shoe per day.
	sold := moves.Filter(func(_ string, m movement) bool { return !m.Return }, engine.Named("sales-only"))
	daily := engine.WindowedCount(sold.WithSerdes(serde.String, serde.JSON[movement]()).GroupByKey(engine.Named("daily-by-shoe")).WindowedBy(engine.TumblingWindows(24*time.Hour)),
		engine.Named("daily-sales"), engine.Materialized("daily-sales"))

	top, err := b.Build()
	if err != nil {
		return nil, nil, err
	}
	// The views take their stores' names, serdes and windows from the
	// tables.
	var errs []error
	view := func(v *projection.View, err error) *projection.View {
		errs = append(errs, err)
		return v
	}
	all := []*projection.View{view(projection.Of(stock)), view(projection.Of(returns)), view(projection.OfWindowed(daily)), view(projection.Of(catalog))}
	for _, v := range versioned {
		all = append(all, view(v()))
	}
	views, err := projection.NewRegistry(all...)
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, nil, err
	}
	return top, views, nil
}
