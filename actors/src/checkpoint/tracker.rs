//! The checkpoint protocol's decisions, without actors, I/O or clocks.
//!
//! [`Tracker`] holds what the coordinator knows (the deployed subtasks, the
//! pending checkpoints and what each still awaits, the subtasks that
//! finished or ended) and turns every event into the [`Action`]s that
//! follow, in order. Time comes in with each event ([`Moment`]); the
//! coordinator actor ([`super::coordinator`]) only feeds events and carries
//! the actions out.
//!
//! 1. **Trigger** ([`Tracker::on_tick`], or [`Tracker::reserve`] then
//!    [`Tracker::on_trigger`]): every running source (and every subtask
//!    that ended, waiting for its final checkpoint) is sent the barrier; a
//!    timeout is scheduled.
//! 2. **Collect** ([`Tracker::on_ack`]): each subtask not finished is
//!    awaited. A decline or the timeout aborts the checkpoint (a failure);
//!    a subtask finishing before its snapshot, a region restart, or a newer
//!    completed checkpoint (subsumption) aborts it without counting.
//! 3. **Commit**: with every ack, [`Action::Commit`] carries the metadata;
//!    the commit's outcome comes back as [`Tracker::on_committed`] (or
//!    [`Tracker::on_region_fenced`]). Then every subtask is notified.
//! 4. More failed checkpoints in a row than `tolerable_failures` fail the
//!    job ([`Action::FailJob`]).

use super::format::{
    CHECKPOINT_FORMAT_VERSION, CheckpointMetadata, OperatorState, SnapshotKind,
    SubtaskOperatorState, SubtaskRuntimeState,
};
use super::messages::AcknowledgeCheckpoint;
use super::stats::CheckpointRecord;
use super::{CheckpointError, SubtaskKey};
use crate::element::{Barrier, BarrierKind, Timestamp};
use crate::ids::CheckpointId;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// When an event happens: the wall clock, and how many region restarts
/// had begun (see [`RegionFence`](super::coordinator::RegionFence)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moment {
    /// Milliseconds since the epoch.
    pub now_ms: Timestamp,
    /// Region restarts begun so far.
    pub region_restarts: u64,
}

/// The settings the protocol decides with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackerConfig {
    /// Periodic checkpoints are on (the job ends with a final checkpoint).
    pub periodic: bool,
    /// Least time between a completion and the next periodic trigger, ms.
    pub min_pause_ms: u64,
    /// A checkpoint not complete after this long is aborted, ms.
    pub timeout_ms: u64,
    /// Periodic checkpoints in progress at once.
    pub max_concurrent: usize,
    /// Failed checkpoints tolerated in a row.
    pub tolerable_failures: u32,
    /// The barrier of a periodic checkpoint (aligned, unaligned, at least once).
    pub barrier: BarrierKind,
    /// Sources hold for a requested savepoint (`savepoint_at_records`) that
    /// goes here; `None`: the request is dropped.
    pub requested_savepoint_dir: Option<PathBuf>,
}

/// What the metadata of a checkpoint names besides the acks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobShape {
    /// The job's max parallelism.
    pub max_parallelism: u32,
    /// uid → (name, parallelism) of every operator.
    pub operators: HashMap<String, (String, u32)>,
    /// Uids of the two-phase-commit sinks.
    pub transactional_sinks: Vec<String>,
}

/// One deployed subtask, as the protocol sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubtaskSlot {
    /// Vertex and index.
    pub key: SubtaskKey,
    /// A source: the barrier is injected there.
    pub is_source: bool,
    /// Uid of its chain's head operator.
    pub head_uid: String,
    /// Its vertex's parallelism.
    pub parallelism: u32,
}

