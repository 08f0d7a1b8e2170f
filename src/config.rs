//! Job configuration: parallelism, key groups, batching, chaining.

use floe_actors::RuntimeConfig;
use floe_actors::keygroup::DEFAULT_MAX_PARALLELISM;
use std::time::Duration;

/// The settings of a job, set on the environment before operators are added.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Default parallelism of operators (sources of collections and files use 1).
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
    /// Whether and when a failed job restarts; `None` here means the
    /// default: [`RestartStrategy::exponential_default`] with checkpointing
    /// on, no restart without.
    pub restart: Option<crate::failover::RestartStrategy>,
    /// What restarts.
    pub failover: crate::failover::FailoverStrategy,
    /// Failures to inject (tests, demos).
    pub fault_injection: crate::failover::FaultInjection,
    /// Deterministic execution (tests): every actor of the job on one
    /// thread, processing time and checkpoint triggers on the mode's clock,
    /// events recorded in its trace. See [`crate::testing::chaos`].
    pub deterministic: Option<crate::testing::chaos::DeterministicMode>,
    /// The job's name: the `job` label of its metrics, in its status and
    /// logs. `None`: `job-N`, N counting the jobs the process started.
    pub job_name: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        let runtime = RuntimeConfig::default();
        Config {
            parallelism: runtime.arbiters,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            chaining: true,
            seed: 0x5eed,
            runtime,
            checkpoint: Default::default(),
            restore_from: None,
            restart: None,
            failover: Default::default(),
            fault_injection: Default::default(),
            deterministic: None,
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
        self.checkpoint.validate()?;
        if let Some(mode) = &self.deterministic {
            mode.validate(self)?;
        }
        self.runtime
            .validate()
            .map_err(|e| crate::Error::Config(e.to_string()))
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

    /// Sets the buffer timeout (zero flushes after every step).
    pub fn with_buffer_timeout(mut self, timeout: Duration) -> Self {
        self.runtime.buffer_timeout = timeout;
        self
    }
}
