//! The checkpoint coordinator actor.
//!
//! 1. **Trigger.** Every `interval` (and not sooner than `min_pause` after
//!    the last completion, with at most `max_concurrent` in progress) it
//!    picks the next id and sends [`TriggerCheckpoint`] to every running
//!    source subtask; the sources snapshot and emit the barrier.
//! 2. **Collect.** Each subtask acknowledges with the references of the
//!    blobs its asynchronous part wrote. A subtask that finished is no
//!    longer awaited; a decline, or no completion within `timeout`, aborts
//!    the checkpoint: its files are discarded and every subtask is told.
//! 3. **Complete.** With every running subtask's ack, the coordinator
//!    commits the metadata to the store in one redb transaction (the
//!    checkpoint exists iff that commit happened), keeps the newest
//!    `retained`, and sends notify-complete to every subtask, on which
//!    two-phase-commit sinks commit.
//! 4. **Savepoints** go the same way with aligned barriers, into a
//!    self-contained directory instead of the store. While one is pending
//!    the periodic trigger waits (a newer barrier would cancel it in the
//!    subtasks) and fires when the savepoint ends.
//! 5. More failed checkpoints in a row than `tolerable_failures` fail the job.

use super::format::{
    CHECKPOINT_FORMAT_VERSION, CheckpointMetadata, OperatorState, SnapshotKind,
    SubtaskOperatorState, SubtaskRuntimeState,
};
use super::savepoint::SavepointWriter;
use super::store::{BlobSink, CheckpointStore};
use super::{CheckpointConfig, CheckpointError};
use crate::failover::deterministic::TraceEvent;
use actix::prelude::*;
use floe_actors::element::{Barrier, BarrierKind, now_ms};
use floe_actors::ids::{CheckpointId, SubtaskIndex, VertexId};
use floe_actors::messages::{SubtaskEnded, SubtaskFinished};
use floe_actors::snapshot::{
    AcknowledgeCheckpoint, BlobRef, BlobWriter, DeclineCheckpoint, NotifyCheckpoint,
    TriggerCheckpoint,
};
use floe_actors::supervisor::FailJob;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One subtask as the coordinator sees it.
#[derive(Clone)]
pub(crate) struct TaskInfo {
    pub vertex: VertexId,
    pub subtask: SubtaskIndex,
    pub is_source: bool,
    pub head_uid: String,
    pub parallelism: u32,
    pub trigger: Recipient<TriggerCheckpoint>,
    pub notify: Recipient<NotifyCheckpoint>,
}

/// A checkpoint's record in the job's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CheckpointRecord {
    /// Its id.
    pub id: u64,
    /// Checkpoint or savepoint.
    pub savepoint: bool,
    /// Completed, failed (declined, expired, not written) or aborted (a
    /// subtask reached its end first; not a failure).
    pub status: String,
    /// When it was triggered (ms since the epoch).
    pub trigger_ms: i64,
    /// Trigger to completion (or failure), ms.
    pub duration_ms: u64,
    /// Longest alignment of a subtask, ms.
    pub alignment_ms: u64,
    /// Longest synchronous part, ms.
    pub sync_ms: u64,
    /// Longest asynchronous part, ms.
    pub async_ms: u64,
    /// Operator state bytes.
    pub state_bytes: u64,
    /// Channel state bytes.
    pub channel_state_bytes: u64,
    /// Whether some subtask took it unaligned.
    pub unaligned: bool,
    /// Why it failed.
    pub failure: Option<String>,
}

/// Checkpoint counters and the recent history of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CheckpointStats {
    /// Checkpoints completed (savepoints not included).
    pub completed: u64,
    /// Checkpoints that failed.
    pub failed: u64,
    /// Longest trigger-to-completion of a completed checkpoint, ms.
    pub max_duration_ms: u64,
    /// Channel state bytes summed over completed checkpoints.
    pub channel_state_bytes: u64,
    /// The newest completed checkpoint.
    pub last_completed: Option<u64>,
    /// The last checkpoints and savepoints, newest last (at most 20).
    pub history: VecDeque<CheckpointRecord>,
    /// The savepoint `savepoint_at_records` asked for: its path, or why it
    /// failed.
    pub savepoint: Option<Result<String, String>>,
}

const HISTORY: usize = 20;

impl CheckpointStats {
    fn record(&mut self, r: CheckpointRecord) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(r);
    }
}

/// Routes blob writes of a checkpoint id to the store, or to the savepoint
/// being written under that id.
pub(crate) struct BlobRouter {
    store: Option<Arc<CheckpointStore>>,
    savepoints: Mutex<HashMap<u64, Arc<SavepointWriter>>>,
}

impl BlobRouter {
    pub fn new(store: Option<Arc<CheckpointStore>>) -> Self {
        BlobRouter {
            store,
            savepoints: Mutex::new(HashMap::new()),
        }
    }

