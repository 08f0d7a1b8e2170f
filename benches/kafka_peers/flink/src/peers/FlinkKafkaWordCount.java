package peers;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;

/**
 * Flink's DataStream word count, Kafka to Kafka, exactly-once: a bounded
 * KafkaSource (earliest to the end offsets at start), keyBy word and a
 * running sum, every updated count to OUT through an exactly-once
 * KafkaSink (keyed by the word), checkpoints every CHECKPOINT_MS.
 *
 *   FlinkKafkaWordCount BOOTSTRAP IN OUT PARALLELISM CHECKPOINT_MS TXN_PREFIX
 */
public final class FlinkKafkaWordCount {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0];
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(Integer.parseInt(a[3]));
        env.enableCheckpointing(Long.parseLong(a[4]), CheckpointingMode.EXACTLY_ONCE);
        KafkaSource<String> source = KafkaSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(a[1])
                .setGroupId(a[5] + "-group")
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setBounded(OffsetsInitializer.latest())
                .setValueOnlyDeserializer(new SimpleStringSchema())
                .build();
        SerializationSchema<String> key =
                v -> v.substring(0, v.lastIndexOf(',')).getBytes(StandardCharsets.UTF_8);
        KafkaSink<String> sink = KafkaSink.<String>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(KafkaRecordSerializationSchema.<String>builder()
                        .setTopic(a[2])
                        .setKeySerializationSchema(key)
                        .setValueSerializationSchema(new SimpleStringSchema())
                        .build())
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(a[5])
                .setProperty("transaction.timeout.ms", "300000")
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "Kafka Source")
                .flatMap((String line, Collector<Tuple2<String, Long>> out) ->
                        Words.each(line, w -> out.collect(Tuple2.of(w, 1L))))
                .returns(Types.TUPLE(Types.STRING, Types.LONG))
                .keyBy(t -> t.f0)
                .reduce((x, y) -> Tuple2.of(x.f0, x.f1 + y.f1))
                .map(t -> t.f0 + "," + t.f1)
                .returns(Types.STRING)
                .sinkTo(sink);
        long t0 = System.currentTimeMillis();
        var result = env.execute("flink-kafka-wordcount");
        System.err.printf("flink: job net runtime %d ms, wall %d ms%n",
                result.getNetRuntime(), System.currentTimeMillis() - t0);
    }
}
