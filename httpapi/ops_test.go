package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/projection"
)

func TestHealthAndReadiness(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	if status, _, _ := get(t, s, "/healthz"); status != 200 {
		t.Errorf("healthz %d", status)
	}
	if status, _, _ := get(t, s, "/readyz"); status != 200 {
		t.Errorf("readyz while running: %d", status)
	}
	in.state = engine.AppRestoring
	if status, _, body := get(t, s, "/readyz"); status != 503 || !strings.Contains(body, "restoring") {
		t.Errorf("readyz while restoring: %d %s", status, body)
	}
	if status, _, _ := get(t, s, "/healthz"); status != 200 {
		t.Errorf("healthz while restoring: %d", status)
	}
	// A failed instance is not alive: a supervisor restarts it.
	in.state = engine.AppFailed
	if status, _, body := get(t, s, "/healthz"); status != 503 || !strings.Contains(body, "failed") {
		t.Errorf("healthz of a failed instance: %d %s", status, body)
	}
}

// stalledInstance is a running instance that a transaction Kafka left open
// stops, as *engine.App says through Stalled.
type stalledInstance struct {
	*instance
	err error
}

func (s stalledInstance) Stalled() error { return s.err }

// Readiness fails, with the reason, while the instance is stalled, even
// though its state is Running.
func TestReadinessStalled(t *testing.T) {
	in, reg := shop(t)
	st := &stalledInstance{instance: in}
	h, err := httpapi.New(httpapi.Config{Instance: st, Views: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	if status, _, _ := get(t, s, "/readyz"); status != 200 {
		t.Fatalf("readyz while running: %d", status)
	}
	st.err = errors.New("a transaction Kafka left open stops this instance: orders[3] open since offset 17; remedy: oxbow transactions repair --topic orders")
	resp, err := http.Get(s.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "stalled") ||
		!strings.Contains(string(body), "orders[3] open since offset 17") || !strings.Contains(string(body), "remedy: oxbow transactions repair") {
		t.Fatalf("readyz while stalled: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if status, _, body := get(t, s, "/healthz"); status != 200 || !strings.Contains(body, `"problems":["the views' instance: a transaction Kafka left open stops this instance: orders[3]`) {
		t.Errorf("healthz while stalled: %d %s (the process is alive, restarting it does not help, and it says what is wrong)", status, body)
	}
	if status, _, body := get(t, s, "/status"); status != 200 || !strings.Contains(body, `"stalled":"a transaction Kafka left open stops this instance: orders[3]`) {
		t.Errorf("status while stalled: %d %s", status, body)
	}
}

// stuckInstance is a starting instance that its group gives no tasks, as
// *engine.App says through Stuck.
type stuckInstance struct {
	*instance
	err error
}

func (s stuckInstance) Stuck() error { return s.err }

// An instance not ready for long says why: readiness gives the reason,
// and /healthz (still 200) lists it; once it runs, neither does.
func TestReadinessStuck(t *testing.T) {
	in, reg := shop(t)
	st := &stuckInstance{instance: in}
	s := serve(t, st, reg)
	in.state = engine.AppStarting
	if status, _, body := get(t, s, "/readyz"); status != 503 || !strings.Contains(body, "the instance is starting") {
		t.Fatalf("readyz while starting: %d %s", status, body)
	}
	if _, _, body := get(t, s, "/healthz"); strings.Contains(body, "problems") {
		t.Fatalf("healthz while starting, not for long: %s", body)
	}
	st.err = errors.New("the group g has given this instance no tasks for 40s")
	if status, _, body := get(t, s, "/readyz"); status != 503 || !strings.Contains(body, "the instance is starting: the group g has given this instance no tasks for 40s") {
		t.Fatalf("readyz while stuck: %d %s", status, body)
	}
	if status, _, body := get(t, s, "/healthz"); status != 200 || !strings.Contains(body, `"problems":["the views' instance: the group g has given this instance no tasks for 40s"]`) {
		t.Fatalf("healthz while stuck: %d %s", status, body)
	}
	st.err, in.state = nil, engine.AppRunning
	if status, _, body := get(t, s, "/healthz"); status != 200 || body != `{"status":"ok"}`+"\n" && body != `{"status":"ok"}` {
		t.Fatalf("healthz once running: %d %q", status, body)
	}
}

// placed is an instance that knows the group's placement, as *engine.App
// does.
type placed struct{ *instance }

func (placed) Workers() int { return 3 }
func (placed) Instances() []engine.Instance {
	return []engine.Instance{{ID: "i1", Tags: map[string]string{"rack": "r1"}}, {ID: "i2", Tags: map[string]string{"rack": "r2"}}}
}
func (placed) Assignment() []engine.TaskPlacement {
	return []engine.TaskPlacement{{Task: "0_0", Active: engine.Instance{ID: "i1"}, Standbys: []engine.Instance{{ID: "i2"}}, Why: "standby on i2 (rack=r2): differs from the active i1 (rack=r1) in rack"}}
}

// GET /status of an instance of a group tells its workers, its tags, the
// group's members and every task's placement with the reason for its
// standbys.
func TestStatusPlacement(t *testing.T) {
	in, reg := shop(t)
	h, err := httpapi.New(httpapi.Config{Instance: placed{in}, Views: reg})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	var st httpapi.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	want := httpapi.Status{Instance: "i1", State: "running", Tasks: []string{}, Position: st.Position, Workers: 3, Tags: map[string]string{"rack": "r1"},
		Assignment: []httpapi.TaskStatus{{Task: "0_0", Active: "i1", Standbys: []string{"i2"}, Why: "standby on i2 (rack=r2): differs from the active i1 (rack=r1) in rack"}},
		Instances:  []httpapi.InstanceStatus{{ID: "i1", Tags: map[string]string{"rack": "r1"}}, {ID: "i2", Tags: map[string]string{"rack": "r2"}}}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("status %+v, want %+v", st, want)
	}
	// Another member's status needs its address.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status?instance=i2", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "AdvertisedAddr") {
		t.Errorf("the status of a member without an address: %d %s", rec.Code, rec.Body)
	}
}

// Status, topology, authentication and stale reads.
func TestOperations(t *testing.T) {
	in, reg := shop(t)
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
	engine.NewTable(b, "orders", serde.Int64, serde.Int64, engine.Materialized("orders"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Topology: top, Version: "v7",
		Authenticator: httpapi.Tokens(map[string]httpapi.Identity{"s3cret": {Subject: "ops", Permissions: []httpapi.Permission{httpapi.ReadViews, httpapi.Operate}}})})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	call := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, c := range []struct {
		path, token string
		status      int
		body        string
	}{
		{"/healthz", "", 200, "ok"},
		{"/readyz", "", 200, "ready"},
		{"/views", "", 401, "Authorization: Bearer"},
		{"/views", "wrong", 401, "unauthorized"},
		{"/views", "s3cret", 200, `"name":"stock"`},
		{"/status", "s3cret", 200, `{"instance":"i1","state":"running","version":"v7","tasks":[],"restoredRecords":0,"positions":{"orders":{"0":1},"stock":{"0":6}}}`},
		{"/topology", "s3cret", 200, "stock (key-value, persistent"},
		{"/views/stock/keys/red?maxLag=10", "s3cret", 200, `{"key":"red","value":12}`},
		{"/views/stock/keys/red?maxLag=-1", "s3cret", 400, "want a number of records"},
	} {
		status, body := call(c.path, c.token)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s (token %q): %d %s, want %d with %s", c.path, c.token, status, body, c.status, c.body)
		}
	}
}

// New refuses views that do not read what the topology's stores hold:
// each would answer errors, or decode garbage, at every request.
func TestNewChecksViewsAgainstTheTopology(t *testing.T) {
	in, _ := shop(t)
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
	engine.WindowedCount(engine.NewStream(b, "sales", serde.String, serde.Int64).GroupByKey().WindowedBy(engine.TumblingWindows(time.Hour)), engine.Materialized("hourly"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	stock, _ := projection.NewKeyValue("stock", "stock", serde.String, serde.Int64)
	daily, _ := projection.NewWindowed("daily", "hourly", serde.String, serde.Int64, 24*time.Hour)
	reg, err := projection.NewRegistry(stock, daily)
	if err != nil {
		t.Fatal(err)
	}
	_, err = httpapi.New(httpapi.Config{Instance: in, Views: reg, Topology: top})
	if !errors.Is(err, engine.ErrStoreKind) || !strings.Contains(err.Error(), `view "daily" reads windows of 24h0m0s from store "hourly", which is a window store (windows of 1h0m0s)`) {
		t.Errorf("New with a view of the wrong windows: %v", err)
	}
	if reg, err = projection.NewRegistry(stock); err != nil {
		t.Fatal(err)
	}
	if _, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Topology: top}); err != nil {
		t.Errorf("New with views that match: %v", err)
	}
}

// decider is an aggregate's decider as *engine.App reports itself.
type decider struct {
	state   engine.AppState
	stalled error
}

func (d *decider) State() engine.AppState { return d.state }
func (d *decider) Stalled() error         { return d.stalled }

// counting accepts commands and counts them.
type counting struct{ n atomic.Int64 }

func (c *counting) SubmitJSON(ctx context.Context, id string, env []byte, opts ...aggregate.SubmitOption) (aggregate.Outcome, error) {
	c.n.Add(1)
	return accepting{}.SubmitJSON(ctx, id, env, opts...)
}

// While the decider of an aggregate is stalled its commands answer 503 at
// once, with Retry-After and why, and readiness fails; so it does while
// the decider is degraded. Deciders must name commands served.
func TestDeciderStalled(t *testing.T) {
	in, reg := shop(t)
	d := &decider{state: engine.AppRunning}
	sub := &counting{}
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Commands: map[string]httpapi.Submitter{"inventory": sub},
		Deciders: map[string]httpapi.Decider{"inventory": d}})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	post := func() (int, http.Header, string) {
		t.Helper()
		resp, err := http.Post(s.URL+"/aggregates/inventory/red/commands", "application/json", strings.NewReader(`{"type":"Restock","data":{"pairs":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if status, _, body := post(); status != 200 {
		t.Fatalf("a command while the decider runs: %d %s", status, body)
	}
	if status, _, _ := get(t, s, "/readyz"); status != 200 {
		t.Fatalf("readyz while the decider runs: %d", status)
	}
	d.stalled = errors.New("a transaction Kafka left open stops this instance: __consumer_offsets[7] open since offset 12")
	status, hdr, body := post()
	if status != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "decider stalled") || !strings.Contains(body, "__consumer_offsets[7]") || !strings.Contains(body, "same Idempotency-Key") {
		t.Fatalf("a command while the decider is stalled: %d %v %s", status, hdr, body)
	}
	if n := sub.n.Load(); n != 1 {
		t.Fatalf("%d commands submitted; the one while the decider is stalled must not be (it would wait for an outcome)", n)
	}
	if status, _, body := get(t, s, "/readyz"); status != 503 || !strings.Contains(body, "the inventory commands' decider") || !strings.Contains(body, "__consumer_offsets[7]") {
		t.Fatalf("readyz while the decider is stalled: %d %s", status, body)
	}
	// /status says it of the decider, beside the views' instance.
	var st httpapi.Status
	if status, _, body := get(t, s, "/status"); status != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Deciders) != 1 ||
		st.Deciders[0].Aggregate != "inventory" || st.Deciders[0].State != "running" || !strings.Contains(st.Deciders[0].Stalled, "__consumer_offsets[7]") {
		t.Fatalf("/status while the decider is stalled: %d %s", status, body)
	}
	d.stalled, d.state = nil, engine.AppDegraded
	if status, _, body := get(t, s, "/readyz"); status != 503 || !strings.Contains(body, "it is degraded") {
		t.Fatalf("readyz while the decider is degraded: %d %s", status, body)
	}
	if status, _, body := get(t, s, "/healthz"); status != 200 || !strings.Contains(body, "the inventory commands' decider: degraded") {
		t.Fatalf("healthz while the decider is degraded: %d %s", status, body)
	}
	if _, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Deciders: map[string]httpapi.Decider{"inventory": d}}); err == nil || !strings.Contains(err.Error(), `"inventory", which is not among Commands`) {
		t.Fatalf("Deciders without the command: %v", err)
	}
}
