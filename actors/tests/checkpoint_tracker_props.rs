//! Property tests of the checkpoint tracker: random sequences of protocol
//! events (ticks, acks, declines, timeouts, subtasks ending and finishing,
//! savepoints, commit outcomes, region restarts), with the actions carried
//! out the way the coordinator actor does, checked against invariants
//! computed independently from the event log.

use floe_actors::checkpoint::messages::AcknowledgeCheckpoint;
use floe_actors::checkpoint::tracker::{
    Action, JobShape, Moment, SubtaskSlot, Tracker, TrackerConfig,
};
use floe_actors::checkpoint::{CheckpointError, SnapshotKind, SubtaskKey};
use floe_actors::element::BarrierKind;
use floe_actors::ids::{CheckpointId, SubtaskIndex, VertexId};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug)]
enum Event {
    Tick,
    /// Ack of the `pick`-th pending checkpoint by subtask `subtask`.
    Ack {
        pick: usize,
        subtask: usize,
    },
    Decline {
        pick: usize,
        subtask: usize,
    },
    Timeout {
        pick: usize,
    },
    Ended {
        subtask: usize,
    },
    Finished {
        subtask: usize,
    },
    Savepoint,
    RegionRestart,
    Advance(i64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => Just(Event::Tick),
        12 => (0..3usize, 0..4usize).prop_map(|(pick, subtask)| Event::Ack { pick, subtask }),
        1 => (0..3usize, 0..4usize).prop_map(|(pick, subtask)| Event::Decline { pick, subtask }),
        1 => (0..3usize).prop_map(|pick| Event::Timeout { pick }),
        1 => (0..4usize).prop_map(|subtask| Event::Ended { subtask }),
        1 => (0..4usize).prop_map(|subtask| Event::Finished { subtask }),
        1 => Just(Event::Savepoint),
        1 => Just(Event::RegionRestart),
        2 => (0..100i64).prop_map(Event::Advance),
    ]
}

fn keys() -> Vec<SubtaskKey> {
    (0..4u32)
        .map(|i| (VertexId(i / 2), SubtaskIndex(i % 2)))
        .collect()
}

fn ack(id: CheckpointId, k: SubtaskKey) -> AcknowledgeCheckpoint {
    AcknowledgeCheckpoint {
        checkpoint: id,
        vertex: k.0,
        subtask: k.1,
        operators: Vec::new(),
        watermark: 0,
        channel_watermarks: Vec::new(),
        input_channel_state: None,
        output_channel_state: None,
        channel_state_bytes: 0,
        state_bytes: 0,
        alignment_ms: 0,
        sync_ms: 0,
        async_ms: 0,
        unaligned: false,
    }
}

/// What the harness saw, to check the invariants against.
#[derive(Default)]
struct Log {
    triggered: Vec<CheckpointId>,
    kinds: BTreeMap<CheckpointId, BarrierKind>,
    completed: Vec<CheckpointId>,
    aborted: Vec<CheckpointId>,
    notified: BTreeMap<CheckpointId, bool>,
    failed_in_row: u32,
    job_failed: bool,
    /// Acks the harness sent, per checkpoint.
    acked: BTreeMap<CheckpointId, BTreeSet<SubtaskKey>>,
    /// Finished subtasks (their actor is gone).
    finished: BTreeSet<SubtaskKey>,
}

struct Harness {
    tracker: Tracker,
    log: Log,
    now: i64,
    restarts: u64,
    config: TrackerConfig,
}

impl Harness {
    fn at(&self) -> Moment {
        Moment {
            now_ms: self.now,
            region_restarts: self.restarts,
        }
    }

