//! An exactly-once text file sink: one line per record (`Display`), appended to
//! one output file by two-phase commit.
//!
//! Every transaction writes its lines to a pending file of its own next to the
//! output (`.<name>.floe-pending-<subtask>-<seq>-<nonce>`); pre-commit fsyncs it.
//! Commit appends the pending file to the output, recorded in a commit log
//! (`.<name>.floe-commits`) so that a commit done twice appends once:
//!
//! ```text
//! begin <txn> <output length before>   fsynced before the data is appended
//! done <txn> <output length after>     fsynced after the data is
//! truncate <length>                    a recovery dropped what lies beyond
//! ```
//!
//! Invariants:
//!
//! - The output holds exactly the transactions the log records as `done` (and
//!   not dropped by a later `truncate`), each once, in log order; anything
//!   beyond the last recorded length is the partial append of a crashed commit
//!   and is cut before the next append.
//! - Every subtask of a job appends to the same output; a process-wide lock per
//!   output path serializes commits. One process writes an output at a time:
//!   creating the sink takes an OS advisory lock (`flock`) on
//!   `.<name>.floe-lock`, held until the last copy of the sink value is
//!   dropped (the job ended) or the process dies (the kernel drops it, even on
//!   `kill -9`); a sink on the same output in another process is refused with
//!   [`Error::OutputInUse`], before it could reset the output or delete the
//!   commit log and pending files the running job needs.
//! - A commit that fails (a full disk, an I/O error) cuts the output back to
//!   its length before the commit and fsyncs it before returning the error,
//!   so readers only ever see committed transactions.
//! - The sink renames, replaces or deletes nothing but its own files (pending
//!   files, the commit log; the lock file is left in place) and content it
//!   appended itself.
//!
//! A fresh start (no restore) empties the output and removes the commit log and
//! stale pending files of that output, once per sink value (the first subtask to
//! open does it). A restore from checkpoint n keeps the output: see
//! [`TransactionalFileSink::recover`](TwoPhaseCommitSink::recover).

use super::two_phase::TwoPhaseCommitSink;
use crate::operators::sink::SinkContext;
use crate::{Error, Result};
use floe_actors::element::Batch;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// A transaction of [`TransactionalFileSink`]: names its pending file.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileTransaction {
    /// `<subtask>-<seq>-<nonce>`; unique across runs (the nonce holds the
    /// process id and a per-process counter).
    pub name: String,
}

/// Appends each record's `Display` form as a line to one file, exactly once
/// across failures.
///
/// # Examples
/// ```
/// use floe::connectors::transactional_file::TransactionalFileSink;
/// use floe::connectors::two_phase::TwoPhaseCommitSink;
/// use floe::Record;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("out.txt");
/// let mut sink = TransactionalFileSink::new(&path).unwrap();
/// let mut txn = TwoPhaseCommitSink::<u32>::begin(&mut sink).unwrap();
/// sink.write(&mut txn, vec![Record::new(1u32), Record::new(2)]).unwrap();
/// TwoPhaseCommitSink::<u32>::pre_commit(&mut sink, &mut txn).unwrap();
/// TwoPhaseCommitSink::<u32>::commit(&mut sink, txn).unwrap();
/// assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
/// ```
#[derive(Debug)]
pub struct TransactionalFileSink {
    /// The output file, absolute.
    path: PathBuf,
    dir: PathBuf,
    file_name: String,
    /// Whether the fresh-start reset was done (shared by the clones of one
    /// sink value, i.e. the subtasks of one job).
    initialized: Arc<Mutex<bool>>,
    /// The last restart from the beginning whose reset was done (shared
    /// like `initialized`; 0: none).
    scratch_reset: Arc<Mutex<u64>>,
    subtask: u32,
    /// Identifies this instance in pending file names; set when it starts.
    nonce: Option<String>,
    seq: u64,
    writers: HashMap<String, BufWriter<File>>,
    /// This process's lock on the output (shared by every sink value on it).
    claim: Arc<OutputClaim>,
    /// Bytes the output may still take before appends fail (fault
    /// injection; `u64::MAX`: no fault). Shared by the clones.
    output_budget: Arc<AtomicU64>,
}

/// This process's claim on an output: the `flock` on its lock file, held
/// while the file stays open; the kernel releases it when the process dies.
#[derive(Debug)]
struct OutputClaim {
    _lock: File,
}

