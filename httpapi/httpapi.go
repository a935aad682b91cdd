package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/projection"
)

// Instance is what the API serves: an application instance (*engine.App).
type Instance interface {
	engine.Queryable
	State() engine.AppState
	ID() string
	// Positions: per input partition, the offset after the last record
	// the queryable state reflects (engine.App.Positions).
	Positions() map[string]map[int32]int64
}

var _ Instance = (*engine.App)(nil)

// Config configures the API.
type Config struct {
	// Instance is the running instance whose views are served.
	Instance Instance
	// Views are the views served.
	Views *projection.Registry
	// DefaultLimit and MaxLimit bound the entries of one page of a scan
	// (defaults: 100 and 1,000).
	DefaultLimit, MaxLimit int
	// RequestTimeout bounds a request, a forwarded one included (default:
	// 10 seconds).
	RequestTimeout time.Duration
	// Client forwards requests for keys of other instances, over TLS if
	// the request came over TLS (default: a client with RequestTimeout;
	// give one with a TLS configuration that trusts the instances'
	// certificates, and presents a client certificate if they ask).
	Client *http.Client
	// Logger gets the errors behind 5xx answers (default: discarded).
	Logger *slog.Logger
	// PositionWait bounds how long a read with ?minPosition= waits for the
	// instance to reflect it (default: 5 seconds; never past the
	// RequestTimeout).
	PositionWait time.Duration
	// Commands are the aggregates that take commands, by name (an
	// *aggregate.Client each).
	Commands map[string]Submitter
	// MaxBodyBytes bounds a command's body (default: 1 MiB).
	MaxBodyBytes int64
	// Brokers, KafkaSecurity (secured brokers: TLS, SASL) and KafkaOptions
	// let change feeds read the views' changelogs (without Brokers, a feed
	// is answered 501), and /status the groups' lag.
	Brokers       []string
	KafkaSecurity kafkasec.Config
	KafkaOptions  []kgo.Opt
	// Heartbeat is how often an idle change feed sends a comment, so that
	// proxies keep it open (default: 15 seconds).
	Heartbeat time.Duration
	// Authenticator, if set, authenticates every request but /healthz and
	// /readyz, and each is authorized by its route's class (a Permission);
	// nil (the default): the API is open.
	Authenticator Authenticator
	// PeerSecret is a secret every instance of the application shares
	// (16 bytes or more): with an Authenticator, an instance that forwards
	// a request signs it with the caller's identity instead of passing the
	// caller's credentials on, and an instance trusts the identity a
	// forwarded request carries only under a valid signature. Without
	// one, a forwarded request carries the caller's Authorization and is
	// authenticated again (default: none).
	PeerSecret []byte
	// CORS, if set, lets browsers of other origins call the API (default:
	// none may).
	CORS *CORS
	// Topology is described at /topology; Version is the application's
	// version, in /status.
	Topology *engine.Topology
	Version  string
	// Metrics, if set, is served at /metrics (PrometheusMetrics makes one).
	Metrics http.Handler
	// MeterProvider, if set, gets the API's instruments, in OpenTelemetry's
	// semantic conventions: http.server.request.duration (seconds, by
	// method, route and status) and oxbow.command.duration (seconds, by
	// aggregate and outcome). PrometheusMetrics makes one that Metrics
	// serves.
	MeterProvider metric.MeterProvider
	// TracerProvider, if set, traces every request in a server span that
	// continues the caller's trace (W3C traceparent); a command's span is
	// the parent of its processing, through the command record.
	TracerProvider trace.TracerProvider

	// Versions, set instead of Instance, Views and Topology, serves several
	// versions of the application side by side (each its own engine.App,
	// a consumer group of its own): a request is served by the version it
	// names (the Oxbow-Version header, or ?version=), else by the one
	// Active names — a versions.Watcher's Active, so that a promotion
	// switches readers within moments. Every answer says which version
	// served it (Oxbow-Version), and a request forwarded to another
	// instance is served there by the same version. GET /versions lists
	// them.
	Versions map[string]Served
	Active   func() string

	versioned bool // a version's handler under a Versions dispatcher
}

