// The Java client (org.apache.kafka:kafka-clients) against `gregor dev`: the AdminClient creates
// a 3-partition topic, an idempotent producer sends N keyed messages with acks=all, and a
// consumer in a group (manual commitSync) reads every message back exactly once, value intact.
// Prints one `compared ...` line that realnet/tests/java_client.rs checks; bounded by
// TIMEOUT_SECONDS.
//
// usage: java -cp 'lib/*' GregorInterop.java BOOTSTRAP TOPIC N TIMEOUT_SECONDS

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class GregorInterop {
    static void fail(String why) {
        System.err.println("FAIL: " + why);
        System.exit(1);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[3]));

        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "15000");
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }

        Map<String, String> sent = new HashMap<>();
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("acks", "all");
        pp.put("enable.idempotence", "true");
        pp.put("linger.ms", "5");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < n; i++) {
                String key = "key-" + i, value = "value-" + i + "-" + "x".repeat(i % 50);
                sent.put(key, value);
                producer.send(new ProducerRecord<>(topic, key, value));
            }
            producer.flush();
        }

        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("group.id", topic + "-group");
        cp.put("group.protocol", "classic");
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        Map<String, String> seen = new HashMap<>();
        Set<Integer> partitions = new TreeSet<>();
        int duplicates = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            while (seen.size() < n) {
                if (System.nanoTime() > deadline) fail("timed out with " + seen.size() + " of " + n + " read");
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    if (seen.put(r.key(), r.value()) != null) duplicates++;
                    partitions.add(r.partition());
                }
                consumer.commitSync();
            }
        }
        if (duplicates != 0) fail(duplicates + " duplicates");
        if (!seen.equals(sent)) fail("consumed messages differ from the produced ones");
        System.out.println("java kafka-clients: compared " + n + " messages across " + partitions.size()
            + " partitions through a consumer group");
    }
}
