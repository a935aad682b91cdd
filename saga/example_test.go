package saga_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/saga"
)

// Orders of seats, and the concert whose seats they take.
type (
	OrderCommand interface{ isOrderCommand() }
	Place        struct {
		Concert string
		Seats   int
	}
	Confirm    struct{}
	Cancel     struct{ Reason string }
	OrderEvent interface{ isOrderEvent() }
	Placed     struct {
		Concert string
		Seats   int
	}
	Confirmed struct{}
	Cancelled struct{ Reason string }

	Reserve  struct{ Seats int }
	Reserved struct{ Seats int }
)

func (Place) isOrderCommand()   {}
func (Confirm) isOrderCommand() {}
func (Cancel) isOrderCommand()  {}
func (Placed) isOrderEvent()    {}
func (Confirmed) isOrderEvent() {}
func (Cancelled) isOrderEvent() {}

// A booking: an order placed reserves its seats at the concert; the
// order is confirmed if the concert accepts, cancelled (compensated) if it
// refuses. Three aggregates' worth of work in one exactly-once application
// on the embedded broker: orders, the concert, and the process manager
// between them.
func Example() {
	oc := aggregate.NewTypes[OrderCommand]()
	aggregate.Register[Place](oc, "Place")
	aggregate.Register[Confirm](oc, "Confirm")
	aggregate.Register[Cancel](oc, "Cancel")
	oe := aggregate.NewTypes[OrderEvent]()
	aggregate.Register[Placed](oe, "Placed")
	aggregate.Register[Confirmed](oe, "Confirmed")
	aggregate.Register[Cancelled](oe, "Cancelled")
	orders, err := aggregate.New(aggregate.Config[string, OrderCommand, OrderEvent]{
		Name:    "orders",
		Initial: func() string { return "" },
		Decide: func(status string, c OrderCommand) ([]OrderEvent, error) {
			switch c := c.(type) {
			case Place:
				return []OrderEvent{Placed(c)}, nil
			case Confirm:
				return []OrderEvent{Confirmed{}}, nil
			case Cancel:
				return []OrderEvent{Cancelled(c)}, nil
			}
			return nil, errors.New("unknown command")
		},
		Evolve:   func(string, OrderEvent) string { return "" },
		Commands: oc, Events: oe,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cc := aggregate.NewTypes[Reserve]()
	aggregate.Register[Reserve](cc, "Reserve")
	ce := aggregate.NewTypes[Reserved]()
	aggregate.Register[Reserved](ce, "Reserved")
	concert, err := aggregate.New(aggregate.Config[int, Reserve, Reserved]{
		Name:    "concert",
		Initial: func() int { return 0 }, // seats taken
		Decide: func(taken int, r Reserve) ([]Reserved, error) {
			if taken+r.Seats > 10 {
				return nil, aggregate.Reject("sold-out", "%d seats left", 10-taken)
			}
			return []Reserved{{Seats: r.Seats}}, nil
		},
		Evolve:   func(taken int, e Reserved) int { return taken + e.Seats },
		Commands: cc, Events: ce,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	toConcert, toOrders := saga.To(concert.Contract()), saga.To(orders.Contract())
	booking, err := saga.New(saga.Config[struct{}]{
		Name: "booking",
		// An instance per order: the order's id.
		Sources: []saga.Source{saga.On(orders.Contract(), func(_ OrderEvent, m saga.Meta) (string, bool) {
			return m.AggregateID, true
		})},
		Targets: []saga.Destination{toConcert, toOrders},
		Initial: func() struct{} { return struct{}{} },
		React: func(s struct{}, ev saga.Event) (struct{}, []saga.Action, error) {
			switch v := ev.Value.(type) {
			case Placed:
				return s, []saga.Action{toConcert.Send(v.Concert, Reserve{Seats: v.Seats})}, nil
			case saga.Outcome:
				if v.Target != toConcert.Name() {
					return s, nil, nil
				}
				if v.Status == aggregate.Accepted {
					return s, []saga.Action{toOrders.Send(ev.Instance, Confirm{})}, nil
				}
				return s, []saga.Action{toOrders.Send(ev.Instance, Cancel{Reason: v.Rejection.Message})}, nil
			case Confirmed, Cancelled:
				return s, []saga.Action{saga.End()}, nil
			}
			return s, nil, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer env.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	defer cl.Close()
	oc1, oe1, or1 := orders.Topics()
	cc1, ce1, cr1 := concert.Topics()
	_, _ = kadm.NewClient(cl).CreateTopics(ctx, 3, 1, nil, oc1, oe1, or1, cc1, ce1, cr1)

	b := engine.NewBuilder()
	orders.AddTo(b)
	concert.AddTo(b)
	booking.AddTo(b)
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	app, err := engine.NewApp(topology, engine.Config{AppID: "tickets", Brokers: env.Brokers, Guarantee: engine.ExactlyOnce,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	failed := make(chan error, 1)
	go func() { failed <- app.Run(ctx) }()
	defer app.Close()
	select {
	case <-app.Ready():
	case err := <-failed:
		fmt.Println(err)
		return
	}

	client, err := orders.NewClient(ctx, aggregate.ClientConfig{Brokers: env.Brokers})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	for i, seats := range []int{6, 6} {
		if _, err := client.Submit(ctx, fmt.Sprint("order-", i+1), Place{Concert: "opening-night", Seats: seats}); err != nil {
			fmt.Println(err)
			return
		}
	}

	// Each order's fate, from its events: two placed, then one confirmed
	// and one cancelled.
	events := orders.EventSerde()
	cons, _ := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics("orders-events"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cons.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fate := map[string]string{}
	for len(fate) < 2 && wctx.Err() == nil {
		cons.PollFetches(wctx).EachRecord(func(r *kgo.Record) {
			e, err := events.Decode(r.Value)
			if err != nil {
				return
			}
			switch e := e.(type) {
			case Confirmed:
				fate[string(r.Key)] = "confirmed"
			case Cancelled:
				fate[string(r.Key)] = "cancelled: " + e.Reason
			}
		})
	}
	fmt.Println("order-1", fate["order-1"])
	fmt.Println("order-2", fate["order-2"])
	// Output:
	// order-1 confirmed
	// order-2 cancelled: 4 seats left
}
