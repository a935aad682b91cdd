package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/hanging/hangingtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/versions"
)

// No goroutine a test started outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type result struct {
	code           int
	stdout, stderr string
}

func oxbow(stdin string, args ...string) result {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// Usage errors exit 2 and say why; --help exits 0.
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "usage: oxbow COMMAND"},
		{[]string{"help"}, exitOK, "promote"},
		{[]string{"nope"}, exitUsage, `no command "nope"`},
		{[]string{"promote", "--help"}, exitOK, "usage: oxbow promote --app APP --version V"},
		{[]string{"promote", "--app", "a"}, exitUsage, "promote needs --app and --version"},
		{[]string{"lag", "--app", "a", "--version", "v", "--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"versions", "--app", "a", "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"reset", "--app", "a", "--version", "v", "--to-earliest", "--to-datetime", "2026-01-01T00:00:00Z"}, exitUsage, "not both"},
		{[]string{"reset", "--app", "a", "--version", "v", "--to-datetime", "yesterday"}, exitUsage, "want RFC 3339"},
		{[]string{"versions", "--app", "a", "--brokers", ""}, exitFailed, "no brokers"},
		{[]string{"describe"}, exitUsage, "describe needs --url"},
		{[]string{"delete", "--yes"}, exitUsage, "delete needs --app"},
		{[]string{"transactions"}, exitUsage, "transactions needs find-hanging or repair"},
		{[]string{"transactions", "repair", "--topic", "t", "extra"}, exitUsage, "unexpected arguments"},
	} {
		r := oxbow("", c.args...)
		if r.code != c.code || !strings.Contains(r.stdout+r.stderr, c.want) {
			t.Errorf("oxbow %v: exit %d\n%s%s\nwant exit %d and %q", c.args, r.code, r.stdout, r.stderr, c.code, c.want)
		}
	}
}

// appOnKafka names an application after prefix, makes its input topic
// of two partitions and a control topic of its own, and connects to it;
// the control closes when the test ends.
func appOnKafka(t *testing.T, env *kafkaenv.Env, prefix string) (app, topic, control string, ctl *versions.Control) {
	t.Helper()
	app = fmt.Sprintf("%s%d", prefix, time.Now().UnixNano())
	topic, control = app+"-in", app+"-control"
	env.CreateTopics(t, 2, topic)
	ctl, err := versions.New(env.Brokers, versions.Options{Topic: control})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	return app, topic, control, ctl
}

