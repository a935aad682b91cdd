// Package integration holds the end-to-end tests that run Oxbow against real
// components, and the part of the broker harness they need that the engine
// must not depend on.
//
// # Brokers
//
// Importing the package (its tests do; another package's tests may, with
// `import _ "github.com/oxbow-dev/oxbow/integration"`) registers two
// providers with [kafkaenv.Register]. With them, [kafkaenv.Start],
// [kafkaenv.ForTest] and [kafkaenv.Real] pick, in order:
//
//  1. testcontainers: when a Docker engine answers (where testcontainers-go
//     looks: ~/.testcontainers.properties, DOCKER_HOST, the default and
//     rootless sockets), a new Kafka container per Env from testcontainers-go's
//     Kafka module (KRaft, image [DefaultKafkaImage] or OXBOW_KAFKA_IMAGE),
//     terminated by Env.Close. Without an engine the check says no at once
//     and quietly. OXBOW_NO_TESTCONTAINERS=1 skips it.
//  2. KAFKA_BROKERS, as kafkaenv itself reads it.
//  3. local: the broker of scripts/services.sh (a Kafka 4.4 KRaft broker
//     from Maven Central's jars, on 127.0.0.1:9092), started with
//     `scripts/services.sh start kafka` if it is not running, its address
//     read from `scripts/services.sh env`. Env.Close leaves it running: test
//     packages run as parallel processes that share it, and none can tell
//     when the last is done; `scripts/services.sh stop kafka` stops it. If
//     it cannot start (no Java 17+, no Maven for the first download, the
//     port taken), Start fails with the script's output and the failure is
//     kept for the rest of the process. OXBOW_NO_LOCAL_KAFKA=1 skips it.
//  4. kafkaenv's embedded broker (kfake), on which [kafkaenv.Real] skips
//     the test (fails it when CI=true).
//
// testcontainers-go is imported here only: the engine's packages do not
// depend on it.
//
// # Tests
//
// TestRekeyedCountOnKafka runs a re-keyed count (a repartition topic, a
// store and its changelog) in an engine.App on the real broker and checks
// that the output table holds the count of every word of the input, worked
// out by the test itself. The other tests cover the providers: no
// Docker engine means ok=false without an error, delay or output; the local
// provider steps aside for KAFKA_BROKERS and the opt-out, and reports the
// script's reason when it cannot start the broker.
//
// PostgreSQL (OXBOW_PG_DSN from scripts/services.sh) has no tests here yet.
package integration
