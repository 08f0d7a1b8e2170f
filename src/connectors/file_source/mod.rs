//! A parallel file source, with the semantics of Flink's `FileSource`: a
//! file, a directory or a glob pattern is cut into splits at line
//! boundaries, and each source subtask reads its share of them.
//!
//! - **Splits** ([`split`]): byte ranges of a file; a split owns the lines
//!   that start inside its range, so every line is read exactly once.
//! - **Assignment**: round robin in file order — split `id` goes to subtask
//!   `id % parallelism` — and each subtask reads its splits one after the
//!   other in file order. With one subtask the lines come in file order,
//!   as from a single reader.
//! - **Checkpoints**: every split assigned to a subtask is an entry of its
//!   source state (the offset of its next line, whether it is finished, its
//!   largest timestamp). On failover the entries come back to their
//!   subtasks; on a restore at another parallelism they are dealt out over
//!   the new subtasks, each reading what it got in file order.
//! - **Parsing in the reader** ([`LineDecoder`]): a line is a slice of the
//!   read buffer, decoded into a record in place, so the only allocation
//!   per line is what the record itself owns. A bad line fails the job with
//!   its 1-based line number (counted from the file's start only then: the
//!   reader never counts lines), or is skipped and counted.
//! - **Watermarks** ([`FileSource::with_watermarks`]): per split, its
//!   largest timestamp minus the bound minus 1; a subtask's watermark is
//!   the minimum over its started, unfinished splits, emitted every
//!   auto-watermark interval (periodic, as Flink's). Finished splits no
//!   longer hold it back.
//! - **Pipes** ([`pipe`]): an input that is a pipe (a FIFO) is read as a
//!   stream, by subtask 0 alone, until its writer closes it; a checkpoint
//!   taken while it is read part-way cannot be restored.
//! - **Long lines** ([`LongLines`]): read whole by default; a job can
//!   bound what one costs instead, reading it in pieces cut at word
//!   boundaries or refusing it as a bad line, read past without being held.
//!   A batch holds at most about [`BATCH_BYTES`] of lines, so the lines in
//!   flight stay within the channels' credits times that.

pub mod split;

mod pipe;
mod reader;

use self::pipe::{Next, PipeReader};
use self::reader::{Line, SplitReader};
use self::split::{FileSplit, SplitState};
use super::{SourceContext, SourceFunction, SourcePoll};
use crate::{Error, Record, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Split size when none is given: small enough that the subtasks of a
/// 100 MB file share it evenly and a time-ordered file's subtasks stay
/// close in event time, large enough that opening a split costs nothing.
pub const DEFAULT_SPLIT_SIZE: u64 = 4 << 20;

/// A source subtask ends a batch once its lines add up to this many bytes
/// (or it has as many lines as the batch size): with long lines, the
/// credits of a channel bound its bytes in flight, not only its records.
pub const BATCH_BYTES: usize = 1 << 20;

/// What a line longer than a bound costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LongLines {
    /// Every line is read whole, however long (the read buffer grows to
    /// hold it).
    #[default]
    Whole,
    /// A line longer than this many bytes is read and decoded in pieces of
    /// at most this many bytes, each cut after an ASCII byte that is
    /// neither a letter nor a digit, so no word of letters and digits is
    /// cut (a word longer than the bound makes its piece longer). A piece
    /// is a record of its own, and a checkpoint may fall between two
    /// pieces. For jobs that look at words, not lines (a word count).
    Pieces(usize),
    /// A line longer than this many bytes is a bad line (skipped and
    /// counted, or failing the job naming it), read past without being
    /// held: the buffer holds at most about this many bytes of it.
    Refuse(usize),
}

/// Turns one line into a record, from the read buffer.
pub trait LineDecoder: Clone + Send + 'static {
    /// The record type.
    type Out: Send + 'static;

    /// Decodes `line` (without its ending); `Err(message)` marks a bad line.
    fn decode(&mut self, line: &[u8]) -> std::result::Result<Self::Out, String>;

    /// The event timestamp of a decoded record, if it has one.
    fn timestamp(&self, _record: &Self::Out) -> Option<i64> {
        None
    }

    /// The error failing the job on the bad line number `line` of `path`.
    /// Default: [`Error::BadRecord`].
    fn error(&self, _path: &Path, line: u64, message: String) -> Error {
        Error::BadRecord { line, message }
    }
}

/// Lines as `String`s; a line that is not valid UTF-8 fails the job
/// naming the file and the line, as [`TextFileSource`]
/// (super::text_file::TextFileSource) does.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Lines;

