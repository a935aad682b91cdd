package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/projection"
)

// store runs, on the test's broker, one exactly-once instance with the
// inventory aggregate and a view "stock" of pairs in stock per shoe,
// folded from the aggregate's events, and serves both.
func store(t *testing.T) *httptest.Server {
	t.Helper()
	env := kafkaenv.ForTest(t)
	name := fmt.Sprintf("http-inv-%d", time.Now().UnixNano())
	a, err := inv.New(name)
	if err != nil {
		t.Fatal(err)
	}
	commands, events, replies := a.Topics()
	env.CreateTopics(t, 2, commands, events, replies)
	b := engine.NewBuilder()
	a.AddTo(b)
	stock, err := projection.Fold(b, "stock", events, serde.String, a.EventSerde(), serde.Int64, func() int64 { return 0 },
		func(_ string, e inv.Event, pairs int64) int64 {
			return int64(inv.Evolve(inv.State{InStock: int(pairs)}, e).InStock)
		})
	if err != nil {
		t.Fatal(err)
	}
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app := enginetest.StartApp(t, top, engine.Config{AppID: name, Brokers: env.Brokers, Guarantee: engine.ExactlyOnce})
	client, err := a.NewClient(context.Background(), aggregate.ClientConfig{Brokers: env.Brokers, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	views, err := projection.NewRegistry(stock)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Instance: app, Views: views, Commands: map[string]httpapi.Submitter{"inventory": client}, MaxBodyBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

type answer struct {
	status  int
	etag    string
	outcome aggregate.Outcome
	body    string
}

func post(t *testing.T, s *httptest.Server, path, contentType, body string, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, etag: resp.Header.Get("ETag"), body: string(b)}
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(b, &a.outcome); err != nil {
			t.Fatalf("POST %s: %s: %v", path, b, err)
		}
	}
	return a
}

// Commands over HTTP: 200 accepted, 422 rejected, 409 conflict, each with
// the outcome; a repeated Idempotency-Key gets the first outcome; and a
// read with the accepted command's event positions sees its effect, every
// time.
func TestCommandsOverHTTP(t *testing.T) {
	s := store(t)
	const path = "/aggregates/inventory/blue/commands"
	ship := `{"type":"ReceiveShipment","data":{"quantity":3,"unitCost":2500}}`
	sell := `{"type":"SellPair","data":{"price":6000}}`

	if a := post(t, s, "/aggregates/inventory/red/commands", "application/json", sell); a.status != 422 || a.outcome.Rejection == nil || a.outcome.Rejection.Code != inv.OutOfStock {
		t.Errorf("a sale of a shoe not in stock: %d %s", a.status, a.body)
	}
	first := post(t, s, path, "application/json", ship, "Idempotency-Key", "ship-1")
	if first.status != 200 || first.outcome.Version != 1 || first.etag != `"1"` || len(first.outcome.Events) != 1 {
		t.Fatalf("a shipment: %d %s (ETag %s)", first.status, first.body, first.etag)
	}
	again := post(t, s, path, "application/json", ship, "Idempotency-Key", "ship-1")
	if again.status != 200 || !again.outcome.Duplicate || again.outcome.Version != 1 || again.outcome.Events[0] != first.outcome.Events[0] {
		t.Errorf("the shipment again: %d %s", again.status, again.body)
	}
	// The key again with another body or another If-Match is no repeat:
	// 422 naming the key, nothing done (the shipment's outcome still
	// answers the key, and the version is 1). Keys are the aggregate's:
	// on another, the key names another command.
	if a := post(t, s, "/aggregates/inventory/green/commands", "application/json", ship, "Idempotency-Key", "ship-1"); a.status != 200 || a.outcome.Duplicate || a.outcome.AggregateID != "green" {
		t.Errorf("key ship-1 on another aggregate: %d %s", a.status, a.body)
	}
	for _, c := range []struct{ path, body, match string }{
		{path, `{"type":"ReceiveShipment","data":{"quantity":4,"unitCost":2500}}`, ""},
		{path, ship, `"0"`},
	} {
		hs := []string{"Idempotency-Key", "ship-1"}
		if c.match != "" {
			hs = append(hs, "If-Match", c.match)
		}
		if a := post(t, s, c.path, "application/json", c.body, hs...); a.status != 422 || !strings.Contains(a.body, `Idempotency-Key \"ship-1\"`) {
			t.Errorf("key ship-1 reused for %s %s (If-Match %s): %d %s", c.path, c.body, c.match, a.status, a.body)
		}
	}
	if a := post(t, s, path, "application/json", ship, "Idempotency-Key", "ship-1"); a.status != 200 || !a.outcome.Duplicate || a.outcome.Version != 1 {
		t.Errorf("the shipment again, after the reuses: %d %s", a.status, a.body)
	}
	if a := post(t, s, path, "application/json", sell, "If-Match", `"0"`); a.status != 409 || a.outcome.Status != aggregate.Conflict || a.etag != `"1"` {
		t.Errorf("a sale expecting version 0: %d %s (ETag %s)", a.status, a.body, a.etag)
	}
	// Read your writes: each sale, then the stock with its event's
	// position (more stock first).
	if a := post(t, s, path, "application/json", `{"type":"ReceiveShipment","data":{"quantity":22}}`); a.status != 200 || a.outcome.Version != 2 {
		t.Fatalf("a second shipment: %d %s", a.status, a.body)
	}
	for i := range 25 {
		a := post(t, s, path, "application/json", sell, "If-Match", fmt.Sprintf(`"%d"`, 2+i))
		if a.status != 200 {
			t.Fatalf("sale %d: %d %s", i, a.status, a.body)
		}
		p := a.outcome.Events[0]
		status, _, body := get(t, s, fmt.Sprintf("/views/stock/keys/blue?minPosition=%s:%d:%d", p.Topic, p.Partition, p.Offset))
		if want := fmt.Sprintf(`{"key":"blue","value":%d}`, 24-i); status != 200 || strings.TrimSpace(body) != want {
			t.Errorf("after sale %d: %d %s, want %s", i, status, body, want)
		}
	}
	if a := post(t, s, path, "application/json", sell); a.status != 422 {
		t.Errorf("a sale with none left: %d %s", a.status, a.body)
	}
}

// Bad commands are 4xx problems; nothing is submitted.
func TestBadCommands(t *testing.T) {
	s := store(t)
	for _, c := range []struct {
		path, contentType, body string
		headers                 []string
		status                  int
		detail                  string
	}{
		{"/aggregates/nope/blue/commands", "application/json", `{}`, nil, 404, `no aggregate \"nope\"`},
		{"/aggregates/inventory/blue/commands", "text/plain", `{}`, nil, 415, "a command is application/json"},
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":`, nil, 400, "the body is not JSON"},
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":"Steal","data":{}}`, nil, 400, `unknown type \"Steal\"`},
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":"SellPair","data":{"price":"x"}}`, nil, 400, "decode SellPair"},
		// In the caller's terms, not Go's.
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":"ReceiveShipment","data":{"quantity":1.5}}`, nil, 400, `field \"quantity\": number 1.5 where an integer is expected`},
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":"SellPair","data":{"prise":100}}`, nil, 400, `unknown field \"prise\"`},
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":"SellPair","data":{"note":"` + strings.Repeat("x", 2000) + `"}}`, nil, 413, "at most 1024 bytes"},
		{"/aggregates/inventory/blue/commands", "application/json", `{"type":"SellPair","data":{}}`, []string{"If-Match", "v1"}, 400, "want the aggregate's version"},
	} {
		a := post(t, s, c.path, c.contentType, c.body, c.headers...)
		var p httpapi.Problem
		if err := json.Unmarshal(bytes.TrimSpace([]byte(a.body)), &p); err != nil || a.status != c.status || p.Status != c.status || !strings.Contains(a.body, c.detail) || strings.Contains(a.body, "Go struct") || strings.Contains(a.body, "aggregate: ") {
			t.Errorf("POST %s %s: %d %s, want %d saying %s", c.path, c.body[:min(len(c.body), 40)], a.status, a.body, c.status, c.detail)
		}
	}
}

// The OpenAPI document gives each command's type and fields, from the
// registered Go types.
func TestOpenAPICommands(t *testing.T) {
	s := store(t)
	resp, err := http.Get(s.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Components struct {
			Schemas struct {
				Command struct {
					OneOf []struct {
						Properties struct {
							Type struct {
								Const string `json:"const"`
							} `json:"type"`
							Data struct {
								Properties map[string]struct {
									Type any `json:"type"`
								} `json:"properties"`
							} `json:"data"`
						} `json:"properties"`
					} `json:"oneOf"`
				} `json:"Command"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, v := range doc.Components.Schemas.Command.OneOf {
		var fields []string
		for f, p := range v.Properties.Data.Properties {
			fields = append(fields, fmt.Sprintf("%s:%v", f, p.Type))
		}
		slices.Sort(fields)
		got[v.Properties.Type.Const] = fields
	}
	want := map[string][]string{
		"AcceptReturn":    {"price:integer", "reason:string"},
		"Discontinue":     nil,
		"ReceiveShipment": {"quantity:integer", "shipment:string", "unitCost:integer"},
		"SellPair":        {"price:integer"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("commands documented: %v, want %v", got, want)
	}
}
