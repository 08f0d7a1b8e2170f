//! Checkpoint settings, mirroring Flink's `CheckpointConfig`.

use std::path::PathBuf;
use std::time::Duration;

/// Exactly-once (barriers aligned, or unaligned) or at-least-once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CheckpointingMode {
    /// Every record is reflected in the state exactly once.
    #[default]
    ExactlyOnce,
    /// Barriers are not aligned; after a restore some records may count twice.
    AtLeastOnce,
}

/// What happens to retained checkpoints when the job is canceled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExternalizedRetention {
    /// Keep them, so the job can be resumed (the default).
    #[default]
    Retain,
    /// Delete the checkpoint directory's checkpoints.
    Delete,
}

/// How and how often a job checkpoints.
///
/// Built from [`CheckpointConfig::default`] (checkpoints off) or
/// [`CheckpointConfig::every`], then set field by field; new settings can be
/// added without breaking code written that way. A struct literal is
/// refused outside floe:
///
/// ```compile_fail
/// let config = floe::checkpoint::CheckpointConfig {
///     interval: None,
///     ..Default::default()
/// };
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointConfig {
    /// Time between two checkpoint triggers; `None` (the default) disables
    /// periodic checkpoints.
    pub interval: Option<Duration>,
    /// Exactly-once or at-least-once.
    pub mode: CheckpointingMode,
    /// Least time between the end of one checkpoint and the next trigger.
    pub min_pause: Duration,
    /// A checkpoint not complete after this long is aborted.
    pub timeout: Duration,
    /// Checkpoints in progress at once.
    pub max_concurrent: usize,
    /// Failed checkpoints tolerated in a row before the job fails.
    pub tolerable_failures: u32,
    /// Completed checkpoints kept in the directory.
    pub retained: usize,
    /// What canceling does to them.
    pub retention_on_cancel: ExternalizedRetention,
    /// Exactly-once barriers overtake in-flight data.
    pub unaligned: bool,
    /// Aligned checkpoints switch to unaligned after waiting this long for
    /// their barriers (exactly-once only).
    pub alignment_timeout: Option<Duration>,
    /// Where checkpoints are stored; without one, checkpoints go to a
    /// temporary directory removed when the job ends.
    pub dir: Option<PathBuf>,
    /// Take a savepoint once the sources emitted this many records (each
    /// source subtask holds at its share until the savepoint's barrier
    /// passed), into `savepoint_dir`.
    pub savepoint_at_records: Option<u64>,
    /// Where savepoints go.
    pub savepoint_dir: Option<PathBuf>,
    /// Sources do not finish before this many checkpoints completed (0, the
    /// default: no hold). A short job then takes its checkpoints by
    /// construction, however fast the machine runs it (tests, demos); a job
    /// whose checkpoints cannot complete never finishes.
    pub finish_after_checkpoints: u64,
    /// Test switch: exactly-once barriers are not aligned (the job is then
    /// NOT exactly-once). Exists so tests can show alignment matters.
    pub debug_disable_alignment: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: None,
            mode: CheckpointingMode::ExactlyOnce,
            min_pause: Duration::ZERO,
            timeout: Duration::from_secs(600),
            max_concurrent: 1,
            tolerable_failures: 0,
            retained: 1,
            retention_on_cancel: ExternalizedRetention::Retain,
            unaligned: false,
            alignment_timeout: None,
            dir: None,
            savepoint_at_records: None,
            savepoint_dir: None,
            finish_after_checkpoints: 0,
            debug_disable_alignment: false,
        }
    }
}

impl CheckpointConfig {
    /// Periodic checkpoints every `interval`, the other settings at their
    /// defaults (exactly-once, aligned, one retained, into a temporary
    /// directory unless [`with_dir`](Self::with_dir) names one).
    ///
    /// ```
    /// use floe::checkpoint::CheckpointConfig;
    /// use std::time::Duration;
    ///
    /// let mut config = CheckpointConfig::every(Duration::from_secs(1)).with_dir("/tmp/ck");
    /// config.retained = 3;
    /// assert!(config.enabled());
    /// ```
    pub fn every(interval: Duration) -> Self {
        CheckpointConfig {
            interval: Some(interval),
            ..Default::default()
        }
    }

    /// Stores the checkpoints in `dir`.
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Whether periodic checkpoints are on.
    pub fn enabled(&self) -> bool {
        self.interval.is_some()
    }

    /// Checks the settings, naming the first bad one.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::Config(m.to_string()));
        if self.interval.is_some_and(|i| i.is_zero()) {
            return bad("checkpoint interval must be at least 1 ms");
        }
        if self.timeout.is_zero() {
            return bad("checkpoint timeout must be at least 1 ms");
        }
        if self.max_concurrent == 0 {
            return bad("max concurrent checkpoints must be at least 1");
        }
        if self.retained == 0 {
            return bad("retained checkpoints must be at least 1");
        }
        if self.savepoint_at_records.is_some() && self.savepoint_dir.is_none() {
            return bad("a savepoint at a record count needs a savepoint directory");
        }
        if self.finish_after_checkpoints > 0 && !self.enabled() {
            return bad("holding the sources for checkpoints needs a checkpoint interval");
        }
        if self.unaligned && self.mode == CheckpointingMode::AtLeastOnce {
            return bad("unaligned checkpoints need exactly-once mode");
        }
        Ok(())
    }

    /// The barrier kind of a periodic checkpoint.
    pub(crate) fn barrier_kind(&self) -> floe_actors::element::BarrierKind {
        use floe_actors::element::BarrierKind;
        match (self.mode, self.unaligned) {
            (CheckpointingMode::AtLeastOnce, _) => BarrierKind::AtLeastOnce,
            _ if self.debug_disable_alignment => BarrierKind::AtLeastOnce,
            (CheckpointingMode::ExactlyOnce, true) => BarrierKind::Unaligned,
            (CheckpointingMode::ExactlyOnce, false) => BarrierKind::Aligned,
        }
    }
}
