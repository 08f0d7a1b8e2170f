//! Checkpoint, savepoint and restore flags shared by `floe run wordcount`
//! and `floe run window`, and the summary fields they add.

use floe::StreamExecutionEnvironment;
use floe::checkpoint::{CheckpointConfig, CheckpointStats, CheckpointingMode};
use std::path::PathBuf;
use std::time::Duration;

/// `--checkpoint-mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// Aligned (or unaligned) barriers: state reflects every record once.
    ExactlyOnce,
    /// No alignment: after a restore some records may count twice.
    AtLeastOnce,
}

/// Checkpointing flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CheckpointArgs {
    /// Take a checkpoint every MS milliseconds (off by default).
    #[arg(long, value_name = "MS")]
    pub checkpoint_interval: Option<u64>,
    /// Exactly-once (default) or at-least-once.
    #[arg(long, value_enum)]
    pub checkpoint_mode: Option<ModeArg>,
    /// Unaligned exactly-once checkpoints: barriers overtake in-flight data.
    #[arg(long)]
    pub unaligned: bool,
    /// Aligned checkpoints switch to unaligned after waiting this long.
    #[arg(long, value_name = "MS")]
    pub alignment_timeout: Option<u64>,
    /// Checkpoint directory (default: a temporary one, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Abort a checkpoint not complete after this long (default 600000).
    #[arg(long, value_name = "MS")]
    pub checkpoint_timeout: Option<u64>,
    /// Least pause between a completed checkpoint and the next trigger.
    #[arg(long, value_name = "MS")]
    pub min_pause: Option<u64>,
    /// Checkpoints in progress at once (default 1).
    #[arg(long, value_name = "N")]
    pub max_concurrent_checkpoints: Option<usize>,
    /// Failed checkpoints tolerated in a row before the job fails (default 0).
    #[arg(long, value_name = "N")]
    pub tolerable_failed_checkpoints: Option<u32>,
    /// Completed checkpoints kept in the directory (default 1).
    #[arg(long, value_name = "N")]
    pub retain_checkpoints: Option<usize>,
    /// Take a savepoint once the sources emitted N records.
    #[arg(long, value_name = "N")]
    pub savepoint_at_records: Option<u64>,
    /// Take a savepoint MS milliseconds after the start.
    #[arg(long, value_name = "MS")]
    pub savepoint_after_ms: Option<u64>,
    /// Where savepoints go.
    #[arg(long, value_name = "DIR")]
    pub savepoint_dir: Option<PathBuf>,
    /// Start from a checkpoint directory (its newest intact checkpoint), one
    /// checkpoint's directory or a savepoint.
    #[arg(long, value_name = "PATH")]
    pub from_checkpoint: Option<PathBuf>,
    /// Start from the newest intact checkpoint in --checkpoint-dir if there
    /// is one, else fresh (one stderr line says which): the same command
    /// line restarts a job under systemd or Kubernetes.
    #[arg(long)]
    pub resume: bool,
    /// Throttle the sink to this many records per second (shows
    /// backpressure).
    #[arg(long, value_name = "RECORDS_PER_S")]
    pub sink_rate: Option<f64>,
    /// Credits (batches in flight) per channel.
    #[arg(long, value_name = "N")]
    pub credits: Option<u32>,
    /// Budget of each subtask's channels, in batches (default 64); with many
    /// channels the credits per channel and the batch size shrink to fit it.
    #[arg(long, value_name = "N")]
    pub network_buffers: Option<usize>,
    /// What restarts on a failure: every subtask, or the failed one's
    /// pipelined region.
    #[arg(long, value_enum)]
    pub failover: Option<FailoverArg>,
    /// Restart strategy: none, fixed:ATTEMPTS,DELAY_MS,
    /// exponential:INITIAL_MS,MAX_MS[,ATTEMPTS] or
    /// failure-rate:MAX,INTERVAL_MS,DELAY_MS (default with checkpointing on:
    /// exponential 10 ms doubling to 10 s, at most 10 restarts in a row;
    /// none without).
    #[arg(long, value_name = "STRATEGY")]
    pub restart: Option<String>,
    /// Kill K subtasks, chosen by --seed, one after each new completed
    /// checkpoint.
    #[arg(long, value_name = "K")]
    pub inject_failures: Option<u32>,
    /// Sources do not finish before N checkpoints completed: a short job
    /// takes its checkpoints however fast it runs (tests, demos).
    #[arg(long, value_name = "N")]
    pub finish_after_checkpoints: Option<u64>,
    /// Debug switch: exactly-once barriers are not aligned (the job is then
    /// NOT exactly-once; tests use it to show alignment matters).
    #[arg(long, hide = true)]
    pub debug_disable_alignment: bool,
}

