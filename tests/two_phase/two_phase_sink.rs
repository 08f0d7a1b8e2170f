//! The two-phase-commit sink and its transactional file sink, against oracles
//! computed from the records written (never from the sink's output):
//!
//! - `TransactionalFileSink` driven by hand: a committed transaction holds
//!   exactly its lines; a second commit appends nothing; a crash between
//!   pre-commit and commit, then `recover`, commits once; a commit that crashed
//!   after its `begin` log entry is cut and redone once; a commit that
//!   fails part way (an injected write fault, or a real full tmpfs with
//!   `FLOE_TEST_TMPFS=1`) leaves the output as it was; recovery deletes
//!   leftover pending files of the output and nothing else; abort drops the
//!   lines; recovery drops output committed after the restored checkpoint;
//!   a non-regular path is refused;
//! - `TwoPhaseCommitSinkOp` driven through its operator hooks: nothing is
//!   visible before the checkpoint completes, an aborted checkpoint's
//!   transactions commit with the next one, the union list state restores on
//!   subtask 0 only;
//! - whole jobs: without checkpoints all lines appear at the end; with
//!   checkpoints, a job canceled mid-run and restored (at another parallelism,
//!   and from an older checkpoint) writes every record exactly once.

use crate::gated;
use floe::checkpoint::CheckpointConfig;
use floe::checkpoint::CheckpointId;
use floe::connectors::transactional_file::{FileTransaction, TransactionalFileSink};
use floe::connectors::two_phase::{AFTER_END, TwoPhaseCommitSink, TwoPhaseCommitSinkOp};
use floe::operators::sink::SinkContext;
use floe::operators::{Operator, RestoredState, SnapshotContext};
use floe::{Record, StreamExecutionEnvironment};
use floe_actors::ids::SubtaskIndex;
use futures::executor::block_on;
use gated::{Gate, gated_generator, wait_until};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------- helpers

type Sink = TransactionalFileSink;

fn begin(sink: &mut Sink) -> FileTransaction {
    block_on(TwoPhaseCommitSink::<String>::begin(sink)).expect("begin")
}

fn open(sink: &mut Sink, ctx: &SinkContext) {
    block_on(TwoPhaseCommitSink::<String>::open(sink, ctx)).expect("open");
}

fn write(sink: &mut Sink, txn: &mut FileTransaction, lines: &[String]) {
    let batch = lines.iter().cloned().map(Record::new).collect();
    block_on(sink.write(txn, batch)).expect("write");
}

fn pre_commit(sink: &mut Sink, txn: &mut FileTransaction) {
    block_on(TwoPhaseCommitSink::<String>::pre_commit(sink, txn, None)).expect("pre-commit");
}

/// Commits `txn` as committed at the end of the input, without a checkpoint.
fn commit(sink: &mut Sink, txn: FileTransaction) -> floe::Result<()> {
    block_on(TwoPhaseCommitSink::<String>::commit(sink, txn, AFTER_END))
}

/// Recovers `txns` as pending at a checkpoint after every commit.
fn recover(sink: &mut Sink, txns: Vec<FileTransaction>) -> floe::Result<()> {
    let pending = txns.into_iter().map(|t| (AFTER_END, t)).collect();
    sink.recover_to(AFTER_END, pending)
}

/// Commits `txn` as pre-committed for checkpoint `n`.
fn commit_for(sink: &mut Sink, n: u64, txn: FileTransaction) -> floe::Result<()> {
    block_on(TwoPhaseCommitSink::<String>::commit(
        sink,
        txn,
        CheckpointId(n),
    ))
}

/// Recovers checkpoint `n`, `txns` pending at it.
fn recover_to(sink: &mut Sink, n: u64, txns: Vec<FileTransaction>) {
    let pending = txns.into_iter().map(|t| (CheckpointId(n), t)).collect();
    sink.recover_to(CheckpointId(n), pending).expect("recovers");
}

fn ctx(subtask: u32, parallelism: usize) -> SinkContext {
    SinkContext {
        subtask: SubtaskIndex(subtask),
        parallelism,
    }
}

fn lines(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => s.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Names of the sink's pending files in `dir`.
fn pending_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".floe-pending-"))
        .collect();
    v.sort();
    v
}

fn concat(parts: &[&[String]]) -> Vec<String> {
    parts.iter().flat_map(|p| p.iter().cloned()).collect()
}

