package dev.oxbow.cdcdiff;

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.Reader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.Header;
import io.debezium.engine.format.JsonByteArray;
import io.debezium.engine.format.KeyValueHeaderChangeEventFormat;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Debezium side of Oxbow's CDC differential test: Debezium's PostgreSQL connector run
 * embedded (the Debezium engine, {@code io.debezium.embedded.async.AsyncEmbeddedEngine}), each
 * change event written on stdout as the exact bytes Kafka Connect's JsonConverter made of it.
 *
 * <p>Usage: {@code java -cp target/classes:$(cat target/classpath.txt) dev.oxbow.cdcdiff.Main PROPS}
 *
 * <p><b>Input.</b> {@code PROPS} is a Java properties file (read as UTF-8) holding the engine's and
 * the connector's properties, passed to the engine as they are: {@code name},
 * {@code connector.class=io.debezium.connector.postgresql.PostgresConnector},
 * {@code database.hostname}/{@code port}/{@code user}/{@code password}/{@code dbname},
 * {@code plugin.name=pgoutput}, {@code slot.name}, {@code publication.name}, {@code topic.prefix},
 * {@code table.include.list}, {@code offset.storage} (FileOffsetBackingStore or
 * MemoryOffsetBackingStore), {@code offset.storage.file.filename}, {@code offset.flush.interval.ms}
 * and any connector option such as {@code decimal.handling.mode}.
 *
 * <p><b>Converters.</b> Main changes nothing about conversion except the converters, which it makes
 * what a Debezium user who asks for "JSON without schemas" gets: Kafka Connect's
 * {@code org.apache.kafka.connect.json.JsonConverter} for key, value and headers, with
 * {@code schemas.enable=false}. Debezium's engine ({@code io.debezium.embedded.ConverterBuilder})
 * configures each converter from the properties under {@code key.converter.},
 * {@code value.converter.} and {@code header.converter.}, laid over those under the common
 * {@code converter.} prefix, and takes the class from {@code <prefix>class}. So Main sets
 * {@code key.converter.class}, {@code value.converter.class}, {@code header.converter.class} to
 * JsonConverter and {@code key.converter.schemas.enable}, {@code value.converter.schemas.enable},
 * {@code header.converter.schemas.enable} to {@code false}, each only where the file sets neither
 * that property nor its {@code converter.} twin (so the file can override any of them). Note that
 * Kafka Connect's own spelling {@code key.converter=CLASS} means nothing to the engine.
 *
 * <p><b>Output.</b> The engine is built with
 * {@code KeyValueHeaderChangeEventFormat.of(JsonByteArray.class, JsonByteArray.class, JsonByteArray.class)},
 * so keys, values and header values are the converter's bytes, untouched. stdout carries only
 * JSON lines (everything else, logs included, goes to stderr; {@code System.out} itself is
 * pointed at stderr so that no library can write into the protocol):
 * <ul>
 *   <li>{@code {"ready":true}} once, when the engine's connector callback reports that the
 *       connector task has started ({@code ConnectorCallback.taskStarted}): by then the
 *       replication slot exists, so changes made after this line are captured; it comes before
 *       any event line.</li>
 *   <li>for every change event, in the order the engine delivers them:
 *       {@code {"topic":"<destination>","key":"<base64>"|null,"value":"<base64>"|null,"headers":[{"key":"<name>","value":"<base64>"|null},...]}}
 *       (standard base64 with padding; a null value is a tombstone; the engine drops headers
 *       whose converted value is null).</li>
 * </ul>
 * Events are handled by a {@link DebeziumEngine.ChangeConsumer}, one batch at a time in order:
 * the batch's lines are written and stdout is flushed, then every record is marked processed
 * and the batch finished, so offsets advance only past what was written.
 *
 * <p><b>Producing.</b> With properties {@code cdcdiff.produce.<name>} in the file (at least
 * {@code cdcdiff.produce.bootstrap.servers}), Main writes each event to Kafka instead, with a
 * {@code KafkaProducer} configured by those properties (prefix stripped): topic, key, value and
 * headers as the engine gives them, asynchronously, as Kafka Connect's worker does. Then stdout
 * carries {@code {"acked":N}} lines instead of events: the count of records Kafka has
 * acknowledged, written whenever it has grown (checked every 2 ms). A record Kafka refuses fails
 * the engine. This is the benchmark's mode (cdc/postgres's BenchmarkSource).
 *
 * <p><b>Lifetime.</b> It runs until its stdin is closed (EOF). Then it waits for the engine to
 * have reached its polling phase (if it has not already; at most 60 s), closes the engine,
 * waits for the engine's completion callback and exits 0. If the engine fails (the completion
 * callback reports {@code success=false}, or the engine cannot be built), the message and stack
 * trace go to stderr and it exits 1. If the engine completes by itself with success (say,
 * {@code snapshot.mode=initial_only}), it exits 0. A write error on stdout fails the engine.
 * Exit 2 is a usage error.
 */
public final class Main {

    private static final String JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter";
    private static final long POLLING_WAIT_SECONDS = 60;
    private static final long STOP_WAIT_SECONDS = 120;

