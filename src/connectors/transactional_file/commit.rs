//! The commit log of an output (what each commit appended, so that a commit
//! done twice appends once), recovery from it, and the writer that appends.

use super::lock::OutputState;
use super::{
    FileTransaction, TransactionalFileSink, copy_synced, nonce_of, remove_if_present, sync_dir,
};
use crate::{Error, Result};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

impl TransactionalFileSink {
    /// [`recover`](TwoPhaseCommitSink::recover) with the output's lock held.
    pub(super) fn recover_locked(
        &self,
        state: &mut OutputState,
        committed: &[FileTransaction],
    ) -> Result<()> {
        let log_path = self.commit_log_path();
        if !committed.is_empty()
            && !log_path.exists()
            && committed.iter().all(|t| !self.pending_path(t).exists())
        {
            // This output never had a commit and holds none of the restored
            // transactions: they were another output's (a restore into a new
            // file). Their data stays
            // there; this output starts empty and gets what follows the
            // restored snapshot.
            tracing::warn!(
                output = %self.path.display(),
                "restoring into an output without a commit log: the snapshot's pending transactions belong to another output and are not committed here"
            );
            drop(self.open_output(0)?);
            return Ok(());
        }
        let log = state.log(&log_path, &self.path)?;
        // Cut a crashed commit's partial append first.
        drop(self.open_output(log.len)?);
        let restored: HashSet<&str> = committed.iter().map(|t| t.name.as_str()).collect();
        let done: Vec<&Committed> = log.txns.iter().filter(|t| t.end.is_some()).collect();
        let first = done.iter().position(|t| restored.contains(t.name.as_str()));
        // The restored transactions from the first one on, if later ones are
        // mixed in.
        let mut rewind: Vec<Committed> = Vec::new();
        if let Some(first) = first {
            let tail = &done[first..];
            if tail.iter().any(|t| !restored.contains(t.name.as_str())) {
                rewind = tail
                    .iter()
                    .filter(|t| restored.contains(t.name.as_str()))
                    .map(|t| Committed::clone(t))
                    .collect();
            }
        }
        if let Some(cut) = rewind.first().map(|t| t.offset) {
            let mut out = File::open(&self.path)
                .map_err(|e| Error::io("cannot open output file", &self.path, e))?;
            for t in rewind {
                let end = t.end.expect("only committed ones are rewound");
                let pending = self.pending_path(&FileTransaction { name: t.name });
                out.seek(SeekFrom::Start(t.offset))
                    .map_err(|e| Error::io("cannot read output file", &self.path, e))?;
                copy_synced(&mut (&mut out).take(end - t.offset), &pending)?;
            }
            sync_dir(&self.dir)?;
            log.append(&format!("truncate {cut}"))?;
            log.apply(LogLine::Truncate(cut));
            drop(self.open_output(cut)?);
        }
        for txn in committed {
            self.commit_locked(state, txn)?;
        }
        for name in self.pending_files()? {
            if !restored.contains(name.as_str()) && !state.live.contains(nonce_of(&name)) {
                remove_if_present(&self.dir.join(format!("{}{name}", self.pending_prefix())))?;
            }
        }
        sync_dir(&self.dir)
    }
}

/// A [`Write`] that fails with [`ErrorKind::StorageFull`] once its budget
/// of bytes is spent (fault injection; the budget is `u64::MAX` otherwise).
pub(super) struct BudgetedWriter<'a> {
    pub(super) inner: &'a mut File,
    pub(super) budget: &'a AtomicU64,
}