// ---------------------------------------------------------------- the file sink

#[test]
fn committed_transaction_holds_exactly_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let mut sink = Sink::new(&path).unwrap();
    open(&mut sink, &ctx(0, 1));
    let (a, b) = (lines("a", 100), lines("b", 7));
    let mut t1 = begin(&mut sink);
    write(&mut sink, &mut t1, &a[..50]);
    write(&mut sink, &mut t1, &a[50..]);
    let mut t2 = begin(&mut sink);
    write(&mut sink, &mut t2, &b);
    pre_commit(&mut sink, &mut t1);
    pre_commit(&mut sink, &mut t2);
    assert!(
        read_lines(&path).is_empty(),
        "nothing visible before commit"
    );
    commit(&mut sink, t1.clone()).unwrap();
    assert_eq!(read_lines(&path), a);
    commit(&mut sink, t2.clone()).unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b]));
    // Idempotent: committing again appends nothing.
    commit(&mut sink, t1).unwrap();
    commit(&mut sink, t2).unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b]));
    assert!(pending_files(dir.path()).is_empty());
}

#[test]
fn crash_between_pre_commit_and_commit_commits_once_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let a = lines("a", 20);
    let txn = {
        let mut sink = Sink::new(&path).unwrap();
        open(&mut sink, &ctx(0, 1));
        let mut txn = begin(&mut sink);
        write(&mut sink, &mut txn, &a);
        pre_commit(&mut sink, &mut txn);
        txn
        // Dropped without commit: the crash.
    };
    assert!(read_lines(&path).is_empty());
    let mut sink = Sink::new(&path).unwrap();
    recover(&mut sink, vec![txn.clone()]).unwrap();
    assert_eq!(read_lines(&path), a);
    // A second recovery of the same checkpoint (another crash) changes nothing.
    let mut sink = Sink::new(&path).unwrap();
    recover(&mut sink, vec![txn]).unwrap();
    assert_eq!(read_lines(&path), a);
    assert!(pending_files(dir.path()).is_empty());
}

#[test]
fn crash_inside_commit_is_cut_and_redone_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let (a, b) = (lines("a", 10), lines("b", 10));
    let mut sink = Sink::new(&path).unwrap();
    open(&mut sink, &ctx(0, 1));
    let mut t1 = begin(&mut sink);
    write(&mut sink, &mut t1, &a);
    pre_commit(&mut sink, &mut t1);
    commit(&mut sink, t1).unwrap();
    let mut t2 = begin(&mut sink);
    write(&mut sink, &mut t2, &b);
    pre_commit(&mut sink, &mut t2);
    drop(sink);
    // Simulate a crash after `begin` was logged and part of the data appended.
    let len = std::fs::metadata(&path).unwrap().len();
    let log = dir.path().join(".out.txt.floe-commits");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(&format!("begin {} {len}\n", t2.name));
    std::fs::write(&log, text).unwrap();
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut out, b"b-0\nb-1\nb-").unwrap();
    drop(out);

    let mut sink = Sink::new(&path).unwrap();
    recover(&mut sink, vec![t2.clone()]).unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b]));
    commit(&mut sink, t2).unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b]));
}

/// The output's text after committing `parts` in order: the oracle of what
/// a reader may see.
fn committed_text(parts: &[&[String]]) -> String {
    parts
        .iter()
        .flat_map(|p| p.iter())
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A commit that failed halfway through its append (a full disk) used to
/// leave the partial append in the output until a later restore. The output
/// now holds exactly what was committed before, and the transaction, still
/// pending, commits once on a retry.
#[test]
fn failed_commit_leaves_only_the_committed_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let (a, b) = (lines("a", 100), lines("b", 3000));
    let mut sink = Sink::new(&path).unwrap();
    open(&mut sink, &ctx(0, 1));
    let mut t1 = begin(&mut sink);
    write(&mut sink, &mut t1, &a);
    pre_commit(&mut sink, &mut t1);
    commit(&mut sink, t1).unwrap();
    let mut t2 = begin(&mut sink);
    write(&mut sink, &mut t2, &b);
    pre_commit(&mut sink, &mut t2);

    // The disk fills up in the middle of t2's append.
    let b_bytes = committed_text(&[&b]).len() as u64;
    sink.fail_output_after(b_bytes / 2);
    let err = commit(&mut sink, t2.clone()).expect_err("the append fails");
    assert!(err.to_string().contains("cannot append"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        committed_text(&[&a]),
        "after a failed commit the output holds the committed transactions only"
    );

    // Space is back: the retry appends t2 once.
    sink.fail_output_after(u64::MAX);
    commit(&mut sink, t2.clone()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        committed_text(&[&a, &b])
    );
    // And a restore that commits it again changes nothing.
    drop(sink);
    let mut sink = Sink::new(&path).unwrap();
    recover(&mut sink, vec![t2]).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        committed_text(&[&a, &b])
    );
}

