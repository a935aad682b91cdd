package dev.oxbow.bench;

import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The stateless topology's work as a plain Java client loop, a baseline for
 * Kafka Streams: {@code --threads} threads, each with its own KafkaConsumer (one
 * group, which splits the partitions between them) and KafkaProducer, keep the
 * records whose value's byte 8 is even and write their first 16 bytes to the
 * same partition of the output.
 *
 * <p>At least once, a thread produces without waiting and every commit interval
 * (and whenever a poll comes back empty with records uncommitted) flushes its
 * producer and commits the positions it consumed; before it gives partitions
 * up it does the same. Exactly once, each thread's producer is transactional
 * ({@code <app-id>-<thread>}, fenced per thread as KIP-447 allows) and the
 * consumer reads committed: a transaction is opened at the first record, and
 * every commit interval (and before partitions are given up) the positions go
 * into it and it commits.
 *
 * <p>The process protocol is KStreamsBench's: RUNNING once every thread has
 * partitions, SIGTERM/SIGINT closes and exits 0 (an open transaction is
 * aborted), exit 1 on a failure.
 */
final class ClientLoop {

    private final KStreamsBench.Options o;
    private final AtomicBoolean running = new AtomicBoolean(true);
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    private final CountDownLatch assigned;
    private final CountDownLatch done;
    private final List<KafkaConsumer<byte[], byte[]>> consumers = new ArrayList<>();

    private ClientLoop(KStreamsBench.Options o) {
        this.o = o;
        this.assigned = new CountDownLatch(o.threads());
        this.done = new CountDownLatch(o.threads());
    }

    static int run(KStreamsBench.Options o) {
        return new ClientLoop(o).runLoops();
    }

    private int runLoops() {
        PrintStream out = System.out;
        PrintStream err = System.err;
        err.printf("kstreams-bench: client loop, %d threads, guarantee=%s commit-ms=%d input=%s output=%s "
                        + "batch.size=%s linger.ms=%s compression.type=%s max.poll.records=%s%n",
                o.threads(), o.guarantee(), o.commitMs(), o.input(), o.output(),
                o.batchBytes() > 0 ? o.batchBytes() : "default", o.lingerMs() >= 0 ? o.lingerMs() : "default",
                o.compression() != null ? o.compression() : "default",
                o.maxPollRecords() > 0 ? o.maxPollRecords() : "default");
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < o.threads(); i++) {
            KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig());
            consumers.add(consumer);
            int n = i;
            Thread t = new Thread(() -> loop(n, consumer), "client-loop-" + i);
            threads.add(t);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop();
            try {
                done.await(KStreamsBench.CLOSE_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // halting anyway
            }
            out.flush();
            err.flush();
            Runtime.getRuntime().halt(failure.get() == null ? KStreamsBench.EXIT_OK : KStreamsBench.EXIT_FAILED);
        }, "client-loop-shutdown"));
        threads.forEach(Thread::start);
        try {
            while (!assigned.await(100, TimeUnit.MILLISECONDS)) {
                if (done.getCount() < o.threads()) {
                    break; // a thread failed before every thread had partitions
                }
            }
            if (assigned.getCount() == 0) {
                out.println("RUNNING");
                out.flush();
            }
            done.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        Throwable t = failure.get();
        if (t != null) {
            err.println("kstreams-bench: client loop failed: " + t);
            t.printStackTrace(err);
            err.flush();
            Runtime.getRuntime().halt(KStreamsBench.EXIT_FAILED);
        }
        return KStreamsBench.EXIT_OK;
    }

    private void stop() {
        running.set(false);
        for (KafkaConsumer<byte[], byte[]> c : consumers) {
            c.wakeup();
        }
    }

    private Properties consumerConfig() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, o.brokers());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, o.appId());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        if (o.maxPollRecords() > 0) {
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, (int) o.maxPollRecords());
        }
        if (eos()) {
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        }
        return p;
    }

    private Properties producerConfig(int thread) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, o.brokers());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        if (o.batchBytes() > 0) {
            p.put(ProducerConfig.BATCH_SIZE_CONFIG, (int) o.batchBytes());
        }
        if (o.lingerMs() >= 0) {
            p.put(ProducerConfig.LINGER_MS_CONFIG, (int) o.lingerMs());
        }
        if (o.compression() != null) {
            p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, o.compression());
        }
        if (eos()) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, o.appId() + "-" + thread);
        }
        return p;
    }

    private boolean eos() {
        return o.guarantee().equals("eos");
    }

    /** One thread's consume-transform-produce loop. */
    private void loop(int thread, KafkaConsumer<byte[], byte[]> consumer) {
        AtomicReference<Exception> sendError = new AtomicReference<>();
        try (consumer; KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(thread))) {
            State s = new State(consumer, producer, sendError);
            if (eos()) {
                producer.initTransactions();
            }
            AtomicBoolean counted = new AtomicBoolean();
            consumer.subscribe(List.of(o.input()), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    if (running.get()) { // not when closing: see the end of the loop
                        s.commit(consumer.assignment());
                    }
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    if (!partitions.isEmpty() && counted.compareAndSet(false, true)) {
                        assigned.countDown();
                    }
                }
            });
            long last = System.nanoTime();
            while (running.get()) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    byte[] v = r.value();
                    if (v != null && v.length > 8 && (v[8] & 1) == 0) {
                        s.begin();
                        producer.send(new ProducerRecord<>(o.output(), r.partition(), r.timestamp(), r.key(), Arrays.copyOf(v, 16)),
                                (md, e) -> {
                                    if (e != null) {
                                        sendError.compareAndSet(null, e);
                                    }
                                });
                    }
                    s.pending = true;
                }
                long now = System.nanoTime();
                if (s.pending && (now - last >= TimeUnit.MILLISECONDS.toNanos(o.commitMs()) || (records.isEmpty() && !eos()))) {
                    s.commit(consumer.assignment());
                    last = now;
                }
            }
            if (eos()) {
                s.abort(); // consumed again by the next run
            } else {
                s.commit(consumer.assignment());
            }
        } catch (Throwable t) {
            if (running.get()) {
                failure.compareAndSet(null, t);
                stop();
            }
        } finally {
            done.countDown();
        }
    }

    /** A thread's producer and what it has not committed yet. */
    private final class State {
        final KafkaConsumer<byte[], byte[]> consumer;
        final KafkaProducer<byte[], byte[]> producer;
        final AtomicReference<Exception> sendError;
        boolean pending; // records consumed since the last commit
        boolean inTransaction;

        State(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer, AtomicReference<Exception> sendError) {
            this.consumer = consumer;
            this.producer = producer;
            this.sendError = sendError;
        }

        void begin() {
            if (eos() && !inTransaction) {
                producer.beginTransaction();
                inTransaction = true;
            }
        }

        /** Commits what was consumed of these partitions (and, exactly once, the open transaction). */
        void commit(Collection<TopicPartition> partitions) {
            if (!pending || partitions.isEmpty()) {
                return;
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : partitions) {
                offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            }
            if (eos()) {
                begin();
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                inTransaction = false;
            } else {
                producer.flush();
                Exception e = sendError.get();
                if (e != null) {
                    throw new IllegalStateException("producing to " + o.output() + ": " + e, e);
                }
                consumer.commitSync(offsets);
            }
            pending = false;
        }

        void abort() {
            if (inTransaction) {
                producer.abortTransaction();
                inTransaction = false;
            }
            pending = false;
        }
    }
}
