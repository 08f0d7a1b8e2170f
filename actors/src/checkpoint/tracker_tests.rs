//! Unit tests of the tracker: one protocol rule each, driven by events with
//! explicit times. `actors/tests/checkpoint_tracker_props.rs` checks the
//! invariants over random event sequences.

use super::*;
use crate::ids::{SubtaskIndex, VertexId};

const SOURCE: VertexId = VertexId(0);
const SINK: VertexId = VertexId(1);

fn key(v: VertexId, s: u32) -> SubtaskKey {
    (v, SubtaskIndex(s))
}

fn slot(v: VertexId, s: u32, is_source: bool) -> SubtaskSlot {
    SubtaskSlot {
        key: key(v, s),
        is_source,
        head_uid: format!("head-{}", v.0),
        parallelism: 2,
    }
}

fn config() -> TrackerConfig {
    TrackerConfig {
        periodic: true,
        min_pause_ms: 0,
        timeout_ms: 1_000,
        max_concurrent: 1,
        tolerable_failures: 0,
        barrier: BarrierKind::Aligned,
        requested_savepoint_dir: None,
    }
}

fn at(now_ms: i64) -> Moment {
    Moment {
        now_ms,
        region_restarts: 0,
    }
}

/// Two sources feeding two sinks.
fn tracker(config: TrackerConfig) -> Tracker {
    let mut t = Tracker::new(config, JobShape::default(), Arc::new(AtomicU64::new(1)));
    let out = t.on_register(vec![
        slot(SOURCE, 0, true),
        slot(SOURCE, 1, true),
        slot(SINK, 0, false),
        slot(SINK, 1, false),
    ]);
    assert!(out.is_empty());
    t
}

fn all() -> Vec<SubtaskKey> {
    vec![key(SOURCE, 0), key(SOURCE, 1), key(SINK, 0), key(SINK, 1)]
}

fn ack(id: u64, k: SubtaskKey) -> AcknowledgeCheckpoint {
    AcknowledgeCheckpoint {
        checkpoint: CheckpointId(id),
        vertex: k.0,
        subtask: k.1,
        operators: Vec::new(),
        watermark: 0,
        channel_watermarks: Vec::new(),
        input_channel_state: None,
        output_channel_state: None,
        channel_state_bytes: 0,
        state_bytes: 10,
        alignment_ms: 0,
        sync_ms: 0,
        async_ms: 0,
        unaligned: false,
    }
}

/// The actions' kinds, for comparing shapes.
fn kinds(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|a| match a {
            Action::Triggered { .. } => "triggered",
            Action::Trigger { .. } => "trigger",
            Action::ScheduleTimeout { .. } => "timeout",
            Action::Commit { .. } => "commit",
            Action::Completed(_) => "completed",
            Action::Notify {
                completed: true, ..
            } => "notify-complete",
            Action::Notify { .. } => "notify-abort",
            Action::Discard { .. } => "discard",
            Action::Aborted { counts: true, .. } => "failed",
            Action::Aborted { .. } => "aborted",
            Action::StopDone(_) => "stop-done",
            Action::SavepointDone { .. } => "savepoint-done",
            Action::TakeRequestedSavepoint(_) => "take-savepoint",
            Action::FailJob(_) => "fail-job",
        })
        .collect()
}

/// Acks `id` from every subtask in `from`; returns the last event's actions.
fn ack_all(t: &mut Tracker, id: u64, from: &[SubtaskKey], now: i64) -> Vec<Action> {
    let mut last = Vec::new();
    for k in from {
        last = t.on_ack(ack(id, *k), at(now));
    }
    last
}

#[test]
fn a_tick_triggers_the_running_sources() {
    let mut t = tracker(config());
    let out = t.on_tick(at(100));
    assert_eq!(
        kinds(&out),
        ["triggered", "trigger", "trigger", "timeout"],
        "{out:?}"
    );
    let targets: Vec<SubtaskKey> = out
        .iter()
        .filter_map(|a| match a {
            Action::Trigger {
                subtask, barrier, ..
            } => {
                assert_eq!(barrier.checkpoint_id, CheckpointId(1));
                assert_eq!(barrier.timestamp, 100);
                Some(*subtask)
            }
            _ => None,
        })
        .collect();
    assert_eq!(targets, [key(SOURCE, 0), key(SOURCE, 1)]);
}

