package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/httpapi"
)

const (
	peerSecret = "peer-secret-0123456789"
	adminToken = "tok-admin-5f3a"
)

// tokens: one identity per permission, one with none, one with all.
var tokens = map[string]httpapi.Identity{
	"tok-reader-91c2":    {Subject: "reader", Permissions: []httpapi.Permission{httpapi.ReadViews}},
	"tok-feeds-77d0":     {Subject: "feeder", Permissions: []httpapi.Permission{httpapi.ReadFeeds}},
	"tok-commands-0be4":  {Subject: "committer", Permissions: []httpapi.Permission{httpapi.SubmitCommands}},
	"tok-operator-c3a9":  {Subject: "operator", Permissions: []httpapi.Permission{httpapi.Operate}},
	"tok-nobody-4e11":    {Subject: "nobody"},
	adminToken:           {Subject: "admin", Permissions: []httpapi.Permission{httpapi.ReadViews, httpapi.ReadFeeds, httpapi.SubmitCommands, httpapi.Operate}},
	"tok-unused-8a8a-xx": {Subject: "unused"},
}

// classes is the spec: every route the API has and its class ("": open).
// A route not here fails TestEveryRouteIsClassified.
var classes = map[string]httpapi.Permission{
	"GET /":                                      "",
	"GET /healthz":                               "",
	"GET /readyz":                                "",
	"GET /openapi.json":                          httpapi.ReadViews,
	"GET /topology":                              httpapi.ReadViews,
	"GET /versions":                              httpapi.ReadViews,
	"GET /views":                                 httpapi.ReadViews,
	"GET /views/{view}":                          httpapi.ReadViews,
	"GET /views/{view}/keys/{key}":               httpapi.ReadViews,
	"GET /views/{view}/keys/{key}/windows":       httpapi.ReadViews,
	"GET /views/{view}/entries":                  httpapi.ReadViews,
	"GET /views/{view}/changes":                  httpapi.ReadFeeds,
	"POST /aggregates/{aggregate}/{id}/commands": httpapi.SubmitCommands,
	"GET /status":                                httpapi.Operate,
	"GET /lag":                                   httpapi.Operate,
	"GET /deadletters":                           httpapi.Operate,
	// The console's files hold no data: what it shows, it asks of the
	// routes above, with the operator's token.
	"GET /console":   "",
	"GET /console/*": "",
	"GET /metrics":   httpapi.Operate,
}

// syncBuffer is a log's buffer, written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// secured is a Config with the tokens, the peer secret, every optional
// route and a log that a test can read.
func secured(t *testing.T, in httpapi.Instance) (httpapi.Config, *syncBuffer) {
	t.Helper()
	_, reg := shop(t)
	_, metrics, err := httpapi.PrometheusMetrics()
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	return httpapi.Config{Instance: in, Views: reg, Metrics: metrics, Commands: map[string]httpapi.Submitter{"inventory": accepting{}},
		Authenticator: httpapi.Tokens(tokens), PeerSecret: []byte(peerSecret), PositionWait: 50 * time.Millisecond, Console: true,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))}, log
}