    fn savepoint(&self, id: u64) -> Option<Arc<SavepointWriter>> {
        self.savepoints.lock().ok()?.get(&id).cloned()
    }
}

impl BlobWriter for BlobRouter {
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> floe_actors::Result<BlobRef> {
        let r = match (self.savepoint(checkpoint.0), &self.store) {
            (Some(sp), _) => sp.put(name, bytes),
            (None, Some(store)) => store.write_blob(checkpoint.0, name, bytes),
            (None, None) => Err(CheckpointError::Failed {
                checkpoint: checkpoint.0,
                message: "checkpointing is not enabled".into(),
            }),
        };
        r.map_err(|e| floe_actors::Error::Runtime(e.to_string()))
    }
}

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
    pub deterministic: Option<crate::failover::deterministic::DeterministicMode>,
    /// Told of completed and failed checkpoints (the job's progress and
    /// its observers).
    pub observer: Option<Arc<dyn crate::failover::JobObserver>>,
    /// The job's name: the `job` label of the checkpoint metrics.
    pub job: String,
    /// Region restarts begun so far (see [`RegionFence`]).
    pub region_fence: RegionFence,
}

/// Orders checkpoint completion against region restarts.
///
/// A region restart restores the latest completed checkpoint while the
/// other regions run on. A checkpoint still pending when the region failed
/// holds the failed incarnation's state and its pre-committed transactions;
/// were it to complete after the restart chose what to restore, it would be
/// the latest checkpoint without being in the restarted region's history,
/// and a later restore of any region would commit the failed incarnation's
/// transactions next to the ones the replay commits again (and roll that
/// region back to the failed incarnation). So, as Flink aborts pending
/// checkpoints on a region failover, a checkpoint triggered before a region
/// restart began never completes: the restart counts itself here before it
/// picks the checkpoint to restore, and a completion checks the count and
/// commits to the store under the same lock, so either the checkpoint is in
/// the store before the restart looks, or it is aborted.
#[derive(Clone, Debug, Default)]
pub(crate) struct RegionFence(Arc<Mutex<u64>>);