/// What the coordinator does next, in order.
#[derive(Debug)]
pub enum Action {
    /// Checkpoint `id` was triggered at `sources` subtasks (log, trace).
    Triggered {
        /// The checkpoint.
        id: CheckpointId,
        /// Its barrier.
        kind: BarrierKind,
        /// Subtasks it was sent to.
        sources: usize,
    },
    /// Send [`TriggerCheckpoint`](super::messages::TriggerCheckpoint) to one subtask.
    Trigger {
        /// The subtask.
        subtask: SubtaskKey,
        /// The barrier to inject.
        barrier: Barrier,
        /// The job stops with it.
        stop: bool,
    },
    /// Call [`Tracker::on_timeout`] for `id` after `after_ms`.
    ScheduleTimeout {
        /// The checkpoint.
        id: CheckpointId,
        /// Delay, ms.
        after_ms: u64,
    },
    /// Every ack is in: write the metadata (store commit, or savepoint
    /// finish), unless a region restart began since the trigger; report
    /// with [`Tracker::on_committed`] or [`Tracker::on_region_fenced`].
    Commit {
        /// What to write.
        meta: CheckpointMetadata,
        /// The region restarts counted at the trigger.
        region_restarts: u64,
    },
    /// A checkpoint or savepoint completed (stats, metrics, log, trace).
    Completed(CheckpointRecord),
    /// Send [`NotifyCheckpoint`](super::messages::NotifyCheckpoint) to every subtask.
    Notify {
        /// The checkpoint.
        id: CheckpointId,
        /// Completed or aborted.
        completed: bool,
        /// The job stops with it: subtasks finish once notified.
        finish: bool,
    },
    /// Remove what an aborted checkpoint wrote (its late parts too).
    Discard {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint (store files) or savepoint (its directory).
        kind: SnapshotKind,
    },
    /// A checkpoint was aborted (stats, metrics, log, trace).
    Aborted {
        /// Its record; `failure` says why.
        record: CheckpointRecord,
        /// It counts as a failure.
        counts: bool,
    },
    /// Reply to the stop-with-checkpoint request.
    StopDone(Result<Option<PathBuf>, CheckpointError>),
    /// Reply to whoever asked for savepoint `id`.
    SavepointDone {
        /// The savepoint.
        id: CheckpointId,
        /// Its path, or why it failed.
        result: Result<PathBuf, CheckpointError>,
    },
    /// Every running source holds at `savepoint_at_records`: take the
    /// savepoint into [`TrackerConfig::requested_savepoint_dir`].
    TakeRequestedSavepoint(PathBuf),
    /// Too many failures in a row: fail the job and stop coordinating.
    FailJob(crate::Error),
}

struct Pending {
    kind: SnapshotKind,
    /// Sent again, directly, to a subtask that ends while awaited.
    barrier: Barrier,
    trigger_ms: Timestamp,
    awaiting: HashSet<SubtaskKey>,
    /// The job stops with it: its notify-complete finishes every subtask.
    stop: bool,
    acks: Vec<AcknowledgeCheckpoint>,
    /// Region restarts counted when it was triggered.
    region_restarts: u64,
    /// Set once [`Action::Commit`] went out: the record to report.
    committing: Option<CheckpointRecord>,
}

/// The checkpoint protocol's state (see the module documentation).
pub struct Tracker {
    config: TrackerConfig,
    shape: JobShape,
    /// The next id, shared by every attempt of the job: an id is used once,
    /// even by a checkpoint that was aborted.
    next_id: Arc<AtomicU64>,
    subtasks: Vec<SubtaskSlot>,
    pending: BTreeMap<CheckpointId, Pending>,
    finished: HashSet<SubtaskKey>,
    /// Reached their end and wait for the final checkpoint: triggered
    /// directly, as no barrier reaches them any more.
    ended: HashSet<SubtaskKey>,
    last_completion_ms: Option<Timestamp>,
    failures_in_row: u32,
    savepoint_requested: bool,
    /// Sources holding at their share of `savepoint_at_records`.
    holding: HashSet<SubtaskKey>,
    /// Checkpoints aborted: what their late parts write is removed.
    aborted: HashSet<CheckpointId>,
    /// A periodic trigger came while a savepoint was pending: taken once
    /// no savepoint is.
    periodic_queued: bool,
    /// The job stops with a pending checkpoint: nothing else is triggered.
    stopping: bool,
    /// The stop's checkpoint completed: the subtasks finish where they are
    /// and no checkpoint follows (it would record them finished, and a
    /// restore from it would read nothing more).
    stopped: bool,
}

