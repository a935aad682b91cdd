package dev.oxbow.difftest;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KGroupedTable;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams twin of every topology of engine/difftest's catalog
 * (engine/difftest/ops.go holds the Oxbow side; a case names one by its op
 * and parameters). The user functions are the catalog's, written once here
 * and once in Go (engine/difftest/funcs.go), and nothing else may differ.
 *
 * <p>Oxbow's typed functions never see a null value or a null key: a null key
 * reaches them as the zero key, "", and a stream record without a value
 * (a tombstone) passes the key-preserving operations unchanged and is dropped
 * by those that need its value (Oxbow's engine package doc lists this among
 * its differences from Kafka Streams). The twins' functions are the null-safe
 * ports that rule implies: {@code z(k)} for the key, a tombstone passes a
 * filter and a value mapper, and a filter of null values goes before a
 * key-changing operation.
 */
final class Twins {
    private Twins() {
    }

    static final Serde<String> S = Serdes.String();
    static final Serde<Long> L = Serdes.Long();
    static final Consumed<String, String> IN = Consumed.with(S, S);
    static final Produced<String, String> OUT = Produced.with(S, S);
    static final Produced<String, Long> OUT_LONG = Produced.with(S, L);

    // ---- the catalog's functions (funcs.go) ----

    /** The key a typed Oxbow function sees: "" for a null key. */
    static String z(String k) {
        return k == null ? "" : k;
    }

