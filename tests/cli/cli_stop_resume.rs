//! Stopping a transactional `floe run pipelines` job with SIGTERM again and
//! again, resuming it each time with `--from-checkpoint`, commits exactly
//! the output of an uninterrupted run: no line lost, none twice.
//!
//! The bug this guards against: the pipelines' sink subtasks append to one
//! output and each commits when its notification arrives, in any order. A
//! stop's final checkpoint is triggered at once, while a periodic one may
//! still be in progress, so one sink subtask can snapshot the final
//! checkpoint with the previous checkpoint's transaction still pending (it
//! is restored, and committed after the snapshot) while another committed its
//! own transaction of that checkpoint before its snapshot (not restored), in
//! the log after the first one. The restore cut the output at the first
//! restored transaction and so dropped the second — output of a checkpoint
//! the restored one covers, never produced again: tens of thousands of
//! lines lost. Every commit is now logged with its checkpoint, and a restore
//! drops exactly the commits of later checkpoints.
//!
//! Each run is stopped once its status line reports a number of records
//! emitted (the event): the job is then mid-way, under backpressure, with
//! checkpoints in progress. Sequences differ in that number, as chaos seeds.
//!
//! After every run the directories hold only what they must: the output,
//! its commit log and lock file (no pending file: the transactions begun
//! after the final checkpoint used to be left behind), and in the
//! checkpoint directory the store and the directories of the checkpoints
//! it retains (none of an aborted or superseded checkpoint).

use crate::cli_common;
use cli_common::{
    floe_command, pipelines_oracle, run_ok_output, run_watching, signal, sorted, status_field,
};
use std::path::Path;

const RECORDS: u64 = 1_500_000;
const SEED: u64 = 7;
const STOPS: usize = 5;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn args(output: &Path, checkpoints: &Path, resume: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "pipelines",
        "--records",
        &RECORDS.to_string(),
        "--seed",
        &SEED.to_string(),
        "--parallelism",
        "3",
        "--output",
        s(output),
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        s(checkpoints),
        "--status-interval",
        "5",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if resume {
        args.extend(["--from-checkpoint".to_string(), s(checkpoints).to_string()]);
    }
    args
}

/// Runs the job and sends SIGTERM once a status line reports at least
/// `stop_at` records. Returns the exit code (143 when stopped, 0 when the
/// job ended first) and the stderr.
fn run_and_stop(args: &[String], stop_at: u64) -> (i32, String) {
    let mut stopped = false;
    let (status, stderr) = run_watching(&mut floe_command(args), |line, child| {
        if !stopped && status_field(line, "records").is_some_and(|r| r >= stop_at) {
            signal(child, "-TERM");
            stopped = true;
        }
    });
    (status.code().unwrap_or(-1), stderr)
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("a directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// Asserts what a run left in `dir` (the output's) and `checkpoints`.
fn assert_clean(dir: &Path, checkpoints: &Path, log: &str) {
    assert_eq!(
        names(dir),
        [
            ".out.txt.floe-commits",
            ".out.txt.floe-lock",
            "ck",
            "out.txt"
        ],
        "the output's directory; stderr:\n{log}"
    );
    let (listed, _) = run_ok_output(&["checkpoints", "list", s(checkpoints)]);
    let mut retained: Vec<String> = listed
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(|id| format!("chk-{id}"))
        .collect();
    retained.push("checkpoints.redb".to_string());
    retained.sort();
    assert_eq!(
        names(checkpoints),
        retained,
        "the checkpoint directory holds the store and its retained checkpoints only"
    );
}

#[test]
fn repeated_sigterm_and_resume_commit_exactly_the_uninterrupted_output() {
    let oracle = pipelines_oracle(RECORDS, SEED);
    for stop_at in [150_000, 100_000, 200_000] {
        let dir = tempfile::tempdir().unwrap();
        let (output, checkpoints) = (dir.path().join("out.txt"), dir.path().join("ck"));
        let mut stops = 0;
        let mut log = String::new();
        for run in 0..STOPS {
            let (code, stderr) = run_and_stop(&args(&output, &checkpoints, run > 0), stop_at);
            log.push_str(&stderr);
            assert_clean(dir.path(), &checkpoints, &log);
            match code {
                143 => stops += 1,
                0 => break,
                _ => panic!("run {run} exited {code}; stderr:\n{log}"),
            }
        }
        assert!(stops > 1, "the job ended before it was stopped twice");
        let (code, stderr) = run_and_stop(&args(&output, &checkpoints, true), u64::MAX);
        log.push_str(&stderr);
        assert_eq!(code, 0, "the last run failed; stderr:\n{log}");
        assert_clean(dir.path(), &checkpoints, &log);
        let got = sorted(&std::fs::read_to_string(&output).expect("output"));
        let lost = oracle
            .iter()
            .filter(|l| got.binary_search(l).is_err())
            .count();
        assert!(
            got == oracle,
            "stopped {stops} times at {stop_at} records each: {} lines, {} expected, {lost} lost",
            got.len(),
            oracle.len()
        );
    }
}
