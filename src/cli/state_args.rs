//! `--state heap|redb [--state-dir DIR]`, shared by the `run` commands.

use clap::Args;
use floe::state::StateBackendKind;
use std::path::PathBuf;

/// The state backend of `--state`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateArg {
    /// Keyed state in memory.
    Heap,
    /// Keyed state in a redb database file per subtask.
    Redb,
}

/// Where a job keeps its keyed state.
#[derive(Args, Debug, Clone, Default)]
pub struct StateArgs {
    /// Keep the job's keyed state in this state backend, through the state
    /// API (default: the built-in operators' own in-memory maps); `run
    /// window` keeps the built-in window operator's windows in the
    /// backend's window store.
    #[arg(long, value_enum)]
    pub state: Option<StateArg>,
    /// Directory of the redb state files (with `--state redb`; default: the
    /// system's temp directory).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

impl StateArgs {
    /// The backend asked for (`None` without `--state`), after checking
    /// that the state directory is writable.
    pub fn backend(&self) -> floe::Result<Option<StateBackendKind>> {
        match (self.state, &self.state_dir) {
            (None, None) => Ok(None),
            (None | Some(StateArg::Heap), Some(_)) => {
                Err(floe::Error::Config("--state-dir needs --state redb".into()))
            }
            (Some(StateArg::Heap), None) => Ok(Some(StateBackendKind::Heap)),
            (Some(StateArg::Redb), dir) => {
                if let Some(dir) = dir {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| floe::Error::io("cannot create state directory", dir, e))?;
                    let probe = dir.join(format!(".floe-probe-{}", std::process::id()));
                    std::fs::File::create(&probe)
                        .map_err(|e| floe::Error::io("cannot write state directory", dir, e))?;
                    let _ = std::fs::remove_file(&probe);
                }
                Ok(Some(StateBackendKind::Redb { dir: dir.clone() }))
            }
        }
    }
}
