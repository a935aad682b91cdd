package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/oxbowtest"
)

// A re-keyed count (a repartition topic, a store and its changelog) run by
// an engine.App on a real broker ends with the count of every word of the
// input, worked out here.
func TestRekeyedCountOnKafka(t *testing.T) {
	env := kafkaenv.Real(t)
	t.Logf("broker: %s at %s", env.Kind, strings.Join(env.Brokers, ","))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	prefix := fmt.Sprintf("oxbow-it-count-%x", rand.Uint32())
	in, out := prefix+"-lines", prefix+"-counts"
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resps, err := adm.CreateTopics(ctx, 2, -1, nil, in, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, in, out)
	})

	b := engine.NewBuilder()
	lines := engine.NewStream(b, in, serde.String, serde.String)
	words := engine.FlatMapValues(lines, func(_ string, l string) []string { return strings.Fields(l) })
	engine.GroupBy(words, func(_ string, w string) string { return w }, engine.Named("by-word")).
		Count(engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}

	// The input, and the count of each word in it.
	rng := rand.New(rand.NewPCG(42, 7))
	vocab := strings.Fields("ant bee cat dog eel fox gnu hen ibis jay")
	var recs []*kgo.Record
	want := map[string]int64{}
	for i := range 200 {
		var ws []string
		for range 1 + rng.IntN(3) {
			w := vocab[rng.IntN(len(vocab))]
			ws = append(ws, w)
			want[w]++
		}
		recs = append(recs, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "user-%d", rng.IntN(20)),
			Value: []byte(strings.Join(ws, " ")), Timestamp: enginetest.At(int64(i))})
	}

	// The producer waits for the new topics' metadata itself.
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{
		AppID:          prefix,
		Brokers:        env.Brokers,
		StateDir:       t.TempDir(),
		InstanceID:     "it-0",
		CommitInterval: 100 * time.Millisecond,
		SessionTimeout: 6 * time.Second,
	}
	if os.Getenv("OXBOW_TEST_LOG") == "" {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	app, err := engine.NewApp(top, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Polling the output stops when Run returns, so that a failed app fails
	// the test at once.
	pollCtx, stopPolling := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx); stopPolling() }()
	defer app.Close()

	// Read the output as a changelog (committed records only, ready for
	// when the app runs exactly-once) until it holds the counts (or the app
	// fails, or time runs out).
	rd, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[string]int64{}
	for !maps.Equal(got, want) {
		fs := rd.PollFetches(pollCtx)
		if pollCtx.Err() != nil {
			select {
			case err := <-done:
				t.Fatalf("the app stopped before its output was complete: %v; table so far: %v", err, got)
			default:
			}
			t.Fatalf("output not complete: got %v, want %v", got, want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			n, err := serde.Int64.Decode(r.Value)
			if err != nil {
				t.Fatalf("%s offset %d: %v", out, r.Offset, err)
			}
			got[string(r.Key)] = n
		})
	}

	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}

// Without a Docker engine the testcontainers provider steps aside at once,
// without an error.
func TestTestcontainersWithoutDocker(t *testing.T) {
	start := time.Now()
	if oxbowtest.Docker(context.Background()) == nil {
		t.Skip("a Docker engine answers here")
	}
	env, ok, err := testcontainersProvider(context.Background())
	elapsed := time.Since(start)
	if env != nil {
		_ = env.Close()
	}
	if env != nil || ok || err != nil {
		t.Fatalf("testcontainers provider without Docker: env %v, ok %v, err %v; want nil, false, nil", env, ok, err)
	}
	// A configured endpoint that does not answer may take the probe's
	// timeout; no endpoint at all takes next to nothing.
	limit := 6 * time.Second // oxbowtest's probe timeout and a second
	if os.Getenv("DOCKER_HOST") == "" {
		limit = time.Second
	}
	if elapsed > limit {
		t.Fatalf("finding no Docker engine took %v, want under %v", elapsed, limit)
	}
	t.Logf("no Docker engine: decided in %v", elapsed)
}