/// Unmounts a tmpfs when the test ends, passing or not: lazily, because
/// this process keeps the output's commit log open.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// [`failed_commit_leaves_only_the_committed_output`] on a real full disk: a
/// 1 MiB tmpfs filled up so that the append fails part way with ENOSPC.
/// Mounting needs root, so this runs only with `FLOE_TEST_TMPFS=1`:
/// `FLOE_TEST_TMPFS=1 cargo test --test two_phase two_phase_sink::full_disk`.
#[test]
fn commit_on_a_full_disk_leaves_only_the_committed_output() {
    if std::env::var_os("FLOE_TEST_TMPFS").is_none() {
        eprintln!("skipped: set FLOE_TEST_TMPFS=1 (as root) to run it on a tmpfs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1M", "tmpfs"])
        .arg(dir.path())
        .status()
        .expect("mount runs");
    assert!(mounted.success(), "mount -t tmpfs failed: {mounted:?}");
    let _unmount = Unmount(dir.path().to_path_buf());
    let path = dir.path().join("out.txt");
    let (a, b) = (lines("a", 100), lines("b", 20_000));
    let mut sink = Sink::new(&path).unwrap();
    open(&mut sink, &ctx(0, 1));
    let mut t1 = begin(&mut sink);
    write(&mut sink, &mut t1, &a);
    pre_commit(&mut sink, &mut t1);
    commit(&mut sink, t1).unwrap();
    let mut t2 = begin(&mut sink);
    write(&mut sink, &mut t2, &b);
    pre_commit(&mut sink, &mut t2);

    // Fill the disk, then free 64 KiB: less than t2's append needs.
    let filler = dir.path().join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 4096];
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    let full = f.metadata().unwrap().len();
    f.set_len(full.saturating_sub(64 * 1024)).unwrap();
    drop(f);
    assert!(committed_text(&[&b]).len() > 64 * 1024);

    let err = commit(&mut sink, t2.clone()).expect_err("the disk is full");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        committed_text(&[&a]),
        "after a failed commit ({err}) the output holds the committed transactions only"
    );
    std::fs::remove_file(&filler).unwrap();
    commit(&mut sink, t2).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        committed_text(&[&a, &b])
    );
}

#[test]
fn recovery_deletes_leftovers_of_the_output_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let (a, late) = (lines("a", 5), lines("late", 5));
    let unrelated = [
        dir.path().join("notes.txt"),
        dir.path().join(".other.txt.floe-pending-0-0-1x1"),
        dir.path().join(".out.txt.floe-pending-not-a-txn"),
    ];
    for f in &unrelated {
        std::fs::write(f, "keep me\n").unwrap();
    }
    let (kept, leftover) = {
        let mut sink = Sink::new(&path).unwrap();
        open(&mut sink, &ctx(0, 1));
        let mut kept = begin(&mut sink);
        write(&mut sink, &mut kept, &a);
        pre_commit(&mut sink, &mut kept);
        // Begun after the checkpoint, never pre-committed.
        let mut leftover = begin(&mut sink);
        write(&mut sink, &mut leftover, &late);
        (kept, leftover)
    };
    let mut sink = Sink::new(&path).unwrap();
    // Dropped, the sink removed its open transaction's pending file; a
    // process that died leaves it.
    assert!(!sink.pending_path(&leftover).exists());
    std::fs::write(sink.pending_path(&leftover), "late\n").unwrap();
    recover(&mut sink, vec![kept]).unwrap();
    assert_eq!(read_lines(&path), a);
    assert!(!sink.pending_path(&leftover).exists());
    for f in &unrelated {
        assert_eq!(std::fs::read_to_string(f).unwrap(), "keep me\n", "{f:?}");
    }
}

