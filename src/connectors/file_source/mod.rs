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
            match self.decoder.decode(line) {
                Ok(value) => {
                    let timestamp = if self.timestamps {
                        let ts = self.decoder.timestamp(&value);
                        if let Some(ts) = ts {
                            state.max_timestamp = state.max_timestamp.max(ts);
                        }
                        ts
                    } else {
                        None
                    };
                    out.push(Record { value, timestamp });
                }
                Err(message) => match &self.skipped {
                    Some(counter) => {
                        counter.fetch_add(1, Ordering::Relaxed);
                        self.skipped_since_poll += 1;
                    }
                    None => {
                        return Err(self.decoder.error(Path::new(&state.path), number, message));
                    }
                },
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
                match decoded {
                    Ok(value) => {
                        let timestamp = if self.timestamps {
                            let ts = self.decoder.timestamp(&value);
                            if let Some(ts) = ts {
                                max_ts = max_ts.max(ts);
                            }
                            ts
                        } else {
                            None
                        };
                        out.push(Record { value, timestamp });
                    }
                    Err(message) => match &self.skipped {
                        Some(counter) => {
                            counter.fetch_add(1, Ordering::Relaxed);
                            self.skipped_since_poll += 1;
                        }
                        None => {
                            let path = Path::new(&state.path);
                            let line = reader::line_number(path, at)?;
                            return Err(if too_long {
                                Error::BadRecord { line, message }
                            } else {
                                self.decoder.error(path, line, message)
                            });
                        }
                    },
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
mod tests {
    use super::*;
    use floe_actors::ids::SubtaskIndex;
    use std::collections::HashMap;

    fn ctx(subtask: usize, parallelism: usize) -> SourceContext {
        SourceContext {
            subtask: SubtaskIndex(subtask as u32),
            parallelism,
            seed: 0,
        }
    }

    fn drain<D: LineDecoder>(reader: &mut FileSourceReader<D>, max: usize) -> Vec<D::Out> {
        let mut out = Vec::new();
        while reader.poll_batch(max, &mut out).expect("reads") == SourcePoll::Ready {}
        out.into_iter().map(|r| r.value).collect()
    }

    /// Subtasks read disjoint splits whose lines, put together, are the
    /// file's; one subtask reads them in file order.
    #[test]
    fn subtasks_share_the_lines_and_one_reads_them_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let text: String = (0..500).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).expect("write");
        let oracle: Vec<String> = text.lines().map(str::to_owned).collect();
        let source = FileSource::new(&path, Utf8Lines)
            .expect("opens")
            .split_size(97);
        assert_eq!(drain(&mut source.reader(&ctx(0, 1)), 7), oracle);
        for p in [2, 3, 5] {
            let mut all: Vec<String> = (0..p)
                .flat_map(|i| drain(&mut source.reader(&ctx(i, p)), 7))
                .collect();
            all.sort();
            let mut sorted = oracle.clone();
            sorted.sort();
            assert_eq!(all, sorted, "P={p}");
        }
    }

    /// Positions taken mid-read at one parallelism, dealt out over another:
    /// the lines read before plus those read after are every line once.
    #[test]
    fn a_restore_at_another_parallelism_reads_every_line_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let text: String = (0..1000).map(|i| format!("{i}\n")).collect();
        std::fs::write(&path, &text).expect("write");
        let source = FileSource::new(&path, Utf8Lines)
            .expect("opens")
            .split_size(50);
        for (from, to) in [(2, 3), (3, 1), (4, 2), (1, 4)] {
            let mut seen = Vec::new();
            let mut entries = Vec::new();
            for i in 0..from {
                let mut reader = source.reader(&ctx(i, from));
                let mut out = Vec::new();
                for _ in 0..(3 + i) {
                    reader.poll_batch(13, &mut out).expect("reads");
                }
                seen.extend(out.into_iter().map(|r| r.value));
                entries.extend(reader.snapshot_state().expect("snapshots"));
            }
            for j in 0..to {
                let mut reader = source.reader(&ctx(j, to));
                let share = entries.iter().skip(j).step_by(to).cloned().collect();
                reader.restore_state(share).expect("restores");
                seen.extend(drain(&mut reader, 11));
            }
            let mut got: Vec<u64> = seen.iter().map(|l| l.parse().expect("number")).collect();
            got.sort();
            assert_eq!(got, (0..1000).collect::<Vec<u64>>(), "{from} -> {to}");
        }
    }

    #[derive(Clone)]
    struct Numbers;
    impl LineDecoder for Numbers {
        type Out = i64;
        fn decode(&mut self, line: &[u8]) -> std::result::Result<i64, String> {
            std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("not a number: {}", String::from_utf8_lossy(line)))
        }
        fn timestamp(&self, n: &i64) -> Option<i64> {
            Some(*n)
        }
    }

    #[test]
    fn a_bad_line_is_named_by_its_number_or_skipped_and_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "1\n2\n\nx\n5\ny").expect("write");
        let source = FileSource::new(&path, Numbers)
            .expect("opens")
            .split_size(3);
        let mut reader = source.reader(&ctx(1, 2));
        let mut out = Vec::new();
        let err = loop {
            match reader.poll_batch(1, &mut out) {
                Ok(SourcePoll::Finished) => panic!("a bad line fails"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert!(matches!(err, Error::BadRecord { line: 3, .. }), "{err}");
        let counter = Arc::new(AtomicU64::new(0));
        let source = source.skip_bad_lines(counter.clone());
        let mut all: Vec<i64> = (0..2)
            .flat_map(|i| drain(&mut source.reader(&ctx(i, 2)), 2))
            .collect();
        all.sort();
        assert_eq!(all, [1, 2, 5]);
        assert_eq!(counter.load(Ordering::Relaxed), 3);
    }

    /// A subtask's watermark is the minimum over its started, unfinished
    /// splits: here two restored splits, the slower one holding it back.
    #[test]
    fn the_watermark_is_the_minimum_over_unfinished_splits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let text: String = (0..100).map(|i| format!("{:04}\n", i * 10)).collect();
        std::fs::write(&path, &text).expect("write");
        let source = FileSource::new(&path, Numbers)
            .expect("opens")
            .split_size(250)
            .with_watermarks(5)
            .watermark_interval(std::time::Duration::ZERO);
        let mut reader = source.reader(&ctx(0, 1));
        assert_eq!(reader.watermark(), None);
        let mut out = Vec::new();
        reader.poll_batch(3, &mut out).expect("reads");
        assert_eq!(reader.watermark(), Some(20 - 5 - 1));
        assert_eq!(out[2].timestamp, Some(20));
        let mut state: Vec<SplitState> = reader
            .snapshot_state()
            .expect("snapshots")
            .iter()
            .map(|e| super::super::decode_entry(e).expect("decodes"))
            .collect();
        // The second split started further on.
        state[1].next = Some(state[1].start + 5);
        state[1].max_timestamp = 600;
        let mut restored = source.reader(&ctx(0, 1));
        let entries = state
            .iter()
            .map(|s| super::super::encode_entry(s).expect("encodes"))
            .collect();
        restored.restore_state(entries).expect("restores");
        assert_eq!(restored.watermark(), Some(20 - 5 - 1));
        drain(&mut restored, 1000);
        assert_eq!(restored.watermark(), None);
    }

    /// A pipe is one split, subtask 0's; a restore of it read part-way is
    /// refused (it cannot be read again), one read to its end restores as
    /// finished, and neither opens the pipe (which would wait for a writer).
    #[cfg(unix)]
    #[test]
    fn a_pipe_is_one_split_and_restores_only_when_finished() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("fifo");
        let c = std::ffi::CString::new(path.to_str().expect("UTF-8")).expect("no NUL");
        // SAFETY: `c` is a NUL-terminated path that lives for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let source = FileSource::new(&path, Utf8Lines)
            .expect("a pipe is an input")
            .split_size(7);
        assert!(source.is_pipe());
        assert_eq!(source.splits().len(), 1);
        assert!(source.reader(&ctx(1, 2)).splits().is_empty());
        let mut state = SplitState::unread(&source.splits()[0]);
        state.next = Some(12);
        let entry = |s: &SplitState| vec![super::super::encode_entry(s).expect("encodes")];
        let e = source
            .reader(&ctx(0, 2))
            .restore_state(entry(&state))
            .expect_err("a pipe read part-way cannot be restored")
            .to_string();
        assert!(e.contains("cannot be read again"), "{e}");
        state.finished = true;
        let mut reader = source.reader(&ctx(0, 2));
        reader.restore_state(entry(&state)).expect("restores");
        assert_eq!(
            reader.poll_batch(8, &mut Vec::new()).expect("polls"),
            SourcePoll::Finished
        );
    }

    /// One 3 MB line of words (with short lines around it) read in pieces
    /// by 1 to 3 subtasks, each stopped mid-line and restored at another
    /// parallelism: every batch holds at most [`BATCH_BYTES`] and a piece,
    /// every record at most a piece (plus a word), and the words counted
    /// are the line's, as a HashMap counts them.
    #[test]
    fn a_long_line_comes_in_bounded_pieces_that_keep_its_words() {
        const PIECE: usize = 4096;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let mut rng = crate::text::SplitMix(0xb16);
        let mut text = String::from("first line\n");
        while text.len() < 3 << 20 {
            let len = 1 + rng.below(9) as usize;
            text.extend((0..len).map(|_| (b'a' + rng.below(5) as u8) as char));
            text.push_str(if rng.below(7) == 0 { ", " } else { " " });
        }
        text.push_str("\nlast line\n");
        std::fs::write(&path, &text).expect("write");
        let mut oracle: HashMap<String, u64> = HashMap::new();
        for w in crate::tokenize(&text) {
            *oracle.entry(w).or_default() += 1;
        }
        let source = FileSource::new(&path, Utf8Lines)
            .expect("opens")
            .split_size(300_000)
            .long_lines(LongLines::Pieces(PIECE));
        for (from, to) in [(1, 1), (1, 3), (3, 2), (2, 1)] {
            let what = format!("{from} -> {to}");
            let mut words: HashMap<String, u64> = HashMap::new();
            let mut count = |batch: &mut Vec<Record<String>>| {
                let bytes: usize = batch.iter().map(|r| r.value.len()).sum();
                assert!(
                    bytes <= BATCH_BYTES + PIECE + 16,
                    "{what}: a batch of {bytes} bytes"
                );
                for r in batch.drain(..) {
                    assert!(
                        r.value.len() <= PIECE + 16,
                        "{what}: a record of {} bytes",
                        r.value.len()
                    );
                    for w in crate::tokenize(&r.value) {
                        *words.entry(w).or_default() += 1;
                    }
                }
            };
            let mut entries = Vec::new();
            for i in 0..from {
                let mut reader = source.reader(&ctx(i, from));
                let mut batch = Vec::new();
                for _ in 0..(2 + i) {
                    reader.poll_batch(1024, &mut batch).expect("reads");
                    count(&mut batch);
                }
                entries.extend(reader.snapshot_state().expect("snapshots"));
            }
            for j in 0..to {
                let mut reader = source.reader(&ctx(j, to));
                let share = entries.iter().skip(j).step_by(to).cloned().collect();
                reader.restore_state(share).expect("restores");
                let mut batch = Vec::new();
                while reader.poll_batch(1024, &mut batch).expect("reads") == SourcePoll::Ready {
                    count(&mut batch);
                }
                count(&mut batch);
            }
            assert_eq!(words, oracle, "{what}");
        }
    }
}