#[test]
fn every_ack_commits_then_the_commit_notifies() {
    let mut t = tracker(config());
    t.on_tick(at(100));
    let subtasks = all();
    assert!(ack_all(&mut t, 1, &subtasks[..3], 150).is_empty());
    let out = t.on_ack(ack(1, subtasks[3]), at(160));
    let [Action::Commit { meta, .. }] = out.as_slice() else {
        panic!("{out:?}")
    };
    assert_eq!(meta.id, CheckpointId(1));
    assert_eq!(meta.duration_ms, 60);
    assert_eq!(meta.state_bytes, 40);
    assert_eq!(meta.runtime.len(), 4);
    // A second ack while committing does not commit twice.
    assert!(t.on_ack(ack(1, subtasks[3]), at(161)).is_empty());
    let out = t.on_committed(CheckpointId(1), Ok(None), at(170));
    assert_eq!(kinds(&out), ["completed", "notify-complete"], "{out:?}");
    assert!(!t.is_pending(CheckpointId(1)));
}

#[test]
fn a_decline_fails_the_checkpoint_and_too_many_fail_the_job() {
    let mut t = tracker(TrackerConfig {
        tolerable_failures: 1,
        ..config()
    });
    t.on_tick(at(0));
    let out = t.on_decline(CheckpointId(1), key(SINK, 0), "disk full", at(10));
    assert_eq!(
        kinds(&out),
        ["failed", "discard", "notify-abort"],
        "{out:?}"
    );
    let Action::Aborted { record, .. } = &out[0] else {
        unreachable!()
    };
    let reason = record.failure.as_deref().unwrap_or_default();
    assert!(
        reason.contains("declined by subtask #0 of vertex v1: disk full"),
        "{reason}"
    );
    t.on_tick(at(20));
    let out = t.on_timeout(CheckpointId(2), at(1_020));
    assert_eq!(
        kinds(&out),
        ["failed", "discard", "notify-abort", "fail-job"],
        "{out:?}"
    );
}

#[test]
fn a_timeout_after_completion_does_nothing() {
    let mut t = tracker(config());
    t.on_tick(at(0));
    ack_all(&mut t, 1, &all(), 5);
    t.on_committed(CheckpointId(1), Ok(None), at(6));
    assert!(t.on_timeout(CheckpointId(1), at(1_000)).is_empty());
    assert_eq!(t.failures_in_row(), 0);
}

#[test]
fn a_subtask_finishing_before_its_snapshot_aborts_without_failing() {
    let mut t = tracker(config());
    t.on_tick(at(0));
    let out = t.on_finished(key(SOURCE, 1), at(5));
    assert_eq!(
        kinds(&out),
        ["aborted", "discard", "notify-abort"],
        "{out:?}"
    );
    assert_eq!(t.failures_in_row(), 0);
    // The next checkpoint neither triggers nor awaits the finished source,
    // and records it finished.
    let out = t.on_tick(at(10));
    assert_eq!(kinds(&out), ["triggered", "trigger", "timeout"], "{out:?}");
    let out = ack_all(&mut t, 2, &[key(SOURCE, 0), key(SINK, 0), key(SINK, 1)], 20);
    let [Action::Commit { meta, .. }] = out.as_slice() else {
        panic!("{out:?}")
    };
    assert_eq!(meta.runtime.iter().filter(|r| r.finished).count(), 1);
}

