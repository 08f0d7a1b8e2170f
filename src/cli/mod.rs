//! Argument parsing and dispatch for the `floe` binary.

mod bench;
mod bench_window;
mod checkpointing;
mod checkpoints;
mod connectors;
mod group;
mod observe;
mod output;
mod pipelines;
mod progress;
mod signal;
mod sql;
mod state_args;
mod window;
mod wordcount;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// floe: an embeddable, actor-model stream processor.
#[derive(Parser, Debug)]
#[command(name = "floe", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a demo job.
    Run {
        #[command(subcommand)]
        job: Job,
    },
    /// Run a benchmark.
    Bench {
        #[command(subcommand)]
        bench: Bench,
    },
    /// Run a Flink SQL script (CREATE TABLE, CREATE VIEW, INSERT INTO,
    /// EXPLAIN) as one job; see docs/sql.md.
    Sql(Box<SqlArgs>),
    /// Inspect a checkpoint directory.
    Checkpoints {
        #[command(subcommand)]
        command: CheckpointsCommand,
    },
}

#[derive(Subcommand, Debug)]
enum CheckpointsCommand {
    /// One line per retained checkpoint: id, time, size, duration,
    /// alignment, channel-state bytes.
    List {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// Check every checksum; exits non-zero on any fault.
    Verify {
        /// A checkpoint directory, one checkpoint's directory or a savepoint.
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum Job {
    /// Count words: of a text file, or of generated words.
    Wordcount(Box<WordcountArgs>),
    /// Keyed event-time windows over `key,timestamp_ms,value` lines.
    Window(Box<WindowArgs>),
    /// P independent forward-only pipelines (one pipelined region each).
    Pipelines(Box<PipelinesArgs>),
}

/// Options of `floe run window`.
#[derive(Args, Debug, Clone)]
pub struct WindowArgs {
    /// Input file of `key,timestamp_ms,value` lines, or
    /// `kafka://HOST:PORT/TOPIC[?start=earliest|latest]` (one line per
    /// record value).
    #[arg(long)]
    pub input: PathBuf,
    /// With a `kafka://` input: stop at the end offsets seen at start.
    #[arg(long)]
    pub bounded: bool,
    /// `tumbling:SIZE`, `sliding:SIZE,SLIDE` or `session:GAP` (milliseconds).
    #[arg(long)]
    pub window: String,
    /// Aggregation of the values in each window.
    #[arg(long, value_enum)]
    pub agg: window::Agg,
    /// Bound of out-of-orderness for watermarks (ms).
    #[arg(long, default_value_t = 0)]
    pub out_of_orderness: i64,
    /// Allowed lateness of windows (ms).
    #[arg(long, default_value_t = 0)]
    pub allowed_lateness: i64,
    /// Refuse a `--window` that puts a record in more windows than this
    /// (sliding windows: `ceil(SIZE / SLIDE)`).
    #[arg(long, default_value_t = floe::window::assigner::DEFAULT_MAX_WINDOWS_PER_RECORD)]
    pub max_windows_per_record: u64,
    /// Watermark emission: periodic (default) or per-record (deterministic).
    #[arg(long, value_enum, default_value = "periodic")]
    pub watermarks: window::Watermarks,
    /// Interval of periodic watermarks (ms), like Flink's
    /// `pipeline.auto-watermark-interval`; 0: after every batch.
    #[arg(long, default_value_t = 200)]
    pub watermark_interval: u64,
    /// A `kafka://` input's partition without records for this long (ms)
    /// stops holding the watermark back until it has records again
    /// (Flink's `withIdleness`; with `--watermarks per-record`, the input
    /// as a whole).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idleness: Option<u64>,
    /// Parallelism of the windowing.
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Arbiters (threads); default: the number of cores.
    #[arg(long)]
    pub arbiters: Option<usize>,
    /// Write firings here instead of stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write late records here.
    #[arg(long)]
    pub late_output: Option<PathBuf>,
    /// What to do with a malformed line: fail (default) or skip.
    #[arg(long, value_enum, default_value = "fail")]
    pub on_bad_record: window::OnBadRecord,
    /// A line of an `--input` file longer than this many bytes is a bad
    /// record, read past without being held.
    #[arg(long, default_value_t = window::DEFAULT_MAX_LINE_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_line_bytes: u64,
    /// Bytes per split of the `--input` file, shared out over the source's
    /// subtasks round robin (with periodic watermarks).
    #[arg(long, default_value_t = floe::connectors::file_source::DEFAULT_SPLIT_SIZE, value_parser = clap::value_parser!(u64).range(1..))]
    pub split_size: u64,
    /// When the job ends, print each window subtask's per-channel input
    /// watermarks, idle flags and the channel holding the watermark back.
    #[arg(long)]
    pub explain_watermarks: bool,
    /// Seed of injected failures.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// `--state heap|redb`: window with a keyed process function keeping
    /// each key's windows in a `MapState` and their firings in event-time
    /// timers of that state backend (default: the built-in window operator).
    #[command(flatten)]
    pub state: state_args::StateArgs,
    /// Checkpoints, savepoints, restore.
    #[command(flatten)]
    pub checkpoints: checkpointing::CheckpointArgs,
    /// Metrics endpoint.
    #[command(flatten)]
    pub observe: observe::ObserveArgs,
    /// Group mode: one job across every process of a group.
    #[command(flatten)]
    pub group: group::GroupArgs,
}

/// Options of `floe sql`.
#[derive(Args, Debug, Clone)]
pub struct SqlArgs {
    /// The script: a file of statements separated by `;`.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "execute"
    )]
    pub file: Option<PathBuf>,
    /// The script, given inline (it may start with a `--` comment).
    #[arg(
        short = 'e',
        long = "execute",
        value_name = "SQL",
        allow_hyphen_values = true
    )]
    pub execute: Option<String>,
    /// Parallelism of the job's operators (a `filesystem` sink writes one
    /// file from one subtask).
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Arbiters (threads); default: the number of cores.
    #[arg(long)]
    pub arbiters: Option<usize>,
    /// Seed of injected failures.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Bytes per split of a `filesystem` source's files, shared out over
    /// the source's subtasks (a table whose watermark is emitted per row
    /// reads each file as one split).
    #[arg(long, default_value_t = floe::connectors::file_source::DEFAULT_SPLIT_SIZE, value_parser = clap::value_parser!(u64).range(1..))]
    pub split_size: u64,
    /// Where keyed state goes.
    #[command(flatten)]
    pub state: state_args::StateArgs,
    /// Checkpoints, savepoints, restore, failover.
    #[command(flatten)]
    pub checkpoints: checkpointing::CheckpointArgs,
    /// Metrics endpoint and dashboard.
    #[command(flatten)]
    pub observe: observe::ObserveArgs,
}

