package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

// The kinds of broker this package's providers hand out. Both are real
// brokers: [kafkaenv.Env.Real] reports true for them.
const (
	// Testcontainers is a Kafka container started for one Env and removed
	// by its Close.
	Testcontainers kafkaenv.Kind = "testcontainers"
	// Local is the broker scripts/services.sh runs on this machine. It is
	// shared: Close leaves it running.
	Local kafkaenv.Kind = "local"
)

// DefaultKafkaImage is the image of the testcontainers provider's broker
// (OXBOW_KAFKA_IMAGE overrides it): the one testcontainers-go's Kafka module
// is written and tested for. The module's start script needs a
// confluentinc/confluent-local image, 7.4.0 or later (KRaft).
const DefaultKafkaImage = "confluentinc/confluent-local:7.5.0"

const (
	// dockerProbeTimeout bounds the check for a Docker engine. Without one
	// (no DOCKER_HOST, no socket) the check returns at once; the timeout is
	// for an endpoint that is configured but does not answer.
	dockerProbeTimeout = 5 * time.Second
	// containerStartTimeout bounds pulling the image and starting the broker.
	containerStartTimeout = 5 * time.Minute
)

// The providers are registered in the order kafkaenv tries them: a
// container when a Docker engine answers; then (kafkaenv's own step)
// KAFKA_BROKERS; then the local broker of scripts/services.sh. The local
// provider steps aside when KAFKA_BROKERS is set, so that kafkaenv uses it.
func init() {
	kafkaenv.Register("testcontainers", testcontainersProvider)
	kafkaenv.Register("local", localProvider)
}

// envSet reports whether an opt-out variable is set to something other than
// "", "0" or "false".
func envSet(name string) bool {
	v := strings.TrimSpace(os.Getenv(name))
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// ---------------------------------------------------------------------------
// testcontainers

// testcontainersProvider starts a Kafka container when a Docker engine
// answers, and reports ok=false, quietly and at once, when none does or
// OXBOW_NO_TESTCONTAINERS is set. Every Env gets its own container, which
// its Close terminates (testcontainers' reaper removes it too if the process
// dies first).
func testcontainersProvider(ctx context.Context) (env *kafkaenv.Env, ok bool, err error) {
	if envSet("OXBOW_NO_TESTCONTAINERS") || !dockerEngine(ctx) {
		return nil, false, nil
	}
	img := cmp.Or(strings.TrimSpace(os.Getenv("OXBOW_KAFKA_IMAGE")), DefaultKafkaImage)
	ctx, cancel := context.WithTimeout(ctx, containerStartTimeout)
	defer cancel()

	var c *tckafka.KafkaContainer
	defer func() {
		// testcontainers panics on some Docker failures (a socket it cannot
		// resolve, say); report them as errors.
		if r := recover(); r != nil {
			_ = testcontainers.TerminateContainer(c)
			env, ok, err = nil, false, fmt.Errorf("start %s: panic: %v", img, r)
		}
	}()
	c, err = tckafka.Run(ctx, img, testcontainers.WithEnv(map[string]string{
		// As scripts/services.sh configures its broker: tests create their
		// topics, groups form at once, and one replica is enough.
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":            "false",
		"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":         "1000",
		"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
		"KAFKA_DEFAULT_REPLICATION_FACTOR":           "1",
		"KAFKA_MIN_INSYNC_REPLICAS":                  "1",
		"KAFKA_LOG_CLEANER_BACKOFF_MS":               "1000",
	}))
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, false, fmt.Errorf("start %s: %w", img, err)
	}
	brokers, err := c.Brokers(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, false, fmt.Errorf("%s: broker address: %w", img, err)
	}
	return kafkaenv.NewEnv(Testcontainers, brokers, func() error { return testcontainers.TerminateContainer(c) }), true, nil
}

