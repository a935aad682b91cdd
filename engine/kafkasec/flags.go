package kafkasec

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
)

// The environment variables Flags reads, by flag. The password and the
// token are not flags: give a file, or the variables PasswordEnv and
// TokenEnv.
var flagEnv = []struct{ flag, env, usage string }{
	{"kafka-tls", "OXBOW_KAFKA_TLS", "connect to Kafka over TLS (implied by the other -kafka-tls flags)"},
	{"kafka-tls-ca", "OXBOW_KAFKA_TLS_CA", "PEM file of the CA the brokers' certificates chain to (default: the system's)"},
	{"kafka-tls-cert", "OXBOW_KAFKA_TLS_CERT", "PEM client certificate, for mTLS"},
	{"kafka-tls-key", "OXBOW_KAFKA_TLS_KEY", "PEM key of the client certificate"},
	{"kafka-tls-server-name", "OXBOW_KAFKA_TLS_SERVER_NAME", "the name the brokers' certificates must carry (default: the host dialled)"},
	{"kafka-sasl-mechanism", "OXBOW_KAFKA_SASL_MECHANISM", "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"},
	{"kafka-sasl-user", "OXBOW_KAFKA_SASL_USER", "SASL user (PLAIN, SCRAM)"},
	{"kafka-sasl-password-file", "OXBOW_KAFKA_SASL_PASSWORD_FILE", "file holding the SASL password (or set $" + PasswordEnv + ")"},
	{"kafka-sasl-token-file", "OXBOW_KAFKA_SASL_TOKEN_FILE", "file holding the OAUTHBEARER token, read at each authentication (or set $" + TokenEnv + ")"},
}

// PasswordEnv and TokenEnv hold a SASL password or token given in the
// environment rather than in a file.
const (
	PasswordEnv = "OXBOW_KAFKA_SASL_PASSWORD"
	TokenEnv    = "OXBOW_KAFKA_SASL_TOKEN"
)

// Flags registers the -kafka-tls* and -kafka-sasl-* flags on fs, each
// defaulting to its environment variable (OXBOW_KAFKA_TLS_CA for
// -kafka-tls-ca, and so on); after fs.Parse, the function it returns gives
// the Config, checked. Every Oxbow command takes these flags, with these
// names.
func Flags(fs *flag.FlagSet) func() (Config, error) {
	vals := make(map[string]*string, len(flagEnv))
	for _, f := range flagEnv {
		usage := fmt.Sprintf("%s (default $%s)", f.usage, f.env)
		if f.flag == "kafka-tls" {
			// A boolean flag that takes -kafka-tls alone.
			vals[f.flag] = new(string)
			*vals[f.flag] = os.Getenv(f.env)
			fs.BoolFunc(f.flag, usage, func(s string) error { *vals["kafka-tls"] = s; return nil })
			continue
		}
		vals[f.flag] = fs.String(f.flag, os.Getenv(f.env), usage)
	}
	return func() (Config, error) {
		c := Config{
			CAFile: *vals["kafka-tls-ca"], CertFile: *vals["kafka-tls-cert"], KeyFile: *vals["kafka-tls-key"],
			ServerName: *vals["kafka-tls-server-name"], SASL: *vals["kafka-sasl-mechanism"], User: *vals["kafka-sasl-user"],
			PasswordFile: *vals["kafka-sasl-password-file"], TokenFile: *vals["kafka-sasl-token-file"],
			Password: NewSecret(os.Getenv(PasswordEnv)),
		}
		if s := *vals["kafka-tls"]; s != "" {
			on, err := strconv.ParseBool(s)
			if err != nil {
				return Config{}, fmt.Errorf("kafkasec: -kafka-tls (or $OXBOW_KAFKA_TLS) %q: want true or false", s)
			}
			c.TLS = on
		}
		if t := os.Getenv(TokenEnv); t != "" && c.TokenFile == "" {
			s := NewSecret(t)
			c.Token = func(context.Context) (Secret, error) { return s, nil }
		}
		if !c.Password.IsZero() && c.PasswordFile != "" {
			return Config{}, errors.New("kafkasec: both $" + PasswordEnv + " and a password file are given; give one")
		}
		if _, err := c.Opts(); err != nil {
			return Config{}, err
		}
		return c, nil
	}
}