impl RegionFence {
    /// Region restarts begun so far.
    fn current(&self) -> u64 {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A region restart begins: checkpoints triggered until now are void.
    /// Called before the restart picks the checkpoint it restores.
    pub(crate) fn region_restarting(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
}

struct Pending {
    kind: SnapshotKind,
    /// Sent again, directly, to a subtask that ends while awaited.
    barrier: Barrier,
    trigger_ms: i64,
    started: Instant,
    awaiting: HashSet<(VertexId, SubtaskIndex)>,
    /// The job stops with it: its notify-complete finishes every subtask.
    stop: bool,
    acks: Vec<AcknowledgeCheckpoint>,
    reply: Option<futures::channel::oneshot::Sender<crate::Result<PathBuf>>>,
    /// [`RegionFence`]'s count when it was triggered.
    region_restarts: u64,
}

/// The checkpoint coordinator of one job.
pub struct CheckpointCoordinator {
    setup: CoordinatorSetup,
    tasks: Vec<TaskInfo>,
    supervisor: Option<Recipient<FailJob>>,
    pending: BTreeMap<u64, Pending>,
    finished: HashSet<(VertexId, SubtaskIndex)>,
    /// Subtasks that reached their end and wait for the final checkpoint:
    /// triggered directly, as no barrier reaches them any more.
    ended: HashSet<(VertexId, SubtaskIndex)>,
    last_completion: Option<Instant>,
    failures_in_row: u32,
    savepoint_requested: bool,
    /// Sources holding at their share of `savepoint_at_records`.
    holding: HashSet<(VertexId, SubtaskIndex)>,
    /// Checkpoints aborted: files their late parts write are removed.
    aborted: HashSet<u64>,
    /// A periodic trigger came while a savepoint was pending: it is taken
    /// once no savepoint is.
    periodic_queued: bool,
    /// The job is stopping with a final checkpoint: nothing else is
    /// triggered; the reply waits for that checkpoint.
    stopping: Option<StopReply>,
    /// The checkpoint being triggered is the stop's: sources pause after
    /// its barrier.
    stopping_next: bool,
}

type StopReply = futures::channel::oneshot::Sender<crate::Result<Option<PathBuf>>>;

impl CheckpointCoordinator {
    pub(crate) fn new(setup: CoordinatorSetup) -> Self {
        CheckpointCoordinator {
            tasks: Vec::new(),
            supervisor: None,
            setup,
            pending: BTreeMap::new(),
            finished: HashSet::new(),
            ended: HashSet::new(),
            last_completion: None,
            failures_in_row: 0,
            savepoint_requested: false,
            holding: HashSet::new(),
            aborted: HashSet::new(),
            periodic_queued: false,
            stopping: None,
            stopping_next: false,
        }
    }

    /// A savepoint ended (completed or not): the periodic trigger queued
    /// behind it goes now.
    fn release_queued_periodic(&mut self, ctx: &mut Context<Self>) {
        if self.periodic_queued
            && !self
                .pending
                .values()
                .any(|p| p.kind == SnapshotKind::Savepoint)
        {
            self.periodic_queued = false;
            self.periodic(ctx);
        }
    }

    /// Every subtask still deployed ended: the final checkpoint is taken at
    /// once (not at the next interval), so the job finishes promptly.
    fn maybe_trigger_final(&mut self, ctx: &mut Context<Self>) {
        if self.is_stopping() {
            return;
        }
        let all_ended = !self.tasks.is_empty()
            && !self.ended.is_empty()
            && self.tasks.iter().all(|t| {
                let key = (t.vertex, t.subtask);
                self.ended.contains(&key) || self.finished.contains(&key)
            });
        // Not while a savepoint is pending either: the newer barrier would
        // cancel it (see `periodic`); its end calls this again.
        if all_ended && self.pending.is_empty() && self.setup.config.interval.is_some() {
            self.trigger(SnapshotKind::Checkpoint, None, ctx);
        }
    }

    fn periodic(&mut self, ctx: &mut Context<Self>) {
        if self.is_stopping() {
            return;
        }
        if self
            .pending
            .values()
            .any(|p| p.kind == SnapshotKind::Savepoint)
        {
            // Queued behind the savepoint, as Flink does: a newer barrier
            // would cancel it in the subtasks (an unaligned one on arrival,
            // an abort of the newer one with it). The trigger is taken when
            // the savepoint ends.
            self.periodic_queued = true;
            return;
        }
        let periodic = self
            .pending
            .values()
            .filter(|p| p.kind == SnapshotKind::Checkpoint)
            .count();
        if periodic >= self.setup.config.max_concurrent {
            return;
        }
        if let Some(done) = self.last_completion
            && done.elapsed() < self.setup.config.min_pause
        {
            return;
        }
        self.trigger(SnapshotKind::Checkpoint, None, ctx);
    }

    /// Starts a checkpoint (or savepoint); returns its id when one started.
    fn trigger(
        &mut self,
        kind: SnapshotKind,
        reply: Option<(
            PathBuf,
            futures::channel::oneshot::Sender<crate::Result<PathBuf>>,
        )>,
        ctx: &mut Context<Self>,
    ) -> Option<u64> {
        // Running sources emit the barrier; subtasks that ended snapshot
        // their final state when triggered directly.
        let sources: Vec<TaskInfo> = self
            .tasks
            .iter()
            .filter(|t| {
                let key = (t.vertex, t.subtask);
                (t.is_source || self.ended.contains(&key)) && !self.finished.contains(&key)
            })
            .cloned()
            .collect();
        if sources.is_empty() {
            if let Some((_, tx)) = reply {
                let _ = tx.send(Err(crate::Error::Config(
                    "cannot take a savepoint: every source has finished".into(),
                )));
            }
            return None;
        }
        let id = self
            .setup
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let barrier_kind = match kind {
            SnapshotKind::Checkpoint => self.setup.config.barrier_kind(),
            SnapshotKind::Savepoint => BarrierKind::Savepoint,
        };
        let reply = match reply {
            Some((dir, tx)) => match SavepointWriter::new(&dir, id) {
                Ok(w) => {
                    if let Ok(mut m) = self.setup.router.savepoints.lock() {
                        m.insert(id, Arc::new(w));
                    }
                    Some(tx)
                }
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                    return None;
                }
            },
            None => None,
        };
        let trigger_ms = now_ms();
        let awaiting = self
            .tasks
            .iter()
            .filter(|t| !self.finished.contains(&(t.vertex, t.subtask)))
            .map(|t| (t.vertex, t.subtask))
            .collect();
        self.pending.insert(
            id,
            Pending {
                kind,
                barrier: Barrier {
                    checkpoint_id: CheckpointId(id),
                    timestamp: trigger_ms,
                    kind: barrier_kind,
                },
                trigger_ms,
                started: Instant::now(),
                awaiting,
                stop: false,
                acks: Vec::new(),
                reply,
                region_restarts: self.setup.region_fence.current(),
            },
        );
        tracing::info!(job = %self.setup.job, checkpoint = id, ?barrier_kind, sources = sources.len(), "checkpoint triggered");
        let barrier = Barrier {
            checkpoint_id: CheckpointId(id),
            timestamp: trigger_ms,
            kind: barrier_kind,
        };
        for s in sources {
            s.trigger.do_send(TriggerCheckpoint {
                barrier,
                stop: self.stopping_next,
            });
        }
        self.trace(TraceEvent::CheckpointTriggered { id });
        let timeout = self.setup.config.timeout;
        let expire = move |actor: &mut Self, ctx: &mut Context<Self>| {
            if actor.pending.contains_key(&id) {
                actor.abort(id, format!("expired after {} ms", timeout.as_millis()), ctx);
            }
        };
        match &self.setup.deterministic {
            Some(mode) => {
                let now = crate::time::Clock::now_ms(&mode.clock);
                let at = now.saturating_add(timeout.as_millis() as i64);
                let sleep = mode.clock.sleep_until(at);
                ctx.spawn(
                    sleep
                        .into_actor(self)
                        .map(move |(), actor, ctx| expire(actor, ctx)),
                );
            }
            None => {
                ctx.run_later(timeout, expire);
            }
        }
        Some(id)
    }

    fn maybe_complete(&mut self, id: u64, ctx: &mut Context<Self>) {
        let ready = self.pending.get(&id).is_some_and(|p| p.awaiting.is_empty());
        if !ready {
            return;
        }
        // Held until the snapshot is committed: a region restart that
        // begins meanwhile waits, then restores it (see `RegionFence`).
        let fence = self.setup.region_fence.clone();
        let restarts = fence.0.lock().unwrap_or_else(|e| e.into_inner());
        if self.pending.get(&id).map(|p| p.region_restarts) != Some(*restarts) {
            drop(restarts);
            self.abort_with(id, "a region restarted".into(), false, ctx);
            return;
        }
        let p = self.pending.remove(&id).expect("present");
        let meta = self.metadata(id, &p);
        let duration_ms = meta.duration_ms;
        let result: Result<Option<PathBuf>, CheckpointError> = match p.kind {
            SnapshotKind::Checkpoint => match &self.setup.store {
                Some(store) => store
                    .commit(&meta, self.setup.config.retained)
                    .map(|()| None),
                None => Err(CheckpointError::Failed {
                    checkpoint: id,
                    message: "checkpointing is not enabled".into(),
                }),
            },
            SnapshotKind::Savepoint => {
                let writer = self
                    .setup
                    .router
                    .savepoints
                    .lock()
                    .ok()
                    .and_then(|mut m| m.remove(&id));
                match writer.map(Arc::try_unwrap) {
                    Some(Ok(w)) => w.finish(&meta).map(Some),
                    _ => Err(CheckpointError::Failed {
                        checkpoint: id,
                        message: "savepoint writer still in use".into(),
                    }),
                }
            }
        };
        drop(restarts);
        match result {
            Ok(path) => {
                self.failures_in_row = 0;
                let record = record_of(&meta, "completed", None);
                if let Ok(mut stats) = self.setup.stats.lock() {
                    let record = record.clone();
                    if p.kind == SnapshotKind::Checkpoint {
                        stats.completed += 1;
                        stats.max_duration_ms = stats.max_duration_ms.max(duration_ms);
                        stats.channel_state_bytes += meta.channel_state_bytes;
                        stats.last_completed = Some(id);
                    }
                    stats.record(record);
                }
                publish_metrics(&self.setup.job, &record);
                tracing::info!(
                    job = %self.setup.job,
                    checkpoint = id,
                    savepoint = p.kind == SnapshotKind::Savepoint,
                    duration_ms,
                    alignment_ms = meta.alignment_ms,
                    sync_ms = meta.sync_ms,
                    async_ms = meta.async_ms,
                    state_bytes = meta.state_bytes,
                    channel_state_bytes = meta.channel_state_bytes,
                    "checkpoint completed"
                );
                self.trace(TraceEvent::CheckpointCompleted { id });
                if let (SnapshotKind::Checkpoint, Some(o)) = (p.kind, &self.setup.observer) {
                    o.checkpoint_completed(id);
                }
                if p.kind == SnapshotKind::Checkpoint {
                    self.last_completion = Some(Instant::now());
                    self.abort_subsumed(id, ctx);
                }
                for t in &self.tasks {
                    t.notify.do_send(NotifyCheckpoint {
                        checkpoint: CheckpointId(id),
                        completed: true,
                        finish: p.stop,
                    });
                }
                if p.stop
                    && let Some(tx) = self.stopping.take()
                {
                    tracing::info!(job = %self.setup.job, checkpoint = id, "job stops after its final checkpoint");
                    let _ = tx.send(Ok(path.clone()));
                }
                if let (Some(tx), Some(path)) = (p.reply, path) {
                    let _ = tx.send(Ok(path));
                }
                if p.kind == SnapshotKind::Savepoint {
                    self.release_queued_periodic(ctx);
                }
                self.maybe_trigger_final(ctx);
            }
            Err(e) => {
                let message = e.to_string();
                self.pending.insert(id, p);
                self.abort(id, message, ctx);
            }
        }
    }

    fn metadata(&self, id: u64, p: &Pending) -> CheckpointMetadata {
        let mut operators: BTreeMap<String, OperatorState> = BTreeMap::new();
        let mut runtime = Vec::new();
        let (mut alignment_ms, mut sync_ms, mut async_ms) = (0, 0, 0);
        let (mut state_bytes, mut channel_state_bytes, mut unaligned) = (0, 0, false);
        let mut acks: Vec<&AcknowledgeCheckpoint> = p.acks.iter().collect();
        acks.sort_by_key(|a| (a.vertex, a.subtask));
        for ack in acks {
            alignment_ms = alignment_ms.max(ack.alignment_ms);
            sync_ms = sync_ms.max(ack.sync_ms);
            async_ms = async_ms.max(ack.async_ms);
            state_bytes += ack.state_bytes;
            channel_state_bytes += ack.channel_state_bytes;
            unaligned |= ack.unaligned;
            for op in &ack.operators {
                let (name, parallelism) = self
                    .setup
                    .operators
                    .get(&op.uid)
                    .cloned()
                    .unwrap_or_else(|| (op.uid.clone(), 0));
                let entry = operators
                    .entry(op.uid.clone())
                    .or_insert_with(|| OperatorState {
                        uid: op.uid.clone(),
                        name,
                        parallelism,
                        subtasks: Vec::new(),
                    });
                entry.subtasks.push(SubtaskOperatorState {
                    subtask: ack.subtask.0,
                    keyed: op.keyed.clone(),
                    split_list: op.split_list.clone(),
                    union_list: op.union_list.clone(),
                });
            }
            if let Some(t) = self
                .tasks
                .iter()
                .find(|t| t.vertex == ack.vertex && t.subtask == ack.subtask)
            {
                runtime.push(SubtaskRuntimeState {
                    head_uid: t.head_uid.clone(),
                    subtask: ack.subtask.0,
                    parallelism: t.parallelism,
                    watermark: ack.watermark,
                    channel_watermarks: ack.channel_watermarks.clone(),
                    input_channel_state: ack.input_channel_state.clone(),
                    output_channel_state: ack.output_channel_state.clone(),
                    finished: false,
                });
            }
        }
        // Subtasks that finished before this checkpoint: restored finished.
        for t in &self.tasks {
            let key = (t.vertex, t.subtask);
            if self.finished.contains(&key) && !p.acks.iter().any(|a| (a.vertex, a.subtask) == key)
            {
                runtime.push(SubtaskRuntimeState {
                    head_uid: t.head_uid.clone(),
                    subtask: t.subtask.0,
                    parallelism: t.parallelism,
                    finished: true,
                    ..Default::default()
                });
            }
        }
        CheckpointMetadata {
            version: CHECKPOINT_FORMAT_VERSION,
            id,
            kind: p.kind,
            trigger_ms: p.trigger_ms,
            duration_ms: p.started.elapsed().as_millis() as u64,
            alignment_ms,
            sync_ms,
            async_ms,
            state_bytes,
            channel_state_bytes,
            unaligned,
            max_parallelism: self.setup.max_parallelism,
            operators: operators.into_values().collect(),
            runtime,
            transactional_sinks: self.setup.transactional_sinks.clone(),
        }
    }

    /// Aborts the checkpoints older than `completed` still pending (not
    /// savepoints): a completed checkpoint subsumes them, as in Flink, and
    /// the store's retention has just removed their directories, so one
    /// completing later could only fail. Not counted as failures.
    fn abort_subsumed(&mut self, completed: u64, ctx: &mut Context<Self>) {
        let older: Vec<u64> = self
            .pending
            .iter()
            .filter(|(id, p)| **id < completed && p.kind == SnapshotKind::Checkpoint)
            .map(|(id, _)| *id)
            .collect();
        for id in older {
            self.abort_with(
                id,
                format!("subsumed by completed checkpoint {completed}"),
                false,
                ctx,
            );
        }
    }

    fn abort(&mut self, id: u64, reason: String, ctx: &mut Context<Self>) {
        self.abort_with(id, reason, true, ctx)
    }

    /// Aborts checkpoint `id`; `counts`: whether it counts against the
    /// tolerable failed checkpoints.
    fn abort_with(&mut self, id: u64, reason: String, counts: bool, ctx: &mut Context<Self>) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        self.aborted.insert(id);
        self.trace(TraceEvent::CheckpointAborted {
            id,
            fault: self
                .setup
                .deterministic
                .as_ref()
                .and_then(|m| m.fired_async_write(id)),
            reason: reason.clone(),
        });
        if counts {
            tracing::warn!(job = %self.setup.job, checkpoint = id, %reason, "checkpoint aborted");
        } else {
            tracing::info!(job = %self.setup.job, checkpoint = id, %reason, "checkpoint aborted");
        }
        match p.kind {
            SnapshotKind::Checkpoint => {
                if let Some(store) = &self.setup.store {
                    store.discard(id);
                }
            }
            SnapshotKind::Savepoint => {
                // Dropping the writer removes the unfinished directory.
                if let Ok(mut m) = self.setup.router.savepoints.lock() {
                    m.remove(&id);
                }
            }
        }
        for t in &self.tasks {
            t.notify.do_send(NotifyCheckpoint {
                checkpoint: CheckpointId(id),
                completed: false,
                finish: false,
            });
        }
        // A checkpoint abandoned because a subtask reached its end is not a
        // failure: it is in the history as "aborted".
        let record = CheckpointRecord {
            id,
            savepoint: p.kind == SnapshotKind::Savepoint,
            status: if counts { "failed" } else { "aborted" }.into(),
            trigger_ms: p.trigger_ms,
            duration_ms: p.started.elapsed().as_millis() as u64,
            alignment_ms: 0,
            sync_ms: 0,
            async_ms: 0,
            state_bytes: 0,
            channel_state_bytes: 0,
            unaligned: false,
            failure: Some(reason.clone()),
        };
        if let Ok(mut stats) = self.setup.stats.lock() {
            if p.kind == SnapshotKind::Checkpoint && counts {
                stats.failed += 1;
            }
            stats.record(record.clone());
        }
        if let (SnapshotKind::Checkpoint, true, Some(o)) = (p.kind, counts, &self.setup.observer) {
            o.checkpoint_failed(id, &reason);
        }
        publish_metrics(&self.setup.job, &record);
        if p.stop
            && let Some(tx) = self.stopping.take()
        {
            // The stop failed; the job runs on (the caller may cancel it).
            let _ = tx.send(Err(CheckpointError::Failed {
                checkpoint: id,
                message: reason.clone(),
            }
            .into()));
        }
        if p.kind == SnapshotKind::Savepoint {
            self.release_queued_periodic(ctx);
        }
        if let Some(tx) = p.reply {
            let _ = tx.send(Err(CheckpointError::Failed {
                checkpoint: id,
                message: reason.clone(),
            }
            .into()));
            self.maybe_trigger_final(ctx);
            return;
        }
        if !counts {
            self.maybe_trigger_final(ctx);
            return;
        }
        self.failures_in_row += 1;
        if self.failures_in_row > self.setup.config.tolerable_failures {
            let error = floe_actors::Error::Runtime(format!(
                "checkpoint {id} failed ({reason}); {} failed in a row, {} tolerated",
                self.failures_in_row, self.setup.config.tolerable_failures
            ));
            if let Some(s) = &self.supervisor {
                s.do_send(FailJob { error });
            }
            ctx.stop();
            return;
        }
        self.maybe_trigger_final(ctx);
    }
}

