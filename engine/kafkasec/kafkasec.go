// Package kafkasec connects Oxbow's Kafka clients to a secured cluster:
// TLS (a CA, a client certificate for mTLS, the server's name) and SASL
// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), as one Config that
// every component takes (engine.Config, aggregate.ClientConfig,
// cdc/postgres.Config, versions.Options, httpapi.Config) and that the
// commands read from the same flags and environment variables (Flags).
//
// Secrets come from files or the environment, never from a flag (a command
// line is visible to every user of the machine), and they are read again at
// each authentication, so that a rotated password or token file is used by
// the next connection. A Secret never prints: fmt, slog and encoding/json
// all show it as [redacted].
//
// Connect checks a configuration against the cluster once, at start, and
// turns what the cluster refused into one error that says what it was: an
// untrusted certificate, a wrong password, a mechanism the listener does not
// take, a missing ACL. The clients themselves would retry some of those for
// ever (a TLS handshake that fails looks like a broker that is away).
package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The SASL mechanisms.
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	OAuthBearer = "OAUTHBEARER"
)

// Config is how to reach a secured Kafka. The zero value is a plaintext,
// unauthenticated connection.
type Config struct {
	// TLS turns TLS on; setting any of the TLS files or ServerName does
	// too.
	TLS bool
	// CAFile holds the PEM certificates the brokers' certificates must
	// chain to (default: the system's roots).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// mTLS (the brokers' ssl.client.auth). Both or neither. Read again at
	// each handshake, so that a renewed certificate is used.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry
	// (default: the host of the address dialled).
	ServerName string

	// SASL is the mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or
	// OAUTHBEARER; empty: none.
	SASL string
	// User and the password, for PLAIN and SCRAM: Password, or else the
	// contents of PasswordFile (one trailing newline ignored).
	User         string
	Password     Secret
	PasswordFile string
	// Token supplies OAUTHBEARER tokens (the hook to an identity
	// provider); without it, the contents of TokenFile are the token.
	Token     func(context.Context) (Secret, error)
	TokenFile string
}

// Secret is a password or a token: it prints as [redacted] (fmt's every
// verb, slog, JSON) and only Reveal gives it.
type Secret struct{ s string }

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{s} }

// Reveal is the secret itself.
func (s Secret) Reveal() string { return s.s }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.s == "" }

const redacted = "[redacted]"

// Format prints [redacted], whatever the verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue is [redacted].
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText is [redacted] (encoding/json uses it too).
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// ReadSecret reads a secret from a file, without one trailing newline.
func ReadSecret(path string) (Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Secret{}, fmt.Errorf("kafkasec: reading the secret: %w", err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return Secret{}, fmt.Errorf("kafkasec: the secret file %s is empty", path)
	}
	return Secret{s}, nil
}

// IsZero reports whether c is a plaintext, unauthenticated connection.
func (c Config) IsZero() bool { return !c.tlsOn() && c.SASL == "" }

func (c Config) tlsOn() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// Opts are the franz-go options for c, after checking it: the CA read, the
// client certificate loaded once (a bad pair fails here, not at the first
// handshake), the password or token file readable. Components append
// their own KafkaOptions after these.
func (c Config) Opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.tlsOn() {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.SASL != "" || c.User != "" || !c.Password.IsZero() || c.PasswordFile != "" || c.TokenFile != "" || c.Token != nil {
		m, err := c.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafkasec: the CA file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafkasec: the CA file %s holds no PEM certificate", c.CAFile)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("kafkasec: a client certificate needs both CertFile and KeyFile")
	}
	if c.CertFile != "" {
		kp := &keyPair{cert: c.CertFile, key: c.KeyFile}
		if _, err := kp.load(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.load() }
	}
	return tc, nil
}

// keyPair is a client certificate read at each handshake; a pair that does
// not load (half-written while it is renewed) leaves the last good one.
type keyPair struct {
	cert, key string
	mu        sync.Mutex
	last      *tls.Certificate
}

func (k *keyPair) load() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.last != nil {
			return k.last, nil
		}
		return nil, fmt.Errorf("kafkasec: the client certificate %s and key %s: %w", k.cert, k.key, err)
	}
	k.last = &c
	return &c, nil
}

func (c Config) mechanism() (sasl.Mechanism, error) {
	mech := strings.ToUpper(c.SASL)
	// Check first: a missing user or unreadable file fails at start, not
	// at the first connection.
	switch mech {
	case Plain, ScramSHA256, ScramSHA512:
		if c.User == "" {
			return nil, fmt.Errorf("kafkasec: SASL %s needs a user", mech)
		}
		if _, err := c.password(); err != nil {
			return nil, err
		}
	case OAuthBearer:
		if c.Token == nil {
			if _, err := c.token(context.Background()); err != nil {
				return nil, err
			}
		}
	case "":
		return nil, errors.New("kafkasec: a SASL user, password or token is set but no mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)")
	default:
		return nil, fmt.Errorf("kafkasec: unknown SASL mechanism %q (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)", c.SASL)
	}
	switch mech {
	case Plain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := c.password()
			return plain.Auth{User: c.User, Pass: p.Reveal()}, err
		}), nil
	case ScramSHA256:
		return scram.Sha256(c.scramAuth), nil
	case ScramSHA512:
		return scram.Sha512(c.scramAuth), nil
	}
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		t, err := c.token(ctx)
		return oauth.Auth{Token: t.Reveal()}, err
	}), nil
}

func (c Config) scramAuth(context.Context) (scram.Auth, error) {
	p, err := c.password()
	return scram.Auth{User: c.User, Pass: p.Reveal()}, err
}

func (c Config) password() (Secret, error) {
	switch {
	case !c.Password.IsZero():
		return c.Password, nil
	case c.PasswordFile != "":
		return ReadSecret(c.PasswordFile)
	}
	return Secret{}, fmt.Errorf("kafkasec: SASL %s needs a password (or a password file)", c.SASL)
}

func (c Config) token(ctx context.Context) (Secret, error) {
	switch {
	case c.Token != nil:
		return c.Token(ctx)
	case c.TokenFile != "":
		return ReadSecret(c.TokenFile)
	}
	return Secret{}, errors.New("kafkasec: SASL OAUTHBEARER needs a token hook (Token) or a token file")
}

// String describes c without its secrets, for logs.
func (c Config) String() string {
	if c.IsZero() {
		return "plaintext"
	}
	var parts []string
	if c.tlsOn() {
		t := "TLS"
		if c.CertFile != "" {
			t = "mTLS"
		}
		parts = append(parts, t)
	}
	if c.SASL != "" {
		parts = append(parts, "SASL "+strings.ToUpper(c.SASL))
		if c.User != "" {
			parts = append(parts, "as "+c.User)
		}
	}
	return strings.Join(parts, ", ")
}

// ClientOpts are the options of a client of brokers: the seeds, c's, then
// more (a component's own KafkaOptions, which may override c's).
func (c Config) ClientOpts(brokers []string, more ...kgo.Opt) ([]kgo.Opt, error) {
	sec, err := c.Opts()
	if err != nil {
		return nil, err
	}
	return append(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, sec...), more...), nil
}
