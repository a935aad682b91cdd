package oxbowtest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaOptions tune [RunKafka] and [Kafka]. The zero value is a broker
// configured for tests.
type KafkaOptions struct {
	// Image is the broker's image. Default: OXBOW_KAFKA_IMAGE, else
	// [KafkaImage].
	Image string
	// Config sets broker properties ("auto.create.topics.enable": "true"),
	// over [TestBrokerConfig].
	Config map[string]string
	// StartTimeout bounds the start. Default: [DefaultStartTimeout].
	StartTimeout time.Duration
}

// TestBrokerConfig returns the broker properties a container starts with
// unless [KafkaOptions.Config] says otherwise: those of the broker
// scripts/services.sh runs for Oxbow's own tests.
func TestBrokerConfig() map[string]string {
	return map[string]string{
		// Tests create their topics and want groups to form at once.
		"auto.create.topics.enable":        "false",
		"group.initial.rebalance.delay.ms": "0",
		"group.min.session.timeout.ms":     "1000",
		// No deletion by age: tests write records with fixed, old event
		// times, which the default 7-day retention would delete.
		"log.retention.ms": "-1",
		// The cleaner looks for work every second.
		"log.cleaner.backoff.ms": "1000",
		// A small machine.
		"num.network.threads": "2",
		"num.io.threads":      "4",
	}
}

// KafkaContainer is a running broker.
type KafkaContainer struct {
	// Brokers are the bootstrap addresses, host:port on 127.0.0.1.
	Brokers []string
	// Container is the testcontainers-go container, for what oxbowtest does
	// not cover (logs, stopping, pausing).
	Container *testcontainers.DockerContainer
}

// Terminate stops and removes the container.
func (k *KafkaContainer) Terminate(ctx context.Context) error {
	return k.Container.Terminate(ctx)
}

// Kafka starts a broker for a test and removes it when the test ends. Without
// a Docker engine it skips the test (fails it when CI=true); any other
// failure, a missing image among them, fails the test.
func Kafka(tb testing.TB, opts KafkaOptions) *KafkaContainer {
	tb.Helper()
	k, err := RunKafka(context.Background(), opts)
	if err != nil {
		forTest(tb, err)
	}
	tb.Cleanup(func() {
		if err := testcontainers.TerminateContainer(k.Container); err != nil {
			tb.Errorf("oxbowtest: removing the Kafka container: %v", err)
		}
	})
	return k
}

// RunKafka starts a single-node KRaft broker in a container on the host's
// network and returns once it answers. The caller terminates it.
func RunKafka(ctx context.Context, opts KafkaOptions) (*KafkaContainer, error) {
	image := orEnv(opts.Image, "OXBOW_KAFKA_IMAGE", KafkaImage)
	ctx, cancel := context.WithTimeout(ctx, cmpDuration(opts.StartTimeout, DefaultStartTimeout))
	defer cancel()
	conf := TestBrokerConfig()
	maps.Copy(conf, opts.Config)
	env := func(ports []int) map[string]string {
		env := map[string]string{
			"OXBOW_KAFKA_PORT":            strconv.Itoa(ports[0]),
			"OXBOW_KAFKA_CONTROLLER_PORT": strconv.Itoa(ports[1]),
		}
		for k, v := range conf {
			env[PropertyEnv(k)] = v
		}
		return env
	}
	c, ports, err := run(ctx, image, 2, env, nil, kafkaReady)
	if err != nil {
		return nil, err
	}
	return &KafkaContainer{Brokers: []string{fmt.Sprintf("127.0.0.1:%d", ports[0])}, Container: c}, nil
}

// kafkaReady waits for the broker's startup line, then for the broker to
// list itself in its metadata.
func kafkaReady(ctx context.Context, c *testcontainers.DockerContainer, ports []int) error {
	if err := wait.ForLog("Kafka Server started").WithStartupTimeout(DefaultStartTimeout).WaitUntilReady(ctx, c); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", ports[0])))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		brokers, err := adm.ListBrokers(ctx)
		if err == nil && len(brokers) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the broker logged its start but does not answer: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PropertyEnv is the environment variable that sets a broker property in
// the image, in apache/kafka's convention: "log.retention.ms" is
// KAFKA_LOG_RETENTION_MS; an underscore in the name is a double one, a dash
// a triple one.
func PropertyEnv(property string) string {
	r := strings.NewReplacer("_", "__", "-", "___", ".", "_")
	return "KAFKA_" + strings.ToUpper(r.Replace(property))
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
