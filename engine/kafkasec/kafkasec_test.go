package kafkasec_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/internal/testpki"
)

const password = "s3cr3t-Pa55word"

func TestSecretNeverPrints(t *testing.T) {
	s := kafkasec.NewSecret(password)
	cfg := kafkasec.Config{SASL: kafkasec.ScramSHA512, User: "app", Password: s}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		fmt.Fprintf(&out, verb+"\n", s)
		fmt.Fprintf(&out, verb+"\n", cfg)
		fmt.Fprintf(&out, verb+"\n", &cfg)
		fmt.Fprintf(&out, verb+"\n", struct{ C kafkasec.Config }{cfg})
	}
	log := slog.New(slog.NewTextHandler(&out, nil))
	log.Info("text", "secret", s, "cfg", cfg)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("json", "secret", s, "cfg", cfg)
	b, err := json.Marshal(struct{ P kafkasec.Secret }{s})
	if err != nil {
		t.Fatal(err)
	}
	out.Write(b)
	if strings.Contains(out.String(), password) || strings.Contains(out.String(), fmt.Sprintf("%x", password)) {
		t.Fatalf("the password was printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "[redacted]") || !strings.Contains(out.String(), "SASL SCRAM-SHA-512, as app") {
		t.Fatalf("want [redacted] and the config's description:\n%s", out.String())
	}
	if s.Reveal() != password {
		t.Fatal("Reveal lost the secret")
	}
}

func TestOptsErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	notPEM := filepath.Join(dir, "ca.txt")
	for _, f := range []struct{ path, data string }{{empty, ""}, {notPEM, "not a certificate"}} {
		if err := os.WriteFile(f.path, []byte(f.data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  kafkasec.Config
		want string
	}{
		{"missing CA", kafkasec.Config{CAFile: filepath.Join(dir, "nope.pem")}, "the CA file"},
		{"not PEM", kafkasec.Config{CAFile: notPEM}, "holds no PEM certificate"},
		{"cert alone", kafkasec.Config{CertFile: notPEM}, "both CertFile and KeyFile"},
		{"bad pair", kafkasec.Config{CertFile: notPEM, KeyFile: notPEM}, "the client certificate"},
		{"unknown mechanism", kafkasec.Config{SASL: "GSSAPI", User: "u"}, `unknown SASL mechanism "GSSAPI"`},
		{"no mechanism", kafkasec.Config{User: "u", Password: kafkasec.NewSecret(password)}, "no mechanism"},
		{"no user", kafkasec.Config{SASL: "PLAIN", Password: kafkasec.NewSecret(password)}, "needs a user"},
		{"no password", kafkasec.Config{SASL: "SCRAM-SHA-256", User: "u"}, "needs a password"},
		{"empty password file", kafkasec.Config{SASL: "SCRAM-SHA-256", User: "u", PasswordFile: empty}, "is empty"},
		{"no token", kafkasec.Config{SASL: "OAUTHBEARER"}, "needs a token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.Opts()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Opts: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testpki.NewCA(t)
	t.Setenv("OXBOW_KAFKA_TLS_CA", ca.File)
	t.Setenv("OXBOW_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
	t.Setenv("OXBOW_KAFKA_SASL_USER", "from-env")
	t.Setenv("OXBOW_KAFKA_SASL_PASSWORD_FILE", pw)

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	get := kafkasec.Flags(fs)
	if err := fs.Parse([]string{"-kafka-sasl-user", "from-flag", "-kafka-tls"}); err != nil {
		t.Fatal(err)
	}
	c, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLS || c.CAFile != ca.File || c.SASL != "SCRAM-SHA-256" || c.User != "from-flag" || c.PasswordFile != pw {
		t.Fatalf("config %#v: want TLS with the CA from the environment, the user from the flag", c)
	}

	t.Setenv(kafkasec.PasswordEnv, password)
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	get = kafkasec.Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := get(); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("a password in the environment and a file: %v, want an error", err)
	}

	t.Setenv("OXBOW_KAFKA_TLS", "maybe")
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	get = kafkasec.Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := get(); err == nil || !strings.Contains(err.Error(), `"maybe"`) {
		t.Fatalf("OXBOW_KAFKA_TLS=maybe: %v, want an error", err)
	}
}

// secured is a kfake cluster with TLS (ca) and SASL, its superuser "admin"
// with password under SCRAM-SHA-512 and PLAIN.
func secured(t *testing.T, ca *testpki.CA, clientAuth tls.ClientAuthType) *kfake.Cluster {
	t.Helper()
	srv := ca.Issue(t, "broker")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(kafkasec.ScramSHA512, "admin", password), kfake.Superuser(kafkasec.Plain, "admin", password),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS}, ClientCAs: ca.Pool(), ClientAuth: clientAuth, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func check(t *testing.T, cluster *kfake.Cluster, cfg kafkasec.Config) error {
	t.Helper()
	opts, err := cfg.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return kafkasec.Check(context.Background(), cl)
}

// TestCheck is TLS on kfake; a wrong password is in the tests on a real
// broker (integration/secure_test.go): kfake closes the connection where
// Kafka answers SASL_AUTHENTICATION_FAILED.
func TestCheck(t *testing.T) {
	ca := testpki.NewCA(t)
	other := testpki.NewCA(t)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster := secured(t, ca, tls.NoClientCert)
	for _, tc := range []struct {
		name string
		cfg  kafkasec.Config
		want string // "" for let in
	}{
		{"SCRAM-SHA-512", kafkasec.Config{CAFile: ca.File, SASL: "SCRAM-SHA-512", User: "admin", PasswordFile: pwFile}, ""},
		{"PLAIN", kafkasec.Config{CAFile: ca.File, SASL: "plain", User: "admin", Password: kafkasec.NewSecret(password)}, ""},
		{"untrusted certificate", kafkasec.Config{CAFile: other.File, SASL: "SCRAM-SHA-512", User: "admin", PasswordFile: pwFile}, "not trusted here"},
		{"wrong server name", kafkasec.Config{CAFile: ca.File, ServerName: "kafka.example", SASL: "SCRAM-SHA-512", User: "admin", PasswordFile: pwFile}, "not for the name dialled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(t, cluster, tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			var r *kafkasec.RefusedError
			if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want a *RefusedError saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func TestCheckMutualTLS(t *testing.T) {
	ca := testpki.NewCA(t)
	cluster := secured(t, ca, tls.RequireAndVerifyClientCert)
	client := ca.Issue(t, "oxbow-app")
	sasl := kafkasec.Config{SASL: "SCRAM-SHA-512", User: "admin", Password: kafkasec.NewSecret(password)}

	with := sasl
	with.CAFile, with.CertFile, with.KeyFile = ca.File, client.CertFile, client.KeyFile
	if err := check(t, cluster, with); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	without := sasl
	without.CAFile = ca.File
	err := check(t, cluster, without)
	var r *kafkasec.RefusedError
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "client certificate") {
		t.Fatalf("without a client certificate: %v, want a refusal naming the client certificate", err)
	}
}

func TestCheckUnreachableIsNotRefused(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafkasec.Check(context.Background(), cl); err != nil {
		t.Fatalf("Check of a broker that does not answer: %v, want nil (the components ride that out)", err)
	}
}