#[test]
fn abort_removes_the_pending_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let mut sink = Sink::new(&path).unwrap();
    open(&mut sink, &ctx(0, 1));
    let (a, b) = (lines("a", 3), lines("b", 3));
    let mut t1 = begin(&mut sink);
    write(&mut sink, &mut t1, &a);
    pre_commit(&mut sink, &mut t1);
    let mut t2 = begin(&mut sink);
    write(&mut sink, &mut t2, &b);
    pre_commit(&mut sink, &mut t2);
    block_on(TwoPhaseCommitSink::<String>::abort(&mut sink, t2.clone())).unwrap();
    assert!(!sink.pending_path(&t2).exists());
    commit(&mut sink, t1).unwrap();
    assert_eq!(read_lines(&path), a);
    // Its records are gone: committing it is an error naming the file.
    let err = commit(&mut sink, t2.clone()).unwrap_err().to_string();
    assert!(err.contains(&t2.name), "{err}");
    assert_eq!(read_lines(&path), a);
}

#[test]
fn recovery_drops_output_committed_after_the_checkpoint() {
    // Two subtasks; checkpoint 2 had x0 (subtask 0) and y0 (subtask 1)
    // pending. After 2, subtask 0 committed x0 and then x1 (of checkpoint
    // 3) before subtask 1 committed y0: restoring 2 must keep earlier
    // output, x0 and y0, and drop x1.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let template = Sink::new(&path).unwrap();
    let (mut s0, mut s1) = (template.clone(), template.clone());
    open(&mut s0, &ctx(0, 2));
    open(&mut s1, &ctx(1, 2));
    let (early, x0, y0, x1) = (
        lines("e", 4),
        lines("x0", 4),
        lines("y0", 4),
        lines("x1", 4),
    );
    let mut e = begin(&mut s1);
    write(&mut s1, &mut e, &early);
    pre_commit(&mut s1, &mut e);
    commit_for(&mut s1, 1, e).unwrap();
    let mut tx0 = begin(&mut s0);
    write(&mut s0, &mut tx0, &x0);
    pre_commit(&mut s0, &mut tx0);
    let mut ty0 = begin(&mut s1);
    write(&mut s1, &mut ty0, &y0);
    pre_commit(&mut s1, &mut ty0);
    let mut tx1 = begin(&mut s0);
    write(&mut s0, &mut tx1, &x1);
    pre_commit(&mut s0, &mut tx1);
    commit_for(&mut s0, 2, tx0.clone()).unwrap();
    commit_for(&mut s0, 3, tx1).unwrap();
    commit_for(&mut s1, 2, ty0.clone()).unwrap();
    assert_eq!(read_lines(&path), concat(&[&early, &x0, &x1, &y0]));
    drop((s0, s1, template));

    let mut sink = Sink::new(&path).unwrap();
    recover_to(&mut sink, 2, vec![tx0.clone(), ty0.clone()]);
    assert_eq!(
        sorted(read_lines(&path)),
        sorted(concat(&[&early, &x0, &y0]))
    );
    // Idempotent, also across another recovery.
    let mut sink = Sink::new(&path).unwrap();
    recover_to(&mut sink, 2, vec![tx0, ty0]);
    assert_eq!(
        sorted(read_lines(&path)),
        sorted(concat(&[&early, &x0, &y0]))
    );
    assert!(pending_files(dir.path()).is_empty());
    // A restored run keeps appending to the same output.
    let mut tz = begin(&mut sink);
    let z = lines("z", 2);
    write(&mut sink, &mut tz, &z);
    pre_commit(&mut sink, &mut tz);
    commit(&mut sink, tz).unwrap();
    assert_eq!(
        sorted(read_lines(&path)),
        sorted(concat(&[&early, &x0, &y0, &z]))
    );
}

#[test]
fn fresh_start_resets_the_output_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    std::fs::write(&path, "old\n").unwrap();
    let stale = dir.path().join(".out.txt.floe-pending-0-3-99x7");
    std::fs::write(&stale, "stale\n").unwrap();
    let template = Sink::new(&path).unwrap();
    let (mut s0, mut s1) = (template.clone(), template.clone());
    open(&mut s1, &ctx(1, 2));
    assert!(read_lines(&path).is_empty());
    assert!(!stale.exists());
    let a = lines("a", 3);
    let mut t = begin(&mut s1);
    write(&mut s1, &mut t, &a);
    pre_commit(&mut s1, &mut t);
    commit(&mut s1, t).unwrap();
    // The second subtask to open does not reset again.
    open(&mut s0, &ctx(0, 2));
    assert_eq!(read_lines(&path), a);
}