/// `--failover`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverArg {
    /// Restart every subtask.
    All,
    /// Restart the failed subtask's pipelined region only.
    Region,
}

impl CheckpointArgs {
    /// Where savepoints asked for while the job runs (over HTTP, from the
    /// dashboard) go: `--savepoint-dir`, else `savepoints/` in the
    /// checkpoint directory.
    pub fn savepoint_target(&self) -> Option<PathBuf> {
        self.savepoint_dir
            .clone()
            .or_else(|| self.checkpoint_dir.as_ref().map(|d| d.join("savepoints")))
    }

    /// Where SIGINT / SIGTERM stop with a savepoint rather than a final
    /// checkpoint: `--savepoint-dir`; without it and without
    /// `--checkpoint-dir` (the checkpoints are then temporary, removed when
    /// the job ends, the final one too), `$TMPDIR/floe-savepoints`, so that
    /// the stop leaves something to resume from.
    pub fn stop_savepoint_dir(&self) -> Option<PathBuf> {
        self.savepoint_dir.clone().or_else(|| {
            (self.enabled() && self.checkpoint_dir.is_none())
                .then(|| std::env::temp_dir().join("floe-savepoints"))
        })
    }

    /// Whether checkpointing (and so the transactional output) is on.
    pub fn enabled(&self) -> bool {
        self.checkpoint_interval.is_some()
    }

    /// Checks the flags and applies them to `env`.
    pub fn apply(&self, env: &StreamExecutionEnvironment, seed: u64) -> floe::Result<()> {
        let bad = |m: &str| Err(floe::Error::Config(m.to_string()));
        if self.checkpoint_interval == Some(0) {
            return bad("--checkpoint-interval must be at least 1 ms");
        }
        if !self.enabled()
            && (self.checkpoint_mode.is_some()
                || self.unaligned
                || self.alignment_timeout.is_some()
                || self.retain_checkpoints.is_some()
                || self.finish_after_checkpoints.is_some()
                || self.resume)
        {
            return bad("checkpoint options need --checkpoint-interval");
        }
        if (self.savepoint_at_records.is_some() || self.savepoint_after_ms.is_some())
            && self.savepoint_dir.is_none()
        {
            return bad("--savepoint-at-records/--savepoint-after-ms need --savepoint-dir");
        }
        if self.savepoint_at_records == Some(0) {
            return bad("--savepoint-at-records must be at least 1");
        }
        if self.retain_checkpoints == Some(0) {
            return bad("--retain-checkpoints must be at least 1");
        }
        if let Some(r) = self.sink_rate
            && !(r > 0.0 && r.is_finite())
        {
            return bad("--sink-rate must be a positive number of records per second");
        }
        if self.credits == Some(0) {
            return bad("--credits must be at least 1");
        }
        if self.network_buffers == Some(0) {
            return bad("--network-buffers must be at least 1");
        }
        if self.resume && self.checkpoint_dir.is_none() {
            return bad("--resume needs --checkpoint-dir");
        }
        if self.resume && self.from_checkpoint.is_some() {
            return bad("--resume starts from --checkpoint-dir; drop --from-checkpoint");
        }
        if let Some(path) = &self.from_checkpoint
            && !floe::checkpoint::is_object_url(path)
            && !path.exists()
        {
            return Err(floe::checkpoint::CheckpointError::NotFound { path: path.clone() }.into());
        }
        let mode = match self.checkpoint_mode {
            Some(ModeArg::AtLeastOnce) => CheckpointingMode::AtLeastOnce,
            _ => CheckpointingMode::ExactlyOnce,
        };
        let mut c = CheckpointConfig::default();
        c.interval = self.checkpoint_interval.map(Duration::from_millis);
        c.mode = mode;
        let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        c.min_pause = ms(self.min_pause, c.min_pause);
        c.timeout = ms(self.checkpoint_timeout, c.timeout);
        c.max_concurrent = self.max_concurrent_checkpoints.unwrap_or(c.max_concurrent);
        c.tolerable_failures = self
            .tolerable_failed_checkpoints
            .unwrap_or(c.tolerable_failures);
        c.retained = self.retain_checkpoints.unwrap_or(c.retained);
        c.unaligned = self.unaligned;
        c.alignment_timeout = self.alignment_timeout.map(Duration::from_millis);
        c.dir = self.checkpoint_dir.clone();
        c.savepoint_at_records = self.savepoint_at_records;
        c.savepoint_dir = self.savepoint_dir.clone();
        c.finish_after_checkpoints = self.finish_after_checkpoints.unwrap_or(0);
        c.debug_disable_alignment = self.debug_disable_alignment;
        env.set_checkpoint_config(c);
        if let Some(path) = &self.from_checkpoint {
            env.restore_from(path);
        }
        let mut config = env.config();
        if let (true, Some(dir)) = (self.resume, &self.checkpoint_dir) {
            match floe::checkpoint::location::newest_checkpoint(dir)? {
                Some(id) => eprintln!(
                    "resume: from the newest intact checkpoint in {} (newest: {})",
                    dir.display(),
                    id.0
                ),
                None => eprintln!("resume: no checkpoint in {}; starting fresh", dir.display()),
            }
            config = config.resume_latest(dir);
        }
        if let Some(spec) = &self.restart {
            config.restart = Some(floe::failover::RestartStrategy::parse(spec)?);
        }
        if let Some(f) = self.failover {
            config.failover = match f {
                FailoverArg::All => floe::failover::FailoverStrategy::All,
                FailoverArg::Region => floe::failover::FailoverStrategy::Region,
            };
        }
        if let Some(k) = self.inject_failures
            && k > 0
        {
            if !self.enabled() {
                return bad("--inject-failures needs --checkpoint-interval");
            }
            config =
                config.with_fault_injector(std::sync::Arc::new(floe::failover::FaultInjection {
                    random_failures: k,
                    seed,
                    faults: Vec::new(),
                }));
        }
        env.set_config(config);
        if let Some(c) = self.credits {
            env.set_credits(c);
        }
        if let Some(b) = self.network_buffers {
            env.set_network_buffers(b);
        }
        Ok(())
    }

