//! `floe run wordcount`: source → tokenize → key_by(word) → sum → final counts.
//!
//! An `--input` file is read by the parallel file source, its splits shared
//! by the job's subtasks.
//!
//! The CLI prints each word's final count. Written to stdout or a file, the
//! counts come from the keyed sum's own state: it emits each word's final
//! count once, at end of input (Flink's `sum` in BATCH mode), and a sink
//! chained behind it formats them into the output a batch at a time, so no
//! second map holds every count. To Kafka or PostgreSQL the sum emits an
//! updated count per record, as Flink's streaming `sum` does: an upsert
//! changelog.
//!
//! With `--state heap|redb` the sum is a keyed process function instead,
//! holding the count of each word in a `ValueState<u64>` of the chosen state
//! backend and emitting the updated count per record, like the sum; a sink
//! chained behind it keeps the latest count per word, and the CLI prints
//! those once the job has finished.

use super::WordcountArgs;
use super::output::Output;
use super::progress::Progress;
use floe::operators::process::ProcessContext;
use floe::operators::sink::SinkFunction;
use floe::operators::{RestoredState, SnapshotContext, StateCapture, keyed_snapshot};
use floe::state::ValueStateDescriptor;
use floe::text::WordGenerator;
use floe::{Record, StreamExecutionEnvironment};
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

/// A word of up to 23 bytes stored inline, so a lookup compares 24 bytes in
/// place instead of chasing a pointer to the stored key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct InlineWord([u8; 24]);

impl InlineWord {
    #[inline]
    fn new(word: &str) -> Option<Self> {
        let b = word.as_bytes();
        if b.len() > 23 {
            return None;
        }
        let mut a = [0u8; 24];
        a[..b.len()].copy_from_slice(b);
        a[23] = b.len() as u8;
        Some(InlineWord(a))
    }

    fn as_str(&self) -> &str {
        let len = self.0[23] as usize;
        std::str::from_utf8(&self.0[..len]).expect("built from a str")
    }
}

/// The latest count per word of one subtask.
#[derive(Clone, Default)]
struct Counts {
    short: FxHashMap<InlineWord, u64>,
    long: FxHashMap<String, u64>,
}

impl Counts {
    #[inline]
    fn set(&mut self, word: String, count: u64) {
        match InlineWord::new(&word) {
            Some(k) => {
                self.short.insert(k, count);
            }
            None => {
                self.long.insert(word, count);
            }
        }
    }

    fn for_each(&self, mut f: impl FnMut(&str, u64)) {
        self.short.iter().for_each(|(k, c)| f(k.as_str(), *c));
        self.long.iter().for_each(|(k, c)| f(k, *c));
    }
}

/// Keeps the latest count per word; hands its map over when the input ends.
#[derive(Clone)]
struct FinalCounts {
    counts: Counts,
    done: Arc<Mutex<Vec<Counts>>>,
}

/// Keeps the latest count per word and emits `word,count` lines when the
/// input ends, into the transactional file sink (checkpointing with a file
/// `--output`): the lines are committed through the two-phase-commit
/// protocol like any sink's, so a restore rolls back what was committed
/// after the restored checkpoint.
#[derive(Clone, Default)]
struct FinalCountLines {
    counts: Counts,
}

impl floe::operators::Operator<(String, u64), String> for FinalCountLines {
    fn process_batch(
        &mut self,
        batch: Vec<Record<(String, u64)>>,
        _: &mut floe::operators::Output<'_, String>,
    ) -> floe::Result<()> {
        for r in batch {
            let (word, count) = r.value;
            self.counts.set(word, count);
        }
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        out: &mut floe::operators::Output<'_, String>,
    ) -> floe::Result<()> {
        std::mem::take(&mut self.counts).for_each(|w, c| out.collect(format!("{w},{c}")));
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> floe::Result<StateCapture> {
        snapshot_counts(&self.counts, ctx)
    }

    fn restore_state(&mut self, state: RestoredState) -> floe::Result<()> {
        restore_counts(&mut self.counts, &state)
    }
}

/// A word and its final count, displayed as the output line `word,count`:
/// formatted by the sink straight into its batch buffer, never into a
/// `String` per word.
#[derive(Clone)]
struct CountLine(String, u64);

impl std::fmt::Display for CountLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.0, self.1)
    }
}

/// Counts keyed by word, like the sum before them: a restore at another
/// parallelism hands each word to the subtask its key group goes to.
fn snapshot_counts(counts: &Counts, ctx: &SnapshotContext) -> floe::Result<StateCapture> {
    let mut entries: Vec<(String, u64)> = Vec::new();
    counts.for_each(|w, c| entries.push((w.to_string(), c)));
    let groups = keyed_snapshot::encode(entries.iter().map(|(w, c)| (w, c)), ctx.max_parallelism)?;
    Ok(StateCapture::keyed_bytes(groups))
}

fn restore_counts(counts: &mut Counts, state: &RestoredState) -> floe::Result<()> {
    keyed_snapshot::decode::<String, u64>(&state.keyed, |w, c| counts.set(w, c))
}

