package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// engineConfig is one configuration of the engines and of the baselines:
// how every side's producers, consumers, state stores and runtime are set.
// A zero producer setting leaves each client its own default.
type engineConfig struct {
	name string // "defaults" or "tuned"
	// The producers' settings, the same on every side.
	batchBytes  int           // 0: each client's default
	linger      time.Duration // negative: each client's default
	compression string        // "": each client's default
	// Kafka Streams (and the Java client loop).
	maxPollRecords int      // 0: the client's default
	jvm            []string // the JVM's flags
	rocksdbBytes   int64    // one block cache shared by every store; 0: RocksDB per store as Kafka Streams sets it
	rocksdbMemtab  int64    // the memtables' share of it (a write-buffer manager)
	// Oxbow and the franz-go baselines.
	goMemLimit string // GOMEMLIMIT; "": none
}

// The tuned configuration's values (the producer's can be changed by flags).
const (
	tunedBatchBytes     = 1_000_000
	tunedLinger         = 5 * time.Millisecond
	tunedCompression    = "lz4"
	tunedMaxPollRecords = 10_000
	tunedHeap           = "1g"
	tunedGoMemLimit     = "1GiB"
	// Oxbow's pebble has a 64 MiB block cache and memtables of 16 MiB, two
	// at most while one flushes (engine/internal/state, not configurable
	// through engine.Config): 96 MiB. Kafka Streams' RocksDB gets the same.
	tunedRocksDBBytes   = 96 << 20
	tunedRocksDBMemtabs = 32 << 20
)

// defaultsConfig is each side as it comes: Kafka Streams' and the Java
// clients' defaults under java -Xmx1g, Oxbow's and franz-go's.
func defaultsConfig() engineConfig {
	return engineConfig{name: "defaults", linger: -1, jvm: []string{"-Xmx1g"}}
}

// tunedConfig aligns the producers of every side (batch size, linger,
// compression), bounds Kafka Streams' RocksDB and states its heap, and
// raises max.poll.records.
func tunedConfig(batchBytes int, linger time.Duration, compression string) engineConfig {
	return engineConfig{
		name: "tuned", batchBytes: batchBytes, linger: linger, compression: compression,
		maxPollRecords: tunedMaxPollRecords,
		// The heap fixed, and the collector and its settings that Kafka's
		// own scripts (kafka-run-class.sh) run the broker and tools with.
		jvm: []string{"-Xms" + tunedHeap, "-Xmx" + tunedHeap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
			"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent"},
		rocksdbBytes: tunedRocksDBBytes, rocksdbMemtab: tunedRocksDBMemtabs,
		goMemLimit: tunedGoMemLimit,
	}
}

// parseConfigs reads -config: defaults, tuned or both.
func parseConfigs(s string, tuned engineConfig) ([]engineConfig, error) {
	switch s {
	case "defaults":
		return []engineConfig{defaultsConfig()}, nil
	case "tuned":
		return []engineConfig{tuned}, nil
	case "both":
		return []engineConfig{defaultsConfig(), tuned}, nil
	}
	return nil, fmt.Errorf("-config is defaults, tuned or both, not %q", s)
}

// compressionCodec is franz-go's codec of a Kafka compression.type.
func compressionCodec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("no compression %q (none, gzip, snappy, lz4, zstd)", name)
}

// producerOpts are a Go process's producer settings: the configuration's,
// else franz-go's defaults.
func producerOpts(batchBytes int, lingerMs int, compression string) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if batchBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(batchBytes)))
	}
	if lingerMs >= 0 {
		opts = append(opts, kgo.ProducerLinger(time.Duration(lingerMs)*time.Millisecond))
	}
	if compression != "" {
		codec, err := compressionCodec(compression)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	return opts, nil
}

func (e engineConfig) lingerMs() int {
	if e.linger < 0 {
		return -1
	}
	return int(e.linger / time.Millisecond)
}

// kstreamsArgs are the Kafka Streams twin's flags for the configuration.
func (e engineConfig) kstreamsArgs() []string {
	var a []string
	if e.batchBytes > 0 {
		a = append(a, "--batch-bytes", strconv.Itoa(e.batchBytes))
	}
	if e.linger >= 0 {
		a = append(a, "--linger-ms", strconv.Itoa(e.lingerMs()))
	}
	if e.compression != "" {
		a = append(a, "--compression", e.compression)
	}
	if e.maxPollRecords > 0 {
		a = append(a, "--max-poll-records", strconv.Itoa(e.maxPollRecords))
	}
	if e.rocksdbBytes > 0 {
		a = append(a, "--rocksdb-bytes", strconv.FormatInt(e.rocksdbBytes, 10), "--rocksdb-memtable-bytes", strconv.FormatInt(e.rocksdbMemtab, 10))
	}
	return a
}

