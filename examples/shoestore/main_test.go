package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/httpapi/httpapitest"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

// No goroutine a test started outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The store, in-process, driven through its HTTP API with the classic
// scenario — red, blue and green shoes arrive; blue is sold; red is sold;
// blue is returned; green is sold — and a sale of a shoe out of stock;
// then the exact inventory, till, returns log and daily sales. On a real
// broker when KAFKA_BROKERS is set, and with the catalog captured from
// real PostgreSQL when OXBOW_PG_DSN is (then a price changed in the
// database prices the next sale).
func TestShoeStore(t *testing.T) {
	env := kafkaenv.ForTest(t)
	var pgDSN string
	if os.Getenv("OXBOW_PG_DSN") != "" {
		pgDSN = pgtest.Database(t)
	}
	shoeStoreScenario(t, config{Brokers: env.Brokers, PGDSN: pgDSN}, pgDSN)
}

// shoeStoreScenario runs the store on cfg's brokers, with its catalog in
// the PostgreSQL database cfg.PGDSN names (or built in, if it is ""),
// and drives it through the scenario; adminDSN is the same database for
// the test's own changes to the catalog. Then more, if given, looks at
// the store before it stops.
func shoeStoreScenario(t *testing.T, cfg config, adminDSN string, more ...func(*store)) {
	s := startStore(t, cfg)
	url := s.url

	s.command("red", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":3000}}`, 200)
	s.command("blue", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":2500}}`, 200)
	s.command("green", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":3500}}`, 200)
	s.command("blue", `{"type":"SellPair","data":{}}`, 200)
	s.command("red", `{"type":"SellPair","data":{}}`, 200)
	s.command("blue", `{"type":"AcceptReturn","data":{"reason":"too small"}}`, 200)
	s.command("green", `{"type":"SellPair","data":{}}`, 200)
	if body := s.command("red", `{"type":"SellPair","data":{}}`, 422); !strings.Contains(body, "out-of-stock") {
		t.Errorf("a sale of red, out of stock: %s", body)
	}
	// Bad commands change nothing: a shoe the catalog lacks, a negative
	// cost or refund, a misspelt field.
	s.command("purple", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":3000}}`, 200)
	if body := s.command("purple", `{"type":"SellPair","data":{}}`, 422); !strings.Contains(body, NotInCatalog) {
		t.Errorf("a sale of a shoe not in the catalog: %s", body)
	}
	if body := s.command("green", `{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":-1}}`, 422); !strings.Contains(body, "bad-cost") {
		t.Errorf("a negative unit cost: %s", body)
	}
	if body := s.command("blue", `{"type":"AcceptReturn","data":{"price":-5500}}`, 422); !strings.Contains(body, "bad-price") {
		t.Errorf("a negative refund: %s", body)
	}
	if body := s.command("blue", `{"type":"SellPair","data":{"prise":100}}`, 400); !strings.Contains(body, `unknown field \"prise\"`) {
		t.Errorf("a misspelt price: %s", body)
	}

	s.await("/views/inventory/keys/red", `{"key":"red","value":{"inStock":0,"sold":1,"returned":0}}`)
	s.await("/views/inventory/keys/blue", `{"key":"blue","value":{"inStock":1,"sold":1,"returned":1}}`)
	s.await("/views/inventory/keys/green", `{"key":"green","value":{"inStock":0,"sold":1,"returned":0}}`)
	// 60.00 (red) + 55.00 (blue) - 55.00 (blue back) + 70.00 (green).
	s.await("/views/till/keys/till", `{"key":"till","value":{"revenueCents":13000,"transactions":4,"sales":3,"returns":1}}`)
	returns := s.await("/views/returns/entries", "")
	var page struct {
		Entries []struct {
			Key   string `json:"key"`
			Value Return `json:"value"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(returns), &page); err != nil || len(page.Entries) != 1 {
		t.Fatalf("returns: %s (%v)", returns, err)
	}
	if e := page.Entries[0]; e.Key != "blue/000003" || e.Value.Reason != "too small" || e.Value.Refund != 5500 || e.Value.Shoe != "blue" {
		t.Errorf("the return: %+v", e)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for _, shoe := range []string{"red", "blue", "green"} {
		s.await("/views/daily-sales/keys/"+shoe+"/windows", fmt.Sprintf(`{"key":%q,"windows":[{"start":%q,"end":%q,"value":1}]}`,
			shoe, today.Format(time.RFC3339), today.Add(24*time.Hour).Format(time.RFC3339)))
	}
	// The engine's, the API's and the commands' metrics, in seconds.
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	httpapitest.RequireFamilies(t, httpapitest.MetricsOf(t, req), "http_server_request_duration_seconds", "oxbow_command_duration_seconds", "oxbow_process_latency_seconds", "oxbow_commit_latency_seconds")

	// /status shows the inventory's decider beside the views: running,
	// its tasks, every command it was sent decided (lag 0).
	var deciders []httpapi.DeciderStatus
	await.NoError(t, time.Minute, "the decider caught up in /status", func() error {
		var st httpapi.Status
		if err := json.Unmarshal([]byte(s.await("/status", "")), &st); err != nil {
			return err
		}
		deciders = st.Deciders
		if len(deciders) != 1 || deciders[0].Aggregate != "inventory" || deciders[0].State != "running" || len(deciders[0].Tasks) == 0 || len(deciders[0].Lag) == 0 {
			return fmt.Errorf("deciders %+v", deciders)
		}
		decided := int64(0)
		for _, ps := range deciders[0].Position {
			for _, at := range ps {
				decided += at
			}
		}
		for _, ps := range deciders[0].Lag {
			for p, lag := range ps {
				if lag != 0 {
					return fmt.Errorf("the decider is %d behind on partition %d: %+v", lag, p, deciders[0])
				}
			}
		}
		if decided < 11 { // the commands above that reached it (not the misspelt one, nor purple's sale); offsets count markers too
			return fmt.Errorf("the decider's positions add up to %d: %+v", decided, deciders[0])
		}
		return nil
	})
	if !strings.HasSuffix(deciders[0].Group, deciderApp("")) {
		t.Errorf("the decider's group %q, want the store's name and %q", deciders[0].Group, deciderApp(""))
	}

	if cfg.PGDSN == "" {
		return
	}
	// The catalog lives in PostgreSQL: a new price reaches the next sale.
	// A sale retried with its Idempotency-Key after the change is the
	// same sale, at the price it was made at.
	s.command("green", `{"type":"ReceiveShipment","data":{"quantity":2,"unitCost":3500}}`, 200)
	sale := func() string {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+"/aggregates/inventory/green/commands", strings.NewReader(`{"type":"SellPair","data":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "green-sale-2")
		if cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("the green sale with its key: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	sale()
	pgtest.Exec(t, adminDSN, `UPDATE catalog SET price_cents = 8000 WHERE model = 'green'`)
	s.await("/views/catalog/keys/green", `{"key":"green","value":{"model":"green","name":"Green Loafer","price_cents":8000}}`)
	if again := sale(); !strings.Contains(again, `"duplicate":true`) {
		t.Errorf("the green sale retried after the price change: %s, want its first outcome", again)
	}
	s.command("green", `{"type":"SellPair","data":{}}`, 200)
	// 130.00 before, 70.00 for the green sale before the change, 80.00 after.
	s.await("/views/till/keys/till", `{"key":"till","value":{"revenueCents":28000,"transactions":6,"sales":5,"returns":1}}`)
	for _, f := range more {
		f(s)
	}
}

// startStore runs the store in-process on cfg (named afresh if it has no
// name), with a temporary state dir, until the test ends; it returns the
// store's API once it serves.
func startStore(t *testing.T, cfg config) *store {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("shoes%d", time.Now().UnixNano()%1_000_000_000)
	}
	cfg.Addr, cfg.StateDir, cfg.Logger = "127.0.0.1:0", t.TempDir(), slog.New(slog.DiscardHandler)
	ready := make(chan string, 1)
	cfg.Ready = func(url string) { ready <- url }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case url := <-ready:
		return &store{t: t, url: url, token: cfg.Token, name: cfg.Name}
	case err := <-done:
		done <- err
		t.Fatalf("the store stopped: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the store is not serving after 2 minutes")
	}
	return nil
}

// store drives the store's API.
type store struct {
	t     *testing.T
	url   string
	token string // sent as a bearer token, if set
	name  string // the application's
}

// do sends a request with the store's token, if it has one.
func (s *store) do(method, path, body string) (*http.Response, error) {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	return http.DefaultClient.Do(req)
}

// command posts a command to a shoe's inventory and checks its status; it
// returns the body.
func (s *store) command(shoe, body string, status int) string {
	s.t.Helper()
	return s.post("/aggregates/inventory/"+shoe+"/commands", body, status)
}

// post posts body to path and checks the status; it returns the body.
func (s *store) post(path, body string, status int) string {
	s.t.Helper()
	resp, err := s.do(http.MethodPost, path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		s.t.Fatalf("POST %s %s: %d %s, want %d", path, body, resp.StatusCode, b, status)
	}
	return string(b)
}

// await gets path until it answers 200 with want (compact JSON; any body
// if want is ""), and returns the body.
func (s *store) await(path, want string) string {
	s.t.Helper()
	var body string
	await.NoError(s.t, 60*time.Second, fmt.Sprintf("GET %s, want 200 %s", path, want), func() error {
		resp, err := s.do(http.MethodGet, path, "")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var c bytes.Buffer
		if json.Compact(&c, b) == nil {
			body = c.String()
		} else {
			body = string(b)
		}
		if resp.StatusCode == 200 && (want == "" || body == want) {
			return nil
		}
		return fmt.Errorf("%d %s", resp.StatusCode, body)
	})
	return body
}

// The scenario with the inventory's commands and events in Avro, their
// schemas in a registry (-registry): the real one when
// OXBOW_REGISTRY_URL names it. The views come out the same, and the
// topics hold Confluent's wire format.
func TestShoeStoreInAvro(t *testing.T) {
	env := kafkaenv.ForTest(t)
	sreg := srtest.New(t)
	reg, err := registry.New(registry.Config{URLs: []string{sreg.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	cfg := config{Name: sreg.Prefix + "-shoes", Brokers: env.Brokers, Registry: reg}
	shoeStoreScenario(t, cfg, "")
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(cfg.Name+"-inventory-events", cfg.Name+"-inventory-commands"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := map[string]int{}
	for seen[cfg.Name+"-inventory-events"] < 7 || seen[cfg.Name+"-inventory-commands"] < 7 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("records read: %v", seen)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Value) < 5 || r.Value[0] != 0 {
				t.Fatalf("%s: not in the wire format: %q", r.Topic, r.Value)
			}
			seen[r.Topic]++
		})
	}
	for _, subject := range []string{cfg.Name + "-inventory-events-inventory.PairSold", cfg.Name + "-inventory-commands-inventory.SellPair"} {
		if _, err := sreg.Client.SchemaByVersion(ctx, subject, 1); err != nil {
			t.Errorf("subject %s: %v", subject, err)
		}
	}
}
