//! The claim of one process on an output (an OS advisory lock on its lock
//! file) and the process-wide state of each output.

use super::commit::CommitLog;
use super::lock;
use crate::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// This process's claim on an output: the `flock` on its lock file, held
/// while the file stays open; the kernel releases it when the process dies.
#[derive(Debug)]
pub(super) struct OutputClaim {
    _lock: File,
}

/// A claim of this process on an output file, held while a value (or a
/// clone) lives: every writer of an output takes it, the transactional file
/// sink and the CLI's direct file output alike, so a job in another process
/// on the same output is refused ([`Error::OutputInUse`]) before it
/// truncates the file. Claims of one process on one output are shared.
#[derive(Clone, Debug)]
pub struct OutputLock {
    _claim: Arc<OutputClaim>,
}

impl OutputLock {
    /// Claims the output `path` (a regular file, or a path that does not
    /// exist yet) for this process: an OS advisory lock on
    /// `.<name>.floe-lock` next to it.
    pub fn claim(path: &Path) -> Result<Self> {
        let (path, lock_path) = lock_paths(path)?;
        Ok(OutputLock {
            _claim: claim_output(&path, &lock_path)?,
        })
    }
}

/// The absolute path of the output `given` and of its lock file.
pub(super) fn lock_paths(given: &Path) -> Result<(PathBuf, PathBuf)> {
    let path = std::path::absolute(given)
        .map_err(|e| Error::io("cannot resolve output file", given, e))?;
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::Config(format!(
            "'{}' is not a file name an output can have",
            given.display()
        ))
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let lock_path = dir.join(format!(".{name}.floe-lock"));
    Ok((path, lock_path))
}

/// This process's claim on the output `path`, its lock file `lock_path`:
/// the one already held if a sink value of this process holds it, else a new
/// `flock` on the lock file (refused while another process holds it).
pub(super) fn claim_output(path: &Path, lock_path: &Path) -> Result<Arc<OutputClaim>> {
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
pub(super) fn output_state(path: &Path) -> Arc<Mutex<OutputState>> {
    static OUTPUTS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<OutputState>>>>> = OnceLock::new();
    lock(OUTPUTS.get_or_init(Default::default))
        .entry(path.to_path_buf())
        .or_default()
        .clone()
}

/// What this process knows of one output file.
#[derive(Default)]
pub(super) struct OutputState {
    /// The parsed commit log, loaded on first use.
    pub(super) log: Option<CommitLog>,
    /// Nonces of the sink instances alive in this process.
    pub(super) live: HashSet<String>,
}

impl OutputState {
    pub(super) fn log(&mut self, path: &Path, output: &Path) -> Result<&mut CommitLog> {
        if self.log.is_none() {
            self.log = Some(CommitLog::load(path, output)?);
        }
        Ok(self.log.as_mut().expect("loaded above"))
    }
}
