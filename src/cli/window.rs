//! `floe run window`: keyed event-time windows over `key,timestamp_ms,value` lines.
//!
//! A file is read by the parallel file source
//! ([`floe::connectors::file_source`]), which parses each line in its read
//! buffer: the key is an inline string (no allocation up to 23 bytes), and
//! the line itself is kept only for `--late-output` (without it the event
//! has no line field at all: [`NoLine`]). With periodic
//! watermarks the source runs at the job's parallelism, each subtask's
//! watermark the minimum over its unfinished splits'; with `--watermarks
//! per-record` one subtask reads the file in order, so the watermarks and
//! late records are exactly those of the file's order. Either way a bad line
//! is named by its line number; a line longer than `--max-line-bytes` is a
//! bad one, read past without being held. The records are keyed by `key` and windowed
//! at the job's parallelism. Each firing writes
//! `key,window_start,window_end,value`; late records are written unchanged
//! to `--late-output`. Written directly (stdout, or a file without
//! checkpointing), the firings are written by a sink chained into the
//! window at its parallelism, not handed to one sink subtask.
//!
//! Sums are exact: accumulated in `i128`, a window whose sum leaves `i64`
//! fails the job naming its key and window. A line whose timestamp has no
//! window inside the `i64` range is a bad record, checked at parsing so that
//! every window variant (`--state`) sees the same records.

use super::WindowArgs;
use super::output::Output;
use super::progress::wait_for_job;
use floe::connectors::file_source::{FileSource, LineDecoder, LongLines};
use floe::time::WatermarkStrategy;
use floe::window::{AggregateFunction, TimeWindow, WindowAssigner};
use floe::{Error, OutputTag, StreamExecutionEnvironment};
use smol_str::SmolStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

mod firing;
pub use firing::{BlockPool, Firing, FiringLines};

/// The name of the job's source, whose records (lines) the summary counts.
const SOURCE: &str = "Text File Source";

/// `--max-line-bytes` when not given: far above any `key,timestamp,value`
/// line, small enough that a runaway line (a file without newlines) costs
/// a few MiB of buffer, not its size.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 1 << 20;

/// The longest key a [`SmolStr`] holds inline, without allocating.
const INLINE_KEY: usize = 23;

/// One parsed input line. `L` is what it keeps of the line itself: the
/// line (`Option<String>`, the default) when late records are written
/// (`--late-output`), nothing ([`NoLine`]) otherwise, so that the usual
/// record is 40 bytes instead of 64 across the keyBy channel. The job
/// picks `L` once, when it is built.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(bound = "L: LateLine")]
pub struct Event<L = Option<String>> {
    /// Inline up to 23 bytes: no allocation per record for usual keys.
    pub(super) key: SmolStr,
    pub(super) ts: i64,
    pub(super) value: i64,
    /// The line as read, kept only when late records are written.
    pub(super) line: L,
}

/// What an [`Event`] keeps of its line: the line, or nothing. Both are
/// serialized as `Option<String>`, so in-flight events in an unaligned
/// checkpoint restore whichever the job keeps.
pub trait LateLine:
    Clone + std::fmt::Debug + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static
{
    /// Whether this type holds the line at all.
    const KEPT: bool;
    /// The line kept, when `keep` (and [`KEPT`](Self::KEPT)).
    fn keep(line: &str, keep: bool) -> Self;
    /// The line to write as late output (empty when not kept).
    fn into_line(self) -> String;
}

impl LateLine for Option<String> {
    const KEPT: bool = true;
    #[inline]
    fn keep(line: &str, keep: bool) -> Self {
        keep.then(|| line.to_owned())
    }
    fn into_line(self) -> String {
        self.unwrap_or_default()
    }
}

/// No line: the event of a job without `--late-output`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoLine;

impl LateLine for NoLine {
    const KEPT: bool = false;
    #[inline]
    fn keep(_: &str, _: bool) -> Self {
        NoLine
    }
    fn into_line(self) -> String {
        String::new()
    }
}

/// Written as the `None` an `Option<String>` line without a kept line is.
impl serde::Serialize for NoLine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_none()
    }
}

/// Reads an `Option<String>` and drops it: an event checkpointed by a job
/// that kept its line restores into one that does not.
impl<'de> serde::Deserialize<'de> for NoLine {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<String>::deserialize(d).map(|_| NoLine)
    }
}

/// The aggregation asked for with `--agg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agg {
    /// Sum of values.
    Sum,
    /// Number of records.
    Count,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
}