    /// Takes the `--savepoint-after-ms` savepoint on a helper thread.
    pub fn schedule_savepoint(&self, handle: &floe::JobHandle) {
        let (Some(ms), Some(dir)) = (self.savepoint_after_ms, self.savepoint_dir.clone()) else {
            return;
        };
        let handle = handle.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            match futures::executor::block_on(handle.trigger_savepoint(dir)) {
                Ok(path) => eprintln!("savepoint={}", path.display()),
                Err(e) => eprintln!("warning: savepoint not taken: {e}"),
            }
        });
    }

    /// Reports the `--savepoint-at-records` savepoint; an error when it was
    /// asked for and not taken.
    pub fn report_savepoint(&self, stats: &CheckpointStats) -> floe::Result<()> {
        let Some(n) = self.savepoint_at_records else {
            return Ok(());
        };
        match &stats.savepoint {
            Some(Ok(path)) => {
                eprintln!("savepoint={path}");
                Ok(())
            }
            Some(Err(e)) => Err(floe::Error::Config(format!("savepoint not taken: {e}"))),
            None => Err(floe::Error::Config(format!(
                "savepoint not taken: the input ended before {n} records"
            ))),
        }
    }
}

/// The summary fields of checkpointing and failover, when a checkpoint,
/// savepoint, restore or restart was asked for (the summary without them
/// stays as it was).
pub fn summary(args: &CheckpointArgs, handle: &floe::JobHandle) -> String {
    let stats = handle.checkpoint_stats();
    let failover = handle.failover_stats();
    let mut out = String::new();
    let asked = args.enabled()
        || args.from_checkpoint.is_some()
        || args.savepoint_at_records.is_some()
        || args.savepoint_after_ms.is_some();
    if asked {
        out.push_str(&format!(
            " checkpoints={} failed_checkpoints={} max_checkpoint_ms={} channel_state_bytes={}",
            stats.completed, stats.failed, stats.max_duration_ms, stats.channel_state_bytes
        ));
    }
    let restarts_asked = args.restart.is_some()
        || args.failover.is_some()
        || args.inject_failures.is_some()
        || failover.restarts > 0;
    if restarts_asked {
        out.push_str(&format!(
            " restarts={} restarted_subtasks={} max_recovery_ms={}",
            failover.restarts, failover.restarted_subtasks, failover.max_recovery_ms
        ));
    }
    out
}