// The commands against a real broker, on versions registered by hand.
func TestCommands(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx := context.Background()
	app, topic, control, ctl := appOnKafka(t, env, "cli")
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"v1", "v2"} {
		if err := ctl.Register(ctx, app, v, []string{topic}); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--brokers", strings.Join(env.Brokers, ","), "--control-topic", control, "--app", app}
	cmd := func(stdin string, name string, args ...string) result {
		return oxbow(stdin, append(append([]string{name}, common...), args...)...)
	}

	r := cmd("", "versions", "--json")
	var vs struct {
		Active   string `json:"active"`
		Versions []struct {
			Version string `json:"version"`
			Lag     int64  `json:"lag"`
		} `json:"versions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &vs); err != nil || r.code != 0 || len(vs.Versions) != 2 || vs.Versions[0].Lag != 5 || vs.Active != "" {
		t.Fatalf("versions --json: %d %s %s (%v)", r.code, r.stdout, r.stderr, err)
	}
	if r := cmd("", "versions"); r.code != 0 || !strings.Contains(r.stdout, "no version is active") {
		t.Errorf("versions: %+v", r)
	}
	if r := cmd("", "lag"); r.code != exitFailed || !strings.Contains(r.stderr, "no version of "+app+" is active yet; name one with --version (registered: v1, v2)") {
		t.Errorf("lag with no version named, none active: %+v", r)
	}
	if r := cmd("", "promote", "--version", "v1"); r.code != exitRefused || !strings.Contains(r.stderr, "has not caught up: 5 records behind") {
		t.Errorf("promote of a version behind: %+v", r)
	}
	if r := cmd("", "promote", "--version", "v3"); r.code != exitFailed || !strings.Contains(r.stderr, `no version "v3" (it has v1, v2)`) {
		t.Errorf("promote of an unknown version: %+v", r)
	}
	// v1 catches up: its group commits the ends.
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	commit := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		commit.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	})
	if _, err := adm.CommitOffsets(ctx, versions.Group(app, "v1"), commit); err != nil {
		t.Fatal(err)
	}
	if r := cmd("", "lag", "--version", "v1", "--watch", "--interval", "10ms"); r.code != 0 || !strings.Contains(r.stdout, "100.0%  lag 0") {
		t.Errorf("lag --watch of a version caught up: %+v", r)
	}
	if r := cmd("", "lag", "--version", "v2"); r.code != 0 || !strings.Contains(r.stdout, "0.0%  lag 5") || !strings.Contains(r.stdout, topic) {
		t.Errorf("lag: %+v", r)
	}
	if r := cmd("", "promote", "--version", "v1"); r.code != 0 || !strings.Contains(r.stdout, "v1 is active") {
		t.Errorf("promote: %+v", r)
	}
	if r := cmd("", "lag"); r.code != 0 || !strings.Contains(r.stdout, app+" v1 [") {
		t.Errorf("lag with no version named: %+v, want the active v1's", r)
	}
	if r := cmd("", "promote", "--version", "v2", "--force", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"forced": true`) {
		t.Errorf("promote --force: %+v", r)
	}
	if r := cmd("", "rollback"); r.code != 0 || !strings.Contains(r.stdout, "v1 is active") {
		t.Errorf("rollback: %+v", r)
	}
	if r := cmd("", "retire", "--version", "v1"); r.code != exitFailed || !strings.Contains(r.stderr, "active version") {
		t.Errorf("retiring the active version: %+v", r)
	}
	if r := cmd("no\n", "retire", "--version", "v2"); r.code != exitRefused || !strings.Contains(r.stderr, "not confirmed") {
		t.Errorf("retire not confirmed: %+v", r)
	}
	if r := cmd("", "retire", "--version", "v2", "--dry-run"); r.code != 0 || !strings.Contains(r.stdout, "would be deleted") {
		t.Errorf("retire --dry-run: %+v", r)
	}
	if r := cmd("v2\n", "retire", "--version", "v2"); r.code != 0 || !strings.Contains(r.stdout, ": deleted") {
		t.Errorf("retire: %+v", r)
	}
	if a, err := ctl.App(ctx, app); err != nil || len(a.Versions) != 1 || a.Active != "v1" {
		t.Errorf("after retiring v2: %+v %v", a, err)
	}
	if r := cmd("", "reset", "--version", "v1", "--dry-run"); r.code != 0 || !strings.Contains(r.stdout, "would be reset") || !strings.Contains(r.stdout, topic+"[0] -> 0") {
		t.Errorf("reset --dry-run: %+v", r)
	}
	if r := cmd("", "reset", "--version", "v1", "--yes"); r.code != 0 {
		t.Errorf("reset: %+v", r)
	}
	if l, err := ctl.Lag(ctx, app, "v1"); err != nil || l.Total != 5 {
		t.Errorf("lag after the reset: %+v %v", l, err)
	}
	// The application goes, its active version too.
	if r := cmd("", "delete", "--dry-run"); r.code != 0 || !strings.Contains(r.stdout, app+" v1 (group "+versions.Group(app, "v1")+"): would be deleted") {
		t.Errorf("delete --dry-run: %+v", r)
	}
	if r := cmd("v1\n", "delete"); r.code != exitRefused || !strings.Contains(r.stderr, "not confirmed") {
		t.Errorf("delete confirmed with the version's name, not the application's: %+v", r)
	}
	if r := cmd(app+"\n", "delete"); r.code != 0 || !strings.Contains(r.stdout, app+" is deleted") {
		t.Errorf("delete: %+v", r)
	}
	if r := cmd("", "versions"); r.code != exitFailed || !strings.Contains(r.stderr, "no application") {
		t.Errorf("versions of the deleted application: %+v", r)
	}
}

