package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/projection"
)

// instance is the test driver as a running instance.
type instance struct {
	*enginetest.Driver
	state engine.AppState
	id    string
}

func (i *instance) State() engine.AppState { return i.state }
func (i *instance) ID() string             { return i.id }

// shop has two views: "stock" (shoe → pairs, string keys) and "orders"
// (order number → total, int64 keys).
func shop(t *testing.T) (*instance, *projection.Registry) {
	t.Helper()
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
	engine.NewTable(b, "orders", serde.Int64, serde.Int64, engine.Materialized("orders"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	stock := enginetest.NewInput(d, "stock", serde.String, serde.Int64)
	for i, shoe := range []string{"blue", "green", "red", "red-high", "red-low", "white"} {
		stock.Pipe(shoe, int64(10+i), enginetest.At(int64(i)))
	}
	orders := enginetest.NewInput(d, "orders", serde.Int64, serde.Int64)
	orders.Pipe(7, 700, enginetest.At(1))
	sv, err := projection.NewKeyValue("stock", "stock", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	ov, err := projection.NewKeyValue("orders", "orders", serde.Int64, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := projection.NewRegistry(sv, ov)
	if err != nil {
		t.Fatal(err)
	}
	return &instance{Driver: d, state: engine.AppRunning, id: "i1"}, reg
}

func serve(t *testing.T, in httpapi.Instance, reg *projection.Registry) *httptest.Server {
	t.Helper()
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, DefaultLimit: 2, MaxLimit: 3, PositionWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// get returns a response's status, content type and body.
func get(t *testing.T, s *httptest.Server, path string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestGetKey(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/views/stock/keys/red", 200, `{"key":"red","value":12}`},
		{"/views/stock/keys/red%2Fblue", 404, `view stock has no key \"red/blue\"`},
		{"/views/orders/keys/7", 200, `{"key":7,"value":700}`},
		{"/views/orders/keys/8", 404, `view orders has no key \"8\"`},
		{"/views/orders/keys/seven", 400, `\"seven\" is not an integer`},
		{"/views/nope/keys/x", 404, `there is no view \"nope\"`},
	} {
		status, ct, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
		if status >= 400 && ct != "application/problem+json" {
			t.Errorf("GET %s: an error as %s", c.path, ct)
		}
	}
}

func TestListAndDescribeViews(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	status, _, body := get(t, s, "/views")
	// Types in JSON's terms, not Go's.
	want := `{"views":[{"name":"orders","kind":"key-value","keyType":"integer","valueType":"integer","keySchema":{"type":"integer"},"valueSchema":{"type":"integer"},"prefixScans":false},` +
		`{"name":"stock","kind":"key-value","keyType":"string","valueType":"integer","keySchema":{"type":"string"},"valueSchema":{"type":"integer"},"prefixScans":true}]}`
	if status != 200 || strings.TrimSpace(body) != want {
		t.Errorf("GET /views: %d %s", status, body)
	}
	if status, _, body := get(t, s, "/views/stock"); status != 200 || !strings.Contains(body, `"keyType":"string"`) {
		t.Errorf("GET /views/stock: %d %s", status, body)
	}
}

// Scans page through a view with an opaque cursor; prefixes and ranges
// narrow them.
func TestScan(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	page := func(path string) httpapi.Page {
		t.Helper()
		status, _, body := get(t, s, path)
		if status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		var p httpapi.Page
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := func(p httpapi.Page) string {
		var out []string
		for _, e := range p.Entries {
			out = append(out, fmt.Sprint(e.Key))
		}
		return strings.Join(out, ",")
	}
	var all []string
	path := "/views/stock/entries"
	for {
		p := page(path)
		all = append(all, keys(p))
		if p.Next == "" {
			break
		}
		path = "/views/stock/entries?cursor=" + url.QueryEscape(p.Next)
	}
	if got := strings.Join(all, "|"); got != "blue,green|red,red-high|red-low,white" {
		t.Errorf("pages %s", got)
	}
	if got := keys(page("/views/stock/entries?prefix=red&limit=3")); got != "red,red-high,red-low" {
		t.Errorf("prefix red: %s", got)
	}
	if got := keys(page("/views/stock/entries?from=green&to=red-high&limit=3")); got != "green,red" {
		t.Errorf("from green to red-high: %s", got)
	}
	if got := keys(page("/views/stock/entries?prefix=zzz")); got != "" {
		t.Errorf("prefix zzz: %s", got)
	}
}

// Bad requests are 4xx problems that say what is wrong.
func TestBadRequests(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	other := "/views/orders/entries?cursor=" + url.QueryEscape(strings.TrimSpace(firstCursor(t, s)))
	for _, c := range []struct {
		path   string
		status int
		detail string
	}{
		{"/views/stock/entries?limit=0", 400, "want a number from 1 to 3"},
		{"/views/stock/entries?limit=4", 400, "want a number from 1 to 3"},
		{"/views/stock/entries?limit=x", 400, "want a number"},
		{"/views/stock/entries?cursor=%25%25", 400, "not one this API made"},
		{other, 400, "not one of view orders"},
		{"/views/orders/entries?prefix=1", 400, "prefix scans need text keys"},
		{"/views/orders/entries?from=x", 400, `\"x\" is not an integer`},
		{"/views/stock/entries?sort=desc", 400, `\"sort\" is not a parameter`},
		{"/nowhere", 404, "not a route"},
	} {
		status, ct, body := get(t, s, c.path)
		var p httpapi.Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || status != c.status || p.Status != c.status || !strings.Contains(body, c.detail) || ct != "application/problem+json" {
			t.Errorf("GET %s: %d %s %s, want %d saying %s", c.path, status, ct, body, c.status, c.detail)
		}
	}
	resp, err := http.Post(s.URL+"/views/stock/keys/red", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Allow") != "GET" {
		t.Errorf("POST a key: %d %s, Allow %q (want GET)", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"))
	}
}

func firstCursor(t *testing.T, s *httptest.Server) string {
	_, _, body := get(t, s, "/views/stock/entries")
	var p httpapi.Page
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Next == "" {
		t.Fatalf("no cursor: %s", body)
	}
	return p.Next
}

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

// remote is an instance that holds none of the keys: every read says
// which instance does.
type remote struct {
	*instance
	owner string // its address
}

func (r *remote) LocalStore(name string) (engine.RawStore, error) {
	st, err := r.instance.LocalStore(name)
	if err != nil {
		return nil, err
	}
	return notLocal{st, r.owner}, nil
}

type notLocal struct {
	engine.RawStore
	owner string
}

var _ engine.RawStore = notLocal{}

func (n notLocal) Get([]byte) (engine.RawEntry, bool, error) {
	e := &engine.NotLocalError{Store: n.Name()}
	e.Owner.MemberID, e.Owner.InstanceID, e.Owner.Addr = "m2", "i2", n.owner
	return engine.RawEntry{}, false, e
}

// A key another instance owns is forwarded to it, once: the owner answers;
// an instance that gets a forwarded request for a key it does not hold
// answers 421 instead of forwarding again.
func TestForwardToOwner(t *testing.T) {
	in, reg := shop(t)
	owner := serve(t, in, reg)
	addr := strings.TrimPrefix(owner.URL, "http://")
	elsewhere := serve(t, &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "i3"}, owner: addr}, reg)
	resp, err := http.Get(elsewhere.URL + "/views/stock/keys/red")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"key":"red","value":12}` || resp.Header.Get("Oxbow-Served-By") != "i2" {
		t.Errorf("forwarded: %d %s (served by %q)", resp.StatusCode, b, resp.Header.Get("Oxbow-Served-By"))
	}
	// A loop: two instances that each think the other owns the key.
	loopA := &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "a"}}
	sa := serve(t, loopA, reg)
	sb := serve(t, &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "b"}, owner: strings.TrimPrefix(sa.URL, "http://")}, reg)
	loopA.owner = strings.TrimPrefix(sb.URL, "http://")
	status, _, body := get(t, sa, "/views/stock/keys/red")
	if status != http.StatusMisdirectedRequest || !strings.Contains(body, "forwarded the request here") {
		t.Errorf("a forwarding loop: %d %s", status, body)
	}
	// An owner without an address, or none (rebalancing): 503, retry.
	noAddr := serve(t, &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "c"}}, reg)
	status, _, body = get(t, noAddr, "/views/stock/keys/red")
	if status != 503 || !strings.Contains(body, "AdvertisedAddr") {
		t.Errorf("an owner without an address: %d %s", status, body)
	}
}

// Whatever the path and query, the answer is never a 5xx and always JSON,
// the API open or not (with credentials and without).
func FuzzRequests(f *testing.F) {
	for _, seed := range []string{
		"/views/stock/keys/red", "/views/orders/keys/7", "/views/stock/entries?prefix=r&limit=2",
		"/views/stock/entries?cursor=c3RvY2sAcmVk", "/views/%00/keys/%ff", "/views//keys/", "/views/orders/entries?from=9&to=1",
		"/views/stock/entries?from=\xff&to=", "/readyz", "/views/stock/changes?key=red", "/views/stock/keys/" + strings.Repeat("a", 5000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, target string) {
		in, reg := shop(t)
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || u.Scheme != "" {
			t.Skip()
		}
		open, err := httpapi.New(httpapi.Config{Instance: in, Views: reg})
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := secured(t, in)
		cfg.Metrics = nil // text, not JSON
		guarded, err := httpapi.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			h     http.Handler
			token string
		}{{open, ""}, {guarded, adminToken}, {guarded, ""}} {
			req := httptest.NewRequest(http.MethodGet, "http://oxbow.test/", nil)
			req.URL = u
			req.RequestURI = target
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := httptest.NewRecorder()
			c.h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Errorf("GET %q: %d %s", target, rec.Code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" && ct != "application/problem+json" {
				t.Errorf("GET %q: content type %q", target, ct)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Errorf("GET %q: not JSON: %s", target, rec.Body)
			}
		}
	})
}

// A read with ?minPosition= answers once the instance reflects the
// position, or says that it does not yet.
func TestMinPosition(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/views/stock/keys/red?minPosition=stock:0:5", 200, `{"key":"red","value":12}`},
		{"/views/stock/keys/red?minPosition=stock:0:6", 503, "does not reflect stock:0:6 (at 6) yet"},
		{"/views/stock/keys/red?minPosition=stock:1:0", 503, "stock:1:0 (at nothing known of it here yet)"},
		{"/views/stock/entries?limit=1&minPosition=stock:0:2&minPosition=orders:0:0", 200, `"key":"blue"`},
		{"/views/stock/keys/red?minPosition=stock:0", 400, "want <topic>:<partition>:<offset>"},
		{"/views/stock/keys/red?minPosition=stock:x:1", 400, "want <topic>:<partition>:<offset>"},
		{"/views/stock/keys/red?after=1", 400, `\"after\" is not a parameter of a key read`},
	} {
		status, _, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
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

// GET /status of an instance of a group tells its workers, its tags and
// every task's placement with the reason for its standbys.
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
		Assignment: []httpapi.TaskStatus{{Task: "0_0", Active: "i1", Standbys: []string{"i2"}, Why: "standby on i2 (rack=r2): differs from the active i1 (rack=r1) in rack"}}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("status %+v, want %+v", st, want)
	}
}

// Status, topology, authentication and stale reads.
func TestOperations(t *testing.T) {
	in, reg := shop(t)
	b := engine.NewBuilder()
	engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
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

// /metrics serves what the meter provider records, in Prometheus' format.
func TestPrometheusMetrics(t *testing.T) {
	in, reg := shop(t)
	mp, metrics, err := httpapi.PrometheusMetrics()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	c, err := mp.Meter("test").Int64Counter("oxbow.test.requests")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	status, _, body := get(t, s, "/metrics")
	if status != 200 || !strings.Contains(body, "oxbow_test_requests_total") || !strings.Contains(body, " 3") {
		t.Errorf("/metrics: %d %s", status, body)
	}
}

// The OpenAPI document describes exactly the routes the handler serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	in, reg := shop(t)
	_, metrics, err := httpapi.PrometheusMetrics()
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	status, _, body := get(t, s, "/openapi.json")
	if status != 200 {
		t.Fatalf("/openapi.json: %d %s", status, body)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	if routes := h.Routes(); !slices.Equal(documented, routes) {
		t.Errorf("documented\n  %s\nserved\n  %s", strings.Join(documented, "\n  "), strings.Join(routes, "\n  "))
	}
	if doc.OpenAPI != "3.1.0" || !strings.Contains(body, `"enum":["orders","stock"]`) {
		t.Errorf("the document: %s", body[:min(len(body), 300)])
	}
	// A service that takes no commands has no aggregate to name: no enum
	// (an empty or null one is invalid). The limit's bounds are the
	// router's.
	if strings.Contains(body, "null") {
		t.Errorf("the document has a null: %s", body)
	}
	var scan struct {
		Get struct {
			Parameters []struct {
				Name   string `json:"name"`
				Schema struct {
					Minimum, Maximum int
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"get"`
	}
	raw, _ := json.Marshal(doc.Paths["/views/{view}/entries"])
	_ = json.Unmarshal(raw, &scan)
	found := false
	for _, p := range scan.Get.Parameters {
		if p.Name == "limit" {
			found = p.Schema.Minimum == 1 && p.Schema.Maximum == 1000
		}
	}
	if !found {
		t.Errorf("the scan's limit is not documented as 1 to 1000: %s", raw)
	}
}

// Requests are traced, continuing the caller's trace.
func TestRequestTracing(t *testing.T) {
	in, reg := shop(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/views/stock/keys/red", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ended := spans.Ended()
	if len(ended) != 1 || ended[0].SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || ended[0].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("spans %v", ended)
	}
	var status int64
	for _, kv := range ended[0].Attributes() {
		if kv.Key == "http.response.status_code" {
			status = kv.Value.AsInt64()
		}
	}
	if ended[0].Name() != "GET /views/stock/keys/red" || status != 200 {
		t.Errorf("span %s, status %d", ended[0].Name(), status)
	}
}

// A windowed view answers a key's windows over a time range.
func TestWindowedFetch(t *testing.T) {
	b := engine.NewBuilder()
	clicks := engine.NewStream(b, "clicks", serde.String, serde.Int64)
	engine.WindowedCount(clicks.GroupByKey().WindowedBy(engine.TumblingWindows(10*time.Millisecond)), engine.Materialized("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "clicks", serde.String, serde.Int64)
	for _, ms := range []int64{1, 2, 15, 31} {
		in.Pipe("a", 1, enginetest.At(ms))
	}
	in.Pipe("b", 1, enginetest.At(3))
	counts, err := projection.NewWindowed("counts", "counts", serde.String, serde.Int64, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := projection.NewKeyValue("kv", "counts", serde.String, serde.Int64)
	reg, err := projection.NewRegistry(counts, kv)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, &instance{Driver: d, state: engine.AppRunning, id: "i1"}, reg)
	epoch := enginetest.Epoch.UnixMilli()
	at := func(ms int64) string { return time.UnixMilli(epoch + ms).UTC().Format(time.RFC3339Nano) }
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{fmt.Sprintf("/views/counts/keys/a/windows?from=%d&to=%d", epoch, epoch+20), 200,
			fmt.Sprintf(`{"key":"a","windows":[{"start":"%s","end":"%s","value":2},{"start":"%s","end":"%s","value":1}]}`, at(0), at(10), at(10), at(20))},
		{"/views/counts/keys/a/windows?from=" + url.QueryEscape(at(30)), 200, fmt.Sprintf(`"start":"%s","end":"%s","value":1}]}`, at(30), at(40))},
		{"/views/counts/keys/c/windows", 200, `{"key":"c","windows":[]}`},
		{"/views/counts/keys/a/windows?from=yesterday", 400, "want an RFC 3339 time or Unix milliseconds"},
		{fmt.Sprintf("/views/counts/keys/a/windows?from=%d&to=%d", epoch+20, epoch), 400, "to is before from"},
		{"/views/kv/keys/a/windows", 400, "the view is not windowed"},
		{"/views/counts/entries?limit=1", 200, fmt.Sprintf(`"entries":[{"key":{"key":"a","start":"%s","end":"%s"},"value":2}]`, at(0), at(10))},
		{"/views/counts/keys/a", 400, "the view is windowed"},
	} {
		status, _, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
	}
}

// A count-windowed view answers all of a key's windows kept, numbered by
// record; its entries decode as windows; a point read of a windowed view
// says where its windows are.
func TestCountWindowedFetch(t *testing.T) {
	b := engine.NewBuilder()
	readings := engine.NewStream(b, "readings", serde.String, serde.Int64)
	engine.CountWindowedReduce(readings.GroupByKey().WindowedByCount(engine.HoppingCountWindows(3, 2)),
		func(a, b int64) int64 { return a + b }, engine.Materialized("sums"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	in := enginetest.NewInput(d, "readings", serde.String, serde.Int64)
	for i, v := range []int64{1, 2, 3, 4, 5} {
		in.Pipe("boiler", v, enginetest.At(int64(i)))
	}
	in.Pipe("attic", 7, enginetest.At(9))
	sums, err := projection.NewCountWindowed("sums", "sums", serde.String, serde.Int64, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := projection.NewCountWindowed("bad", "sums", serde.String, serde.Int64, 0); err == nil {
		t.Error("a count window of 0 records was accepted")
	}
	reg, err := projection.NewRegistry(sums)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, &instance{Driver: d, state: engine.AppRunning, id: "i1"}, reg)
	// boiler: records 0-4 (values 1-5); windows [0,3) = 1+2+3, gone when
	// [2,5) = 3+4+5 filled (Keep 1), and [4,7) = 5, filling.
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/views/sums/keys/boiler/windows", 200, `{"key":"boiler","windows":[{"start":2,"end":5,"value":12},{"start":4,"end":7,"value":5}]}`},
		{"/views/sums/keys/attic/windows", 200, `{"key":"attic","windows":[{"start":0,"end":3,"value":7}]}`},
		{"/views/sums/keys/cellar/windows", 200, `{"key":"cellar","windows":[]}`},
		{"/views/sums/keys/boiler/windows?from=0", 400, "is not a parameter of a count-windowed fetch"},
		{"/views/sums/keys/boiler", 400, "the view is windowed: read a key's windows (view sums) at /views/sums/keys/boiler/windows"},
		{"/views/sums/entries?limit=2", 200, `"entries":[{"key":{"key":"attic","start":0,"end":3},"value":7},{"key":{"key":"boiler","start":2,"end":5},"value":12}]`},
	} {
		status, _, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
	}
}
