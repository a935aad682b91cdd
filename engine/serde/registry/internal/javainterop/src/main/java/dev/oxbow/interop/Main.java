package dev.oxbow.interop;

import io.apicurio.registry.serde.SerdeConfig;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * produce BROKERS REGISTRY TOPIC N: writes N shoes (key "k<i>", sku "sku-<i>",
 * price 100*i, colour one of three) with the schema in Shoe.avsc's shape.
 * consume BROKERS REGISTRY TOPIC N: reads N records from the start and prints
 * each as "key TAB value" (the value as Avro's JSON text), then exits.
 * REGISTRY is Apicurio's base URL (http://host:port): the serdes use its own
 * API, with Confluent's id handling (the 4-byte content id in the payload).
 */
public final class Main {
    static final String SHOE = "{\"type\":\"record\",\"name\":\"Shoe\",\"namespace\":\"shop\",\"fields\":["
            + "{\"name\":\"sku\",\"type\":\"string\"},"
            + "{\"name\":\"price\",\"type\":\"long\"},"
            + "{\"name\":\"colour\",\"type\":\"string\",\"default\":\"black\"}]}";

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: produce|consume BROKERS REGISTRY TOPIC N");
            System.exit(2);
        }
        String brokers = args[1], registry = args[2] + "/apis/registry/v2", topic = args[3];
        int n = Integer.parseInt(args[4]);
        Properties p = new Properties();
        p.put(SerdeConfig.REGISTRY_URL, registry);
        p.put(SerdeConfig.ENABLE_CONFLUENT_ID_HANDLER, "true");
        p.put(SerdeConfig.USE_ID, "contentId");
        p.put(SerdeConfig.ENABLE_HEADERS, "false");
        if (args[0].equals("produce")) {
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, AvroKafkaSerializer.class.getName());
            p.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, "true");
            Schema schema = new Schema.Parser().parse(SHOE);
            String[] colours = {"black", "tan", "red"};
            try (KafkaProducer<String, GenericRecord> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < n; i++) {
                    GenericRecord shoe = new GenericData.Record(schema);
                    shoe.put("sku", "sku-" + i);
                    shoe.put("price", 100L * i);
                    shoe.put("colour", colours[i % colours.length]);
                    producer.send(new ProducerRecord<>(topic, "k" + i, shoe)).get();
                }
            }
            return;
        }
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "interop-" + topic);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, AvroKafkaDeserializer.class.getName());
        int seen = 0;
        long deadline = System.nanoTime() + Duration.ofMinutes(2).toNanos();
        try (KafkaConsumer<String, GenericRecord> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            while (seen < n) {
                if (System.nanoTime() > deadline) {
                    System.err.println("consume: " + seen + " of " + n + " records after 2 minutes");
                    System.exit(1);
                }
                for (ConsumerRecord<String, GenericRecord> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(r.key() + "\t" + r.value());
                    seen++;
                }
            }
        }
        System.out.flush();
    }
}
