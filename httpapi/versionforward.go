package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/versions"
)

// VersionForwardedHeader marks a read forwarded by an instance that does
// not run the version it is for to one that does, with the forwarder's
// id. An instance that does not run the version either answers 421
// rather than forwarding it again.
const VersionForwardedHeader = "Oxbow-Version-Forwarded-By"

// instancesTTL is how long the instances of a version found on the
// control topic and in its group are used before they are looked up
// again (at once, after a failed forward).
const instancesTTL = 2 * time.Second

// versionForwarder sends the reads for a version this instance does not
// run to an instance that does (found through Config.VersionControl): so
// a promotion switches the reads of every instance, also of those still
// running only the version before.
type versionForwarder struct {
	control   *versions.Control
	app       func() (string, error)
	via       *api     // a local version's API: its client, peering, id
	mux       *chi.Mux // its routes, to classify a request
	next      atomic.Uint32
	done      chan struct{} // closed by Handler.Close: forwarded feeds end
	closeOnce sync.Once

	lookup sync.Mutex // one lookup at a time; the others wait for its answer
	mu     sync.Mutex
	found  map[string]foundInstances // by version
}

func newVersionForwarder(control *versions.Control, app func() (string, error), via *api, mux *chi.Mux) *versionForwarder {
	return &versionForwarder{control: control, app: app, via: via, mux: mux, done: make(chan struct{}), found: map[string]foundInstances{}}
}

// close ends the forwarded requests in flight (change feeds).
func (f *versionForwarder) close() { close(f.done) }

type foundInstances struct {
	at        time.Time
	instances []engine.Instance // those with an address
}

// local reports whether a request is one this instance answers whatever
// the version: probes, the console, metrics (the process's own), and
// everything but reads — commands go to the aggregates the same way from
// every version (Config.Commands is one for all).
func localRoute(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return true
	}
	switch p := r.URL.Path; {
	case p == "/healthz", p == "/readyz", p == "/metrics", p == "/console", strings.HasPrefix(p, "/console/"):
		return true
	}
	return false
}

// instances are the running instances of a version that advertise an
// address, from the cache while it is fresh; fresh: looked up after the
// call (a failed forward's instances may have gone).
func (f *versionForwarder) instances(ctx context.Context, version string, fresh bool) ([]engine.Instance, error) {
	asked := time.Now()
	cached := func() ([]engine.Instance, bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		c, ok := f.found[version]
		if !ok || time.Since(c.at) >= instancesTTL || (fresh && c.at.Before(asked)) {
			return nil, false
		}
		return c.instances, true
	}
	if ins, ok := cached(); ok {
		return ins, nil
	}
	// Requests that find the cache stale at once wait for one lookup (each
	// reads the control topic and describes a group).
	f.lookup.Lock()
	defer f.lookup.Unlock()
	if ins, ok := cached(); ok {
		return ins, nil
	}
	app, err := f.app()
	if err != nil {
		return nil, err
	}
	all, err := f.control.Instances(ctx, app, version)
	if err != nil {
		return nil, err
	}
	var with []engine.Instance
	for _, in := range all {
		if in.Addr != "" {
			with = append(with, in)
		}
	}
	f.mu.Lock()
	f.found[version] = foundInstances{at: time.Now(), instances: with}
	f.mu.Unlock()
	return with, nil
}

