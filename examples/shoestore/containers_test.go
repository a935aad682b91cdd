package main

import (
	"testing"

	"github.com/oxbow-dev/oxbow/oxbowtest"
)

// The store as a user's service test would run it: Kafka and PostgreSQL in
// containers (oxbowtest: the images scripts/images.sh builds, on the host's
// network), started for this test and removed when it ends. Without a
// Docker engine it skips (fails under CI=true); without the images it fails
// and says how to build them.
func TestShoeStoreOnContainers(t *testing.T) {
	kafka := oxbowtest.Kafka(t, oxbowtest.KafkaOptions{})
	pg := oxbowtest.Postgres(t, oxbowtest.PostgresOptions{})
	shoeStoreScenario(t, config{Brokers: kafka.Brokers, PGDSN: pg.DSN}, pg.DSN)
}