impl Clone for TransactionalFileSink {
    /// A new instance on the same output, sharing the fresh-start reset.
    fn clone(&self) -> Self {
        TransactionalFileSink {
            path: self.path.clone(),
            dir: self.dir.clone(),
            file_name: self.file_name.clone(),
            initialized: self.initialized.clone(),
            scratch_reset: self.scratch_reset.clone(),
            subtask: self.subtask,
            nonce: None,
            seq: 0,
            writers: HashMap::new(),
            claim: self.claim.clone(),
            output_budget: self.output_budget.clone(),
        }
    }
}

impl Drop for TransactionalFileSink {
    fn drop(&mut self) {
        if let Some(nonce) = &self.nonce {
            lock(&output_state(&self.path)).live.remove(nonce);
        }
    }
}

impl TransactionalFileSink {
    /// A sink appending to `path`, which must be a regular file or not exist,
    /// in an existing directory.
    ///
    /// Claims the output for this process (see the module documentation):
    /// [`Error::OutputInUse`] while another process's job writes it. Sink
    /// values of one process on the same output share the claim.
    pub fn new(path: impl Into<PathBuf>) -> Result<Self> {
        let given: PathBuf = path.into();
        let not_regular = || {
            Error::Config(format!(
                "'{}' is not a regular file; the transactional sink needs one",
                given.display()
            ))
        };
        if given.as_os_str() == "-" {
            return Err(not_regular());
        }
        match std::fs::metadata(&given) {
            Ok(m) if !m.is_file() => return Err(not_regular()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("cannot inspect output file", &given, e)),
        }
        let path = std::path::absolute(&given)
            .map_err(|e| Error::io("cannot resolve output file", &given, e))?;
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(not_regular)?
            .to_string();
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let lock_path = dir.join(format!(".{file_name}.floe-lock"));
        let claim = claim_output(&path, &lock_path)?;
        Ok(TransactionalFileSink {
            path,
            dir,
            file_name,
            initialized: Arc::new(Mutex::new(false)),
            scratch_reset: Arc::new(Mutex::new(0)),
            subtask: 0,
            nonce: None,
            seq: 0,
            writers: HashMap::new(),
            claim,
            output_budget: Arc::new(AtomicU64::new(u64::MAX)),
        })
    }

    /// Fault injection, for tests: from now on, appends to the output fail
    /// with [`ErrorKind::StorageFull`] once `bytes` more bytes were appended
    /// (by this sink value and its clones), as on a disk that fills up in
    /// the middle of a commit. `u64::MAX` turns the fault off.
    pub fn fail_output_after(&self, bytes: u64) {
        self.output_budget.store(bytes, Ordering::Relaxed);
    }

    /// The output file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The commit log of the output.
    pub fn commit_log_path(&self) -> PathBuf {
        self.dir.join(format!(".{}.floe-commits", self.file_name))
    }

    /// The pending file of `txn`.
    pub fn pending_path(&self, txn: &FileTransaction) -> PathBuf {
        self.dir
            .join(format!("{}{}", self.pending_prefix(), txn.name))
    }

    fn pending_prefix(&self) -> String {
        format!(".{}.floe-pending-", self.file_name)
    }

    /// Registers this instance's nonce as live, so a recovery running
    /// concurrently keeps its pending files.
    fn start(&mut self) {
        if self.nonce.is_none() {
            static INSTANCES: AtomicU64 = AtomicU64::new(0);
            let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
            let nonce = format!("{}x{n}", std::process::id());
            lock(&output_state(&self.path)).live.insert(nonce.clone());
            self.nonce = Some(nonce);
        }
    }