/// The accumulator is an `i128` (serialized like the `i64` it replaced), so
/// a sum is exact whatever the order of records and panes; only its result
/// is checked against the `i64` range.
impl<L> AggregateFunction<Event<L>, i128, i64> for Agg {
    fn create_accumulator(&self) -> i128 {
        match self {
            Agg::Sum | Agg::Count => 0,
            Agg::Min => i64::MAX.into(),
            Agg::Max => i64::MIN.into(),
        }
    }
    #[inline]
    fn add(&self, e: &Event<L>, acc: &mut i128) {
        *acc = match self {
            Agg::Sum => acc.saturating_add(e.value.into()),
            Agg::Count => *acc + 1,
            Agg::Min => (*acc).min(e.value.into()),
            Agg::Max => (*acc).max(e.value.into()),
        };
    }
    /// Clamped; the window operators call `try_get_result`.
    fn get_result(&self, acc: &i128) -> i64 {
        (*acc).clamp(i64::MIN.into(), i64::MAX.into()) as i64
    }
    fn merge(&self, a: i128, b: i128) -> i128 {
        match self {
            Agg::Sum | Agg::Count => a.saturating_add(b),
            Agg::Min => a.min(b),
            Agg::Max => a.max(b),
        }
    }
    fn try_get_result(&self, acc: &i128) -> Result<i64, floe::window::AggregateError> {
        floe::window::function::checked_sum(*acc)
    }
    /// Sums and counts retract; a minimum and a maximum cannot.
    #[inline]
    fn retract(&self, acc: &mut i128, part: &i128) -> bool {
        match self {
            Agg::Sum | Agg::Count => floe::window::function::retract_sum(acc, part),
            Agg::Min | Agg::Max => false,
        }
    }
}

/// Watermark emission asked for with `--watermarks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Watermarks {
    /// Every auto-watermark interval.
    Periodic,
    /// After every record (deterministic results).
    PerRecord,
}

/// What to do with a malformed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnBadRecord {
    /// Stop the job with an error naming the line.
    Fail,
    /// Count the line and go on.
    Skip,
}

/// Parses `tumbling:SIZE`, `sliding:SIZE,SLIDE` or `session:GAP`, refusing
/// more than `max_windows` windows per record.
pub fn parse_window<T>(spec: &str, max_windows: u64) -> floe::Result<WindowAssigner<T>> {
    let bad = || {
        Error::Config(format!(
            "invalid --window '{spec}': expected tumbling:SIZE, sliding:SIZE,SLIDE or session:GAP (milliseconds > 0)"
        ))
    };
    let (kind, args) = spec.split_once(':').ok_or_else(bad)?;
    let nums: Vec<i64> = args
        .split(',')
        .map(|n| n.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    if nums.iter().any(|&n| n <= 0) {
        return Err(bad());
    }
    let assigner = match (kind, nums.as_slice()) {
        ("tumbling", [size]) => WindowAssigner::tumbling(*size),
        ("sliding", [size, slide]) => WindowAssigner::sliding(*size, *slide),
        ("session", [gap]) => WindowAssigner::session(*gap),
        _ => return Err(bad()),
    };
    assigner.validate()?;
    if let Err(Error::TooManyWindows { windows, .. }) =
        assigner.check_windows_per_record(max_windows)
    {
        return Err(Error::Config(format!(
            "--window '{spec}' puts each record in up to {windows} windows, more than \
             --max-windows-per-record {max_windows}"
        )));
    }
    Ok(assigner)
}

fn fields_error(line: &str) -> String {
    format!(
        "expected 3 fields key,timestamp_ms,value, found {}",
        line.split(',').count()
    )
}

/// Parses a `key,timestamp_ms,value` line; `Err` is the bad record's
/// message. Fields are parsed from the line in place.
fn parse_line<L: LateLine>(line: &str, keep_line: bool) -> Result<Event<L>, String> {
    // The commas found bytewise (a comma is ASCII, so the fields are on
    // char boundaries).
    let bytes = line.as_bytes();
    let first = memchr::memchr(b',', bytes);
    let second = first.and_then(|a| memchr::memchr(b',', &bytes[a + 1..]).map(|b| a + 1 + b));
    let (Some(a), Some(b)) = (first, second) else {
        return Err(fields_error(line));
    };
    if memchr::memchr(b',', &bytes[b + 1..]).is_some() {
        return Err(fields_error(line));
    }
    let (key, ts, value) = (&line[..a], &line[a + 1..b], &line[b + 1..]);
    let ts = ts
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("timestamp '{ts}' is not an integer"))?;
    let value = value
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("value '{value}' is not an integer"))?;
    Ok(Event {
        key: SmolStr::new(key.trim()),
        ts,
        value,
        line: L::keep(line, keep_line),
    })
}

