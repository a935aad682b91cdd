// Package difftest checks Oxbow's DSL against Kafka Streams itself: every
// topology of a catalog runs, on inputs generated from many seeds, through
// Oxbow's in-memory driver (enginetest) and through Kafka Streams'
// TopologyTestDriver (the Java module in kstreams/), and the records each
// input step makes them write must be the same, byte for byte, with the same
// timestamps, in the same order on each topic.
//
// The cases are generated from seeds (gen_test.go): a few keys per topic,
// null keys, tombstones, out-of-order, equal and late timestamps, wall-clock
// steps, the record cache on or off. A difference is shrunk to the steps
// that show it and printed step by step, with the flags that repeat it.
// With the record cache on, both sides commit, and so flush the cache,
// after every step, as the TopologyTestDriver does after every record: what
// a cache compacts between commits is not compared here (the engine's own
// tests cover it). The stores of the Kafka Streams side are RocksDB, its
// default (its in-memory stores give other emit-final results:
// -difftest.stores=memory). Where Kafka Streams itself fails on an input it
// should take (referenceBugs in compare_test.go), the case is compared up
// to that step.
//
// The package has tests only: go test ./engine/difftest (Java 17 and Maven
// build the Kafka Streams side; without them the tests skip, and fail under
// CI). Flags: -difftest.seeds (per op, default 200), -difftest.seed (the
// first), -difftest.ops (a regexp of op names), -difftest.show.
package difftest
