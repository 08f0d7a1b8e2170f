package peers;

import java.util.*;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

/**
 * Kafka Streams' word count, exactly-once v2: lines from IN, word,count
 * upserts (keyed by the word) to OUT.
 *
 *   StreamsWordCount BOOTSTRAP IN OUT APP_ID THREADS COMMIT_MS STATE_DIR
 *
 * Runs until SIGTERM (the bench stops it once the verifier saw the
 * oracle).
 */
public final class StreamsWordCount {
    public static void main(String[] a) throws Exception {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(a[1], Consumed.with(Serdes.ByteArray(), Serdes.String()))
                .flatMapValues(line -> {
                    List<String> out = new ArrayList<>();
                    Words.each(line, out::add);
                    return out;
                })
                .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
                .count()
                .toStream()
                .mapValues((w, n) -> w + "," + n)
                .to(a[2], Produced.with(Serdes.String(), Serdes.String()));
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a[3]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a[4]);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a[5]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a[6]);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