/// `bytes` as an `i64` when they are ASCII digits after an optional sign,
/// at most 18 of them (so no overflow): what `str::parse` reads without
/// trimming. `None` sends the line to [`parse_line`].
#[inline]
fn plain_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n = 0i64;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + i64::from(d);
    }
    Some(if negative { -n } else { n })
}

/// The usual line, `key,digits,digits` with a UTF-8 key not starting or
/// ending in whitespace, parsed bytewise without trimming; `None` for any
/// other line, which [`parse_line`] then reads (and names, when bad). Where
/// this one gives an event, `parse_line` gives the same one.
#[inline]
fn parse_plain<L: LateLine>(bytes: &[u8], keep_line: bool) -> Option<Event<L>> {
    // Fields of a few bytes: a plain loop finds their commas sooner than
    // a call to `memchr`, made for long haystacks.
    let comma = |s: &[u8]| s.iter().position(|&c| c == b',');
    let a = comma(bytes)?;
    let rest = &bytes[a + 1..];
    let b = comma(rest)?;
    // A third comma, a space or a sign anywhere else fails here.
    let ts = plain_i64(&rest[..b])?;
    let value = plain_i64(&rest[b + 1..])?;
    let key = std::str::from_utf8(&bytes[..a]).ok()?;
    // An ASCII byte that is not whitespace at each end: `trim` keeps all.
    let kept = |b: Option<&u8>| b.is_none_or(|&b| b.is_ascii() && !(b as char).is_whitespace());
    if !kept(key.as_bytes().first()) || !kept(key.as_bytes().last()) {
        return None;
    }
    let line = if L::KEPT && keep_line {
        // The key is UTF-8 and the rest ASCII.
        L::keep(std::str::from_utf8(bytes).ok()?, true)
    } else {
        L::keep("", false)
    };
    // `new_inline` copies the few bytes of a short key in place, where
    // `new` calls `memcpy` for them.
    let key = if key.len() <= INLINE_KEY {
        SmolStr::new_inline(key)
    } else {
        SmolStr::new(key)
    };
    Some(Event {
        key,
        ts,
        value,
        line,
    })
}

/// Turns lines into events. A line that is not valid UTF-8 is a bad record
/// like a malformed one; a timestamp the windows cannot hold is a bad
/// record too, checked here so that every window variant (`--state`) sees
/// the same records.
#[derive(Clone)]
pub(super) struct EventDecoder<L> {
    /// The input, named in the error of a line that is not UTF-8.
    input: Arc<str>,
    keep_line: bool,
    assigner: WindowAssigner<Event<L>>,
    /// Timestamps whose windows all lie inside the `i64` range
    /// ([`always_in_range`]): only the others are checked one by one.
    safe: Option<std::ops::RangeInclusive<i64>>,
}

impl<L> EventDecoder<L> {
    pub(super) fn new(
        input: Arc<str>,
        keep_line: bool,
        assigner: WindowAssigner<Event<L>>,
    ) -> Self {
        EventDecoder {
            input,
            keep_line,
            safe: always_in_range(&assigner),
            assigner,
        }
    }
}

/// The timestamps for which `assigner.try_assign` cannot fail: every window
/// of a record at `ts` starts after `ts - reach` and ends by `ts + reach`
/// (`reach` the window size, or the session gap), so a `ts` at least
/// `2 * reach` inside the `i64` range (twice: a margin) is in range
/// whatever the offset. `None` where no bound is known (dynamic gaps):
/// then every record is checked. Checking a range costs two comparisons where
/// assigning costs a division per record.
fn always_in_range<T>(assigner: &WindowAssigner<T>) -> Option<std::ops::RangeInclusive<i64>> {
    use floe::window::assigner::SessionGap;
    let reach = match assigner {
        WindowAssigner::Tumbling { size, .. } => Some(*size),
        WindowAssigner::Sliding { size, slide, .. } => Some((*size).max(*slide)),
        WindowAssigner::Session {
            gap: SessionGap::Static(gap),
        } => Some((*gap).max(0)),
        WindowAssigner::Cumulative { size, .. } => Some(*size),
        WindowAssigner::Global => Some(0),
        _ => None,
    };
    match reach {
        Some(reach) if reach >= 0 => {
            let margin = reach.saturating_mul(2);
            Some(
                i64::MIN.saturating_add(margin).saturating_add(1)..=i64::MAX.saturating_sub(margin),
            )
        }
        _ => None,
    }
}