fn record_of(
    meta: &CheckpointMetadata,
    status: &'static str,
    failure: Option<String>,
) -> CheckpointRecord {
    CheckpointRecord {
        id: meta.id,
        savepoint: meta.kind == SnapshotKind::Savepoint,
        status: status.to_string(),
        trigger_ms: meta.trigger_ms,
        duration_ms: meta.duration_ms,
        alignment_ms: meta.alignment_ms,
        sync_ms: meta.sync_ms,
        async_ms: meta.async_ms,
        state_bytes: meta.state_bytes,
        channel_state_bytes: meta.channel_state_bytes,
        unaligned: meta.unaligned,
        failure,
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
            metrics::gauge!("floe_last_checkpoint_id", &labels).set(r.id as f64);
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
            metrics::gauge!("floe_last_failed_checkpoint_id", &labels).set(r.id as f64);
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
        match (self.setup.config.interval, self.setup.deterministic.clone()) {
            (Some(interval), Some(mode)) => {
                self.trigger_on_clock(mode.clock, interval.as_millis() as i64, ctx)
            }
            (Some(interval), None) => {
                ctx.run_interval(interval, |actor, ctx| actor.periodic(ctx));
            }
            (None, _) => {}
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Parts of aborted (or still pending) checkpoints written late.
        if let Some(store) = &self.setup.store {
            for id in self.aborted.iter().chain(self.pending.keys()) {
                store.discard(*id);
            }
        }
        let status = self.setup.status.lock().map(|s| *s).ok();
        let cancelled = status == Some(floe_actors::supervisor::JobStatus::Canceled)
            || status == Some(floe_actors::supervisor::JobStatus::Canceling);
        let delete = cancelled
            && self.setup.config.retention_on_cancel == super::ExternalizedRetention::Delete;
        if delete && let Some(store) = &self.setup.store {
            tracing::debug!(dir = %store.root().display(), "removing checkpoints");
            if let Err(e) = store.clear() {
                tracing::warn!(error = %e, "cannot remove checkpoints");
            }
        }
    }
}

impl Handler<AcknowledgeCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, ack: AcknowledgeCheckpoint, ctx: &mut Context<Self>) {
        let id = ack.checkpoint.0;
        let Some(p) = self.pending.get_mut(&id) else {
            // A late part of an aborted checkpoint: its files go too.
            if let Some(store) = &self.setup.store
                && self.aborted.contains(&id)
            {
                store.discard(id);
            }
            return;
        };
        p.awaiting.remove(&(ack.vertex, ack.subtask));
        p.acks.push(ack);
        self.maybe_complete(id, ctx);
    }
}