impl SinkFunction<(String, u64)> for FinalCounts {
    fn invoke(&mut self, (word, count): (String, u64), _: Option<i64>) -> floe::Result<()> {
        self.counts.set(word, count);
        Ok(())
    }

    fn invoke_batch(&mut self, batch: Vec<Record<(String, u64)>>) -> floe::Result<()> {
        for r in batch {
            let (word, count) = r.value;
            self.counts.set(word, count);
        }
        Ok(())
    }

    fn finish(&mut self) -> floe::Result<()> {
        let counts = std::mem::take(&mut self.counts);
        self.done
            .lock()
            .map_err(|_| floe::Error::User("final counts lock poisoned".into()))?
            .push(counts);
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> floe::Result<StateCapture> {
        // Keyed by word, like the sum before it: a restore at another
        // parallelism hands each word to the subtask its key group goes to.
        let mut entries: Vec<(String, u64)> = Vec::new();
        self.counts
            .for_each(|w, c| entries.push((w.to_string(), c)));
        let groups =
            keyed_snapshot::encode(entries.iter().map(|(w, c)| (w, c)), ctx.max_parallelism)?;
        Ok(StateCapture::keyed_bytes(groups))
    }

    fn restore_state(&mut self, state: RestoredState) -> floe::Result<()> {
        let counts = &mut self.counts;
        keyed_snapshot::decode::<String, u64>(&state.keyed, |w, c| counts.set(w, c))
    }
}

pub fn run(args: &WordcountArgs) -> floe::Result<()> {
    super::check_parallelism(args.parallelism)?;
    let input = args
        .input
        .as_deref()
        .map(super::connectors::input)
        .transpose()?;
    if let Some(super::connectors::Input::File(path)) = &input {
        super::check_readable(path)?;
    }
    if args.bounded && matches!(input, None | Some(super::connectors::Input::File(_))) {
        return Err(floe::Error::Config(
            "--bounded needs a kafka:// --input".into(),
        ));
    }
    if args.batch_size == 0 {
        return Err(floe::Error::Config(
            "--batch-size must be at least 1".into(),
        ));
    }
    if args.input.is_none() && args.vocabulary == 0 {
        return Err(floe::Error::Config(
            "--vocabulary must be at least 1".into(),
        ));
    }
    super::output::check_distinct(&[
        ("--input", args.input.as_deref()),
        ("--output", args.output.as_deref()),
    ])?;
    let state = args.state.backend()?;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    env.set_batch_size(args.batch_size);
    args.checkpoints.apply(&env, args.seed)?;
    let output = Output::new("--output", args.output.as_deref(), &args.checkpoints)?;
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    let (words, source_name, total) = match input {
        #[cfg(feature = "kafka")]
        Some(super::connectors::Input::Kafka(url)) => {
            let source = super::connectors::kafka_source(
                &url,
                args.bounded,
                std::sync::Arc::new(|bytes: &[u8]| {
                    std::str::from_utf8(bytes)
                        .map(str::to_owned)
                        .map_err(|e| format!("value is not valid UTF-8: {e}"))
                }),
            )?;
            let words = env
                .add_source("Kafka Source", move |ctx| source.reader(ctx))
                .uid("kafka-source")
                .flat_map(|line: String| floe::tokenize(line).map(|w| (w, 1u64)))
                .name("Tokenize")
                .uid("tokenize");
            (words, "Kafka Source", None)
        }
        Some(super::connectors::Input::File(path)) => {
            // Split over the job's subtasks; the lines can be channel
            // state, so unaligned checkpoints overtake them.
            let source = floe::connectors::file_source::FileSource::new(
                path,
                floe::connectors::file_source::Utf8Lines,
            )?
            .split_size(args.split_size);
            let lines = env
                .add_source("Text File Source", move |ctx| Ok(source.reader(ctx)))
                .uid("lines")
                .with_channel_state();
            // `--savepoint-at-records N` cuts the input after exactly N
            // lines: each source subtask holds at an even share of N, which
            // only one reader of the whole file is sure to reach.
            let lines = if args.checkpoints.savepoint_at_records.is_some() {
                lines.set_parallelism(1)
            } else {
                lines
            };
            let words = lines
                // Lazily: a huge line is split as the outputs have room.
                .flat_map(|line: String| floe::tokenize(line).map(|w| (w, 1u64)))
                .name("Tokenize")
                .uid("tokenize");
            (words, "Text File Source", None)
        }
        None => {
            let generator = Arc::new(WordGenerator::new(args.vocabulary, args.seed));
            let words = env
                .from_generator(args.records, move |i| (generator.word(i), 1u64))
                .name("Word Generator")
                .uid("word-generator");
            (words, "Word Generator", Some(args.records))
        }
    };
    let done = Arc::new(Mutex::new(Vec::new()));
    let keyed = words.key_by_field(|t: &(String, u64)| &t.0);
    // Only a changelog output (Kafka, PostgreSQL) wants every update.
    let changelog = !matches!(
        output,
        Output::Stdout | Output::Direct(_) | Output::Transactional(_)
    );
    // The sum's state is the final counts: nothing else keeps them.
    let from_sum = state.is_none() && !changelog;
    let (counts, counter) = match state {
        None if !from_sum => (keyed.sum(|t: &mut (String, u64)| &mut t.1), "Keyed Sum"),
        None => (
            keyed.sum_at_end_of_input(|t: &mut (String, u64)| &mut t.1),
            "Keyed Sum",
        ),
        Some(kind) => {
            let count = ValueStateDescriptor::<u64>::new("count");
            let function = move |(word, n): (String, u64),
                                 ctx: &mut ProcessContext<'_, '_, (String, u64), String>|
                  -> floe::Result<()> {
                let mut state = ctx.value_state(&count)?;
                let total = state.value()?.unwrap_or(0) + n;
                state.update(total)?;
                ctx.collect((word, total));
                Ok(())
            };
            (keyed.process_with_backend(function, kind), "Keyed Process")
        }
    };
    // The final counts as output lines, straight from the sum at end of
    // input (no state of their own).
    let lines = || {
        counts
            .map(|(word, count): (String, u64)| CountLine(word, count))
            .name("Format")
            .uid("format")
    };
    let sink =
        match &output {
            // An upsert changelog: every updated count, keyed by its word.
            #[cfg(feature = "kafka")]
            Output::Kafka(kafka) => kafka
                .sink(
                    &counts
                        .map(|(word, count): (String, u64)| format!("{word},{count}"))
                        .name("Format")
                        .uid("format"),
                )
                .uid("kafka-sink"),
            // Upserts `word TEXT PRIMARY KEY, count BIGINT`: every updated count,
            // exactly once through two-phase commit.
            #[cfg(feature = "postgres")]
            Output::Postgres(pg) => {
                use floe::connectors::postgres::{PostgresSink, WriteMode};
                let rows = counts
                    .map(|(word, count): (String, u64)| (word, count as i64))
                    .name("Rows")
                    .uid("rows");
                rows.add_postgres_sink(PostgresSink::<(String, i64)>::new(
                    pg.config(&["word", "count"], WriteMode::Upsert)?,
                )?)
                .uid("postgres-sink")
            }
            Output::Transactional(tx) if from_sum => lines()
                .add_two_phase_sink(tx.clone())
                .name("Committed Counts")
                .uid("committed-counts"),
            Output::Transactional(tx) => counts
                .transform("Final Counts", |_| FinalCountLines::default())
                .uid("final-counts")
                .add_two_phase_sink(tx.clone())
                .name("Committed Counts")
                .uid("committed-counts"),
            Output::Stdout | Output::Direct(_) if from_sum => lines()
                .add_sink(output.open()?.ok_or_else(|| {
                    floe::Error::User("stdout or a file is written directly".into())
                })?)
                .name("Final Counts")
                .uid("final-counts"),
            Output::Stdout | Output::Direct(_) => counts
                .add_sink(FinalCounts {
                    counts: Counts::default(),
                    done: done.clone(),
                })
                .name("Final Counts")
                .uid("final-counts"),
        };
    if let Some(rate) = args.checkpoints.sink_rate {
        sink.set_input_rate(rate);
    }
    let prometheus = args.observe.install(&env, "wordcount")?;
    let handle = env.execute_async()?;
    args.checkpoints.schedule_savepoint(&handle);
    let _signals = super::signal::stop_on_signal(&handle, args.checkpoints.savepoint_dir.clone())?;
    let endpoint = args
        .observe
        .serve(prometheus, &handle, args.checkpoints.savepoint_target())?;
    let result = {
        let _progress =
            Progress::start_with(&handle, source_name, total, args.observe.status_interval());
        futures::executor::block_on(handle.wait())?
    };
    // `records` are what the source emitted (lines of `--input`, else
    // generated words), as `--savepoint-at-records` counts them; `words`
    // what the counter received.
    let records = super::source_records(&result, source_name);
    let words = result.operator(counter).map(|o| o.records_in).unwrap_or(0);

    let stats = handle.checkpoint_stats();
    args.checkpoints.report_savepoint(&stats)?;
    let maps = std::mem::take(
        &mut *done
            .lock()
            .map_err(|_| floe::Error::User("lock poisoned".into()))?,
    );
    if !from_sum {
        write_counts(&output, &maps)?;
    }

    eprintln!(
        "{} words={words}{}",
        super::summary_head(records, result.elapsed, args.parallelism),
        super::checkpointing::summary(&args.checkpoints, &handle)
    );
    if let Some(e) = endpoint {
        e.linger();
    }
    Ok(())
}

/// Writes the final counts of the `--state` job's sink to a direct output
/// (nothing for a transactional one, which the job's sink wrote).
fn write_counts(output: &Output, maps: &[Counts]) -> floe::Result<()> {
    let Some(mut lines) = output.open()? else {
        return Ok(());
    };
    let mut result = Ok(());
    for m in maps {
        m.for_each(|word, count| {
            if result.is_ok() {
                result = lines.push_line(format_args!("{word},{count}"));
            }
        });
    }
    result?;
    lines.close()
}