/// Options of `floe run pipelines`.
#[derive(Args, Debug, Clone)]
pub struct PipelinesArgs {
    /// Number of pipelines (each one a region of five subtasks).
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Records generated over all pipelines.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Seed of the records and of injected failures.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Arbiters (threads); default: the number of cores.
    #[arg(long)]
    pub arbiters: Option<usize>,
    /// Write the enriched lines here instead of stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// `--state heap|redb`: the enrich step keeps, in that state backend,
    /// the number of events seen per event key in its pipeline and appends
    /// it to each line (the output then depends on `--parallelism` too).
    #[command(flatten)]
    pub state: state_args::StateArgs,
    /// Checkpoints, savepoints, restore, failover.
    #[command(flatten)]
    pub checkpoints: checkpointing::CheckpointArgs,
    /// Metrics endpoint and status line.
    #[command(flatten)]
    pub observe: observe::ObserveArgs,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// Records per second through one actor hop: raw actix vs floe channels.
    Mailbox(bench::MailboxArgs),
    /// Keyed event-time window sums (tumbling 1 s, sliding 10 s / 1 s).
    Window(bench_window::WindowBenchArgs),
}

/// Options of `floe run wordcount`.
#[derive(Args, Debug, Clone)]
pub struct WordcountArgs {
    /// Text file to count (default: generated words), or
    /// `kafka://HOST:PORT/TOPIC[?start=earliest|latest]`.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// With a `kafka://` input: stop at the end offsets seen at start.
    #[arg(long)]
    pub bounded: bool,
    /// Bytes per split of an `--input` file, shared out over the source's
    /// subtasks round robin.
    #[arg(long, default_value_t = floe::connectors::file_source::DEFAULT_SPLIT_SIZE, value_parser = clap::value_parser!(u64).range(1..))]
    pub split_size: u64,
    /// Number of generated words.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Size of the generated vocabulary.
    #[arg(long, default_value_t = 10_000)]
    pub vocabulary: usize,
    /// Seed of the generated words.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Parallelism of the job.
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Records per batch (larger batches amortise per-batch costs).
    #[arg(long, default_value_t = 4096)]
    pub batch_size: usize,
    /// Arbiters (threads); default: the number of cores.
    #[arg(long)]
    pub arbiters: Option<usize>,
    /// Throttle the count to this many words per second (the records it
    /// receives): the whole job runs at that pace, backpressure reaching
    /// the source (demos, tests).
    #[arg(long, value_name = "WORDS_PER_S")]
    pub count_rate: Option<f64>,
    /// Write `word,count` lines here instead of stdout (or to
    /// `kafka://HOST:PORT/TOPIC`: every updated count as it happens).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// `--state heap|redb`: count with a keyed process function holding a
    /// `ValueState<u64>` per word in that state backend (default: the
    /// built-in keyed sum).
    #[command(flatten)]
    pub state: state_args::StateArgs,
    /// Checkpoints, savepoints, restore.
    #[command(flatten)]
    pub checkpoints: checkpointing::CheckpointArgs,
    /// Metrics endpoint.
    #[command(flatten)]
    pub observe: observe::ObserveArgs,
    /// Group mode: one job across every process of a group.
    #[command(flatten)]
    pub group: group::GroupArgs,
}