    /// Carries out `actions` like the coordinator actor, checking each.
    fn run(&mut self, actions: Vec<Action>) -> Result<(), TestCaseError> {
        for a in actions {
            prop_assert!(!self.log.job_failed, "an action after the job failed");
            match a {
                Action::Triggered { id, kind, .. } => {
                    if let Some(last) = self.log.triggered.last() {
                        prop_assert!(id > *last, "ids increase: {id} after {last}");
                    }
                    self.log.triggered.push(id);
                    self.log.kinds.insert(id, kind);
                }
                Action::Commit {
                    meta,
                    region_restarts,
                } => {
                    // Every subtask is in the metadata once: acked, or
                    // finished before the checkpoint.
                    let acked = self.log.acked.get(&meta.id).cloned().unwrap_or_default();
                    let mut covered = BTreeSet::new();
                    for r in &meta.runtime {
                        let k = keys()
                            .into_iter()
                            .find(|k| format!("head-{}", k.0.0) == r.head_uid && k.1.0 == r.subtask)
                            .expect("a known subtask");
                        prop_assert!(covered.insert(k), "{k:?} twice in {}", meta.id);
                        if r.finished {
                            prop_assert!(self.log.finished.contains(&k));
                        } else {
                            prop_assert!(acked.contains(&k), "{k:?} not acked {}", meta.id);
                        }
                    }
                    prop_assert_eq!(covered.len(), 4);
                    let next = if region_restarts != self.restarts {
                        self.tracker.on_region_fenced(meta.id, self.at())
                    } else {
                        let path =
                            (meta.kind == SnapshotKind::Savepoint).then(|| PathBuf::from("sp"));
                        self.tracker.on_committed(meta.id, Ok(path), self.at())
                    };
                    self.run(next)?;
                }
                Action::Completed(r) => {
                    let id = r.id;
                    if !r.savepoint
                        && let Some(last) = self
                            .log
                            .completed
                            .iter()
                            .rev()
                            .find(|c| self.log.kinds.get(c) != Some(&BarrierKind::Savepoint))
                    {
                        prop_assert!(id > *last, "{id} completed after {last}");
                    }
                    prop_assert!(!self.log.aborted.contains(&id));
                    self.log.completed.push(id);
                    self.log.failed_in_row = 0;
                }
                Action::Aborted { record, counts } => {
                    let id = record.id;
                    prop_assert!(!self.log.completed.contains(&id));
                    prop_assert!(!self.log.aborted.contains(&id), "{id} aborted twice");
                    self.log.aborted.push(id);
                    if counts && !record.savepoint {
                        self.log.failed_in_row += 1;
                    }
                }
                Action::Notify { id, completed, .. } => {
                    prop_assert!(self.log.notified.insert(id, completed).is_none());
                    prop_assert_eq!(completed, self.log.completed.contains(&id));
                }
                Action::FailJob(_) => {
                    prop_assert!(self.log.failed_in_row > self.config.tolerable_failures);
                    self.log.job_failed = true;
                }
                Action::Trigger { barrier, .. } => {
                    prop_assert!(self.log.triggered.contains(&barrier.checkpoint_id));
                }
                Action::ScheduleTimeout { .. }
                | Action::Discard { .. }
                | Action::StopDone(_)
                | Action::SavepointDone { .. }
                | Action::TakeRequestedSavepoint(_) => {}
            }
        }
        let periodic: Vec<CheckpointId> = self
            .tracker
            .pending()
            .filter(|id| self.log.kinds.get(id) != Some(&BarrierKind::Savepoint))
            .collect();
        prop_assert!(periodic.len() <= self.config.max_concurrent);
        // A completed checkpoint subsumes the older pending ones.
        let newest = self
            .log
            .completed
            .iter()
            .filter(|id| self.log.kinds.get(id) != Some(&BarrierKind::Savepoint))
            .max();
        if let (Some(newest), Some(oldest)) = (newest, periodic.first()) {
            prop_assert!(oldest > newest, "{oldest} pending after {newest} completed");
        }
        Ok(())
    }

    fn pick(&self, pick: usize) -> Option<CheckpointId> {
        let pending: Vec<CheckpointId> = self.tracker.pending().collect();
        (!pending.is_empty()).then(|| pending[pick % pending.len()])
    }

