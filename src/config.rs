//! Job configuration: parallelism, key groups, batching, chaining.

use floe_actors::RuntimeConfig;
use floe_actors::keygroup::DEFAULT_MAX_PARALLELISM;
use std::time::Duration;

/// Open files one arbiter counts for: the four its thread's event loop
/// holds (measured: `ls /proc/PID/fd` of `floe run wordcount --arbiters N`
/// grows by 4 per arbiter) and one for what its subtasks open.
pub const FILES_PER_ARBITER: u64 = 5;

/// Open files kept for the rest of the process (standard streams, the
/// checkpoint store, input and output files, sockets).
const RESERVED_FILES: u64 = 64;

/// The process's limit of open files (the soft `RLIMIT_NOFILE`), if any.
pub fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` writes the limit into `limit`, which lives
        // for the call.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        // `rlim_t` is `u64` here, narrower on some platforms.
        #[allow(clippy::unnecessary_cast)]
        let current = limit.rlim_cur as u64;
        (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(current)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The most arbiters (threads) a job may start under the open-files limit:
/// each holds [`FILES_PER_ARBITER`], and some are kept for the rest of the
/// process. `None`: no limit.
pub fn max_arbiters() -> Option<usize> {
    let limit = open_files_limit()?;
    Some((limit.saturating_sub(RESERVED_FILES) / FILES_PER_ARBITER).max(1) as usize)
}

/// What a job does when [`Config::restore_from`] names nothing to restore.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreMode {
    /// The restore must succeed: no checkpoint there fails the job's start
    /// ("no checkpoint or savepoint at ...").
    #[default]
    Required,
    /// Restore the latest completed checkpoint in the directory if there is
    /// one, else start fresh (a service's first start). A checkpoint that is
    /// there but cannot be restored (damaged, incompatible) still fails.
    LatestOrFresh,
}

/// The settings of a job, set on the environment before operators are added.
///
/// Start from [`Config::default`] and set fields (`config.parallelism = 4`):
/// the struct is `#[non_exhaustive]`, so settings can be added without
/// breaking code written that way.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Default parallelism of operators (sources of collections and files
    /// use 1); by default one per core, at most the max parallelism.
    pub parallelism: usize,
    /// Number of key groups (the upper bound of keyed parallelism).
    pub max_parallelism: u32,
    /// Fuse forward edges of equal parallelism into one subtask.
    pub chaining: bool,
    /// Seed of every seeded choice the runtime makes (shuffle partitioning).
    pub seed: u64,
    /// Batching and flow control.
    pub runtime: RuntimeConfig,
    /// Checkpointing (off unless an interval is set).
    pub checkpoint: crate::checkpoint::CheckpointConfig,
    /// Start from this checkpoint directory, checkpoint or savepoint.
    pub restore_from: Option<std::path::PathBuf>,
    /// What `restore_from` on a directory without a completed checkpoint
    /// does: fail (default) or start fresh ([`RestoreMode::LatestOrFresh`],
    /// see [`resume_latest`](Self::resume_latest)).
    pub restore_mode: RestoreMode,
    /// Keyed state taken key group by key group, each from a checkpoint of
    /// its own: `(checkpoint, key groups)`, used when `restore_from` is
    /// `None` (a group member's partitions, each from the checkpoint its
    /// committed offset names; `docs/scale-out.md`). Only keyed state is
    /// restored; sources start from their configured positions.
    pub restore_key_groups: Vec<(std::path::PathBuf, Vec<u32>)>,
    /// Facts about the job that `/status` and the dashboard show (`info`),
    /// e.g. a group member's generation and partitions.
    pub job_info: std::collections::BTreeMap<String, String>,
    /// Whether and when a failed job restarts; `None` here means the
    /// default: [`RestartStrategy::exponential_default`] with checkpointing
    /// on, no restart without.
    pub restart: Option<crate::failover::RestartStrategy>,
    /// What restarts.
    pub failover: crate::failover::FailoverStrategy,
    /// A fault injector and observers, given as trait objects (see
    /// [`with_fault_injector`](Self::with_fault_injector) and
    /// [`with_observer`](Self::with_observer)); none by default.
    pub hooks: crate::failover::JobHooks,
    /// The job's name: the `job` label of its metrics, in its status and
    /// logs. `None`: `job-N`, N counting the jobs the process started.
    pub job_name: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        let runtime = RuntimeConfig::default();
        Config {
            // One subtask per core, within the key groups.
            parallelism: runtime.arbiters.min(DEFAULT_MAX_PARALLELISM as usize),
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            chaining: true,
            seed: 0x5eed,
            runtime,
            checkpoint: Default::default(),
            restore_from: None,
            restore_mode: RestoreMode::Required,
            restore_key_groups: Vec::new(),
            job_info: Default::default(),
            restart: None,
            failover: Default::default(),
            hooks: Default::default(),
            job_name: None,
        }
    }
}