// call sends a request to h with the bearer token (if any) and more
// headers, name and value after name and value.
func call(h http.Handler, method, path, token string, headers ...string) *httptest.ResponseRecorder {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"type":"Ship","data":{}}`)
	}
	req := httptest.NewRequest(method, path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// noSecrets fails if a token or the peer secret is in s.
func noSecrets(t *testing.T, where, s string) {
	t.Helper()
	for tok := range tokens {
		if strings.Contains(s, tok) {
			t.Errorf("%s holds a token: %s", where, s)
		}
	}
	if strings.Contains(s, peerSecret) {
		t.Errorf("%s holds the peer secret: %s", where, s)
	}
}

// Every route of the API, and of a versioned API, is in a class; each is
// refused without credentials or with wrong ones (401), refused to the
// identities without its permission (403, naming the permission and the
// subject), and served to those with it; /healthz and /readyz are open.
func TestEveryRouteIsClassified(t *testing.T) {
	in, _ := shop(t)
	cfg, log := secured(t, in)
	plain, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vcfg := cfg
	vcfg.Versions, vcfg.Active, vcfg.Instance, vcfg.Views = map[string]httpapi.Served{"v1": {Instance: in, Views: cfg.Views}}, func() string { return "v1" }, nil, nil
	versioned, err := httpapi.New(vcfg)
	if err != nil {
		t.Fatal(err)
	}
	params := strings.NewReplacer("{view}", "stock", "{key}", "red", "{aggregate}", "inventory", "{id}", "shoe-1")
	for name, h := range map[string]*httpapi.Handler{"plain": plain, "versioned": versioned} {
		for _, route := range h.Routes() {
			class, ok := classes[route]
			if !ok {
				t.Errorf("%s: route %s is in no class: give it one (and add it here)", name, route)
				continue
			}
			method, pattern, _ := strings.Cut(route, " ")
			path := params.Replace(pattern)
			for _, token := range []string{"", "tok-wrong"} {
				rec := call(h, method, path, token)
				switch {
				case class == "" && (rec.Code == 401 || rec.Code == 403):
					t.Errorf("%s: %s %s without credentials: %d, but it is open", name, method, path, rec.Code)
				case class != "" && (rec.Code != 401 || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") ||
					rec.Header().Get("Content-Type") != "application/problem+json"):
					t.Errorf("%s: %s %s with token %q: %d %q %s, want a 401 problem with a challenge", name, method, path, token, rec.Code, rec.Header().Get("WWW-Authenticate"), rec.Body)
				}
				noSecrets(t, route, rec.Body.String())
			}
			for token, id := range tokens {
				rec := call(h, method, path, token)
				denied := rec.Code == 401 || rec.Code == 403
				if allowed := class == "" || id.Can(class); allowed == denied {
					t.Errorf("%s: %s %s as %s: %d %s (class %q)", name, method, path, id.Subject, rec.Code, rec.Body, class)
				}
				if rec.Code == 403 && (!strings.Contains(rec.Body.String(), `\"`+string(class)+`\"`) || !strings.Contains(rec.Body.String(), `\"`+id.Subject+`\"`)) {
					t.Errorf("%s: %s %s as %s: the 403 does not name the permission and the subject: %s", name, method, path, id.Subject, rec.Body)
				}
				noSecrets(t, route, rec.Body.String())
			}
		}
	}
	if !strings.Contains(log.String(), "unauthenticated") || !strings.Contains(log.String(), "forbidden") {
		t.Errorf("the refusals are not logged: %s", log.String())
	}
	noSecrets(t, "the log", log.String())
}

// counted counts the instance's reads of its stores.
type counted struct {
	*instance
	reads atomic.Int64
}

func (c *counted) LocalStore(name string) (engine.RawStore, error) {
	c.reads.Add(1)
	return c.instance.LocalStore(name)
}