#[test]
fn non_regular_paths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for p in [PathBuf::from("-"), dir.path().to_path_buf()] {
        let err = Sink::new(&p).unwrap_err();
        assert!(
            matches!(&err, floe::Error::Config(m) if m.contains("not a regular file")),
            "{p:?}: {err}"
        );
    }
    if Path::new("/dev/null").exists() {
        assert!(Sink::new("/dev/null").is_err());
    }
    assert!(Sink::new(dir.path().join("new.txt")).is_ok());
}

// ---------------------------------------------------------------- the operator

fn snapshot(checkpoint: u64) -> SnapshotContext {
    SnapshotContext {
        checkpoint: CheckpointId(checkpoint),
        savepoint: false,
        max_parallelism: 128,
        key_groups: 0..128,
    }
}

/// Feeds one batch through the operator (`Output` is crate-private; the
/// operator emits nothing, so `write_batch` is the same hook without it).
fn feed(op: &mut TwoPhaseCommitSinkOp<Sink, String>, lines: &[String]) {
    let batch: Vec<Record<String>> = lines.iter().cloned().map(Record::new).collect();
    op.write_batch(batch).expect("process");
}

#[test]
fn operator_commits_on_checkpoint_completion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let mut op = TwoPhaseCommitSinkOp::new(Sink::new(&path).unwrap(), ctx(0, 1));
    let (a, b, c) = (lines("a", 5), lines("b", 5), lines("c", 5));
    feed(&mut op, &a);
    let s1 = op.snapshot_state(&snapshot(1)).unwrap();
    assert_eq!(s1.union_list.len(), 1);
    feed(&mut op, &b);
    assert!(read_lines(&path).is_empty(), "nothing before completion");
    let s2 = op.snapshot_state(&snapshot(2)).unwrap();
    assert_eq!(
        s2.union_list.len(),
        2,
        "checkpoint 1's txn is still pending"
    );
    op.notify_checkpoint_aborted(CheckpointId(1)).unwrap();
    assert!(read_lines(&path).is_empty());
    feed(&mut op, &c);
    // Checkpoint 2 completing commits checkpoint 1's aborted-then-kept txn too.
    op.notify_checkpoint_complete(CheckpointId(2)).unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b]));
    op.finish().unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b, &c]));
    assert!(op.pending().is_empty());
}

#[test]
fn operator_restores_on_subtask_zero_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let template = Sink::new(&path).unwrap();
    let (a, b) = (lines("a", 5), lines("b", 5));
    let state = {
        let mut op0 = TwoPhaseCommitSinkOp::new(template.clone(), ctx(0, 2));
        let mut op1 = TwoPhaseCommitSinkOp::new(template.clone(), ctx(1, 2));
        feed(&mut op0, &a);
        feed(&mut op1, &b);
        let mut union = op0.snapshot_state(&snapshot(1)).unwrap().union_list;
        union.extend(op1.snapshot_state(&snapshot(1)).unwrap().union_list);
        // Lines written after the checkpoint, then the job fails.
        feed(&mut op0, &lines("late", 3));
        RestoredState {
            union_list: union,
            ..Default::default()
        }
    };
    assert!(read_lines(&path).is_empty());
    // Restored at parallelism 3: subtask 1 and 2 must not commit.
    let template = Sink::new(&path).unwrap();
    for i in [1, 2] {
        let mut op: TwoPhaseCommitSinkOp<Sink, String> =
            TwoPhaseCommitSinkOp::new(template.clone(), ctx(i, 3));
        op.restore_state(state.clone()).unwrap();
        assert!(read_lines(&path).is_empty(), "subtask {i} committed");
    }
    let mut op0 = TwoPhaseCommitSinkOp::new(template.clone(), ctx(0, 3));
    op0.restore_state(state.clone()).unwrap();
    assert_eq!(sorted(read_lines(&path)), sorted(concat(&[&a, &b])));
    assert!(pending_files(dir.path()).is_empty(), "leftover deleted");
    // Opening after a restore does not reset the output.
    let c = lines("c", 2);
    feed(&mut op0, &c);
    op0.finish().unwrap();
    assert_eq!(sorted(read_lines(&path)), sorted(concat(&[&a, &b, &c])));
}

