// Package kafkaenv hands out a Kafka broker for tests, benchmarks and
// examples: one harness, whatever the machine has.
//
// [Start] tries, in order: an external broker named by the KAFKA_BROKERS
// environment variable (comma-separated host:port, as scripts/services.sh
// prints); the providers registered with [Register] (package integration
// registers one for testcontainers-go when a Docker engine answers, and one
// for scripts/services.sh); and finally an embedded, in-process broker
// (franz-go's kfake), which needs nothing installed. A broker named
// explicitly wins over one found.
//
// The embedded broker speaks the real protocol (groups, transactions,
// compaction) and is right for semantics, but it is much faster than a real
// broker and moves its log start when it compacts: never use it as a
// performance baseline. Tests that claim Kafka behaviour call [Real], which
// skips them with a visible reason on the embedded broker — or fails them
// when CI=true, since CI must run them against a real broker.
//
//	env, err := kafkaenv.Start(ctx, kafkaenv.Options{})
//	if err != nil { … }
//	defer env.Close()
//	client, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
package kafkaenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
)

// Kind says where a broker came from.
type Kind string

// The kinds of broker.
const (
	Embedded Kind = "embedded" // in-process kfake
	External Kind = "external" // KAFKA_BROKERS
)

// Env is a running broker (or cluster).
type Env struct {
	Brokers []string
	Kind    Kind
	close   func() error
	once    sync.Once
	err     error
}

// Real reports whether the broker is a real Apache Kafka (or compatible)
// broker rather than the embedded one.
func (e *Env) Real() bool { return e.Kind != Embedded }

// Close stops the broker if this Env started it; an external broker is left
// running.
func (e *Env) Close() error {
	e.once.Do(func() {
		if e.close != nil {
			e.err = e.close()
		}
	})
	return e.err
}

// Options tune Start.
type Options struct {
	// Embedded forces the embedded broker even when another is available.
	Embedded bool
	// DataDir makes the embedded broker persist its log there, so that an
	// example keeps its data across restarts. Default: in memory.
	DataDir string
	// Partitions is the embedded broker's default partition count for topics
	// created without one. Default: 1.
	Partitions int
}

// Provider starts or finds a broker. It returns ok=false, with no error, when
// it does not apply on this machine (no Docker engine, say).
type Provider func(ctx context.Context) (env *Env, ok bool, err error)

var (
	provMu    sync.Mutex
	providers []namedProvider
)

type namedProvider struct {
	name string
	p    Provider
}

// Register adds a provider, tried after KAFKA_BROKERS and before the
// embedded broker, in registration order.
func Register(name string, p Provider) {
	provMu.Lock()
	defer provMu.Unlock()
	providers = append(providers, namedProvider{name, p})
}

// NewEnv is for providers: an Env of the given kind whose Close calls close
// (which may be nil).
func NewEnv(kind Kind, brokers []string, close func() error) *Env {
	return &Env{Brokers: brokers, Kind: kind, close: close}
}

// Start returns a broker: the external one in KAFKA_BROKERS, a registered
// provider's, or a new embedded one.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if !opts.Embedded {
		if bs := os.Getenv("KAFKA_BROKERS"); bs != "" {
			var brokers []string
			for _, b := range strings.Split(bs, ",") {
				if b = strings.TrimSpace(b); b != "" {
					brokers = append(brokers, b)
				}
			}
			if len(brokers) == 0 {
				return nil, errors.New("kafkaenv: KAFKA_BROKERS is set but names no broker")
			}
			return NewEnv(External, brokers, nil), nil
		}
		provMu.Lock()
		ps := append([]namedProvider(nil), providers...)
		provMu.Unlock()
		for _, np := range ps {
			env, ok, err := np.p(ctx)
			if err != nil {
				return nil, fmt.Errorf("kafkaenv: provider %s: %w", np.name, err)
			}
			if ok {
				return env, nil
			}
		}
	}
	return StartEmbedded(opts)
}

// StartEmbedded starts an in-process broker on a free loopback port.
func StartEmbedded(opts Options) (*Env, error) {
	parts := opts.Partitions
	if parts <= 0 {
		parts = 1
	}
	kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(parts), kfake.Ports(0)}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	c, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: start the embedded broker: %w", err)
	}
	return NewEnv(Embedded, c.ListenAddrs(), func() error { c.Close(); return nil }), nil
}

// ForTest returns a broker for a test, closed when the test ends: the one
// Start picks.
func ForTest(tb testing.TB) *Env {
	tb.Helper()
	env, err := Start(context.Background(), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Close() })
	return env
}

