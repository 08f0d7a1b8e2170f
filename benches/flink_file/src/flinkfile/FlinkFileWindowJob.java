package flinkfile;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichFlatMapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.WindowAssigner;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The Flink counterpart of {@code floe run window --input FILE --agg sum}: reads
 * {@code key,timestamp_ms,value} lines with Flink's own {@link FileSource}
 * ({@link TextLineInputFormat}), parses them, assigns event time with
 * bounded-out-of-orderness watermarks, keys by key and sums the values in
 * tumbling or sliding event-time windows, on a local MiniCluster.
 *
 * <pre>
 *   FileSource(lines) -> parse (key, ts, value) -> watermarks(OOO)
 *     -> keyBy(key) -> window -> aggregate(sum) + (key, start, end, sum)
 *     -> counting discard sink (parallelism P, chained)
 *        | or one line "key,start,end,sum" per window to --output (parallelism 1)
 * </pre>
 *
 * Checkpointing is off, the runtime mode is STREAMING (windows fire as the
 * watermark passes them; end of input fires the rest), serializers and
 * object reuse are Flink's defaults. Prints one RESULT line.
 */
public final class FlinkFileWindowJob {

    static final String USAGE = String.join("\n",
            "usage: FlinkFileWindowJob --input FILE|DIR [options]",
            "  --window tumbling:SIZE_MS | sliding:SIZE_MS,SLIDE_MS   (default tumbling:1000)",
            "  --out-of-orderness MS      bounded out-of-orderness of the watermarks (default 500)",
            "  --parallelism P            (default 2)",
            "  --output FILE              write key,window_start,window_end,sum lines (sink parallelism 1)",
            "                             instead of counting them in a discarding sink",
            "A directory input is read file by file (one split per file: TextLineInputFormat",
            "does not split a file).");

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String k = args[i];
            if (k.equals("--help") || k.equals("-h")) {
                System.out.println(USAGE);
                return;
            }
            if (!k.startsWith("--") || i + 1 >= args.length) {
                fail("bad argument: " + k);
            }
            a.put(k.substring(2), args[++i]);
        }
        String input = a.remove("input");
        if (input == null) {
            fail("--input is required");
        }
        String windowSpec = a.getOrDefault("window", "tumbling:1000");
        a.remove("window");
        long ooo = Long.parseLong(orDefault(a, "out-of-orderness", "500"));
        int parallelism = Integer.parseInt(orDefault(a, "parallelism", "2"));
        String output = a.remove("output");
        if (!a.isEmpty()) {
            fail("unknown option(s): " + a.keySet());
        }

        WindowAssigner<Object, TimeWindow> assigner = assigner(windowSpec);

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(new Configuration());
        env.setParallelism(parallelism);

        FileSource<String> source = FileSource
                .forRecordStreamFormat(new TextLineInputFormat(), new Path(Paths.get(input).toAbsolutePath().toUri()))
                .build();
        TypeInformation<Tuple3<String, Long, Long>> eventType = Types.TUPLE(Types.STRING, Types.LONG, Types.LONG);
        TypeInformation<Tuple4<String, Long, Long, Long>> outType =
                Types.TUPLE(Types.STRING, Types.LONG, Types.LONG, Types.LONG);

        // Watermarks after parsing, chained to the source: the timestamp is read
        // once, from the parsed record (a strategy on the source itself would
        // have to parse every line a second time to get it).
        WatermarkStrategy<Tuple3<String, Long, Long>> wm = WatermarkStrategy
                .<Tuple3<String, Long, Long>>forBoundedOutOfOrderness(Duration.ofMillis(ooo))
                .withTimestampAssigner((e, ts) -> e.f1);
        DataStream<Tuple4<String, Long, Long, Long>> sums = env
                .fromSource(source, WatermarkStrategy.noWatermarks(), "file-source")
                .flatMap(new Parse()).returns(eventType).name("parse")
                .assignTimestampsAndWatermarks(wm).name("watermarks")
                .keyBy(e -> e.f0, Types.STRING)
                .window(assigner)
                .aggregate(new SumAgg(), new EmitWindow(), Types.LONG, Types.LONG, outType)
                .name("window-sum");

        CountingSink.reset();
        if (output == null) {
            sums.sinkTo(new CountingSink(null)).name("counting-discard");
        } else {
            sums.sinkTo(new CountingSink(output)).name("file-out").setParallelism(1);
        }

        long t0 = System.nanoTime();
        JobExecutionResult r = env.execute("flink-file-window");
        long wallMs = (System.nanoTime() - t0) / 1_000_000;
        long netMs = r.getNetRuntime(TimeUnit.MILLISECONDS);
        long records = orZero(r.getAccumulatorResult("records"));
        long bad = orZero(r.getAccumulatorResult("bad"));

        System.out.println("RESULT engine=flink-" + EnvironmentInformation.getVersion()
                + " job=file-window"
                + " window=" + windowSpec
                + " out_of_orderness_ms=" + ooo
                + " parallelism=" + parallelism
                + " records=" + records
                + " bad=" + bad
                + " windows=" + CountingSink.WINDOWS.get()
                + " sum_of_sums=" + CountingSink.SUM.get()
                + " elapsed_ms=" + netMs
                + " wall_ms=" + wallMs
                + " throughput_rps=" + Math.round(records * 1000.0 / Math.max(1, netMs))
                + " wall_throughput_rps=" + Math.round(records * 1000.0 / Math.max(1, wallMs)));
        System.out.flush();
    }

    static String orDefault(Map<String, String> a, String k, String d) {
        String v = a.remove(k);
        return v == null ? d : v;
    }

    static long orZero(Long v) {
        return v == null ? 0 : v;
    }

    static void fail(String msg) {
        System.err.println("FlinkFileWindowJob: " + msg + "\n" + USAGE);
        System.exit(2);
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static WindowAssigner<Object, TimeWindow> assigner(String spec) {
        String[] kv = spec.split(":", 2);
        if (kv.length == 2 && kv[0].equals("tumbling")) {
            return (WindowAssigner) TumblingEventTimeWindows.of(Duration.ofMillis(Long.parseLong(kv[1])));
        }
        if (kv.length == 2 && kv[0].equals("sliding")) {
            String[] ss = kv[1].split(",");
            if (ss.length == 2) {
                return (WindowAssigner) SlidingEventTimeWindows.of(
                        Duration.ofMillis(Long.parseLong(ss[0])), Duration.ofMillis(Long.parseLong(ss[1])));
            }
        }
        fail("--window: " + spec);
        return null;
    }

    /**
     * {@code key,timestamp_ms,value} -> (key, ts, value). A line that does not
     * parse is dropped and counted ("bad"), as floe counts bad lines.
     */
    static final class Parse extends RichFlatMapFunction<String, Tuple3<String, Long, Long>> {
        private final LongCounter records = new LongCounter();
        private final LongCounter bad = new LongCounter();

        @Override
        public void open(OpenContext ctx) {
            getRuntimeContext().addAccumulator("records", records);
            getRuntimeContext().addAccumulator("bad", bad);
        }

        @Override
        public void flatMap(String line, Collector<Tuple3<String, Long, Long>> out) {
            records.add(1);
            int c1 = line.indexOf(',');
            int c2 = c1 < 0 ? -1 : line.indexOf(',', c1 + 1);
            if (c2 < 0) {
                bad.add(1);
                return;
            }
            try {
                long ts = Long.parseLong(line, c1 + 1, c2, 10);
                long value = Long.parseLong(line, c2 + 1, line.length(), 10);
                out.collect(Tuple3.of(line.substring(0, c1), ts, value));
            } catch (NumberFormatException e) {
                bad.add(1);
            }
        }
    }

    /** Incremental sum: one Long of state per key and window. */
    static final class SumAgg implements AggregateFunction<Tuple3<String, Long, Long>, Long, Long> {
        @Override
        public Long createAccumulator() {
            return 0L;
        }

        @Override
        public Long add(Tuple3<String, Long, Long> e, Long acc) {
            return acc + e.f2;
        }

        @Override
        public Long getResult(Long acc) {
            return acc;
        }

        @Override
        public Long merge(Long x, Long y) {
            return x + y;
        }
    }

    /** Emits (key, window start, window end, sum), floe's firing fields. */
    static final class EmitWindow
            extends ProcessWindowFunction<Long, Tuple4<String, Long, Long, Long>, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Long> sums,
                            Collector<Tuple4<String, Long, Long, Long>> out) {
            out.collect(Tuple4.of(key, ctx.window().getStart(), ctx.window().getEnd(), sums.iterator().next()));
        }
    }

    /**
     * Counts the firings and adds up their sums (a checksum to compare with
     * floe); with a path, also writes them as {@code key,start,end,sum} lines.
     * Each writer counts locally and adds to the JVM-wide totals when it
     * closes, before the job finishes (the MiniCluster runs in this JVM).
     */
    static final class CountingSink implements Sink<Tuple4<String, Long, Long, Long>> {
        static final AtomicLong WINDOWS = new AtomicLong();
        static final AtomicLong SUM = new AtomicLong();
        private final String path;

        CountingSink(String path) {
            this.path = path;
        }

        static void reset() {
            WINDOWS.set(0);
            SUM.set(0);
        }

        @Override
        public SinkWriter<Tuple4<String, Long, Long, Long>> createWriter(WriterInitContext ctx) throws IOException {
            BufferedWriter w = path == null ? null
                    : Files.newBufferedWriter(Paths.get(path), StandardCharsets.UTF_8);
            return new SinkWriter<>() {
                long windows;
                long sum;

                @Override
                public void write(Tuple4<String, Long, Long, Long> t, Context c) throws IOException {
                    windows++;
                    sum += t.f3;
                    if (w != null) {
                        w.write(t.f0 + "," + t.f1 + "," + t.f2 + "," + t.f3 + "\n");
                    }
                }

                @Override
                public void flush(boolean endOfInput) throws IOException {
                    if (w != null) {
                        w.flush();
                    }
                }

                @Override
                public void close() throws IOException {
                    WINDOWS.addAndGet(windows);
                    SUM.addAndGet(sum);
                    windows = 0;
                    sum = 0;
                    if (w != null) {
                        w.close();
                    }
                }
            };
        }
    }
}
