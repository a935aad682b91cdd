package dev.oxbow.difftest;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs cases of Oxbow's differential test through Kafka Streams'
 * TopologyTestDriver and prints every output record.
 *
 * <p>The Go side (engine/difftest) writes the cases; this program knows only
 * how to build each case's topology (Twins) and to replay its steps. Keys and
 * values travel as hex of their bytes ("~" for null, "-" for none), so that neither side
 * interprets the other's formats. On stdin, one case after another:
 *
 * <pre>
 * case &lt;id&gt; &lt;op&gt; outputs=&lt;topic&gt;,... [&lt;param&gt;=&lt;value&gt; ...]
 * pipe &lt;topic&gt; &lt;key hex|~&gt; &lt;value hex|~&gt; &lt;timestamp ms&gt;
 * wall &lt;ms&gt;                       advance the wall clock
 * end
 * </pre>
 *
 * <p>On stdout, for each case, after each step the records written to each
 * output topic since the step before, topics in the order the case lists them:
 *
 * <pre>
 * result &lt;id&gt;
 * step &lt;n&gt;
 * out &lt;topic&gt; &lt;key hex|~&gt; &lt;value hex|~&gt; &lt;timestamp ms&gt;
 * fail &lt;n&gt; &lt;message hex&gt;        the step threw; the case stops there
 * done
 * </pre>
 *
 * <p>A topology that cannot be built fails at step -1.
 */
public final class Main {
    /** Oxbow's enginetest starts its wall clock at 2026-01-01T00:00:00Z; so does this driver. */
    static final Instant WALL_CLOCK_START = Instant.parse("2026-01-01T00:00:00Z");

    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws IOException {
        Path stateDir = Files.createTempDirectory("oxbow-difftest-");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
        Case c = null;
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isBlank()) {
                continue;
            }
            String[] f = line.split(" ");
            switch (f[0]) {
                case "case" -> c = Case.parse(f);
                case "pipe" -> c.steps.add(f);
                case "wall" -> c.steps.add(f);
                case "end" -> {
                    run(c, stateDir, out);
                    out.flush();
                    c = null;
                }
                default -> throw new IllegalArgumentException("unknown line: " + line);
            }
        }
        out.flush();
    }

    /** A case as read: its topology's name and parameters, and its steps. */
    static final class Case {
        String id;
        String op;
        final Map<String, String> params = new HashMap<>();
        final List<String> outputs = new ArrayList<>();
        final List<String[]> steps = new ArrayList<>();

        static Case parse(String[] f) {
            Case c = new Case();
            c.id = f[1];
            c.op = f[2];
            for (int i = 3; i < f.length; i++) {
                String[] kv = f[i].split("=", 2);
                if (kv[0].equals("outputs")) {
                    c.outputs.addAll(List.of(kv[1].split(",")));
                } else {
                    c.params.put(kv[0], kv[1]);
                }
            }
            return c;
        }
    }

    static void run(Case c, Path stateDir, PrintWriter out) {
        out.println("result " + c.id);
        Params p = new Params(c.params);
        StreamsBuilder b = new StreamsBuilder();
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "difftest");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "localhost:9092");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        // The record cache: Kafka Streams' default (10 MiB) or off. The driver
        // commits, and so flushes the cache, after every record it processes.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, p.bool("cache") ? 10L * 1024 * 1024 : 0L);
        // Left and outer stream–stream joins look for non-joined results at
        // most this often by the wall clock (Kafka Streams' default: 1s;
        // TopologyTestDriver's, without it: 0, on every record).
        if (c.params.containsKey("joinemit")) {
            props.put("__emit.interval.ms.kstreams.outer.join.spurious.results.fix__", p.ms("joinemit"));
        }
        // The DSL's stores: RocksDB, Kafka Streams' default, unless the
        // harness asks for the in-memory ones (-Ddifftest.stores=memory).
        if ("memory".equals(System.getProperty("difftest.stores"))) {
            props.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG, BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
        }
        TopologyTestDriver d;
        try {
            Twins.build(c.op, p, b);
            d = new TopologyTestDriver(b.build(props), props, WALL_CLOCK_START);
        } catch (RuntimeException e) {
            out.println("fail -1 " + hex(describe(e)));
            out.println("done");
            return;
        }
        try {
            Map<String, TestInputTopic<byte[], byte[]>> inputs = new HashMap<>();
            Map<String, TestOutputTopic<byte[], byte[]>> outputs = new LinkedHashMap<>();
            for (String t : c.outputs) {
                outputs.put(t, d.createOutputTopic(t, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
            }
            for (int n = 0; n < c.steps.size(); n++) {
                String[] s = c.steps.get(n);
                out.println("step " + n);
                try {
                    if (s[0].equals("pipe")) {
                        TestInputTopic<byte[], byte[]> t = inputs.computeIfAbsent(s[1],
                                name -> d.createInputTopic(name, new ByteArraySerializer(), new ByteArraySerializer()));
                        t.pipeInput(new TestRecord<>(bytes(s[2]), bytes(s[3]), null, Instant.ofEpochMilli(Long.parseLong(s[4]))));
                    } else {
                        d.advanceWallClockTime(Duration.ofMillis(Long.parseLong(s[1])));
                    }
                    for (Map.Entry<String, TestOutputTopic<byte[], byte[]>> e : outputs.entrySet()) {
                        for (TestRecord<byte[], byte[]> r : e.getValue().readRecordsToList()) {
                            out.println("out " + e.getKey() + " " + hexOrNull(r.key()) + " " + hexOrNull(r.value()) + " "
                                    + r.timestamp());
                        }
                    }
                } catch (RuntimeException e) {
                    out.println("fail " + n + " " + hex(describe(e)));
                    break;
                }
            }
        } finally {
            try {
                d.close();
            } catch (RuntimeException e) {
                out.println("fail " + c.steps.size() + " " + hex("close: " + describe(e)));
            }
        }
        out.println("done");
    }

    static String describe(Throwable e) {
        StringBuilder s = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (s.length() > 0) {
                s.append(": ");
            }
            s.append(t.getClass().getSimpleName()).append(' ').append(t.getMessage());
        }
        if (System.getenv("DIFFTEST_STACKS") != null) {
            StringWriter w = new StringWriter();
            e.printStackTrace(new PrintWriter(w));
            s.append('\n').append(w);
        }
        return s.toString();
    }

    static byte[] bytes(String hexOrNull) {
        return hexOrNull.equals("~") ? null : hexOrNull.equals("-") ? new byte[0] : HEX.parseHex(hexOrNull);
    }

    static String hexOrNull(byte[] b) {
        return b == null ? "~" : b.length == 0 ? "-" : HEX.formatHex(b);
    }

    static String hex(String s) {
        return HEX.formatHex(s.getBytes(StandardCharsets.UTF_8));
    }

    /** A case's parameters, with the defaults the Go side also assumes. */
    static final class Params {
        private final Map<String, String> m;

        Params(Map<String, String> m) {
            this.m = m;
        }

        String str(String name) {
            String v = m.get(name);
            if (v == null) {
                throw new IllegalArgumentException("the case has no parameter " + name);
            }
            return v;
        }

        String str(String name, String dflt) {
            return m.getOrDefault(name, dflt);
        }

        long ms(String name) {
            return Long.parseLong(str(name));
        }

        boolean bool(String name) {
            return m.getOrDefault(name, "0").equals("1");
        }
    }
}
