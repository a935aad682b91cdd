package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/browser"
)

// The store's console in Chromium, as an operator opens it: the topology
// drawn with every store; a command sent updates the inventory's page and
// its live change feed; the lag chart moves while commands arrive; an
// event the store cannot read shows among the dead letters; on the
// versions page, v1 is active, and v2, started in another instance and
// caught up, is promoted with its button (the API then serves v2's views)
// and rolled back with v2's. No JavaScript error on the way; a screenshot
// of each page under .cache/console/.
func TestConsole(t *testing.T) {
	b := browser.New(t)
	env := kafkaenv.ForTest(t)
	s := startStore(t, config{Brokers: env.Brokers})
	b.Run(chromedp.Navigate(s.url + "/console/"))

	// Every store of the topology, drawn.
	var g engine.TopologyGraph
	if err := json.Unmarshal([]byte(s.await("/topology?format=json", "")), &g); err != nil {
		t.Fatal(err)
	}
	b.Until("the topology drawn", `!!document.querySelector("#topology g.store")`, 30*time.Second)
	for _, st := range g.Stores {
		if !browser.Eval[bool](b, fmt.Sprintf(`!!document.querySelector('#topology g.store[data-store=%q]')`, st.Name)) {
			t.Errorf("the graph has no store %s", st.Name)
		}
	}
	// Every name whole, wrapped where it is long, not cut.
	for _, sub := range g.SubTopologies {
		for _, n := range sub.Nodes {
			if got := browser.Eval[string](b, fmt.Sprintf(`document.querySelector('#topology g.node[data-node=%q] text.name').textContent`, n.Name)); got != n.Name {
				t.Errorf("node %s drawn as %q", n.Name, got)
			}
		}
	}
	b.Until("the rates", `[...document.querySelectorAll("#topology .rate")].every(r => r.textContent.endsWith("records/s"))`, 30*time.Second)
	keep(t, b, "topology")

	// A store with a view opens it: the inventory's, its change feed
	// open; a shipment arrives.
	b.Run(chromedp.Click(chromedp.CSS(`#topology g.store[data-store="inventory"]`)))
	b.Until("the inventory's page", `location.hash === "#/views?view=inventory" && !!document.querySelector("#entries")`, 30*time.Second)
	b.Run(chromedp.Click(chromedp.ID("watch")))
	b.Until("the change feed open", `document.getElementById("feed").dataset.open === "true"`, 30*time.Second)
	s.command("blue", `{"type":"ReceiveShipment","data":{"quantity":7,"unitCost":2500}}`, 200)
	b.Until("blue's row on the page", `(document.querySelector('#entries tr[data-key="blue"]') || {}).textContent?.includes('"inStock":7')`, 30*time.Second)
	b.Until("blue's change in the feed", `[...document.querySelectorAll("#feed [data-change]")].some(e => e.textContent.includes('"key":"blue"') && e.textContent.includes('"inStock":7'))`, 30*time.Second)
	// A key read; a prefix that keeps blue and one that keeps nothing.
	s.command("green", `{"type":"ReceiveShipment","data":{"quantity":2,"unitCost":3500}}`, 200)
	b.Until("green's row", `!!document.querySelector('#entries tr[data-key="green"]')`, 30*time.Second)
	b.Run(chromedp.SetValue(chromedp.CSS(`input[aria-label="key to read"]`), "green"), chromedp.Click(chromedp.ID("read-key")))
	b.Until("green read", `document.getElementById("key-value").textContent.includes('"inStock": 2')`, 30*time.Second)
	b.Run(chromedp.SendKeys(chromedp.CSS(`input[aria-label="key prefix"]`), "bl"))
	b.Until("only blue under bl", `document.querySelectorAll("#entries tr[data-key]").length === 1 && !!document.querySelector('#entries tr[data-key="blue"]')`, 30*time.Second)
	b.Run(chromedp.SendKeys(chromedp.CSS(`input[aria-label="key prefix"]`), "x"))
	b.Until("nothing under blx", `document.getElementById("entries").textContent.includes("No entries with this prefix")`, 30*time.Second)
	keep(t, b, "views")

	// Commands arrive while the lag page is open: its chart moves.
	b.Run(chromedp.Navigate(s.url + "/console/#/lag"))
	b.Until("the lag chart", `Number(document.getElementById("lag-chart").dataset.points) >= 2`, 30*time.Second)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			resp, err := s.do(http.MethodPost, "/aggregates/inventory/red/commands", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":3000}}`)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	b.Until("the chart to show records read", `Number(document.getElementById("lag-chart").dataset.rate) > 0`, 30*time.Second)
	keep(t, b, "lag")
	// The topology under that load: the events' path has rates.
	b.Run(chromedp.Navigate(s.url + "/console/#/topology"))
	b.Until("the events' rate", `[...document.querySelectorAll('#topology g.node[data-node="events"] .rate')].some(r => parseFloat(r.textContent) > 0)`, 30*time.Second)
	keep(t, b, "topology-busy")
	stop()
	wg.Wait()
	// The lag page opened again starts with what the instances measured
	// themselves before it (GET /lag), not empty.
	b.Run(chromedp.Navigate(s.url + "/console/#/lag"))
	b.Until("the instances' own past drawn", `Number((document.getElementById("lag-chart") || {dataset: {}}).dataset.pastPoints) >= 2`, 30*time.Second)

	// An event that is no JSON (a faulty producer's): put aside, shown
	// with why.
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: s.name + "-inventory-events", Key: []byte("blue"), Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b.Run(chromedp.Navigate(s.url + "/console/#/deadletters"))
	b.Until("the dead letter", `[...document.querySelectorAll("#deadletters td")].some(td => td.textContent === "not json")`, 60*time.Second)
	if got := browser.Eval[string](b, `document.querySelector("#deadletters tr:nth-child(2) td:nth-child(2)").textContent`); got != "decode" {
		t.Errorf("the dead letter's stage: %q, want decode", got)
	}
	keep(t, b, "deadletters")

	b.Run(chromedp.Navigate(s.url + "/console/#/instances"))
	b.Until("every task placed", `document.querySelectorAll("#tasks tr[data-task]").length > 0 && !!document.querySelector('.card[data-instance="`+s.name+`-v1-0"]')`, 30*time.Second)
	// The inventory's decider on the instance's card: running, caught up.
	b.Until("the decider shown", `(document.querySelector('tr[data-decider="inventory"]') || {}).textContent?.includes("running")`, 30*time.Second)
	if got := browser.Eval[string](b, `document.querySelector('tr[data-decider="inventory"] td:nth-child(2)').textContent`); got != deciderApp(s.name) {
		t.Errorf("the decider's group on the card: %q, want %q", got, deciderApp(s.name))
	}
	b.Until("the decider caught up", `document.querySelector('tr[data-decider="inventory"] td:last-child').textContent === "0"`, 30*time.Second)
	keep(t, b, "instances")
	// Versions: v1 active; v2, in another instance, caught up, promoted
	// here; this instance then serves v2's views (asking the other); v2
	// rolled back.
	b.Run(chromedp.Navigate(s.url + "/console/#/versions"))
	b.Until("v1 active", `(document.querySelector('#versions tr[data-version="v1"]') || {}).textContent?.includes("active")`, 30*time.Second)
	startStore(t, config{Name: s.name, Brokers: env.Brokers, Version: "v2"})
	b.Until("v2 caught up", `(document.querySelector('#versions tr[data-version="v2"]') || {}).textContent?.includes("caught up") && !document.querySelector('#versions tr[data-version="v2"]').textContent.includes("catching")`, time.Minute)
	keep(t, b, "versions")
	b.Run(chromedp.Click(chromedp.CSS(`button[data-promote="v2"]`)))
	b.Until("the confirmation", `!!document.getElementById("confirm")`, 10*time.Second)
	b.Run(chromedp.Click(chromedp.ID("confirm")))
	b.Until("v2 promoted", `document.getElementById("result").textContent.includes("Promoted: v2 is active.")`, 30*time.Second)
	await.NoError(t, 30*time.Second, "the API serves v2", func() error {
		resp, err := s.do(http.MethodGet, "/views", "")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if v := resp.Header.Get(httpapi.VersionHeader); resp.StatusCode != 200 || v != "v2" || !strings.Contains(string(body), `"revenue"`) {
			return fmt.Errorf("%d from %q: %s", resp.StatusCode, v, body)
		}
		return nil
	})
	b.Until("v2's roll back button", `!!document.querySelector('#versions tr[data-version="v2"] button[data-rollback]')`, 30*time.Second)
	b.Run(chromedp.Click(chromedp.CSS(`#versions tr[data-version="v2"] button[data-rollback]`)))
	b.Until("the confirmation", `!!document.getElementById("confirm")`, 10*time.Second)
	b.Run(chromedp.Click(chromedp.ID("confirm")))
	b.Until("v1 back", `document.getElementById("result").textContent.includes("Rolled back: v1 is active.")`, 30*time.Second)

	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("%d JavaScript errors: %q", len(errs), errs)
	}
}

// keep takes a screenshot of the page as shoestore-<name>.png; with
// OXBOW_README_SCREENSHOT=1, the busy topology's also replaces console.png,
// the README's.
func keep(t *testing.T, b *browser.Browser, name string) {
	t.Helper()
	path := b.Screenshot("shoestore-" + name)
	if os.Getenv("OXBOW_README_SCREENSHOT") == "" || name != "topology-busy" {
		return
	}
	png, err := os.ReadFile(path)
	if err == nil {
		err = os.WriteFile("console.png", png, 0o644)
	}
	if err != nil {
		t.Error(err)
	}
}