    /// The names of this output's pending files present in its directory.
    fn pending_files(&self) -> Result<Vec<String>> {
        let prefix = self.pending_prefix();
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io("cannot list output directory", &self.dir, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io("cannot list output directory", &self.dir, e))?;
            if let Some(txn) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(prefix.as_str()))
                .filter(|txn| is_txn_name(txn))
            {
                names.push(txn.to_string());
            }
        }
        Ok(names)
    }

    /// Fresh start: empties the output, removes the commit log and stale
    /// pending files of this output.
    fn reset(&self, state: &mut OutputState) -> Result<()> {
        File::create(&self.path)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io("cannot create output file", &self.path, e))?;
        let log = self.commit_log_path();
        remove_if_present(&log)?;
        for txn in self.pending_files()? {
            if !state.live.contains(nonce_of(&txn)) {
                remove_if_present(&self.dir.join(format!("{}{txn}", self.pending_prefix())))?;
            }
        }
        sync_dir(&self.dir)?;
        state.log = None;
        Ok(())
    }

    /// Commits `txn` with the output's lock held.
    fn commit_locked(&self, state: &mut OutputState, txn: &FileTransaction) -> Result<()> {
        let log = state.log(&self.commit_log_path(), &self.path)?;
        let pending = self.pending_path(txn);
        if log.is_done(&txn.name) {
            return remove_if_present(&pending);
        }
        let mut data = match File::open(&pending) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::io(
                    "transaction not committed and its pending file is missing (records lost)",
                    pending,
                    e,
                ));
            }
            Err(e) => return Err(Error::io("cannot open pending file", pending, e)),
        };
        let start = log.len;
        let mut out = self.open_output(start)?;
        log.append(&format!("begin {} {start}", txn.name))?;
        let appended = if self.output_budget.load(Ordering::Relaxed) == u64::MAX {
            // File to file: the kernel copies (copy_file_range).
            std::io::copy(&mut data, &mut out)
        } else {
            let mut to = BudgetedWriter {
                inner: &mut out,
                budget: &self.output_budget,
            };
            std::io::copy(&mut data, &mut to)
        };
        let written = match appended.and_then(|n| out.sync_all().map(|_| n)) {
            Ok(n) => n,
            Err(e) => {
                let e = Error::io("cannot append to output file", &self.path, e);
                return Err(self.roll_back(&out, start, e));
            }
        };
        let end = start + written;
        if let Err(e) = log.append(&format!("done {} {end}", txn.name)) {
            // Not recorded as done: not committed, so not to be seen.
            return Err(self.roll_back(&out, start, e));
        }
        log.apply(LogLine::Begin(txn.name.clone(), start));
        log.apply(LogLine::Done(txn.name.clone(), end));
        remove_if_present(&pending)
    }

    /// A commit failed after it began appending: cuts the output back to
    /// `len`, its committed length, so that no reader sees the partial
    /// append, and returns `error`. If even that fails, the tail is cut
    /// before the next append or restore (see [`Self::open_output`]).
    fn roll_back(&self, out: &File, len: u64, error: Error) -> Error {
        if let Err(e) = out.set_len(len).and_then(|_| out.sync_all()) {
            tracing::error!(
                output = %self.path.display(),
                error = %e,
                "cannot cut a failed commit's partial append from the output"
            );
        }
        error
    }

    /// Opens the output positioned at `len`, cutting what lies beyond (a
    /// crashed commit's partial append).
    fn open_output(&self, len: u64) -> Result<File> {
        let mut out = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| Error::io("cannot open output file", &self.path, e))?;
        let actual = out
            .metadata()
            .map_err(|e| Error::io("cannot inspect output file", &self.path, e))?
            .len();
        if actual < len {
            return Err(Error::User(format!(
                "output file '{}' holds {actual} bytes, its commit log records {len}: \
                 it was changed by something else",
                self.path.display()
            )));
        }
        if actual > len {
            out.set_len(len)
                .and_then(|_| out.sync_all())
                .map_err(|e| Error::io("cannot truncate output file", &self.path, e))?;
        }
        out.seek(SeekFrom::Start(len))
            .map_err(|e| Error::io("cannot append to output file", &self.path, e))?;
        Ok(out)
    }
}