/// A restart from the beginning (no checkpoint) after subtask 0 finished
/// and committed: the first new subtask to get the restart resets the
/// output once, so the replay's output is not added to the failed
/// attempt's; a later restart resets again.
#[test]
fn a_restart_from_the_beginning_resets_the_output_once_per_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let template = Sink::new(&path).unwrap();
    let (a, b) = (lines("a", 4), lines("b", 3));
    let scratch = |n| RestoredState {
        from_scratch: Some(n),
        ..Default::default()
    };
    for restart in [1, 2] {
        let mut op0 = TwoPhaseCommitSinkOp::new(template.clone(), ctx(0, 2));
        let mut op1 = TwoPhaseCommitSinkOp::new(template.clone(), ctx(1, 2));
        // Both subtasks get the restart before opening, as when deployed.
        op0.restore_state(scratch(restart)).unwrap();
        assert!(read_lines(&path).is_empty(), "restart {restart}: reset");
        feed(&mut op0, &a);
        op0.finish().unwrap();
        op1.restore_state(scratch(restart)).unwrap();
        assert_eq!(read_lines(&path), a, "restart {restart}: reset only once");
        feed(&mut op1, &b);
        op1.finish().unwrap();
        assert_eq!(sorted(read_lines(&path)), sorted(concat(&[&a, &b])));
    }
}

// ---------------------------------------------------------------- whole jobs

#[test]
fn job_without_checkpoints_writes_everything_at_the_end() {
    for parallelism in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "from an earlier run\n").unwrap();
        let input: Vec<u64> = (0..5_000).map(|i| floe::text::mix64(i) % 1000).collect();
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(parallelism).set_batch_size(64);
        env.from_collection(input.clone())
            .rebalance()
            .sink_exactly_once(
                "TransactionalFileSink",
                TransactionalFileSink::new(&path).unwrap(),
            );
        env.execute().expect("job finishes");
        let expected = sorted(input.iter().map(u64::to_string).collect());
        assert_eq!(
            sorted(read_lines(&path)),
            expected,
            "parallelism {parallelism}"
        );
        assert!(pending_files(dir.path()).is_empty());
    }
}

const RECORDS: u64 = 40_000;

fn record(i: u64) -> String {
    format!("r{i}-{}", floe::text::mix64(i) % 97)
}

/// Generator → rebalance → transactional file sink, checkpointing every 30 ms;
/// with a gate, the generator holds at each of `stops` (see `gated`).
fn checkpointed_job(
    parallelism: usize,
    checkpoints: &Path,
    out: &Path,
    gate: Option<(&Arc<Gate>, &[f64])>,
    restore: Option<&Path>,
) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism).set_batch_size(64);
    let mut config = CheckpointConfig::every(Duration::from_millis(30)).with_dir(checkpoints);
    config.retained = 10;
    env.set_checkpoint_config(config);
    if let Some(from) = restore {
        env.restore_from(from);
    }
    let records = match gate {
        Some((gate, stops)) => gated_generator(&env, gate, RECORDS, stops, record),
        None => env.from_generator(RECORDS, record),
    }
    .uid("records");
    records
        .rebalance()
        .sink_exactly_once(
            "TransactionalFileSink",
            TransactionalFileSink::new(out).unwrap(),
        )
        .uid("sink");
    env
}

/// Complete lines of the committed output (a commit may be appending).
fn committed_lines(out: &Path) -> u64 {
    match std::fs::read(out) {
        Ok(bytes) => bytes.iter().filter(|&&b| b == b'\n').count() as u64,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("cannot read {}: {e}", out.display()),
    }
}

/// Once every source subtask holds at the gate's current stop, waits until
/// the records emitted before it are committed (checkpoints go on while the
/// sources hold); returns how many.
fn commit_up_to_the_stop(gate: &Gate, parallelism: usize, out: &Path) -> u64 {
    gate.wait_held(parallelism);
    let emitted = gate.emitted();
    wait_until("the records before the stop committed", || {
        committed_lines(out) == emitted
    });
    emitted
}

