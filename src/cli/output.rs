//! `--output` and `--late-output` of every `run` job: one shape everywhere.
//!
//! An output is one file of lines, whatever the job, its parallelism and
//! whether checkpointing is on:
//!
//! - `-` (or no flag) is stdout;
//! - a regular file, or a path that does not exist yet, is created; with
//!   checkpointing on (or a restore) it is written by the transactional file
//!   sink, so only committed results appear;
//! - any other file (`/dev/null`, a pipe, a terminal) is written directly;
//!   with checkpointing on, a warning says it is not transactional.
//!
//! Written directly, every subtask of the sink formats a batch into a reused
//! buffer and appends it to the one file with one write, taking its lock once
//! per batch (never per record), so a parallel sink interleaves batches, never
//! lines (a batch beyond 256 KiB of lines goes in chunks of whole lines); a
//! record type that writes its own line ([`WriteLine`], the window job's
//! firings) is written bytewise, without `fmt`, and a record that is a
//! block of lines already ([`WriteBlock`], the window job's tumbling and
//! sliding firings) is written as it is, with one write of its own. Only the transactional
//! sink is exactly-once: written directly, a restart that replays records
//! writes their lines again. Every writer of a regular file takes its
//! lock ([`OutputLock`]), so no job truncates another running job's output. An output naming the same
//! file as the input, or as another output, is refused before anything is
//! created or written: writing it would destroy what the job reads.

use super::checkpointing::CheckpointArgs;
use floe::connectors::transactional_file::{OutputLock, TransactionalFileSink};
use floe::operators::sink::SinkFunction;
use floe::{DataStream, Record};
use std::fmt::Display;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

/// Where an output goes.
pub enum Output {
    /// Stdout (`-` or no flag).
    Stdout,
    /// A file written directly (not transactionally).
    Direct(PathBuf),
    /// A regular file written by two-phase commit.
    Transactional(TransactionalFileSink),
    /// A Kafka topic (`kafka://HOST:PORT/TOPIC`).
    #[cfg(feature = "kafka")]
    Kafka(super::connectors::KafkaOutput),
    /// A PostgreSQL table (`postgres://USER:PASS@HOST:PORT/DB?table=T`),
    /// written by the two-phase-commit sink.
    #[cfg(feature = "postgres")]
    Postgres(super::connectors::PostgresOutput),
}

/// Whether `path` means stdout.
fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

