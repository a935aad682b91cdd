package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/projection"
	"github.com/oxbow-dev/oxbow/versions"
)

// Helpers of this file are prefixed with "co".

// coGet reads a JSON answer into v and returns the status.
func coGet(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode
}

// coServe serves h on a port of its own, and returns its address.
func coServe(t *testing.T, ln net.Listener, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// What the console reads of an instance, on two real instances: each
// node's records, the group's members, another member's status asked
// through this one, the topology as a graph with the group's topic names,
// and the dead-lettered records with why they failed.
func TestConsoleStatusAndDeadLetters(t *testing.T) {
	env, topic, top, cl := kvTable(t, "console", 4)
	dlq := topic + "-dlq"
	views := coViews(t)
	var urls []string
	var apps []*engine.App
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers, InstanceID: fmt.Sprintf("i%d", i),
			AdvertisedAddr: ln.Addr().String(), SessionTimeout: 6 * time.Second,
			OnDeserializationError: engine.DeadLetter, DeadLetterTopic: dlq})
		h, err := httpapi.New(httpapi.Config{Instance: a, Views: views, Topology: top, Brokers: env.Brokers, Console: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		urls, apps = append(urls, coServe(t, ln, h)), append(apps, a)
	}
	var recs []*kgo.Record
	for i := range 40 {
		v, _ := serde.Int64.Encode(int64(i))
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%02d", i), Value: v})
	}
	// Three values that are no int64: dead-lettered.
	for i := range 3 {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "bad%d", i), Value: []byte("not a number")})
	}
	ctx := context.Background()
	for _, r := range recs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Both members have tasks, and between them their sources have read
	// every record.
	var sts [2]httpapi.Status
	await.NoError(t, time.Minute, "both members to count every record", func() error {
		var sum int64
		for i, u := range urls {
			sts[i] = httpapi.Status{}
			if code := coGet(t, u+"/status", "", &sts[i]); code != 200 {
				return fmt.Errorf("%s: %d", u, code)
			}
			if len(sts[i].Tasks) == 0 || len(sts[i].Instances) != 2 {
				return fmt.Errorf("%s: tasks %v, members %v", sts[i].Instance, sts[i].Tasks, sts[i].Instances)
			}
			for _, n := range sts[i].Nodes {
				sum += n
			}
		}
		src := nodeNamed(t, top, "source")
		if n := sts[0].Nodes[src] + sts[1].Nodes[src]; n != int64(len(recs)) {
			return fmt.Errorf("the source %s counted %d records, want %d (nodes %v, %v)", src, n, len(recs), sts[0].Nodes, sts[1].Nodes)
		}
		return nil
	})
	if sts[0].DeadLetterTopic != dlq {
		t.Errorf("dead-letter topic %q, want %q", sts[0].DeadLetterTopic, dlq)
	}
	// i1's status, asked of i0.
	var other httpapi.Status
	if code := coGet(t, urls[0]+"/status?instance=i1", "", &other); code != 200 || other.Instance != "i1" || fmt.Sprint(other.Tasks) != fmt.Sprint(sts[1].Tasks) {
		t.Errorf("i1's status through i0: %d %+v, want i1's tasks %v", code, other, sts[1].Tasks)
	}
	if code := coGet(t, urls[0]+"/status?instance=nobody", "", nil); code != 404 {
		t.Errorf("the status of no member: %d, want 404", code)
	}
	if code := coGet(t, urls[0]+"/status?node=x", "", nil); code != 400 {
		t.Errorf("/status with an unknown parameter: %d, want 400", code)
	}

	// The graph names the store's changelog as the group does.
	var g engine.TopologyGraph
	if code := coGet(t, urls[0]+"/topology?format=json", "", &g); code != 200 || len(g.Stores) != 1 || g.Stores[0].Changelog != apps[0].Group()+"-kv-changelog" {
		t.Errorf("the graph: %d %+v, want the store kv with the changelog %s-kv-changelog", code, g.Stores, apps[0].Group())
	}

	// The dead letters, newest first, with where and why.
	var dl struct {
		Topic   string               `json:"topic"`
		Records []httpapi.DeadLetter `json:"records"`
	}
	await.NoError(t, 30*time.Second, "the dead letters", func() error {
		if code := coGet(t, urls[1]+"/deadletters", "", &dl); code != 200 || len(dl.Records) != 3 {
			return fmt.Errorf("%d %+v", code, dl)
		}
		return nil
	})
	keys := map[string]bool{}
	for i, d := range dl.Records {
		keys[d.Key] = true
		if d.Value != "not a number" || d.Headers[engine.HeaderStage] != "decode" || d.Headers[engine.HeaderTopic] != topic ||
			!strings.Contains(d.Headers[engine.HeaderError], "int64") || i > 0 && d.Offset >= dl.Records[i-1].Offset {
			t.Errorf("dead letter %d: %+v, want stage decode, from %s, below the offset before", i, d, topic)
		}
	}
	if len(keys) != 3 {
		t.Errorf("dead letters of the keys %v, want bad0, bad1, bad2", keys)
	}
	newest := dl.Records[0]
	if code := coGet(t, urls[1]+"/deadletters?limit=1", "", &dl); code != 200 || len(dl.Records) != 1 || dl.Records[0].Offset != newest.Offset {
		t.Errorf("the last dead letter: %d %+v, want %+v", code, dl.Records, newest)
	}
	for _, q := range []string{"limit=0", "limit=x", "from=3"} {
		if code := coGet(t, urls[1]+"/deadletters?"+q, "", nil); code != 400 {
			t.Errorf("/deadletters?%s: %d, want 400", q, code)
		}
	}

	// The console's page.
	resp, err := http.Get(urls[0] + "/console")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "console.js") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /console: %d %q", resp.StatusCode, page)
	}
}

