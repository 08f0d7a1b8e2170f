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
    /// [`recover_to`](crate::connectors::two_phase::TwoPhaseCommitSink::recover_to)
    /// with the output's lock held: `pending` are the transactions pending
    /// at checkpoint `restored`, with the checkpoint each was pre-committed
    /// for.
    pub(super) fn recover_locked(
        &self,
        state: &mut OutputState,
        restored: u64,
        pending: &[(u64, FileTransaction)],
    ) -> Result<()> {
        let log_path = self.commit_log_path();
        if !pending.is_empty()
            && !log_path.exists()
            && pending.iter().all(|(_, t)| !self.pending_path(t).exists())
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
        // An earlier recovery that cut the output and died before it
        // appended the kept transactions again: append them now.
        for (name, checkpoint) in state.log(&log_path, &self.path)?.requeued.clone() {
            self.commit_locked(state, &FileTransaction { name }, checkpoint)?;
        }
        let log = state.log(&log_path, &self.path)?;
        let names: HashSet<&str> = pending.iter().map(|(_, t)| t.name.as_str()).collect();
        // Committed for a checkpoint after the restored one: the replay
        // produces it again. Commits of a checkpoint up to the restored one
        // stay, wherever they lie: subtasks commit in any order, so a
        // transaction of an earlier checkpoint may follow a restored one.
        let later = |t: &Committed| {
            !names.contains(t.name.as_str()) && t.checkpoint.is_some_and(|c| c > restored)
        };
        let done: Vec<&Committed> = log.txns.iter().filter(|t| t.end.is_some()).collect();
        if let Some(first) = done.iter().position(|t| later(t)) {
            let cut = done[first].offset;
            // Everything at or beyond the cut goes, an empty transaction
            // committed just before the first later one too (it lies at
            // the cut): the ones to keep are appended again.
            let kept: Vec<Committed> = done
                .iter()
                .filter(|t| t.offset >= cut && !later(t))
                .map(|t| Committed::clone(t))
                .collect();
            let mut out = File::open(&self.path)
                .map_err(|e| Error::io("cannot open output file", &self.path, e))?;
            for t in &kept {
                let end = t.end.expect("only committed ones are kept");
                let pending = self.pending_path(&FileTransaction {
                    name: t.name.clone(),
                });
                out.seek(SeekFrom::Start(t.offset))
                    .map_err(|e| Error::io("cannot read output file", &self.path, e))?;
                copy_synced(&mut (&mut out).take(end - t.offset), &pending)?;
            }
            sync_dir(&self.dir)?;
            let requeued: Vec<(String, Option<u64>)> =
                kept.into_iter().map(|t| (t.name, t.checkpoint)).collect();
            let mut line = format!("truncate {cut}");
            for (name, checkpoint) in &requeued {
                line.push_str(&format!(" {name}/{}", label(*checkpoint)));
            }
            // One line: the cut and what it requeues count together or not
            // at all (a torn line does not count).
            log.append(&line)?;
            log.apply(LogLine::Truncate(cut, requeued.clone()));
            drop(self.open_output(cut)?);
            for (name, checkpoint) in requeued {
                self.commit_locked(state, &FileTransaction { name }, checkpoint)?;
            }
        }
        for (checkpoint, txn) in pending {
            self.commit_locked(state, txn, Some(*checkpoint))?;
        }
        for name in self.pending_files()? {
            if !names.contains(name.as_str()) && !state.live.contains(nonce_of(&name)) {
                remove_if_present(&self.dir.join(format!("{}{name}", self.pending_prefix())))?;
            }
        }
        sync_dir(&self.dir)
    }
}

/// A checkpoint as the log writes it (`-`: not known).
fn label(checkpoint: Option<u64>) -> String {
    checkpoint.map_or_else(|| "-".to_string(), |c| c.to_string())
}

fn parse_label(s: &str) -> Option<Option<u64>> {
    if s == "-" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
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
    /// The checkpoint it was pre-committed for (`None`: not known).
    checkpoint: Option<u64>,
}

/// One line of the commit log (see the module documentation).
pub(super) enum LogLine {
    /// `begin <txn> <offset> [<checkpoint>|-]`.
    Begin(String, u64, Option<u64>),
    /// `done <txn> <end>`.
    Done(String, u64),
    /// `truncate <length> [<txn>/<checkpoint>]...`: the transactions to
    /// append again after the cut.
    Truncate(u64, Vec<(String, Option<u64>)>),
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
    /// Transactions a recovery cut from the output and copied back to their
    /// pending files, to append again (in this order), until they are done.
    pub(super) requeued: Vec<(String, Option<u64>)>,
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
            requeued: Vec::new(),
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
        let damaged = |e: Box<dyn std::error::Error + Send + Sync>| {
            Error::io(
                "cannot read commit log",
                path,
                std::io::Error::new(ErrorKind::InvalidData, e),
            )
        };
        let text = std::str::from_utf8(&bytes[..complete]).map_err(|e| damaged(e.into()))?;
        for (i, line) in text.lines().enumerate() {
            let parsed = parse_line(line)
                .ok_or_else(|| damaged(format!("line {}: unreadable '{line}'", i + 1).into()))?;
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
            LogLine::Begin(name, offset, checkpoint) => {
                // An earlier begin without done was a crashed attempt.
                self.txns.retain(|t| t.name != name || t.end.is_some());
                self.txns.push(Committed {
                    name,
                    offset,
                    end: None,
                    checkpoint,
                });
            }
            LogLine::Done(name, end) => {
                if let Some(t) = self.txns.iter_mut().rev().find(|t| t.name == name) {
                    t.end = Some(end);
                    self.requeued.retain(|(r, _)| *r != name);
                    self.done.insert(name);
                    self.len = end;
                }
            }
            LogLine::Truncate(len, requeued) => {
                for r in requeued {
                    if !self.requeued.iter().any(|(name, _)| *name == r.0) {
                        self.requeued.push(r);
                    }
                }
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
            // Logs written before commits named their checkpoint have none.
            let checkpoint = match words.next() {
                Some(c) => parse_label(c)?,
                None => None,
            };
            LogLine::Begin(name.to_string(), offset.parse().ok()?, checkpoint)
        }
        ("done", Some(name), Some(end)) => LogLine::Done(name.to_string(), end.parse().ok()?),
        ("truncate", Some(len), requeued) => {
            let mut list = Vec::new();
            for word in requeued.into_iter().chain(words.by_ref()) {
                let (name, checkpoint) = word.split_once('/')?;
                list.push((name.to_string(), parse_label(checkpoint)?));
            }
            LogLine::Truncate(len.parse().ok()?, list)
        }
        _ => return None,
    };
    words.next().is_none().then_some(line)
}
