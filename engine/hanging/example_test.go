package hanging_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/hanging"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

// Find lists what is hanging; Repair ends what has a decision.
func Example() {
	ctx := context.Background()
	env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	found, err := hanging.Find(ctx, cl)
	if err != nil {
		panic(err)
	}
	for _, t := range found {
		fmt.Println(t, "\nremedy:", t.Remedy())
	}
	repaired, err := hanging.Repair(ctx, cl, found)
	fmt.Printf("%d hanging, %d repaired, error: %v\n", len(found), len(repaired), err)
	// Output:
	// 0 hanging, 0 repaired, error: <nil>
}