    /** The number a value stands for (values are small decimal numbers); 0 when it is none. */
    static int n(String v) {
        try {
            return Integer.parseInt(v);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    static boolean even(String k, String v) {
        return n(v) % 2 == 0;
    }

    static boolean three(String k, String v) {
        return n(v) % 3 == 0;
    }

    /** v starts with an even digit (a join's result whose left value is even). */
    static boolean firstEven(String k, String v) {
        return !v.isEmpty() && v.charAt(0) >= '0' && v.charAt(0) <= '9' && (v.charAt(0) - '0') % 2 == 0;
    }

    static String mapValue(String v) {
        return "m" + v;
    }

    static String newKey(String k, String v) {
        return "k" + n(v) % 3;
    }

    static KeyValue<String, String> mapPair(String k, String v) {
        return KeyValue.pair(newKey(k, v), z(k) + v);
    }

    static List<String> fanValues(String v) {
        return n(v) % 3 == 0 ? List.of() : List.of("a" + v, "b" + v);
    }

    static List<KeyValue<String, String>> fanPairs(String k, String v) {
        return n(v) % 3 == 0 ? List.of() : List.of(KeyValue.pair(z(k), "a" + v), KeyValue.pair("k" + n(v) % 2, "b" + v));
    }

    static String init() {
        return "i";
    }

    static String reduce(String agg, String v) {
        return agg + "+" + v;
    }

    static String aggregate(String k, String v, String agg) {
        return agg + "," + v;
    }

    static String aggregate2(String k, String v, String agg) {
        return agg + "*" + v;
    }

    static String subtract(String agg, String v) {
        return agg + "-" + v;
    }

    static String merge(String k, String a, String b) {
        return a + "|" + b;
    }

    static KeyValue<String, String> regroup(String k, String v) {
        return KeyValue.pair("g" + n(v) % 2, z(k) + v);
    }

    static String join(String l, String r) {
        return (l == null ? "-" : l) + "/" + (r == null ? "-" : r);
    }

    static String foreignKey(String v) {
        return "f" + n(v) % 3;
    }

    // ---- topologies ----

    static void build(String op, Main.Params p, StreamsBuilder b) {
        switch (op) {
            case "filter" -> in(b).filter((k, v) -> v == null || even(z(k), v)).to("out", OUT);
            case "filter-not" -> in(b).filterNot((k, v) -> v != null && even(z(k), v)).to("out", OUT);
            case "map-values" -> in(b).mapValues(v -> v == null ? null : mapValue(v)).to("out", OUT);
            case "flat-map-values" -> in(b)
                    .flatMapValues(v -> v == null ? Collections.singletonList((String) null) : fanValues(v))
                    .to("out", OUT);
            case "map" -> values(in(b)).map(Twins::mapPair).to("out", OUT);
            case "flat-map" -> values(in(b)).flatMap(Twins::fanPairs).to("out", OUT);
            case "select-key" -> values(in(b)).selectKey(Twins::newKey).to("out", OUT);
            case "merge" -> in(b).merge(b.stream("in2", IN)).to("out", OUT);
            case "split" -> {
                Map<String, KStream<String, String>> branches = values(in(b)).split(Named.as("split-"))
                        .branch((k, v) -> even(z(k), v), Branched.as("even"))
                        .branch((k, v) -> three(z(k), v), Branched.as("three"))
                        .defaultBranch(Branched.as("rest"));
                branches.get("split-even").to("out", OUT);
                branches.get("split-three").to("out-three", OUT);
                branches.get("split-rest").to("out-rest", OUT);
            }
            case "repartition" -> (p.bool("rekey") ? values(in(b)).selectKey(Twins::newKey) : in(b))
                    .repartition(Repartitioned.with(S, S)).to("out", OUT);
            case "to-table" -> {
                KTable<String, String> t = p.bool("materialized")
                        ? in(b).toTable(Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("t").withKeySerde(S).withValueSerde(S))
                        : in(b).toTable();
                t.toStream().to("out", OUT);
            }
            case "count", "reduce", "aggregate" -> {
                KGroupedStream<String, String> g = p.bool("rekey")
                        ? values(in(b)).groupBy(Twins::newKey, Grouped.with(S, S))
                        : in(b).groupByKey(Grouped.with(S, S));
                switch (op) {
                    case "count" -> g.count().toStream().to("out", OUT_LONG);
                    case "reduce" -> g.reduce(Twins::reduce).toStream().to("out", OUT);
                    default -> g.aggregate(Twins::init, Twins::aggregate, Materialized.with(S, S)).toStream().to("out", OUT);
                }
            }
            case "table-source" -> table(b, "in", p.bool("materialized") ? "t" : null).toStream().to("out", OUT);
            case "table-filter" -> {
                KTable<String, String> t = table(b, "in", p.bool("srcmat") ? "t" : null);
                boolean not = p.bool("not");
                KTable<String, String> f = p.bool("materialized")
                        ? (not ? t.filterNot(Twins::even, store("f")) : t.filter(Twins::even, store("f")))
                        : (not ? t.filterNot(Twins::even) : t.filter(Twins::even));
                f.toStream().to("out", OUT);
            }
            case "table-filter-count" -> table(b, "in", p.bool("srcmat") ? "t" : null).filter(Twins::even)
                    .groupBy(Twins::regroup, Grouped.with(S, S)).count().toStream().to("out", OUT_LONG);
            case "table-source-shared" -> {
                KTable<String, String> t = table(b, "in", null);
                t.toStream().to("out", OUT);
                t.join(table(b, "in2", null), Twins::join).toStream().to("out2", OUT);
            }
            case "table-map-values" -> {
                KTable<String, String> t = table(b, "in", p.bool("srcmat") ? "t" : null);
                KTable<String, String> m = p.bool("materialized")
                        ? t.mapValues(Twins::mapValue, Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("m").withKeySerde(S).withValueSerde(S))
                        : t.mapValues(Twins::mapValue);
                m.toStream().to("out", OUT);
            }
            case "table-count", "table-reduce", "table-aggregate" -> {
                KGroupedTable<String, String> g = table(b, "in", null).groupBy(Twins::regroup, Grouped.with(S, S));
                switch (op) {
                    case "table-count" -> g.count().toStream().to("out", OUT_LONG);
                    case "table-reduce" -> g.reduce(Twins::reduce, Twins::subtract).toStream().to("out", OUT);
                    default -> g.aggregate(Twins::init, Twins::aggregate, (k, v, agg) -> subtract(agg, v), Materialized.with(S, S))
                            .toStream().to("out", OUT);
                }
            }
            case "table-suppress" -> {
                Suppressed<String> until = Suppressed.untilTimeLimit(Duration.ofMillis(p.ms("limit")), Suppressed.BufferConfig.unbounded());
                if (p.str("source").equals("count")) {
                    in(b).groupByKey(Grouped.with(S, S)).count().suppress(until).toStream().to("out", OUT_LONG);
                } else if (p.str("source").equals("filter")) {
                    table(b, "in", null).filter(Twins::even).suppress(until).toStream().to("out", OUT);
                } else {
                    table(b, "in", null).suppress(until).toStream().to("out", OUT);
                }
            }
            case "cogroup" -> in(b).groupByKey(Grouped.with(S, S)).cogroup(Twins::aggregate)
                    .cogroup(b.stream("in2", IN).groupByKey(Grouped.with(S, S)), Twins::aggregate2)
                    .aggregate(Twins::init, Materialized.with(S, S)).toStream().to("out", OUT);
            case "cogroup-window" -> cogroupWindow(p, b);
            case "window" -> window(p, b);
            case "stream-join" -> streamJoin(p, b);
            case "table-join" -> tableJoin(p, b);
            case "join-tables" -> {
                KTable<String, String> l = table(b, "in", null);
                KTable<String, String> r = table(b, "in2", null);
                KTable<String, String> j = switch (p.str("kind")) {
                    case "inner" -> l.join(r, Twins::join);
                    case "left" -> l.leftJoin(r, Twins::join);
                    default -> l.outerJoin(r, Twins::join);
                };
                j.toStream().to("out", OUT);
            }
            case "join-tables-filtered" -> {
                KTable<String, String> l = p.bool("lmat") ? table(b, "in", null).filter(Twins::even, store("lf"))
                        : table(b, "in", null).filter(Twins::even);
                KTable<String, String> r = table(b, "in2", null);
                if (p.bool("rfilter")) {
                    r = r.filterNot(Twins::three);
                }
                KTable<String, String> j = switch (p.str("kind")) {
                    case "inner" -> l.join(r, Twins::join);
                    case "left" -> l.leftJoin(r, Twins::join);
                    default -> l.outerJoin(r, Twins::join);
                };
                if (p.bool("post")) {
                    j = p.bool("postmat") ? j.filter(Twins::firstEven, store("pf")) : j.filter(Twins::firstEven);
                }
                j.toStream().to("out", OUT);
            }
            case "join-foreign-key" -> {
                KTable<String, String> l = table(b, "in", null);
                KTable<String, String> r = table(b, "in2", null);
                if (p.bool("lfilter")) {
                    l = l.filterNot(Twins::three);
                }
                boolean inner = p.str("kind").equals("inner");
                KTable<String, String> j = p.bool("materialized")
                        ? (inner ? l.join(r, Twins::foreignKey, Twins::join, store("fk"))
                                : l.leftJoin(r, Twins::foreignKey, Twins::join, store("fk")))
                        : (inner ? l.join(r, Twins::foreignKey, Twins::join) : l.leftJoin(r, Twins::foreignKey, Twins::join));
                j.toStream().to("out", OUT);
            }
            case "join-global" -> {
                GlobalKTable<String, String> g = b.globalTable("global", IN);
                KStream<String, String> s = in(b);
                KStream<String, String> j = p.str("kind").equals("inner")
                        ? s.join(g, (k, v) -> foreignKey(v), Twins::join)
                        : s.leftJoin(g, (k, v) -> foreignKey(v), Twins::join);
                j.to("out", OUT);
            }
            default -> throw new IllegalArgumentException("no twin for op " + op);
        }
    }

    static KStream<String, String> in(StreamsBuilder b) {
        return b.stream("in", IN);
    }

    /** The records with a value: what an Oxbow operation that needs the value acts on. */
    static KStream<String, String> values(KStream<String, String> s) {
        return s.filter((k, v) -> v != null);
    }

    /** A key-value store of the given name, with the catalog's serdes. */
    static Materialized<String, String, KeyValueStore<Bytes, byte[]>> store(String name) {
        return Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(name).withKeySerde(S).withValueSerde(S);
    }

    static KTable<String, String> table(StreamsBuilder b, String topic, String store) {
        if (store == null) {
            return b.table(topic, IN);
        }
        return b.table(topic, IN, Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(store).withKeySerde(S).withValueSerde(S));
    }

    /**
     * Windowed aggregations: kind tumbling|hopping|sliding|session, size,
     * advance, gap, grace (0: none), retention (the store's; 0: the
     * default), agg count|reduce|aggregate, emit update|final (emit strategy
     * on window close)|suppress (suppress until the window closes). The
     * output key is the windowed key in Kafka Streams' windowed serde: the
     * key then the window's start (time windows), or the key, the end and
     * the start (sessions).
     */
    static void window(Main.Params p, StreamsBuilder b) {
        String kind = p.str("kind");
        String agg = p.str("agg");
        boolean final_ = p.str("emit", "update").equals("final");
        Duration grace = Duration.ofMillis(p.ms("grace"));
        // Kafka Streams hands records without a value to windowed aggregators
        // (and counts them); an Oxbow function cannot take one.
        KStream<String, String> s = agg.equals("count") ? in(b) : values(in(b));
        KGroupedStream<String, String> g = s.groupByKey(Grouped.with(S, S));
        Serde<Windowed<String>> ks;
        if (kind.equals("session")) {
            ks = WindowedSerdes.sessionWindowedSerdeFrom(String.class);
            SessionWindowedKStream<String, String> w = g.windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(p.ms("gap")), grace));
            if (final_) {
                w = w.emitStrategy(EmitStrategy.onWindowClose());
            }
            switch (agg) {
                case "count" -> windowSink(p, w.count(sessionStore(p, L)), ks, L);
                case "reduce" -> windowSink(p, w.reduce(Twins::reduce, sessionStore(p, S)), ks, S);
                default -> windowSink(p, w.aggregate(Twins::init, Twins::aggregate, Twins::merge, sessionStore(p, S)), ks, S);
            }
            return;
        }
        ks = WindowedSerdes.timeWindowedSerdeFrom(String.class, p.ms("size"));
        Duration size = Duration.ofMillis(p.ms("size"));
        TimeWindowedKStream<String, String> w = switch (kind) {
            case "tumbling" -> g.windowedBy(TimeWindows.ofSizeAndGrace(size, grace));
            case "hopping" -> g.windowedBy(TimeWindows.ofSizeAndGrace(size, grace).advanceBy(Duration.ofMillis(p.ms("advance"))));
            default -> g.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(size, grace));
        };
        if (final_) {
            w = w.emitStrategy(EmitStrategy.onWindowClose());
        }
        switch (agg) {
            case "count" -> windowSink(p, w.count(windowStore(p, L)), ks, L);
            case "reduce" -> windowSink(p, w.reduce(Twins::reduce, windowStore(p, S)), ks, S);
            default -> windowSink(p, w.aggregate(Twins::init, Twins::aggregate, windowStore(p, S)), ks, S);
        }
    }

    /** The window store of a windowed aggregation: the retention parameter's, if not 0. */
    static <V> Materialized<String, V, WindowStore<Bytes, byte[]>> windowStore(Main.Params p, Serde<V> vs) {
        Materialized<String, V, WindowStore<Bytes, byte[]>> m = Materialized.with(S, vs);
        return p.ms("retention") > 0 ? m.withRetention(Duration.ofMillis(p.ms("retention"))) : m;
    }

    /** The session store of a session aggregation: the retention parameter's, if not 0. */
    static <V> Materialized<String, V, SessionStore<Bytes, byte[]>> sessionStore(Main.Params p, Serde<V> vs) {
        Materialized<String, V, SessionStore<Bytes, byte[]>> m = Materialized.with(S, vs);
        return p.ms("retention") > 0 ? m.withRetention(Duration.ofMillis(p.ms("retention"))) : m;
    }

    /**
     * Windowed cogroups: kind tumbling|hopping|sliding|session and the
     * window parameters of window(); the records with a value of "in" and
     * "in2", each with its own aggregator.
     */
    static void cogroupWindow(Main.Params p, StreamsBuilder b) {
        CogroupedKStream<String, String> c = values(in(b)).groupByKey(Grouped.with(S, S)).cogroup(Twins::aggregate)
                .cogroup(values(b.stream("in2", IN)).groupByKey(Grouped.with(S, S)), Twins::aggregate2);
        Duration grace = Duration.ofMillis(p.ms("grace"));
        Duration size = Duration.ofMillis(p.ms("size"));
        KTable<Windowed<String>, String> t = switch (p.str("kind")) {
            case "session" -> c.windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(p.ms("gap")), grace))
                    .aggregate(Twins::init, Twins::merge, sessionStore(p, S));
            case "tumbling" -> c.windowedBy(TimeWindows.ofSizeAndGrace(size, grace)).aggregate(Twins::init, windowStore(p, S));
            case "hopping" -> c.windowedBy(TimeWindows.ofSizeAndGrace(size, grace).advanceBy(Duration.ofMillis(p.ms("advance"))))
                    .aggregate(Twins::init, windowStore(p, S));
            default -> c.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(size, grace)).aggregate(Twins::init, windowStore(p, S));
        };
        Serde<Windowed<String>> ks = p.str("kind").equals("session")
                ? WindowedSerdes.sessionWindowedSerdeFrom(String.class)
                : WindowedSerdes.timeWindowedSerdeFrom(String.class, p.ms("size"));
        t.toStream().to("out", Produced.with(ks, S));
    }

    /** Writes a windowed table's changes to "out", suppressed until its windows close with emit=suppress. */
    static <V> void windowSink(Main.Params p, KTable<Windowed<String>, V> t, Serde<Windowed<String>> ks, Serde<V> vs) {
        if (p.str("emit", "update").equals("suppress")) {
            t = t.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
        }
        t.toStream().to("out", Produced.with(ks, vs));
    }

    /** Stream–stream joins: kind inner|left|outer, before, after, grace. */
    static void streamJoin(Main.Params p, StreamsBuilder b) {
        JoinWindows w = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(p.ms("before")), Duration.ofMillis(p.ms("grace")))
                .after(Duration.ofMillis(p.ms("after")));
        KStream<String, String> l = in(b);
        KStream<String, String> r = b.stream("in2", IN);
        StreamJoined<String, String, String> sj = StreamJoined.with(S, S, S);
        KStream<String, String> j = switch (p.str("kind")) {
            case "inner" -> l.join(r, Twins::join, w, sj);
            case "left" -> l.leftJoin(r, Twins::join, w, sj);
            default -> l.outerJoin(r, Twins::join, w, sj);
        };
        j.to("out", OUT);
    }

    /** Stream–table joins: kind inner|left, history (0: not versioned), grace (0: none). */
    static void tableJoin(Main.Params p, StreamsBuilder b) {
        long history = p.ms("history");
        KTable<String, String> t = history == 0
                ? b.table("table", IN)
                : b.table("table", IN, Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore("t", Duration.ofMillis(history)))
                        .withKeySerde(S).withValueSerde(S));
        Joined<String, String, String> joined = Joined.with(S, S, S);
        if (p.ms("grace") > 0) {
            joined = joined.withGracePeriod(Duration.ofMillis(p.ms("grace")));
        }
        KStream<String, String> s = in(b);
        KStream<String, String> j = p.str("kind").equals("inner")
                ? s.join(t, Twins::join, joined)
                : s.leftJoin(t, Twins::join, joined);
        j.to("out", OUT);
    }
}