/// The start of every `run` job's summary line:
/// `records=N elapsed_ms=T throughput_rps=R parallelism=P`, where `records`
/// are the records the job's source emitted ([`source_records`]).
fn summary_head(records: u64, elapsed: std::time::Duration, parallelism: usize) -> String {
    let secs = elapsed.as_secs_f64();
    let rps = if secs > 0.0 {
        records as f64 / secs
    } else {
        0.0
    };
    format!(
        "records={records} elapsed_ms={} throughput_rps={rps:.0} parallelism={parallelism}",
        elapsed.as_millis()
    )
}

/// The records the operator named `source` emitted: what every `records`
/// flag and field of the CLI counts (`--records`, `--savepoint-at-records`,
/// the summary's and the status line's `records=`), i.e. the lines of an
/// input file, or the generated records.
fn source_records(result: &floe::JobResult, source: &str) -> u64 {
    result.operator(source).map(|o| o.records_out).unwrap_or(0)
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return 0;
            }
            let args: Vec<String> = std::env::args().collect();
            if let Some(line) = negative_number(&args) {
                eprintln!("error: {line}");
                return 2;
            }
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("error: invalid arguments");
            eprintln!("{first}");
            return 2;
        }
    };
    init_tracing();
    let result = match cli.command {
        Command::Run {
            job: Job::Wordcount(args),
        } => wordcount::run(&args),
        Command::Run {
            job: Job::Window(args),
        } => window::run(&args),
        Command::Run {
            job: Job::Pipelines(args),
        } => pipelines::run(&args),
        Command::Sql(args) => sql::run(&args),
        Command::Bench {
            bench: Bench::Mailbox(args),
        } => bench::mailbox(&args),
        Command::Bench {
            bench: Bench::Window(args),
        } => bench_window::window(&args),
        Command::Checkpoints {
            command: CheckpointsCommand::List { dir },
        } => checkpoints::list(&dir),
        Command::Checkpoints {
            command: CheckpointsCommand::Verify { dir },
        } => checkpoints::verify(&dir),
    };
    // A Kafka client's close (its last offset commit) runs on a thread of
    // its own: given a few seconds before the process ends.
    #[cfg(feature = "kafka")]
    {
        let left = floe::connectors::kafka::wait_for_closes(std::time::Duration::from_secs(5));
        if left > 0 {
            tracing::warn!(
                target: floe::RECOVERY_LOG_TARGET,
                "{left} Kafka client(s) still closing after 5 s (a broker away?): not waited for"
            );
        }
    }
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            output::close_all();
            let msg = message(&e).replace('\n', " ");
            eprintln!("error: {msg}");
            1
        }
    };
    // Stopped by SIGINT / SIGTERM: 130 / 143, as a shell expects.
    signal::exit_code().unwrap_or(code)
}

/// The line of a failed command: the error's own, in a CLI user's terms
/// where the library speaks to programs.
fn message(e: &floe::Error) -> String {
    use floe::checkpoint::CheckpointError;
    match e {
        floe::Error::Checkpoint(CheckpointError::UnknownOperator {
            checkpoint,
            uid,
            name,
        }) => format!(
            "cannot restore from checkpoint {checkpoint}: its operator '{uid}' ({name}) is not in \
             this job; it was taken by another job or with other flags (such as --state): \
             restore it with the command that took it, or start without --from-checkpoint"
        ),
        e => e.to_string(),
    }
}

