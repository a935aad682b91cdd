package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Problem is an error answer (RFC 9457, application/problem+json).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}

func (a *api) problem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	problem(w, r, status, title, detail)
}

func problem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Instance: r.URL.Path})
}

func (a *api) json(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// root answers GET /: a browser goes to the console (when it is served);
// any other client gets the API's entry points, which need no credentials
// to be listed.
func (a *api) root(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Console && strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Location", "/console/")
		w.WriteHeader(http.StatusFound)
		return
	}
	links := map[string]string{
		"views":   "/views",
		"openapi": "/openapi.json",
		"status":  "/status",
		"lag":     "/lag",
		"health":  "/healthz",
		"ready":   "/readyz",
	}
	if a.cfg.Topology != nil {
		links["topology"] = "/topology"
	}
	if a.cfg.Metrics != nil {
		links["metrics"] = "/metrics"
	}
	if a.cfg.Console {
		links["console"] = "/console/"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"links": links})
}