impl Handler<DeclineCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: DeclineCheckpoint, ctx: &mut Context<Self>) {
        let reason = format!(
            "declined by subtask {} of vertex {}: {}",
            msg.subtask, msg.vertex, msg.reason
        );
        self.abort(msg.checkpoint.0, reason, ctx);
    }
}

impl Handler<SubtaskFinished> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: SubtaskFinished, ctx: &mut Context<Self>) {
        let key = (msg.vertex, msg.subtask);
        self.finished.insert(key);
        if self.ended.remove(&key) {
            // It finished after a checkpoint covering its end completed:
            // its state is final and committed; later checkpoints record
            // it finished instead of waiting for it.
            let ids: Vec<u64> = self
                .pending
                .iter_mut()
                .filter_map(|(id, p)| p.awaiting.remove(&key).then_some(*id))
                .collect();
            for id in ids {
                self.maybe_complete(id, ctx);
            }
            return;
        }
        self.maybe_take_requested_savepoint(ctx);
        // A subtask that finishes while a checkpoint still waits for its
        // snapshot never takes one (its barriers came after its end of
        // input): the checkpoint cannot be complete. It is aborted without
        // counting as a failure, as Flink treats a task closing.
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.awaiting.contains(&key))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.abort_with(
                id,
                format!(
                    "subtask {} of vertex {} finished before its snapshot",
                    msg.subtask, msg.vertex
                ),
                false,
                ctx,
            );
        }
    }
}

