//! `floe run wordcount`: source → tokenize → key_by(word) → sum → final counts.
//!
//! An `--input` file is read by the parallel file source, its splits shared
//! by the job's subtasks; a line longer than 64 KiB is read in pieces cut
//! between words, so a huge line costs no more memory than short ones.
//!
//! The CLI prints each word's final count. Written to stdout or a file, the
//! counts come from the keyed sum's own state: it emits each word's final
//! count once, at end of input (Flink's `sum` in BATCH mode), and a sink
//! chained behind it formats them into the output a batch at a time, so no
//! second map holds every count. To Kafka or PostgreSQL the sum emits an
//! updated count per record, as Flink's streaming `sum` does: an upsert
//! changelog.
//!
//! A word travels as a [`Word`]: a small string held inline (up to 23
//! bytes, as every generated word and nearly every word of a text), so a
//! record is one 32-byte value with no allocation of its own. Generating,
//! shuffling, hashing and counting a word then touch no heap string: the
//! bytes arrive in the batch itself, on the counting subtask's thread, and
//! the sum's map compares keys inside its own table. Its hash and its
//! encoding are those of a `String`, so key groups and checkpoints are too.
//!
//! With `--state heap|redb` the sum is a keyed process function instead,
//! holding the count of each word in a `ValueState<u64>` of the chosen state
//! backend; like the sum, it emits each word's final count from that state
//! at end of input (walking the state's keys), or the updated count per
//! record to a changelog output.

use super::WordcountArgs;
use super::output::Output;
use super::progress::wait_for_job;
use floe::StreamExecutionEnvironment;
use floe::operators::keyed::KeyedProcessFunction;
use floe::operators::process::ProcessContext;
use floe::state::ValueStateDescriptor;
use floe::text::WordGenerator;
use smol_str::SmolStr;
use std::sync::Arc;

/// A word: inline up to 23 bytes, shared beyond (see the module doc).
type Word = SmolStr;

/// The longest piece of an `--input` line the source emits as one record.
const LINE_PIECE: usize = 64 << 10;

/// A word and its final count, displayed as the output line `word,count`:
/// formatted by the sink straight into its batch buffer, never into a
/// `String` per word.
#[derive(Clone)]
struct CountLine(Word, u64);

impl std::fmt::Display for CountLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.0, self.1)
    }
}

/// The `--state` job's count: a `ValueState<u64>` per word in the chosen
/// backend. To a changelog output it emits the updated count per record;
/// otherwise each word's final count once, from the state at end of input,
/// so no second map holds every count.
#[derive(Clone)]
struct StateCount {
    count: ValueStateDescriptor<u64>,
    at_end: bool,
}

impl KeyedProcessFunction<Word, (Word, u64), (Word, u64)> for StateCount {
    fn process_element(
        &mut self,
        (word, n): (Word, u64),
        ctx: &mut ProcessContext<'_, '_, (Word, u64), Word>,
    ) -> floe::Result<()> {
        let mut state = ctx.value_state(&self.count)?;
        let total = state.value()?.unwrap_or(0) + n;
        state.update(total)?;
        if !self.at_end {
            ctx.collect((word, total));
        }
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut ProcessContext<'_, '_, (Word, u64), Word>,
    ) -> floe::Result<()> {
        if self.at_end {
            ctx.for_each_entry(&self.count, |word, &n, out| {
                out.collect((word.into_owned(), n));
            })?;
        }
        Ok(())
    }
}

