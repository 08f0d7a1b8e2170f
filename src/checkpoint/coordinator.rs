//! How a job sets up its checkpoint coordinator.
//!
//! The protocol (tracker, coordinator actor, messages) lives in
//! [`floe_actors::checkpoint`]; this module builds its setup from the job's
//! [`CheckpointConfig`], connects deterministic execution (the mode's clock
//! for timers, its trace for checkpoint events), and keeps the job handle's
//! requests (`trigger_savepoint`, `stop_with_checkpoint`) answering with
//! [`crate::Error`]s.

use super::{CheckpointConfig, CheckpointError, CheckpointStore};
use crate::failover::deterministic::{DeterministicMode, TraceEvent};
use actix::prelude::*;
use floe_actors::checkpoint::coordinator as actor;
use floe_actors::checkpoint::messages as msg;
use floe_actors::checkpoint::tracker::{JobShape, TrackerConfig};
use floe_actors::ids::CheckpointId;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

pub use floe_actors::checkpoint::coordinator::{BlobRouter, CheckpointCoordinator, RegionFence};
pub use floe_actors::checkpoint::messages::{
    RegisterSubtasks, ReplaceSubtasks, RequestSavepoint, StopCoordinator, SubtaskInfo,
};
pub use floe_actors::checkpoint::stats::{CheckpointRecord, CheckpointStats};

/// Everything the coordinator needs, built at deployment.
pub(crate) struct CoordinatorSetup {
    pub config: CheckpointConfig,
    pub store: Option<Arc<CheckpointStore>>,
    pub router: Arc<BlobRouter>,
    pub max_parallelism: u32,
    /// The next checkpoint id, shared by every attempt of the job: an id is
    /// used once, even by a checkpoint that was aborted.
    pub next_id: Arc<std::sync::atomic::AtomicU64>,
    /// uid → (name, parallelism) of every operator.
    pub operators: HashMap<String, (String, u32)>,
    pub transactional_sinks: Vec<String>,
    pub stats: Arc<Mutex<CheckpointStats>>,
    pub status: Arc<Mutex<floe_actors::supervisor::JobStatus>>,
    /// Deterministic execution: triggers and timeouts on the mode's clock,
    /// checkpoint events into its trace.
    pub deterministic: Option<DeterministicMode>,
    /// Told of completed and failed checkpoints (the job's progress and
    /// its observers).
    pub observer: Option<Arc<dyn crate::failover::JobObserver>>,
    /// The job's name: the `job` label of the checkpoint metrics.
    pub job: String,
    /// Region restarts begun so far (see [`RegionFence`]).
    pub region_fence: RegionFence,
}

impl From<CoordinatorSetup> for actor::CoordinatorSetup {
    fn from(s: CoordinatorSetup) -> Self {
        let config = &s.config;
        actor::CoordinatorSetup {
            tracker: TrackerConfig {
                periodic: config.interval.is_some(),
                min_pause_ms: config.min_pause.as_millis() as u64,
                timeout_ms: config.timeout.as_millis() as u64,
                max_concurrent: config.max_concurrent,
                tolerable_failures: config.tolerable_failures,
                barrier: config.barrier_kind(),
                requested_savepoint_dir: config.savepoint_dir.clone(),
            },
            interval: config.interval,
            retained: config.retained,
            delete_on_cancel: config.retention_on_cancel == super::ExternalizedRetention::Delete,
            store: s
                .store
                .map(|s| s as Arc<dyn floe_actors::checkpoint::CheckpointStorage>),
            router: s.router,
            next_id: s.next_id,
            shape: JobShape {
                max_parallelism: s.max_parallelism,
                operators: s.operators,
                transactional_sinks: s.transactional_sinks,
            },
            stats: s.stats,
            status: s.status,
            job: s.job,
            region_fence: s.region_fence,
            clock: s
                .deterministic
                .clone()
                .map(|mode| Arc::new(ModeClock(mode.clock)) as Arc<dyn actor::CoordinatorClock>),
            observer: (s.deterministic.is_some() || s.observer.is_some()).then(|| {
                Arc::new(Observe {
                    trace: s.deterministic,
                    job: s.observer,
                }) as Arc<dyn actor::CheckpointObserver>
            }),
        }
    }
}

/// The deterministic mode's clock drives the coordinator's timers.
struct ModeClock(crate::time::ManualClock);

impl actor::CoordinatorClock for ModeClock {
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
    job: Option<Arc<dyn crate::failover::JobObserver>>,
}

impl actor::CheckpointObserver for Observe {
    fn triggered(&self, id: CheckpointId) {
        if let Some(mode) = &self.trace {
            mode.record(TraceEvent::CheckpointTriggered { id });
        }
    }

    fn completed(&self, id: CheckpointId, savepoint: bool) {
        if let Some(mode) = &self.trace {
            mode.record(TraceEvent::CheckpointCompleted { id });
        }
        if let (false, Some(o)) = (savepoint, &self.job) {
            o.checkpoint_completed(id);
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
        if let (false, true, Some(o)) = (savepoint, counts, &self.job) {
            o.checkpoint_failed(id, reason);
        }
    }
}

/// A refusal is a configuration error of the request; any other failure
/// is the checkpoint's.
fn to_error(e: CheckpointError) -> crate::Error {
    match e {
        CheckpointError::Refused { message } => crate::Error::Config(message),
        e => e.into(),
    }
}

/// Asks for a savepoint in `dir`; the reply is its path.
pub(crate) struct TriggerSavepoint {
    pub dir: PathBuf,
    pub reply: futures::channel::oneshot::Sender<crate::Result<PathBuf>>,
}

impl Message for TriggerSavepoint {
    type Result = ();
}

impl Handler<TriggerSavepoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, m: TriggerSavepoint, ctx: &mut Context<Self>) {
        let reply = m.reply;
        let request = msg::TriggerSavepoint {
            dir: m.dir,
            reply: Box::new(move |r| {
                let _ = reply.send(r.map_err(to_error));
            }),
        };
        Handler::<msg::TriggerSavepoint>::handle(self, request, ctx);
    }
}

/// Stops the job with a final checkpoint, or a savepoint into `dir` (see
/// [`msg::StopWithCheckpoint`]). The reply: the savepoint's path (none for
/// a checkpoint), or why the checkpoint failed (the job then runs on).
pub(crate) struct StopWithCheckpoint {
    pub savepoint_dir: Option<PathBuf>,
    pub reply: futures::channel::oneshot::Sender<crate::Result<Option<PathBuf>>>,
}

impl Message for StopWithCheckpoint {
    type Result = ();
}

impl Handler<StopWithCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, m: StopWithCheckpoint, ctx: &mut Context<Self>) {
        let reply = m.reply;
        let request = msg::StopWithCheckpoint {
            savepoint_dir: m.savepoint_dir,
            reply: Box::new(move |r| {
                let _ = reply.send(r.map_err(to_error));
            }),
        };
        Handler::<msg::StopWithCheckpoint>::handle(self, request, ctx);
    }
}
