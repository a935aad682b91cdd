// Package integration holds the end-to-end tests that run Oxbow against real
// components: a Kafka broker (testcontainers-go when a Docker engine answers,
// else KAFKA_BROKERS, else the broker the repository's script starts) and
// PostgreSQL.
//
// Nothing is here yet: the first such tests come with the engine's runtime
// on Kafka.
package integration