// Served is one version of the application, as Config.Versions serves it.
type Served struct {
	Instance Instance
	Views    *projection.Registry
	Topology *engine.Topology
}

// VersionHeader names the version of the application that serves, or is
// asked to serve, a request.
const VersionHeader = "Oxbow-Version"

// Submitter submits a command in its JSON envelope and waits for its
// outcome: *aggregate.Client.
type Submitter interface {
	SubmitJSON(ctx context.Context, aggregateID string, envelope []byte, opts ...aggregate.SubmitOption) (aggregate.Outcome, error)
}

// ForwardedHeader marks a request forwarded by an instance to the owner of
// its key, with the forwarder's id: an owner that does not hold the key
// either answers 421 instead of forwarding again. With an Authenticator
// and a PeerSecret, it is taken only under the forwarder's signature.
const ForwardedHeader = "Oxbow-Forwarded-By"

// Handler is the API: an http.Handler. Close it before the server shuts
// down, so that change feeds end (the requests in flight finish).
type Handler struct {
	http.Handler
	a    *api
	subs []*Handler // Config.Versions: one per version
}

// Close ends the change feeds (later ones are refused with 503) and
// closes the API's Kafka client.
func (h *Handler) Close() {
	for _, s := range h.subs {
		s.Close()
	}
	if h.a == nil {
		return
	}
	h.a.closeOnce.Do(func() {
		close(h.a.done)
		h.a.admMu.Lock()
		if h.a.adm != nil {
			h.a.adm.Close()
		}
		h.a.admMu.Unlock()
	})
}