#[test]
fn an_ended_subtask_is_triggered_directly_and_all_ended_take_the_final_checkpoint() {
    let mut t = tracker(config());
    t.on_tick(at(0));
    // Checkpoint 1 awaits the sink, whose input ended: it is triggered
    // directly with 1's barrier.
    let out = t.on_ended(key(SINK, 0), at(1));
    assert_eq!(kinds(&out), ["trigger"], "{out:?}");
    ack_all(&mut t, 1, &all(), 2);
    t.on_committed(CheckpointId(1), Ok(None), at(3));
    t.on_ended(key(SOURCE, 0), at(4));
    t.on_ended(key(SOURCE, 1), at(4));
    // The last one to end: the final checkpoint starts at once, at every
    // ended subtask.
    let out = t.on_ended(key(SINK, 1), at(5));
    assert_eq!(
        kinds(&out),
        [
            "triggered",
            "trigger",
            "trigger",
            "trigger",
            "trigger",
            "timeout"
        ],
        "{out:?}"
    );
}

#[test]
fn a_completed_checkpoint_subsumes_older_pending_ones() {
    let mut t = tracker(TrackerConfig {
        max_concurrent: 2,
        ..config()
    });
    t.on_tick(at(0));
    t.on_tick(at(10));
    ack_all(&mut t, 2, &all(), 20);
    let out = t.on_committed(CheckpointId(2), Ok(None), at(21));
    assert_eq!(
        kinds(&out),
        [
            "completed",
            "aborted",
            "discard",
            "notify-abort",
            "notify-complete"
        ],
        "{out:?}"
    );
    // A late ack of the subsumed checkpoint: its files are removed.
    let out = t.on_ack(ack(1, key(SINK, 0)), at(22));
    assert_eq!(kinds(&out), ["discard"], "{out:?}");
}

#[test]
fn min_pause_and_max_concurrent_hold_the_periodic_trigger() {
    let mut t = tracker(TrackerConfig {
        min_pause_ms: 50,
        ..config()
    });
    t.on_tick(at(0));
    assert!(t.on_tick(at(10)).is_empty(), "max_concurrent 1");
    ack_all(&mut t, 1, &all(), 20);
    t.on_committed(CheckpointId(1), Ok(None), at(30));
    assert!(t.on_tick(at(79)).is_empty(), "min pause");
    assert_eq!(kinds(&t.on_tick(at(80)))[0], "triggered");
}

#[test]
fn a_periodic_trigger_waits_behind_a_savepoint() {
    let mut t = tracker(config());
    let id = t.reserve().expect("sources run");
    t.on_trigger(id, SnapshotKind::Savepoint, false, at(0));
    assert!(t.on_tick(at(10)).is_empty());
    ack_all(&mut t, id.0, &all(), 20);
    let out = t.on_committed(id, Ok(Some(PathBuf::from("sp"))), at(21));
    assert_eq!(
        kinds(&out),
        [
            "completed",
            "notify-complete",
            "savepoint-done",
            "triggered",
            "trigger",
            "trigger",
            "timeout"
        ],
        "{out:?}"
    );
}

