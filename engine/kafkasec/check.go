package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RefusedError is the cluster refusing a client: what it refused, in
// words, and the error the client got.
type RefusedError struct {
	Reason string
	Err    error
}

func (e *RefusedError) Error() string {
	return "kafka refused the client: " + e.Reason + ": " + e.Err.Error()
}
func (e *RefusedError) Unwrap() error { return e.Err }

// CheckTimeout bounds Check.
const CheckTimeout = 30 * time.Second

// Check asks the cluster for its metadata through each seed broker once,
// without retries, and returns a *RefusedError if it refused the client.
// A cluster that does not answer is not an error here: the components ride
// that out (engine.Config.TaskTimeout); a refusal they would retry for
// ever, or until that timeout, saying only that a broker is away.
func Check(ctx context.Context, cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	err := cl.Ping(ctx)
	if r := Refused(err); r != nil {
		return r
	}
	return nil
}

// Refused explains err as a *RefusedError if it is the cluster refusing the
// client (its TLS handshake, SASL, an authorization), else returns nil.
func Refused(err error) *RefusedError {
	if err == nil {
		return nil
	}
	var r *RefusedError
	if errors.As(err, &r) {
		return r
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
		remote    *net.OpError
		kafkaErr  *kerr.Error
	)
	reason := ""
	switch {
	case errors.As(err, &unknownCA):
		reason = "the broker's certificate is signed by an authority not trusted here (the CA file: -kafka-tls-ca)"
	case errors.As(err, &hostname):
		reason = "the broker's certificate is not for the name dialled (-kafka-tls-server-name)"
	case errors.As(err, &invalid), errors.As(err, &verify):
		reason = "the broker's certificate did not verify"
	case errors.As(err, &header):
		reason = "the listener does not speak TLS"
	case errors.As(err, &remote) && remote.Op == "remote error" && strings.Contains(remote.Err.Error(), "tls:"):
		// The broker's alert (crypto/tls has no exported type for it).
		reason = "the broker ended the TLS handshake: it wants a client certificate it trusts (-kafka-tls-cert, -kafka-tls-key)"
	case errors.As(err, &kafkaErr):
		reason = refusedBy(kafkaErr)
	}
	if reason == "" {
		return nil
	}
	return &RefusedError{Reason: reason, Err: err}
}

func refusedBy(e *kerr.Error) string {
	switch e {
	case kerr.SaslAuthenticationFailed:
		return "authentication failed: a wrong user or password, or a token it does not accept"
	case kerr.UnsupportedSaslMechanism:
		return "the listener does not take this SASL mechanism"
	case kerr.IllegalSaslState:
		return "SASL out of order: does the listener expect SASL?"
	case kerr.TopicAuthorizationFailed:
		return "not authorized for a topic (an ACL is missing)"
	case kerr.GroupAuthorizationFailed:
		return "not authorized for the consumer group (an ACL is missing)"
	case kerr.TransactionalIDAuthorizationFailed:
		return "not authorized for the transactional id (an ACL is missing)"
	case kerr.ClusterAuthorizationFailed:
		return "not authorized for the cluster operation (an ACL is missing)"
	case kerr.DelegationTokenAuthorizationFailed:
		return "not authorized for the delegation token"
	}
	return ""
}
