package scaleout;

import java.util.*;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.processor.api.*;

/**
 * Kafka Streams' word count with a repartition by word, exactly-once v2:
 * lines from IN, `word,count` upserts keyed by the word to OUT.
 *
 *   StreamsWordCount BOOTSTRAP IN OUT APP_ID THREADS COMMIT_MS STATE_DIR SESSION_TIMEOUT_MS
 *
 * Prints on stdout (U: ms since the epoch):
 *   `state FROM->TO at_ms=U`                          each state change
 *   `task_init stage=S task=T at_ms=U`                a task's processor opened here
 *   `first_record stage=S task=T partition=P at_ms=U` its first record here
 *   `task_close stage=S task=T at_ms=U`
 * with S `in` (the input's subtopology, before the words are split) or
 * `count` (the repartition topic's, before the count). Runs until SIGTERM.
 */
public final class StreamsWordCount {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** Passes records on; reports the task's first record. */
    static final class Marker<V> implements FixedKeyProcessor<String, V, V> {
        private final String stage;
        private FixedKeyProcessorContext<String, V> ctx;
        private boolean seen;

        Marker(String stage) {
            this.stage = stage;
        }

        @Override
        public void init(FixedKeyProcessorContext<String, V> context) {
            ctx = context;
            say("task_init stage=" + stage + " task=" + context.taskId() + " at_ms=" + System.currentTimeMillis());
        }

        @Override
        public void process(FixedKeyRecord<String, V> r) {
            if (!seen) {
                seen = true;
                int partition = ctx.recordMetadata().map(m -> m.partition()).orElse(-1);
                say("first_record stage=" + stage + " task=" + ctx.taskId() + " partition=" + partition
                        + " at_ms=" + System.currentTimeMillis());
            }
            ctx.forward(r);
        }

        @Override
        public void close() {
            say("task_close stage=" + stage + " task=" + ctx.taskId() + " at_ms=" + System.currentTimeMillis());
        }
    }

    public static void main(String[] a) throws Exception {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(a[1], Consumed.with(Serdes.String(), Serdes.String()))
                .processValues(() -> new Marker<String>("in"))
                .flatMapValues(line -> {
                    List<String> out = new ArrayList<>();
                    Words.each(line, out::add);
                    return out;
                })
                .selectKey((k, w) -> w)
                .repartition(Repartitioned.<String, String>as("words")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                .processValues(() -> new Marker<String>("count"))
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
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
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), a[7]);
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((to, from) ->
                say("state " + from + "->" + to + " at_ms=" + System.currentTimeMillis()));
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        say("started pid=" + ProcessHandle.current().pid() + " at_ms=" + System.currentTimeMillis());
        streams.start();
        done.await();
    }
}
