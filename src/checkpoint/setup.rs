//! How a job's settings become its checkpoint coordinator's setup.
//!
//! The coordinator and the [`CoordinatorSetup`] it is built from live in
//! [`floe_actors::checkpoint::coordinator`]; the job's deployment
//! (`runtime/deploy.rs`) fills one in with the parts made here: the
//! protocol's settings from the job's [`CheckpointConfig`], and
//! deterministic execution connected to the coordinator (the mode's clock
//! drives its timers, its trace records checkpoint events) next to the
//! job's observers.
//!
//! [`CoordinatorSetup`]: floe_actors::checkpoint::coordinator::CoordinatorSetup

use super::CheckpointConfig;
use crate::failover::JobObserver;
use crate::failover::deterministic::{DeterministicMode, TraceEvent};
use floe_actors::checkpoint::coordinator::{CheckpointObserver, CoordinatorClock};
use floe_actors::checkpoint::tracker::TrackerConfig;
use floe_actors::ids::CheckpointId;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The protocol's settings for a job checkpointing with `config`.
pub(crate) fn tracker_config(config: &CheckpointConfig) -> TrackerConfig {
    TrackerConfig {
        periodic: config.interval.is_some(),
        min_pause_ms: config.min_pause.as_millis() as u64,
        timeout_ms: config.timeout.as_millis() as u64,
        max_concurrent: config.max_concurrent,
        tolerable_failures: config.tolerable_failures,
        barrier: config.barrier_kind(),
        requested_savepoint_dir: config.savepoint_dir.clone(),
    }
}

/// The coordinator's timers: on the deterministic mode's clock, if any
/// (`None`: wall-clock ones).
pub(crate) fn clock(mode: Option<&DeterministicMode>) -> Option<Arc<dyn CoordinatorClock>> {
    mode.map(|mode| Arc::new(ModeClock(mode.clock.clone())) as Arc<dyn CoordinatorClock>)
}

/// Who is told of checkpoint events: the deterministic mode's trace, if
/// any, and the job's observers.
pub(crate) fn observer(
    trace: Option<DeterministicMode>,
    job: Arc<dyn JobObserver>,
) -> Arc<dyn CheckpointObserver> {
    Arc::new(Observe { trace, job })
}

/// The deterministic mode's clock drives the coordinator's timers.
struct ModeClock(crate::time::ManualClock);

impl CoordinatorClock for ModeClock {
    fn now_ms(&self) -> i64 {
        crate::time::Clock::now_ms(&self.0)
    }

    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(self.0.sleep_until(at_ms))
    }
}

/// Checkpoint events go into the deterministic mode's trace, and
/// checkpoints (not savepoints) to the job's observers.
struct Observe {
    trace: Option<DeterministicMode>,
    job: Arc<dyn JobObserver>,
}

impl CheckpointObserver for Observe {
    fn triggered(&self, id: CheckpointId) {
        if let Some(mode) = &self.trace {
            mode.record(TraceEvent::CheckpointTriggered { id });
        }
    }

    fn completed(&self, id: CheckpointId, savepoint: bool) {
        if let Some(mode) = &self.trace {
            mode.record(TraceEvent::CheckpointCompleted { id });
        }
        if !savepoint {
            self.job.checkpoint_completed(id);
        }
    }

    fn aborted(&self, id: CheckpointId, reason: &str, savepoint: bool, counts: bool) {
        if let Some(mode) = &self.trace {
            mode.record(TraceEvent::CheckpointAborted {
                id,
                // The fault behind an aborted checkpoint, from the
                // injector's own report (no error text is parsed).
                fault: mode.fired_async_write(id),
                reason: reason.to_string(),
            });
        }
        if !savepoint && counts {
            self.job.checkpoint_failed(id, reason);
        }
    }
}
