//! An exactly-once text file sink: one line per record (`Display`), appended to
//! one output file by two-phase commit.
//!
//! Every transaction writes its lines to a pending file of its own next to the
//! output (`.<name>.floe-pending-<subtask>-<seq>-<nonce>`); pre-commit fsyncs it.
//! Commit appends the pending file to the output, recorded in a commit log
//! (`.<name>.floe-commits`) so that a commit done twice appends once:
//!
//! ```text
//! begin <txn> <output length before> <checkpoint>   fsynced before the data is appended
//! done <txn> <output length after>                  fsynced after the data is
//! truncate <length> <txn>/<checkpoint>...           a recovery dropped what lies beyond
//! ```
//!
//! `<checkpoint>` is the checkpoint the transaction was pre-committed for
//! (`-`: not known); a `truncate` lists the transactions of checkpoints up
//! to the restored one that lay beyond the cut, copied back to their pending
//! files to be appended again.
//!
//! Invariants:
//!
//! - The output holds exactly the transactions the log records as `done` (and
//!   not dropped by a later `truncate`), each once, in log order; anything
//!   beyond the last recorded length is the partial append of a crashed commit
//!   and is cut before the next append.
//! - A restore of checkpoint n drops exactly the commits of checkpoints
//!   after n, whichever subtask made them and in whatever order.
//! - Every subtask of a job appends to the same output; a process-wide lock per
//!   output path serializes commits. One process writes an output at a time:
//!   creating the sink takes an OS advisory lock (`flock`) on
//!   `.<name>.floe-lock`, held until the last copy of the sink value is
//!   dropped (the job ended) or the process dies (the kernel drops it, even on
//!   `kill -9`); a sink on the same output in another process is refused with
//!   [`Error::OutputInUse`], before it could reset the output or delete the
//!   commit log and pending files the running job needs. The other writers
//!   of a file (the CLI's direct output, [`FileSink`](super::file_sink::FileSink))
//!   take the same lock ([`OutputLock`]).
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
//! [`TransactionalFileSink::recover_to`].

use super::two_phase::{Recovery, TwoPhaseCommitSink};
use crate::operators::sink::SinkContext;
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod commit;
mod lock;

