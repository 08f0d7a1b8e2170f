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
//! Written directly, every subtask of the sink appends whole batches to the
//! one file, taking its lock once per batch (never per record), so a
//! parallel sink interleaves batches, never lines. Only the transactional
//! sink is exactly-once: written directly, a restart that replays records
//! writes their lines again. An output naming the same
//! file as the input, or as another output, is refused before anything is
//! created or written: writing it would destroy what the job reads.

use super::checkpointing::CheckpointArgs;
use floe::connectors::transactional_file::TransactionalFileSink;
use floe::operators::sink::SinkFunction;
use floe::{DataStream, Record};
use std::fmt::Display;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where an output goes.
pub enum Output {
    /// Stdout (`-` or no flag).
    Stdout,
    /// A file written directly (not transactionally).
    Direct(PathBuf),
    /// A regular file written by two-phase commit.
    Transactional(TransactionalFileSink),
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

    /// Opens the output for writing directly (stdout or the file, created
    /// or truncated); `None` for a transactional output.
    pub fn open(&self) -> floe::Result<Option<Lines>> {
        let writer: Box<dyn Write + Send> = match self {
            Output::Stdout => Box::new(std::io::stdout()),
            Output::Direct(path) => Box::new(
                std::fs::File::create(path)
                    .map_err(|e| floe::Error::io("cannot create output file", path, e))?,
            ),
            Output::Transactional(_) => return Ok(None),
        };
        let name = match self {
            Output::Direct(path) => path.display().to_string(),
            _ => "stdout".to_string(),
        };
        Ok(Some(Lines {
            shared: Arc::new(Mutex::new(Shared {
                writer: BufWriter::with_capacity(256 * 1024, writer),
                closed: false,
            })),
            name: Arc::from(name),
            stdout: matches!(self, Output::Stdout),
            buf: Vec::new(),
        }))
    }

    /// Adds the sink writing `stream` to this output, named as the job's
    /// sinks were (`Print Sink`, `Text File Sink`, `TransactionalFileSink`).
    pub fn sink<T>(self, stream: &DataStream<T>) -> floe::Result<DataStream<()>>
    where
        T: Display + Clone + Send + 'static,
    {
        let name = match &self {
            Output::Stdout => "Print Sink",
            _ => "Text File Sink",
        };
        match self.open()? {
            Some(lines) => Ok(stream.add_sink(lines).name(name)),
            None => match self {
                Output::Transactional(tx) => Ok(stream.add_two_phase_sink(tx)),
                _ => unreachable!("open() returns a writer for every direct output"),
            },
        }
    }
}

/// The writer every subtask of one sink shares.
struct Shared {
    writer: BufWriter<Box<dyn Write + Send>>,
    /// Stdout's reader went away (`floe run … | head`): the rest is dropped.
    closed: bool,
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

impl Lines {
    /// Writes `self.buf` (whole lines) under the lock; flushes stdout so
    /// a reader sees each batch.
    fn write_buf(&mut self, flush: bool) -> floe::Result<()> {
        let mut shared = self
            .shared
            .lock()
            .map_err(|_| floe::Error::User("output lock poisoned".into()))?;
        if shared.closed {
            self.buf.clear();
            return Ok(());
        }
        let mut result = shared.writer.write_all(&self.buf);
        if result.is_ok() && (flush || self.stdout) {
            result = shared.writer.flush();
        }
        self.buf.clear();
        match result {
            Err(e) if self.stdout && e.kind() == ErrorKind::BrokenPipe => {
                shared.closed = true;
                Ok(())
            }
            r => r.map_err(|e| floe::Error::io("cannot write", &*self.name, e)),
        }
    }

    /// Writes one line (a caller writing outside a job, such as the word
    /// count's final counts); call [`close`](Self::close) at the end.
    pub fn push_line(&mut self, line: impl Display) -> floe::Result<()> {
        let _ = writeln!(self.buf, "{line}");
        if self.buf.len() >= 64 * 1024 {
            self.write_buf(false)?;
        }
        Ok(())
    }

    /// Writes what is buffered and flushes.
    pub fn close(&mut self) -> floe::Result<()> {
        self.write_buf(true)
    }
}

impl<T: Display + Send + 'static> SinkFunction<T> for Lines {
    fn invoke(&mut self, value: T, _: Option<i64>) -> floe::Result<()> {
        self.invoke_batch(vec![Record::new(value)])
    }

    fn invoke_batch(&mut self, batch: Vec<Record<T>>) -> floe::Result<()> {
        for r in batch {
            // Writing to a Vec cannot fail.
            let _ = writeln!(self.buf, "{}", r.value);
        }
        self.write_buf(false)
    }

    fn finish(&mut self) -> floe::Result<()> {
        self.write_buf(true)
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
    use std::os::unix::fs::MetadataExt;
    if is_stdout(path) {
        return None;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Some(FileId::Inode(m.dev(), m.ino())),
        Ok(_) => None,
        Err(_) => {
            let absolute = std::path::absolute(path).ok()?;
            let parent = absolute.parent()?;
            let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
            Some(FileId::Path(parent.join(absolute.file_name()?)))
        }
    }
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