impl<L: LateLine> LineDecoder for EventDecoder<L> {
    type Out = Event<L>;

    #[inline]
    fn decode(&mut self, bytes: &[u8]) -> Result<Event<L>, String> {
        self.parse(bytes)
    }

    #[inline]
    fn timestamp(&self, e: &Event<L>) -> Option<i64> {
        Some(e.ts)
    }
}

impl<L: LateLine> EventDecoder<L> {
    /// One line's event, or what is wrong with the line.
    #[inline]
    pub(super) fn parse(&self, bytes: &[u8]) -> Result<Event<L>, String> {
        let e = match parse_plain(bytes, self.keep_line) {
            Some(e) => e,
            None => {
                let Ok(line) = std::str::from_utf8(bytes) else {
                    return Err(format!("not valid UTF-8 in '{}'", self.input));
                };
                parse_line(line, self.keep_line)?
            }
        };
        if !self.safe.as_ref().is_some_and(|safe| safe.contains(&e.ts)) {
            self.assigner
                .try_assign(&e, e.ts, |_| {})
                .map_err(|reason| reason.to_string())?;
        }
        Ok(e)
    }
}

/// Parses the lines of a Kafka input (a file's are parsed by its source);
/// counts and skips bad ones, or fails naming the line. Its line number is
/// checkpointed, so a restored run names the same lines.
#[cfg(feature = "kafka")]
#[derive(Clone)]
struct Parse<L> {
    decoder: EventDecoder<L>,
    line: u64,
    skip: bool,
    bad: Arc<AtomicU64>,
}

