package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
)

// childFlags are what a measured process runs with.
type childFlags struct {
	kind, topology, guarantee string
	input, table, output, app string
	brokers                   string
	commitMs                  int
	cacheBytes                int64
	workers                   int
	stateDir                  string
}

func (c childFlags) args() []string {
	return []string{"-child", c.kind, "-topology", c.topology, "-guarantee", c.guarantee, "-input", c.input, "-table", c.table,
		"-output", c.output, "-app", c.app, "-brokers", c.brokers, "-commit-ms", fmt.Sprint(c.commitMs),
		"-cache-bytes", fmt.Sprint(c.cacheBytes), "-workers", fmt.Sprint(c.workers), "-state-dir", c.stateDir}
}

// runChild runs a measured process: Oxbow or the passthrough, until
// SIGTERM. It prints READY once it processes.
func runChild(args []string) int {
	fs := flag.NewFlagSet("bench child", flag.ContinueOnError)
	var c childFlags
	fs.StringVar(&c.kind, "child", "", "oxbow or passthrough")
	fs.StringVar(&c.topology, "topology", "", "")
	fs.StringVar(&c.guarantee, "guarantee", "alos", "")
	fs.StringVar(&c.input, "input", "", "")
	fs.StringVar(&c.table, "table", "", "")
	fs.StringVar(&c.output, "output", "", "")
	fs.StringVar(&c.app, "app", "", "")
	fs.StringVar(&c.brokers, "brokers", "", "")
	fs.IntVar(&c.commitMs, "commit-ms", 1000, "")
	fs.Int64Var(&c.cacheBytes, "cache-bytes", 10<<20, "")
	fs.IntVar(&c.workers, "workers", 2, "")
	fs.StringVar(&c.stateDir, "state-dir", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch c.kind {
	case "oxbow":
		err = runOxbow(ctx, c)
	case "passthrough":
		err = runPassthrough(ctx, c)
	default:
		err = fmt.Errorf("no child kind %q", c.kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

func runOxbow(ctx context.Context, c childFlags) error {
	top, err := oxbowTopology(c.topology, c.input, c.table, c.output)
	if err != nil {
		return err
	}
	g := engine.AtLeastOnce
	if c.guarantee == "eos" {
		g = engine.ExactlyOnce
	}
	app, err := engine.NewApp(top, engine.Config{AppID: c.app, Brokers: strings.Split(c.brokers, ","), Guarantee: g,
		CommitInterval: time.Duration(c.commitMs) * time.Millisecond, CacheBytes: c.cacheBytes, Workers: c.workers, StateDir: c.stateDir,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	select {
	case <-app.Ready():
		fmt.Println("READY")
	case err := <-done:
		return err
	}
	return <-done
}

// runPassthrough is the limit: franz-go consuming the input and producing
// every record to the output, committing after the produced records are
// acknowledged (at least once).
func runPassthrough(ctx context.Context, c childFlags) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...), kgo.ConsumerGroup(c.app), kgo.ConsumeTopics(c.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.DefaultProduceTopic(c.output),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Println("READY")
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil)
		})
		if err := cl.Flush(ctx); err != nil {
			return nil
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
