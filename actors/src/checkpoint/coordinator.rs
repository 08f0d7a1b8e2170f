//! The checkpoint coordinator actor: the [`Tracker`] decides, this actor
//! feeds it events (messages, timers) and carries out its [`Action`]s —
//! sending triggers and notifications, writing metadata to the
//! [`CheckpointStorage`] or a savepoint, replying, recording stats and
//! metrics, and failing the job.

use super::messages::{
    AcknowledgeCheckpoint, DeclineCheckpoint, NotifyCheckpoint, RegisterSubtasks, ReplaceSubtasks,
    RequestSavepoint, SavepointReply, StopCoordinator, StopReply, StopWithCheckpoint, SubtaskInfo,
    TriggerCheckpoint, TriggerSavepoint,
};
use super::stats::{CheckpointRecord, CheckpointStats};
use super::storage::{BlobSink, CheckpointStorage, SavepointSink, SavepointStorage};
use super::tracker::{Action, JobShape, Moment, SubtaskSlot, Tracker, TrackerConfig};
use super::{BlobRef, CheckpointError, CheckpointMetadata, SnapshotKind, SubtaskKey};
use crate::element::now_ms;
use crate::ids::CheckpointId;
use crate::messages::{SubtaskEnded, SubtaskFinished};
use crate::supervisor::{FailJob, JobStatus};
use actix::prelude::*;
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A clock driving the coordinator's timers instead of wall-clock ones
/// (deterministic execution).
pub trait CoordinatorClock: Send + Sync {
    /// Its time, ms.
    fn now_ms(&self) -> i64;
    /// Resolves once its time reached `at_ms`.
    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()>>>;
}

/// Told of checkpoint events as they happen (a deterministic run's trace).
pub trait CheckpointObserver: Send + Sync {
    /// Checkpoint `id` was triggered.
    fn triggered(&self, id: CheckpointId);
    /// Checkpoint (or savepoint) `id` completed.
    fn completed(&self, id: CheckpointId, savepoint: bool);
    /// Checkpoint (or savepoint) `id` was aborted because of `reason`;
    /// `counts`: as a failed checkpoint (not subsumed, not ended first).
    fn aborted(&self, id: CheckpointId, reason: &str, savepoint: bool, counts: bool);
}

/// Routes blob writes of a checkpoint id to the store, or to the savepoint
/// being written under that id.
pub struct BlobRouter {
    store: Option<Arc<dyn CheckpointStorage>>,
    savepoints: Mutex<HashMap<CheckpointId, OpenSavepoint>>,
}

/// A savepoint being written, shared by the subtasks writing its blobs.
type OpenSavepoint = Arc<Box<dyn SavepointSink>>;

impl BlobRouter {
    /// Routes to `store` unless a savepoint is being written under the id.
    pub fn new(store: Option<Arc<dyn CheckpointStorage>>) -> Self {
        BlobRouter {
            store,
            savepoints: Mutex::new(HashMap::new()),
        }
    }

    fn savepoint(&self, id: CheckpointId) -> Option<OpenSavepoint> {
        self.savepoints.lock().ok()?.get(&id).cloned()
    }

    fn take_savepoint(&self, id: CheckpointId) -> Option<OpenSavepoint> {
        self.savepoints.lock().ok()?.remove(&id)
    }
}

impl BlobSink for BlobRouter {
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        match (self.savepoint(checkpoint), &self.store) {
            (Some(sp), _) => sp.put(checkpoint, name, bytes),
            (None, Some(store)) => store.put(checkpoint, name, bytes),
            (None, None) => Err(CheckpointError::Failed {
                checkpoint,
                message: "checkpointing is not enabled".into(),
            }),
        }
    }
}

