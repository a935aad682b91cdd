// Package httpapi is Oxbow's HTTP layer: a plain http.Handler, on chi,
// that serves an instance's views ([projection.Registry]).
//
// Routes:
//
//	GET /healthz                     the process answers; 503 once its instance failed
//	GET /readyz                      200 while the instance runs; 503 while it starts, restores or rebalances, or is stalled
//	GET /status                      the instance: state, tasks, standby lag, restored records, positions,
//	                                 input lag (with Config.Brokers), version, the group's members and
//	                                 tasks, each node's record count, restores under way; ?instance= another
//	                                 member's, asked of it
//	GET /deadletters                 the latest dead-lettered records, newest first, with their headers
//	GET /topology                    the topology, as Describe prints it, or its graph as JSON
//	                                 (Accept: application/json, or ?format=json)
//	GET /openapi.json                an OpenAPI 3.1 document of these routes (tested to match them)
//	GET /views                       the views and the types of their keys and values
//	GET /views/{view}                one view's description
//	GET /views/{view}/keys/{key}     a key's entry, {"key":…,"value":…}; ?maxLag=N lets a standby replica at
//	                                 most N changelog records behind answer too
//	GET /views/{view}/keys/{key}/windows
//	                                 a windowed view's windows of a key starting in ?from= … ?to=, or a
//	                                 count-windowed view's windows of a key (numbered by record)
//	GET /views/{view}/entries        a page of entries: ?from=&to= (to excluded), ?prefix=, ?limit=, ?cursor=
//	GET /views/{view}/changes        the view's changes as server-sent events (?key= for one key), resumable
//	                                 with the last event's id (Last-Event-ID, or ?from=)
//	POST /aggregates/{name}/{id}/commands
//	                                 a command, {"type":…,"data":…}: 200 accepted, 409 conflict, 422 rejected,
//	                                 each with the outcome and the aggregate's version as ETag;
//	                                 Idempotency-Key is the command id, If-Match the version expected
//	GET /console/                    the web console (Config.Console; off by default)
//
// With Config.Versions, GET /versions lists the versions and the active
// one; with Config.VersionControl too, each one's lag, and POST
// /versions/{version}/promote (?force=true) and POST /versions/rollback.
// An instance that does not run the version a read is for (the active
// one, or the one its Oxbow-Version names) asks an instance that does,
// found on the control topic and in the version's group, and relays the
// answer (a change feed as it comes); so a promotion switches the reads
// of every instance, including those still running only the version
// before. It answers the rest itself — probes, metrics, the console and
// commands, which go to the aggregates alike from every version.
//
// # The console
//
// Config.Console serves a page for operators under /console/: the topology
// drawn with each node's rate, the group's instances and tasks with their
// lag and restores, lag per input partition over the last minutes,
// versions (promote and roll back behind a confirmation), views (pages,
// prefixes, a key, the change feed) and dead letters. Its files are
// embedded and plain (no build step); it holds no data and reads
// everything from the routes above, sending the token the operator types
// into it, so every figure on it is under the routes' permissions.
//
// An Idempotency-Key is the aggregate's (the same key on another aggregate
// names another command) and is remembered for the aggregate's
// OutcomeRetention (aggregate.Config; a day of the command topic's time by
// default): the same request again — the same body and If-Match — gets the
// first outcome, with "duplicate": true, and changes nothing; another
// request with the key is answered 422, naming the key, and is not run.
//
// A key of another instance is forwarded to it (the owner comes from the
// group's assignment, its address from engine.Config.AdvertisedAddr), once:
// the forwarded request carries [ForwardedHeader], and an instance that
// gets one for a key it does not hold answers 421 rather than forwarding
// again (the group moved; the client retries). A scan is gathered from
// every instance of the group: each answers the first entries of its
// partitions after the cursor, and the instance asked merges them in key
// order (an instance that advertises no address makes scans 503).
//
// Read your writes: a key read or a scan with ?minPosition=<topic>:<partition>:<offset>
// (repeatable; the positions of a command's events, as its outcome gives
// them) waits, at most Config.PositionWait, until the view's store, in its
// committed state, reflects those records — whatever lies between the
// topic and the store: repartition topics, joins, several sub-topologies
// (engine.App.StorePosition) — and otherwise answers 503 saying which it
// does not reflect yet. A position of a topic the view does not derive
// from is a 400: no wait could bound it. A key of another instance is
// forwarded with the positions, and its owner waits.
//
// Every error is an application/problem+json document (RFC 9457) with a
// 4xx status for what the request got wrong (an unknown view, a key that
// does not parse, a bad limit or cursor) and 503 with Retry-After for what
// may pass (state restoring, an owner unknown while the group rebalances);
// a panic is a 500 problem, logged. Requests are bounded in time
// (Config.RequestTimeout) and scans in size (Config.MaxLimit).
//
// A change feed reads the view's store changelog (every partition, read
// committed, so it follows the commits, after the record cache merged the
// changes a commit made to a key), from its end or a position; it sends a
// comment every Config.Heartbeat when idle, and ends when the client goes
// or Handler.Close is called (call it before http.Server.Shutdown, so that
// the server's shutdown does not wait for feeds). A position (an event's
// id) names an offset for every partition of the changelog, each between
// the partition's start and end; any other is answered 400 saying what is
// wrong, since a feed started from it would miss changes.
//
// Config.Metrics is served at /metrics; PrometheusMetrics makes a meter
// provider and its handler. Given the provider as Config.MeterProvider, the
// API measures itself in OpenTelemetry's semantic conventions:
// http.server.request.duration in seconds, with the conventions' bucket
// bounds, by method, route pattern and status, and oxbow.command.duration
// by aggregate and outcome. (The engine's histograms are in seconds too,
// with bounds for what each measures.)
//
// Config.TracerProvider traces each request in a server span that
// continues the caller's W3C trace context.
//
// BenchmarkPointReads measures point reads from another process on
// loopback.
//
// # Security
//
// Without Config.Authenticator the API is open to whoever reaches it (the
// default). With one, every route but /healthz and /readyz needs an
// [Identity] with the [Permission] of the route's class: [ReadViews] for
// /views and what is under it, /openapi.json, /topology and /versions;
// [ReadFeeds] for the change feeds; [SubmitCommands] for commands;
// [Operate] for /status, /metrics and the operators' routes. Every route is
// in a class when it is registered (a test checks them all); one that is
// not is refused to everyone. A request without credentials, or with
// refused ones, is answered 401 with a WWW-Authenticate challenge; one
// whose caller lacks the permission, 403, naming the permission and the
// caller's subject (never its credentials). The identity is in the
// request's context ([IdentityFrom]) for a Submitter that wants it.
//
// The authenticators: [Tokens] (static bearer tokens, compared in
// constant time), [JWT] (JWTs signed RS256, ES256 or EdDSA by a key of a
// JWKS file, which is read again when it changes, so that keys rotate
// without a restart; exp, nbf, iss and aud checked; none and HS* refused),
// [ClientCertificates] (mTLS: the leaf of a chain the TLS server verified),
// and [FirstOf] to take several kinds. An [Authenticator] answers
// [ErrNoCredentials] for a request without credentials of its kind.
//
// Instances call each other (a key read forwarded to its owner, a scan
// gathered from every instance). With Config.PeerSecret, shared by every
// instance of the application, the forwarder does not pass the caller's
// credentials on: it sends the caller's identity (Oxbow-Caller) signed
// with HMAC-SHA256 over the method, path and query, the forwarding headers,
// the version and the time (Oxbow-Signature); the receiver accepts it only
// with a valid signature at most a minute from its clock, and authorizes
// that identity for the route. Without a PeerSecret the forwarder passes
// the caller's Authorization on and the receiver authenticates it again
// (client certificates do not pass: give instances that take them a
// PeerSecret). Either way, with an Authenticator, a request from outside
// that carries peer headers it cannot back (Oxbow-Caller or
// Oxbow-Signature without a valid signature; with a PeerSecret, also
// [ForwardedHeader] or the scan's) is answered 401: no header skips a
// check or names another caller. A request that came over TLS is forwarded
// over TLS (Config.Client trusts the instances' certificates).
//
// [ServerTLS] makes a TLS configuration (TLS 1.2 at least, client
// certificates verified against a CA file if given) whose certificate is
// read again when its files change; [NewServer] an http.Server with limits
// fit for the internet (5 s for the headers, 64 KiB of them, 30 s for a
// body, 2 min idle, no write timeout for feeds). Config.CORS lets
// browsers of the origins it names call the API (off by default); their
// preflight requests are answered before authentication.
package httpapi
