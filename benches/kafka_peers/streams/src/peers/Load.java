package peers;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

/**
 * The bench's input and oracle.
 *
 *   Load produce BOOTSTRAP TOPIC PARTITIONS WORDS VOCAB WORDS_PER_LINE SEED
 *       creates TOPIC and writes WORDS seeded words in lines; prints the
 *       broker's produce rate.
 *   Load consume BOOTSTRAP TOPIC ORACLE_FILE
 *       reads TOPIC read_committed to its end, counts its words (the
 *       oracle, written as sorted word,count lines); prints the broker's
 *       consume rate.
 *   Load topic BOOTSTRAP TOPIC PARTITIONS    creates an empty topic.
 */
public final class Load {
    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "produce" -> produce(a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4]),
                    Integer.parseInt(a[5]), Integer.parseInt(a[6]), Long.parseLong(a[7]));
            case "consume" -> consume(a[1], a[2], Path.of(a[3]));
            case "topic" -> createTopic(a[1], a[2], Integer.parseInt(a[3]));
            default -> throw new IllegalArgumentException("unknown mode " + a[0]);
        }
    }

    static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)
                    .configs(Map.of("retention.ms", "-1")))).all().get();
        }
    }

    /** Word i of the vocabulary: i in base 26 over a..z, at least three letters. */
    static String word(int i) {
        StringBuilder b = new StringBuilder();
        do {
            b.append((char) ('a' + i % 26));
            i /= 26;
        } while (i > 0 || b.length() < 3);
        return b.toString();
    }

    static void produce(String bootstrap, String topic, int partitions, long words, int vocab,
            int perLine, long seed) throws Exception {
        createTopic(bootstrap, topic, partitions);
        String[] vocabulary = new String[vocab];
        for (int i = 0; i < vocab; i++) vocabulary[i] = word(i);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(256 * 1024));
        Random rng = new Random(seed);
        long t0 = System.nanoTime();
        long lines = 0;
        long bytes = 0;
        try (KafkaProducer<byte[], String> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new StringSerializer())) {
            StringBuilder line = new StringBuilder();
            for (long w = 0; w < words; ) {
                line.setLength(0);
                for (int k = 0; k < perLine && w < words; k++, w++) {
                    if (k > 0) line.append(' ');
                    line.append(vocabulary[rng.nextInt(vocab)]);
                }
                String s = line.toString();
                bytes += s.length();
                lines++;
                producer.send(new ProducerRecord<>(topic, null, s));
            }
            producer.flush();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        System.out.printf("RESULT engine=broker-produce records=%d lines=%d bytes=%d secs=%.2f rate_per_s=%.0f%n",
                words, lines, bytes, secs, words / secs);
    }

    static void consume(String bootstrap, String topic, Path oracle) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        Map<String, long[]> counts = new HashMap<>();
        long words = 0;
        long t0 = System.nanoTime();
        try (KafkaConsumer<byte[], String> c =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new StringDeserializer())) {
            List<TopicPartition> parts = new ArrayList<>();
            c.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            while (parts.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                for (ConsumerRecord<byte[], String> r : c.poll(Duration.ofMillis(200))) {
                    long[] n = new long[1];
                    Words.each(r.value(), w -> {
                        counts.computeIfAbsent(w, k -> new long[1])[0]++;
                        n[0]++;
                    });
                    words += n[0];
                }
            }
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(oracle))) {
            new TreeMap<>(counts).forEach((w, n) -> out.println(w + "," + n[0]));
        }
        System.out.printf("RESULT engine=broker-consume records=%d distinct=%d secs=%.2f rate_per_s=%.0f%n",
                words, counts.size(), secs, words / secs);
    }
}