#[cfg(feature = "kafka")]
impl<L: LateLine> floe::operators::Operator<Vec<u8>, Event<L>> for Parse<L> {
    fn process_batch(
        &mut self,
        batch: Vec<floe::Record<Vec<u8>>>,
        out: &mut floe::operators::Output<'_, Event<L>>,
    ) -> floe::Result<()> {
        for r in batch {
            self.line += 1;
            match self.decoder.decode(&r.value) {
                Ok(e) => out.collect(e),
                Err(message) if !self.skip => {
                    return Err(Error::BadRecord {
                        line: self.line,
                        message,
                    });
                }
                Err(_) => {
                    self.bad.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _: &floe::operators::SnapshotContext,
    ) -> floe::Result<floe::operators::StateCapture> {
        Ok(floe::operators::StateCapture {
            split_list: vec![floe::operators::keyed_snapshot::to_bytes(&self.line)?],
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: floe::operators::RestoredState) -> floe::Result<()> {
        for e in &state.split_list {
            self.line = self
                .line
                .max(floe::operators::keyed_snapshot::from_bytes::<u64>(e)?);
        }
        Ok(())
    }
}

pub fn run(args: &WindowArgs) -> floe::Result<()> {
    if let Some(group) = &args.group.group {
        return super::group::run_window(args, group);
    }
    // The event keeps its line only where late records are written: the
    // usual event crosses the keyBy channel without it.
    if args.late_output.is_some() {
        run_with::<Option<String>>(args)
    } else {
        run_with::<NoLine>(args)
    }
}

/// The job, its events keeping `L` of their lines.
fn run_with<L: LateLine>(args: &WindowArgs) -> floe::Result<()> {
    super::check_parallelism(args.parallelism, args.arbiters)?;
    let input = super::connectors::input(&args.input)?;
    match &input {
        super::connectors::Input::File(path) if args.bounded => {
            return Err(Error::Config(format!(
                "--bounded needs a kafka:// --input, not '{}'",
                path.display()
            )));
        }
        super::connectors::Input::File(_) if args.idleness.is_some() => {
            return Err(Error::Config(
                "--idleness needs a kafka:// --input: a file's splits are never idle".into(),
            ));
        }
        super::connectors::Input::File(path) => super::check_readable(path, &args.checkpoints)?,
        #[cfg(feature = "kafka")]
        super::connectors::Input::Kafka(_) => {}
    }
    super::output::check_distinct(&[
        ("--input", Some(&args.input)),
        ("--output", args.output.as_deref()),
        ("--late-output", args.late_output.as_deref()),
    ])?;
    let assigner = parse_window(&args.window, args.max_windows_per_record)?;
    if args.out_of_orderness < 0 || args.allowed_lateness < 0 {
        return Err(Error::Config(
            "--out-of-orderness and --allowed-lateness must not be negative".into(),
        ));
    }
    let backend = args.state.backend()?;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    args.checkpoints.apply(&env, args.seed)?;
    let output = Output::new("--output", args.output.as_deref(), &args.checkpoints)?;
    let late_output = match &args.late_output {
        Some(path) => Some(Output::new("--late-output", Some(path), &args.checkpoints)?),
        None => None,
    };
    let bad = Arc::new(AtomicU64::new(0));
    let mut strategy =
        WatermarkStrategy::<Event<L>>::bounded_out_of_orderness(args.out_of_orderness)
            .with_timestamp_assigner(|e, _| e.ts);
    let interval = std::time::Duration::from_millis(args.watermark_interval);
    if args.watermarks == Watermarks::PerRecord {
        strategy = strategy.per_record();
    } else {
        strategy = strategy.periodic(interval);
    }
    // A Kafka input read by one parsing subtask (per-record watermarks):
    // its input goes idle as a whole.
    if let Some(ms) = args.idleness {
        strategy = strategy.with_idleness(std::time::Duration::from_millis(ms));
    }
    let late_tag = OutputTag::<Event<L>>::new("late");
    let agg = args.agg;
    let decoder = EventDecoder::new(
        Arc::from(args.input.display().to_string()),
        args.late_output.is_some(),
        assigner.clone(),
    );
    let skip = args.on_bad_record == OnBadRecord::Skip;
    let events = match input {
        super::connectors::Input::File(path) => {
            let max_line = usize::try_from(args.max_line_bytes).unwrap_or(usize::MAX);
            let mut source = FileSource::new(path, decoder)?
                .split_size(args.split_size)
                .long_lines(LongLines::Refuse(max_line));
            if skip {
                source = source.skip_bad_lines(bad.clone());
            }
            // `--savepoint-at-records N` cuts the input after exactly N
            // lines: each source subtask holds at an even share of N, which
            // only one reader of the whole file is sure to reach.
            if args.watermarks == Watermarks::PerRecord
                || args.checkpoints.savepoint_at_records.is_some()
            {
                // One reader, in file order: the watermark after each
                // record, and so the late records, are the file's (for
                // per-record watermarks).
                env.add_source(SOURCE, move |ctx| Ok(source.reader(ctx)))
                    .uid("lines")
                    .set_parallelism(1)
                    .assign_timestamps_and_watermarks(strategy)
                    .uid("timestamps")
                    .set_parallelism(1)
            } else {
                let source = source
                    .with_watermarks(args.out_of_orderness)
                    .watermark_interval(interval);
                env.add_source(SOURCE, move |ctx| Ok(source.reader(ctx)))
                    .uid("lines")
            }
        }
        #[cfg(feature = "kafka")]
        super::connectors::Input::Kafka(url) if args.watermarks == Watermarks::Periodic => {
            // Flink's KafkaSource with a watermark strategy: each line
            // parsed in the source, its timestamp the event time, one
            // watermark per partition (the subtask's the minimum over its
            // partitions that are not idle), so how the partitions'
            // fetches interleave makes no record late.
            let bad = bad.clone();
            let source = super::connectors::kafka_source(
                &url,
                args.bounded,
                Arc::new(move |bytes: &[u8]| match decoder.parse(bytes) {
                    Ok(e) => Ok(Some(e)),
                    Err(_) if skip => {
                        bad.fetch_add(1, Ordering::Relaxed);
                        Ok(None)
                    }
                    Err(m) => Err(m),
                }),
            )?
            .timestamps(Arc::new(|e: &Option<Event<L>>| e.as_ref().map(|e| e.ts)))
            .per_partition_watermarks(
                args.out_of_orderness,
                args.idleness.map(std::time::Duration::from_millis),
            );
            env.add_source("Kafka Source", move |ctx| source.reader(ctx))
                .uid("kafka-source")
                .flat_map(|e: Option<Event<L>>| e)
                .name("Parse")
                .uid("parse")
        }
        #[cfg(feature = "kafka")]
        super::connectors::Input::Kafka(url) => {
            let source = super::connectors::kafka_source(
                &url,
                args.bounded,
                Arc::new(|bytes: &[u8]| Ok(bytes.to_vec())),
            )?;
            let parse = Parse {
                decoder,
                line: 0,
                skip,
                bad: bad.clone(),
            };
            env.add_source("Kafka Source", move |ctx| source.reader(ctx))
                .uid("kafka-source")
                .transform("Parse", move |_| parse.clone())
                .uid("parse")
                .set_parallelism(1)
                .assign_timestamps_and_watermarks(strategy)
                .uid("timestamps")
                .set_parallelism(1)
        }
    };
    // The built-in window operator, its windows in the backend of
    // `--state` (the heap's maps without it).
    let aligned = matches!(
        assigner,
        WindowAssigner::Tumbling { .. } | WindowAssigner::Sliding { .. }
    );
    let windowed = events
        .key_by_field(|e: &Event<L>| &e.key)
        .window(assigner)
        .state_backend(backend.unwrap_or_default())
        .max_windows_per_record(args.max_windows_per_record)
        .allowed_lateness(args.allowed_lateness)
        .side_output_late_data(&late_tag);
    // Written directly, the sink runs at the window's parallelism, chained
    // into it: each subtask writes the firings it computes, with no channel
    // between window and sink. A throttled sink (`--sink-rate`) and the
    // transactional, Kafka and PostgreSQL outputs keep one subtask.
    let parallel_sink = output.writes_directly() && args.checkpoints.sink_rate.is_none();
    // Tumbling and sliding windows so written hand their results on in
    // blocks of lines (`FiringLines`, a record per block), the sink
    // counting their lines for `windows_fired=`; the others a `Firing` per
    // result, counted as the window's records out.
    let lines_written = (parallel_sink && aligned).then(|| Arc::new(AtomicU64::new(0)));
    let late_events = if let Some(lines) = &lines_written {
        let pool = BlockPool::default();
        let blocks = pool.clone();
        let fired = windowed
            .aggregate_with(
                agg,
                move |key: &SmolStr, w: &TimeWindow, value: i64, out: &mut Vec<FiringLines>| {
                    blocks.append(key, w, value, out)
                },
            )
            .uid("window");
        output
            .sink_blocks(&fired, pool, lines.clone())?
            .uid("output");
        fired.get_side_output(&late_tag)
    } else {
        let fired = windowed
            .aggregate_with(agg, Firing::push)
            .uid("window")
            .with_channel_state();
        let sink = output.sink_lines(&fired)?.uid("output");
        let sink = if parallel_sink {
            sink
        } else {
            sink.set_parallelism(1)
        };
        if let Some(rate) = args.checkpoints.sink_rate {
            sink.set_input_rate(rate);
        }
        fired.get_side_output(&late_tag)
    };
    let late = late_events
        .with_channel_state()
        .map(|e: Event<L>| e.line.into_line())
        .name("Late Records")
        .set_parallelism(1);
    if let Some(late_output) = late_output {
        late_output
            .sink(&late)?
            .set_parallelism(1)
            .uid("late-output");
    }
    let prometheus = args.observe.install(&env, "window")?;
    let handle = env.execute_async()?;
    args.checkpoints.schedule_savepoint(&handle);
    let _signals = super::signal::stop_on_signal(&handle, args.checkpoints.stop_savepoint_dir())?;
    let endpoint = args
        .observe
        .serve(prometheus, &handle, args.checkpoints.savepoint_target())?;
    let waited = wait_for_job(
        &handle,
        SOURCE,
        None,
        args.observe.status_interval(),
        endpoint,
    );
    if args.explain_watermarks {
        eprint!("{}", handle.status_snapshot().explain_watermarks("Window"));
    }
    let (result, endpoint) = waited?;
    let count = |name: &str, out: bool| {
        result
            .operator(name)
            .map(|o| if out { o.records_out } else { o.records_in })
            .unwrap_or(0)
    };
    let stats = handle.checkpoint_stats();
    args.checkpoints.report_savepoint(&stats)?;
    // Source records (lines, bad ones included), as `--savepoint-at-records`
    // counts them.
    let records = super::source_records(&result, SOURCE);
    eprintln!(
        "{} late={} bad={} windows_fired={}{}",
        super::summary_head(records, result.elapsed, args.parallelism),
        count("Late Records", false),
        bad.load(Ordering::Relaxed),
        lines_written.map_or_else(|| count("Window", true), |l| l.load(Ordering::Relaxed)),
        super::checkpointing::summary(&args.checkpoints, &handle),
    );
    if let Some(e) = endpoint {
        e.linger();
    }
    Ok(())
}

#[cfg(test)]
mod tests;