impl Output {
    /// The output for `path`, given as `flag`, under the checkpointing
    /// flags.
    pub fn new(
        flag: &str,
        path: Option<&Path>,
        checkpoints: &CheckpointArgs,
    ) -> floe::Result<Output> {
        let Some(path) = path.filter(|p| !is_stdout(p)) else {
            return Ok(Output::Stdout);
        };
        super::connectors::check_output(flag, path)?;
        #[cfg(feature = "kafka")]
        if let Some(kafka) = super::connectors::kafka_output(
            path,
            checkpoints.enabled() || checkpoints.from_checkpoint.is_some(),
        ) {
            return Ok(Output::Kafka(kafka?));
        }
        #[cfg(feature = "postgres")]
        if let Some(pg) = super::connectors::postgres_output(path) {
            return Ok(Output::Postgres(pg?));
        }
        if !checkpoints.enabled() && checkpoints.from_checkpoint.is_none() {
            return Ok(Output::Direct(path.to_path_buf()));
        }
        match TransactionalFileSink::new(path) {
            Ok(sink) => Ok(Output::Transactional(sink)),
            Err(floe::Error::Config(_)) => {
                eprintln!(
                    "warning: {flag} '{}' is not a regular file; it is written directly, not transactionally",
                    path.display()
                );
                Ok(Output::Direct(path.to_path_buf()))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the output is written directly (stdout, or a file that is
    /// not transactional): its sink may then run at the parallelism of the
    /// operator it writes, chained into it, every subtask appending whole
    /// batches of lines to the one shared writer ([`Lines`]). The other
    /// outputs keep one sink subtask (one transaction, one producer).
    pub fn writes_directly(&self) -> bool {
        matches!(self, Output::Stdout | Output::Direct(_))
    }

    /// Opens the output for writing directly (stdout, or the file created
    /// or truncated); `None` for a transactional output.
    pub fn open(&self) -> floe::Result<Option<Lines>> {
        match self {
            Output::Stdout => Ok(Some(Lines::stdout())),
            Output::Direct(path) => Lines::create(path).map(Some),
            Output::Transactional(_) => Ok(None),
            #[cfg(feature = "kafka")]
            Output::Kafka(_) => Ok(None),
            #[cfg(feature = "postgres")]
            Output::Postgres(_) => Ok(None),
        }
    }

    /// Adds the sink writing `stream` to this output, named as the job's
    /// sinks were (`Print Sink`, `Text File Sink`, `TransactionalFileSink`).
    pub fn sink<T>(self, stream: &DataStream<T>) -> floe::Result<floe::DataStreamSink>
    where
        T: Display + Clone + Send + 'static,
    {
        Ok(match self {
            Output::Stdout => stream.sink("Print Sink", Lines::stdout()),
            Output::Direct(path) => stream.sink("Text File Sink", Lines::create(&path)?),
            Output::Transactional(tx) => stream.sink_exactly_once("TransactionalFileSink", tx),
            #[cfg(feature = "kafka")]
            Output::Kafka(kafka) => kafka.sink(stream),
            #[cfg(feature = "postgres")]
            Output::Postgres(pg) => pg.sink_window_lines(stream)?,
        })
    }

    /// As [`sink`](Self::sink), but stdout and a file written directly
    /// take each record's line from [`WriteLine`] (bytewise, into the
    /// batch's buffer) instead of `Display`; the other outputs use
    /// `Display`, which must give the same line.
    pub fn sink_lines<T>(self, stream: &DataStream<T>) -> floe::Result<floe::DataStreamSink>
    where
        T: WriteLine + Display + Clone + Send + 'static,
    {
        Ok(match self {
            Output::Stdout => {
                stream.sink("Print Sink", RawLines(Lines::stdout(), T::Memo::default()))
            }
            Output::Direct(path) => stream.sink(
                "Text File Sink",
                RawLines(Lines::create(&path)?, T::Memo::default()),
            ),
            other => other.sink(stream)?,
        })
    }

    /// Adds a sink writing blocks of lines ([`WriteBlock`]) to stdout or
    /// a file written directly, each block at once, counting their lines
    /// in `lines` and handing each written block back to `pool`; refuses
    /// the other outputs.
    pub fn sink_blocks<B>(
        self,
        stream: &DataStream<B>,
        pool: B::Pool,
        lines: Arc<AtomicU64>,
    ) -> floe::Result<floe::DataStreamSink>
    where
        B: WriteBlock + Clone + Send + 'static,
    {
        Ok(match self {
            Output::Stdout => stream.sink("Print Sink", Blocks(Lines::stdout(), pool, lines)),
            Output::Direct(path) => {
                stream.sink("Text File Sink", Blocks(Lines::create(&path)?, pool, lines))
            }
            _ => {
                return Err(floe::Error::Config(
                    "blocks of lines are written to stdout or a file only".into(),
                ));
            }
        })
    }
}

/// A record that writes its own output line, without the `fmt` machinery:
/// the window job's firings are most of its output, and `format!` of each
/// was a quarter of its CPU time.
pub trait WriteLine {
    /// What a sink subtask keeps from one line to the next to write the
    /// next faster (the window job: its window's bounds, formatted once per
    /// window rather than once per result).
    type Memo: Default + Clone + Send + Sync + 'static;

    /// Appends the line, `\n` included, to `buf`; the same bytes as
    /// `format!("{self}\n")`, whatever `memo` holds.
    fn write_line(&self, buf: &mut Vec<u8>, memo: &mut Self::Memo);
}

/// A record that is a block of whole output lines, written as it is (the
/// window job's tumbling and sliding firings), whose buffer goes back to
/// where the next block is written.
pub trait WriteBlock {
    /// Where written blocks go back to.
    type Pool: Clone + Send + Sync + 'static;

    /// The lines, each ending in `\n`.
    fn as_bytes(&self) -> &[u8];

    /// How many lines the block holds.
    fn lines(&self) -> u64;

    /// Hands the written block back to `pool`.
    fn recycle(self, pool: &Self::Pool);
}

/// Bytes of lines a subtask formats before writing them: a batch of 4,096
/// lines of up to 64 bytes is one write.
const CHUNK: usize = 256 * 1024;

/// Bytes from which a write bypasses the shared writer's buffer.
const DIRECT: usize = 16 * 1024;

/// The writer every subtask of one sink shares.
struct Shared {
    writer: BufWriter<Box<dyn Write + Send>>,
    /// Stdout's reader went away (`floe run … | head`), or the job failed
    /// ([`close_all`]): the rest is dropped.
    closed: bool,
    /// A file output's lock, released after the last flush (the fields
    /// drop after [`Drop::drop`]).
    _lock: Option<OutputLock>,
}

/// Writes one line per record (`Display`) to a shared writer, a batch at a
/// time.
#[derive(Clone)]
pub struct Lines {
    shared: Arc<Mutex<Shared>>,
    name: Arc<str>,
    stdout: bool,
    /// This subtask's lines of the batch being written (reused).
    buf: Vec<u8>,
}

/// The line outputs of this process, for [`close_all`].
static OPEN: Mutex<Vec<Weak<Mutex<Shared>>>> = Mutex::new(Vec::new());

/// Set by [`close_all`]: every later write of a line output is dropped.
/// A write holds the read side while it writes (a subtask's batch, or the
/// last flush of an output whose subtasks are gone), and `close_all` takes
/// the write side, so it waits for the writes in progress.
static CLOSING: RwLock<bool> = RwLock::new(false);

/// The shared writer's last flush when its subtasks are gone: done while
/// [`close_all`] waits for it, or not at all once the process is closing
/// (a write the exit of a failed job cuts short leaves a torn last line).
impl Drop for Shared {
    fn drop(&mut self) {
        let closing = CLOSING.read().unwrap_or_else(|e| e.into_inner());
        if *closing || self.closed {
            // Dropped unwritten: `BufWriter`'s own drop would flush it.
            let sink: Box<dyn Write + Send> = Box::new(std::io::sink());
            let writer = std::mem::replace(&mut self.writer, BufWriter::with_capacity(0, sink));
            drop(writer.into_parts());
        } else {
            // Nothing to report it to: the job has ended.
            let _ = self.writer.flush();
        }
    }
}

/// Ends every line output before the process exits with a failed job. A
/// subtask of that job may still be writing, or an output whose subtasks
/// are gone may still be flushing: this waits for that write (a large one,
/// cut short by the exit, left a torn last line), writes out the whole
/// lines buffered so far, and drops any later write, so each output ends on
/// a whole line.
pub fn close_all() {
    let mut closing = CLOSING.write().unwrap_or_else(|e| e.into_inner());
    *closing = true;
    let open = std::mem::take(&mut *OPEN.lock().unwrap_or_else(|e| e.into_inner()));
    let alive: Vec<_> = open.iter().filter_map(Weak::upgrade).collect();
    for shared in &alive {
        let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
        if !shared.closed {
            // The job has failed already: a flush error adds nothing to it.
            let _ = shared.writer.flush();
            shared.closed = true;
        }
    }
    // An output whose last holder this was is dropped after the lock is
    // released: its drop takes the read side.
    drop(closing);
    drop(alive);
}

impl Lines {
    fn new(
        writer: Box<dyn Write + Send>,
        name: String,
        stdout: bool,
        lock: Option<OutputLock>,
    ) -> Lines {
        let shared = Arc::new(Mutex::new(Shared {
            writer: BufWriter::with_capacity(256 * 1024, writer),
            closed: false,
            _lock: lock,
        }));
        OPEN.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&shared));
        Lines {
            shared,
            name: Arc::from(name),
            stdout,
            buf: Vec::new(),
        }
    }

    /// Lines to stdout.
    fn stdout() -> Lines {
        Lines::new(Box::new(std::io::stdout()), "stdout".into(), true, None)
    }

    /// Lines to the file `path`, created or truncated now. A regular file
    /// (or a new one) is claimed first, as the transactional sink claims
    /// its output: while another process's job writes it, this is refused
    /// ([`floe::Error::OutputInUse`]) before the file is truncated.
    fn create(path: &Path) -> floe::Result<Lines> {
        let regular = match std::fs::metadata(path) {
            Ok(m) => m.is_file(),
            Err(e) if e.kind() == ErrorKind::NotFound => true,
            Err(e) => return Err(floe::Error::io("cannot inspect output file", path, e)),
        };
        let lock = if regular {
            Some(OutputLock::claim(path)?)
        } else {
            None
        };
        let file = std::fs::File::create(path)
            .map_err(|e| floe::Error::io("cannot create output file", path, e))?;
        Ok(Lines::new(
            Box::new(file),
            path.display().to_string(),
            false,
            lock,
        ))
    }

    /// Writes `self.buf` (whole lines) under the lock; flushes stdout so
    /// a reader sees each batch.
    fn write_buf(&mut self, flush: bool) -> floe::Result<()> {
        let buf = std::mem::take(&mut self.buf);
        let written = self.write_bytes(&buf, flush);
        self.buf = buf;
        self.buf.clear();
        written
    }

    /// Writes `bytes` (whole lines) under the lock; flushes stdout so a
    /// reader sees each batch. A large batch bypasses the writer's buffer
    /// (flushed first, so the order holds): no copy into it.
    fn write_bytes(&mut self, bytes: &[u8], flush: bool) -> floe::Result<()> {
        let closing = CLOSING.read().unwrap_or_else(|e| e.into_inner());
        if *closing {
            return Ok(());
        }
        let mut shared = self
            .shared
            .lock()
            .map_err(|_| floe::Error::User("output lock poisoned".into()))?;
        if shared.closed {
            return Ok(());
        }
        let mut result = if bytes.len() >= DIRECT {
            let writer = &mut shared.writer;
            writer
                .flush()
                .and_then(|()| writer.get_mut().write_all(bytes))
        } else {
            shared.writer.write_all(bytes)
        };
        if result.is_ok() && (flush || self.stdout) {
            result = shared.writer.flush();
        }
        match result {
            Err(e) if self.stdout && e.kind() == ErrorKind::BrokenPipe => {
                shared.closed = true;
                Ok(())
            }
            r => r.map_err(|e| floe::Error::io("cannot write", &*self.name, e)),
        }
    }
}

impl<T: Display + Send + 'static> SinkFunction<T> for Lines {
    async fn write(&mut self, batch: Vec<Record<T>>) -> floe::Result<()> {
        for r in batch {
            // Writing to a Vec cannot fail.
            let _ = writeln!(self.buf, "{}", r.value);
            // A batch of ordinary size is one write; a huge one (all final
            // counts at end of input) goes in chunks of whole lines, so the
            // buffer stays bounded.
            if self.buf.len() >= CHUNK {
                self.write_buf(false)?;
            }
        }
        self.write_buf(false)
    }

    async fn finish(&mut self) -> floe::Result<()> {
        self.write_buf(true)
    }
}

/// [`Lines`] whose records write their own lines ([`WriteLine`]).
#[derive(Clone)]
pub struct RawLines<M>(Lines, M);

impl<T: WriteLine + Send + 'static> SinkFunction<T> for RawLines<T::Memo> {
    async fn write(&mut self, batch: Vec<Record<T>>) -> floe::Result<()> {
        let (lines, memo) = (&mut self.0, &mut self.1);
        for r in batch {
            r.value.write_line(&mut lines.buf, memo);
            if lines.buf.len() >= CHUNK {
                lines.write_buf(false)?;
            }
        }
        lines.write_buf(false)
    }

