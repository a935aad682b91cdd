// Package registry reads and writes records in Confluent's wire format —
// a zero magic byte, the 4-byte big-endian id of the writer's schema in a
// schema registry, then the payload — with schemas kept in a registry that
// speaks Confluent's REST API (Confluent Schema Registry, Apicurio Registry's
// ccompat API, Redpanda, Karapace). The serdes here are the
// [serde.Serde] values a topology's sources, sinks and stores take; they
// talk to the registry through franz-go's [sr.Client].
//
// A serde is made for one topic, as a key or a value serde, with the Go
// type it reads and writes and, for Avro, that type's schema. Making it
// finds the schema's id under its subject ([TopicName] by default): by
// lookup (the schema must already be registered; Confluent's serializers
// register by default, these do not unless told with [AutoRegister]), or by
// registering it, or, with [UseLatest], the subject's latest version is the
// one written. Reading, a record carries its writer's schema id: the serde
// fetches that schema once, caches it, and reads the payload as its own
// type, resolving an evolved schema as Avro's rules say.
//
// Errors say what is wrong. A record without the magic byte
// ([ErrNotWireFormat]), with an id the registry does not know
// ([ErrUnknownSchema]), whose writer schema cannot be read as the reader's
// ([ErrIncompatible]) or whose payload does not match its schema
// ([ErrMalformed]) is the record's fault, and goes where the engine's
// decode error policy sends it (a dead letter names the reason). A registry
// that cannot be reached is not: after retrying for [Config.RetryFor] the
// serde returns an error wrapping [serde.ErrUnavailable], which stops the
// instance whatever its policies, so that no record is lost for it.
//
// # Registries
//
// The tests run on Apicurio Registry 2.4.2's Confluent-compatible API (as
// scripts/services.sh starts it) and on franz-go's fake. Apicurio differs
// from Confluent's registry in ways a user may meet: its default
// compatibility is NONE (Confluent's is BACKWARD: set it, PUT /config); an
// incompatible schema is refused with 409 but without Confluent's error code
// 409 in the body (the serde's error carries the registry's message, which
// names the incompatible fields); it has no /mode; it tells a JSON Schema
// by its content, so one without "$schema" may be refused ("Failed to
// discover artifact type"); and the ids it gives on
// that API are its content ids, so its own Java serdes must be set to
// Confluent's id handling (apicurio.registry.as-confluent=true,
// apicurio.registry.use-id=contentId) to share topics with these.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Errors of records that cannot be read, each wrapped with the detail.
var (
	// ErrNotWireFormat: the record does not start with the magic byte 0 and
	// a schema id.
	ErrNotWireFormat = errors.New("registry: not in Confluent's wire format")
	// ErrUnknownSchema: the registry has no schema with the record's id.
	ErrUnknownSchema = errors.New("registry: unknown schema id")
	// ErrIncompatible: the writer's schema cannot be read as the reader's.
	ErrIncompatible = errors.New("registry: writer schema incompatible with the reader's")
	// ErrMalformed: the payload does not match the schema it names.
	ErrMalformed = errors.New("registry: payload does not match its schema")
)

// ErrNotRegistered is returned when making a serde whose schema is not
// registered under its subject (and AutoRegister is off).
var ErrNotRegistered = errors.New("registry: schema not registered")

// Config connects to a registry.
type Config struct {
	// URLs of the registry's Confluent-compatible API, e.g.
	// http://127.0.0.1:8081 (Confluent) or
	// http://127.0.0.1:8080/apis/ccompat/v7 (Apicurio).
	URLs []string
	// Options for the client beyond the URLs (authentication, TLS, an
	// HTTP client).
	Options []sr.ClientOpt
	// RequestTimeout bounds each request to the registry (default 10s).
	RequestTimeout time.Duration
	// RetryFor is how long a serde retries a registry it cannot reach
	// (a transport error, a timeout, a 5xx answer) before it gives up with
	// serde.ErrUnavailable (default 30s, Kafka's request timeout).
	RetryFor time.Duration
}

// Registry is a client of a schema registry with the caches every serde
// made from it shares: schemas by id and by subject and version. It is safe
// for concurrent use. Close cancels the fetches serdes make while reading
// and writing records (those calls have no context of their own).
type Registry struct {
	cl      *sr.Client
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	retry   time.Duration

	mu        sync.Mutex
	byID      map[int]sr.Schema
	byVersion map[subjectVersion]sr.SubjectSchema

	// parsed holds, by id, writer schemas parsed for AvroToJSON
	// (avro.Schema), or why they cannot be (error).
	parsed sync.Map

	// failures counts the ids whose failure (unknown, incompatible) the
	// serdes cache, up to maxCachedFailures: records with made-up ids must
	// not grow the caches without bound.
	failures atomic.Int64
}