pub fn run(args: &WordcountArgs) -> floe::Result<()> {
    if let Some(group) = &args.group.group {
        return super::group::run_wordcount(args, group);
    }
    super::check_parallelism(args.parallelism, args.arbiters)?;
    let input = args
        .input
        .as_deref()
        .map(super::connectors::input)
        .transpose()?;
    if let Some(super::connectors::Input::File(path)) = &input {
        super::check_readable(path, &args.checkpoints)?;
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
    if let Some(r) = args.count_rate
        && !(r > 0.0 && r.is_finite())
    {
        return Err(floe::Error::Config(
            "--count-rate must be a positive number of words per second".into(),
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
                .flat_map(|line: String| floe::tokenize(line).map(|w| (Word::from(w), 1u64)))
                .name("Tokenize")
                .uid("tokenize");
            (words, "Kafka Source", None)
        }
        Some(super::connectors::Input::File(path)) => {
            // Split over the job's subtasks; the lines can be channel
            // state, so unaligned checkpoints overtake them. A long line
            // comes in pieces cut between words, so no line is held whole
            // and the credits bound the bytes in flight.
            use floe::connectors::file_source::{FileSource, LongLines, Utf8Lines};
            let source = FileSource::new(path, Utf8Lines)?
                .split_size(args.split_size)
                .long_lines(LongLines::Pieces(LINE_PIECE));
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
                .flat_map(|line: String| floe::tokenize(line).map(|w| (Word::from(w), 1u64)))
                .name("Tokenize")
                .uid("tokenize");
            (words, "Text File Source", None)
        }
        None => {
            let generator = Arc::new(WordGenerator::new(args.vocabulary, args.seed));
            // The vocabulary as words once: generating word `i` copies
            // 24 bytes, no allocation.
            let vocabulary: Vec<Word> = generator.vocabulary().iter().map(Word::new).collect();
            let words = env
                .from_generator(args.records, move |i| {
                    (vocabulary[generator.index(i)].clone(), 1u64)
                })
                .name("Word Generator")
                .uid("word-generator");
            (words, "Word Generator", Some(args.records))
        }
    };
    let keyed = words.key_by_field(|t: &(Word, u64)| &t.0);
    // Only a changelog output (Kafka, PostgreSQL) wants every update.
    let changelog = !matches!(
        output,
        Output::Stdout | Output::Direct(_) | Output::Transactional(_)
    );
    // The counting operator's state is the final counts: nothing else
    // keeps them.
    let at_end = !changelog;
    let (counts, counter) = match state {
        None if !at_end => (keyed.sum(|t: &mut (Word, u64)| &mut t.1), "Keyed Sum"),
        None => (
            keyed.sum_at_end_of_input(|t: &mut (Word, u64)| &mut t.1),
            "Keyed Sum",
        ),
        Some(kind) => {
            let function = StateCount {
                count: ValueStateDescriptor::<u64>::new("count"),
                at_end,
            };
            (keyed.process_with_backend(function, kind), "Keyed Process")
        }
    };
    let counts = match args.count_rate {
        Some(rate) => counts.set_input_rate(rate),
        None => counts,
    };
    // The final counts as output lines, straight from the counting
    // operator at end of input (no state of their own).
    let lines = || {
        counts
            .map(|(word, count): (Word, u64)| CountLine(word, count))
            .name("Format")
            .uid("format")
    };
    let sink = match &output {
        // An upsert changelog: every updated count, keyed by its word.
        #[cfg(feature = "kafka")]
        Output::Kafka(kafka) => kafka
            .sink(
                &counts
                    .map(|(word, count): (Word, u64)| format!("{word},{count}"))
                    .name("Format")
                    .uid("format"),
            )
            .uid("kafka-sink"),
        // Upserts `word TEXT PRIMARY KEY, count BIGINT`: every updated count,
        // exactly once through two-phase commit.
        #[cfg(feature = "postgres")]
        Output::Postgres(pg) => {
            use floe::connectors::postgres::PostgresSink;
            let rows = counts
                .map(|(word, count): (Word, u64)| (String::from(word), count as i64))
                .name("Rows")
                .uid("rows");
            let sink = PostgresSink::<(String, i64)>::new(pg.counts_config()?)?;
            rows.sink_exactly_once(&sink.operator_name(), sink)
                .uid("postgres-sink")
        }
        Output::Transactional(tx) => lines()
            .sink_exactly_once("Committed Counts", tx.clone())
            .uid("committed-counts"),
        Output::Stdout | Output::Direct(_) => lines()
            .sink(
                "Final Counts",
                output.open()?.ok_or_else(|| {
                    floe::Error::User("stdout or a file is written directly".into())
                })?,
            )
            .uid("final-counts"),
    };
    if let Some(rate) = args.checkpoints.sink_rate {
        sink.set_input_rate(rate);
    }
    let prometheus = args.observe.install(&env, "wordcount")?;
    let handle = env.execute_async()?;
    args.checkpoints.schedule_savepoint(&handle);
    let _signals = super::signal::stop_on_signal(&handle, args.checkpoints.stop_savepoint_dir())?;
    let endpoint = args
        .observe
        .serve(prometheus, &handle, args.checkpoints.savepoint_target())?;
    let (result, endpoint) = wait_for_job(
        &handle,
        source_name,
        total,
        args.observe.status_interval(),
        endpoint,
    )?;
    // `records` are what the source emitted (lines of `--input`, else
    // generated words), as `--savepoint-at-records` counts them; `words`
    // what the counter received.
    let records = super::source_records(&result, source_name);
    let words = result.operator(counter).map(|o| o.records_in).unwrap_or(0);

    let stats = handle.checkpoint_stats();
    args.checkpoints.report_savepoint(&stats)?;

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