// nodeNamed is the name of the topology's first node of the kind.
func nodeNamed(t *testing.T, top *engine.Topology, kind string) string {
	t.Helper()
	for _, sub := range top.Graph().SubTopologies {
		for _, n := range sub.Nodes {
			if n.Kind == kind {
				return n.Name
			}
		}
	}
	t.Fatalf("no %s node", kind)
	return ""
}

// coViews is the registry of the view "kv" of kvTable's store.
func coViews(t *testing.T) *projection.Registry {
	t.Helper()
	view, err := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	views, err := projection.NewRegistry(view)
	if err != nil {
		t.Fatal(err)
	}
	return views
}

// coProduce writes n records of kvTable's input from key from on, over 50
// keys, their values their numbers.
func coProduce(t *testing.T, cl *kgo.Client, from, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		v, _ := serde.Int64.Encode(int64(i))
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%03d", i%50), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// coVersioned is kvTable's application in two versions, v1 and v2, each
// an instance advertising addr, registered on a control topic of the
// test's, v1 promoted; cfg serves them, secured with the tests' tokens.
type coVersioned struct {
	top     *engine.Topology
	cl      *kgo.Client
	app     string
	control *versions.Control
	cfg     httpapi.Config
}

func newCoVersioned(t *testing.T, name string, partitions int32, addr string) *coVersioned {
	t.Helper()
	env, topic, top, cl := kvTable(t, name, partitions)
	control, err := versions.New(env.Brokers, versions.Options{Topic: topic + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(control.Close)
	views := coViews(t)
	served := map[string]httpapi.Served{}
	ctx := context.Background()
	for _, v := range []string{"v1", "v2"} {
		a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Version: v, Brokers: env.Brokers, InstanceID: "i-" + v,
			AdvertisedAddr: addr, SessionTimeout: 6 * time.Second})
		if err := control.RegisterApp(ctx, a, top); err != nil {
			t.Fatal(err)
		}
		served[v] = httpapi.Served{Instance: a, Views: views, Topology: top}
	}
	if err := control.Promote(ctx, topic, "v1", versions.PromoteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	vs := &coVersioned{top: top, cl: cl, app: topic, control: control}
	vs.cfg = httpapi.Config{Versions: served, Active: vs.active, VersionControl: control, Brokers: env.Brokers,
		Authenticator: httpapi.Tokens(tokens), PeerSecret: []byte(peerSecret)}
	return vs
}

// active is the version the control topic says is active.
func (vs *coVersioned) active() string {
	a, err := vs.control.App(context.Background(), vs.app)
	if err != nil {
		return ""
	}
	return a.Active
}

// Without Console, no console.
func TestConsoleOff(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	if status, _, _ := get(t, s, "/console/"); status != 404 {
		t.Errorf("GET /console/ without Console: %d, want 404", status)
	}
}

// Versions with a control: each version's lag, and promotion and rollback
// for operators only.
func TestVersionsPromoteAndRollback(t *testing.T) {
	vs := newCoVersioned(t, "console-versions", 2, "")
	coProduce(t, vs.cl, 0, 20)
	active := vs.active
	h, err := httpapi.New(vs.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)

	type listing struct {
		Active     string                  `json:"active"`
		RollbackTo string                  `json:"rollbackTo"`
		Versions   []httpapi.VersionStatus `json:"versions"`
	}
	var l listing
	await.NoError(t, time.Minute, "both versions caught up", func() error {
		l = listing{}
		if code := coGet(t, s.URL+"/versions", adminToken, &l); code != 200 || len(l.Versions) != 2 {
			return fmt.Errorf("%d %+v", code, l)
		}
		for _, v := range l.Versions {
			if v.Lag == nil || !v.Lag.CaughtUp || v.Lag.Progress != 1 || len(v.Lag.Partitions) != 2 {
				return fmt.Errorf("%s: %+v %s", v.Version, v.Lag, v.LagError)
			}
		}
		return nil
	})
	if l.Active != "v1" || !l.Versions[0].Active || l.Versions[1].Active || l.RollbackTo != "" {
		t.Errorf("listing %+v, want v1 active and nothing to roll back to", l)
	}
	post := func(path, token string) (int, string) {
		rec := call(h, http.MethodPost, path, token)
		return rec.Code, rec.Body.String()
	}
	for token, want := range map[string]int{"": 401, "tok-reader-91c2": 403, "tok-commands-0be4": 403} {
		if code, body := post("/versions/v2/promote", token); code != want {
			t.Errorf("promote with token %q: %d %s, want %d", token, code, body, want)
		}
	}
	if active() != "v1" {
		t.Fatalf("a refused promotion promoted: %s is active", active())
	}
	if code, body := post("/versions/v3/promote", "tok-operator-c3a9"); code != 404 {
		t.Errorf("promote v3: %d %s, want 404", code, body)
	}
	if code, body := post("/versions/v2/promote?force=maybe", "tok-operator-c3a9"); code != 400 {
		t.Errorf("promote ?force=maybe: %d %s, want 400", code, body)
	}
	if code, body := post("/versions/v2/promote", "tok-operator-c3a9"); code != 200 || !strings.Contains(body, `"active":"v2"`) {
		t.Errorf("promote v2: %d %s", code, body)
	}
	if active() != "v2" {
		t.Errorf("after the promotion %s is active, want v2", active())
	}
	l = listing{}
	if code := coGet(t, s.URL+"/versions", adminToken, &l); code != 200 || l.Active != "v2" || l.RollbackTo != "v1" {
		t.Errorf("after the promotion: %d %+v, want v2 active, rolling back to v1", code, l)
	}
	if code, body := post("/versions/rollback", "tok-operator-c3a9"); code != 200 || !strings.Contains(body, `"active":"v1"`) {
		t.Errorf("rollback: %d %s", code, body)
	}
	if active() != "v1" {
		t.Errorf("after the rollback %s is active, want v1", active())
	}
	for _, route := range []string{"POST /versions/rollback", "POST /versions/{version}/promote"} {
		if !strings.Contains(strings.Join(h.Routes(), "\n"), route) {
			t.Errorf("Routes has no %s: %v", route, h.Routes())
		}
	}
}

// The console's files: the page at /console/, its script and style with
// their types; anything else under /console/ is a 404 problem.
func TestConsoleFiles(t *testing.T) {
	in, reg := shop(t)
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Console: true})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/console/":             "text/html; charset=utf-8",
		"/console/console.js":   "text/javascript; charset=utf-8",
		"/console/console.css":  "text/css; charset=utf-8",
		"/console/nothing.js":   "application/problem+json",
		"/console/../go.mod":    "application/problem+json",
		"/console/console/x.js": "application/problem+json",
	} {
		rec := call(h, http.MethodGet, path, "")
		if ct := rec.Header().Get("Content-Type"); ct != want || (want == "application/problem+json") != (rec.Code == 404) {
			t.Errorf("GET %s: %d %s, want %s", path, rec.Code, ct, want)
		}
	}
	if rec := call(h, http.MethodGet, "/console", ""); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q, want a redirect to /console/", rec.Code, rec.Header().Get("Location"))
	}
}