/// Orders checkpoint completion against region restarts.
///
/// A region restart restores the latest completed checkpoint while the
/// other regions run on. A checkpoint still pending when the region failed
/// holds the failed incarnation's state and its pre-committed transactions;
/// were it to complete after the restart chose what to restore, a later
/// restore would commit the failed incarnation's transactions next to the
/// ones the replay commits again. So, as Flink aborts pending checkpoints
/// on a region failover, a checkpoint triggered before a region restart
/// began never completes: the restart counts itself here before it picks
/// the checkpoint to restore, and a completion checks the count and commits
/// to the store under the same lock, so either the checkpoint is in the
/// store before the restart looks, or it is aborted.
#[derive(Clone, Debug, Default)]
pub struct RegionFence(Arc<Mutex<u64>>);

impl RegionFence {
    /// Region restarts begun so far.
    fn current(&self) -> u64 {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A region restart begins: checkpoints triggered until now are void.
    /// Called before the restart picks the checkpoint it restores.
    pub fn region_restarting(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
}

/// Everything the coordinator needs, built at deployment.
pub struct CoordinatorSetup {
    /// The protocol's settings.
    pub tracker: TrackerConfig,
    /// Time between periodic triggers; `None`: no periodic checkpoints.
    pub interval: Option<Duration>,
    /// Completed checkpoints kept by the store.
    pub retained: usize,
    /// Canceling the job deletes its checkpoints.
    pub delete_on_cancel: bool,
    /// Where checkpoints go; `None` without checkpointing.
    pub store: Option<Arc<dyn CheckpointStorage>>,
    /// The blob sink the subtasks write to.
    pub router: Arc<BlobRouter>,
    /// Opens savepoints under their target ([`LocalSavepoints`](super::storage::LocalSavepoints)
    /// for directories).
    pub savepoints: Arc<dyn SavepointStorage>,
    /// The next checkpoint id, shared by every attempt of the job.
    pub next_id: Arc<AtomicU64>,
    /// What the metadata names besides the acks.
    pub shape: JobShape,
    /// The job's checkpoint stats.
    pub stats: Arc<Mutex<CheckpointStats>>,
    /// The job's status (canceled: `delete_on_cancel` applies).
    pub status: Arc<Mutex<JobStatus>>,
    /// The job's name: the `job` label of the checkpoint metrics.
    pub job: String,
    /// Region restarts begun so far.
    pub region_fence: RegionFence,
    /// Timers on this clock instead of wall-clock ones.
    pub clock: Option<Arc<dyn CoordinatorClock>>,
    /// Told of checkpoint events.
    pub observer: Option<Arc<dyn CheckpointObserver>>,
}

/// Who waits for a savepoint.
enum Waiter {
    Caller(SavepointReply),
    /// `savepoint_at_records`: the outcome goes into the stats.
    Requested,
    /// The stop's savepoint: the stop's reply carries the path.
    Stop,
}

/// The checkpoint coordinator of one job.
pub struct CheckpointCoordinator {
    setup: CoordinatorSetup,
    tracker: Tracker,
    /// In registration order: notifications go out in a stable order
    /// (deterministic execution replays it).
    subtasks: Vec<SubtaskInfo>,
    supervisor: Option<Recipient<FailJob>>,
    savepoints: HashMap<CheckpointId, Waiter>,
    stop_reply: Option<StopReply>,
}

impl CheckpointCoordinator {
    /// A coordinator; subtasks come with [`RegisterSubtasks`].
    pub fn new(setup: CoordinatorSetup) -> Self {
        let tracker = Tracker::new(
            setup.tracker.clone(),
            setup.shape.clone(),
            setup.next_id.clone(),
        );
        CheckpointCoordinator {
            setup,
            tracker,
            subtasks: Vec::new(),
            supervisor: None,
            savepoints: HashMap::new(),
            stop_reply: None,
        }
    }

    fn moment(&self) -> Moment {
        Moment {
            now_ms: now_ms(),
            region_restarts: self.setup.region_fence.current(),
        }
    }

    /// Carries out `actions` in order (an action may feed the tracker an
    /// event whose actions are carried out first).
    fn run(&mut self, actions: Vec<Action>, ctx: &mut Context<Self>) {
        for action in actions {
            self.execute(action, ctx);
        }
    }

    fn execute(&mut self, action: Action, ctx: &mut Context<Self>) {
        match action {
            Action::Triggered { id, kind, sources } => {
                tracing::info!(job = %self.setup.job, checkpoint = id.0, barrier_kind = ?kind, sources, "checkpoint triggered");
                if let Some(o) = &self.setup.observer {
                    o.triggered(id);
                }
            }
            Action::Trigger {
                subtask,
                barrier,
                stop,
            } => {
                if let Some(s) = self.subtasks.iter().find(|s| s.key() == subtask) {
                    s.trigger.do_send(TriggerCheckpoint { barrier, stop });
                }
            }
            Action::ScheduleTimeout { id, after_ms } => self.schedule_timeout(id, after_ms, ctx),
            Action::Commit {
                meta,
                region_restarts,
            } => {
                if self.tracker.is_pending(meta.id) {
                    let actions = self.commit(&meta, region_restarts);
                    self.run(actions, ctx);
                }
            }
            Action::Completed(record) => {
                self.record(&record);
                tracing::info!(
                    job = %self.setup.job,
                    checkpoint = record.id.0,
                    savepoint = record.savepoint,
                    duration_ms = record.duration_ms,
                    alignment_ms = record.alignment_ms,
                    sync_ms = record.sync_ms,
                    async_ms = record.async_ms,
                    state_bytes = record.state_bytes,
                    channel_state_bytes = record.channel_state_bytes,
                    "checkpoint completed"
                );
                if let Some(o) = &self.setup.observer {
                    o.completed(record.id, record.savepoint);
                }
            }
            Action::Notify {
                id,
                completed,
                finish,
            } => {
                for s in &self.subtasks {
                    s.notify.do_send(NotifyCheckpoint {
                        checkpoint: id,
                        completed,
                        finish,
                    });
                }
            }
            Action::Discard { id, kind } => match kind {
                SnapshotKind::Checkpoint => {
                    if let Some(store) = &self.setup.store {
                        store.discard(id);
                    }
                }
                // Dropping the writer removes the unfinished directory.
                SnapshotKind::Savepoint => drop(self.setup.router.take_savepoint(id)),
            },
            Action::Aborted { record, counts } => {
                let id = record.id;
                let reason = record.failure.clone().unwrap_or_default();
                if let Some(o) = &self.setup.observer {
                    o.aborted(id, &reason, record.savepoint, counts);
                }
                if counts {
                    tracing::warn!(job = %self.setup.job, checkpoint = id.0, %reason, "checkpoint aborted");
                } else {
                    tracing::info!(job = %self.setup.job, checkpoint = id.0, %reason, "checkpoint aborted");
                }
                self.record(&record);
            }
            Action::StopDone(result) => {
                if let Some(tx) = self.stop_reply.take() {
                    if let Ok(path) = &result {
                        tracing::info!(job = %self.setup.job, savepoint = ?path, "job stops after its final checkpoint");
                    }
                    tx(result);
                }
            }
            Action::SavepointDone { id, result } => match self.savepoints.remove(&id) {
                Some(Waiter::Caller(tx)) => tx(result),
                Some(Waiter::Requested) => {
                    if let Ok(mut s) = self.setup.stats.lock() {
                        s.savepoint = Some(
                            result
                                .map(|p| p.display().to_string())
                                .map_err(|e| e.to_string()),
                        );
                    }
                }
                Some(Waiter::Stop) | None => {}
            },
            Action::TakeRequestedSavepoint(dir) => match self.open_savepoint(&dir) {
                Ok(id) => self.trigger_savepoint(id, Waiter::Requested, false, ctx),
                Err(e) => {
                    if let Ok(mut s) = self.setup.stats.lock() {
                        s.savepoint = Some(Err(e.to_string()));
                    }
                }
            },
            Action::FailJob(error) => {
                if let Some(s) = &self.supervisor {
                    s.do_send(FailJob { error });
                }
                ctx.stop();
            }
        }
    }

    /// Writes `meta` (store commit or savepoint finish), unless a region
    /// restart began since the trigger; the tracker hears the outcome.
    fn commit(&mut self, meta: &CheckpointMetadata, region_restarts: u64) -> Vec<Action> {
        let id = meta.id;
        // Held until the snapshot is committed: a region restart that
        // begins meanwhile waits, then restores it (see `RegionFence`).
        let fence = self.setup.region_fence.clone();
        let restarts = fence.0.lock().unwrap_or_else(|e| e.into_inner());
        if *restarts != region_restarts {
            drop(restarts);
            let at = self.moment();
            return self.tracker.on_region_fenced(id, at);
        }
        let result = match meta.kind {
            SnapshotKind::Checkpoint => match &self.setup.store {
                Some(store) => store.commit(meta, self.setup.retained).map(|()| None),
                None => Err(CheckpointError::Failed {
                    checkpoint: id,
                    message: "checkpointing is not enabled".into(),
                }),
            },
            SnapshotKind::Savepoint => {
                match self.setup.router.take_savepoint(id).map(Arc::try_unwrap) {
                    Some(Ok(w)) => w.finish(meta).map(Some),
                    _ => Err(CheckpointError::Failed {
                        checkpoint: id,
                        message: "savepoint writer still in use".into(),
                    }),
                }
            }
        };
        drop(restarts);
        let at = self.moment();
        self.tracker.on_committed(id, result, at)
    }

    fn record(&self, record: &CheckpointRecord) {
        if let Ok(mut stats) = self.setup.stats.lock() {
            stats.record(record.clone());
        }
        publish_metrics(&self.setup.job, record);
    }

    fn schedule_timeout(&mut self, id: CheckpointId, after_ms: u64, ctx: &mut Context<Self>) {
        let expire = move |actor: &mut Self, ctx: &mut Context<Self>| {
            let at = actor.moment();
            let actions = actor.tracker.on_timeout(id, at);
            actor.run(actions, ctx);
        };
        match &self.setup.clock {
            Some(clock) => {
                let at = clock.now_ms().saturating_add(after_ms as i64);
                let sleep = clock.sleep_until(at);
                ctx.spawn(
                    actix::fut::wrap_future::<_, Self>(sleep)
                        .map(move |(), actor, ctx| expire(actor, ctx)),
                );
            }
            None => {
                ctx.run_later(Duration::from_millis(after_ms), expire);
            }
        }
    }

    /// Picks a savepoint's id and creates its directory under `dir`. Errs
    /// (nothing started) when every source finished or the directory cannot
    /// be created.
    fn open_savepoint(&mut self, dir: &Path) -> Result<CheckpointId, CheckpointError> {
        let Some(id) = self.tracker.reserve() else {
            return Err(CheckpointError::Refused {
                message: "cannot take a savepoint: every source has finished".into(),
            });
        };
        let writer = self.setup.savepoints.open(dir, id)?;
        if let Ok(mut m) = self.setup.router.savepoints.lock() {
            m.insert(id, Arc::new(writer));
        }
        Ok(id)
    }

    /// Triggers savepoint `id` (opened by [`Self::open_savepoint`]).
    fn trigger_savepoint(
        &mut self,
        id: CheckpointId,
        waiter: Waiter,
        stop: bool,
        ctx: &mut Context<Self>,
    ) {
        self.savepoints.insert(id, waiter);
        let at = self.moment();
        let actions = self
            .tracker
            .on_trigger(id, SnapshotKind::Savepoint, stop, at);
        self.run(actions, ctx);
    }

    /// Triggers the next periodic checkpoint once the clock is
    /// `interval_ms` further, then arms the one after.
    fn trigger_on_clock(
        &mut self,
        clock: Arc<dyn CoordinatorClock>,
        interval_ms: i64,
        ctx: &mut Context<Self>,
    ) {
        let at = clock.now_ms().saturating_add(interval_ms.max(1));
        let sleep = clock.sleep_until(at);
        ctx.spawn(
            actix::fut::wrap_future::<_, Self>(sleep).map(move |(), actor, ctx| {
                actor.tick(ctx);
                actor.trigger_on_clock(clock, interval_ms, ctx);
            }),
        );
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let at = self.moment();
        let actions = self.tracker.on_tick(at);
        self.run(actions, ctx);
    }
}

/// Publishes a checkpoint (or savepoint) that completed, failed or was
/// aborted into the `metrics` facade; see `docs/operations.md`.
fn publish_metrics(job: &str, r: &CheckpointRecord) {
    let labels = [("job", job.to_string())];
    let kind = if r.savepoint {
        "savepoints"
    } else {
        "checkpoints"
    };
    match (r.status.as_str(), r.savepoint) {
        ("completed", false) => {
            metrics::counter!("floe_checkpoints_completed_total", &labels).increment(1);
            metrics::histogram!("floe_checkpoint_duration_seconds", &labels)
                .record(r.duration_ms as f64 / 1e3);
            metrics::histogram!("floe_checkpoint_alignment_seconds", &labels)
                .record(r.alignment_ms as f64 / 1e3);
            metrics::histogram!("floe_checkpoint_sync_seconds", &labels)
                .record(r.sync_ms as f64 / 1e3);
            metrics::histogram!("floe_checkpoint_async_seconds", &labels)
                .record(r.async_ms as f64 / 1e3);
            metrics::histogram!("floe_checkpoint_state_bytes", &labels)
                .record(r.state_bytes as f64);
            metrics::gauge!("floe_last_checkpoint_id", &labels).set(r.id.0 as f64);
            metrics::gauge!("floe_last_checkpoint_duration_seconds", &labels)
                .set(r.duration_ms as f64 / 1e3);
            metrics::gauge!("floe_last_checkpoint_alignment_seconds", &labels)
                .set(r.alignment_ms as f64 / 1e3);
            metrics::gauge!("floe_last_checkpoint_sync_seconds", &labels)
                .set(r.sync_ms as f64 / 1e3);
            metrics::gauge!("floe_last_checkpoint_async_seconds", &labels)
                .set(r.async_ms as f64 / 1e3);
            metrics::gauge!("floe_last_checkpoint_state_bytes", &labels).set(r.state_bytes as f64);
            metrics::gauge!("floe_last_checkpoint_channel_state_bytes", &labels)
                .set(r.channel_state_bytes as f64);
        }
        ("failed", false) => {
            metrics::counter!("floe_checkpoints_failed_total", &labels).increment(1);
            metrics::gauge!("floe_last_failed_checkpoint_id", &labels).set(r.id.0 as f64);
        }
        (status, _) => {
            let name = format!("floe_{kind}_{status}_total");
            metrics::counter!(name, &labels).increment(1);
        }
    }
}

impl Actor for CheckpointCoordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match (self.setup.interval, self.setup.clock.clone()) {
            (Some(interval), Some(clock)) => {
                self.trigger_on_clock(clock, interval.as_millis() as i64, ctx)
            }
            (Some(interval), None) => {
                ctx.run_interval(interval, |actor, ctx| actor.tick(ctx));
            }
            (None, _) => {}
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Parts of aborted (or still pending) checkpoints written late.
        if let Some(store) = &self.setup.store {
            for id in self.tracker.aborted().chain(self.tracker.pending()) {
                store.discard(id);
            }
        }
        let status = self.setup.status.lock().map(|s| *s).ok();
        let canceled = status == Some(JobStatus::Canceled) || status == Some(JobStatus::Canceling);
        if canceled
            && self.setup.delete_on_cancel
            && let Some(store) = &self.setup.store
        {
            tracing::debug!(dir = %store.location(), "removing checkpoints");
            if let Err(e) = store.clear() {
                tracing::warn!(error = %e, "cannot remove checkpoints");
            }
        }
    }
}

impl Handler<AcknowledgeCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, ack: AcknowledgeCheckpoint, ctx: &mut Context<Self>) {
        let at = self.moment();
        let actions = self.tracker.on_ack(ack, at);
        self.run(actions, ctx);
    }
}