/// What is wrong when the arguments clap refused give a flag a negative
/// number (`--records -5`, `--records=-5`): clap reads `-5` as an unknown
/// flag, or fails to parse it as an unsigned number, and says so in its
/// own terms. Every numeric flag of the CLI counts something or is a
/// duration, so none takes a negative number.
fn negative_number(args: &[String]) -> Option<String> {
    let negative = |v: &str| {
        v.strip_prefix('-')
            .is_some_and(|n| !n.is_empty() && n.parse::<f64>().is_ok_and(|n| n > 0.0))
    };
    let mut previous: Option<&str> = None;
    for arg in args.iter().skip(1) {
        if let Some((flag, value)) = arg.split_once('=')
            && flag.starts_with("--")
            && negative(value)
        {
            return Some(format!("{flag} needs a non-negative number, not {value}"));
        }
        if let Some(flag) = previous
            && negative(arg)
        {
            return Some(format!("{flag} needs a non-negative number, not {arg}"));
        }
        previous = (arg.starts_with("--") && !arg.contains('=')).then_some(arg.as_str());
    }
    None
}

/// The log filter without `FLOE_LOG` / `RUST_LOG`: errors, and the line of
/// every retry and recovery decision ([`floe::RECOVERY_LOG_TARGET`]), so
/// that nothing is retried in silence.
fn default_log_filter() -> String {
    format!("error,{}=warn", floe::RECOVERY_LOG_TARGET)
}

/// Logs through `FLOE_LOG`, else `RUST_LOG`, else [`default_log_filter`].
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_filter()));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Checks that an input file can be opened before a job starts. A pipe
/// (a FIFO) is read as a stream and cannot be read again, so it takes no
/// checkpoint, savepoint or restore flag; it is not opened here (opening
/// one waits for its writer).
pub fn check_readable(
    path: &std::path::Path,
    checkpoints: &checkpointing::CheckpointArgs,
) -> floe::Result<()> {
    let meta =
        std::fs::metadata(path).map_err(|e| floe::Error::io("cannot open input file", path, e))?;
    if meta.is_dir() {
        return Err(floe::Error::io(
            "cannot read input file",
            path,
            std::io::Error::other("is a directory"),
        ));
    }
    if !meta.is_file() {
        if checkpoints.enabled()
            || checkpoints.from_checkpoint.is_some()
            || checkpoints.savepoint_dir.is_some()
        {
            return Err(floe::Error::Config(format!(
                "--input '{}' is a pipe, read as a stream that cannot be read again: \
                 it takes no --checkpoint-interval, --from-checkpoint or --savepoint-dir",
                path.display()
            )));
        }
        return Ok(());
    }
    std::fs::File::open(path).map_err(|e| floe::Error::io("cannot open input file", path, e))?;
    Ok(())
}

/// Rejects a parallelism of 0 or above the max parallelism (the number of
/// key groups, which bounds every operator), and more arbiters than the
/// open-files limit allows, with a readable message before anything starts.
pub fn check_parallelism(p: usize, arbiters: Option<usize>) -> floe::Result<()> {
    if p == 0 {
        return Err(floe::Error::Config(
            "--parallelism must be at least 1".into(),
        ));
    }
    let max = floe::Config::default().max_parallelism as usize;
    if p > max {
        return Err(floe::Error::Config(format!(
            "--parallelism {p} is above the max parallelism {max} (the number of key groups)"
        )));
    }
    match arbiters {
        Some(0) => Err(floe::Error::Config("--arbiters must be at least 1".into())),
        Some(a) => match floe::config::max_arbiters() {
            Some(max) if a > max => Err(floe::Error::Config(format!(
                "--arbiters {a} needs more open files than the limit allows: at most {max} \
                 with `ulimit -n` {}",
                floe::config::open_files_limit().unwrap_or(0)
            ))),
            _ => Ok(()),
        },
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("the test's buffer")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_default_filter_shows_retries_and_errors_only() {
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                super::default_log_filter(),
            ))
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: floe::RECOVERY_LOG_TARGET, "commit busy; retrying");
            tracing::warn!(target: "floe::other", "an ordinary warning");
            tracing::info!(target: floe::RECOVERY_LOG_TARGET, "committed a restored transaction");
            tracing::error!(target: "floe::other", "an error");
        });
        let text = String::from_utf8(buf.0.lock().expect("the test's buffer").clone())
            .expect("log lines are UTF-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains("commit busy; retrying"), "{text}");
        assert!(lines[1].contains("an error"), "{text}");
    }
}