    async fn finish(&mut self) -> floe::Result<()> {
        self.0.write_buf(true)
    }
}

/// [`Lines`] written a block at a time ([`WriteBlock`]): each block is
/// written as it is, its lines counted (the summary's `windows_fired=`, the
/// results the window handed on) and its buffer handed back to the window
/// function's pool.
#[derive(Clone)]
pub struct Blocks<P>(Lines, P, Arc<AtomicU64>);

impl<B: WriteBlock + Send + 'static> SinkFunction<B> for Blocks<B::Pool> {
    async fn write(&mut self, batch: Vec<Record<B>>) -> floe::Result<()> {
        for r in batch {
            let block = r.value;
            self.0.write_bytes(block.as_bytes(), false)?;
            self.2.fetch_add(block.lines(), Ordering::Relaxed);
            block.recycle(&self.1);
        }
        Ok(())
    }

    async fn finish(&mut self) -> floe::Result<()> {
        self.0.write_bytes(&[], true)
    }
}

/// What identifies a file: its device and inode when it exists (so links
/// and different spellings of one path match), else its absolute path.
#[derive(PartialEq, Eq)]
enum FileId {
    Inode(u64, u64),
    Path(PathBuf),
}

/// The identity of `path` as a regular file to compare, or `None` for
/// stdout and for files that are not regular (`/dev/null` read and written
/// at once harms nothing).
fn file_id(path: &Path) -> Option<FileId> {
    if is_stdout(path) {
        return None;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Some(inode(&m, path)),
        Ok(_) => None,
        Err(_) => {
            let absolute = std::path::absolute(path).ok()?;
            let parent = absolute.parent()?;
            let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
            Some(FileId::Path(parent.join(absolute.file_name()?)))
        }
    }
}

