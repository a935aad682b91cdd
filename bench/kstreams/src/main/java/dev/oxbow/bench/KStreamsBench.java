package dev.oxbow.bench;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Reference Kafka Streams application for Oxbow's benchmark harness (bench/).
 *
 * <p>Runs one of four topologies whose input and output formats are a contract
 * shared with the Go side of the harness, or one of two baselines (a Kafka
 * Streams passthrough, which copies every record, and {@link ClientLoop}):
 *
 * <ul>
 *   <li>input topic: key = UTF-8 string, value = raw bytes (100 bytes), record
 *       timestamp = event time (default timestamp extractor);
 *   <li>table topic (join only): key = UTF-8 string, value = UTF-8 string;
 *   <li>{@code stateless}: keep records with {@code (value[8] & 1) == 0}, emit the
 *       first 16 bytes of the value;
 *   <li>{@code count}: per-key running count, emitted as an 8-byte big-endian long;
 *   <li>{@code window}: hopping windows of 5 min advancing by 1 min, 1 min grace,
 *       per-key count; output key {@code key + "@" + windowStartMillis};
 *   <li>{@code tumbling}: tumbling windows of 5 min, 1 min grace, per-key count;
 *       output key {@code key + "@" + windowStartMillis};
 *   <li>{@code sliding}: sliding windows of a 5 min time difference, 1 min grace,
 *       per-key count; output key {@code key + "@" + windowStartMillis};
 *   <li>{@code session}: sessions of a 5 min inactivity gap, 1 min grace, per-key
 *       count; output key in the session-windowed serde's format (the key's bytes,
 *       then the session's end and start, 8 bytes each), merged sessions removed
 *       with tombstones;
 *   <li>{@code join}: stream-table inner join, output value = first 8 bytes of the
 *       stream value followed by the table value's UTF-8 bytes.
 * </ul>
 *
 * <p>Process protocol: prints exactly {@code RUNNING} on stdout the first time the
 * client reaches RUNNING; on SIGTERM/SIGINT closes (60 s timeout) and exits 0;
 * exits 1 if the client fails (uncaught exception, ERROR state) and 2 on a bad
 * command line. Everything else (config summary, Kafka's warnings) goes to stderr.
 */
public final class KStreamsBench {

    static final String STORE_COUNTS = "counts";
    static final String STORE_WINDOW_COUNTS = "window-counts";
    static final String STORE_TUMBLING_COUNTS = "tumbling-counts";
    static final String STORE_SLIDING_COUNTS = "sliding-counts";
    static final String STORE_SESSION_COUNTS = "session-counts";
    static final String STORE_JOIN_TABLE = "join-table";

    private static final String GLOBAL_PROCESSING_HANDLER_CONFIG = "processing.exception.handler.global.enabled";

    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(60);

    /**
     * Close within 60 s and leave the consumer group (Kafka Streams stays in it by
     * default), so a later run with the same application.id need not wait for this
     * one's members to time out, and the group can be deleted right away.
     */
    static final CloseOptions CLOSE_OPTIONS = CloseOptions.timeout(CLOSE_TIMEOUT)
            .withGroupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP);

    static final Duration WINDOW_SIZE = Duration.ofMinutes(5);
    static final Duration WINDOW_ADVANCE = Duration.ofMinutes(1);
    static final Duration WINDOW_GRACE = Duration.ofMinutes(1);

    static final int EXIT_OK = 0;
    static final int EXIT_FAILED = 1;
    static final int EXIT_USAGE = 2;

    private static final int LIVE = 0;
    private static final int CLOSING = 1;
    private static final int FAILING = 2;

    private static final List<String> TOPOLOGIES = List.of("stateless", "count", "window", "tumbling", "sliding", "session", "join", "passthrough", "client-loop");

    private static final String USAGE = String.join("\n",
            "usage: java -jar oxbow-kstreams-bench.jar --brokers HOST:PORT[,HOST:PORT...] --app-id ID",
            "         --topology stateless|count|window|tumbling|sliding|session|join|passthrough|client-loop --input TOPIC --output TOPIC [--table TOPIC]",
            "         --guarantee alos|eos --commit-ms N --cache-bytes N [--threads N] --state-dir DIR",
            "         [--batch-bytes N] [--linger-ms N] [--compression TYPE] [--max-poll-records N]",
            "         [--rocksdb-bytes N --rocksdb-memtable-bytes N]",
            "",
            "  --brokers      bootstrap.servers (comma-separated)",
            "  --app-id       application.id (consumer group, internal topic prefix)",
            "  --topology     stateless | count | window | tumbling | sliding | session | join: the",
            "                 twins of Oxbow's topologies;",
            "                 passthrough: Kafka Streams copying every record; client-loop: stateless's",
            "                 work as a plain KafkaConsumer/KafkaProducer loop a thread (ClientLoop)",
            "  --input        input topic (key UTF-8 string, value bytes)",
            "  --output       output topic",
            "  --table        table topic, required for and only allowed with --topology join",
            "  --guarantee    alos (at_least_once) | eos (exactly_once_v2)",
            "  --commit-ms    commit.interval.ms",
            "  --cache-bytes  statestore.cache.max.bytes",
            "  --threads      num.stream.threads (default 2)",
            "  --state-dir    state.dir",
            "  --batch-bytes  the producers' batch.size (default: Kafka Streams')",
            "  --linger-ms    the producers' linger.ms (default: Kafka Streams' 100)",
            "  --compression  the producers' compression.type (default: none)",
            "  --max-poll-records  the consumers' max.poll.records (default: Kafka Streams' 1000)",
            "  --rocksdb-bytes     bound every RocksDB store together: one shared block cache of N bytes",
            "                      (BoundedRocksDB); default: Kafka Streams' per-store RocksDB settings",
            "  --rocksdb-memtable-bytes  the memtables' share of that cache (a write-buffer manager)",
            "",
            "Prints RUNNING on stdout once running; SIGTERM/SIGINT closes and exits 0;",
            "exit 1 on a stream failure, 2 on a bad command line.");

    private KStreamsBench() {
    }

    /** A command-line error: reported with the usage text, exit status 2. */
    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    /** The parsed, validated command line. */
    record Options(
            String brokers,
            String appId,
            String topology,
            String input,
            String output,
            String table,
            String guarantee,
            long commitMs,
            long cacheBytes,
            int threads,
            String stateDir,
            long batchBytes,
            long lingerMs,
            String compression,
            long maxPollRecords,
            long rocksdbBytes,
            long rocksdbMemtableBytes) {

        String processingGuarantee() {
            return guarantee.equals("eos") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE;
        }
    }

    public static void main(String[] args) {
        Options opts;
        try {
            opts = parse(args);
        } catch (UsageException e) {
            System.err.println("kstreams-bench: " + e.getMessage());
            System.err.println(USAGE);
            System.exit(EXIT_USAGE);
            return;
        }
        if (opts == null) { // --help
            System.out.println(USAGE);
            System.exit(EXIT_OK);
            return;
        }
        System.exit(run(opts));
    }

    // ------------------------------------------------------------------
    // command line

    static Options parse(String[] args) throws UsageException {
        Map<String, String> flags = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (arg.equals("-h") || arg.equals("--help")) {
                return null;
            }
            if (!arg.startsWith("--") || arg.length() == 2) {
                throw new UsageException("unexpected argument '" + arg + "' (flags are --name value pairs)");
            }
            String name = arg.substring(2);
            if (!isKnownFlag(name)) {
                throw new UsageException("unknown flag --" + name);
            }
            if (i + 1 >= args.length) {
                throw new UsageException("flag --" + name + " needs a value");
            }
            String value = args[++i];
            if (flags.containsKey(name)) {
                throw new UsageException("flag --" + name + " given more than once");
            }
            flags.put(name, value);
        }

        String brokers = required(flags, "brokers");
        String appId = required(flags, "app-id");
        String topology = required(flags, "topology");
        if (!TOPOLOGIES.contains(topology)) {
            throw new UsageException("--topology must be one of " + String.join("|", TOPOLOGIES) + ", not '" + topology + "'");
        }
        String table = flags.get("table");
        if (topology.equals("join")) {
            table = required(flags, "table");
        } else if (table != null) {
            throw new UsageException("--table is only allowed with --topology join");
        }
        String input = required(flags, "input");
        String output = required(flags, "output");
        String guarantee = required(flags, "guarantee");
        if (!guarantee.equals("alos") && !guarantee.equals("eos")) {
            throw new UsageException("--guarantee must be alos or eos, not '" + guarantee + "'");
        }
        long commitMs = longFlag(flags, "commit-ms", 0);
        long cacheBytes = longFlag(flags, "cache-bytes", 0);
        int threads = flags.containsKey("threads") ? (int) longFlag(flags, "threads", 1, Integer.MAX_VALUE) : 2;
        String stateDir = required(flags, "state-dir");
        long batchBytes = flags.containsKey("batch-bytes") ? longFlag(flags, "batch-bytes", 1, Integer.MAX_VALUE) : 0;
        long lingerMs = flags.containsKey("linger-ms") ? longFlag(flags, "linger-ms", 0) : -1;
        String compression = flags.get("compression");
        if (compression != null && !List.of("none", "gzip", "snappy", "lz4", "zstd").contains(compression)) {
            throw new UsageException("--compression must be none, gzip, snappy, lz4 or zstd, not '" + compression + "'");
        }
        long maxPollRecords = flags.containsKey("max-poll-records") ? longFlag(flags, "max-poll-records", 1, Integer.MAX_VALUE) : 0;
        long rocksdbBytes = flags.containsKey("rocksdb-bytes") ? longFlag(flags, "rocksdb-bytes", 1) : 0;
        long rocksdbMemtableBytes = flags.containsKey("rocksdb-memtable-bytes") ? longFlag(flags, "rocksdb-memtable-bytes", 1) : 0;
        if ((rocksdbBytes == 0) != (rocksdbMemtableBytes == 0) || rocksdbMemtableBytes > rocksdbBytes) {
            throw new UsageException("--rocksdb-bytes and --rocksdb-memtable-bytes go together, the second at most the first");
        }

        return new Options(brokers, appId, topology, input, output, table, guarantee,
                commitMs, cacheBytes, threads, stateDir, batchBytes, lingerMs, compression, maxPollRecords,
                rocksdbBytes, rocksdbMemtableBytes);
    }

    private static boolean isKnownFlag(String name) {
        switch (name) {
            case "brokers", "app-id", "topology", "input", "output", "table", "guarantee",
                    "commit-ms", "cache-bytes", "threads", "state-dir", "batch-bytes", "linger-ms",
                    "compression", "max-poll-records", "rocksdb-bytes", "rocksdb-memtable-bytes":
                return true;
            default:
                return false;
        }
    }

    private static String required(Map<String, String> flags, String name) throws UsageException {
        String v = flags.get(name);
        if (v == null) {
            throw new UsageException("missing required flag --" + name);
        }
        if (v.isBlank()) {
            throw new UsageException("flag --" + name + " must not be empty");
        }
        return v;
    }

    private static long longFlag(Map<String, String> flags, String name, long min) throws UsageException {
        return longFlag(flags, name, min, Long.MAX_VALUE);
    }

    private static long longFlag(Map<String, String> flags, String name, long min, long max) throws UsageException {
        String v = required(flags, name);
        long n;
        try {
            n = Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new UsageException("--" + name + " must be an integer, not '" + v + "'");
        }
        if (n < min || n > max) {
            throw new UsageException("--" + name + " must be between " + min + " and " + max + ", not " + n);
        }
        return n;
    }

    // ------------------------------------------------------------------
    // configuration and topologies

    static Properties config(Options o) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, o.appId());
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, o.brokers());
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, o.processingGuarantee());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, o.commitMs());
        // statestore.cache.max.bytes replaces the deprecated cache.max.bytes.buffering.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, o.cacheBytes());
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, o.threads());
        p.put(StreamsConfig.STATE_DIR_CONFIG, o.stateDir());
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        // No global tables here, so this changes nothing but silences a startup warning
        // that Kafka 4.4 logs while it defaults to false: once for the client config and
        // once per stream thread for the partition assignor's copy of the config,
        // which only sees the main consumer's settings. (The StreamsConfig constant
        // for this name is itself deprecated in 4.4, hence the literal.)
        p.put(GLOBAL_PROCESSING_HANDLER_CONFIG, true);
        p.put(StreamsConfig.mainConsumerPrefix(GLOBAL_PROCESSING_HANDLER_CONFIG), true);
        // Kafka Streams already defaults its consumers to earliest; make it explicit.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // The aligned-and-tuned configuration's settings; absent, Kafka Streams' defaults.
        if (o.batchBytes() > 0) {
            p.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), (int) o.batchBytes());
        }
        if (o.lingerMs() >= 0) {
            p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), o.lingerMs());
        }
        if (o.compression() != null) {
            p.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), o.compression());
        }
        if (o.maxPollRecords() > 0) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), (int) o.maxPollRecords());
        }
        if (o.rocksdbBytes() > 0) {
            p.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, BoundedRocksDB.class);
        }
        return p;
    }

    static KGroupedStream<String, byte[]> byKey(KStream<String, byte[]> input) {
        return input.groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()));
    }

    static Materialized<String, Long, WindowStore<Bytes, byte[]>> windowCounts(String store) {
        return Materialized.<String, Long, WindowStore<Bytes, byte[]>>as(store)
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.Long());
    }

    // The window counts keyed "key@start", as the Oxbow twin writes them.
    static void toByWindowStart(KTable<Windowed<String>, Long> counts, String output) {
        counts.toStream()
                .map((Windowed<String> wk, Long v) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), v))
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
    }

    static Topology topology(Options o) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, byte[]> input = builder.stream(o.input(), Consumed.with(Serdes.String(), Serdes.ByteArray()));
        switch (o.topology()) {
            // (Values too short to have a byte 8, or null, are dropped rather than
            // failing the task; the contract says every value has 100 bytes.)
            case "stateless" -> input
                    .filter((k, v) -> v != null && v.length > 8 && (v[8] & 1) == 0)
                    .mapValues(v -> Arrays.copyOf(v, 16))
                    .to(o.output(), Produced.with(Serdes.String(), Serdes.ByteArray()));
            case "count" -> byKey(input)
                    .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(STORE_COUNTS)
                            .withKeySerde(Serdes.String())
                            .withValueSerde(Serdes.Long()))
                    .toStream()
                    .to(o.output(), Produced.with(Serdes.String(), Serdes.Long()));
            case "window" -> toByWindowStart(byKey(input)
                    .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW_SIZE, WINDOW_GRACE).advanceBy(WINDOW_ADVANCE))
                    .count(windowCounts(STORE_WINDOW_COUNTS)), o.output());
            case "tumbling" -> toByWindowStart(byKey(input)
                    .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW_SIZE, WINDOW_GRACE))
                    .count(windowCounts(STORE_TUMBLING_COUNTS)), o.output());
            case "sliding" -> toByWindowStart(byKey(input)
                    .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(WINDOW_SIZE, WINDOW_GRACE))
                    .count(windowCounts(STORE_SLIDING_COUNTS)), o.output());
            case "session" -> byKey(input)
                    .windowedBy(SessionWindows.ofInactivityGapAndGrace(WINDOW_SIZE, WINDOW_GRACE))
                    .count(Materialized.<String, Long, SessionStore<Bytes, byte[]>>as(STORE_SESSION_COUNTS)
                            .withKeySerde(Serdes.String())
                            .withValueSerde(Serdes.Long()))
                    .toStream()
                    .to(o.output(), Produced.with(WindowedSerdes.sessionWindowedSerdeFrom(String.class), Serdes.Long()));
            case "join" -> {
                KTable<String, String> table = builder.table(o.table(),
                        Consumed.with(Serdes.String(), Serdes.String()),
                        Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(STORE_JOIN_TABLE)
                                .withKeySerde(Serdes.String())
                                .withValueSerde(Serdes.String()));
                input
                        .join(table, KStreamsBench::joinValue,
                                Joined.with(Serdes.String(), Serdes.ByteArray(), Serdes.String()))
                        .to(o.output(), Produced.with(Serdes.String(), Serdes.ByteArray()));
            }
            case "passthrough" -> input
                    .to(o.output(), Produced.with(Serdes.String(), Serdes.ByteArray()));
            default -> throw new IllegalArgumentException("unknown topology " + o.topology());
        }
        return builder.build();
    }

    /** First 8 bytes of the stream value followed by the table value's UTF-8 bytes. */
    static byte[] joinValue(byte[] v, String t) {
        byte[] tb = t.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(8, v.length);
        byte[] out = new byte[n + tb.length];
        System.arraycopy(v, 0, out, 0, n);
        System.arraycopy(tb, 0, out, n, tb.length);
        return out;
    }

    // ------------------------------------------------------------------
    // lifecycle

    static int run(Options o) {
        if (o.topology().equals("client-loop")) {
            return ClientLoop.run(o);
        }
        PrintStream out = System.out;
        PrintStream err = System.err;

        // Who ends the process: nobody yet, the shutdown hook (signal: close, exit 0)
        // or the main thread (failure: exit 1). Whoever claims it first wins.
        AtomicInteger ending = new AtomicInteger(LIVE);
        AtomicReference<KafkaStreams> client = new AtomicReference<>();

        // Registered before anything slow (building the client takes a second or
        // two), so SIGTERM/SIGINT during startup also exits 0. Only a signal that
        // arrives while the JVM itself is still booting gets the default 128+signal.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (!ending.compareAndSet(LIVE, CLOSING)) {
                return; // the main thread is exiting with status 1; leave that alone
            }
            KafkaStreams streams = client.get();
            if (streams != null) {
                boolean closed;
                try {
                    closed = streams.close(CLOSE_OPTIONS);
                } catch (RuntimeException e) {
                    err.println("kstreams-bench: error while closing: " + e);
                    closed = false;
                }
                if (!closed) {
                    err.println("kstreams-bench: warning: Kafka Streams did not close within "
                            + CLOSE_TIMEOUT.toSeconds() + "s");
                }
            }
            out.flush();
            err.flush();
            // A shutdown hook cannot call System.exit; halt so a signal-initiated
            // stop reports success (status 0) instead of 128+signal.
            Runtime.getRuntime().halt(EXIT_OK);
        }, "kstreams-bench-shutdown"));

        err.printf("kstreams-bench: topology=%s guarantee=%s (%s) commit.interval.ms=%d statestore.cache.max.bytes=%d "
                        + "num.stream.threads=%d application.id=%s input=%s output=%s%s state.dir=%s brokers=%s%n",
                o.topology(), o.guarantee(), o.processingGuarantee(), o.commitMs(), o.cacheBytes(), o.threads(),
                o.appId(), o.input(), o.output(), o.table() != null ? " table=" + o.table() : "", o.stateDir(),
                o.brokers());
        err.printf("kstreams-bench: producer batch.size=%s linger.ms=%s compression.type=%s; consumer max.poll.records=%s; "
                        + "RocksDB %s%n",
                o.batchBytes() > 0 ? o.batchBytes() : "default", o.lingerMs() >= 0 ? o.lingerMs() : "default",
                o.compression() != null ? o.compression() : "default",
                o.maxPollRecords() > 0 ? o.maxPollRecords() : "default",
                o.rocksdbBytes() > 0 ? "bounded: a shared " + o.rocksdbBytes() + "-byte block cache, memtables "
                        + o.rocksdbMemtableBytes() + " bytes of it" : "per-store defaults");
        err.flush();

        if (o.rocksdbBytes() > 0) {
            BoundedRocksDB.bound(o.rocksdbBytes(), o.rocksdbMemtableBytes());
        }
        Properties config = config(o);
        KafkaStreams streams;
        try {
            streams = new KafkaStreams(topology(o), config);
        } catch (RuntimeException e) {
            claimFailure(ending);
            err.println("kstreams-bench: cannot create Kafka Streams client: " + e);
            e.printStackTrace(err);
            return EXIT_FAILED;
        }

        AtomicBoolean printedRunning = new AtomicBoolean();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch stopped = new CountDownLatch(1); // ERROR, or NOT_RUNNING we did not ask for

        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            err.println("kstreams-bench: uncaught exception in Kafka Streams: " + e);
            e.printStackTrace(err);
            err.flush();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((newState, oldState) -> {
            if (newState == KafkaStreams.State.RUNNING && printedRunning.compareAndSet(false, true)) {
                out.println("RUNNING");
                out.flush();
            }
            if (newState == KafkaStreams.State.ERROR
                    || (newState == KafkaStreams.State.NOT_RUNNING && ending.get() != CLOSING)) {
                stopped.countDown();
            }
        });

        client.set(streams);
        if (ending.get() != LIVE) {
            parkForever(); // a signal arrived while the client was being built; the hook halts
        }

        try {
            streams.start();
        } catch (RuntimeException e) {
            claimFailure(ending);
            err.println("kstreams-bench: cannot start Kafka Streams: " + e);
            e.printStackTrace(err);
            streams.close(CLOSE_OPTIONS);
            return EXIT_FAILED;
        }

        try {
            stopped.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        claimFailure(ending);
        Throwable t = failure.get();
        err.println("kstreams-bench: Kafka Streams stopped in state " + streams.state()
                + (t != null ? " after an uncaught exception: " + t : " unexpectedly"));
        streams.close(CLOSE_OPTIONS);
        err.flush();
        return EXIT_FAILED;
    }

    /**
     * Claims the exit for the main thread (status 1); if a signal got there first,
     * parks: the shutdown hook is closing the client and will halt the JVM with 0.
     */
    private static void claimFailure(AtomicInteger ending) {
        if (!ending.compareAndSet(LIVE, FAILING)) {
            parkForever();
        }
    }

    private static void parkForever() {
        while (true) {
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException ignored) {
                // keep waiting for the shutdown hook to halt the JVM
            }
        }
    }
}
