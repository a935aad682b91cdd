package oxbowtest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/oxbow-dev/oxbow/oxbowtest"
)

// testcontainers-go reads its configuration once per process: the reaper is
// off for every test here (each removes its containers), unless the
// environment says otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	goleak.VerifyTestMain(m)
}

// A broker in a container takes records and hands them back, with the test
// settings on and an option's property over them.
func TestKafka(t *testing.T) {
	k := oxbowtest.Kafka(t, oxbowtest.KafkaOptions{Config: map[string]string{"log.cleaner.backoff.ms": "2500"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	brokers, err := adm.ListBrokers(ctx)
	if err != nil || len(brokers) != 1 {
		t.Fatalf("brokers: %v %v; want one", brokers, err)
	}
	configs, err := adm.DescribeBrokerConfigs(ctx, brokers[0].NodeID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, rc := range configs {
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
	}
	for key, want := range map[string]string{
		"auto.create.topics.enable":        "false",
		"group.initial.rebalance.delay.ms": "0",
		"log.retention.ms":                 "-1",
		"log.cleaner.backoff.ms":           "2500",
	} {
		if got[key] != want {
			t.Errorf("broker config %s = %q, want %q", key, got[key], want)
		}
	}

	// No topic is created on the fly.
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr()
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("a record to a topic not created: %v; want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	var produced []string
	for i := range 10 {
		v := fmt.Sprint("v", i)
		produced = append(produced, v)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < len(produced) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consumed %d of %d: %v", len(seen), len(produced), err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	for _, v := range produced {
		if !seen[v] {
			t.Errorf("%s not consumed", v)
		}
	}
}

// A PostgreSQL server in a container has logical replication, and keeps its
// data and slots through a restart.
func TestPostgres(t *testing.T) {
	p := oxbowtest.Postgres(t, oxbowtest.PostgresOptions{Settings: map[string]string{"max_connections": "42"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	query := func(sql string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, p.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var v string
		if strings.HasPrefix(sql, "CREATE") {
			_, err = conn.Exec(ctx, sql)
		} else {
			err = conn.QueryRow(ctx, sql).Scan(&v)
		}
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return v
	}
	if v := query("SHOW wal_level"); v != "logical" {
		t.Fatalf("wal_level = %s, want logical", v)
	}
	if v := query("SHOW max_connections"); v != "42" {
		t.Fatalf("max_connections = %s, want 42 (from the options)", v)
	}
	query("SELECT lsn::text FROM pg_create_logical_replication_slot('s', 'pgoutput')")
	query("CREATE TABLE shoes AS SELECT 1 AS id, 'red' AS name")

	// A replication connection, as the CDC source opens.
	repl, err := pgx.Connect(ctx, p.DSN+"&replication=database")
	if err != nil {
		t.Fatalf("a replication connection: %v", err)
	}
	_ = repl.Close(ctx)

	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v := query("SELECT name FROM shoes WHERE id = 1"); v != "red" {
		t.Fatalf("after the restart: %s, want red", v)
	}
	if v := query("SELECT slot_name::text FROM pg_replication_slots"); v != "s" {
		t.Fatalf("after the restart, the slot: %s, want s", v)
	}
}

// An image the engine does not have is an error that names the command that
// builds it; nothing is pulled.
func TestMissingImage(t *testing.T) {
	if err := oxbowtest.Docker(context.Background()); err != nil {
		skipOrFail(t, err)
	}
	_, err := oxbowtest.RunKafka(context.Background(), oxbowtest.KafkaOptions{Image: "oxbow/no-such-image:0"})
	var ie *oxbowtest.ImageError
	if !errors.As(err, &ie) || ie.Image != "oxbow/no-such-image:0" || !strings.Contains(err.Error(), oxbowtest.BuildCommand) {
		t.Fatalf("err = %v; want an ImageError naming the image and %q", err, oxbowtest.BuildCommand)
	}
	// Nothing was pulled: the image is still not on the engine.
	if err := oxbowtest.CheckImage(context.Background(), "oxbow/no-such-image:0"); !errors.As(err, &ie) {
		t.Fatalf("after the attempt: %v; want the image still missing", err)
	}
}

// Without a Docker engine (DOCKER_HOST names no socket and none is at the
// default places; in a fresh process, since testcontainers-go caches its
// discovery per process), RunPostgres returns ErrNoDocker.
func TestNoDocker(t *testing.T) {
	if os.Getenv("OXBOWTEST_CHILD") == "1" {
		p, err := oxbowtest.RunPostgres(context.Background(), oxbowtest.PostgresOptions{})
		if err == nil {
			_ = p.Terminate(context.Background())
		}
		fmt.Printf("no-docker=%v\n", errors.Is(err, oxbowtest.ErrNoDocker))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoDocker$")
	cmd.Env = append(os.Environ(), "OXBOWTEST_CHILD=1", "DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "none.sock"))
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil && strings.Contains(string(out), "no-docker=false"):
		// testcontainers-go goes on from DOCKER_HOST to the default sockets.
		t.Skip("a Docker engine answers here at a default socket")
	case err != nil || !strings.Contains(string(out), "no-docker=true"):
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// With testcontainers-go's reaper on and its image not on the engine (it
// would have to be pulled), the error says how to turn the reaper off.
func TestReaperImage(t *testing.T) {
	if os.Getenv("OXBOWTEST_CHILD") == "reaper" {
		k, err := oxbowtest.RunKafka(context.Background(), oxbowtest.KafkaOptions{})
		if err == nil {
			_ = k.Terminate(context.Background())
		}
		fmt.Printf("err=%v\n", err)
		return
	}
	if err := oxbowtest.Docker(context.Background()); err != nil {
		skipOrFail(t, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaperImage$")
	cmd.Env = append(os.Environ(), "OXBOWTEST_CHILD=reaper", "TESTCONTAINERS_RYUK_DISABLED=false")
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("child: %v\n%s", err, out)
	case strings.Contains(string(out), "err=<nil>"):
		t.Skip("the reaper's image is on this engine")
	case !strings.Contains(string(out), "set TESTCONTAINERS_RYUK_DISABLED=true"):
		t.Fatalf("want an error that says to set TESTCONTAINERS_RYUK_DISABLED=true; child:\n%s", out)
	}
}

func TestPropertyEnv(t *testing.T) {
	for prop, want := range map[string]string{
		"log.retention.ms":                  "KAFKA_LOG_RETENTION_MS",
		"listener.security.protocol.map":    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
		"listener.name.internal.sasl_oauth": "KAFKA_LISTENER_NAME_INTERNAL_SASL__OAUTH",
		"ssl-keystore.type":                 "KAFKA_SSL___KEYSTORE_TYPE",
	} {
		if got := oxbowtest.PropertyEnv(prop); got != want {
			t.Errorf("PropertyEnv(%q) = %s, want %s", prop, got, want)
		}
	}
}

func skipOrFail(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	t.Skip(err)
}

func ExamplePropertyEnv() {
	fmt.Println(oxbowtest.PropertyEnv("auto.create.topics.enable"))
	// Output: KAFKA_AUTO_CREATE_TOPICS_ENABLE
}

// A broker outside a test (a benchmark's, say); in a test, Kafka(t, …)
// also removes it at the end.
func ExampleRunKafka() {
	ctx := context.Background()
	k, err := oxbowtest.RunKafka(ctx, oxbowtest.KafkaOptions{})
	if err != nil {
		log.Fatal(err) // an ImageError says: scripts/images.sh build
	}
	defer k.Terminate(ctx)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
}
