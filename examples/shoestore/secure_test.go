package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

// The classic scenario on the secured side of services.sh's servers: Kafka
// over SASL_SSL (SCRAM-SHA-512) as oxbow-app allowed only the ACLs
// storeACLs lists (the README's "Running it securely"), the catalog
// captured from PostgreSQL over TLS with a scram-sha-256 password; the
// API takes requests only with the store's token. No password is in what
// the API shows.
func TestShoeStoreSecured(t *testing.T) {
	s := kafkaenv.Secure(t)
	db := pgtest.SecureDatabase(t)
	cfg := config{Name: fmt.Sprintf("secured%d", time.Now().UnixNano()%1_000_000_000), Brokers: []string{s.SASL}, Kafka: s.App,
		PGDSN: db.DSN, PGPasswordFile: db.PasswordFile, Token: "shoestore-token-5c1f0e"}
	acls, err := storeACLs(cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	s.Grant(t, "User:oxbow-app", acls)
	shoeStoreScenario(t, cfg, db.AdminDSN, func(st *store) {
		anonymous := &store{t: t, url: st.url}
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/views/till/keys/till", ""}, {"GET", "/views", ""}, {"GET", "/status", ""},
			{"POST", "/aggregates/inventory/red/commands", `{"type":"SellPair","data":{}}`},
		} {
			resp, err := anonymous.do(c.method, c.path, c.body)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s without the token: %s, want 401", c.method, c.path, resp.Status)
			}
		}
		anonymous.await("/healthz", "")
		secrets := []string{readSecret(t, s.App.PasswordFile), readSecret(t, db.PasswordFile)}
		for _, path := range []string{"/status", "/topology", "/metrics", "/views"} {
			body := st.await(path, "")
			for _, secret := range secrets {
				if strings.Contains(body, secret) {
					t.Errorf("%s shows a password", path)
				}
			}
		}
	})
}

func readSecret(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
