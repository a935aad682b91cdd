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

	"github.com/testcontainers/testcontainers-go"

	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/oxbowtest"
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

// fallbackEnv opts in to going on to the next provider when the
// testcontainers provider cannot have its image.
const fallbackEnv = "OXBOW_TESTCONTAINERS_FALLBACK"

// The providers are registered in the order kafkaenv tries them after
// KAFKA_BROKERS: a container when a Docker engine answers; then the local
// broker of scripts/services.sh. PostgreSQL, for pgtest when OXBOW_PG_DSN is
// not set: a container when a Docker engine answers.
func init() {
	kafkaenv.Register("testcontainers", testcontainersProvider)
	kafkaenv.Register("local", localProvider)
	pgtest.Register("testcontainers", postgresProvider)
}

// envSet reports whether an opt-out variable is set to something other than
// "", "0" or "false".
func envSet(name string) bool {
	v := strings.TrimSpace(os.Getenv(name))
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}

// ---------------------------------------------------------------------------
// testcontainers

// imageCheck is the process's answer to "may the testcontainers providers
// run?": nil, oxbowtest.ErrNoDocker, or the first image the engine lacks.
var imageCheck = sync.OnceValue(func() error {
	if envSet("OXBOW_NO_TESTCONTAINERS") {
		return oxbowtest.ErrNoDocker
	}
	ctx := context.Background()
	if err := oxbowtest.Docker(ctx); err != nil {
		return err
	}
	for _, img := range []string{
		cmp.Or(strings.TrimSpace(os.Getenv("OXBOW_KAFKA_IMAGE")), oxbowtest.KafkaImage),
		cmp.Or(strings.TrimSpace(os.Getenv("OXBOW_POSTGRES_IMAGE")), oxbowtest.PostgresImage),
	} {
		if err := oxbowtest.CheckImage(ctx, img); err != nil {
			return err
		}
	}
	return nil
})

// containers reports whether the testcontainers providers apply: ok=false,
// quietly, without a Docker engine or with OXBOW_NO_TESTCONTAINERS set; an
// error when the engine lacks an image, unless OXBOW_TESTCONTAINERS_FALLBACK
// opts in to the next provider.
func containers() (ok bool, err error) {
	switch err := imageCheck(); {
	case err == nil:
		return true, nil
	case errors.Is(err, oxbowtest.ErrNoDocker):
		return false, nil
	case envSet(fallbackEnv):
		return false, nil
	default:
		return false, fmt.Errorf("%w\n(or name a broker with KAFKA_BROKERS and a server with OXBOW_PG_DSN; or set %s=1 to go on without containers: scripts/services.sh's broker, else the embedded one)", err, fallbackEnv)
	}
}

// testcontainersProvider starts a Kafka container (oxbowtest.RunKafka: the
// image scripts/images.sh builds, on the host's network) when a Docker
// engine answers. Every Env gets its own container, which its Close
// removes.
func testcontainersProvider(ctx context.Context) (*kafkaenv.Env, bool, error) {
	if ok, err := containers(); !ok {
		return nil, false, err
	}
	k, err := oxbowtest.RunKafka(ctx, oxbowtest.KafkaOptions{StartTimeout: containerStartTimeout})
	if err != nil {
		return nil, false, err
	}
	return kafkaenv.NewEnv(Testcontainers, k.Brokers, func() error {
		return testcontainers.TerminateContainer(k.Container)
	}), true, nil
}

// containerStartTimeout bounds starting a container, from creating it to
// its service answering.
const containerStartTimeout = 3 * time.Minute

var (
	pgMu        sync.Mutex
	pgContainer *oxbowtest.PostgresContainer
)

// postgresProvider starts the process's PostgreSQL container when a Docker
// engine answers; pgtest asks once per process and keeps the answer, and
// TestMain removes the container when the tests are done.
func postgresProvider(ctx context.Context) (pgtest.Server, bool, error) {
	if ok, err := containers(); !ok {
		return pgtest.Server{}, false, err
	}
	p, err := oxbowtest.RunPostgres(ctx, oxbowtest.PostgresOptions{StartTimeout: containerStartTimeout})
	if err != nil {
		return pgtest.Server{}, false, err
	}
	pgMu.Lock()
	pgContainer = p
	pgMu.Unlock()
	return pgtest.Server{DSN: p.DSN, Restart: p.Restart}, true, nil
}

// removePostgres removes the process's PostgreSQL container, if it started
// one.
func removePostgres() error {
	pgMu.Lock()
	defer pgMu.Unlock()
	if pgContainer == nil {
		return nil
	}
	err := testcontainers.TerminateContainer(pgContainer.Container)
	pgContainer = nil
	return err
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
// when OXBOW_NO_LOCAL_KAFKA is set (kafkaenv then falls back to its
// embedded broker). It fails, with the script's output, when the broker cannot start
// (no Java 17+, no Maven for the first download, the port taken, …).
//
// Close leaves the broker running: every test package is a process of its
// own, `go test ./...` runs them in parallel, and they all share this one
// broker (services.sh serializes their starts with a lock and finds it
// running), so no process can tell when the last user is done. Tests use
// topics of their own; `scripts/services.sh stop kafka` stops the broker.
func localProvider(ctx context.Context) (*kafkaenv.Env, bool, error) {
	if envSet("OXBOW_NO_LOCAL_KAFKA") {
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