const maxCachedFailures = 1024

// cacheFailure says whether err, a failure to read the records of an id,
// may be cached: not an unknown id (it may be registered yet), and only
// for the first maxCachedFailures ids; past those each record of an
// uncached id asks the registry again.
func (r *Registry) cacheFailure(err error) bool {
	return !errors.Is(err, ErrUnknownSchema) && r.failures.Add(1) <= maxCachedFailures
}

type subjectVersion struct {
	subject string
	version int
}

// New makes a Registry. It does not connect: the first serde made does.
func New(cfg Config) (*Registry, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("registry: Config.URLs is empty")
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = 30 * time.Second
	}
	opts := append([]sr.ClientOpt{sr.URLs(cfg.URLs...), sr.HTTPClient(&http.Client{Timeout: cfg.RequestTimeout})}, cfg.Options...)
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Registry{
		cl: cl, ctx: ctx, cancel: cancel, timeout: cfg.RequestTimeout, retry: cfg.RetryFor,
		byID:      map[int]sr.Schema{},
		byVersion: map[subjectVersion]sr.SubjectSchema{},
	}, nil
}

// Client is the registry's client, for what the serdes do not do
// (compatibility settings, deletions).
func (r *Registry) Client() *sr.Client { return r.cl }

// Close cancels fetches under way; serdes made from r fail afterwards
// when they need the registry.
func (r *Registry) Close() { r.cancel() }

// transient says whether a registry error may pass if retried: no answer,
// or a server error. A 4xx answer is final.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests
	}
	return !errors.Is(err, context.Canceled)
}

// conflict says whether the registry answered 409 Conflict.
func conflict(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusConflict
}

// notFound says whether the registry answered that what was asked for
// does not exist: 404 with one of Confluent's codes for it (subject,
// version, schema), not any 404 (a proxy's page, a wrong URL).
func notFound(err error) bool {
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		return false
	}
	switch re.ErrorCode {
	case sr.ErrSubjectNotFound.Code, sr.ErrVersionNotFound.Code, sr.ErrSchemaNotFound.Code:
		return true
	}
	return false
}

// outsideAPI says what is likely wrong of a 404 that is not the
// registry's own (no Confluent error code of 404xx; a server's page): the
// URL is not the base of the registry's Confluent-compatible API.
func outsideAPI(err error) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound || re.ErrorCode/100 == http.StatusNotFound {
		return err
	}
	return fmt.Errorf("registry: %s %s answers 404 as no schema registry would: is the URL the base of its Confluent-compatible API (Apicurio's: http://host:port/apis/ccompat/v7)? %w", re.Method, re.URL, err)
}

