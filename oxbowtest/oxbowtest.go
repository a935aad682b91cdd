// Package oxbowtest starts the real services an Oxbow service's tests need —
// an Apache Kafka broker and a PostgreSQL server with logical replication —
// in containers, with testcontainers-go, one per test (or per [RunKafka] and
// [RunPostgres] call), removed when the test ends.
//
//	func TestStore(t *testing.T) {
//		kafka := oxbowtest.Kafka(t, oxbowtest.KafkaOptions{})
//		pg := oxbowtest.Postgres(t, oxbowtest.PostgresOptions{})
//		app, err := engine.NewApp(topology, engine.Config{Brokers: kafka.Brokers, …})
//		…
//	}
//
// # Images
//
// The containers run on the images Oxbow's repository builds from Debian's
// packages and Maven Central's jars, with no registry:
//
//	scripts/images.sh engine start   # a Docker engine, if none runs
//	scripts/images.sh build          # oxbow/kafka:4.4.0 and oxbow/postgres:15, once
//
// oxbowtest never pulls an image: one that the engine does not have is an
// [*ImageError] that names the command above. OXBOW_KAFKA_IMAGE and
// OXBOW_POSTGRES_IMAGE (or the options) name other images that follow the
// same contract (scripts/images/*-entrypoint.sh): Kafka configured by
// OXBOW_KAFKA_PORT, OXBOW_KAFKA_CONTROLLER_PORT and KAFKA_* properties in
// apache/kafka's convention; PostgreSQL by PGPORT and the official image's
// POSTGRES_* variables.
//
// # Networking
//
// Every container runs on the host's network, listening on 127.0.0.1 at free
// ports picked when it starts: the engine needs no bridge, no port mapping
// and no address outside loopback, and the addresses a test gets are the
// ones the broker advertises.
//
// # Cleanup
//
// Each container is removed by the test's cleanup (or [KafkaContainer.Terminate]).
// testcontainers-go's reaper (Ryuk) would need an image pulled: set
// TESTCONTAINERS_RYUK_DISABLED=true, which oxbowtest asks for when the
// reaper's image is not on the engine. Containers a killed test process
// leaves behind carry the label dev.oxbow.test=true:
//
//	docker rm -f $(docker ps -aq --filter label=dev.oxbow.test=true)
//
// # Without Docker
//
// [Kafka] and [Postgres] skip the test when no Docker engine answers, or fail
// it when CI=true; [RunKafka] and [RunPostgres] return [ErrNoDocker].
package oxbowtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// The images oxbowtest runs unless told otherwise; scripts/images.sh builds
// them.
const (
	KafkaImage    = "oxbow/kafka:4.4.0"
	PostgresImage = "oxbow/postgres:15"
)

// BuildCommand builds the images, run from the root of Oxbow's repository.
const BuildCommand = "scripts/images.sh build"

// DefaultStartTimeout bounds a container's start, from creating it to its
// service answering.
const DefaultStartTimeout = 3 * time.Minute

// dockerProbeTimeout bounds the check for a Docker engine. Without one (no
// DOCKER_HOST, no socket) the check returns at once; the timeout is for an
// endpoint that is configured but does not answer.
const dockerProbeTimeout = 5 * time.Second

// testLabel marks every container oxbowtest starts.
const testLabel = "dev.oxbow.test"

// ErrNoDocker is returned when no Docker engine answers where
// testcontainers-go looks for one: tc.host and docker.host in
// ~/.testcontainers.properties, DOCKER_HOST, the default socket, the
// rootless sockets.
var ErrNoDocker = errors.New("oxbowtest: no Docker engine answers (testcontainers-go looks at DOCKER_HOST, ~/.testcontainers.properties and the default sockets; scripts/images.sh engine start runs one)")

// ImageError says that an image is not on the Docker engine. oxbowtest does
// not pull images: build them.
type ImageError struct {
	Image string
}

func (e *ImageError) Error() string {
	return fmt.Sprintf("oxbowtest: image %s is not on the Docker engine, and oxbowtest does not pull images: build it with `%s` in Oxbow's repository", e.Image, BuildCommand)
}

// Docker reports whether a Docker engine answers, or why not: [ErrNoDocker]
// when there is none.
func Docker(ctx context.Context) error {
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	return cli.Close()
}

// CheckImage reports whether the engine has the image: nil, an
// [*ImageError], or [ErrNoDocker].
func CheckImage(ctx context.Context, image string) error {
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	return checkImage(ctx, cli, image)
}

