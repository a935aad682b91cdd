package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/projection"
)

func (a *api) listViews(w http.ResponseWriter, _ *http.Request) {
	out := []projection.Schema{}
	for _, v := range a.cfg.Views.Views() {
		out = append(out, v.Schema())
	}
	a.json(w, http.StatusOK, map[string]any{"views": out})
}

func (a *api) view(w http.ResponseWriter, r *http.Request) (*projection.View, bool) {
	name := chi.URLParam(r, "view")
	if n, err := url.PathUnescape(name); err == nil {
		name = n
	}
	v, ok := a.cfg.Views.View(name)
	if !ok {
		a.problem(w, r, http.StatusNotFound, "no such view", fmt.Sprintf("there is no view %q; GET /views lists them", name))
	}
	return v, ok
}

func (a *api) describeView(w http.ResponseWriter, r *http.Request) {
	if v, ok := a.view(w, r); ok {
		a.json(w, http.StatusOK, v.Schema())
	}
}

// getKey answers a key's entry, or forwards the request to the instance
// that holds it.
func (a *api) getKey(w http.ResponseWriter, r *http.Request) {
	v, ok := a.view(w, r)
	if !ok {
		return
	}
	key, err := url.PathUnescape(chi.URLParam(r, "key"))
	if err != nil {
		a.problem(w, r, http.StatusBadRequest, "bad key", err.Error())
		return
	}
	for k := range r.URL.Query() {
		if k != "minPosition" && k != "maxLag" {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of a key read (minPosition, maxLag)", k))
			return
		}
	}
	in, ok := a.readFrom(w, r)
	if !ok {
		return
	}
	e, found, err := v.Get(in, key)
	if err == nil && r.URL.Query().Has("minPosition") {
		// The key is here: read it once the state reflects the positions
		// (a key elsewhere is forwarded with them).
		if !a.awaitPositions(w, r, v) {
			return
		}
		e, found, err = v.Get(in, key)
	}
	var nl *engine.NotLocalError
	switch {
	case errors.As(err, &nl):
		a.forward(w, r, nl)
	case err != nil:
		a.storeError(w, r, err)
	case !found:
		a.problem(w, r, http.StatusNotFound, "no such key", fmt.Sprintf("view %s has no key %q", v.Name(), key))
	default:
		a.json(w, http.StatusOK, e)
	}
}

// windows answers a key's windows that start in [from, to] (?from=,
// ?to=: RFC 3339 times or Unix milliseconds; default: all), or a
// count-windowed view's windows of the key, or forwards the request to the
// key's owner.
func (a *api) windows(w http.ResponseWriter, r *http.Request) {
	v, ok := a.view(w, r)
	if !ok {
		return
	}
	key, err := url.PathUnescape(chi.URLParam(r, "key"))
	if err != nil {
		a.problem(w, r, http.StatusBadRequest, "bad key", err.Error())
		return
	}
	q := r.URL.Query()
	if v.Kind() == projection.CountWindowed {
		a.countWindows(w, r, v, key)
		return
	}
	for k := range q {
		if k != "from" && k != "to" && k != "minPosition" {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of a windowed fetch (from, to, minPosition)", k))
			return
		}
	}
	from, to := time.UnixMilli(0), time.UnixMilli(1<<62)
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
			*p.t = time.UnixMilli(ms)
		} else if t, err := time.Parse(time.RFC3339Nano, s); err == nil && t.UnixMilli() >= 0 {
			*p.t = t
		} else {
			a.problem(w, r, http.StatusBadRequest, "bad time", fmt.Sprintf("%s %q: want an RFC 3339 time or Unix milliseconds, from 1970 on", p.name, s))
			return
		}
	}
	if to.Before(from) {
		a.problem(w, r, http.StatusBadRequest, "bad time range", "to is before from")
		return
	}
	fetch := func() (any, error) { return v.Fetch(a.cfg.Instance, key, from, to) }
	a.answerWindows(w, r, v, key, fetch)
}

// countWindows answers a key's windows in a count-windowed view: all that
// the aggregation keeps (there is no time range: they are numbered by
// record).
func (a *api) countWindows(w http.ResponseWriter, r *http.Request, v *projection.View, key string) {
	for k := range r.URL.Query() {
		if k != "minPosition" {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of a count-windowed fetch (minPosition): its windows are numbered by record, not placed in time, and every window kept is answered", k))
			return
		}
	}
	a.answerWindows(w, r, v, key, func() (any, error) { return v.FetchCount(a.cfg.Instance, key) })
}

// answerWindows answers what fetch reads (after ?minPosition=, if given),
// or forwards the request to the key's owner.
func (a *api) answerWindows(w http.ResponseWriter, r *http.Request, v *projection.View, key string, fetch func() (any, error)) {
	ws, err := fetch()
	if err == nil && r.URL.Query().Has("minPosition") {
		if !a.awaitPositions(w, r, v) {
			return
		}
		ws, err = fetch()
	}
	var nl *engine.NotLocalError
	switch {
	case errors.As(err, &nl):
		a.forward(w, r, nl)
	case errors.Is(err, projection.ErrNotWindowed):
		a.problem(w, r, http.StatusBadRequest, "not windowed", err.Error())
	case err != nil:
		a.storeError(w, r, err)
	default:
		a.json(w, http.StatusOK, map[string]any{"key": key, "windows": ws})
	}
}

// storeError answers the error of a read.
func (a *api) storeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, projection.ErrBadKey), errors.Is(err, projection.ErrNoPrefix):
		a.problem(w, r, http.StatusBadRequest, "bad key", err.Error())
	case errors.Is(err, projection.ErrWindowed):
		a.problem(w, r, http.StatusBadRequest, "windowed", err.Error()+" at "+r.URL.Path+"/windows")
	case errors.Is(err, engine.ErrNotReady):
		w.Header().Set("Retry-After", "1")
		a.problem(w, r, http.StatusServiceUnavailable, "not ready", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		a.problem(w, r, http.StatusGatewayTimeout, "timeout", err.Error())
	default:
		a.cfg.Logger.Error("httpapi: a read failed", "path", r.URL.Path, "err", err)
		a.problem(w, r, http.StatusInternalServerError, "read failed", err.Error())
	}
}