impl Handler<DeclineCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: DeclineCheckpoint, ctx: &mut Context<Self>) {
        let at = self.moment();
        let actions =
            self.tracker
                .on_decline(msg.checkpoint, (msg.vertex, msg.subtask), &msg.reason, at);
        self.run(actions, ctx);
    }
}

impl Handler<SubtaskFinished> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: SubtaskFinished, ctx: &mut Context<Self>) {
        let at = self.moment();
        let actions = self.tracker.on_finished((msg.vertex, msg.subtask), at);
        self.run(actions, ctx);
    }
}

impl Handler<SubtaskEnded> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: SubtaskEnded, ctx: &mut Context<Self>) {
        let at = self.moment();
        let actions = self.tracker.on_ended((msg.vertex, msg.subtask), at);
        self.run(actions, ctx);
    }
}

impl Handler<RegisterSubtasks> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: RegisterSubtasks, ctx: &mut Context<Self>) {
        let slots = msg.subtasks.iter().map(SubtaskInfo::slot).collect();
        self.subtasks = msg.subtasks;
        self.supervisor = Some(msg.supervisor);
        let actions = self.tracker.on_register(slots);
        self.run(actions, ctx);
    }
}

impl Handler<RequestSavepoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: RequestSavepoint, ctx: &mut Context<Self>) {
        let actions = self.tracker.on_savepoint_request((msg.vertex, msg.subtask));
        self.run(actions, ctx);
    }
}