    fn apply(&mut self, e: Event) -> Result<(), TestCaseError> {
        let k = |i: usize| keys()[i];
        let actions = match e {
            Event::Tick => self.tracker.on_tick(self.at()),
            Event::Ack { pick, subtask } => {
                let Some(id) = self.pick(pick) else {
                    return Ok(());
                };
                // A subtask acks once, and not after it finished.
                if self.log.finished.contains(&k(subtask))
                    || !self.log.acked.entry(id).or_default().insert(k(subtask))
                {
                    return Ok(());
                }
                self.tracker.on_ack(ack(id, k(subtask)), self.at())
            }
            Event::Decline { pick, subtask } => match self.pick(pick) {
                Some(id) => self.tracker.on_decline(id, k(subtask), "no", self.at()),
                None => return Ok(()),
            },
            Event::Timeout { pick } => match self.pick(pick) {
                Some(id) => self.tracker.on_timeout(id, self.at()),
                None => return Ok(()),
            },
            Event::Ended { subtask } => self.tracker.on_ended(k(subtask), self.at()),
            Event::Finished { subtask } => {
                self.log.finished.insert(k(subtask));
                self.tracker.on_finished(k(subtask), self.at())
            }
            Event::Savepoint => match self.tracker.reserve() {
                Some(id) => self
                    .tracker
                    .on_trigger(id, SnapshotKind::Savepoint, false, self.at()),
                None => return Ok(()),
            },
            Event::RegionRestart => {
                self.restarts += 1;
                return Ok(());
            }
            Event::Advance(ms) => {
                self.now += ms;
                return Ok(());
            }
        };
        self.run(actions)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_tracker_keeps_the_protocol_invariants(
        events in proptest::collection::vec(event(), 1..80),
        max_concurrent in 1..3usize,
        tolerable_failures in 0..3u32,
        min_pause_ms in 0..50u64,
    ) {
        let config = TrackerConfig {
            periodic: true,
            min_pause_ms,
            timeout_ms: 1_000,
            max_concurrent,
            tolerable_failures,
            barrier: BarrierKind::Aligned,
            requested_savepoint_dir: None,
        };
        let mut tracker = Tracker::new(
            config.clone(),
            JobShape::default(),
            Arc::new(AtomicU64::new(1)),
        );
        let slots = keys()
            .into_iter()
            .map(|key| SubtaskSlot {
                key,
                is_source: key.0 == VertexId(0),
                head_uid: format!("head-{}", key.0.0),
                parallelism: 2,
            })
            .collect();
        let initial = tracker.on_register(slots);
        let mut h = Harness { tracker, log: Log::default(), now: 1_000, restarts: 0, config };
        h.run(initial)?;
        for e in events {
            if h.log.job_failed {
                break;
            }
            h.apply(e)?;
        }
        // Every checkpoint that ended was notified once, the way it ended.
        let ended: HashSet<CheckpointId> =
            h.log.completed.iter().chain(&h.log.aborted).copied().collect();
        let notified: HashSet<CheckpointId> = h.log.notified.keys().copied().collect();
        prop_assert_eq!(ended, notified);
        // Every triggered checkpoint is pending, completed or aborted.
        for id in &h.log.triggered {
            prop_assert!(
                h.tracker.is_pending(*id) || h.log.notified.contains_key(id),
                "{} lost", id
            );
        }
    }
}

#[test]
fn a_failed_commit_is_retried_by_the_next_trigger() {
    let config = TrackerConfig {
        periodic: true,
        min_pause_ms: 0,
        timeout_ms: 1_000,
        max_concurrent: 1,
        tolerable_failures: 1,
        barrier: BarrierKind::Aligned,
        requested_savepoint_dir: None,
    };
    let mut t = Tracker::new(config, JobShape::default(), Arc::new(AtomicU64::new(7)));
    let k = (VertexId(0), SubtaskIndex(0));
    let slot = SubtaskSlot {
        key: k,
        is_source: true,
        head_uid: "h".into(),
        parallelism: 1,
    };
    t.on_register(vec![slot]);
    let at = Moment::default();
    t.on_tick(at);
    t.on_ack(ack(CheckpointId(7), k), at);
    let e = CheckpointError::Failed {
        checkpoint: CheckpointId(7),
        message: "x".into(),
    };
    t.on_committed(CheckpointId(7), Err(e), at);
    let out = t.on_tick(at);
    assert!(
        out.iter().any(|a| matches!(
            a,
            Action::Triggered { id, .. } if *id == CheckpointId(8)
        )),
        "{out:?}"
    );
}
