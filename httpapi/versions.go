package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// VersionHeader names the version of the application that serves, or is
// asked to serve, a request.
const VersionHeader = "Oxbow-Version"

// newVersioned is New with Config.Versions: a handler per version, and a
// dispatcher that picks one per request.
func newVersioned(cfg Config) (*Handler, error) {
	if cfg.Instance != nil || cfg.Views != nil || cfg.Topology != nil {
		return nil, errors.New("httpapi: set either Config.Versions or Config.Instance, Views and Topology, not both")
	}
	if cfg.Active == nil {
		return nil, errors.New("httpapi: Config.Versions needs Config.Active, which names the active version (versions.Watcher.Active, say)")
	}
	h := &Handler{}
	subs := map[string]*Handler{}
	names := make([]string, 0, len(cfg.Versions))
	for v := range cfg.Versions {
		names = append(names, v)
	}
	slices.Sort(names)
	for _, v := range names {
		sv := cfg.Versions[v]
		if v == "" {
			return nil, errors.New("httpapi: Config.Versions has a version without a name")
		}
		c := cfg
		c.Versions, c.Active, c.versioned, c.CORS = nil, nil, true, nil
		c.Instance, c.Views, c.Topology, c.Version = sv.Instance, sv.Views, sv.Topology, v
		sub, err := New(c)
		if err != nil {
			return nil, fmt.Errorf("httpapi: version %s: %w", v, err)
		}
		subs[v] = sub
		h.subs = append(h.subs, sub)
	}
	list := subs[names[0]].a.guard.require(ReadViews, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active := cfg.Active()
		type served struct {
			Version string `json:"version"`
			State   string `json:"state"`
			Active  bool   `json:"active"`
		}
		out := struct {
			Active   string   `json:"active"`
			Versions []served `json:"versions"`
		}{Active: active, Versions: []served{}}
		for _, v := range names {
			out.Versions = append(out.Versions, served{v, cfg.Versions[v].Instance.State().String(), v == active})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	var dispatch http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/versions" && r.Method == http.MethodGet {
			list.ServeHTTP(w, r)
			return
		}
		active := cfg.Active()
		v := r.Header.Get(VersionHeader)
		if q := r.URL.Query(); q.Has("version") {
			if v == "" {
				v = q.Get("version")
			}
			// The version's handler knows nothing of the parameter.
			q.Del("version")
			r = r.Clone(r.Context())
			r.URL.RawQuery = q.Encode()
		}
		if v == "" {
			v = active
		}
		if v == "" && len(names) == 1 {
			v = names[0]
		}
		if v == "" {
			w.Header().Set("Retry-After", "1")
			problem(w, r, http.StatusServiceUnavailable, "no active version", fmt.Sprintf("no version of the application is promoted yet; name one (%s: one of %v)", VersionHeader, names))
			return
		}
		sub, ok := subs[v]
		if !ok {
			problem(w, r, http.StatusNotFound, "no such version", fmt.Sprintf("this instance serves versions %v, not %q", names, v))
			return
		}
		w.Header().Set(VersionHeader, v)
		sub.ServeHTTP(w, r)
	})
	if cfg.CORS != nil {
		c, err := cfg.CORS.handler()
		if err != nil {
			return nil, err
		}
		dispatch = c(dispatch)
	}
	h.Handler = dispatch
	return h, nil
}