fn expected_records() -> Vec<String> {
    sorted((0..RECORDS).map(record).collect())
}

#[test]
fn job_restored_after_cancel_writes_every_record_once() {
    for (before, after) in [(2, 2), (2, 3), (3, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let (checkpoints, out) = (dir.path().join("chk"), dir.path().join("out.txt"));
        // Canceled while its sources hold at half of their input, once
        // that half is committed.
        let gate = Gate::new();
        let env = checkpointed_job(before, &checkpoints, &out, Some((&gate, &[0.5])), None);
        let handle = env.execute_async().expect("job starts");
        let emitted = commit_up_to_the_stop(&gate, before, &out);
        handle.cancel();
        let _ = futures::executor::block_on(handle.wait());
        assert!(
            emitted > 0 && emitted < RECORDS,
            "{emitted} before the stop"
        );
        let committed = read_lines(&out).len() as u64;
        assert_eq!(committed, emitted, "the canceled job's committed output");
        let env = checkpointed_job(after, &checkpoints, &out, None, Some(&checkpoints));
        let result = env.execute().expect("restored job finishes");
        // It resumed from the checkpoint rather than starting over.
        let replayed = result.operator("TransactionalFileSink").unwrap().records_in;
        assert_eq!(
            replayed,
            RECORDS - emitted,
            "records the restored job wrote"
        );
        assert_eq!(
            sorted(read_lines(&out)),
            expected_records(),
            "parallelism {before} -> {after}"
        );
    }
}

/// Copies the directory `from` (one checkpoint's files) to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn job_restored_from_an_older_checkpoint_drops_later_output() {
    let dir = tempfile::tempdir().unwrap();
    let (checkpoints, out) = (dir.path().join("chk"), dir.path().join("out.txt"));
    let gate = Gate::new();
    let env = checkpointed_job(2, &checkpoints, &out, Some((&gate, &[0.25, 0.5])), None);
    let handle = env.execute_async().expect("job starts");
    // The older checkpoint: the first quarter committed. Kept aside, as
    // later checkpoints may retire it from the directory.
    let first = commit_up_to_the_stop(&gate, 2, &out);
    let id = handle
        .checkpoint_stats()
        .last_completed
        .expect("a checkpoint committed the output");
    let older = dir.path().join("older").join(format!("chk-{}", id.0));
    copy_dir(&checkpoints.join(format!("chk-{}", id.0)), &older);
    // Output committed after it: the second quarter.
    gate.pass();
    let second = commit_up_to_the_stop(&gate, 2, &out);
    assert!(first > 0 && second > first, "{first} then {second} records");
    handle.cancel();
    let _ = futures::executor::block_on(handle.wait());
    let env = checkpointed_job(2, &dir.path().join("chk2"), &out, None, Some(&older));
    let result = env.execute().expect("restored job finishes");
    let replayed = result.operator("TransactionalFileSink").unwrap().records_in;
    assert_eq!(replayed, RECORDS - first, "records the restored job wrote");
    assert_eq!(sorted(read_lines(&out)), expected_records());
    // Later checkpoints had committed output, which recovery cut.
    let log = std::fs::read_to_string(dir.path().join(".out.txt.floe-commits")).unwrap();
    assert!(log.lines().any(|l| l.starts_with("truncate ")), "{log}");
}

#[test]
fn torn_log_line_is_ignored_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let (a, b) = (lines("a", 4), lines("b", 4));
    let mut sink = Sink::new(&path).unwrap();
    open(&mut sink, &ctx(0, 1));
    let mut t1 = begin(&mut sink);
    write(&mut sink, &mut t1, &a);
    pre_commit(&mut sink, &mut t1);
    commit(&mut sink, t1.clone()).unwrap();
    let mut t2 = begin(&mut sink);
    write(&mut sink, &mut t2, &b);
    pre_commit(&mut sink, &mut t2);
    drop(sink);
    // A crash while writing t2's `begin` line: no newline, no data.
    let log = dir.path().join(".out.txt.floe-commits");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("begin 0-1");
    std::fs::write(&log, text).unwrap();
    let mut sink = Sink::new(&path).unwrap();
    recover(&mut sink, vec![t1, t2]).unwrap();
    assert_eq!(read_lines(&path), concat(&[&a, &b]));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.ends_with('\n') && !text.contains("begin 0-1begin"),
        "{text}"
    );
}