// With DOCKER_HOST naming a socket that is not there, the probe, in a fresh
// process (testcontainers caches its discovery per process), says no without
// a panic or a word on stderr.
func TestTestcontainersProbeIsQuiet(t *testing.T) {
	if os.Getenv("OXBOW_DOCKER_PROBE_CHILD") == "1" {
		env, ok, err := testcontainersProvider(context.Background())
		if env != nil {
			_ = env.Close()
		}
		fmt.Printf("probe: env=%v ok=%v err=%v\n", env != nil, ok, err)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTestcontainersProbeIsQuiet$", "-test.v=true")
	cmd.Env = append(os.Environ(), "OXBOW_DOCKER_PROBE_CHILD=1",
		"DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	switch {
	case strings.Contains(stdout.String(), "probe: env=true ok=true"):
		t.Skip("a Docker engine answers here (at a default socket)")
	case !strings.Contains(stdout.String(), "probe: env=false ok=false err=<nil>"):
		t.Fatalf("child did not report ok=false without an error:\n%s", &stdout)
	case stderr.Len() > 0:
		t.Fatalf("the probe wrote to stderr:\n%s", &stderr)
	}
}

// The local provider stays out when opted out.
func TestLocalProviderStepsAside(t *testing.T) {
	t.Setenv("OXBOW_NO_LOCAL_KAFKA", "1")
	env, ok, err := localProvider(context.Background())
	if env != nil || ok || err != nil {
		t.Fatalf("env %v, ok %v, err %v; want nil, false, nil", env, ok, err)
	}
}

// A broker named by KAFKA_BROKERS wins over every provider, a Docker engine
// included: kafkaenv does not ask them.
func TestKafkaBrokersWin(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", " 127.0.0.1:1 ,127.0.0.1:2")
	env, err := kafkaenv.Start(context.Background(), kafkaenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.Kind != kafkaenv.External || strings.Join(env.Brokers, ",") != "127.0.0.1:1,127.0.0.1:2" {
		t.Fatalf("got %s %v; want external [127.0.0.1:1 127.0.0.1:2]", env.Kind, env.Brokers)
	}
}

// When the broker cannot start (here: no Java), the error carries the
// script's own explanation.
func TestLocalStartFailsClearly(t *testing.T) {
	t.Setenv("OXBOW_CACHE_DIR", t.TempDir()) // nothing running, nothing cached
	t.Setenv("OXBOW_JAVA", filepath.Join(t.TempDir(), "no-java"))
	t.Setenv("JAVA_HOME", "")
	_, err := startLocal(context.Background())
	if err == nil || !strings.Contains(err.Error(), "start kafka") || !strings.Contains(err.Error(), "no java found") {
		t.Fatalf("err = %v; want the script's 'no java found'", err)
	}
}

// With a Docker engine up, no broker or database named, and the image not
// on the engine, the run stops before its first test with one message that
// says how to build the image; OXBOW_TESTCONTAINERS_FALLBACK=1 goes on to the
// next provider instead.
func TestMissingImageStopsTheRun(t *testing.T) {
	if os.Getenv("OXBOW_MISSING_IMAGE_CHILD") == "1" {
		env, err := kafkaenv.Start(context.Background(), kafkaenv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer env.Close()
		fmt.Printf("broker kind: %s\n", env.Kind)
		return
	}
	if err := oxbowtest.Docker(context.Background()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAFKA_BROKERS=") && !strings.HasPrefix(kv, "OXBOW_PG_DSN=") {
			base = append(base, kv)
		}
	}
	base = append(base, "OXBOW_MISSING_IMAGE_CHILD=1", "OXBOW_KAFKA_IMAGE=oxbow/no-such-kafka:0", "OXBOW_NO_LOCAL_KAFKA=1")
	child := func(extra ...string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingImageStopsTheRun$", "-test.v=true")
		cmd.Env = append(append([]string(nil), base...), extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := child()
	if err == nil {
		t.Fatalf("the run went on without the image:\n%s", out)
	}
	if n := strings.Count(out, oxbowtest.BuildCommand); n != 1 || !strings.Contains(out, "oxbow/no-such-kafka:0") {
		t.Errorf("want one message naming the image and %q (got it %d times):\n%s", oxbowtest.BuildCommand, n, out)
	}
	if strings.Contains(out, "=== RUN") {
		t.Errorf("a test ran:\n%s", out)
	}

	out, err = child(fallbackEnv + "=1")
	if err != nil || !strings.Contains(out, "broker kind: embedded") {
		t.Fatalf("with %s=1, want the run to go on to the next provider (here the embedded broker): %v\n%s", fallbackEnv, err, out)
	}
}