    /** What the engine's completion callback said. */
    private record Completion(boolean success, String message, Throwable error) {
    }

    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final Base64.Encoder BASE64 = Base64.getEncoder();

    private static final String PRODUCE_PREFIX = "cdcdiff.produce.";

    private final OutputStream out;
    private final Object outLock = new Object();
    private KafkaProducer<byte[], byte[]> producer;
    private final AtomicLong acked = new AtomicLong();
    private final AtomicReference<Exception> produceError = new AtomicReference<>();

    private Main(OutputStream out) {
        this.out = out;
    }

    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: dev.oxbow.cdcdiff.Main PROPERTIES-FILE");
            System.exit(2);
        }
        // stdout is the protocol: keep the real one, and send System.out to stderr.
        final OutputStream stdout = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
        System.setOut(System.err);

        final Properties props = new Properties();
        try (Reader r = Files.newBufferedReader(Path.of(args[0]), StandardCharsets.UTF_8)) {
            props.load(r);
        }
        catch (IOException e) {
            System.err.println("cdcdiff: cannot read " + args[0] + ": " + e);
            System.exit(2);
        }
        defaultConverters(props);
        final Properties producerProps = new Properties();
        for (String name : props.stringPropertyNames()) {
            if (name.startsWith(PRODUCE_PREFIX)) {
                producerProps.setProperty(name.substring(PRODUCE_PREFIX.length()), props.getProperty(name));
                props.remove(name);
            }
        }
        final Main main = new Main(stdout);
        if (!producerProps.isEmpty()) {
            main.producer = new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer());
            main.startReporter();
        }
        final int code = main.run(props);
        if (main.producer != null) {
            main.producer.close(Duration.ofSeconds(30));
        }
        System.exit(code);
    }

    /**
     * Makes key, value and header converters JsonConverter without schemas, unless the file says
     * otherwise (see the class doc for the property names).
     */
    static void defaultConverters(Properties props) {
        for (String side : List.of("key", "value", "header")) {
            setUnlessSet(props, side + ".converter.", "class", JSON_CONVERTER);
            setUnlessSet(props, side + ".converter.", "schemas.enable", "false");
        }
    }

    private static void setUnlessSet(Properties props, String prefix, String name, String value) {
        if (!props.containsKey(prefix + name) && !props.containsKey("converter." + name)) {
            props.setProperty(prefix + name, value);
        }
    }

    private int run(Properties props) {
        final CompletableFuture<Completion> completion = new CompletableFuture<>();
        final CompletableFuture<Void> polling = new CompletableFuture<>();
        final AtomicBoolean ready = new AtomicBoolean();

        final DebeziumEngine.ConnectorCallback connectorCallback = new DebeziumEngine.ConnectorCallback() {
            @Override
            public void taskStarted() {
                if (ready.compareAndSet(false, true)) {
                    ObjectNode line = MAPPER.createObjectNode();
                    line.put("ready", true);
                    writeLines(List.of(line));
                }
            }

            @Override
            public void pollingStarted() {
                polling.complete(null);
            }
        };

        final DebeziumEngine<ChangeEvent<byte[], byte[]>> engine;
        try {
            engine = DebeziumEngine
                    .create(KeyValueHeaderChangeEventFormat.of(JsonByteArray.class, JsonByteArray.class, JsonByteArray.class))
                    // The configuration must come first: notifying() reads it.
                    .using(props)
                    .using(connectorCallback)
                    .using((boolean success, String message, Throwable error) -> completion.complete(new Completion(success, message, error)))
                    .notifying(this::handleBatch)
                    .build();
        }
        catch (RuntimeException e) {
            System.err.println("cdcdiff: cannot build the Debezium engine:");
            e.printStackTrace(System.err);
            return 1;
        }

        final ExecutorService executor = Executors.newSingleThreadExecutor(r -> new Thread(r, "debezium-engine"));
        executor.execute(engine);

        final CompletableFuture<Void> stdinClosed = new CompletableFuture<>();
        final Thread stdinWatch = new Thread(() -> {
            drain(System.in);
            stdinClosed.complete(null);
        }, "stdin-watch");
        stdinWatch.setDaemon(true);
        stdinWatch.start();

        CompletableFuture.anyOf(stdinClosed, completion).join();
        if (!completion.isDone()) {
            // stdin is closed: stop the engine, but not while it is starting its task (it refuses
            // then, and a stop during connector start is reported as a failure).
            try {
                CompletableFuture.anyOf(polling, completion).get(POLLING_WAIT_SECONDS, TimeUnit.SECONDS);
            }
            catch (TimeoutException e) {
                System.err.println("cdcdiff: the engine has not started polling in " + POLLING_WAIT_SECONDS + " s; closing it anyway");
            }
            catch (Exception e) {
                // interrupted or failed: close anyway
            }
            if (!completion.isDone()) {
                close(engine, completion);
            }
        }

        final Completion done;
        try {
            done = completion.get(STOP_WAIT_SECONDS, TimeUnit.SECONDS);
        }
        catch (Exception e) {
            System.err.println("cdcdiff: the engine did not stop in " + STOP_WAIT_SECONDS + " s: " + e);
            return 1;
        }
        executor.shutdown();
        try {
            executor.awaitTermination(10, TimeUnit.SECONDS);
        }
        catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try {
            synchronized (outLock) {
                out.flush();
            }
        }
        catch (IOException e) {
            System.err.println("cdcdiff: cannot flush stdout: " + e);
            return 1;
        }
        if (!done.success()) {
            System.err.println("cdcdiff: the Debezium engine failed: " + done.message());
            if (done.error() != null) {
                done.error().printStackTrace(System.err);
            }
            return 1;
        }
        return 0;
    }

    /** Closes the engine, retrying while it is still starting its tasks. */
    private static void close(DebeziumEngine<?> engine, CompletableFuture<Completion> completion) {
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(STOP_WAIT_SECONDS);
        while (!completion.isDone()) {
            try {
                engine.close();
                return;
            }
            catch (IllegalStateException e) {
                String msg = String.valueOf(e.getMessage());
                if (!msg.contains("tasks are starting") || System.nanoTime() > deadline) {
                    // already stopping or stopped: the completion callback will tell
                    System.err.println("cdcdiff: closing the engine: " + msg);
                    return;
                }
            }
            catch (IOException | RuntimeException e) {
                System.err.println("cdcdiff: closing the engine: " + e);
                return;
            }
            try {
                Thread.sleep(100);
            }
            catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    private static void drain(InputStream in) {
        final byte[] buf = new byte[4096];
        try {
            while (in.read(buf) >= 0) {
                // discard
            }
        }
        catch (IOException e) {
            // a broken stdin counts as closed
        }
    }

    /** Writes {"acked":N} whenever the count of acknowledged records has grown. */
    private void startReporter() {
        final Thread t = new Thread(() -> {
            long reported = -1;
            while (true) {
                final long n = acked.get();
                if (n != reported) {
                    ObjectNode line = MAPPER.createObjectNode();
                    line.put("acked", n);
                    writeLines(List.of(line));
                    reported = n;
                }
                try {
                    Thread.sleep(2);
                }
                catch (InterruptedException e) {
                    return;
                }
            }
        }, "acked-reporter");
        t.setDaemon(true);
        t.start();
    }

    /** Sends the batch's records to Kafka, counting the acknowledged ones. */
    private void produceBatch(List<ChangeEvent<byte[], byte[]>> records) {
        final Exception failed = produceError.get();
        if (failed != null) {
            throw new IllegalStateException("cdcdiff: Kafka refused a record", failed);
        }
        for (ChangeEvent<byte[], byte[]> event : records) {
            final ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(event.destination(), event.key(), event.value());
            final List<Header<byte[]>> eventHeaders = event.headers();
            for (Header<byte[]> h : eventHeaders) {
                record.headers().add(h.getKey(), h.getValue());
            }
            producer.send(record, (metadata, error) -> {
                if (error != null) {
                    produceError.compareAndSet(null, error);
                }
                else {
                    acked.incrementAndGet();
                }
            });
        }
    }

    /** The ChangeConsumer: one line per event, flush, then mark the batch processed. */
    private void handleBatch(List<ChangeEvent<byte[], byte[]>> records,
                             DebeziumEngine.RecordCommitter<ChangeEvent<byte[], byte[]>> committer)
            throws InterruptedException {
        if (producer != null) {
            produceBatch(records);
            for (ChangeEvent<byte[], byte[]> event : records) {
                committer.markProcessed(event);
            }
            committer.markBatchFinished();
            return;
        }
        final List<ObjectNode> lines = new java.util.ArrayList<>(records.size());
        for (ChangeEvent<byte[], byte[]> event : records) {
            lines.add(eventLine(event));
        }
        writeLines(lines);
        for (ChangeEvent<byte[], byte[]> event : records) {
            committer.markProcessed(event);
        }
        committer.markBatchFinished();
    }

    private static ObjectNode eventLine(ChangeEvent<byte[], byte[]> event) {
        final ObjectNode line = MAPPER.createObjectNode();
        line.put("topic", event.destination());
        putBytes(line, "key", event.key());
        putBytes(line, "value", event.value());
        final ArrayNode headers = line.putArray("headers");
        final List<Header<byte[]>> eventHeaders = event.headers();
        for (Header<byte[]> h : eventHeaders) {
            final ObjectNode header = headers.addObject();
            header.put("key", h.getKey());
            putBytes(header, "value", h.getValue());
        }
        return line;
    }

    private static void putBytes(ObjectNode node, String field, byte[] bytes) {
        if (bytes == null) {
            node.putNull(field);
        }
        else {
            node.put(field, BASE64.encodeToString(bytes));
        }
    }

    /** Writes the lines and flushes stdout; a write error fails the engine. */
    private void writeLines(List<ObjectNode> lines) {
        synchronized (outLock) {
            try {
                for (ObjectNode line : lines) {
                    out.write(MAPPER.writeValueAsBytes(line));
                    out.write('\n');
                }
                out.flush();
            }
            catch (IOException e) {
                throw new UncheckedIOException("cdcdiff: cannot write to stdout", e);
            }
        }
    }
}
