package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/projection"
)

// restoreLog gathers the engine's "restored" log records (one a store
// partition, with its records and how long it took): the records restored
// and when the first restore began.
type restoreLog struct {
	mu      sync.Mutex
	records int64
	first   time.Time
}

func (l *restoreLog) add(began time.Time, records int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records += records
	if l.first.IsZero() || began.Before(l.first) {
		l.first = began
	}
}

func (l *restoreLog) get() (int64, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records, l.first
}

// restoreLogHandler hands the "restored" records to its log and every
// record to next, if next takes its level.
type restoreLogHandler struct {
	next slog.Handler
	log  *restoreLog
}

func (h *restoreLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *restoreLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "restored" {
		var records int64
		var took time.Duration
		r.Attrs(func(a slog.Attr) bool {
			v := a.Value.Resolve()
			switch {
			case a.Key == "records" && v.Kind() == slog.KindInt64:
				records = v.Int64()
			case a.Key == "records" && v.Kind() == slog.KindUint64:
				records = int64(v.Uint64())
			case a.Key == "took" && v.Kind() == slog.KindDuration:
				took = v.Duration()
			}
			return true
		})
		h.log.add(r.Time.Add(-took), records)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *restoreLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &restoreLogHandler{next: h.next.WithAttrs(as), log: h.log}
}

func (h *restoreLogHandler) WithGroup(name string) slog.Handler {
	return &restoreLogHandler{next: h.next.WithGroup(name), log: h.log}
}

// serveStore serves the topology's store over HTTP at addr (httpapi) and
// prints "SERVING <base URL>": the count topology's as the view "counts",
// the kv topology's as "kv".
func serveStore(app *engine.App, topology, addr string) (stop func(), err error) {
	var view *projection.View
	switch topology {
	case "count":
		view, err = projection.NewKeyValue("counts", "counts", serde.String, serde.Int64)
	case "kv":
		view, err = projection.NewKeyValue("kv", "kv", serde.String, serde.String)
	default:
		err = fmt.Errorf("the %s topology has no store to serve", topology)
	}
	if err != nil {
		return nil, err
	}
	views, err := projection.NewRegistry(view)
	if err != nil {
		return nil, err
	}
	h, err := httpapi.New(httpapi.Config{Instance: app, Views: views})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("SERVING http://" + ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// listOffsets lists a topic's offsets, again while the broker answers with
// a retriable error (a partition without a leader for the moment, as when
// a loaded broker was fenced), for a minute at most.
func listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		offs, err := list(ctx, topic)
		if err == nil {
			err = offs.Error()
		}
		if err == nil || !kerr.IsRetriable(err) || time.Now().After(deadline) {
			return offs, err
		}
		fmt.Fprintf(os.Stderr, "bench child: listing %s's offsets: %v; again in a second\n", topic, err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// runChangelog is the restore's baseline: a franz-go consumer reading every
// partition of a topic (-input) from its start to its end offset as they
// are when it starts, counting the records and their keys' and values'
// bytes. The clock runs from its first fetch to its last partition's end:
// connecting and listing the offsets come before. It prints "CONSUMED
// records=N bytes=B seconds=S" and waits for SIGTERM.
func runChangelog(ctx context.Context, c childFlags) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := listOffsets(ctx, adm.ListStartOffsets, c.input)
	if err != nil {
		return err
	}
	ends, err := listOffsets(ctx, adm.ListEndOffsets, c.input)
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		if s, ok := starts.Lookup(c.input, e.Partition); ok && e.Offset > s.Offset {
			from[e.Partition] = kgo.NewOffset().At(s.Offset)
			remaining[e.Partition] = e.Offset
		}
	})
	start := time.Now()
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.input: from})
	var records, bytes int64
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fetchErr(fs); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			records++
			bytes += int64(len(r.Key) + len(r.Value))
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	fmt.Printf("CONSUMED records=%d bytes=%d seconds=%.6f\n", records, bytes, time.Since(start).Seconds())
	<-ctx.Done()
	return nil
}

// runCommands runs the inventory aggregate (-app names it and the
// application) exactly once, at the engine's default configuration
// otherwise. It prints READY once the instance runs.
func runCommands(ctx context.Context, c childFlags) error {
	a, err := inv.New(c.app)
	if err != nil {
		return err
	}
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		return err
	}
	app, err := engine.NewApp(top, engine.Config{AppID: c.app, Brokers: strings.Split(c.brokers, ","), Guarantee: engine.ExactlyOnce,
		StateDir: c.stateDir, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	done, ended, err := runReady(ctx, app)
	if ended {
		return err
	}
	return <-done
}