// maxRegisterRaces bounds how often a registration answered 409 for a
// schema that is not (yet) there is tried again: Apicurio answers the
// loser of two creations of a subject 409 before the winner's is visible.
const maxRegisterRaces = 4

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// call runs fn against the registry, each try bounded by RequestTimeout,
// retrying a transient failure with backoff for at most the registry's
// RetryFor (or until ctx ends); a failure that outlasts it, or that ctx
// ends, wraps serde.ErrUnavailable.
func (r *Registry) call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(r.retry)
	wait := 50 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, r.timeout)
		err := fn(tctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("registry: %s: %w (%w)", what, serde.ErrUnavailable, ctx.Err())
		}
		if !transient(err) {
			return outsideAPI(err)
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("registry: %s: %w (%w)", what, serde.ErrUnavailable, err)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("registry: %s: %w (%w)", what, serde.ErrUnavailable, err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// unavailable wraps a registry's final answer to a fetch made while
// reading a record, but for the schema not existing: a refusal (401, 403),
// a request it did not understand, a 404 that is not the registry's. None
// is the record's fault, so none may skip or dead-letter it.
func unavailable(what string, err error) error {
	if err == nil || errors.Is(err, serde.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("registry: %s: %w (%w)", what, serde.ErrUnavailable, err)
}

// schemaByID is the schema with the given id, from the cache or the
// registry, fetched under the registry's own context. That the registry
// has no such schema is the record's fault (ErrUnknownSchema), and not
// cached: a schema registered a moment ago may not have reached a
// registry's follower yet (Confluent's client caches no missing id by
// default either). Any other failure is serde.ErrUnavailable.
func (r *Registry) schemaByID(id int) (sr.Schema, error) {
	r.mu.Lock()
	s, ok := r.byID[id]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	what := fmt.Sprintf("fetching schema %d", id)
	err := r.call(r.ctx, what, func(ctx context.Context) (err error) {
		s, err = r.cl.SchemaByID(ctx, id)
		return err
	})
	if notFound(err) {
		return sr.Schema{}, fmt.Errorf("%w %d", ErrUnknownSchema, id)
	}
	if err != nil {
		return sr.Schema{}, unavailable(what, err)
	}
	r.mu.Lock()
	r.byID[id] = s
	r.mu.Unlock()
	return s, nil
}

// schemaByVersion is a subject's schema at a version (-1: the latest, never
// cached).
func (r *Registry) schemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	k := subjectVersion{subject, version}
	if version > 0 {
		r.mu.Lock()
		s, ok := r.byVersion[k]
		r.mu.Unlock()
		if ok {
			return s, nil
		}
	}
	var s sr.SubjectSchema
	what := fmt.Sprintf("fetching subject %q version %d", subject, version)
	err := r.call(ctx, what, func(ctx context.Context) (err error) {
		s, err = r.cl.SchemaByVersion(ctx, subject, version)
		return err
	})
	if err != nil && !notFound(err) {
		err = unavailable(what, err)
	}
	if err != nil {
		return s, err
	}
	r.mu.Lock()
	r.byVersion[subjectVersion{subject, s.Version}] = s
	r.byID[s.ID] = s.Schema
	r.mu.Unlock()
	return s, nil
}

// eachReference calls fn with each schema that refs name, fetched from the
// registry, and the schemas those name, each before the schemas that
// refer to it and once.
func (r *Registry) eachReference(ctx context.Context, refs []sr.SchemaReference, fn func(sr.SchemaReference, sr.SubjectSchema) error) error {
	seen := map[subjectVersion]bool{}
	var visit func(refs []sr.SchemaReference) error
	visit = func(refs []sr.SchemaReference) error {
		for _, ref := range refs {
			k := subjectVersion{ref.Subject, ref.Version}
			if seen[k] {
				continue
			}
			seen[k] = true
			ss, err := r.schemaByVersion(ctx, ref.Subject, ref.Version)
			if err == nil {
				if err = visit(ss.References); err != nil {
					return err
				}
				err = fn(ref, ss)
			}
			if err != nil {
				return fmt.Errorf("reference %q (subject %q version %d): %w", ref.Name, ref.Subject, ref.Version, err)
			}
		}
		return nil
	}
	return visit(refs)
}

// resolveWriter finds the id and the schema a serde writes with: the
// subject's latest version, the schema registered now, or the schema
// looked up.
func (r *Registry) resolveWriter(ctx context.Context, subject string, s sr.Schema, o options) (int, sr.Schema, error) {
	switch {
	case o.useLatest:
		ss, err := r.schemaByVersion(ctx, subject, -1)
		if notFound(err) {
			return 0, s, fmt.Errorf("%w: subject %q has no version", ErrNotRegistered, subject)
		}
		return ss.ID, ss.Schema, err
	case o.autoRegister:
		var id int
		err := r.call(ctx, fmt.Sprintf("registering under %q", subject), func(ctx context.Context) (err error) {
			for race := 0; ; race++ {
				id, err = r.cl.RegisterSchema(ctx, subject, s, -1, -1)
				if !conflict(err) {
					return err
				}
				// Apicurio answers 409 to the second of two registrations
				// of a new subject at once (two instances starting): the
				// schema is there once the first creation has committed,
				// which may be after the 409. A schema the compatibility
				// rule refuses is never there, and its 409 stands after
				// the last try.
				ss, lerr := r.cl.LookupSchema(ctx, subject, s)
				switch {
				case lerr == nil:
					id = ss.ID
					return nil
				case transient(lerr):
					return lerr // the caller tries again
				case !notFound(lerr) || race == maxRegisterRaces:
					return err
				}
				if werr := sleep(ctx, time.Duration(race+1)*20*time.Millisecond); werr != nil {
					return err
				}
			}
		})
		if err != nil {
			if !errors.Is(err, serde.ErrUnavailable) {
				err = fmt.Errorf("registry: registering the schema under %q: %w", subject, err)
			}
			return 0, s, err
		}
		return id, s, nil
	}
	var ss sr.SubjectSchema
	err := r.call(ctx, fmt.Sprintf("looking up under %q", subject), func(ctx context.Context) (err error) {
		ss, err = r.cl.LookupSchema(ctx, subject, s)
		return err
	})
	if notFound(err) {
		return 0, s, fmt.Errorf("%w under subject %q (register it, or make the serde with AutoRegister): %w", ErrNotRegistered, subject, err)
	}
	if err != nil {
		return 0, s, err
	}
	if ss.Schema.Schema != "" { // the registry's text, kept for other serdes of the id
		r.mu.Lock()
		r.byID[ss.ID] = ss.Schema
		r.mu.Unlock()
	}
	return ss.ID, s, nil
}