// Peer headers from outside — without a signature, with one by another
// secret, stale, for another path, for another caller — are refused 401,
// and no view is read; a correctly signed request is authorized at the
// owner as the identity it carries.
func TestForgedPeerHeaders(t *testing.T) {
	base, _ := shop(t)
	in := &counted{instance: base}
	cfg, log := secured(t, in)
	h, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	reader := tokens["tok-reader-91c2"]
	do := func(method, path string, prepare func(*http.Request)) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(`{"type":"Ship","data":{}}`))
		prepare(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		noSecrets(t, method+" "+path, string(b))
		return resp.StatusCode, string(b)
	}
	key := "/views/stock/keys/red"
	for name, prepare := range map[string]func(*http.Request){
		"forwarded-by alone": func(r *http.Request) { r.Header.Set(httpapi.ForwardedHeader, "i9") },
		"forwarded-by, token": func(r *http.Request) {
			r.Header.Set(httpapi.ForwardedHeader, "i9")
			r.Header.Set("Authorization", "Bearer "+adminToken)
		},
		"scan-local, token": func(r *http.Request) {
			r.Header.Set("Oxbow-Scan-Local", "i9")
			r.Header.Set("Authorization", "Bearer "+adminToken)
		},
		"caller unsigned": func(r *http.Request) {
			r.Header.Set("Oxbow-Caller", base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","perms":["read"]}`)))
		},
		"another secret": func(r *http.Request) { httpapi.SignPeer(r, []byte("not-the-peer-secret!"), reader, "i9", time.Now()) },
		"stale": func(r *http.Request) {
			httpapi.SignPeer(r, []byte(peerSecret), reader, "i9", time.Now().Add(-2*time.Minute))
		},
		"from the future": func(r *http.Request) {
			httpapi.SignPeer(r, []byte(peerSecret), reader, "i9", time.Now().Add(2*time.Minute))
		},
		"another path": func(r *http.Request) {
			httpapi.SignPeer(r, []byte(peerSecret), reader, "i9", time.Now())
			r.URL.Path = "/views/orders/keys/7"
		},
		"another query": func(r *http.Request) {
			httpapi.SignPeer(r, []byte(peerSecret), reader, "i9", time.Now())
			r.URL.RawQuery = "maxLag=5"
		},
		"another caller": func(r *http.Request) {
			httpapi.SignPeer(r, []byte(peerSecret), reader, "i9", time.Now())
			r.Header.Set("Oxbow-Caller", base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","perms":["read","operate"]}`)))
		},
		"scan-local added": func(r *http.Request) {
			httpapi.SignPeer(r, []byte(peerSecret), reader, "i9", time.Now())
			r.Header.Set("Oxbow-Scan-Local", "i9")
		},
	} {
		if status, body := do(http.MethodGet, key, prepare); status != 401 {
			t.Errorf("%s: %d %s, want 401", name, status, body)
		}
	}
	if n := in.reads.Load(); n != 0 {
		t.Errorf("forged requests read views %d times", n)
	}
	signed := func(id httpapi.Identity) func(*http.Request) {
		return func(r *http.Request) { httpapi.SignPeer(r, []byte(peerSecret), id, "i9", time.Now()) }
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, key, 200},
		{http.MethodGet, "/views/stock/entries", 200},
		{http.MethodPost, "/aggregates/inventory/shoe-1/commands", 403},
		{http.MethodGet, "/status", 403},
		{http.MethodGet, "/metrics", 403},
		{http.MethodGet, "/views/stock/changes", 403},
	} {
		if status, body := do(c.method, c.path, signed(reader)); status != c.status {
			t.Errorf("%s %s signed for a reader: %d %s, want %d", c.method, c.path, status, body, c.status)
		}
	}
	// Without a PeerSecret, a caller's identity is never taken from a
	// header, whoever signed it; Oxbow-Forwarded-By goes with the
	// caller's own credentials.
	cfg.PeerSecret = nil
	open, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		headers []string
		status  int
	}{
		"signed":             {status: 401},
		"forwarded-by":       {[]string{httpapi.ForwardedHeader, "i9"}, 200},
		"caller and a token": {[]string{"Oxbow-Caller", "eyJzdWIiOiJhZG1pbiJ9"}, 401},
	} {
		req := httptest.NewRequest(http.MethodGet, key, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if name == "signed" {
			httpapi.SignPeer(req, []byte(peerSecret), reader, "i9", time.Now())
		}
		for i := 0; i < len(c.headers); i += 2 {
			req.Header.Set(c.headers[i], c.headers[i+1])
		}
		rec := httptest.NewRecorder()
		open.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("no PeerSecret, %s: %d %s, want %d", name, rec.Code, rec.Body, c.status)
		}
	}
	noSecrets(t, "the log", log.String())
}

// gathering is an instance of a group whose other member, i2, is at peer.
type gathering struct {
	*instance
	peer string
}