// Real returns a real broker for a test that claims Kafka behaviour
// (transactions, rebalances, compaction, restore). Without one, the test is
// skipped with the reason — or fails when CI=true, since CI must run it.
func Real(tb testing.TB) *Env {
	tb.Helper()
	env := ForTest(tb)
	if !env.Real() {
		msg := "needs a real Kafka broker: set KAFKA_BROKERS (scripts/services.sh start kafka prints it) or run with a Docker engine"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return env
}

// CreateTopics creates topics on the broker for a test, each with
// partitions partitions (the broker's default replication), or fails it.
func (e *Env) CreateTopics(tb testing.TB, partitions int32, topics ...string) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// No retention by age: tests write records with fixed, old event times,
	// which a broker's retention (7 days by default) would delete.
	forever := "-1"
	resps, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, -1, map[string]*string{"retention.ms": &forever}, topics...)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			tb.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
	// A broker answers for a new topic's partitions a moment after it has
	// created them: wait until every partition has an end offset, so that
	// the test's first request finds them.
	adm := kadm.NewClient(cl)
	for {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		ready := err == nil
		if ready {
			n := 0
			ends.Each(func(o kadm.ListedOffset) {
				if o.Err != nil {
					ready = false
				}
				n++
			})
			ready = ready && n == len(topics)*int(partitions)
		}
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("topics %v: their partitions are not all served after a minute: %v", topics, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Secured is the secured side of the broker scripts/services.sh starts
// (scripts/README.md): a SASL_SSL listener and an mTLS one beside the
// plaintext one, ACLs on (StandardAuthorizer), the CA and the users'
// passwords in Dir.
type Secured struct {
	// SASL and MTLS are the listeners' addresses; Plaintext the same
	// broker's plaintext one, where a test is a super user.
	SASL, MTLS, Plaintext string
	// Dir holds ca.pem, client.pem and client.key (CN=oxbow-app) and the
	// users' password files.
	Dir string
	// Admin is a super user on SASL (SCRAM-SHA-512); App is "oxbow-app",
	// allowed only what a test grants it, the same principal on SASL
	// (SCRAM-SHA-512) and on MTLS (AppMTLS, by its certificate).
	Admin, App, AppMTLS kafkasec.Config
}

// Secure returns the secured side of the broker for a test, or skips it
// (fails it when CI=true) when scripts/services.sh's broker is not
// running: OXBOW_KAFKA_SASL_SSL, OXBOW_KAFKA_MTLS and OXBOW_SECURE_DIR
// come from `scripts/services.sh env`.
func Secure(tb testing.TB) *Secured {
	tb.Helper()
	s := &Secured{SASL: os.Getenv("OXBOW_KAFKA_SASL_SSL"), MTLS: os.Getenv("OXBOW_KAFKA_MTLS"), Dir: os.Getenv("OXBOW_SECURE_DIR")}
	if s.SASL == "" || s.MTLS == "" || s.Dir == "" || os.Getenv("KAFKA_BROKERS") == "" {
		msg := "needs the secured broker of scripts/services.sh: eval \"$(scripts/services.sh env)\" after scripts/services.sh start kafka"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	s.Plaintext = strings.Split(os.Getenv("KAFKA_BROKERS"), ",")[0]
	ca := filepath.Join(s.Dir, "ca.pem")
	s.Admin = kafkasec.Config{CAFile: ca, SASL: kafkasec.ScramSHA512, User: "admin", PasswordFile: filepath.Join(s.Dir, "admin.password")}
	s.App = kafkasec.Config{CAFile: ca, SASL: kafkasec.ScramSHA512, User: "oxbow-app", PasswordFile: filepath.Join(s.Dir, "oxbow-app.password")}
	s.AppMTLS = kafkasec.Config{CAFile: ca, CertFile: filepath.Join(s.Dir, "client.pem"), KeyFile: filepath.Join(s.Dir, "client.key")}
	return s
}

// Grant allows principal ("User:name") the ACLs on the secured broker,
// through its SASL listener as the super user, until the test ends.
func (s *Secured) Grant(tb testing.TB, principal string, acls []engine.ACL) {
	tb.Helper()
	bs, err := engine.Builders(acls, principal)
	if err != nil {
		tb.Fatal(err)
	}
	opts, err := s.Admin.ClientOpts([]string{s.SASL})
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, b := range bs {
			_, _ = adm.DeleteACLs(ctx, b)
		}
		cl.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, b := range bs {
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			tb.Fatalf("granting %s ACLs: %v", principal, err)
		}
	}
}
