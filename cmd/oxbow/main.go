// Command oxbow is the operators' tool for Oxbow applications: their
// versions (consumer groups side by side), lag, promotion, rollback,
// retirement and reset, their topologies, and the transactions Kafka left
// hanging on their partitions.
//
//	oxbow versions --app shop
//	oxbow lag --app shop --version v2 --watch
//	oxbow promote --app shop --version v2
//	oxbow rollback --app shop
//	oxbow retire --app shop --version v1
//	oxbow reset --app shop --version v2 --to-datetime 2026-11-01T00:00:00Z --dry-run
//	oxbow describe --url http://shop-0:8080
//	oxbow transactions find-hanging --topic shop-events
//	oxbow transactions repair --topic shop-events --topic __consumer_offsets
//
// Every command takes --brokers (default $KAFKA_BROKERS), --control-topic
// and --json, and says what it does with --help. Exit codes: 0 done, 1
// failed, 2 bad usage, 3 refused (a promotion of a version that has not
// caught up, a retirement not confirmed).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