// GET / leads somewhere: a browser to the console when it is served, any
// other client to the API's entry points, which all answer.
func TestRoot(t *testing.T) {
	in, reg := shop(t)
	for _, console := range []bool{false, true} {
		h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Console: console})
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(h)
		status, ct, body := get(t, s, "/")
		var index struct{ Links map[string]string }
		if err := json.Unmarshal([]byte(body), &index); err != nil || status != 200 || ct != "application/json" || index.Links["views"] != "/views" {
			t.Errorf("console %v: GET / %d %s %s, want the links", console, status, ct, body)
		}
		if _, ok := index.Links["console"]; ok != console {
			t.Errorf("console %v: the links %v", console, index.Links)
		}
		for name, path := range index.Links {
			if status, _, body := get(t, s, path); status != 200 {
				t.Errorf("console %v: link %s (%s): %d %s", console, name, path, status, body)
			}
		}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		onConsole := resp.Request.URL.Path == "/console/" && strings.Contains(string(page), "<html")
		if onConsole != console {
			t.Errorf("console %v: a browser's GET / ended at %s (%d)", console, resp.Request.URL.Path, resp.StatusCode)
		}
		s.Close()
		h.Close()
	}
}

// GET /lag: the instance's lag, measured every 5 s while the handler is
// open: records produced show as lag, then as positions once processed.
func TestLagHistory(t *testing.T) {
	env, topic, top, cl := kvTable(t, "laghistory", 2)
	a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers, InstanceID: "i0"})
	h, err := httpapi.New(httpapi.Config{Instance: a, Views: coViews(t), Topology: top, Brokers: env.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s := httptest.NewServer(h)
	defer s.Close()
	coProduce(t, cl, 0, 100)
	var hist httpapi.LagHistory
	await.NoError(t, time.Minute, "two samples, the last with every record processed", func() error {
		hist = httpapi.LagHistory{}
		if status, _, body := get(t, s, "/lag"); status != 200 || json.Unmarshal([]byte(body), &hist) != nil {
			return fmt.Errorf("%d %s", status, body)
		}
		if len(hist.Samples) < 2 {
			return fmt.Errorf("%d samples", len(hist.Samples))
		}
		last := hist.Samples[len(hist.Samples)-1]
		var pos, lag int64
		for _, ps := range last.Position {
			for _, at := range ps {
				pos += at
			}
		}
		for _, ps := range last.Lag {
			for _, l := range ps {
				lag += l
			}
		}
		if pos != 100 || lag != 0 || len(last.Lag[topic]) != 2 {
			return fmt.Errorf("the last sample: %+v", last)
		}
		return nil
	})
	if hist.Instance != "i0" || hist.IntervalSeconds != 5 {
		t.Errorf("history of %q every %vs", hist.Instance, hist.IntervalSeconds)
	}
	for i := 1; i < len(hist.Samples); i++ {
		if d := hist.Samples[i].At.Sub(hist.Samples[i-1].At); d < 4*time.Second {
			t.Errorf("samples %d and %d %v apart, want 5 s or more (a tick missed)", i-1, i, d)
		}
	}
	if status, _, body := get(t, s, "/lag?instance=nobody"); status != 404 || !strings.Contains(body, "not a member") {
		t.Errorf("another instance's: %d %s", status, body)
	}
	if status, _, body := get(t, s, "/lag?since=1"); status != 400 {
		t.Errorf("a bad parameter: %d %s", status, body)
	}
}