func dockerClient(ctx context.Context) (cli *testcontainers.DockerClient, err error) {
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	defer func() {
		// testcontainers-go panics on some Docker failures (a socket it
		// cannot resolve, say).
		if r := recover(); r != nil {
			cli, err = nil, fmt.Errorf("%w: %v", ErrNoDocker, r)
		}
	}()
	cli, err = testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	// Discovery asked the engine for its info once per process and caches
	// the answer: ping it now, so that an engine gone since does not count.
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	return cli, nil
}

func checkImage(ctx context.Context, cli *testcontainers.DockerClient, image string) error {
	_, err := cli.ImageInspect(ctx, image)
	switch {
	case errdefs.IsNotFound(err):
		return &ImageError{Image: image}
	case err != nil:
		return fmt.Errorf("oxbowtest: looking for image %s: %w", image, err)
	}
	return nil
}

// checkReaper fails when testcontainers-go would start its reaper and the
// reaper's image would have to be pulled.
func checkReaper(ctx context.Context, cli *testcontainers.DockerClient) error {
	if testcontainers.ReadConfig().Config.RyukDisabled {
		return nil
	}
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("reference", "testcontainers/ryuk")})
	if err == nil && len(imgs.Items) > 0 {
		return nil
	}
	return errors.New("oxbowtest: testcontainers-go's reaper (Ryuk) is enabled and its image is not on the Docker engine: set TESTCONTAINERS_RYUK_DISABLED=true (oxbowtest removes its containers itself)")
}

// prepare checks the engine, the reaper and the image before a start.
func prepare(ctx context.Context, image string) error {
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := checkReaper(ctx, cli); err != nil {
		return err
	}
	return checkImage(ctx, cli, image)
}

// run starts a container of image on the host's network and waits until
// ready reports nil. It retries, with new ports, when the service could not
// bind its port (another process took it between freePorts and the start).
func run(ctx context.Context, image string, ports int, env func(ports []int) map[string]string, cmd []string, ready func(ctx context.Context, c *testcontainers.DockerContainer, ports []int) error) (*testcontainers.DockerContainer, []int, error) {
	if err := prepare(ctx, image); err != nil {
		return nil, nil, err
	}
	var lastErr error
	for range 3 {
		ps, err := freePorts(ports)
		if err != nil {
			return nil, nil, err
		}
		opts := []testcontainers.ContainerCustomizer{
			testcontainers.WithEnv(env(ps)),
			testcontainers.WithLabels(map[string]string{testLabel: "true"}),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.NetworkMode = "host"
			}),
		}
		if len(cmd) > 0 {
			opts = append(opts, testcontainers.WithCmd(cmd...))
		}
		c, err := runOnHost(ctx, image, opts)
		if err == nil {
			err = ready(ctx, c, ps)
		}
		if err == nil {
			return c, ps, nil
		}
		logs := tail(c, 30)
		_ = testcontainers.TerminateContainer(c)
		lastErr = fmt.Errorf("oxbowtest: start %s: %w", image, err)
		if logs != "" {
			lastErr = fmt.Errorf("%w\nlast lines of its log:\n%s", lastErr, logs)
		}
		if !strings.Contains(logs, "Address already in use") || ctx.Err() != nil {
			break
		}
	}
	return nil, nil, lastErr
}

// runOnHost creates and starts a container on the host's network and no
// other. testcontainers.Run would also attach it to the engine's default
// bridge network, and create one (reaper_default) where the engine runs
// without (dockerd --bridge=none): a provider whose default network is the
// host's attaches it to nothing else.
func runOnHost(ctx context.Context, image string, opts []testcontainers.ContainerCustomizer) (*testcontainers.DockerContainer, error) {
	req := testcontainers.GenericContainerRequest{ContainerRequest: testcontainers.ContainerRequest{Image: image}, Started: true}
	for _, opt := range opts {
		if err := opt.Customize(&req); err != nil {
			return nil, err
		}
	}
	prov, err := testcontainers.NewDockerProvider(testcontainers.WithDefaultBridgeNetwork("host"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	defer prov.Close()
	c, err := prov.RunContainer(ctx, req.ContainerRequest)
	dc, _ := c.(*testcontainers.DockerContainer)
	return dc, err
}

// freePorts returns n TCP ports free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("oxbowtest: a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of a container's log, or "".
func tail(c *testcontainers.DockerContainer, n int) string {
	if c == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// orEnv returns v, else the environment variable's value, else def.
func orEnv(v, name, def string) string {
	if v != "" {
		return v
	}
	if e := strings.TrimSpace(os.Getenv(name)); e != "" {
		return e
	}
	return def
}

// forTest is what Kafka and Postgres do with an error: skip without Docker
// (fail when CI=true), fail otherwise.
func forTest(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrNoDocker) && os.Getenv("CI") != "true" {
		tb.Skip(err)
	}
	tb.Fatal(err)
}