use commit::{BudgetedWriter, LogLine};
pub use lock::OutputLock;
use lock::{OutputClaim, OutputState, claim_output, lock_paths, output_state};

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
/// use floe::connectors::two_phase::{AFTER_END, TwoPhaseCommitSink};
/// use floe::Record;
/// use futures::executor::block_on;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("out.txt");
/// let mut sink = TransactionalFileSink::new(&path).unwrap();
/// let mut txn = block_on(TwoPhaseCommitSink::<u32>::begin(&mut sink)).unwrap();
/// block_on(sink.write(&mut txn, vec![Record::new(1u32), Record::new(2)])).unwrap();
/// block_on(TwoPhaseCommitSink::<u32>::pre_commit(&mut sink, &mut txn, None)).unwrap();
/// block_on(TwoPhaseCommitSink::<u32>::commit(&mut sink, txn, AFTER_END)).unwrap();
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
    /// The transactions still open (begun, not pre-committed) belong to no
    /// checkpoint and can never be committed: their pending files go. So a
    /// job that stops after its final checkpoint (or ends, fails, or
    /// restarts) leaves none behind; a process that dies leaves them to the
    /// next recovery.
    fn drop(&mut self) {
        for (name, writer) in std::mem::take(&mut self.writers) {
            drop(writer.into_parts());
            let pending = self.pending_path(&FileTransaction { name });
            if let Err(e) = remove_if_present(&pending) {
                tracing::warn!(error = %e, "cannot remove an open transaction's pending file");
            }
        }
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
        let (path, lock_path) = lock_paths(&given).map_err(|e| match e {
            Error::Config(_) => not_regular(),
            e => e,
        })?;
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(not_regular)?
            .to_string();
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
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

    /// Commits `txn`, pre-committed for `checkpoint`, with the output's
    /// lock held.
    fn commit_locked(
        &self,
        state: &mut OutputState,
        txn: &FileTransaction,
        checkpoint: Option<u64>,
    ) -> Result<()> {
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
        let label = checkpoint.map_or_else(|| "-".to_string(), |c| c.to_string());
        log.append(&format!("begin {} {start} {label}", txn.name))?;
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
        log.apply(LogLine::Begin(txn.name.clone(), start, checkpoint));
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
            return Err(Error::OutputChanged {
                path: self.path.clone(),
                actual,
                logged: len,
            });
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

/// The transaction steps; each finishes before it returns (the sink runs
/// on the subtask's thread, [`DataStream::sink_exactly_once`](crate::DataStream::sink_exactly_once)).
impl<T: Display + Send + 'static> TwoPhaseCommitSink<T> for TransactionalFileSink {
    type Txn = FileTransaction;

    /// A restore keeps the output (see [`recover_to`](Self::recover_to));
    /// a start from scratch resets it as a fresh start does, once per
    /// restart, by the first subtask to get here (what was committed is
    /// written again).
    async fn recover(&mut self, ctx: &SinkContext, r: Recovery<FileTransaction>) -> Result<()> {
        self.subtask = ctx.subtask.0;
        if let Some(restart) = r.from_scratch {
            let mut done = lock(&self.scratch_reset);
            if *done < restart {
                let state = output_state(&self.path);
                self.reset(&mut lock(&state))?;
                *done = restart;
            }
            drop(done);
            *lock(&self.initialized) = true;
            return Ok(());
        }
        if !r.restored {
            return Ok(());
        }
        *lock(&self.initialized) = true;
        if r.partial {
            // Region failover: the rest of the job runs on, so nothing is
            // rolled back.
            for (checkpoint, txn) in r.pending {
                self.commit_labelled(txn, Some(checkpoint.0))?;
            }
            return Ok(());
        }
        if !r.commit_pending {
            return Ok(());
        }
        self.recover_to(r.checkpoint.unwrap_or(AFTER_ALL), r.pending)
    }

    /// On a fresh start, the first subtask to open resets the output.
    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
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

    async fn begin(&mut self) -> Result<FileTransaction> {
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

    async fn write(&mut self, txn: &mut FileTransaction, batch: Batch<T>) -> Result<()> {
        let path = self.pending_path(txn);
        let w = self.writers.get_mut(&txn.name).ok_or_else(|| {
            Error::Internal(format!("transaction {} is not open for writing", txn.name))
        })?;
        for r in batch {
            writeln!(w, "{}", r.value).map_err(|e| Error::io("cannot write", &path, e))?;
        }
        Ok(())
    }

    async fn pre_commit(
        &mut self,
        txn: &mut FileTransaction,
        _checkpoint: Option<CheckpointId>,
    ) -> Result<()> {
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

    /// Commits `txn`, recording `checkpoint` with it in the commit log: a
    /// restore of an earlier checkpoint drops it.
    async fn commit(&mut self, txn: FileTransaction, checkpoint: CheckpointId) -> Result<()> {
        self.commit_labelled(txn, Some(checkpoint.0))
    }

    async fn abort(&mut self, txn: FileTransaction) -> Result<()> {
        self.writers.remove(&txn.name);
        remove_if_present(&self.pending_path(&txn))
    }
}

impl TransactionalFileSink {
    /// Restores the output to checkpoint `restored`, given the transactions
    /// pending at it (of every former subtask) and the checkpoint of each
    /// (what [`recover`](TwoPhaseCommitSink::recover) does on subtask 0 of
    /// a restore):
    ///
    /// 1. Transactions an earlier recovery cut and requeued (it died before
    ///    it appended them again) are appended.
    /// 2. Output committed for a checkpoint after `restored` is dropped,
    ///    because the replay produces it again. Every commit is logged with
    ///    its checkpoint, so this is exact whatever order the subtasks
    ///    committed in: from the first such commit on, the output is cut;
    ///    the commits after that point of checkpoints up to `restored` are
    ///    first copied back into their pending files and listed in the
    ///    `truncate` line, then appended again. Commits whose checkpoint is
    ///    not known (logs of earlier versions) are kept.
    /// 3. The restored transactions are committed, idempotently.
    /// 4. Leftover pending files of this output (transactions begun after
    ///    `restored`, or aborted by a crash) are deleted, except those of
    ///    sink instances alive in this process.
    ///
    /// A restored run keeps appending to the same output.
    pub fn recover_to(
        &mut self,
        restored: CheckpointId,
        pending: Vec<(CheckpointId, FileTransaction)>,
    ) -> Result<()> {
        *lock(&self.initialized) = true;
        let state = output_state(&self.path);
        let mut state = lock(&state);
        // Re-read: the log may have been written by the process that failed.
        state.log = None;
        let pending: Vec<(u64, FileTransaction)> =
            pending.into_iter().map(|(c, t)| (c.0, t)).collect();
        let r = self.recover_locked(&mut state, restored.0, &pending);
        if r.is_err() {
            state.log = None;
        }
        r
    }
}

/// The checkpoint of nothing later: a restore at it drops no commit.
const AFTER_ALL: CheckpointId = CheckpointId(u64::MAX);

impl TransactionalFileSink {
    fn commit_labelled(&mut self, txn: FileTransaction, checkpoint: Option<u64>) -> Result<()> {
        self.writers.remove(&txn.name);
        let state = output_state(&self.path);
        let mut state = lock(&state);
        let r = self.commit_locked(&mut state, &txn, checkpoint);
        if r.is_err() {
            // What reached the disk is unknown: re-read the log next time.
            state.log = None;
        }
        r
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
