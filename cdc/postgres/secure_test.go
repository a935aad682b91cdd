package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/cdc/postgres"
	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/testpki"
)

// securedDatabase is a database on the secured server with a table
// shoes owned by oxbow_secure: the DSN as oxbow_secure, the password's file.
func securedDatabase(t *testing.T) (dsn, passwordFile string) {
	t.Helper()
	db := pgtest.SecureDatabase(t)
	pgtest.Exec(t, db.AdminDSN, "CREATE TABLE shoes (id int PRIMARY KEY, name text)", "ALTER TABLE shoes OWNER TO oxbow_secure",
		"INSERT INTO shoes VALUES (1, 'derby'), (2, 'loafer')")
	return db.DSN, db.PasswordFile
}

// TestSourceSecured captures a table from PostgreSQL over TLS with a
// scram-sha-256 password into Kafka over SASL_SSL as a principal allowed
// only its topics' prefix.
func TestSourceSecured(t *testing.T) {
	s := kafkaenv.Secure(t)
	dsn, pw := securedDatabase(t)
	cfg := config(t, dsn, kafkaenv.ForTest(t), "public.shoes")
	cfg.PasswordFile = pw
	cfg.Brokers, cfg.KafkaSecurity = []string{s.SASL}, s.App
	grantPrefix(t, s, cfg.TopicPrefix+".")
	r := start(t, cfg)
	pgtest.Exec(t, dsn+"&password="+url.QueryEscape(readFile(t, pw)), "INSERT INTO shoes VALUES (3, 'oxford')")
	evs := decodeAll(t, changes(t, []string{s.Plaintext}, r.src.Topic("public.shoes"), 3))
	if got := string(evs[2].ev.After["name"]); got != `"oxford"` {
		t.Fatalf("the third event's name is %v, want oxford", got)
	}
}

// TestSourceSecuredRefusals: what the database refuses ends Run with an
// error saying so, and no password is in it or in the log.
func TestSourceSecuredRefusals(t *testing.T) {
	s := kafkaenv.Secure(t)
	dsn, pw := securedDatabase(t)
	other := testpki.NewCA(t)
	const wrong = "Wr0ng-Pa55word"
	withQuery := func(k, v string) string {
		u, _ := url.Parse(dsn)
		q := u.Query()
		q.Set(k, v)
		u.RawQuery = q.Encode()
		return u.String()
	}
	withPassword := func(p string) string {
		u, _ := url.Parse(dsn)
		u.User = url.UserPassword("oxbow_secure", p)
		return u.String()
	}
	for _, tc := range []struct {
		name, dsn, passwordFile, want string
	}{
		{"wrong password", withPassword(wrong), "", "password authentication failed"},
		{"no TLS", withQuery("sslmode", "disable"), pw, "no encryption"},
		{"untrusted certificate", withQuery("sslrootcert", other.File), pw, "did not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer // slog's handler writes one line at a time
			cfg := config(t, tc.dsn, kafkaenv.ForTest(t), "public.shoes")
			cfg.PasswordFile = tc.passwordFile
			cfg.Brokers, cfg.KafkaSecurity = []string{s.SASL}, s.App
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			grantPrefix(t, s, cfg.TopicPrefix+".")
			src, err := postgres.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = src.Run(ctx)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Run: %v (context: %v), want it to stop with the refusal", err, ctx.Err())
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want it to say %q", err, tc.want)
			}
			for _, secret := range []string{wrong, readFile(t, pw)} {
				if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
					t.Errorf("a password is in the error or the log:\n%v\n%s", err, logs.String())
				}
			}
		})
	}
}

// grantPrefix allows oxbow-app what a source writing under the topic
// prefix needs: its topics, the state topic among them.
func grantPrefix(t *testing.T, s *kafkaenv.Secured, prefix string) {
	s.Grant(t, "User:oxbow-app", []engine.ACL{{Resource: "topic", Name: prefix, Prefixed: true,
		Operations: []string{"CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"}}})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
