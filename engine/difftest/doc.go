// Package difftest checks Oxbow's DSL against Kafka Streams itself: every
// topology of a catalog runs, on inputs generated from many seeds, through
// Oxbow's in-memory driver (enginetest) and through Kafka Streams'
// TopologyTestDriver (the Java module in kstreams/), and the records each
// input step makes them write must be the same, byte for byte, with the same
// timestamps, in the same order on each topic.
//
// The package has tests only: go test ./engine/difftest (Java 17 and Maven
// build the Kafka Streams side; without them the tests skip, and fail under
// CI). Flags: -difftest.seeds (per op, default 200), -difftest.seed (the
// first), -difftest.ops (a regexp of op names), -difftest.show.
package difftest
