package versions_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/versions"
)

// Version 2 of an application runs as a batch job beside version 1, which
// has read nothing yet; version 1 cannot be promoted until it catches up,
// version 2 can, and readers watching the control topic see it.
func Example() {
	ctx := context.Background()
	env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer env.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic("orders"))
	defer cl.Close()
	_, _ = kadm.NewClient(cl).CreateTopics(ctx, 2, 1, nil, "orders")
	for i := range 10 {
		v, _ := serde.Int64.Encode(int64(i))
		_ = cl.ProduceSync(ctx, &kgo.Record{Key: []byte("ada"), Value: v}).FirstErr()
	}

	b := engine.NewBuilder()
	engine.NewStream(b, "orders", serde.String, serde.Int64).GroupByKey().
		Reduce(func(a, v int64) int64 { return a + v }, engine.Materialized("totals"))
	topology, _ := b.Build()

	ctl, err := versions.New(env.Brokers, versions.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctl.Close()
	for _, v := range []string{"v1", "v2"} {
		_ = ctl.Register(ctx, "shop", v, topology.SourceTopics())
	}
	v2, _ := engine.NewApp(topology, engine.Config{AppID: "shop", Version: "v2", Brokers: env.Brokers, Batch: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err := v2.Run(ctx); err != nil { // returns once the orders are processed
		fmt.Println(err)
		return
	}

	var behind *versions.NotCaughtUpError
	if err := ctl.Promote(ctx, "shop", "v1", versions.PromoteOptions{}); errors.As(err, &behind) {
		fmt.Println("v1 is", behind.Lag.Total, "records behind")
	} else {
		fmt.Println("promoting v1:", err)
	}
	if err := ctl.Promote(ctx, "shop", "v2", versions.PromoteOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	w := ctl.Watcher()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	<-w.Ready()
	fmt.Println("active:", w.Active("shop"))
	stop()
	<-done
	// Output:
	// v1 is 10 records behind
	// active: v2
}