impl Handler<SubtaskEnded> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: SubtaskEnded, ctx: &mut Context<Self>) {
        let key = (msg.vertex, msg.subtask);
        if self.finished.contains(&key) {
            return;
        }
        self.ended.insert(key);
        // Checkpoints still awaiting it will get no barrier through its
        // ended inputs (theirs came after the end of input): it takes them
        // directly, with its final state, which is what its upstream
        // subtasks snapshotted for them too (their final positions).
        if let Some(t) = self.tasks.iter().find(|t| (t.vertex, t.subtask) == key) {
            for p in self.pending.values() {
                if p.awaiting.contains(&key) {
                    t.trigger.do_send(TriggerCheckpoint {
                        barrier: p.barrier,
                        stop: p.stop,
                    });
                }
            }
        }
        self.maybe_take_requested_savepoint(ctx);
        self.maybe_trigger_final(ctx);
    }
}

/// Hands the coordinator the deployed subtasks and the supervisor.
pub(crate) struct RegisterTasks {
    pub tasks: Vec<TaskInfo>,
    pub supervisor: Recipient<FailJob>,
}

impl Message for RegisterTasks {
    type Result = ();
}

impl Handler<RegisterTasks> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: RegisterTasks, ctx: &mut Context<Self>) {
        self.tasks = msg.tasks;
        self.supervisor = Some(msg.supervisor);
        // Sources may have reached their savepoint share before this.
        self.maybe_take_requested_savepoint(ctx);
    }
}