impl LineDecoder for Utf8Lines {
    type Out = String;

    #[inline]
    fn decode(&mut self, line: &[u8]) -> std::result::Result<String, String> {
        match std::str::from_utf8(line) {
            Ok(text) => Ok(text.to_owned()),
            Err(_) => Err("invalid UTF-8".into()),
        }
    }

    fn error(&self, path: &Path, line: u64, message: String) -> Error {
        Error::io(
            "input file is not valid UTF-8",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{message} at line {line}"),
            ),
        )
    }
}

/// Lines as bytes, undecoded.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByteLines;

impl LineDecoder for ByteLines {
    type Out = Vec<u8>;

    #[inline]
    fn decode(&mut self, line: &[u8]) -> std::result::Result<Vec<u8>, String> {
        Ok(line.to_vec())
    }
}

/// The description of a parallel file read: its splits and how lines
/// become records. Each source subtask makes its [`reader`](Self::reader).
///
/// # Examples
/// ```
/// use floe::connectors::file_source::{FileSource, Utf8Lines};
/// use floe::StreamExecutionEnvironment;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("in.txt");
/// std::fs::write(&path, "a\nb\nc\n").unwrap();
/// let source = FileSource::new(&path, Utf8Lines).unwrap().split_size(2);
/// let env = StreamExecutionEnvironment::new();
/// env.set_parallelism(2);
/// let lines = env
///     .add_source("File Source", move |ctx| Ok(source.reader(ctx)))
///     .collect();
/// env.execute().unwrap();
/// let mut lines = lines.take();
/// lines.sort();
/// assert_eq!(lines, ["a", "b", "c"]);
/// ```
#[derive(Clone)]
pub struct FileSource<D> {
    /// The input when it is a pipe: one split, read as a stream.
    pipe: Option<Arc<Path>>,
    files: Arc<[(PathBuf, u64)]>,
    splits: Arc<[FileSplit]>,
    decoder: D,
    skipped: Option<Arc<AtomicU64>>,
    bound: Option<i64>,
    interval: std::time::Duration,
    long: LongLines,
}

impl<D: LineDecoder> FileSource<D> {
    /// The files `input` names (a file, a directory's files, or a glob
    /// pattern's matches, in path order), cut into splits of
    /// [`DEFAULT_SPLIT_SIZE`].
    ///
    /// An input that is not a regular file (a FIFO, a pipe as
    /// `/dev/stdin`) is read as a stream: see [`is_pipe`](Self::is_pipe).
    pub fn new(input: &Path, decoder: D) -> Result<Self> {
        let mut files = Vec::new();
        let mut pipe = None;
        for path in split::list_files(input)? {
            let meta = std::fs::metadata(&path)
                .map_err(|e| Error::io("cannot open input file", &path, e))?;
            if !meta.is_file() {
                pipe = Some(Arc::from(path.as_path()));
            }
            files.push((path, meta.len()));
        }
        let splits = match &pipe {
            Some(path) => vec![FileSplit {
                id: 0,
                path: PathBuf::from(&**path),
                start: 0,
                end: u64::MAX,
            }],
            None => split::cut(&files, DEFAULT_SPLIT_SIZE),
        };
        Ok(FileSource {
            pipe,
            splits: splits.into(),
            files: files.into(),
            decoder,
            skipped: None,
            bound: None,
            interval: std::time::Duration::ZERO,
            long: LongLines::Whole,
        })
    }

    /// Reads lines longer than a bound as `long` says (default: whole).
    pub fn long_lines(mut self, long: LongLines) -> Self {
        self.long = long;
        self
    }

    /// Cuts the files into splits of `bytes` (at least 1) instead (a pipe
    /// stays one split).
    pub fn split_size(mut self, bytes: u64) -> Self {
        if self.pipe.is_none() {
            self.splits = split::cut(&self.files, bytes).into();
        }
        self
    }

    /// Whether the input is a pipe (not a regular file): it is read as a
    /// stream by subtask 0 alone, in order, until its writer closes it.
    /// What was read from a pipe cannot be read again, so a checkpoint
    /// taken while it is read part-way cannot be restored (the restore
    /// fails saying so).
    pub fn is_pipe(&self) -> bool {
        self.pipe.is_some()
    }

    /// Skips bad lines, counting them in `counter`, instead of failing.
    pub fn skip_bad_lines(mut self, counter: Arc<AtomicU64>) -> Self {
        self.skipped = Some(counter);
        self
    }