// dockerEngine reports whether a Docker engine answers where
// testcontainers-go looks for one: tc.host and docker.host in
// ~/.testcontainers.properties, DOCKER_HOST, the default socket, the
// rootless sockets. With none of them present it returns false at once and
// says nothing; testcontainers-go caches that discovery for the process.
// An endpoint that is configured but silent costs at most
// dockerProbeTimeout.
func dockerEngine(ctx context.Context) (ok bool) {
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()
	// Discovery already asked the engine for its info (and caches it); ping
	// it now, so that an engine that has gone away since does not count.
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err == nil
}

// ---------------------------------------------------------------------------
// local: scripts/services.sh

var (
	localMu sync.Mutex
	// localErr is the first failure to start the local broker; later calls
	// return it rather than run the script (and maybe Maven) again.
	localErr error
)

// localProvider starts the repository's local broker with
// `scripts/services.sh start kafka` (a no-op when it already runs) and
// returns the address `scripts/services.sh env` prints. It reports ok=false
// when KAFKA_BROKERS is set (kafkaenv then uses that broker) or
// OXBOW_NO_LOCAL_KAFKA is set (kafkaenv then falls back to its embedded
// broker). It fails, with the script's output, when the broker cannot start
// (no Java 17+, no Maven for the first download, the port taken, …).
//
// Close leaves the broker running: every test package is a process of its
// own, `go test ./...` runs them in parallel, and they all share this one
// broker (services.sh serializes their starts with a lock and finds it
// running), so no process can tell when the last user is done. Tests use
// topics of their own; `scripts/services.sh stop kafka` stops the broker.
func localProvider(ctx context.Context) (*kafkaenv.Env, bool, error) {
	if os.Getenv("KAFKA_BROKERS") != "" || envSet("OXBOW_NO_LOCAL_KAFKA") {
		return nil, false, nil
	}
	localMu.Lock()
	defer localMu.Unlock()
	if localErr != nil {
		return nil, false, localErr
	}
	brokers, err := startLocal(ctx)
	if err != nil {
		err = fmt.Errorf("%w\n(set KAFKA_BROKERS to use another broker, or OXBOW_NO_LOCAL_KAFKA=1 to fall back to the embedded one)", err)
		if ctx.Err() == nil {
			localErr = err
		}
		return nil, false, err
	}
	return kafkaenv.NewEnv(Local, brokers, nil), true, nil
}

func startLocal(ctx context.Context) ([]string, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "services.sh")
	if out, err := runScript(ctx, script, "start", "kafka"); err != nil {
		return nil, fmt.Errorf("scripts/services.sh start kafka: %w\n%s", err, out)
	}
	out, err := runScript(ctx, script, "env")
	if err != nil {
		return nil, fmt.Errorf("scripts/services.sh env: %w\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export KAFKA_BROKERS=")
		if !ok {
			continue
		}
		var brokers []string
		for _, b := range strings.Split(strings.Trim(v, `'"`), ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		if len(brokers) > 0 {
			return brokers, nil
		}
	}
	return nil, fmt.Errorf("scripts/services.sh env names no Kafka broker after a successful start:\n%s", out)
}

// runScript runs services.sh and returns its stdout and stderr together.
func runScript(ctx context.Context, script string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Dir = filepath.Dir(filepath.Dir(script))
	// If ctx ends, the script is killed; its children (Maven, a JVM) may
	// still hold the output pipe, so stop waiting for them after a while.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return bytes.TrimSpace(out), err
}

// repoRoot finds the Oxbow repository: the directory with Oxbow's go.mod and
// scripts/services.sh, above this source file or else above the working
// directory (a test runs in its package's directory).
func repoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if isOxbowRoot(dir) {
				return dir, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return "", errors.New("cannot find the Oxbow repository (go.mod of github.com/oxbow-dev/oxbow beside scripts/services.sh) above " + strings.Join(starts, " or "))
}

func isOxbowRoot(dir string) bool {
	if st, err := os.Stat(filepath.Join(dir, "scripts", "services.sh")); err != nil || st.IsDir() {
		return false
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(mod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == "github.com/oxbow-dev/oxbow"
		}
	}
	return false
}
