package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
)

// newInventory makes an inventory aggregate of its own, creates its topics
// on the test's broker and builds its topology.
func newInventory(t testing.TB, partitions int32) (*aggregate.Aggregate[inv.State, inv.Command, inv.Event], *engine.Topology, *kafkaenv.Env) {
	t.Helper()
	env := kafkaenv.ForTest(t)
	a, err := inv.New(fmt.Sprintf("inv-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	commands, events, replies := a.Topics()
	env.CreateTopics(t, partitions, commands, events, replies)
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return a, top, env
}

// startInventory runs an exactly-once instance of a new inventory
// aggregate; it returns the aggregate and a client.
func startInventory(t testing.TB, partitions int32, configure ...func(*engine.Config)) (*aggregate.Aggregate[inv.State, inv.Command, inv.Event], *aggregate.Client[inv.Command], *kafkaenv.Env) {
	t.Helper()
	a, top, env := newInventory(t, partitions)
	cfg := engine.Config{AppID: a.Name(), Brokers: env.Brokers, Guarantee: engine.ExactlyOnce, CommitInterval: 50 * time.Millisecond}
	for _, f := range configure {
		f(&cfg)
	}
	enginetest.StartApp(t, top, cfg)
	c, err := a.NewClient(context.Background(), aggregate.ClientConfig{Brokers: env.Brokers, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return a, c, env
}

// Commands submitted through a Client to an instance on Kafka: outcomes
// come back, accepted ones say where their events are, and the events
// there are the command's, with its versions.
func TestSubmitOnKafka(t *testing.T) {
	a, c, env := startInventory(t, 3)
	ctx := context.Background()
	submit := func(id string, cmd inv.Command, opts ...aggregate.SubmitOption) aggregate.Outcome {
		t.Helper()
		o, err := c.Submit(ctx, id, cmd, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	first := submit("blue", inv.ReceiveShipment{Quantity: 2, UnitCost: 2500}, aggregate.CommandID("ship-1"))
	if first.Status != aggregate.Accepted || first.Version != 1 || len(first.Events) != 1 {
		t.Fatalf("shipment: %+v", first)
	}
	if o := submit("blue", inv.ReceiveShipment{Quantity: 2, UnitCost: 2500}, aggregate.CommandID("ship-1")); !o.Duplicate || o.Version != 1 || o.Events[0] != first.Events[0] {
		t.Errorf("the repeated shipment: %+v, want the first outcome %+v as a duplicate", o, first)
	}
	// The id of a command for another: refused. Unless both derive from
	// the same request (RequestedAs): the first outcome, as a repeat.
	if _, err := c.Submit(ctx, "blue", inv.ReceiveShipment{Quantity: 3, UnitCost: 2500}, aggregate.CommandID("ship-1")); !errors.Is(err, aggregate.ErrCommandIDReused) {
		t.Errorf("the id of another command: %v, want ErrCommandIDReused", err)
	}
	asked := []byte(`{"type":"SellPair","data":{}}`)
	priced := submit("blue", inv.SellPair{Price: 5500}, aggregate.CommandID("sale-1"), aggregate.RequestedAs(asked))
	if o := submit("blue", inv.SellPair{Price: 5900}, aggregate.CommandID("sale-1"), aggregate.RequestedAs(asked)); !o.Duplicate || o.Version != priced.Version || o.Events[0] != priced.Events[0] {
		t.Errorf("the sale asked again, priced anew: %+v, want the first outcome %+v as a duplicate", o, priced)
	}
	if _, err := c.Submit(ctx, "blue", inv.SellPair{Price: 5500}, aggregate.CommandID("sale-1")); !errors.Is(err, aggregate.ErrCommandIDReused) {
		t.Errorf("the sale's id for the priced command, not the request: %v, want ErrCommandIDReused", err)
	}
	if o := submit("blue", inv.SellPair{Price: 6000}, aggregate.ExpectedVersion(1)); o.Status != aggregate.Conflict || o.Version != 2 {
		t.Errorf("a sale expecting version 0: %+v", o)
	}
	sold := submit("blue", inv.SellPair{Price: 6000}, aggregate.ExpectedVersion(2))
	if sold.Status != aggregate.Accepted || sold.Version != 3 {
		t.Errorf("a sale expecting version 2: %+v", sold)
	}
	if o := submit("red", inv.SellPair{Price: 6000}); o.Status != aggregate.Rejected || o.Rejection.Code != inv.OutOfStock {
		t.Errorf("a sale of a shoe not in stock: %+v", o)
	}

	// The same command id twice at once: decided once (the next command
	// makes version 2), both get its outcome.
	var wg sync.WaitGroup
	outs := make([]aggregate.Outcome, 2)
	for i := range outs {
		wg.Go(func() { outs[i] = submit("green", inv.ReceiveShipment{Quantity: 1}, aggregate.CommandID("ship-green")) })
	}
	wg.Wait()
	if outs[0].Version != 1 || outs[1].Version != 1 || len(outs[0].Events) != 1 || len(outs[1].Events) != 1 || outs[0].Events[0] != outs[1].Events[0] {
		t.Errorf("the same command twice at once: %+v and %+v", outs[0], outs[1])
	}
	if o := submit("green", inv.ReceiveShipment{Quantity: 1}); o.Version != 2 {
		t.Errorf("after the command sent twice at once, the next makes version %d, want 2", o.Version)
	}

	// The events are where the outcomes say.
	for _, o := range []aggregate.Outcome{first, sold} {
		p := o.Events[0]
		r := eventAt(t, env, p)
		e, err := a.EventSerde().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		var cmdID, version string
		for _, h := range r.Headers {
			switch h.Key {
			case aggregate.HeaderCommandID:
				cmdID = string(h.Value)
			case aggregate.HeaderAggregateVersion:
				version = string(h.Value)
			}
		}
		if r.Offset != p.Offset || string(r.Key) != "blue" || cmdID != o.CommandID || version != strconv.FormatInt(o.Version, 10) {
			t.Errorf("at %+v: %T %s (command %s, version %s), want the event of %+v", p, e, r.Key, cmdID, version, o)
		}
	}
}

// A command to an aggregate that no instance decides ends with
// ErrNoOutcome at the deadline, saying what to do.
func TestSubmitWithoutOutcome(t *testing.T) {
	a, _, env := startInventory(t, 1)
	commands, _, _ := a.Topics()
	// An aggregate with topics but no instance running it: as if its
	// owner were down.
	c := idleClient(t, env, commands+"-idle", 500*time.Millisecond)
	_, err := c.Submit(context.Background(), "blue", inv.SellPair{Price: 1}, aggregate.CommandID("lost"))
	if !errors.Is(err, aggregate.ErrNoOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Submit without an instance: %v", err)
	}
	// A client of an aggregate whose topics do not exist is refused.
	missing, _ := inv.New(commands + "-missing")
	if _, err := missing.NewClient(context.Background(), aggregate.ClientConfig{Brokers: env.Brokers}); err == nil {
		t.Error("a client without its reply topic was made")
	}
}

// idleClient is a client, with the Timeout given, of an inventory
// aggregate named name whose topics it creates on env and which no
// instance runs: as if its owner were down. It is closed when the test
// ends.
func idleClient(t *testing.T, env *kafkaenv.Env, name string, timeout time.Duration) *aggregate.Client[inv.Command] {
	t.Helper()
	a, err := inv.New(name)
	if err != nil {
		t.Fatal(err)
	}
	commands, events, replies := a.Topics()
	env.CreateTopics(t, 1, commands, events, replies)
	c, err := a.NewClient(context.Background(), aggregate.ClientConfig{Brokers: env.Brokers, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A command whose broker has gone away gets ErrNoOutcome: at Submit's
// deadline, not after it waited for the broker; and when a command ahead
// of it on the partition times out first, which fails every record behind
// with the connection error, not that error (the broker's absence is no
// failure of the command).
func TestSubmitBrokerGone(t *testing.T) {
	env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	c := idleClient(t, env, fmt.Sprintf("gone-%d", time.Now().UnixNano()), 30*time.Second)
	submit := func(id string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_, err := c.Submit(ctx, "blue", inv.SellPair{Price: 1}, aggregate.CommandID(id))
		return err
	}
	// A first command, written (no instance decides it): the client
	// knows the partition's leader.
	if err := submit("written", time.Second); !errors.Is(err, aggregate.ErrNoOutcome) {
		t.Fatalf("the first command: %v", err)
	}
	if err := env.Close(); err != nil { // every connection refused from now on
		t.Fatal(err)
	}
	ahead := make(chan error, 1)
	go func() { ahead <- submit("ahead", time.Second) }()
	await.Until(t, 10*time.Second, "the first command buffered", func() bool { return c.BufferedRecords() == 1 })
	behind := submit("behind", 20*time.Second)
	for id, err := range map[string]error{"ahead": <-ahead, "behind": behind} {
		t.Logf("%s: %v", id, err)
		if !errors.Is(err, aggregate.ErrNoOutcome) || !strings.Contains(err.Error(), "did not acknowledge") {
			t.Errorf("Submit of %s with the broker gone: %v; want ErrNoOutcome for a command Kafka did not acknowledge", id, err)
		}
	}
	if errors.Is(behind, context.DeadlineExceeded) {
		t.Errorf("the command behind waited out its deadline: %v; the one ahead of it timed out 19 s before", behind)
	}
}

// eventAt reads the event record at a position, read committed.
func eventAt(t *testing.T, env *kafkaenv.Env, p aggregate.Position) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.Topic: {p.Partition: kgo.NewOffset().At(p.Offset)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs := cl.PollRecords(ctx, 1)
	if len(fs.Records()) == 0 {
		t.Fatalf("no event at %+v: %v", p, fs.Err())
	}
	return fs.Records()[0]
}

// A command submitted in a trace is decided in it: its events carry a
// traceparent of the submitter's trace.
func TestSubmitTraceReachesEvents(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	_, c, env := startInventory(t, 1, func(cfg *engine.Config) { cfg.TracerProvider = tp })
	ctx, span := tp.Tracer("test").Start(context.Background(), "checkout")
	defer span.End()
	o, err := c.Submit(ctx, "blue", inv.ReceiveShipment{Quantity: 1})
	if err != nil || o.Status != aggregate.Accepted {
		t.Fatalf("%+v, %v", o, err)
	}
	r := eventAt(t, env, o.Events[0])
	var traceparent string
	for _, h := range r.Headers {
		if h.Key == "traceparent" {
			traceparent = string(h.Value)
		}
	}
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || parts[1] != span.SpanContext().TraceID().String() {
		t.Errorf("the event's traceparent %q, want one of trace %s", traceparent, span.SpanContext().TraceID())
	}
}

// An instance that lost its local state restores each aggregate's state
// from the state store's changelog, and goes on from the version it had:
// no event is decided twice, none is lost.
func TestStateLostAndRestored(t *testing.T) {
	a, top, env := newInventory(t, 2)
	ctx := context.Background()
	// Each instance on a new, empty state directory.
	run := func() *engine.App {
		return enginetest.StartApp(t, top, engine.Config{AppID: a.Name(), Brokers: env.Brokers, Guarantee: engine.ExactlyOnce})
	}
	c, err := a.NewClient(ctx, aggregate.ClientConfig{Brokers: env.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := run()
	for i := range 30 {
		if o, err := c.Submit(ctx, "blue", inv.ReceiveShipment{Quantity: 1}); err != nil || o.Version != int64(i+1) {
			t.Fatalf("command %d: %+v, %v", i, o, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := run()
	o, err := c.Submit(ctx, "blue", inv.SellPair{Price: 1})
	if err != nil || o.Status != aggregate.Accepted || o.Version != 31 {
		t.Fatalf("after the restore: %+v, %v", o, err)
	}
	if second.RestoredRecords() == 0 {
		t.Error("the second instance restored nothing")
	}
	// The store, once the commit that answered is applied locally.
	st, err := engine.QueryKeyValueStore(second, a.StateStore(), serde.String, serde.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	await.NoError(t, 10*time.Second, "the restored state", func() error {
		b2, ok, err := st.Get("blue")
		if err != nil || !ok {
			t.Fatalf("the restored state: %v, %v", ok, err)
		}
		v, s, err := a.DecodeState(b2)
		if err == nil && v == 31 && s == (inv.State{InStock: 29, Sold: 1}) {
			return nil
		}
		return fmt.Errorf("version %d, %+v, %v; want 31, 29 in stock, 1 sold", v, s, err)
	})
}

// What Kafka's absence is, and what is its refusal of a write.
func TestKafkaAway(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		away bool
	}{
		{fmt.Errorf("unable to dial: %w", dial), true},
		{kerr.NotLeaderForPartition, true},
		{kerr.NotEnoughReplicas, true},
		{io.EOF, true},
		{kgo.ErrRecordTimeout, true},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.MessageTooLarge, false},
		{errors.New("something else"), false},
		{nil, false},
	} {
		if got := aggregate.KafkaAway(c.err); got != c.away {
			t.Errorf("kafkaAway(%v) = %v, want %v", c.err, got, c.away)
		}
	}
}