// goEnv is the environment of the configuration's Go processes.
func (e engineConfig) goEnv(env []string) []string {
	if e.goMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+e.goMemLimit)
	}
	return env
}

// settings names every setting of the configuration, side by side, for
// the report: rows of setting, Oxbow, Kafka Streams.
func (e engineConfig) settings(c benchConfig) [][3]string {
	or := func(set bool, v, dflt string) string {
		if set {
			return v
		}
		return dflt
	}
	cache := fmt.Sprintf("%d bytes (CacheBytes)", c.cacheBytes)
	ksCache := fmt.Sprintf("%d bytes (statestore.cache.max.bytes)", c.cacheBytes)
	if c.cacheBytes == 0 {
		cache, ksCache = "off (CacheBytes -1)", "off (statestore.cache.max.bytes 0)"
	}
	rows := [][3]string{
		{"producer batch size", or(e.batchBytes > 0, fmt.Sprintf("%d bytes (ProducerBatchMaxBytes)", e.batchBytes), "1000012 bytes (franz-go's default)"),
			or(e.batchBytes > 0, fmt.Sprintf("%d bytes (batch.size)", e.batchBytes), "16384 bytes (batch.size default)")},
		{"producer linger", or(e.linger >= 0, fmt.Sprintf("%d ms (ProducerLinger)", e.lingerMs()), "10 ms (franz-go's default)"),
			or(e.linger >= 0, fmt.Sprintf("%d ms (linger.ms)", e.lingerMs()), "100 ms (Kafka Streams' linger.ms default; the Java loop: the producer's, 5 ms)")},
		{"producer compression", or(e.compression != "", e.compression+" (ProducerBatchCompression)", "snappy (franz-go's default)"),
			or(e.compression != "", e.compression+" (compression.type)", "none (compression.type default)")},
		{"acks, idempotence", "all, idempotent (franz-go's defaults)", "all, idempotent (the producer's defaults)"},
		{"records a poll", "whatever a fetch holds (franz-go: 50 MiB a fetch, 1 MiB a partition)",
			or(e.maxPollRecords > 0, fmt.Sprintf("max.poll.records %d", e.maxPollRecords), "max.poll.records 1000 (Kafka Streams' default; the Java loop: the consumer's, 500)") +
				" (fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB)"},
		{"threads", fmt.Sprintf("%d workers (Workers)", c.threads), fmt.Sprintf("%d stream threads (num.stream.threads); the Java loop: %d threads, a consumer and a producer each", c.threads, c.threads)},
		{"record cache", cache, ksCache},
		{"commit interval", fmt.Sprintf("%d ms at least once, 100 ms exactly once", c.commitMs), fmt.Sprintf("%d ms at least once, 100 ms exactly once (commit.interval.ms)", c.commitMs)},
		{"state store", "pebble, one per instance: 64 MiB block cache, 16 MiB memtables (2 at most: 96 MiB); the engine's fixed settings",
			or(e.rocksdbBytes > 0, fmt.Sprintf("RocksDB bounded (BoundedRocksDB, rocksdb.config.setter): one %d MiB LRU block cache shared by every store, "+
				"index and filter blocks in it at high priority (10%%), top-level index pinned; memtables charged to it by a %d MiB write-buffer manager; "+
				"16 MiB memtables, 3 at most a store", e.rocksdbBytes>>20, e.rocksdbMemtab>>20),
				"RocksDB per store as Kafka Streams sets it: a 50 MiB block cache, 16 MiB memtables, 3 at most, for every store and window segment")},
		{"runtime memory", or(e.goMemLimit != "", "GOMEMLIMIT="+e.goMemLimit+", GOGC 100", "Go's defaults (GOGC 100, no GOMEMLIMIT)"),
			"java " + strings.Join(e.jvm, " ") + or(len(e.jvm) == 1, " (the collector the JVM picks: Serial on one CPU, as when pinned, G1 on two or more)", "")},
	}
	return rows
}