// New returns the API's handler.
func New(cfg Config) (*Handler, error) {
	if len(cfg.Versions) > 0 {
		return newVersioned(cfg)
	}
	if cfg.Instance == nil || cfg.Views == nil {
		return nil, errors.New("httpapi: Config.Instance and Config.Views must be set")
	}
	if cfg.DefaultLimit <= 0 {
		cfg.DefaultLimit = 100
	}
	if cfg.MaxLimit <= 0 {
		cfg.MaxLimit = 1000
	}
	if cfg.DefaultLimit > cfg.MaxLimit {
		return nil, fmt.Errorf("httpapi: DefaultLimit %d is above MaxLimit %d", cfg.DefaultLimit, cfg.MaxLimit)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.RequestTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PositionWait <= 0 {
		cfg.PositionWait = 5 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Authenticator != nil && len(cfg.PeerSecret) > 0 && len(cfg.PeerSecret) < 16 {
		return nil, fmt.Errorf("httpapi: PeerSecret has %d bytes; give it 16 or more", len(cfg.PeerSecret))
	}
	kopts, err := cfg.KafkaSecurity.ClientOpts(cfg.Brokers, cfg.KafkaOptions...)
	if err != nil {
		return nil, fmt.Errorf("httpapi: KafkaSecurity: %w", err)
	}
	a := &api{cfg: cfg, kopts: kopts, done: make(chan struct{}), guard: &guard{auth: cfg.Authenticator, classes: map[string]Permission{},
		peers: peering{secret: cfg.PeerSecret, now: time.Now}, logger: cfg.Logger}}
	if err := a.instruments(); err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	if cfg.CORS != nil {
		c, err := cfg.CORS.handler()
		if err != nil {
			return nil, err
		}
		r.Use(c)
	}
	r.Use(a.recoverer)
	if a.requestDuration != nil {
		r.Use(a.measure)
	}
	if cfg.TracerProvider != nil {
		r.Use(a.tracing(cfg.TracerProvider.Tracer("github.com/oxbow-dev/oxbow/httpapi")))
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		a.problem(w, r, http.StatusNotFound, "no such route", fmt.Sprintf("%s %s is not a route of this API", r.Method, r.URL.Path))
	})
	mux := r
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// RFC 9110: a 405 lists the methods the resource allows.
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			if mux.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		a.problem(w, r, http.StatusMethodNotAllowed, "method not allowed", fmt.Sprintf("%s is not allowed on %s (%s is)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
	})
	r.Group(func(r chi.Router) {
		r.Use(a.timeout)
		r.Get("/healthz", a.healthz)
		r.Get("/readyz", a.readyz)
	})
	r.Group(func(r chi.Router) {
		g := a.guard
		r.Use(g.classified)
		r.Group(func(r chi.Router) {
			r.Use(a.timeout)
			g.route(r, Operate, http.MethodGet, "/status", a.status)
			g.route(r, ReadViews, http.MethodGet, "/topology", a.topology)
			g.route(r, ReadViews, http.MethodGet, "/openapi.json", a.openAPIHandler)
			if cfg.Metrics != nil {
				g.route(r, Operate, http.MethodGet, "/metrics", cfg.Metrics.ServeHTTP)
			}
			g.route(r, ReadViews, http.MethodGet, "/views", a.listViews)
			g.route(r, ReadViews, http.MethodGet, "/views/{view}", a.describeView)
			g.route(r, ReadViews, http.MethodGet, "/views/{view}/keys/{key}", a.getKey)
			g.route(r, ReadViews, http.MethodGet, "/views/{view}/entries", a.scan)
			g.route(r, ReadViews, http.MethodGet, "/views/{view}/keys/{key}/windows", a.windows)
			g.route(r, SubmitCommands, http.MethodPost, "/aggregates/{aggregate}/{id}/commands", a.command)
		})
		g.route(r, ReadFeeds, http.MethodGet, "/views/{view}/changes", a.changes) // long-lived: no request timeout
	})
	return &Handler{Handler: r, a: a}, nil
}

type api struct {
	cfg       Config
	done      chan struct{} // closed by Handler.Close: feeds end
	closeOnce sync.Once
	admMu     sync.Mutex
	adm       *kadm.Client // for /status's lag; closed by Handler.Close
	kopts     []kgo.Opt    // the Kafka clients': Brokers, KafkaSecurity, KafkaOptions
	guard     *guard

	// requestDuration and commandDuration are nil without a MeterProvider.
	requestDuration, commandDuration metric.Float64Histogram
}

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

// recoverer answers 500 with a problem for a panic, and logs it.
func (a *api) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.cfg.Logger.Error("httpapi: panic", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				a.problem(w, r, http.StatusInternalServerError, "internal error", "the request failed; the instance logged why")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// tracing runs each request in a server span.
func (a *api) tracing(tr trace.Tracer) func(http.Handler) http.Handler {
	prop := propagation.TraceContext{}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tr.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
			defer span.End()
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r.WithContext(ctx))
			span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
			if sw.status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.status))
			}
		})
	}
}