/// The device and inode of a file (its canonical path where there are none).
#[cfg(unix)]
fn inode(meta: &std::fs::Metadata, _: &Path) -> FileId {
    use std::os::unix::fs::MetadataExt;
    FileId::Inode(meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata, path: &Path) -> FileId {
    FileId::Path(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// Refuses two flags naming the same file, e.g. `--input` and `--output`,
/// before the job creates or writes anything.
pub fn check_distinct(files: &[(&str, Option<&Path>)]) -> floe::Result<()> {
    let ids: Vec<(&str, &Path, FileId)> = files
        .iter()
        .filter_map(|(flag, path)| {
            let path = (*path)?;
            file_id(path).map(|id| (*flag, path, id))
        })
        .collect();
    for (i, (a, path, id)) in ids.iter().enumerate() {
        if let Some((b, other, _)) = ids[i + 1..].iter().find(|(_, _, o)| o == id) {
            return Err(floe::Error::Config(format!(
                "{a} '{}' and {b} '{}' name the same file; writing it would destroy it",
                path.display(),
                other.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output dropped before [`close_all`] writes out its buffered
    /// lines; one alive at `close_all` is flushed and closed, later writes
    /// dropped; one dropped once the process is closing (the exit of a
    /// failed job could cut its flush short) writes nothing. This is the
    /// test binary's only user of line outputs: `close_all` closes them for
    /// the whole process.
    #[test]
    fn outputs_end_on_whole_lines_when_a_failed_job_exits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("output");
        let buffered = |lines: &mut Lines, text: &str| {
            lines.buf.extend_from_slice(text.as_bytes());
            lines.write_buf(false).expect("written to the buffer");
        };
        let mut early = Lines::create(&dir.path().join("early")).expect("created");
        buffered(&mut early, "a,1\n");
        assert_eq!(read("early"), "", "still buffered");
        drop(early);
        assert_eq!(read("early"), "a,1\n");

        let mut alive = Lines::create(&dir.path().join("alive")).expect("created");
        buffered(&mut alive, "b,2\n");
        // An output dropping when the job fails: its buffered lines are
        // taken over by a writer nothing holds any more.
        let dropping = Lines::create(&dir.path().join("dropping")).expect("created");
        let shared = Arc::try_unwrap(dropping.shared)
            .ok()
            .expect("the only holder")
            .into_inner()
            .expect("not poisoned");
        let mut shared = shared;
        shared.writer.write_all(b"c,3\n").expect("buffered");

        close_all();
        assert_eq!(read("alive"), "b,2\n", "flushed by close_all");
        buffered(&mut alive, "d,4\n");
        drop(alive);
        assert_eq!(read("alive"), "b,2\n", "a write after close_all is dropped");
        drop(shared);
        assert_eq!(read("dropping"), "", "dropped unwritten once closing");
    }
}