/// A source subtask reached its share of `savepoint_at_records` and holds
/// there: once every running source holds, the savepoint is taken, so it
/// cuts the input at exactly that many records.
pub(crate) struct RequestSavepoint {
    pub vertex: VertexId,
    pub subtask: SubtaskIndex,
}

impl Message for RequestSavepoint {
    type Result = ();
}

impl Handler<RequestSavepoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: RequestSavepoint, ctx: &mut Context<Self>) {
        self.holding.insert((msg.vertex, msg.subtask));
        self.maybe_take_requested_savepoint(ctx);
    }
}

impl CheckpointCoordinator {
    fn maybe_take_requested_savepoint(&mut self, ctx: &mut Context<Self>) {
        // Before the tasks are registered, no source is known to wait for.
        if self.savepoint_requested || self.holding.is_empty() || self.tasks.is_empty() {
            return;
        }
        let waiting = self.tasks.iter().any(|t| {
            let key = (t.vertex, t.subtask);
            t.is_source
                && !self.finished.contains(&key)
                && !self.ended.contains(&key)
                && !self.holding.contains(&key)
        });
        if waiting {
            return;
        }
        self.savepoint_requested = true;
        let Some(dir) = self.setup.config.savepoint_dir.clone() else {
            return;
        };
        let (reply, rx) = futures::channel::oneshot::channel();
        let stats = self.setup.stats.clone();
        self.trigger(SnapshotKind::Savepoint, Some((dir, reply)), ctx);
        ctx.spawn(
            async move {
                let outcome = match rx.await {
                    Ok(Ok(path)) => Ok(path),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("the savepoint was dropped".to_string()),
                };
                if let Ok(mut s) = stats.lock() {
                    s.savepoint = Some(outcome.map(|p| p.display().to_string()));
                }
            }
            .into_actor(self),
        );
    }
}

