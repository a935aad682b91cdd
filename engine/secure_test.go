package engine_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/internal/testpki"
)

// TestSecuredApp runs the word count exactly once on the secured broker as
// a principal with only the ACLs engine.ACLs lists, over SASL (SCRAM) and
// over mTLS, with a dead-letter topic named outside the group's prefix:
// the counts are exact.
func TestSecuredApp(t *testing.T) {
	s := kafkaenv.Secure(t)
	for _, tc := range []struct {
		name string
		addr string
		sec  kafkasec.Config
	}{{"sasl", s.SASL, s.App}, {"mtls", s.MTLS, s.AppMTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKT(t)
			in, out := k.topic("in"), k.topic("out")
			k.create(2, in, out)
			top := wordCount(in, out)
			// A dead-letter topic outside the group's prefix, which the
			// instance creates at its start: its ACL is its own.
			cfg := engine.Config{AppID: k.prefix, Guarantee: engine.ExactlyOnce, Brokers: []string{tc.addr}, KafkaSecurity: tc.sec,
				OnDeserializationError: engine.DeadLetter, DeadLetterTopic: "dlq." + k.prefix}
			s.Grant(t, "User:oxbow-app", engine.ACLs(top, cfg))
			recs := genLines(3, 200)
			want := wordCounts(recs)
			k.produce(in, recs...)
			k.start(top, cfg)
			k.table(out, 2*time.Minute, func(got map[string]int64) bool { return mapsEqual(got, want) })
		})
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSecuredRefusals: what the secured broker refuses stops the instance
// at start with an error naming it, rather than a retry loop that says a
// broker is away.
func TestSecuredRefusals(t *testing.T) {
	s := kafkaenv.Secure(t)
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := testpki.NewCA(t)
	without := func(resource string) func([]engine.ACL) []engine.ACL {
		return func(acls []engine.ACL) []engine.ACL {
			return slices.DeleteFunc(slices.Clone(acls), func(a engine.ACL) bool { return a.Resource == resource && (resource != "topic" || a.Prefixed) })
		}
	}
	for _, tc := range []struct {
		name string
		addr func() string
		sec  func(kafkasec.Config) kafkasec.Config
		acls func([]engine.ACL) []engine.ACL
		want []string
	}{
		{name: "wrong password", sec: func(c kafkasec.Config) kafkasec.Config { c.PasswordFile = wrong; return c },
			want: []string{"authentication failed"}},
		{name: "untrusted certificate", sec: func(c kafkasec.Config) kafkasec.Config { c.CAFile = other.File; return c },
			want: []string{"not trusted here"}},
		{name: "no client certificate", addr: func() string { return s.MTLS },
			sec:  func(c kafkasec.Config) kafkasec.Config { return kafkasec.Config{CAFile: c.CAFile} },
			want: []string{"client certificate"}},
		{name: "no ACLs", acls: func([]engine.ACL) []engine.ACL { return nil },
			want: []string{"TOPIC_AUTHORIZATION_FAILED", "-in"}},
		{name: "no group ACL", acls: without("group"), want: []string{"GROUP_AUTHORIZATION_FAILED"}},
		{name: "no transactional id ACL", acls: without("transactional-id"), want: []string{"TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}},
		{name: "no internal topics ACL", acls: without("topic"), want: []string{"TOPIC_AUTHORIZATION_FAILED", "-repartition"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKT(t)
			in, out := k.topic("in"), k.topic("out")
			k.create(2, in, out)
			top := wordCount(in, out)
			addr, sec := s.SASL, s.App
			if tc.addr != nil {
				addr = tc.addr()
			}
			if tc.sec != nil {
				sec = tc.sec(sec)
			}
			var logs bytes.Buffer
			cfg := engine.Config{AppID: k.prefix, Guarantee: engine.ExactlyOnce, Brokers: []string{addr}, KafkaSecurity: sec,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			acls := engine.ACLs(top, cfg)
			if tc.acls != nil {
				acls = tc.acls(acls)
			}
			if len(acls) > 0 {
				s.Grant(t, "User:oxbow-app", acls)
			}
			k.produce(in, genLines(5, 10)...)
			a, err := engine.NewApp(top, cfg)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- a.Run(context.Background()) }()
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				_ = a.Close()
				t.Fatalf("still running after 2 minutes (state %v, trouble %v): a refusal must stop it", a.State(), a.Trouble())
			}
			if err == nil {
				t.Fatal("Run returned nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run: %v\nwant it to say %q", err, w)
				}
			}
			// Run has returned: nothing writes to logs any more.
			pw, _ := os.ReadFile(filepath.Join(s.Dir, "oxbow-app.password"))
			if strings.Contains(err.Error(), string(pw)) || strings.Contains(logs.String(), string(pw)) {
				t.Errorf("the error or the log shows the password: %v", err)
			}
			var r *kafkasec.RefusedError
			if !errors.As(err, &r) {
				t.Errorf("Run: %v, want a *kafkasec.RefusedError", err)
			}
		})
	}
}

// unsignedJWT is a token Kafka's default OAUTHBEARER validator (unsecured,
// as services.sh's broker runs it) accepts: alg none, a subject, an
// expiry.
func unsignedJWT(sub string, exp time.Time) string {
	enc := base64.RawURLEncoding
	claims, _ := json.Marshal(map[string]any{"sub": sub, "iat": time.Now().Add(-time.Minute).Unix(), "exp": exp.Unix()})
	return enc.EncodeToString([]byte(`{"alg":"none"}`)) + "." + enc.EncodeToString(claims) + "."
}

// OAUTHBEARER through the token hook: a token the broker takes lets the
// client in as its subject; an expired one is refused as a failed
// authentication.
func TestSecuredOAuthBearer(t *testing.T) {
	s := kafkaenv.Secure(t)
	for _, tc := range []struct {
		name string
		exp  time.Time
		want string
	}{{"valid", time.Now().Add(time.Hour), ""}, {"expired", time.Now().Add(-time.Hour), "authentication failed"}} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			sec := kafkasec.Config{CAFile: s.Admin.CAFile, SASL: kafkasec.OAuthBearer, Token: func(context.Context) (kafkasec.Secret, error) {
				calls.Add(1)
				return kafkasec.NewSecret(unsignedJWT("admin", tc.exp)), nil
			}}
			opts, err := sec.ClientOpts([]string{s.SASL})
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			err = kafkasec.Check(context.Background(), cl)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check: %v, want a refusal saying %q", err, tc.want)
			case calls.Load() == 0:
				t.Fatal("the token hook was not called")
			}
			if tc.want == "" {
				// Let in as admin: it may list every topic.
				if _, err := kadm.NewClient(cl).ListTopics(context.Background()); err != nil {
					t.Fatalf("ListTopics: %v", err)
				}
			}
		})
	}
}

// A configuration printed whole — in a log line, an error, a panic's
// message made with fmt — shows no password.
func TestConfigShowsNoPassword(t *testing.T) {
	const password = "Pa55-in-a-config"
	cfg := engine.Config{AppID: "shop", KafkaSecurity: kafkasec.Config{SASL: kafkasec.ScramSHA512, User: "shop", Password: kafkasec.NewSecret(password)}}
	var shown strings.Builder
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		fmt.Fprintf(&shown, verb+"\n", cfg)
		fmt.Fprintf(&shown, verb+"\n", &cfg)
	}
	func() {
		defer func() { fmt.Fprintf(&shown, "%v\n", recover()) }()
		panic(fmt.Sprintf("bad config: %+v", cfg))
	}()
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "cfg", cfg)
	shown.WriteString(logs.String())
	if strings.Contains(shown.String(), password) {
		t.Fatalf("the password is shown:\n%s", shown.String())
	}
	if !strings.Contains(shown.String(), "[redacted]") && !strings.Contains(shown.String(), "SASL SCRAM-SHA-512, as shop") {
		t.Fatalf("the security settings are not shown at all:\n%s", shown.String())
	}
}