// forward serves a read for version from an instance that runs it, after
// checking the caller may make it (the permission of its route, as this
// instance's routes class it).
func (f *versionForwarder) forward(w http.ResponseWriter, r *http.Request, version string, here []string) {
	a := f.via
	if from := r.Header.Get(VersionForwardedHeader); from != "" {
		a.problem(w, r, http.StatusMisdirectedRequest, "version not here", fmt.Sprintf("instance %s forwarded the request for version %s here, but this instance serves versions %v; retry", from, version, here))
		return
	}
	pattern := f.mux.Find(chi.NewRouteContext(), r.Method, r.URL.Path)
	p, ok := a.guard.classes[http.MethodGet+" "+pattern]
	if !ok {
		a.problem(w, r, http.StatusNotFound, "no such route", fmt.Sprintf("%s %s is not a route of this API", r.Method, r.URL.Path))
		return
	}
	r, ok = a.guard.admit(w, r, p)
	if !ok {
		return
	}
	ins, err := f.instances(r.Context(), version, false)
	switch {
	case errors.Is(err, versions.ErrNotRegistered):
		a.problem(w, r, http.StatusNotFound, "no such version", fmt.Sprintf("this instance serves versions %v, and %v", here, err))
		return
	case err != nil:
		w.Header().Set("Retry-After", "1")
		a.problem(w, r, http.StatusServiceUnavailable, "version unavailable", fmt.Sprintf("the instances of version %s: %v", version, err))
		return
	}
	var failed []string
	for attempt := 0; attempt < 2; attempt++ {
		if attempt == 1 {
			// Those found may have gone: look again.
			if ins, err = f.instances(r.Context(), version, true); err != nil {
				break
			}
		}
		if len(ins) == 0 {
			continue
		}
		first := int(f.next.Add(1))
		for i := range ins {
			in := ins[(first+i)%len(ins)]
			resp, cancel, err := f.send(r, version, in)
			if err != nil {
				if r.Context().Err() != nil {
					return // the caller has gone
				}
				failed = append(failed, fmt.Sprintf("%s (%s): %v", in.ID, in.Addr, err))
				continue
			}
			defer cancel()
			relay(w, resp, version, in.ID)
			return
		}
	}
	w.Header().Set("Retry-After", "1")
	if len(failed) == 0 {
		a.problem(w, r, http.StatusServiceUnavailable, "version unavailable", fmt.Sprintf("no instance of version %s is running with an HTTP address (engine.Config.AdvertisedAddr); this instance serves versions %v", version, here))
		return
	}
	a.problem(w, r, http.StatusBadGateway, "forward failed", fmt.Sprintf("no instance of version %s answered: %s", version, strings.Join(failed, "; ")))
}

// send asks an instance for the read r in version; the response's body
// is read under the returned context's cancel, which the caller calls
// once done with it. The request may take as long as the caller waits
// (a change feed, for ever), but the instance must answer its headers
// within RequestTimeout.
func (f *versionForwarder) send(r *http.Request, version string, in engine.Instance) (*http.Response, context.CancelFunc, error) {
	a := f.via
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	target := url.URL{Scheme: scheme, Host: in.Addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	ctx, cancel := context.WithCancel(r.Context())
	go func() { // ends with the request, or the API
		select {
		case <-f.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, r.Method, target.String(), nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	req.Header.Set(VersionForwardedHeader, a.cfg.Instance.ID())
	req.Header.Set(VersionHeader, version)
	for _, h := range []string{"Accept", "Last-Event-ID", "traceparent", "tracestate"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if err := a.guard.peers.sign(req, r); err != nil {
		cancel()
		return nil, nil, err
	}
	client := *a.cfg.Client
	client.Timeout = 0 // the headers' deadline is below; a feed's body has none
	headers := time.AfterFunc(a.cfg.RequestTimeout, cancel)
	resp, err := client.Do(req)
	if !headers.Stop() && err == nil {
		resp.Body.Close()
		err = fmt.Errorf("no answer within %v", a.cfg.RequestTimeout)
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return resp, cancel, nil
}

// hopHeaders are a connection's, not an answer's, and are not relayed.
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true}

// relay copies an instance's answer to w, flushing as it comes (a change
// feed's events reach the caller as they are sent).
func relay(w http.ResponseWriter, resp *http.Response, version, by string) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if !hopHeaders[k] {
			w.Header()[k] = vs
		}
	}
	w.Header().Set(VersionHeader, version)
	if w.Header().Get("Oxbow-Served-By") == "" {
		w.Header().Set("Oxbow-Served-By", by)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				// The instance went away mid-answer: the caller sees a
				// cut response, as from the instance itself.
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
}
