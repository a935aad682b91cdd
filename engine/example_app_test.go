package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// An App runs a topology on Kafka — here the embedded broker — and its
// stores can be queried while it runs.
func ExampleApp() {
	ctx := context.Background()
	env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer env.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 2, 1, nil, "purchases", "spent"); err != nil {
		fmt.Println(err)
		return
	}

	b := engine.NewBuilder()
	engine.NewStream(b, "purchases", serde.String, serde.Int64).GroupByKey().
		Reduce(func(a, v int64) int64 { return a + v }, engine.Materialized("spent")).
		ToStream().To("spent")
	top, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "oxbow-example")
	defer os.RemoveAll(dir)
	app, err := engine.NewApp(top, engine.Config{
		AppID: "shop", Brokers: env.Brokers, StateDir: dir,
		CommitInterval: 50 * time.Millisecond,
		Logger:         slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	select {
	case <-app.Ready(): // in the group, state restored
	case err := <-done:
		fmt.Println(err)
		return
	}
	// More goroutines for its tasks, while it runs: no rebalance.
	if err := app.SetWorkers(4); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("workers:", app.Workers())

	for _, p := range []struct {
		who    string
		amount int64
	}{{"alice", 3}, {"bob", 5}, {"alice", 2}} {
		v, _ := serde.Int64.Encode(p.amount)
		cl.ProduceSync(ctx, &kgo.Record{Topic: "purchases", Key: []byte(p.who), Value: v})
	}

	store, err := engine.QueryKeyValueStore(app, "spent", serde.String, serde.Int64)
	if err != nil {
		fmt.Println(err)
		return
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v, ok, _ := store.Get("alice"); ok && v == 5 {
			break
		}
	}
	for kv, err := range store.All() {
		if err == nil {
			fmt.Println(kv.Key, kv.Value)
		}
	}
	fmt.Println(app.Close(), <-done)
	// Output:
	// workers: 4
	// alice 5
	// bob 5
	// <nil> <nil>
}

// The ACLs an application needs on a cluster with an authorizer, as
// kafka-acls.sh commands for its principal.
func ExampleACLs() {
	b := engine.NewBuilder()
	engine.NewStream(b, "orders", serde.String, serde.String).
		GroupByKey().Count(engine.Materialized("per-customer")).ToStream().To("order-counts")
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	for _, acl := range engine.ACLs(top, engine.Config{AppID: "shop", Guarantee: engine.ExactlyOnce}) {
		fmt.Println(acl.Command("kafka:9093", "User:shop"))
	}
	// Output:
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation READ --operation DESCRIBE --group shop
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation CREATE --operation READ --operation WRITE --operation DELETE --operation DESCRIBE --operation DESCRIBE_CONFIGS --topic shop- --resource-pattern-type prefixed
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation WRITE --operation DESCRIBE --transactional-id shop- --resource-pattern-type prefixed
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation DESCRIBE --transactional-id '*'
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation READ --operation DESCRIBE --topic __transaction_state
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation READ --operation DESCRIBE --topic __consumer_offsets
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation CLUSTER_ACTION --cluster
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation READ --operation DESCRIBE --topic orders
	// kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add --allow-principal User:shop --operation WRITE --operation DESCRIBE --operation READ --topic order-counts
}
