package peers;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

/**
 * Tails an output topic of word,count upserts read_committed and waits
 * until the newest count of every word equals the oracle.
 *
 *   Verify BOOTSTRAP TOPIC ORACLE_FILE START_EPOCH_MS TIMEOUT_S ENGINE
 *
 * Prints `RESULT engine=E e2e_ms=… out_records=… agree=true` when the
 * committed output equals the oracle: e2e_ms runs from START_EPOCH_MS (the
 * system's start) to the poll that brought the last missing update, so it
 * spans first record in to last committed record out. Exits 1 with
 * `agree=false` and the first difference when TIMEOUT_S passes first.
 */
public final class Verify {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        Map<String, Long> oracle = new HashMap<>();
        long total = 0;
        for (String line : Files.readAllLines(Path.of(a[2]))) {
            int c = line.lastIndexOf(',');
            long n = Long.parseLong(line.substring(c + 1));
            oracle.put(line.substring(0, c), n);
            total += n;
        }
        long start = Long.parseLong(a[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(a[4]) * 1000;
        String engine = a[5];
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "500");
        Map<String, Long> latest = new HashMap<>();
        long sum = 0;
        long records = 0;
        try (KafkaConsumer<byte[], String> c =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new StringDeserializer())) {
            List<TopicPartition> parts = new ArrayList<>();
            while (parts.isEmpty() && System.currentTimeMillis() < deadline) {
                var infos = c.partitionsFor(topic);
                if (infos != null) infos.forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
                if (parts.isEmpty()) Thread.sleep(100);
            }
            c.assign(parts);
            c.seekToBeginning(parts);
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], String> r : c.poll(Duration.ofMillis(100))) {
                    records++;
                    String v = r.value();
                    int comma = v.lastIndexOf(',');
                    String w = v.substring(0, comma);
                    long n = Long.parseLong(v.substring(comma + 1));
                    Long old = latest.put(w, n);
                    sum += n - (old == null ? 0 : old);
                }
                if (sum == total && latest.equals(oracle)) {
                    long e2e = System.currentTimeMillis() - start;
                    System.out.printf("RESULT engine=%s e2e_ms=%d records=%d out_records=%d rps_e2e=%.0f agree=true%n",
                            engine, e2e, total, records, total * 1000.0 / e2e);
                    return;
                }
            }
        }
        String diff = oracle.entrySet().stream()
                .filter(e -> !e.getValue().equals(latest.get(e.getKey())))
                .map(e -> e.getKey() + " expected " + e.getValue() + " got " + latest.get(e.getKey()))
                .findFirst().orElse("extra words " + (latest.size() - oracle.size()));
        System.out.printf("RESULT engine=%s agree=false sum=%d expected=%d out_records=%d first_difference=\"%s\"%n",
                engine, sum, total, records, diff);
        System.exit(1);
    }
}
