package postgres_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/oxbow-dev/oxbow/cdc/postgres"
)

// Capturing two tables of a shop's database into the topics
// shop.public.customers and shop.public.orders, until SIGTERM.
func Example() {
	src, err := postgres.New(postgres.Config{
		DSN:         "postgres://cdc@db.internal/shop",
		Tables:      []string{"public.customers", "public.orders"},
		Slot:        "shop_cdc",
		TopicPrefix: "shop",
		Brokers:     []string{"kafka.internal:9092"},
		Partitions:  6,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := src.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