/// A region was redeployed: its subtasks replace their predecessors.
/// Pending checkpoints waited for the failed ones: they are aborted (without
/// counting as failures) and checkpoints go on with the new subtasks.
pub(crate) struct ReplaceTasks {
    pub tasks: Vec<TaskInfo>,
}

impl Message for ReplaceTasks {
    type Result = ();
}

impl Handler<ReplaceTasks> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: ReplaceTasks, ctx: &mut Context<Self>) {
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            self.abort_with(id, "a region restarted".into(), false, ctx);
        }
        for t in msg.tasks {
            let key = (t.vertex, t.subtask);
            self.finished.remove(&key);
            self.ended.remove(&key);
            self.holding.remove(&key);
            match self.tasks.iter_mut().find(|x| (x.vertex, x.subtask) == key) {
                Some(x) => *x = t,
                None => self.tasks.push(t),
            }
        }
    }
}

/// Stops the job with a final checkpoint, or a savepoint into `dir`: no
/// other checkpoint is triggered from now on; once it completed, its
/// notify-complete (two-phase-commit sinks commit) finishes every subtask.
/// The reply: the savepoint's path (none for a checkpoint), or why the
/// checkpoint failed (the job then runs on).
pub(crate) struct StopWithCheckpoint {
    pub savepoint_dir: Option<PathBuf>,
    pub reply: StopReply,
}

impl Message for StopWithCheckpoint {
    type Result = ();
}

impl CheckpointCoordinator {
    fn is_stopping(&self) -> bool {
        self.stopping.is_some()
    }
}

impl Handler<StopWithCheckpoint> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, msg: StopWithCheckpoint, ctx: &mut Context<Self>) {
        if self.stopping.is_some() {
            let _ = msg.reply.send(Err(crate::Error::Config(
                "the job is already stopping".into(),
            )));
            return;
        }
        if msg.savepoint_dir.is_none() && self.setup.store.is_none() {
            let _ = msg.reply.send(Err(crate::Error::Config(
                "stopping with a final checkpoint needs checkpointing".into(),
            )));
            return;
        }
        self.stopping_next = true;
        let id = match msg.savepoint_dir {
            Some(dir) => {
                // The stop's reply carries the path; the savepoint's own
                // reply is not awaited.
                let (reply, _) = futures::channel::oneshot::channel();
                self.trigger(SnapshotKind::Savepoint, Some((dir, reply)), ctx)
            }
            None => self.trigger(SnapshotKind::Checkpoint, None, ctx),
        };
        self.stopping_next = false;
        match id.and_then(|id| self.pending.get_mut(&id)) {
            Some(p) => {
                p.stop = true;
                self.stopping = Some(msg.reply);
            }
            None => {
                let _ = msg.reply.send(Err(crate::Error::Config(
                    "cannot stop with a final checkpoint: every subtask has finished, or the savepoint directory cannot be created".into(),
                )));
            }
        }
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

    fn handle(&mut self, msg: TriggerSavepoint, ctx: &mut Context<Self>) {
        self.trigger(SnapshotKind::Savepoint, Some((msg.dir, msg.reply)), ctx);
    }
}

/// Deterministic execution: the clock instead of wall-clock timers, and the
/// trace.
impl CheckpointCoordinator {
    /// Triggers the next periodic checkpoint once the mode's clock is
    /// `interval_ms` further, then arms the one after.
    fn trigger_on_clock(
        &mut self,
        clock: crate::time::ManualClock,
        interval_ms: i64,
        ctx: &mut Context<Self>,
    ) {
        use crate::time::Clock;
        let at = clock.now_ms().saturating_add(interval_ms.max(1));
        let sleep = clock.sleep_until(at);
        ctx.spawn(sleep.into_actor(self).map(move |(), actor, ctx| {
            actor.periodic(ctx);
            actor.trigger_on_clock(clock, interval_ms, ctx);
        }));
    }

    fn trace(&self, event: TraceEvent) {
        if let Some(mode) = &self.setup.deterministic {
            mode.record(event);
        }
    }
}

/// Stops the coordinator of an attempt that ended (deterministic
/// execution, where it shares the job's thread instead of having an
/// arbiter to stop): later acknowledgements are dropped.
pub(crate) struct StopCoordinator;

impl Message for StopCoordinator {
    type Result = ();
}

impl Handler<StopCoordinator> for CheckpointCoordinator {
    type Result = ();

    fn handle(&mut self, _: StopCoordinator, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
