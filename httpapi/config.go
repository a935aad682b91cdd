package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/projection"
	"github.com/oxbow-dev/oxbow/versions"
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

// Decider is what the API reads of an application deciding commands:
// *engine.App.
type Decider interface {
	State() engine.AppState
	Stalled() error
}

var _ Decider = (*engine.App)(nil)

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
	// LagHistory is how long GET /lag (and the console's lag chart) looks
	// back: the instance measures its lag every 5 s while the handler is
	// open, with Brokers (default: 15 minutes; negative: not measured).
	LagHistory time.Duration
	// Logger gets the errors behind unexpected 5xx answers, and panics
	// (default: slog.Default() as New finds it).
	Logger *slog.Logger
	// PositionWait bounds how long a read with ?minPosition= waits for the
	// instance to reflect it (default: 5 seconds; never past the
	// RequestTimeout).
	PositionWait time.Duration
	// Commands are the aggregates that take commands, by name (an
	// *aggregate.Client each).
	Commands map[string]Submitter
	// Deciders are the applications deciding those commands, by the same
	// names (the aggregates' deciders, *engine.App), where they run in
	// this process. While one is stalled (a transaction Kafka left open:
	// engine.App.Stalled) its commands answer 503 at once, with the reason
	// and Retry-After, instead of 504 once the client gives up; and
	// /readyz fails while any is stalled, degraded or failed.
	Deciders map[string]Decider
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
	// Topology is described at /topology, and New refuses views of stores
	// it does not have or that hold something else
	// (projection.Registry.Check); Version is the application's version,
	// in /status.
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
	// VersionControl, with Versions, is the control topic's client: GET
	// /versions then gives each registered version's lag and catch-up
	// progress, and operators (Operate) promote a version with POST
	// /versions/{version}/promote (?force=true: whatever its lag) and roll
	// back with POST /versions/rollback, as the oxbow tool does. And a
	// read for a version this instance does not run is forwarded to one
	// that does (VersionForwardedHeader), authorized here first.
	VersionControl *versions.Control

	// Console serves the web console under /console/ (off by default): a
	// page for operators that draws the topology with each node's rate,
	// shows the group's instances and tasks, lag, versions, views and dead
	// letters. Its files hold no data and are open to anyone who reaches
	// the API; everything it shows it asks of the API with the token the
	// operator gives it, under the routes' own permissions.
	Console bool

	versioned bool // a version's handler under a Versions dispatcher
}

// Served is one version of the application, as Config.Versions serves it.
type Served struct {
	Instance Instance
	Views    *projection.Registry
	Topology *engine.Topology
}