    /// Gives records the decoder's timestamps and emits per-split
    /// watermarks of bounded out-of-orderness `bound_ms`, every
    /// [`DEFAULT_AUTO_WATERMARK_INTERVAL`](crate::time::DEFAULT_AUTO_WATERMARK_INTERVAL).
    pub fn with_watermarks(mut self, bound_ms: i64) -> Self {
        self.bound = Some(bound_ms.max(0));
        self.interval = crate::time::DEFAULT_AUTO_WATERMARK_INTERVAL;
        self
    }

    /// Emits the watermarks every `interval` instead (zero: after every
    /// batch).
    pub fn watermark_interval(mut self, interval: std::time::Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The splits, in file order.
    pub fn splits(&self) -> &[FileSplit] {
        &self.splits
    }

    /// The reader of the subtask `ctx` describes: its splits, round robin.
    pub fn reader(&self, ctx: &SourceContext) -> FileSourceReader<D> {
        let subtask = ctx.subtask.0 as usize;
        FileSourceReader {
            pipe: self
                .pipe
                .as_ref()
                .filter(|_| split::assigned(0, subtask, ctx.parallelism))
                .map(|path| PipeReader::new(path)),
            pipe_path: self.pipe.clone(),
            splits: self
                .splits
                .iter()
                .filter(|s| split::assigned(s.id, subtask, ctx.parallelism))
                .map(SplitState::unread)
                .collect(),
            cursor: 0,
            current: None,
            decoder: self.decoder.clone(),
            skipped: self.skipped.clone(),
            skipped_since_poll: 0,
            bound: self.bound,
            timestamps: self.bound.is_some(),
            interval: self.interval,
            last_watermark: None,
            long: self.long,
        }
    }
}

/// One source subtask's reader of its splits.
pub struct FileSourceReader<D> {
    /// The reader of a pipe input, in the subtask that reads it.
    pipe: Option<PipeReader>,
    /// The input, when it is a pipe.
    pipe_path: Option<Arc<Path>>,
    /// The assigned splits, in file order.
    splits: Vec<SplitState>,
    /// Index of the first split not finished.
    cursor: usize,
    current: Option<SplitReader>,
    decoder: D,
    skipped: Option<Arc<AtomicU64>>,
    skipped_since_poll: u64,
    bound: Option<i64>,
    timestamps: bool,
    interval: std::time::Duration,
    /// When the watermark was last computed.
    last_watermark: Option<std::time::Instant>,
    long: LongLines,
}

impl<D: LineDecoder> FileSourceReader<D> {
    /// The assigned splits and how far each is read.
    pub fn splits(&self) -> &[SplitState] {
        &self.splits
    }

    /// [`poll_batch`](SourceFunction::poll_batch) of a pipe input: the
    /// lines that are there, parking the subtask when none is.
    fn poll_pipe(&mut self, max: usize, out: &mut Vec<Record<D::Out>>) -> Result<SourcePoll> {
        let (Some(pipe), Some(state)) = (self.pipe.as_mut(), self.splits.first_mut()) else {
            return Ok(SourcePoll::Finished);
        };
        if state.finished {
            return Ok(SourcePoll::Finished);
        }
        let mut read = 0;
        let mut poll = SourcePoll::Ready;
        while read < max {
            let (number, line) = match pipe.next_line()? {
                Next::Line(number, line) => (number, line),
                Next::Empty => {
                    if read == 0 {
                        poll = SourcePoll::Parked;
                    }
                    break;
                }
                Next::End => {
                    state.finished = true;
                    if read == 0 {
                        poll = SourcePoll::Finished;
                    }
                    break;
                }
            };
            read += 1;
            let decoded = self.decoder.decode(line);
            if let Some(message) = push_decoded(
                &self.decoder,
                self.timestamps,
                &self.skipped,
                &mut self.skipped_since_poll,
                decoded,
                &mut state.max_timestamp,
                out,
            ) {
                return Err(self.decoder.error(Path::new(&state.path), number, message));
            }
        }
        state.next = Some(pipe.offset());
        Ok(poll)
    }

