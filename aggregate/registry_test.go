package aggregate_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

// A later version of PairSold, as another service's projection has it: a
// field added with a default, which BACKWARD compatibility allows.
type pairSoldV2 struct {
	Price   int64  `avro:"price"`
	Channel string `avro:"channel"`
}

const pairSoldV2Schema = `{"type":"record","name":"PairSold","namespace":"inventory","fields":[
	{"name":"price","type":"long","default":0},{"name":"channel","type":"string","default":"shop"}]}`

type shipmentReceivedV1 struct {
	Quantity int64 `avro:"quantity"`
}

const shipmentReceivedReader = `{"type":"record","name":"ShipmentReceived","namespace":"inventory","fields":[
	{"name":"quantity","type":"long"}]}`

// Commands and events with their schemas in a registry: the aggregate
// decides commands written in Confluent's wire format, writes its events
// so, and a projection built on a later version of an event's schema
// folds the events written before it.
func TestRegisteredSchemas(t *testing.T) {
	ctx := context.Background()
	sreg := srtest.New(t)
	kenv := kafkaenv.ForTest(t)
	reg, err := registry.New(registry.Config{URLs: []string{sreg.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	name := sreg.Prefix + "-inv"
	cmds, events := inv.Commands(), inv.Events()
	cs, err := registry.AvroUnion(ctx, reg, name+"-commands", inv.CommandMembers(), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	es, err := registry.AvroUnion(ctx, reg, name+"-events", inv.EventMembers(), registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	cmds.Use(cs)
	events.Use(es)
	a, err := aggregate.New(aggregate.Config[inv.State, inv.Command, inv.Event]{
		Name: name, Initial: func() inv.State { return inv.State{} }, Decide: inv.Decide, Evolve: inv.Evolve,
		Commands: cmds, Events: events,
	})
	if err != nil {
		t.Fatal(err)
	}
	commandTopic, eventTopic, replyTopic := a.Topics()
	kenv.CreateTopics(t, 2, commandTopic, eventTopic, replyTopic)
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartApp(t, top, engine.Config{AppID: name, Brokers: kenv.Brokers, Guarantee: engine.ExactlyOnce, CommitInterval: 50 * time.Millisecond})
	c, err := a.NewClient(ctx, aggregate.ClientConfig{Brokers: kenv.Brokers, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	shoes := []string{"blue", "red"}
	var accepted int
	for i, shoe := range shoes {
		for _, cmd := range []inv.Command{inv.ReceiveShipment{Quantity: 3 + i, UnitCost: 2500, Shipment: "s-" + shoe}, inv.SellPair{}, inv.SellPair{Price: 9900}, inv.AcceptReturn{Reason: "too small"}} {
			o, err := c.Submit(ctx, shoe, cmd)
			if err != nil || o.Status != aggregate.Accepted {
				t.Fatalf("%s %T: %+v, %v", shoe, cmd, o, err)
			}
			accepted++
		}
	}
	// A command as an HTTP request brings it: the JSON envelope, written
	// to the command topic in Avro all the same.
	if o, err := c.SubmitJSON(ctx, "blue", []byte(`{"type":"SellPair","data":{"price":100}}`)); err != nil || o.Status != aggregate.Accepted {
		t.Fatalf("SubmitJSON: %+v, %v", o, err)
	}
	accepted++
	// Red's last three pairs sell, and then no more.
	for i := range 4 {
		o, err := c.Submit(ctx, "red", inv.SellPair{})
		switch {
		case err != nil:
			t.Fatal(err)
		case i < 3 && o.Status != aggregate.Accepted:
			t.Fatalf("red's pair %d: %+v", i, o)
		case i == 3 && (o.Status != aggregate.Rejected || o.Rejection.Code != inv.OutOfStock):
			t.Fatalf("a sale out of stock: %+v", o)
		}
		if o.Status == aggregate.Accepted {
			accepted++
		}
	}

	// The command and event topics hold the wire format, and the events
	// fold to the states the aggregate reached.
	for _, r := range readN(t, kenv, commandTopic, accepted+1) {
		if len(r.Value) < 5 || r.Value[0] != 0 {
			t.Fatalf("a command not in the wire format: % x", r.Value[:min(8, len(r.Value))])
		}
	}
	recs := readN(t, kenv, eventTopic, accepted) // one per accepted command
	folded := map[string]inv.State{}
	for _, r := range recs {
		e, err := events.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		folded[string(r.Key)] = inv.Evolve(folded[string(r.Key)], e)
	}
	want := map[string]inv.State{"blue": {InStock: 1, Sold: 3, Returned: 1}, "red": {InStock: 0, Sold: 5, Returned: 1}}
	for shoe, w := range want {
		if folded[shoe] != w {
			t.Errorf("%s folded to %+v, want %+v", shoe, folded[shoe], w)
		}
	}

	// Another service's projection, on a later PairSold and an older
	// ShipmentReceived: registering its schema passes the subject's
	// compatibility rule, and it folds every event written before it.
	projection, err := registry.AvroUnion(ctx, reg, eventTopic, []registry.Member[any]{
		registry.AvroMember[pairSoldV2, any](pairSoldV2Schema),
		registry.AvroMember[shipmentReceivedV1, any](shipmentReceivedReader),
	}, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	var received int64
	var sales []pairSoldV2
	for _, r := range recs {
		v, err := projection.Decode(r.Value)
		switch v := v.(type) {
		case pairSoldV2:
			sales = append(sales, v)
		case shipmentReceivedV1:
			received += v.Quantity
		default:
			if err == nil {
				t.Fatalf("read %T", v)
			}
		}
	}
	if received != 7 || len(sales) != 8 {
		t.Errorf("the projection folded %d pairs received and %d sales, want 7 and 8", received, len(sales))
	}
	for _, s := range sales {
		if s.Channel != "shop" {
			t.Errorf("an old sale read with channel %q, want the default", s.Channel)
		}
	}
}

// readN reads a topic's first n committed records, failing the test if
// they do not come within 30s.
func readN(t *testing.T, kenv *kafkaenv.Env, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kenv.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d records of %d after 30s", topic, len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
