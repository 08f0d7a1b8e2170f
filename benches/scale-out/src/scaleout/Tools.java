package scaleout;

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
 * The scale-out bench's input, oracle, verifier and group watcher.
 *
 *   Tools produce BOOTSTRAP TOPIC PARTITIONS WORDS VOCAB WORDS_PER_LINE SEED ORACLE
 *       creates TOPIC and writes WORDS seeded words from a VOCAB-word
 *       vocabulary, WORDS_PER_LINE to a line, line i to partition
 *       i mod PARTITIONS (acks=all); writes the oracle (word,count lines,
 *       counted as the lines are generated) and prints one RESULT line.
 *   Tools topic BOOTSTRAP TOPIC PARTITIONS
 *       creates an empty topic.
 *   Tools verify BOOTSTRAP TOPIC ORACLE TIMEOUT_S
 *       reads TOPIC read_committed from its start (values `word,count`)
 *       and keeps the highest count seen per word (counts only grow, and
 *       a word's updates may sit in several partitions after it moved);
 *       prints `complete_at_ms=U out_records=N` at the poll that brought
 *       the last missing final count (U: ms since the epoch). Exits 1 on a
 *       count above the oracle's, or on the timeout.
 *   Tools watch BOOTSTRAP GROUP
 *       polls the consumer group's description every 50 ms until killed;
 *       prints `group at_ms=U state=S members=N` at each change.
 */
public final class Tools {
    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "produce" -> produce(a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4]),
                    Integer.parseInt(a[5]), Integer.parseInt(a[6]), Long.parseLong(a[7]), Path.of(a[8]));
            case "topic" -> createTopic(a[1], a[2], Integer.parseInt(a[3]));
            case "verify" -> verify(a[1], a[2], Path.of(a[3]), Long.parseLong(a[4]));
            case "watch" -> watch(a[1], a[2]);
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
            int perLine, long seed, Path oracle) throws Exception {
        createTopic(bootstrap, topic, partitions);
        String[] vocabulary = new String[vocab];
        for (int i = 0; i < vocab; i++) vocabulary[i] = word(i);
        long[] counts = new long[vocab];
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
                    int i = rng.nextInt(vocab);
                    counts[i]++;
                    line.append(vocabulary[i]);
                }
                String s = line.toString();
                bytes += s.length();
                producer.send(new ProducerRecord<>(topic, (int) (lines % partitions), null, s));
                lines++;
            }
            producer.flush();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(oracle))) {
            for (int i = 0; i < vocab; i++) if (counts[i] > 0) out.println(vocabulary[i] + "," + counts[i]);
        }
        System.out.printf("RESULT what=produce topic=%s partitions=%d words=%d lines=%d bytes=%d secs=%.2f%n",
                topic, partitions, words, lines, bytes, secs);
    }

    static void verify(String bootstrap, String topic, Path oracleFile, long timeoutS) throws Exception {
        Map<String, Long> oracle = new HashMap<>();
        for (String line : Files.readAllLines(oracleFile)) {
            int c = line.lastIndexOf(',');
            oracle.put(line.substring(0, c), Long.parseLong(line.substring(c + 1)));
        }
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        Map<String, Long> best = new HashMap<>();
        int missing = oracle.size();
        long records = 0;
        try (KafkaConsumer<byte[], String> c =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new StringDeserializer())) {
            List<TopicPartition> parts = new ArrayList<>();
            c.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
            c.assign(parts);
            c.seekToBeginning(parts);
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], String> r : c.poll(Duration.ofMillis(50))) {
                    records++;
                    String v = r.value();
                    int comma = v.lastIndexOf(',');
                    String w = v.substring(0, comma);
                    long n = Long.parseLong(v.substring(comma + 1));
                    Long want = oracle.get(w);
                    if (want == null || n > want) {
                        System.out.printf("RESULT what=verify agree=false word=%s count=%d expected=%s%n", w, n, want);
                        System.exit(1);
                    }
                    Long old = best.get(w);
                    if (old == null || n > old) {
                        best.put(w, n);
                        if (n == (long) want) missing--;
                    }
                }
                if (missing == 0) {
                    System.out.printf("RESULT what=verify agree=true complete_at_ms=%d out_records=%d%n",
                            System.currentTimeMillis(), records);
                    return;
                }
            }
        }
        System.out.printf("RESULT what=verify agree=false missing=%d out_records=%d%n", missing, records);
        System.exit(1);
    }

    static void watch(String bootstrap, String group) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            String last = "";
            while (true) {
                String now;
                try {
                    ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                            .describedGroups().get(group).get();
                    now = "state=" + d.groupState() + " members=" + d.members().size();
                } catch (Exception e) {
                    now = "state=unknown members=0";
                }
                if (!now.equals(last)) {
                    System.out.println("group at_ms=" + System.currentTimeMillis() + " " + now);
                    last = now;
                }
                Thread.sleep(50);
            }
        }
    }
}
