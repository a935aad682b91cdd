package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/oxbow-dev/oxbow/versions"
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
	guard := subs[names[0]].a.guard
	vc := versionControl{control: cfg.VersionControl, versions: cfg.Versions, names: names, active: cfg.Active}
	var fwd *versionForwarder
	if cfg.VersionControl != nil {
		mux, _ := subs[names[0]].Handler.(*chi.Mux)
		fwd = newVersionForwarder(cfg.VersionControl, vc.app, subs[names[0]].a, mux)
		h.fwd = fwd
	}
	list := guard.require(ReadViews, http.HandlerFunc(vc.list))
	promote := guard.require(Operate, http.HandlerFunc(vc.promote))
	rollback := guard.require(Operate, http.HandlerFunc(vc.rollback))
	if cfg.VersionControl != nil {
		h.versionRoutes = []string{"POST /versions/rollback", "POST /versions/{version}/promote"}
	}
	var dispatch http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/versions" && r.Method == http.MethodGet {
			list.ServeHTTP(w, r)
			return
		}
		if cfg.VersionControl != nil && r.Method == http.MethodPost {
			if r.URL.Path == "/versions/rollback" {
				rollback.ServeHTTP(w, r)
				return
			}
			if v, ok := strings.CutPrefix(r.URL.Path, "/versions/"); ok {
				if v, ok := strings.CutSuffix(v, "/promote"); ok && v != "" && !strings.Contains(v, "/") {
					promote.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), versionKey{}, v)))
					return
				}
			}
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
		if !ok && fwd != nil {
			if !localRoute(r) {
				fwd.forward(w, r, v, names)
				return
			}
			// Not a read: any version here answers it alike.
			v, sub, ok = names[0], subs[names[0]], true
		}
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

// versionKey: the version a promotion names, in the request's context.
type versionKey struct{}

// versionControl answers /versions, and promotes and rolls back with
// Config.VersionControl.
type versionControl struct {
	control  *versions.Control
	versions map[string]Served
	names    []string
	active   func() string
}

// VersionStatus is one version in GET /versions.
type VersionStatus struct {
	Version string `json:"version"`
	// State is this instance's of it; "not here" for a registered version
	// that only other instances run (listed with Config.VersionControl).
	State  string `json:"state"`
	Here   bool   `json:"here"`
	Active bool   `json:"active"`
	// Lag, with Config.VersionControl, is how far the version's group is
	// behind its inputs (nil if it could not be measured: LagError says
	// why).
	Lag      *VersionLag `json:"lag,omitempty"`
	LagError string      `json:"lagError,omitempty"`
}

// VersionLag is a version's lag in VersionStatus.
type VersionLag struct {
	Group string `json:"group"`
	// Total is the records between the group's committed offsets and its
	// inputs' ends; Progress the share of the inputs' records consumed,
	// from 0 to 1; CaughtUp: close enough to promote without force
	// (versions.DefaultMaxLag).
	Total      int64                   `json:"total"`
	Progress   float64                 `json:"progress"`
	CaughtUp   bool                    `json:"caughtUp"`
	Members    int                     `json:"members"`
	Partitions []versions.PartitionLag `json:"partitions"`
}

// app is the application's name, as its instances know it.
func (vc versionControl) app() (string, error) {
	for _, v := range vc.names {
		if in, ok := vc.versions[v].Instance.(interface{ AppID() string }); ok {
			return in.AppID(), nil
		}
	}
	return "", errors.New("httpapi: no version's Instance names its application (AppID)")
}

func (vc versionControl) list(w http.ResponseWriter, r *http.Request) {
	active := vc.active()
	out := struct {
		Active string `json:"active"`
		// RollbackTo, with Config.VersionControl, is the version a
		// rollback makes active; absent when there is none.
		RollbackTo string          `json:"rollbackTo,omitempty"`
		Versions   []VersionStatus `json:"versions"`
	}{Active: active, Versions: []VersionStatus{}}
	// Every version's lag, the control topic read once.
	var lags map[string]versions.Lag
	var lagErrs map[string]error
	var err error
	if vc.control != nil {
		var app string
		var a *versions.App
		if app, err = vc.app(); err == nil {
			a, err = vc.control.App(r.Context(), app)
		}
		if err == nil {
			lags, lagErrs = vc.control.LagsOf(r.Context(), a)
			out.RollbackTo, _ = a.RollbackTo()
		}
	}
	all := slices.Clone(vc.names)
	for v := range lags {
		all = append(all, v)
	}
	for v := range lagErrs {
		all = append(all, v)
	}
	slices.Sort(all)
	for _, v := range slices.Compact(all) {
		vs := VersionStatus{Version: v, State: "not here", Active: v == active}
		if sv, ok := vc.versions[v]; ok {
			vs.State, vs.Here = sv.Instance.State().String(), true
		}
		if vc.control != nil {
			l, ok := lags[v]
			switch {
			case err != nil:
				vs.LagError = err.Error()
			case lagErrs[v] != nil:
				vs.LagError = lagErrs[v].Error()
			case !ok:
				vs.LagError = fmt.Sprintf("versions: %s is not registered on the control topic", v)
			default:
				vs.Lag = &VersionLag{Group: l.Group, Total: l.Total, Progress: l.Progress(), CaughtUp: l.CaughtUp(versions.DefaultMaxLag), Members: l.Members, Partitions: l.Partitions}
			}
		}
		out.Versions = append(out.Versions, vs)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

func (vc versionControl) promote(w http.ResponseWriter, r *http.Request) {
	v := r.Context().Value(versionKey{}).(string)
	force := false
	for k, vals := range r.URL.Query() {
		if k != "force" || len(vals) != 1 || (vals[0] != "true" && vals[0] != "false") {
			problem(w, r, http.StatusBadRequest, "bad parameter", "a promotion takes one parameter, force=true or force=false")
			return
		}
		force = vals[0] == "true"
	}
	app, err := vc.app()
	if err == nil {
		// Any registered version, run here or elsewhere.
		err = vc.control.Promote(r.Context(), app, v, versions.PromoteOptions{Force: force})
	}
	var behind *versions.NotCaughtUpError
	switch {
	case errors.Is(err, versions.ErrNotRegistered):
		problem(w, r, http.StatusNotFound, "no such version", err.Error())
	case errors.As(err, &behind):
		problem(w, r, http.StatusConflict, "not caught up", err.Error())
	case err != nil:
		problem(w, r, http.StatusBadGateway, "promotion failed", err.Error())
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"active": v})
	}
}

func (vc versionControl) rollback(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		problem(w, r, http.StatusBadRequest, "bad parameter", "a rollback takes no parameters")
		return
	}
	app, err := vc.app()
	var v string
	if err == nil {
		v, err = vc.control.Rollback(r.Context(), app)
	}
	if err != nil {
		problem(w, r, http.StatusConflict, "rollback refused", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"active": v})
}