func (g gathering) Instances() []engine.Instance {
	return []engine.Instance{{ID: g.id}, {ID: "i2", Addr: g.peer}}
}

// seen records the headers of the requests an owner gets.
type seen struct {
	mu      sync.Mutex
	headers []http.Header
}

func (s *seen) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (s *seen) all() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers
}

// A key read forwarded, and a scan gathered, between two instances with a
// PeerSecret: the owner gets the caller's identity, signed, and never the
// caller's token; without a PeerSecret the owner gets the token and
// authenticates it again.
func TestForwardingCarriesTheCaller(t *testing.T) {
	for _, withSecret := range []bool{true, false} {
		in, _ := shop(t)
		ownerCfg, _ := secured(t, in)
		if !withSecret {
			ownerCfg.PeerSecret = nil
		}
		owner, err := httpapi.New(ownerCfg)
		if err != nil {
			t.Fatal(err)
		}
		var got seen
		so := httptest.NewServer(got.wrap(owner))
		defer so.Close()
		addr := strings.TrimPrefix(so.URL, "http://")
		for _, c := range []struct {
			front  httpapi.Instance
			path   string
			header string
		}{
			{&remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "i3"}, owner: addr}, "/views/stock/keys/red", httpapi.ForwardedHeader},
			{gathering{&instance{Driver: in.Driver, state: engine.AppRunning, id: "i1"}, addr}, "/views/stock/entries?limit=1", "Oxbow-Scan-Local"},
		} {
			frontCfg, _ := secured(t, c.front)
			frontCfg.PeerSecret = ownerCfg.PeerSecret
			front, err := httpapi.New(frontCfg)
			if err != nil {
				t.Fatal(err)
			}
			sf := httptest.NewServer(front)
			defer sf.Close()
			req, _ := http.NewRequest(http.MethodGet, sf.URL+c.path, nil)
			req.Header.Set("Authorization", "Bearer tok-reader-91c2")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("secret %v, %s: %d %s", withSecret, c.path, resp.StatusCode, body)
			}
			hs := got.all()
			if len(hs) == 0 {
				t.Fatalf("secret %v, %s: the owner got nothing", withSecret, c.path)
			}
			h := hs[len(hs)-1]
			var caller httpapi.Identity
			b, _ := base64.RawURLEncoding.DecodeString(h.Get("Oxbow-Caller"))
			_ = json.Unmarshal(b, &caller)
			if withSecret && (h.Get("Authorization") != "" || caller.Subject != "reader" || !caller.Can(httpapi.ReadViews) || h.Get("Oxbow-Signature") == "" || h.Get(c.header) == "") {
				t.Errorf("%s with a PeerSecret: the owner got %v", c.path, h)
			}
			if !withSecret && (h.Get("Authorization") != "Bearer tok-reader-91c2" || h.Get("Oxbow-Caller") != "" || h.Get("Oxbow-Signature") != "") {
				t.Errorf("%s without a PeerSecret: the owner got %v", c.path, h)
			}
		}
	}
}

// A tokens' authenticator, a client certificates' one and FirstOf: the
// first that finds credentials of its kind answers.
func TestFirstOf(t *testing.T) {
	refuse := httpapi.AuthenticatorFunc(func(*http.Request) (httpapi.Identity, error) { return httpapi.Identity{}, io.ErrUnexpectedEOF })
	chain := httpapi.FirstOf(httpapi.ClientCertificates(nil), httpapi.Tokens(tokens), refuse)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if id, err := chain.Authenticate(req); err != nil || id.Subject != "admin" {
		t.Errorf("a known token: %v %v", id, err)
	}
	req.Header.Set("Authorization", "Bearer nope")
	if _, err := chain.Authenticate(req); err != io.ErrUnexpectedEOF {
		t.Errorf("an unknown token went past the last: %v", err)
	}
	if _, err := httpapi.FirstOf(httpapi.Tokens(tokens)).Authenticate(httptest.NewRequest(http.MethodGet, "/", nil)); err != httpapi.ErrNoCredentials {
		t.Errorf("no credentials: %v", err)
	}
}