impl<T: Display + Send + 'static> TwoPhaseCommitSink<T> for TransactionalFileSink {
    type Txn = FileTransaction;

    /// On a fresh start, the first subtask to open resets the output.
    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.subtask = ctx.subtask.0;
        let mut initialized = lock(&self.initialized);
        if !*initialized {
            let state = output_state(&self.path);
            self.reset(&mut lock(&state))?;
            *initialized = true;
        }
        drop(initialized);
        self.start();
        Ok(())
    }

    fn on_restore(&mut self, ctx: &SinkContext) -> Result<()> {
        self.subtask = ctx.subtask.0;
        *lock(&self.initialized) = true;
        Ok(())
    }

    /// The job starts over: the first subtask to get here resets the output
    /// as on a fresh start (what was committed is written again).
    fn on_restart_from_scratch(&mut self, ctx: &SinkContext, restart: u64) -> Result<()> {
        self.subtask = ctx.subtask.0;
        let mut done = lock(&self.scratch_reset);
        if *done < restart {
            let state = output_state(&self.path);
            self.reset(&mut lock(&state))?;
            *done = restart;
        }
        drop(done);
        *lock(&self.initialized) = true;
        Ok(())
    }

    fn begin(&mut self) -> Result<FileTransaction> {
        self.start();
        let nonce = self.nonce.as_deref().expect("started above");
        let txn = FileTransaction {
            name: format!("{}-{}-{nonce}", self.subtask, self.seq),
        };
        self.seq += 1;
        let path = self.pending_path(&txn);
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("cannot create pending file", &path, e))?;
        self.writers
            .insert(txn.name.clone(), BufWriter::with_capacity(256 * 1024, f));
        Ok(txn)
    }

    fn write(&mut self, txn: &mut FileTransaction, batch: Batch<T>) -> Result<()> {
        let path = self.pending_path(txn);
        let w = self.writers.get_mut(&txn.name).ok_or_else(|| {
            Error::User(format!("transaction {} is not open for writing", txn.name))
        })?;
        for r in batch {
            writeln!(w, "{}", r.value).map_err(|e| Error::io("cannot write", &path, e))?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, txn: &mut FileTransaction) -> Result<()> {
        let path = self.pending_path(txn);
        match self.writers.remove(&txn.name) {
            Some(w) => {
                let f = w
                    .into_inner()
                    .map_err(|e| Error::io("cannot write", &path, e.into_error()))?;
                f.sync_all()
                    .map_err(|e| Error::io("cannot sync pending file", &path, e))?;
            }
            // Pre-committed before: it must still be there.
            None => {
                std::fs::metadata(&path)
                    .map_err(|e| Error::io("cannot find pending file", &path, e))?;
            }
        }
        sync_dir(&self.dir)
    }

    fn commit(&mut self, txn: FileTransaction) -> Result<()> {
        self.writers.remove(&txn.name);
        let state = output_state(&self.path);
        let mut state = lock(&state);
        let r = self.commit_locked(&mut state, &txn);
        if r.is_err() {
            // What reached the disk is unknown: re-read the log next time.
            state.log = None;
        }
        r
    }

    fn abort(&mut self, txn: FileTransaction) -> Result<()> {
        self.writers.remove(&txn.name);
        remove_if_present(&self.pending_path(&txn))
    }

    /// Restores the output to checkpoint n, given the transactions pending at n
    /// (of every former subtask):
    ///
    /// 1. Output committed after n is dropped, because the replay produces it
    ///    again. Every subtask running at n has a transaction pending at n and
    ///    commits its later ones after it, so in the log everything before the
    ///    first restored transaction belongs to n or earlier, and what follows
    ///    is restored transactions mixed with later ones. If later ones are
    ///    there, the restored ones among them are copied back into their
    ///    pending files, a `truncate` to the first restored transaction is
    ///    logged and the output is cut there.
    /// 2. The restored transactions are committed, idempotently.
    /// 3. Leftover pending files of this output (transactions begun after n,
    ///    or aborted by a crash) are deleted, except those of sink instances
    ///    alive in this process.
    ///
    /// A restored run keeps appending to the same output.
    fn recover(&mut self, committed: Vec<FileTransaction>) -> Result<()> {
        *lock(&self.initialized) = true;
        let state = output_state(&self.path);
        let mut state = lock(&state);
        // Re-read: the log may have been written by the process that failed.
        state.log = None;
        let r = self.recover_locked(&mut state, &committed);
        if r.is_err() {
            state.log = None;
        }
        r
    }
}

impl TransactionalFileSink {
    /// [`recover`](TwoPhaseCommitSink::recover) with the output's lock held.
    fn recover_locked(&self, state: &mut OutputState, committed: &[FileTransaction]) -> Result<()> {
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

/// Whether `s` has the form `<subtask>-<seq>-<pid>x<counter>`.
fn is_txn_name(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    parts.len() == 3
        && digits(parts[0])
        && digits(parts[1])
        && parts[2]
            .split_once('x')
            .is_some_and(|(pid, n)| digits(pid) && digits(n))
}

/// The nonce part of a transaction name.
fn nonce_of(txn: &str) -> &str {
    txn.rsplit('-').next().unwrap_or(txn)
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::io("cannot remove", path, e)),
        _ => Ok(()),
    }
}

