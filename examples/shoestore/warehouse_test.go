package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

// The store and the warehouse, each an application of its own on the same
// brokers, as `go run ./examples/shoestore` runs them: a shoe with a
// reorder point is restocked when its sales take it below, after the
// supplier's lead time (the default); a shipment of a shoe discontinued
// while it was under way is refused by the store and goes back to the
// supplier. On a real broker when KAFKA_BROKERS is set. With the
// inventory's commands and events in JSON envelopes, and in Avro with
// their schemas in a registry (the restock process manager reads the
// events and sends the commands in Avro).
func TestWarehouseRestocks(t *testing.T) {
	t.Run("json", func(t *testing.T) { warehouseRestocks(t, nil) })
	t.Run("avro", func(t *testing.T) {
		reg, err := registry.New(registry.Config{URLs: []string{srtest.New(t).URL}})
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		warehouseRestocks(t, reg)
	})
}

func warehouseRestocks(t *testing.T, reg *registry.Registry) {
	env := kafkaenv.ForTest(t)
	name := fmt.Sprintf("wh%d", time.Now().UnixNano()%1_000_000_000)
	storeURL, whURL := make(chan string, 1), make(chan string, 1)
	cfg := config{Name: name, Addr: "127.0.0.1:0", Brokers: env.Brokers, StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Ready: func(url string) { storeURL <- url }, Registry: reg}
	wcfg := warehouseConfig{Name: name, Addr: "127.0.0.1:0", Brokers: env.Brokers, StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Ready: func(url string) { whURL <- url }, Registry: reg}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServices(ctx, true, true, cfg, wcfg) }()
	stopped := false
	defer func() {
		cancel()
		if stopped {
			return
		}
		if err := <-done; err != nil {
			t.Errorf("the services: %v", err)
		}
	}()
	urls := map[string]string{}
	for len(urls) < 2 {
		select {
		case u := <-storeURL:
			urls["store"] = u
		case u := <-whURL:
			urls["warehouse"] = u
		case err := <-done:
			stopped = true
			t.Fatalf("the services stopped: %v", err)
		case <-time.After(2 * time.Minute):
			t.Fatalf("not serving after 2 minutes: %v", urls)
		}
	}
	s := &store{t: t, url: urls["store"]}
	w := &store{t: t, url: urls["warehouse"]}

	s.command("blue", `{"type":"ReceiveShipment","data":{"quantity":3,"unitCost":2500}}`, 200)
	w.post("/aggregates/supply/blue/commands", `{"type":"SetReorderPoint","data":{"below":2,"order":10,"unitCost":2400}}`, 200)
	w.post("/aggregates/supply/blue/commands", `{"type":"SetReorderPoint","data":{"below":2,"order":0}}`, 422)
	s.command("blue", `{"type":"SellPair","data":{}}`, 200)
	s.await("/views/inventory/keys/blue", `{"key":"blue","value":{"inStock":2,"sold":1,"returned":0}}`)
	s.command("blue", `{"type":"SellPair","data":{}}`, 200)
	// One in stock, below 2: ten pairs ordered, delivered after the lead
	// time, received by the store.
	s.await("/views/inventory/keys/blue", `{"key":"blue","value":{"inStock":11,"sold":2,"returned":0}}`)
	w.await("/views/supply/keys/blue", `{"key":"blue","value":{"reorderPoint":{"below":2,"order":10,"unitCost":2400},"delivered":{"blue-1":10},"ordered":1,"returned":0}}`)
	w.await("/views/restock/keys/blue", "")

	// Red: ordered when it sells out, discontinued before the delivery;
	// the store refuses the shipment and it goes back.
	s.command("red", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":3000}}`, 200)
	w.post("/aggregates/supply/red/commands", `{"type":"SetReorderPoint","data":{"below":1,"order":5,"unitCost":2900}}`, 200)
	w.await("/views/restock/keys/red", "")
	s.command("red", `{"type":"SellPair","data":{}}`, 200)
	w.await("/views/supply/keys/red", `{"key":"red","value":{"reorderPoint":{"below":1,"order":5,"unitCost":2900},"open":"red-1","openQuantity":5,"openCost":2900,"ordered":1,"returned":0}}`)
	s.command("red", `{"type":"Discontinue","data":{}}`, 200)
	w.await("/views/supply/keys/red", `{"key":"red","value":{"reorderPoint":{"below":1,"order":5,"unitCost":2900},"ordered":1,"returned":1}}`)
	s.await("/views/inventory/keys/red", `{"key":"red","value":{"inStock":0,"sold":1,"returned":0,"discontinued":true}}`)
}
