package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// A route registered without a class is refused to everyone, the API
// open or not.
func TestUnclassifiedRouteFailsClosed(t *testing.T) {
	for _, auth := range []Authenticator{nil, Tokens(map[string]Identity{"t": {Subject: "all", Permissions: []Permission{ReadViews, ReadFeeds, SubmitCommands, Operate}}})} {
		g := &guard{auth: auth, classes: map[string]Permission{}, logger: slog.New(slog.DiscardHandler)}
		r := chi.NewRouter()
		r.Group(func(r chi.Router) {
			r.Use(g.classified)
			g.route(r, ReadViews, http.MethodGet, "/known", func(w http.ResponseWriter, _ *http.Request) {})
			r.Get("/unknown", func(w http.ResponseWriter, _ *http.Request) { t.Error("an unclassified route was served") })
		})
		for path, want := range map[string]int{"/known": 200, "/unknown": 403} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Authorization", "Bearer t")
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			if rec.Code != want {
				t.Errorf("GET %s (authenticator %v): %d %s, want %d", path, auth != nil, rec.Code, rec.Body, want)
			}
		}
	}
}