impl Config {
    /// Checks the settings, naming the first bad one.
    pub fn validate(&self) -> crate::Result<()> {
        if self.parallelism == 0 {
            return Err(crate::Error::Config(
                "parallelism must be at least 1".into(),
            ));
        }
        if self.max_parallelism == 0 || self.max_parallelism > 32_768 {
            return Err(crate::Error::Config(
                "max parallelism must be between 1 and 32768".into(),
            ));
        }
        if self.parallelism > self.max_parallelism as usize {
            return Err(crate::Error::Config(format!(
                "parallelism {} is above the max parallelism {} (the number of key groups)",
                self.parallelism, self.max_parallelism
            )));
        }
        if let Some(max) = max_arbiters()
            && self.runtime.arbiters > max
            && !self.runtime.deterministic
        {
            return Err(crate::Error::Config(format!(
                "{} arbiters need more open files than the limit allows (at most {max} with `ulimit -n` {})",
                self.runtime.arbiters,
                open_files_limit().unwrap_or(0)
            )));
        }
        self.checkpoint.validate()?;
        if let Some(mode) = self.deterministic() {
            mode.validate(self)?;
        }
        self.runtime
            .validate()
            .map_err(|e| crate::Error::InvalidConfig {
                source: Box::new(e),
            })
    }

    /// The restart strategy in force.
    pub fn restart_strategy(&self) -> crate::failover::RestartStrategy {
        match &self.restart {
            Some(r) => r.clone(),
            None if self.checkpoint.enabled() => {
                crate::failover::RestartStrategy::exponential_default()
            }
            None => crate::failover::RestartStrategy::None,
        }
    }

    /// Injects failures through `injector` (tests, demos): the planned
    /// faults and random kills it returns fail their subtasks with the typed
    /// [`floe_actors::Error::InjectedFault`]. Replaces an earlier injector.
    pub fn with_fault_injector(
        mut self,
        injector: std::sync::Arc<dyn crate::failover::FaultInjector>,
    ) -> Self {
        self.hooks.fault_injector = Some(injector);
        self
    }

    /// Adds `observer`, told the job's checkpoint, failure, restart and end
    /// events as they happen.
    pub fn with_observer(
        mut self,
        observer: std::sync::Arc<dyn crate::failover::JobObserver>,
    ) -> Self {
        self.hooks.observers.push(observer);
        self
    }

    /// The planned faults of the injector, if any.
    pub(crate) fn planned_faults(&self) -> &[crate::failover::Fault] {
        match &self.hooks.fault_injector {
            Some(i) => i.faults(),
            None => &[],
        }
    }

    /// Random kills to inject and their seed.
    pub(crate) fn random_failures(&self) -> (u32, u64) {
        self.hooks
            .fault_injector
            .as_ref()
            .map_or((0, 0), |i| i.random_failures())
    }

    /// Deterministic execution (the chaos harness's injector sets it).
    pub(crate) fn deterministic(
        &self,
    ) -> Option<&crate::failover::deterministic::DeterministicMode> {
        self.hooks.fault_injector.as_ref()?.deterministic()
    }

    /// Checkpoints into `dir` and, at start, resumes from the latest
    /// completed checkpoint there if there is one, else starts fresh: the
    /// setting for a service that always restores, first start included.
    /// Checkpointing must be on (an interval) for checkpoints to be taken.
    pub fn resume_latest(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        let dir = dir.into();
        self.checkpoint.dir = Some(dir.clone());
        self.restore_from = Some(dir);
        self.restore_mode = RestoreMode::LatestOrFresh;
        self
    }

    /// Applies [`RestoreMode::LatestOrFresh`]: drops `restore_from` when it
    /// names a checkpoint directory without a completed checkpoint (or a
    /// path that does not exist yet). Anything else is left to the restore,
    /// which reports its errors.
    pub(crate) fn resolve_restore(&mut self) -> crate::Result<()> {
        let (RestoreMode::LatestOrFresh, Some(path)) = (self.restore_mode, &self.restore_from)
        else {
            return Ok(());
        };
        // Only whether there is something: the restore itself reads and
        // verifies it (reading every blob twice would double the start).
        let fresh = !crate::checkpoint::location::has_snapshot(path)?;
        if fresh {
            tracing::info!(dir = %path.display(), "no completed checkpoint to resume; starting fresh");
            self.restore_from = None;
        }
        Ok(())
    }

    /// Sets the buffer timeout (zero flushes after every step).
    pub fn with_buffer_timeout(mut self, timeout: Duration) -> Self {
        self.runtime.buffer_timeout = timeout;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parallelism above the max parallelism, and more arbiters than the
    /// open-files limit allows, are typed errors before anything starts.
    #[test]
    fn parallelism_and_arbiters_are_bounded() {
        let config = Config {
            parallelism: 129,
            max_parallelism: 128,
            ..Config::default()
        };
        let e = config.validate().unwrap_err();
        assert!(matches!(e, crate::Error::Config(_)), "{e:?}");
        assert!(e.to_string().contains("parallelism 129"), "{e}");
        let ok = Config {
            parallelism: 128,
            ..config
        };
        assert!(ok.validate().is_ok());

        // Without a finite limit (`ulimit -n unlimited`) nothing is bounded.
        let (Some(max), Some(limit)) = (max_arbiters(), open_files_limit()) else {
            return;
        };
        assert_eq!(
            max as u64,
            (limit - RESERVED_FILES) / FILES_PER_ARBITER,
            "the bound follows RLIMIT_NOFILE"
        );
        let mut config = Config::default();
        config.runtime.arbiters = max + 1;
        let e = config.validate().unwrap_err();
        assert!(matches!(e, crate::Error::Config(_)), "{e:?}");
        assert!(e.to_string().contains("open files"), "{e}");
        config.runtime.arbiters = max;
        assert!(config.validate().is_ok());
    }
}
