package aggregate_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

// A concert's seats: a reservation is accepted while seats are left.
type (
	Reserve  struct{ Seats int }
	Reserved struct{ Seats int }
)

// An aggregate on the embedded broker: an exactly-once instance decides
// the commands; a Client submits them and gets their outcomes.
func Example() {
	cmds := aggregate.NewTypes[Reserve]()
	aggregate.Register[Reserve](cmds, "Reserve")
	events := aggregate.NewTypes[Reserved]()
	aggregate.Register[Reserved](events, "Reserved")
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
		Commands: cmds,
		Events:   events,
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
	c, e, r := concert.Topics()
	_, _ = kadm.NewClient(cl).CreateTopics(ctx, 3, 1, nil, c, e, r)
	cl.Close()

	b := engine.NewBuilder()
	concert.AddTo(b)
	topology, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	app, err := engine.NewApp(topology, engine.Config{AppID: "concerts", Brokers: env.Brokers, Guarantee: engine.ExactlyOnce,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = app.Run(ctx) }()
	defer app.Close()
	<-app.Ready()

	client, err := concert.NewClient(ctx, aggregate.ClientConfig{Brokers: env.Brokers, Timeout: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	for _, seats := range []int{4, 5, 2} {
		o, err := client.Submit(ctx, "opening-night", Reserve{Seats: seats}, aggregate.CommandID(fmt.Sprint("booking-", seats)))
		if err != nil {
			fmt.Println(err)
			return
		}
		if o.Status == aggregate.Rejected {
			fmt.Printf("%d seats: %s (%s)\n", seats, o.Status, o.Rejection.Message)
			continue
		}
		fmt.Printf("%d seats: %s, version %d\n", seats, o.Status, o.Version)
	}
	// The same booking again: its outcome, not a second reservation.
	o, _ := client.Submit(ctx, "opening-night", Reserve{Seats: 4}, aggregate.CommandID("booking-4"))
	fmt.Printf("booking-4 again: %s, version %d, duplicate %v\n", o.Status, o.Version, o.Duplicate)
	// Output:
	// 4 seats: accepted, version 1
	// 5 seats: accepted, version 2
	// 2 seats: rejected (1 seats left)
	// booking-4 again: accepted, version 1, duplicate true
}
