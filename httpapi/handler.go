package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
)

// Handler is the API: an http.Handler. Close it before the server shuts
// down, so that change feeds end (the requests in flight finish).
type Handler struct {
	http.Handler
	a    *api
	subs []*Handler // Config.Versions: one per version
	fwd  *versionForwarder
	// versionRoutes: the routes the Versions dispatcher answers itself,
	// beyond GET /versions.
	versionRoutes []string
}

// Close ends the change feeds (later ones are refused with 503) and
// closes the API's Kafka client.
func (h *Handler) Close() {
	for _, s := range h.subs {
		s.Close()
	}
	if h.fwd != nil {
		h.fwd.closeOnce.Do(h.fwd.close)
	}
	if h.a == nil {
		return
	}
	h.a.closeOnce.Do(func() {
		close(h.a.done)
		h.a.sampling.Wait()
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
	if cfg.Topology != nil {
		// A view of a store the topology does not have, or holding other
		// windows, would answer errors or garbage at every request.
		if err := cfg.Views.Check(cfg.Topology); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
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
	for name := range cfg.Deciders {
		if _, ok := cfg.Commands[name]; !ok {
			return nil, fmt.Errorf("httpapi: Deciders names %q, which is not among Commands", name)
		}
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.RequestTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
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
		r.Get("/", a.root)
		if cfg.Console {
			r.Get("/console", func(w http.ResponseWriter, r *http.Request) {
				// No body: the document declares none for the redirect.
				w.Header().Set("Location", "/console/")
				w.WriteHeader(http.StatusMovedPermanently)
			})
			r.Get("/console/*", consoleHandler().ServeHTTP)
		}
	})
	r.Group(func(r chi.Router) {
		g := a.guard
		r.Use(g.classified)
		r.Group(func(r chi.Router) {
			r.Use(a.timeout)
			g.route(r, Operate, http.MethodGet, "/status", a.status)
			g.route(r, Operate, http.MethodGet, "/lag", a.lagHistory)
			g.route(r, Operate, http.MethodGet, "/deadletters", a.deadLetters)
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
	if cfg.LagHistory == 0 {
		cfg.LagHistory = 15 * time.Minute
	}
	if cfg.Instance != nil && len(cfg.Brokers) > 0 && cfg.LagHistory > 0 {
		a.history = &lagHistory{window: cfg.LagHistory}
		a.sampling.Add(1)
		go a.sampleLag()
	}
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

	// history is the instance's lag of the last Config.LagHistory, which
	// sampleLag measures (nil without Brokers); Close waits for it.
	history  *lagHistory
	sampling sync.WaitGroup
}