impl Handler<ReplaceSubtasks> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: ReplaceSubtasks, ctx: &mut Context<Self>) {
        let slots = msg.subtasks.iter().map(SubtaskInfo::slot).collect();
        let at = self.moment();
        // Aborts go to the subtasks being replaced too, as before.
        let actions = self.tracker.on_replace(slots, at);
        self.run(actions, ctx);
        for s in msg.subtasks {
            match self.subtasks.iter_mut().find(|x| x.key() == s.key()) {
                Some(x) => *x = s,
                None => self.subtasks.push(s),
            }
        }
    }
}

impl Handler<StopWithCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: StopWithCheckpoint, ctx: &mut Context<Self>) {
        let refused = |message: &str| {
            Err(CheckpointError::Refused {
                message: message.into(),
            })
        };
        if self.tracker.is_stopping() {
            return (msg.reply)(refused("the job is already stopping"));
        }
        if msg.savepoint_dir.is_none() && self.setup.store.is_none() {
            return (msg.reply)(refused(
                "stopping with a final checkpoint needs checkpointing",
            ));
        }
        let started = match &msg.savepoint_dir {
            Some(dir) => self
                .open_savepoint(dir)
                .ok()
                .map(|id| (id, SnapshotKind::Savepoint)),
            None => self
                .tracker
                .reserve()
                .map(|id| (id, SnapshotKind::Checkpoint)),
        };
        let Some((id, kind)) = started else {
            return (msg.reply)(refused(
                "cannot stop with a final checkpoint: every subtask has finished, or the savepoint directory cannot be created",
            ));
        };
        self.stop_reply = Some(msg.reply);
        match kind {
            // The stop's reply carries the path.
            SnapshotKind::Savepoint => self.trigger_savepoint(id, Waiter::Stop, true, ctx),
            SnapshotKind::Checkpoint => {
                let at = self.moment();
                let actions = self.tracker.on_trigger(id, kind, true, at);
                self.run(actions, ctx);
            }
        }
    }
}

impl Handler<TriggerSavepoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: TriggerSavepoint, ctx: &mut Context<Self>) {
        match self.open_savepoint(&msg.dir) {
            Ok(id) => self.trigger_savepoint(id, Waiter::Caller(msg.reply), false, ctx),
            Err(e) => (msg.reply)(Err(e)),
        }
    }
}

impl Handler<StopCoordinator> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, _: StopCoordinator, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl SubtaskInfo {
    fn key(&self) -> SubtaskKey {
        (self.vertex, self.subtask)
    }

    fn slot(&self) -> SubtaskSlot {
        SubtaskSlot {
            key: (self.vertex, self.subtask),
            is_source: self.is_source,
            head_uid: self.head_uid.clone(),
            parallelism: self.parallelism,
        }
    }
}
