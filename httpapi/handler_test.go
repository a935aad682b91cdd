package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/httpapi"
)

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

// failingStores is an instance whose stores cannot be read.
type failingStores struct{ httpapi.Instance }

func (failingStores) LocalStore(string) (engine.RawStore, error) {
	return nil, errors.New("the disk went away")
}

// With no Logger configured, the error behind a 500 reaches slog's
// default logger, where the process's other logs go.
func TestServerErrorsLoggedByDefault(t *testing.T) {
	var logged bytes.Buffer
	was := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(was) })
	in, reg := shop(t)
	s := serve(t, failingStores{in}, reg)
	status, _, body := get(t, s, "/views/stock/keys/red")
	if status != http.StatusInternalServerError {
		t.Fatalf("a read from a store that fails: %d %s, want 500", status, body)
	}
	if out := logged.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "a read failed") || !strings.Contains(out, "the disk went away") {
		t.Errorf("logged %q; want the read's error at ERROR", out)
	}
}