    /// Opens the split at the cursor, skipping finished ones; `false` when
    /// none is left.
    fn open_next(&mut self) -> Result<bool> {
        while let Some(s) = self.splits.get(self.cursor) {
            if s.finished {
                self.cursor += 1;
                continue;
            }
            self.current = Some(SplitReader::open(
                Path::new(&s.path),
                s.start,
                s.end,
                s.next,
                self.long,
            )?);
            return Ok(true);
        }
        Ok(false)
    }
}

/// Pushes a decoded line as a record (raising `max_ts` to its timestamp),
/// or counts a line that did not decode as skipped; gives the message back
/// when the job is to fail on it instead (no skip counter).
#[inline]
fn push_decoded<D: LineDecoder>(
    decoder: &D,
    timestamps: bool,
    skipped: &Option<Arc<AtomicU64>>,
    skipped_since_poll: &mut u64,
    decoded: std::result::Result<D::Out, String>,
    max_ts: &mut i64,
    out: &mut Vec<Record<D::Out>>,
) -> Option<String> {
    match decoded {
        Ok(value) => {
            let timestamp = if timestamps {
                let ts = decoder.timestamp(&value);
                if let Some(ts) = ts {
                    *max_ts = (*max_ts).max(ts);
                }
                ts
            } else {
                None
            };
            out.push(Record { value, timestamp });
            None
        }
        Err(message) => match skipped {
            Some(counter) => {
                counter.fetch_add(1, Ordering::Relaxed);
                *skipped_since_poll += 1;
                None
            }
            None => Some(message),
        },
    }
}

impl<D: LineDecoder> SourceFunction<D::Out> for FileSourceReader<D> {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<D::Out>>) -> Result<SourcePoll> {
        if self.pipe_path.is_some() {
            return self.poll_pipe(max, out);
        }
        let mut read = 0;
        let mut bytes = 0;
        while read < max && bytes < BATCH_BYTES {
            if self.current.is_none() && !self.open_next()? {
                return Ok(SourcePoll::Finished);
            }
            let state = &mut self.splits[self.cursor];
            let reader = self.current.as_mut().expect("opened above");
            let mut max_ts = state.max_timestamp;
            while read < max && bytes < BATCH_BYTES {
                let Some((at, line)) = reader.next_line()? else {
                    state.finished = true;
                    break;
                };
                read += 1;
                let too_long = matches!(line, Line::TooLong(_));
                let decoded = match line {
                    Line::Text(line) => {
                        bytes += line.len();
                        self.decoder.decode(line)
                    }
                    Line::TooLong(n) => Err(format!(
                        "a line of {n} bytes, longer than {} bytes",
                        match self.long {
                            LongLines::Refuse(max) => max,
                            _ => 0,
                        }
                    )),
                };
                if let Some(message) = push_decoded(
                    &self.decoder,
                    self.timestamps,
                    &self.skipped,
                    &mut self.skipped_since_poll,
                    decoded,
                    &mut max_ts,
                    out,
                ) {
                    let path = Path::new(&state.path);
                    let line = reader::line_number(path, at)?;
                    return Err(if too_long {
                        Error::BadRecord { line, message }
                    } else {
                        self.decoder.error(path, line, message)
                    });
                }
            }
            state.max_timestamp = max_ts;
            state.next = reader.next_offset();
            if state.finished {
                self.current = None;
                self.cursor += 1;
            }
        }
        Ok(SourcePoll::Ready)
    }

    fn take_skipped(&mut self) -> u64 {
        std::mem::take(&mut self.skipped_since_poll)
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        self.splits.iter().map(super::encode_entry).collect()
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        let mut splits = entries
            .iter()
            .map(|e| super::decode_entry::<SplitState>(e))
            .collect::<Result<Vec<_>>>()?;
        if let Some(path) = &self.pipe_path
            && splits.iter().any(|s| !s.finished)
        {
            // Typed as invalid data: no restart can mend it.
            return Err(Error::io(
                "cannot restore input pipe",
                &**path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a pipe is read as a stream: what the job read from it cannot be read again",
                ),
            ));
        }
        splits.sort_by_key(|s| s.id);
        self.splits = splits;
        self.cursor = 0;
        self.current = None;
        Ok(())
    }

    fn watermark(&mut self) -> Option<i64> {
        let bound = self.bound?;
        if !self.interval.is_zero() {
            let now = std::time::Instant::now();
            if self
                .last_watermark
                .is_some_and(|last| now.duration_since(last) < self.interval)
            {
                return None;
            }
            self.last_watermark = Some(now);
        }
        self.splits
            .iter()
            .filter(|s| !s.finished && s.next.is_some() && s.max_timestamp > i64::MIN)
            .map(|s| s.max_timestamp.saturating_sub(bound).saturating_sub(1))
            .min()
    }
}

#[cfg(test)]
mod tests;