// With an Authenticator the document declares the bearer scheme, and 401
// and 403 answers on every route but /healthz and /readyz; it still
// describes exactly the routes served.
func TestOpenAPISecurity(t *testing.T) {
	in, _ := shop(t)
	cfg, _ := secured(t, in)
	h, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := call(h, http.MethodGet, "/openapi.json", adminToken)
	var doc struct {
		Security   []map[string][]string `json:"security"`
		Components struct {
			SecuritySchemes map[string]struct{ Type, Scheme string } `json:"securitySchemes"`
		} `json:"components"`
		Paths map[string]map[string]struct {
			Security  *[]any         `json:"security"`
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	if s := doc.Components.SecuritySchemes["bearer"]; s.Type != "http" || s.Scheme != "bearer" || len(doc.Security) != 1 {
		t.Errorf("security schemes %+v, security %v", doc.Components.SecuritySchemes, doc.Security)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
			_, has401 := op.Responses["401"]
			_, has403 := op.Responses["403"]
			open := path == "/" || path == "/healthz" || path == "/readyz" || strings.HasPrefix(path, "/console")
			if open != (op.Security != nil && len(*op.Security) == 0) || has401 == open || has403 == open {
				t.Errorf("%s %s: security %v, 401 %v, 403 %v", method, path, op.Security, has401, has403)
			}
		}
	}
	if len(documented) != len(h.Routes()) {
		t.Errorf("documented %v, served %v", documented, h.Routes())
	}
}

// CORS is off by default; with it, a preflight from an allowed origin is
// answered before authentication with the API's headers, and one from
// another origin gets no permission.
func TestCORS(t *testing.T) {
	in, _ := shop(t)
	cfg, _ := secured(t, in)
	off, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CORS = &httpapi.CORS{AllowedOrigins: []string{"https://app.example.com"}, MaxAge: 10 * time.Minute}
	on, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	preflight := func(h http.Handler, origin string) *httptest.ResponseRecorder {
		return call(h, http.MethodOptions, "/views/stock/keys/red", "", "Origin", origin, "Access-Control-Request-Method", "GET",
			"Access-Control-Request-Headers", "authorization, oxbow-version")
	}
	rec := preflight(on, "https://app.example.com")
	allowHeaders := strings.ToLower(rec.Header().Get("Access-Control-Allow-Headers"))
	if rec.Code >= 300 || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(allowHeaders, "authorization") || !strings.Contains(allowHeaders, "oxbow-version") || rec.Header().Get("Access-Control-Max-Age") != "600" {
		t.Errorf("an allowed preflight: %d %v", rec.Code, rec.Header())
	}
	if rec := preflight(on, "https://evil.example.com"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a denied preflight: %d %v", rec.Code, rec.Header())
	}
	rec = call(on, http.MethodGet, "/views/stock/keys/red", adminToken, "Origin", "https://app.example.com")
	if rec.Code != 200 || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" || !strings.Contains(rec.Header().Get("Access-Control-Expose-Headers"), "Oxbow-Version") {
		t.Errorf("a read from an allowed origin: %d %v", rec.Code, rec.Header())
	}
	for _, rec := range []*httptest.ResponseRecorder{preflight(off, "https://app.example.com"), call(off, http.MethodGet, "/views", adminToken, "Origin", "https://app.example.com")} {
		for k := range rec.Header() {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("CORS off, yet %s: %v", k, rec.Header())
			}
		}
	}
	for _, bad := range []*httpapi.CORS{{}, {AllowedOrigins: []string{"*"}, AllowCredentials: true}} {
		cfg.CORS = bad
		if _, err := httpapi.New(cfg); err == nil {
			t.Errorf("CORS %+v accepted", bad)
		}
	}
}