// statusWriter remembers the status of a response (and still streams).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (a *api) timeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// healthz: the process is alive, unless its instance failed (Run returned
// an error: the instance processes nothing more, and a supervisor should
// restart it).
func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	if st := a.cfg.Instance.State(); st == engine.AppFailed {
		a.problem(w, r, http.StatusServiceUnavailable, "failed", "the instance failed and processes nothing more: restart it")
		return
	}
	a.json(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz: ready while the instance runs (not while it starts, restores
// state, rebalances or stops).
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	st := a.cfg.Instance.State()
	if st == engine.AppDegraded {
		w.Header().Set("Retry-After", "1")
		detail := "Kafka does not answer; the instance retries"
		if tr, ok := a.cfg.Instance.(interface{ Trouble() error }); ok && tr.Trouble() != nil {
			detail += ": " + tr.Trouble().Error()
		}
		a.problem(w, r, http.StatusServiceUnavailable, "degraded", detail)
		return
	}
	if st != engine.AppRunning {
		w.Header().Set("Retry-After", "1")
		a.problem(w, r, http.StatusServiceUnavailable, "not ready", fmt.Sprintf("the instance is %s", st))
		return
	}
	a.json(w, http.StatusOK, map[string]string{"status": "ready"})
}

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

// forward sends the request to the key's owner and copies its answer.
func (a *api) forward(w http.ResponseWriter, r *http.Request, nl *engine.NotLocalError) {
	if from := r.Header.Get(ForwardedHeader); from != "" {
		// The forwarder thought this instance owns the key; it does not
		// (the group rebalanced meanwhile): let the client ask again
		// rather than pass the request around.
		a.problem(w, r, http.StatusMisdirectedRequest, "not the owner", fmt.Sprintf("instance %s forwarded the request here, but %v; retry", from, nl))
		return
	}
	if nl.Owner.Addr == "" {
		w.Header().Set("Retry-After", "1")
		detail := nl.Error()
		if nl.Owner.MemberID != "" {
			detail += "; that instance advertises no HTTP address (engine.Config.AdvertisedAddr)"
		}
		a.problem(w, r, http.StatusServiceUnavailable, "owner unavailable", detail)
		return
	}
	req, err := a.peerRequest(r, nl.Owner.Addr, ForwardedHeader)
	if err != nil {
		a.problem(w, r, http.StatusBadGateway, "forward failed", err.Error())
		return
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		a.problem(w, r, http.StatusBadGateway, "forward failed", fmt.Sprintf("the owner %s (%s): %v", nl.Owner.InstanceID, nl.Owner.Addr, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Oxbow-Served-By", nl.Owner.InstanceID)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// storePositioner is an Instance that tells what each store reflects
// (*engine.App, enginetest's driver); without it a read waits for the
// instance's input positions, which a store behind a repartition topic
// reflects later.
type storePositioner interface {
	StorePosition(store string) (engine.StorePosition, error)
}

// awaitPositions waits until the view's store reflects every position of
// the request's ?minPosition=<topic>:<partition>:<offset> (repeatable: the
// positions of a command's events, say), through every repartition topic
// between; false: it answered why not.
func (a *api) awaitPositions(w http.ResponseWriter, r *http.Request, v *projection.View) bool {
	return a.awaitPositionsOf(w, r, v, false)
}

// awaitPositionsOf is awaitPositions; heldOnly: positions only the owner
// of a partition of the view reflects are another's to wait for (a
// gathered scan asks every instance).
func (a *api) awaitPositionsOf(w http.ResponseWriter, r *http.Request, v *projection.View, heldOnly bool) bool {
	specs := r.URL.Query()["minPosition"]
	if len(specs) == 0 {
		return true
	}
	type position struct {
		topic     string
		partition int32
		offset    int64
	}
	var want []position
	for _, spec := range specs {
		i := strings.LastIndexByte(spec, ':')
		j := -1
		if i > 0 {
			j = strings.LastIndexByte(spec[:i], ':')
		}
		var p position
		var err1, err2 error
		var part int64
		if j > 0 {
			p.topic = spec[:j]
			part, err1 = strconv.ParseInt(spec[j+1:i], 10, 32)
			p.offset, err2 = strconv.ParseInt(spec[i+1:], 10, 64)
		}
		if j <= 0 || err1 != nil || err2 != nil || part < 0 || p.offset < 0 {
			a.problem(w, r, http.StatusBadRequest, "bad position", fmt.Sprintf("minPosition %q: want <topic>:<partition>:<offset>", spec))
			return false
		}
		p.partition = int32(part)
		want = append(want, p)
	}
	sp, byStore := a.cfg.Instance.(storePositioner)
	// have is what the view reflects, and whether a missing position is
	// another instance's to wait for (heldOnly).
	have := func() (map[string]map[int32]int64, func(topic string) bool, error) {
		if !byStore {
			return a.cfg.Instance.Positions(), func(string) bool { return heldOnly }, nil
		}
		pos, err := sp.StorePosition(v.Store())
		if err != nil {
			return nil, nil, err
		}
		elsewhere := func(topic string) bool {
			return heldOnly && (len(pos.Partitions) == 0 || !slices.Contains(pos.Derived, topic))
		}
		return pos.Offsets, elsewhere, nil
	}
	if byStore {
		pos, err := sp.StorePosition(v.Store())
		if err != nil {
			a.problem(w, r, http.StatusServiceUnavailable, "position unknown", err.Error())
			return false
		}
		for _, p := range want {
			if !slices.Contains(pos.Inputs, p.topic) {
				a.problem(w, r, http.StatusBadRequest, "bad position", fmt.Sprintf("minPosition %s:%d:%d: view %s does not derive from topic %s, so no position of it can be waited for (it derives from %s)", p.topic, p.partition, p.offset, v.Name(), p.topic, topicList(pos.Inputs)))
				return false
			}
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.PositionWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		at, elsewhere, err := have()
		if err != nil {
			a.problem(w, r, http.StatusServiceUnavailable, "position unknown", err.Error())
			return false
		}
		var missing []string
		for _, p := range want {
			o, ok := at[p.topic][p.partition]
			if !ok && elsewhere(p.topic) {
				continue
			}
			if !ok || o <= p.offset {
				missing = append(missing, fmt.Sprintf("%s:%d:%d (at %s)", p.topic, p.partition, p.offset, positionText(o, ok)))
			}
		}
		if len(missing) == 0 {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			w.Header().Set("Retry-After", "1")
			a.problem(w, r, http.StatusServiceUnavailable, "position not reached", fmt.Sprintf("after %v view %s does not reflect %s yet", a.cfg.PositionWait, v.Name(), strings.Join(missing, ", ")))
			return false
		}
	}
}

func topicList(topics []string) string {
	if len(topics) == 0 {
		return "no topic"
	}
	return strings.Join(topics, ", ")
}

func positionText(at int64, ok bool) string {
	if !ok {
		return "nothing known of it here yet"
	}
	return strconv.FormatInt(at, 10)
}

// Page is one page of a scan.
type Page struct {
	Entries []projection.Entry `json:"entries"`
	// Next, if set, is the cursor of the next page.
	Next string `json:"next,omitempty"`
}

// scan answers a page of a view's entries, gathered from every instance
// of the group (each answers its partitions' first entries after the
// cursor; the page is the first of them all, in stored key order):
// ?from=&to= (a key range, to excluded), ?prefix= (text keys), ?limit=,
// ?cursor= (the Next of the page before), ?minPosition= (each instance
// waits for the positions of the partitions it processes).
func (a *api) scan(w http.ResponseWriter, r *http.Request) {
	v, ok := a.view(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "from", "to", "prefix", "limit", "cursor", "minPosition":
		default:
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of a scan (from, to, prefix, limit, cursor)", k))
			return
		}
	}
	limit := a.cfg.DefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > a.cfg.MaxLimit {
			a.problem(w, r, http.StatusBadRequest, "bad limit", fmt.Sprintf("limit %q: want a number from 1 to %d", s, a.cfg.MaxLimit))
			return
		}
		limit = n
	}
	s := projection.Scan{Prefix: q.Get("prefix"), From: q.Get("from"), To: q.Get("to"), HasFrom: q.Has("from"), HasTo: q.Has("to")}
	if c := q.Get("cursor"); c != "" {
		after, err := decodeCursor(v.Name(), c)
		if err != nil {
			a.problem(w, r, http.StatusBadRequest, "bad cursor", err.Error())
			return
		}
		s.After = after
	}
	if !a.awaitPositionsOf(w, r, v, true) {
		return
	}
	local, more, err := a.localPage(r, v, s, limit)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if r.Header.Get(scanLocalHeader) != "" {
		// A peer gathering a scan: this instance's page, with raw keys.
		a.json(w, http.StatusOK, localPage{Entries: local, More: more})
		return
	}
	peers, err := a.peers()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		a.problem(w, r, http.StatusServiceUnavailable, "scan unavailable", err.Error())
		return
	}
	all := local
	for _, p := range peers {
		page, err := a.peerPage(r, p)
		if err != nil {
			a.problem(w, r, http.StatusBadGateway, "scan failed", fmt.Sprintf("instance %s (%s): %v", p.ID, p.Addr, err))
			return
		}
		all = append(all, page.Entries...)
		more = more || page.More
	}
	// Each instance's page is in key order and holds its first limit keys
	// after the cursor: the first limit of them all are the page.
	slices.SortFunc(all, func(x, y rawEntry) int { return bytes.Compare(x.Raw, y.Raw) })
	page := Page{Entries: []projection.Entry{}}
	for i, e := range all {
		if i == limit {
			more = true
			break
		}
		page.Entries = append(page.Entries, projection.Entry{Key: e.Key, Value: e.Value})
	}
	if more && len(page.Entries) > 0 {
		page.Next = encodeCursor(v.Name(), all[len(page.Entries)-1].Raw)
	}
	a.json(w, http.StatusOK, page)
}

// scanLocalHeader marks the request of an instance gathering a scan from
// its peers: answer this instance's partitions only, with raw keys.
const scanLocalHeader = "Oxbow-Scan-Local"

// rawEntry is an entry with its stored key, as a peer answers a gathered
// scan.
type rawEntry struct {
	Key   any    `json:"key"`
	Value any    `json:"value"`
	Raw   []byte `json:"raw"`
}

type localPage struct {
	Entries []rawEntry `json:"entries"`
	More    bool       `json:"more"`
}

// localPage reads up to limit entries of this instance's partitions.
func (a *api) localPage(r *http.Request, v *projection.View, s projection.Scan, limit int) ([]rawEntry, bool, error) {
	entries, err := v.Range(a.cfg.Instance, s)
	if err != nil {
		return nil, false, err
	}
	out := []rawEntry{}
	for e, err := range entries {
		if err != nil {
			return nil, false, err
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, rawEntry{Key: e.Key, Value: e.Value, Raw: e.RawKey()})
		if err := r.Context().Err(); err != nil {
			return nil, false, err
		}
	}
	return out, false, nil
}

// members is what a gathered scan needs of the instance: *engine.App.
type members interface {
	Instances() []engine.Instance
}

// peers are the other instances of the group, which hold the partitions
// this one does not.
func (a *api) peers() ([]engine.Instance, error) {
	m, ok := a.cfg.Instance.(members)
	if !ok {
		return nil, nil
	}
	var out []engine.Instance
	for _, in := range m.Instances() {
		if in.ID == a.cfg.Instance.ID() {
			continue
		}
		if in.Addr == "" {
			return nil, fmt.Errorf("instance %s holds partitions of the view but advertises no HTTP address (engine.Config.AdvertisedAddr)", in.ID)
		}
		out = append(out, in)
	}
	return out, nil
}

// peerPage asks a peer for its page of the scan.
func (a *api) peerPage(r *http.Request, p engine.Instance) (localPage, error) {
	req, err := a.peerRequest(r, p.Addr, scanLocalHeader)
	if err != nil {
		return localPage{}, err
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		return localPage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return localPage{}, fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var page localPage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return localPage{}, err
	}
	return page, nil
}

// A cursor is the view's name and the last key of a page, opaque to
// clients: base64url of "<view>\x00<key bytes>".
func encodeCursor(view string, key []byte) string {
	return base64.RawURLEncoding.EncodeToString(append(append([]byte(view), 0), key...))
}

func decodeCursor(view, c string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, errors.New("the cursor is not one this API made")
	}
	if len(b) <= len(view) || string(b[:len(view)]) != view || b[len(view)] != 0 {
		return nil, fmt.Errorf("the cursor is not one of view %s", view)
	}
	return b[len(view)+1:], nil
}

// command submits a command to an aggregate and answers its outcome: 200
// accepted, 409 conflict, 422 rejected, each with the outcome as JSON and
// the aggregate's version as the ETag. The body is the command's envelope,
// {"type":…,"data":…}; Idempotency-Key is its command id, If-Match the
// version it expects.
func (a *api) command(w http.ResponseWriter, r *http.Request) {
	name, _ := url.PathUnescape(chi.URLParam(r, "aggregate"))
	sub, ok := a.cfg.Commands[name]
	if !ok {
		a.problem(w, r, http.StatusNotFound, "no such aggregate", fmt.Sprintf("there is no aggregate %q that takes commands here", name))
		return
	}
	id, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil || id == "" {
		a.problem(w, r, http.StatusBadRequest, "bad aggregate id", "the aggregate id is empty or badly escaped")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		a.problem(w, r, http.StatusUnsupportedMediaType, "unsupported media type", fmt.Sprintf("a command is application/json, not %s", ct))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		a.problem(w, r, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("a command's body is at most %d bytes", a.cfg.MaxBodyBytes))
		return
	case err != nil:
		a.problem(w, r, http.StatusBadRequest, "unreadable body", err.Error())
		return
	case !json.Valid(body):
		a.problem(w, r, http.StatusBadRequest, "malformed JSON", `the body is not JSON: send the command's envelope, {"type":"<command>","data":{…}}`)
		return
	}
	var opts []aggregate.SubmitOption
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		opts = append(opts, aggregate.CommandID(key))
	}
	if m := r.Header.Get("If-Match"); m != "" {
		v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(m, "W/"), `"`), 10, 64)
		if err != nil || v < 0 {
			a.problem(w, r, http.StatusBadRequest, "bad If-Match", fmt.Sprintf("If-Match %q: want the aggregate's version, a number", m))
			return
		}
		opts = append(opts, aggregate.ExpectedVersion(v))
	}
	if c := r.Header.Get("Oxbow-Correlation-Id"); c != "" {
		opts = append(opts, aggregate.CorrelationID(c))
	}
	start := time.Now()
	o, err := sub.SubmitJSON(r.Context(), id, body, opts...)
	outcome := string(o.Status)
	switch {
	case errors.Is(err, aggregate.ErrMalformedCommand):
		outcome = "malformed"
	case errors.Is(err, aggregate.ErrCommandIDReused):
		outcome = "reused-key"
	case errors.Is(err, aggregate.ErrNoOutcome), errors.Is(err, context.DeadlineExceeded):
		outcome = "no-outcome"
	case err != nil:
		outcome = "failed"
	case o.Duplicate:
		outcome = "duplicate"
	}
	a.commandDone(r.Context(), name, outcome, start)
	switch {
	case errors.Is(err, aggregate.ErrMalformedCommand):
		// In the caller's terms: the envelope's and the command's fields.
		a.problem(w, r, http.StatusBadRequest, "malformed command", strings.ReplaceAll(err.Error(), "aggregate: ", ""))
		return
	case errors.Is(err, aggregate.ErrCommandIDReused):
		a.problem(w, r, http.StatusUnprocessableEntity, "Idempotency-Key reused", fmt.Sprintf("Idempotency-Key %q was first used for another request (another aggregate, body or If-Match); its outcome stands and this command was not run: send it with a key of its own", r.Header.Get("Idempotency-Key")))
		return
	case errors.Is(err, aggregate.ErrNoOutcome), errors.Is(err, context.DeadlineExceeded):
		a.problem(w, r, http.StatusGatewayTimeout, "no outcome", err.Error()+"; retry with the same Idempotency-Key")
		return
	case err != nil:
		a.cfg.Logger.Error("httpapi: a command failed", "aggregate", name, "id", id, "err", err)
		a.problem(w, r, http.StatusBadGateway, "command not submitted", err.Error())
		return
	}
	status := http.StatusOK
	switch o.Status {
	case aggregate.Conflict:
		status = http.StatusConflict
	case aggregate.Rejected:
		status = http.StatusUnprocessableEntity
	}
	w.Header().Set("ETag", fmt.Sprintf(`"%d"`, o.Version))
	a.json(w, status, o)
}
