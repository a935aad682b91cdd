// Package integration holds the end-to-end tests that run Oxbow against real
// components, and the part of the broker harness they need that the engine
// must not depend on.
//
// # Brokers and databases
//
// Importing the package (its tests do; another package's tests may, with
// `import _ "github.com/oxbow-dev/oxbow/integration"`) registers providers
// with [kafkaenv.Register] and [pgtest.Register]. With them,
// [kafkaenv.Start], [kafkaenv.ForTest] and [kafkaenv.Real] pick, in order:
//
//  1. KAFKA_BROKERS, as kafkaenv itself reads it: a broker named wins.
//  2. testcontainers: when a Docker engine answers (where testcontainers-go
//     looks: ~/.testcontainers.properties, DOCKER_HOST, the default and
//     rootless sockets), a new Kafka container per Env from
//     [oxbowtest.RunKafka] (image oxbow/kafka:4.4.0, which
//     `scripts/images.sh build` makes from Debian's packages and Maven
//     Central's jars; host networking on loopback), removed by Env.Close.
//     Without an engine the check says no at once and quietly;
//     OXBOW_NO_TESTCONTAINERS=1 skips it. An engine without the images is
//     an error that names the command that builds them; TestMain reports
//     it once and runs no test, unless OXBOW_TESTCONTAINERS_FALLBACK=1 opts
//     in to the next provider.
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
// PostgreSQL, for [pgtest]: OXBOW_PG_DSN, else (as in 2.) one container per
// test process from [oxbowtest.RunPostgres] (oxbow/postgres:15,
// wal_level=logical), which pgtest.Restart restarts and TestMain removes.
// TESTCONTAINERS_RYUK_DISABLED defaults to true here: the reaper's image
// would have to be pulled, and the tests remove their containers.
//
// testcontainers-go is imported here and by oxbowtest only: the engine's
// packages do not depend on it.
//
// # Tests
//
// The campaigns run instances as child processes of the test binary (the
// TestCrashChild and TestCDCSourceChild runs, which do nothing in a normal
// test run) against the real broker, PostgreSQL and the fault clusters of
// scripts/services.sh, and kill, stop, restart and hang them:
//
//   - crash_test.go: SIGKILLs of an exactly-once or at-least-once re-keyed
//     count, aimed under load, in an open transaction (the coordinator
//     holds it Ongoing after the kill) and in a restore (the state
//     directory lost); each numbered input record is on the output once.
//   - churn_test.go: three instances joining, leaving and crashing, some
//     in the middle of a rebalance.
//   - availability_test.go: restart-to-serving times, rolling restarts that
//     move no task, scaling out and in with cooperative rebalances.
//   - brokers_test.go: brokers killed, restarted and hung under load.
//   - failover_test.go, rack_test.go: a task fails over to its standby,
//     in the other rack.
//   - aggregate_test.go: the shoe store's inventory aggregate through kills.
//   - cdc_test.go, cdc_incremental_test.go: the PostgreSQL source killed and
//     the database restarted while rows change, an incremental snapshot
//     killed in its middle.
//
// Every campaign checks that its children are alive before each planned
// fault and exit 0 when stopped, that each planned fault happened, and what
// every key ends with; at least one of each kind runs at the default
// configuration. A seed (logged) picks the moments: -oxbow.crash.seed
// replays a campaign; OXBOW_CRASH_LOGDIR keeps every child's log.
//
// TestRekeyedCountOnKafka checks a re-keyed count on the real broker
// against counts the test works out itself; the remaining tests cover the
// providers above.
package integration