// An application the control topic does not have exits 1 naming the ones
// it has; reading creates nothing, not even the control topic.
func TestUnknownApplication(t *testing.T) {
	env := kafkaenv.ForTest(t)
	ctx := context.Background()
	app, topic, control, ctl := appOnKafka(t, env, "known")
	args := func(cmd, app string) []string {
		return []string{cmd, "--brokers", strings.Join(env.Brokers, ","), "--control-topic", control, "--app", app}
	}
	exists := func() bool {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		td, err := kadm.NewClient(cl).ListTopics(ctx, control)
		if err != nil {
			t.Fatal(err)
		}
		return td[control].Err == nil
	}
	for _, cmd := range []string{"versions", "lag"} {
		if r := oxbow("", args(cmd, app)...); r.code != exitFailed || !strings.Contains(r.stderr, fmt.Sprintf("no application %q on %s", app, control)) || !strings.Contains(r.stderr, "(the applications there: none)") {
			t.Errorf("%s, no control topic: %+v", cmd, r)
		}
	}
	if exists() {
		t.Fatalf("reading created the control topic %s", control)
	}
	if err := ctl.Register(ctx, app, "v1", []string{topic}); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"versions", "lag", "promote", "rollback"} {
		a := args(cmd, app+"x")
		if cmd == "promote" {
			a = append(a, "--version", "v1")
		}
		if r := oxbow("", a...); r.code != exitFailed || !strings.Contains(r.stderr, fmt.Sprintf("no application %q", app+"x")) || !strings.Contains(r.stderr, "(the applications there: "+app+")") {
			t.Errorf("%s of a misspelt application: %+v", cmd, r)
		}
	}
	if r := oxbow("", args("versions", app)...); r.code != exitOK || !strings.Contains(r.stdout, "v1") {
		t.Errorf("versions of the application: %+v", r)
	}
}