/// Writes what `from` reads into a new file at `path`, fsynced.
fn copy_synced(from: &mut impl Read, path: &Path) -> Result<()> {
    File::create(path)
        .and_then(|mut f| std::io::copy(from, &mut f).and_then(|_| f.sync_all()))
        .map_err(|e| Error::io("cannot write pending file", path, e))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("cannot sync directory", dir, e))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state behind these locks is re-read from disk when in doubt; a
    // panic in another subtask does not make it unusable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What this process knows of one output file.
#[derive(Default)]
struct OutputState {
    /// The parsed commit log, loaded on first use.
    log: Option<CommitLog>,
    /// Nonces of the sink instances alive in this process.
    live: HashSet<String>,
}

impl OutputState {
    fn log(&mut self, path: &Path, output: &Path) -> Result<&mut CommitLog> {
        if self.log.is_none() {
            self.log = Some(CommitLog::load(path, output)?);
        }
        Ok(self.log.as_mut().expect("loaded above"))
    }
}

/// A [`Write`] that fails with [`ErrorKind::StorageFull`] once its budget
/// of bytes is spent (fault injection; the budget is `u64::MAX` otherwise).
struct BudgetedWriter<'a> {
    inner: &'a mut File,
    budget: &'a AtomicU64,
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

/// This process's claim on the output `path`, its lock file `lock_path`:
/// the one already held if a sink value of this process holds it, else a new
/// `flock` on the lock file (refused while another process holds it).
fn claim_output(path: &Path, lock_path: &Path) -> Result<Arc<OutputClaim>> {
    static CLAIMS: OnceLock<Mutex<HashMap<PathBuf, Weak<OutputClaim>>>> = OnceLock::new();
    let mut claims = lock(CLAIMS.get_or_init(Default::default));
    if let Some(claim) = claims.get(path).and_then(Weak::upgrade) {
        return Ok(claim);
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path)
        .map_err(|e| lock_error(path, "create", lock_path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(Error::OutputInUse {
                path: path.to_path_buf(),
                lock: lock_path.to_path_buf(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(lock_error(path, "lock", lock_path, e));
        }
    }
    let claim = Arc::new(OutputClaim { _lock: file });
    claims.insert(path.to_path_buf(), Arc::downgrade(&claim));
    Ok(claim)
}

/// An I/O error on the lock file of output `path`, naming both (the kind
/// kept, so that it is classified like the error itself).
fn lock_error(path: &Path, what: &str, lock_path: &Path, e: std::io::Error) -> Error {
    let message = format!("cannot {what} its lock file '{}': {e}", lock_path.display());
    Error::io(
        "cannot write output",
        path,
        std::io::Error::new(e.kind(), message),
    )
}

/// The process-wide state of the output at `path`.
fn output_state(path: &Path) -> Arc<Mutex<OutputState>> {
    static OUTPUTS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<OutputState>>>>> = OnceLock::new();
    lock(OUTPUTS.get_or_init(Default::default))
        .entry(path.to_path_buf())
        .or_default()
        .clone()
}

/// A transaction the log records as begun, and committed once `end` is set.
#[derive(Clone, Debug)]
struct Committed {
    name: String,
    offset: u64,
    end: Option<u64>,
}

enum LogLine {
    Begin(String, u64),
    Done(String, u64),
    Truncate(u64),
}

/// The commit log, parsed: the live transactions in log order and the output
/// length it records.
struct CommitLog {
    path: PathBuf,
    file: Option<File>,
    /// The log file's length in bytes: where a failed append is cut back to.
    bytes: u64,
    txns: Vec<Committed>,
    done: HashSet<String>,
    len: u64,
}

impl CommitLog {
    /// Reads the log at `path`; without one, nothing was committed to
    /// `output` yet and what it holds is kept.
    fn load(path: &Path, output: &Path) -> Result<Self> {
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

    fn is_done(&self, name: &str) -> bool {
        self.done.contains(name)
    }

    fn apply(&mut self, line: LogLine) {
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
    fn append(&mut self, line: &str) -> Result<()> {
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