impl Tracker {
    /// A tracker with no subtask registered yet.
    pub fn new(config: TrackerConfig, shape: JobShape, next_id: Arc<AtomicU64>) -> Self {
        Tracker {
            config,
            shape,
            next_id,
            subtasks: Vec::new(),
            pending: BTreeMap::new(),
            finished: HashSet::new(),
            ended: HashSet::new(),
            last_completion_ms: None,
            failures_in_row: 0,
            savepoint_requested: false,
            holding: HashSet::new(),
            aborted: HashSet::new(),
            periodic_queued: false,
            stopping: false,
            stopped: false,
        }
    }

    /// The checkpoints in progress, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.pending.keys().copied()
    }

    /// The checkpoints aborted so far.
    pub fn aborted(&self) -> impl Iterator<Item = CheckpointId> + '_ {
        self.aborted.iter().copied()
    }

    /// Whether `id` is in progress.
    pub fn is_pending(&self, id: CheckpointId) -> bool {
        self.pending.contains_key(&id)
    }

    /// Whether `id` was aborted (its late parts are discarded).
    pub fn was_aborted(&self, id: CheckpointId) -> bool {
        self.aborted.contains(&id)
    }

    /// The job is stopping with a checkpoint, or stopped with one.
    pub fn is_stopping(&self) -> bool {
        self.stopping || self.stopped
    }

    /// Failed checkpoints in a row so far.
    pub fn failures_in_row(&self) -> u32 {
        self.failures_in_row
    }

    /// The subtasks are deployed.
    pub fn on_register(&mut self, subtasks: Vec<SubtaskSlot>) -> Vec<Action> {
        self.subtasks = subtasks;
        // Sources may have reached their savepoint share before this.
        let mut out = Vec::new();
        self.maybe_take_requested_savepoint(&mut out);
        out
    }

    /// A region was redeployed: its subtasks replace their predecessors;
    /// pending checkpoints waited for the failed ones and are aborted
    /// (without counting as failures).
    pub fn on_replace(&mut self, subtasks: Vec<SubtaskSlot>, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        let ids: Vec<CheckpointId> = self.pending.keys().copied().collect();
        for id in ids {
            self.abort(id, "a region restarted".into(), false, at, &mut out);
        }
        for slot in subtasks {
            self.finished.remove(&slot.key);
            self.ended.remove(&slot.key);
            self.holding.remove(&slot.key);
            match self.subtasks.iter_mut().find(|s| s.key == slot.key) {
                Some(s) => *s = slot,
                None => self.subtasks.push(slot),
            }
        }
        out
    }

    /// The periodic timer fired.
    pub fn on_tick(&mut self, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        self.periodic(at, &mut out);
        out
    }

    /// Picks the id of a new checkpoint or savepoint, or `None` when no
    /// subtask could inject its barrier (every source finished) or the job
    /// stopped with a checkpoint. Then
    /// [`Tracker::on_trigger`] starts it (a savepoint's directory is
    /// created in between).
    pub fn reserve(&mut self) -> Option<CheckpointId> {
        if self.stopped {
            return None;
        }
        // No subtask could inject its barrier.
        self.sources().next()?;
        Some(CheckpointId(self.next_id.fetch_add(1, Ordering::AcqRel)))
    }

    /// Starts checkpoint `id` (from [`Tracker::reserve`]); `stop`: the job
    /// stops with it.
    pub fn on_trigger(
        &mut self,
        id: CheckpointId,
        kind: SnapshotKind,
        stop: bool,
        at: Moment,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.start(id, kind, stop, at, &mut out);
        out
    }

    /// A subtask's part of a checkpoint is persisted.
    pub fn on_ack(&mut self, ack: AcknowledgeCheckpoint, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        let id = ack.checkpoint;
        let Some(p) = self.pending.get_mut(&id) else {
            // A late part of an aborted checkpoint: its files go too.
            if self.aborted.contains(&id) {
                out.push(Action::Discard {
                    id,
                    kind: SnapshotKind::Checkpoint,
                });
            }
            return out;
        };
        p.awaiting.remove(&(ack.vertex, ack.subtask));
        p.acks.push(ack);
        self.maybe_complete(id, at, &mut out);
        out
    }

    /// A subtask declined checkpoint `id`: it fails.
    pub fn on_decline(
        &mut self,
        id: CheckpointId,
        subtask: SubtaskKey,
        reason: &str,
        at: Moment,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let reason = format!(
            "declined by subtask {} of vertex {}: {reason}",
            subtask.1, subtask.0
        );
        self.abort(id, reason, true, at, &mut out);
        out
    }

    /// Checkpoint `id` is not complete after the timeout.
    pub fn on_timeout(&mut self, id: CheckpointId, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        if self.pending.contains_key(&id) {
            let reason = format!("expired after {} ms", self.config.timeout_ms);
            self.abort(id, reason, true, at, &mut out);
        }
        out
    }

    /// A subtask finished (its actor is gone).
    pub fn on_finished(&mut self, key: SubtaskKey, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        self.finished.insert(key);
        if self.ended.remove(&key) {
            // It finished after a checkpoint covering its end completed:
            // later checkpoints record it finished instead of waiting.
            let ids: Vec<CheckpointId> = self
                .pending
                .iter_mut()
                .filter_map(|(id, p)| p.awaiting.remove(&key).then_some(*id))
                .collect();
            for id in ids {
                self.maybe_complete(id, at, &mut out);
            }
            return out;
        }
        self.maybe_take_requested_savepoint(&mut out);
        // A subtask that finishes while a checkpoint still waits for its
        // snapshot never takes one (its barriers came after its end of
        // input): aborted without counting, as Flink treats a task closing.
        let ids: Vec<CheckpointId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.awaiting.contains(&key))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let reason = format!(
                "subtask {} of vertex {} finished before its snapshot",
                key.1, key.0
            );
            self.abort(id, reason, false, at, &mut out);
        }
        out
    }

    /// A subtask reached its end and waits for the final checkpoint.
    pub fn on_ended(&mut self, key: SubtaskKey, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        if self.finished.contains(&key) {
            return out;
        }
        self.ended.insert(key);
        // Checkpoints awaiting it get no barrier through its ended inputs:
        // it takes them directly, with its final state.
        if self.subtasks.iter().any(|s| s.key == key) {
            for p in self.pending.values() {
                if p.awaiting.contains(&key) {
                    out.push(Action::Trigger {
                        subtask: key,
                        barrier: p.barrier,
                        stop: p.stop,
                    });
                }
            }
        }
        self.maybe_take_requested_savepoint(&mut out);
        self.maybe_trigger_final(at, &mut out);
        out
    }

    /// A source holds at its share of `savepoint_at_records`.
    pub fn on_savepoint_request(&mut self, key: SubtaskKey) -> Vec<Action> {
        let mut out = Vec::new();
        self.holding.insert(key);
        self.maybe_take_requested_savepoint(&mut out);
        out
    }

    /// The outcome of [`Action::Commit`] for `id`: its savepoint's path
    /// (`None` for a checkpoint), or why it could not be written.
    pub fn on_committed(
        &mut self,
        id: CheckpointId,
        result: Result<Option<PathBuf>, CheckpointError>,
        at: Moment,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let path = match result {
            Ok(path) => path,
            Err(e) => {
                self.abort(id, e.to_string(), true, at, &mut out);
                return out;
            }
        };
        let Some(p) = self.pending.remove(&id) else {
            return out;
        };
        self.failures_in_row = 0;
        if let Some(record) = p.committing {
            out.push(Action::Completed(record));
        }
        if p.kind == SnapshotKind::Checkpoint {
            self.last_completion_ms = Some(at.now_ms);
            self.abort_subsumed(id, at, &mut out);
        }
        out.push(Action::Notify {
            id,
            completed: true,
            finish: p.stop,
        });
        if p.stop && self.stopping {
            self.stopping = false;
            self.stopped = true;
            out.push(Action::StopDone(Ok(path.clone())));
        }
        if p.kind == SnapshotKind::Savepoint {
            if let Some(path) = path {
                out.push(Action::SavepointDone {
                    id,
                    result: Ok(path),
                });
            }
            self.release_queued_periodic(at, &mut out);
        }
        self.maybe_trigger_final(at, &mut out);
        out
    }

    /// A region restart began after checkpoint `id` was triggered: it holds
    /// the failed incarnation's state and never completes.
    pub fn on_region_fenced(&mut self, id: CheckpointId, at: Moment) -> Vec<Action> {
        let mut out = Vec::new();
        self.abort(id, "a region restarted".into(), false, at, &mut out);
        out
    }

    fn sources(&self) -> impl Iterator<Item = &SubtaskSlot> {
        // Running sources emit the barrier; subtasks that ended snapshot
        // their final state when triggered directly.
        self.subtasks.iter().filter(|s| {
            (s.is_source || self.ended.contains(&s.key)) && !self.finished.contains(&s.key)
        })
    }

    fn savepoint_pending(&self) -> bool {
        self.pending
            .values()
            .any(|p| p.kind == SnapshotKind::Savepoint)
    }

    fn periodic(&mut self, at: Moment, out: &mut Vec<Action>) {
        if self.stopping {
            return;
        }
        if self.savepoint_pending() {
            // Queued behind the savepoint, as Flink does: a newer barrier
            // would cancel it in the subtasks. Taken when it ends.
            self.periodic_queued = true;
            return;
        }
        let periodic = self
            .pending
            .values()
            .filter(|p| p.kind == SnapshotKind::Checkpoint)
            .count();
        if periodic >= self.config.max_concurrent {
            return;
        }
        if let Some(done) = self.last_completion_ms
            && (at.now_ms.saturating_sub(done).max(0) as u64) < self.config.min_pause_ms
        {
            return;
        }
        self.trigger_checkpoint(at, out);
    }

    fn trigger_checkpoint(&mut self, at: Moment, out: &mut Vec<Action>) {
        if let Some(id) = self.reserve() {
            self.start(id, SnapshotKind::Checkpoint, false, at, out);
        }
    }

    fn start(
        &mut self,
        id: CheckpointId,
        kind: SnapshotKind,
        stop: bool,
        at: Moment,
        out: &mut Vec<Action>,
    ) {
        let barrier_kind = match kind {
            SnapshotKind::Checkpoint => self.config.barrier,
            SnapshotKind::Savepoint => BarrierKind::Savepoint,
        };
        let barrier = Barrier {
            checkpoint_id: id,
            timestamp: at.now_ms,
            kind: barrier_kind,
        };
        let sources: Vec<SubtaskKey> = self.sources().map(|s| s.key).collect();
        let awaiting = self
            .subtasks
            .iter()
            .filter(|s| !self.finished.contains(&s.key))
            .map(|s| s.key)
            .collect();
        self.pending.insert(
            id,
            Pending {
                kind,
                barrier,
                trigger_ms: at.now_ms,
                awaiting,
                stop,
                acks: Vec::new(),
                region_restarts: at.region_restarts,
                committing: None,
            },
        );
        if stop {
            self.stopping = true;
        }
        out.push(Action::Triggered {
            id,
            kind: barrier_kind,
            sources: sources.len(),
        });
        for subtask in sources {
            out.push(Action::Trigger {
                subtask,
                barrier,
                stop,
            });
        }
        out.push(Action::ScheduleTimeout {
            id,
            after_ms: self.config.timeout_ms,
        });
    }

    /// A savepoint ended: the periodic trigger queued behind it goes now.
    fn release_queued_periodic(&mut self, at: Moment, out: &mut Vec<Action>) {
        if self.periodic_queued && !self.savepoint_pending() {
            self.periodic_queued = false;
            self.periodic(at, out);
        }
    }

    /// Every subtask still deployed ended: the final checkpoint is taken at
    /// once (not at the next interval), so the job finishes promptly.
    fn maybe_trigger_final(&mut self, at: Moment, out: &mut Vec<Action>) {
        if self.stopping {
            return;
        }
        let all_ended = !self.subtasks.is_empty()
            && !self.ended.is_empty()
            && self
                .subtasks
                .iter()
                .all(|s| self.ended.contains(&s.key) || self.finished.contains(&s.key));
        // Not while a savepoint is pending either: the newer barrier would
        // cancel it; its end calls this again.
        if all_ended && self.pending.is_empty() && self.config.periodic {
            self.trigger_checkpoint(at, out);
        }
    }

    fn maybe_take_requested_savepoint(&mut self, out: &mut Vec<Action>) {
        // Before the subtasks are registered, no source is known to wait for.
        if self.savepoint_requested || self.holding.is_empty() || self.subtasks.is_empty() {
            return;
        }
        let waiting = self.subtasks.iter().any(|s| {
            s.is_source
                && !self.finished.contains(&s.key)
                && !self.ended.contains(&s.key)
                && !self.holding.contains(&s.key)
        });
        if waiting {
            return;
        }
        self.savepoint_requested = true;
        if let Some(dir) = self.config.requested_savepoint_dir.clone() {
            out.push(Action::TakeRequestedSavepoint(dir));
        }
    }

    fn maybe_complete(&mut self, id: CheckpointId, at: Moment, out: &mut Vec<Action>) {
        let ready = self
            .pending
            .get(&id)
            .is_some_and(|p| p.awaiting.is_empty() && p.committing.is_none());
        if !ready {
            return;
        }
        let meta = self.metadata(id, at);
        let p = self.pending.get_mut(&id).expect("checked above");
        p.committing = Some(record_of(&meta, "completed", None));
        out.push(Action::Commit {
            meta,
            region_restarts: p.region_restarts,
        });
    }

    /// Aborts the checkpoints older than `completed` still pending (not
    /// savepoints): a completed checkpoint subsumes them, as in Flink, and
    /// the store's retention has just removed their directories. Not
    /// counted as failures.
    fn abort_subsumed(&mut self, completed: CheckpointId, at: Moment, out: &mut Vec<Action>) {
        let older: Vec<CheckpointId> = self
            .pending
            .iter()
            .filter(|(id, p)| **id < completed && p.kind == SnapshotKind::Checkpoint)
            .map(|(id, _)| *id)
            .collect();
        for id in older {
            let reason = format!("subsumed by completed checkpoint {}", completed.0);
            self.abort(id, reason, false, at, out);
        }
    }

    /// Aborts checkpoint `id`; `counts`: whether it counts against the
    /// tolerable failed checkpoints.
    fn abort(
        &mut self,
        id: CheckpointId,
        reason: String,
        counts: bool,
        at: Moment,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        self.aborted.insert(id);
        // A checkpoint abandoned because a subtask reached its end is not
        // a failure: it is in the history as "aborted".
        let record = CheckpointRecord {
            id,
            savepoint: p.kind == SnapshotKind::Savepoint,
            status: if counts { "failed" } else { "aborted" }.into(),
            trigger_ms: p.trigger_ms,
            duration_ms: elapsed(p.trigger_ms, at),
            alignment_ms: 0,
            sync_ms: 0,
            async_ms: 0,
            state_bytes: 0,
            channel_state_bytes: 0,
            unaligned: false,
            failure: Some(reason.clone()),
        };
        out.push(Action::Aborted { record, counts });
        out.push(Action::Discard { id, kind: p.kind });
        out.push(Action::Notify {
            id,
            completed: false,
            finish: false,
        });
        let failed = || CheckpointError::Failed {
            checkpoint: id,
            message: reason.clone(),
        };
        if p.stop && self.stopping {
            // The stop failed; the job runs on (the caller may cancel it).
            self.stopping = false;
            out.push(Action::StopDone(Err(failed())));
        }
        if p.kind == SnapshotKind::Savepoint {
            self.release_queued_periodic(at, out);
            out.push(Action::SavepointDone {
                id,
                result: Err(failed()),
            });
            self.maybe_trigger_final(at, out);
            return;
        }
        if !counts {
            self.maybe_trigger_final(at, out);
            return;
        }
        self.failures_in_row += 1;
        if self.failures_in_row > self.config.tolerable_failures {
            out.push(Action::FailJob(crate::Error::Runtime(format!(
                "checkpoint {} failed ({reason}); {} failed in a row, {} tolerated",
                id.0, self.failures_in_row, self.config.tolerable_failures
            ))));
            return;
        }
        self.maybe_trigger_final(at, out);
    }
}

#[path = "tracker_metadata.rs"]
mod metadata;
use metadata::elapsed;
pub(crate) use metadata::record_of;

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