// describe prints an instance's topology.
func TestDescribe(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "orders", serde.String, serde.Int64).GroupByKey().Count(engine.Materialized("counts")).ToStream().To("counts-out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/topology" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, `{"title":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Oxbow-Version", "v2")
		if r.Header.Get("Accept") == "application/json" { // as httpapi answers
			_ = json.NewEncoder(w).Encode(top.Graph())
			return
		}
		fmt.Fprint(w, top.Describe())
	}))
	defer srv.Close()
	if r := oxbow("", "describe", "--url", srv.URL, "--token", "s3cret"); r.code != 0 || r.stdout != top.Describe() {
		t.Errorf("describe: %+v", r)
	}
	// --json: the graph as data, not the text inside a string.
	r := oxbow("", "describe", "--url", srv.URL, "--token", "s3cret", "--json")
	var out struct {
		Version  string
		Topology engine.TopologyGraph
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || out.Version != "v2" {
		t.Fatalf("describe --json: %+v (%v)", r, err)
	}
	if want := top.Graph(); !reflect.DeepEqual(out.Topology, want) || len(want.Stores) != 1 || want.Stores[0].Name != "counts" {
		t.Errorf("describe --json: the topology %+v, want %+v", out.Topology, want)
	}
	if r := oxbow("", "describe", "--url", srv.URL); r.code != exitFailed || !strings.Contains(r.stderr, "401") {
		t.Errorf("describe without the token: %+v", r)
	}
}

// On the secured broker: the super user over SCRAM lists an application's
// versions; a wrong password exits 1 saying so, the password nowhere in
// what the command prints.
func TestSecuredKafka(t *testing.T) {
	s := kafkaenv.Secure(t)
	app, control := fmt.Sprintf("secured-%d", time.Now().UnixNano()), fmt.Sprintf("secured-%d-control", time.Now().UnixNano())
	ctl, err := versions.New([]string{s.Plaintext}, versions.Options{Topic: control})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if err := ctl.Register(context.Background(), app, "v1", []string{app + "-in"}); err != nil {
		t.Fatal(err)
	}
	args := []string{"versions", "--app", app, "--control-topic", control, "--brokers", s.SASL,
		"--kafka-tls-ca", s.Admin.CAFile, "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "admin"}
	r := oxbow("", append(args, "--kafka-sasl-password-file", s.Admin.PasswordFile)...)
	if r.code != exitOK || !strings.Contains(r.stdout, "v1") {
		t.Fatalf("as admin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	const wrong = "Wr0ng-Pa55word"
	t.Setenv("OXBOW_KAFKA_SASL_PASSWORD", wrong)
	r = oxbow("", args...)
	if r.code != exitFailed || !strings.Contains(r.stderr, "authentication failed") || strings.Contains(r.stdout+r.stderr, wrong) {
		t.Fatalf("with a wrong password: exit %d\n%s%s\nwant exit 1 naming the failed authentication, without the password", r.code, r.stdout, r.stderr)
	}
}

// The rate and the time left of lag --watch, between two measurements:
// 500 records consumed in half a second is 1,000 a second; the lag shrank
// by 500 in it, so the 400 left take 0.4 s. A lag that grew has no ETA.
func TestProgress(t *testing.T) {
	for _, c := range []struct {
		prev, now versions.Lag
		dt        time.Duration
		rate      float64
		eta       time.Duration
	}{
		{versions.Lag{Consumed: 100, Total: 900}, versions.Lag{Consumed: 600, Total: 400}, 500 * time.Millisecond, 1000, 400 * time.Millisecond},
		{versions.Lag{Consumed: 100, Total: 900}, versions.Lag{Consumed: 600, Total: 1000}, time.Second, 500, -1},
		{versions.Lag{Consumed: 100, Total: 900}, versions.Lag{Consumed: 100, Total: 900}, 0, 0, -1},
	} {
		if rate, eta := progress(c.prev, c.now, c.dt); rate != c.rate || eta != c.eta {
			t.Errorf("progress(%+v, %+v, %v) = %v/s, ETA %v; want %v/s, ETA %v", c.prev, c.now, c.dt, rate, eta, c.rate, c.eta)
		}
	}
}

// lag --watch says a version with lag has made no progress once it has
// consumed nothing for 30 s, and no longer once it consumes again or has
// no lag left.
func TestStillness(t *testing.T) {
	t0 := time.Now()
	behind, on, done := versions.Lag{Consumed: 10, Total: 5}, versions.Lag{Consumed: 12, Total: 3}, versions.Lag{Consumed: 12}
	var s stillness
	for _, step := range []struct {
		prev, now versions.Lag
		prevAt    time.Duration // from t0; -1: the first measurement
		at        time.Duration
		want      time.Duration
	}{
		{behind, behind, -1, 0, 0},
		{behind, behind, 0, 10 * time.Second, 0},
		{behind, behind, 10 * time.Second, 29 * time.Second, 0},
		{behind, behind, 29 * time.Second, 30 * time.Second, 30 * time.Second},
		{behind, behind, 30 * time.Second, 45 * time.Second, 45 * time.Second},
		{behind, on, 45 * time.Second, 50 * time.Second, 0}, // consumed again
		{on, on, 50 * time.Second, 70 * time.Second, 0},
		{on, on, 70 * time.Second, 80 * time.Second, 30 * time.Second},
		{on, done, 80 * time.Second, 200 * time.Second, 0}, // no lag left
	} {
		prevAt := time.Time{}
		if step.prevAt >= 0 {
			prevAt = t0.Add(step.prevAt)
		}
		if got := s.note(step.prev, step.now, prevAt, t0.Add(step.at)); got != step.want {
			t.Errorf("at %v after %v: no progress for %v, want %v", step.at, step.prevAt, got, step.want)
		}
	}
}

// An open transaction that holds a version's offset on one input
// partition, and records on another: lag and versions name both, and
// once it ends, neither.
func TestLagSaysWhatWaits(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app, topic, control, ctl := appOnKafka(t, env, "cliwait")
	if err := ctl.Register(ctx, app, "v1", []string{topic}); err != nil {
		t.Fatal(err)
	}
	raw, err := hangingtest.Client(env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	group := versions.Group(app, "v1")
	p := hangingtest.Init(ctx, t, raw, app+"-txn", 60_000)
	ended := false
	defer func() {
		if !ended {
			p.End(context.Background(), t, false)
		}
	}()
	p.Add(ctx, t, topic, 0)
	p.Produce(ctx, t, topic, 0, "x")
	p.AddOffsets(ctx, t, group)
	p.CommitOffset(ctx, t, group, topic, 1, 0)

	common := []string{"--brokers", strings.Join(env.Brokers, ","), "--control-topic", control, "--app", app}
	cmd := func(name string, args ...string) result {
		return oxbow("", append(append([]string{name}, common...), args...)...)
	}
	waits := fmt.Sprintf("waiting on Kafka: offsets held by an open transaction on %s[1]; records past the last stable offset on %s[0] (1)", topic, topic)
	if r := cmd("lag", "--version", "v1"); r.code != exitOK || !strings.Contains(r.stdout, waits) || strings.Count(r.stdout, "held by an open transaction") != 2 {
		t.Errorf("lag with a transaction open: %+v", r)
	}
	var vs struct {
		Versions []struct {
			Waits string `json:"waits"`
		} `json:"versions"`
	}
	if r := cmd("versions", "--json"); r.code != exitOK || json.Unmarshal([]byte(r.stdout), &vs) != nil || len(vs.Versions) != 1 || !strings.HasPrefix(waits, "waiting on Kafka: "+vs.Versions[0].Waits) || vs.Versions[0].Waits == "" {
		t.Errorf("versions --json with a transaction open: %+v", r)
	}
	if r := cmd("versions"); r.code != exitOK || !strings.Contains(r.stdout, "v1 "+waits) {
		t.Errorf("versions with a transaction open: %+v", r)
	}

	p.End(ctx, t, true) // its markers follow
	ended = true
	var r result
	await.Until(t, 30*time.Second, "lag to see the transaction's end", func() bool {
		r = cmd("lag", "--version", "v1", "--json")
		return r.code == exitOK && !strings.Contains(r.stdout, "waits") && !strings.Contains(r.stdout, "held")
	})
	if !strings.Contains(r.stdout, `"committed": 0`) {
		t.Errorf("lag after the transaction's commit: %+v", r)
	}
}

// transactions find-hanging and repair, on a transaction whose
// coordinator committed it and one whose producer no coordinator knows.
func TestTransactions(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close) // after VerificationOff's cleanup
	adm := kadm.NewClient(cl)
	hangingtest.VerificationOff(ctx, t, adm)
	topic := fmt.Sprintf("clitxn%d", time.Now().UnixNano())
	env.CreateTopics(t, 3, topic)
	defer func() { _, _ = adm.DeleteTopics(context.Background(), topic) }()
	raw, err := hangingtest.Client(env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	hangingtest.LeaveOpen(ctx, t, raw, topic+"-commit", hangingtest.Partition{Topic: topic}, hangingtest.Partition{Topic: topic, Partition: 1}, "c", true)
	ghost := hangingtest.Ghost(ctx, t, raw, topic+"-ghost", hangingtest.Partition{Topic: topic, Partition: 2}, "g")
	defer ghost.AbortOn(context.Background(), t, topic, 2)

	common := []string{"--brokers", strings.Join(env.Brokers, ","), "--topic", topic}
	tx := func(stdin string, args ...string) result {
		return oxbow(stdin, append(append([]string{"transactions"}, args...), common...)...)
	}
	r := tx("", "find-hanging")
	if r.code != exitOK || !strings.Contains(r.stdout, topic+"[1] open since offset 0") || !strings.Contains(r.stdout, "commit: its coordinator decided to commit") ||
		!strings.Contains(r.stdout, topic+"[2]") || !strings.Contains(r.stdout, "refuse: no coordinator lists the producer") || !strings.Contains(r.stdout, "remedy: decide whether") {
		t.Fatalf("find-hanging: %+v", r)
	}
	if r := tx("", "repair", "--dry-run"); r.code != exitOK || strings.Count(r.stdout, "remedy:") != 2 {
		t.Fatalf("repair --dry-run: %+v", r)
	}
	if r := tx("no\n", "repair"); r.code != exitRefused || !strings.Contains(r.stderr, "not confirmed; nothing written") {
		t.Fatalf("repair not confirmed: %+v", r)
	}
	r = tx("", "repair", "--yes", "--json")
	var out struct {
		Hanging []struct {
			Partition int32  `json:"partition"`
			Decision  string `json:"decision"`
			Repaired  bool   `json:"repaired"`
		} `json:"hanging"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitRefused || len(out.Hanging) != 2 ||
		out.Hanging[0].Decision != "commit" || !out.Hanging[0].Repaired || out.Hanging[1].Decision != "refuse" || out.Hanging[1].Repaired ||
		!strings.Contains(r.stderr, "1 hanging transactions refused") {
		t.Fatalf("repair --yes --json: %+v (%v)", r, err)
	}
	if r := tx("", "find-hanging", "--json"); r.code != exitOK || strings.Count(r.stdout, `"partition"`) != 1 || !strings.Contains(r.stdout, `"partition": 2`) {
		t.Fatalf("find-hanging after the repair: %+v", r)
	}
}