#[test]
fn a_region_restart_voids_a_checkpoint_triggered_before_it() {
    let mut t = tracker(config());
    t.on_tick(at(0));
    let out = ack_all(&mut t, 1, &all(), 5);
    let [
        Action::Commit {
            region_restarts, ..
        },
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(*region_restarts, 0);
    let out = t.on_region_fenced(CheckpointId(1), at(6));
    assert_eq!(
        kinds(&out),
        ["aborted", "discard", "notify-abort"],
        "{out:?}"
    );
    assert_eq!(t.failures_in_row(), 0);
}

#[test]
fn a_failed_commit_counts_as_a_failure() {
    let mut t = tracker(TrackerConfig {
        tolerable_failures: 5,
        ..config()
    });
    t.on_tick(at(0));
    ack_all(&mut t, 1, &all(), 5);
    let e = CheckpointError::Failed {
        checkpoint: CheckpointId(1),
        message: "disk full".into(),
    };
    let out = t.on_committed(CheckpointId(1), Err(e), at(6));
    assert_eq!(
        kinds(&out),
        ["failed", "discard", "notify-abort"],
        "{out:?}"
    );
    assert_eq!(t.failures_in_row(), 1);
}

#[test]
fn a_stop_blocks_other_triggers_and_is_answered_by_its_checkpoint() {
    let mut t = tracker(config());
    let id = t.reserve().expect("sources run");
    let out = t.on_trigger(id, SnapshotKind::Checkpoint, true, at(0));
    assert!(
        out.iter()
            .all(|a| !matches!(a, Action::Trigger { stop: false, .. }))
    );
    assert!(t.is_stopping());
    assert!(t.on_tick(at(10)).is_empty());
    ack_all(&mut t, id.0, &all(), 20);
    let out = t.on_committed(id, Ok(None), at(21));
    assert_eq!(
        kinds(&out),
        ["completed", "notify-complete", "stop-done"],
        "{out:?}"
    );
    assert!(matches!(out[1], Action::Notify { finish: true, .. }));
}

#[test]
fn the_requested_savepoint_waits_for_every_running_source() {
    let mut t = Tracker::new(
        TrackerConfig {
            requested_savepoint_dir: Some(PathBuf::from("sp")),
            ..config()
        },
        JobShape::default(),
        Arc::new(AtomicU64::new(1)),
    );
    // Before registration no source is known: nothing happens.
    assert!(t.on_savepoint_request(key(SOURCE, 0)).is_empty());
    assert!(
        t.on_register(vec![slot(SOURCE, 0, true), slot(SOURCE, 1, true)])
            .is_empty()
    );
    let out = t.on_savepoint_request(key(SOURCE, 1));
    assert_eq!(kinds(&out), ["take-savepoint"], "{out:?}");
    // Once only.
    assert!(t.on_savepoint_request(key(SOURCE, 1)).is_empty());
}

#[test]
fn no_source_left_reserves_no_id() {
    let mut t = tracker(config());
    t.on_finished(key(SOURCE, 0), at(0));
    t.on_finished(key(SOURCE, 1), at(0));
    assert_eq!(t.reserve(), None);
    assert!(t.on_tick(at(1)).is_empty());
}

#[test]
fn replacing_a_region_aborts_pending_checkpoints_without_failing() {
    let mut t = tracker(config());
    t.on_tick(at(0));
    let out = t.on_replace(vec![slot(SINK, 1, false)], at(5));
    assert_eq!(
        kinds(&out),
        ["aborted", "discard", "notify-abort"],
        "{out:?}"
    );
    assert_eq!(t.failures_in_row(), 0);
    assert_eq!(kinds(&t.on_tick(at(6)))[0], "triggered");
}

/// After a stop's checkpoint completed, its subtasks finish where they
/// are: no checkpoint may follow, neither periodic nor the final one of a
/// job whose subtasks all ended or finished, or it would record the
/// stopped subtasks finished and a restore from it would read nothing
/// more (a stop/resume loop lost the rest of its input so).
#[test]
fn nothing_is_triggered_after_a_stop_completed() {
    let mut t = tracker(config());
    // One source reached its end before the stop.
    t.on_ended(key(SOURCE, 0), at(0));
    let id = t.reserve().expect("a source runs");
    t.on_trigger(id, SnapshotKind::Checkpoint, true, at(1));
    ack_all(&mut t, id.0, &all(), 20);
    let out = t.on_committed(id, Ok(None), at(21));
    assert!(
        out.iter().all(|a| !matches!(a, Action::Trigger { .. })),
        "{out:?}"
    );
    assert!(t.is_stopping(), "a second stop is refused");
    // The stopped subtasks finish; the interval passes.
    for k in [key(SOURCE, 1), key(SINK, 0), key(SINK, 1)] {
        let out = t.on_finished(k, at(30));
        assert!(
            out.iter().all(|a| !matches!(a, Action::Trigger { .. })),
            "{out:?}"
        );
    }
    assert!(t.on_tick(at(5_000)).is_empty());
    assert_eq!(t.reserve(), None, "no savepoint either");
}