impl Write for BudgetedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let budget = self.budget.load(Ordering::Relaxed);
        if budget == u64::MAX {
            return self.inner.write(buf);
        }
        if budget == 0 {
            return Err(std::io::Error::new(
                ErrorKind::StorageFull,
                "no space left (injected fault)",
            ));
        }
        let n = buf.len().min(usize::try_from(budget).unwrap_or(usize::MAX));
        let n = self.inner.write(&buf[..n])?;
        self.budget.fetch_sub(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A transaction the log records as begun, and committed once `end` is set.
#[derive(Clone, Debug)]
struct Committed {
    name: String,
    offset: u64,
    end: Option<u64>,
}

pub(super) enum LogLine {
    Begin(String, u64),
    Done(String, u64),
    Truncate(u64),
}

/// The commit log, parsed: the live transactions in log order and the output
/// length it records.
pub(super) struct CommitLog {
    path: PathBuf,
    file: Option<File>,
    /// The log file's length in bytes: where a failed append is cut back to.
    bytes: u64,
    txns: Vec<Committed>,
    done: HashSet<String>,
    pub(super) len: u64,
}

impl CommitLog {
    /// Reads the log at `path`; without one, nothing was committed to
    /// `output` yet and what it holds is kept.
    pub(super) fn load(path: &Path, output: &Path) -> Result<Self> {
        let mut log = CommitLog {
            path: path.to_path_buf(),
            file: None,
            bytes: 0,
            txns: Vec::new(),
            done: HashSet::new(),
            len: 0,
        };
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                log.len = match std::fs::metadata(output) {
                    Ok(m) => m.len(),
                    Err(e) if e.kind() == ErrorKind::NotFound => 0,
                    Err(e) => return Err(Error::io("cannot inspect output file", output, e)),
                };
                return Ok(log);
            }
            Err(e) => return Err(Error::io("cannot read commit log", path, e)),
        };
        // A line without its newline is a torn write of a crashed commit.
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let text = std::str::from_utf8(&bytes[..complete])
            .map_err(|_| Error::User(format!("commit log '{}' is not text", path.display())))?;
        for (i, line) in text.lines().enumerate() {
            let parsed = parse_line(line).ok_or_else(|| {
                Error::User(format!(
                    "commit log '{}' line {}: unreadable '{line}'",
                    path.display(),
                    i + 1
                ))
            })?;
            log.apply(parsed);
        }
        if complete < bytes.len() {
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(complete as u64).and_then(|_| f.sync_all()))
                .map_err(|e| Error::io("cannot repair commit log", path, e))?;
        }
        log.bytes = complete as u64;
        Ok(log)
    }

    pub(super) fn is_done(&self, name: &str) -> bool {
        self.done.contains(name)
    }

    pub(super) fn apply(&mut self, line: LogLine) {
        match line {
            LogLine::Begin(name, offset) => {
                // An earlier begin without done was a crashed attempt.
                self.txns.retain(|t| t.name != name || t.end.is_some());
                self.txns.push(Committed {
                    name,
                    offset,
                    end: None,
                });
            }
            LogLine::Done(name, end) => {
                if let Some(t) = self.txns.iter_mut().rev().find(|t| t.name == name) {
                    t.end = Some(end);
                    self.done.insert(name);
                    self.len = end;
                }
            }
            LogLine::Truncate(len) => {
                self.txns.retain(|t| t.offset < len);
                self.done = self
                    .txns
                    .iter()
                    .filter(|t| t.end.is_some())
                    .map(|t| t.name.clone())
                    .collect();
                self.len = len;
            }
        }
    }

    /// Appends one line and fsyncs it; on failure, cuts the log back to its
    /// length before, so that the line does not count.
    pub(super) fn append(&mut self, line: &str) -> Result<()> {
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| Error::io("cannot open commit log", &self.path, e))?;
            self.file = Some(f);
        }
        let f = self.file.as_mut().expect("opened above");
        let line = format!("{line}\n");
        match f.write_all(line.as_bytes()).and_then(|_| f.sync_all()) {
            Ok(()) => {
                self.bytes += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                if let Err(cut) = f.set_len(self.bytes).and_then(|_| f.sync_all()) {
                    // A torn line is ignored by the next load; a whole one
                    // would count: re-read the log next time (the caller
                    // forgets it on error).
                    tracing::error!(log = %self.path.display(), error = %cut, "cannot cut a failed commit log append");
                }
                Err(Error::io("cannot write commit log", &self.path, e))
            }
        }
    }
}

fn parse_line(line: &str) -> Option<LogLine> {
    let mut words = line.split(' ');
    let line = match (words.next()?, words.next(), words.next()) {
        ("begin", Some(name), Some(offset)) => {
            LogLine::Begin(name.to_string(), offset.parse().ok()?)
        }
        ("done", Some(name), Some(end)) => LogLine::Done(name.to_string(), end.parse().ok()?),
        ("truncate", Some(len), None) => LogLine::Truncate(len.parse().ok()?),
        _ => return None,
    };
    words.next().is_none().then_some(line)
}
