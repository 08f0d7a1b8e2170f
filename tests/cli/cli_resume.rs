//! `--resume`: the same command line, run again after a crash, goes on from
//! the newest checkpoint in `--checkpoint-dir`, and on a directory without
//! one starts fresh; one stderr line says which. So a supervisor (systemd,
//! Kubernetes) restarts a job without a script choosing between a fresh
//! start and `--from-checkpoint`.
//!
//! The job is killed with SIGKILL (the real process) once its status line
//! reports a completed checkpoint, and started again with the same
//! arguments until it ends; the committed output must be the pipelines
//! oracle's (computed from the generator's formula, sorted).

use crate::cli_common;
use cli_common::{
    checkpointed, fails_with_one_error_line, floe_command, pipelines_oracle, run_watching, sorted,
};
use std::path::Path;

const RECORDS: u64 = 30_000;
const SEED: u64 = 3;
const KILLS: usize = 3;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn args<'a>(output: &'a Path, checkpoints: &'a Path) -> Vec<&'a str> {
    vec![
        "run",
        "pipelines",
        "--records",
        "30000",
        "--seed",
        "3",
        "--parallelism",
        "2",
        "--output",
        s(output),
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        s(checkpoints),
        "--resume",
        "--sink-rate",
        "10000",
        "--status-interval",
        "10",
    ]
}

/// Runs the job; with `kill`, sends SIGKILL once a status line reports a
/// completed checkpoint. Returns whether it exited 0, and its stderr.
fn run(args: &[&str], kill: bool) -> (bool, String) {
    let mut killed = false;
    let (status, stderr) = run_watching(&mut floe_command(args), |line, child| {
        if kill && !killed && checkpointed(line) {
            child.kill().expect("SIGKILL");
            killed = true;
        }
    });
    (status.success(), stderr)
}

#[test]
fn resume_after_kill_9_with_the_same_command_line_commits_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let (output, checkpoints) = (dir.path().join("out.txt"), dir.path().join("ck"));
    let args = args(&output, &checkpoints);
    let (ok, first) = run(&args, true);
    assert!(!ok, "the first run was killed; stderr:\n{first}");
    let fresh = format!(
        "resume: no checkpoint in {}; starting fresh",
        s(&checkpoints)
    );
    assert!(
        first.lines().any(|l| l == fresh),
        "a fresh directory starts fresh and says so; stderr:\n{first}"
    );
    let mut runs = 1;
    loop {
        let (ok, stderr) = run(&args, runs < KILLS);
        runs += 1;
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("resume: from the newest intact checkpoint")),
            "run {runs} resumes and says so; stderr:\n{stderr}"
        );
        if ok {
            break;
        }
        assert!(
            runs < KILLS + 1,
            "run {runs} was not killed yet failed:\n{stderr}"
        );
    }
    let got = sorted(&std::fs::read_to_string(&output).expect("output"));
    assert!(
        got == pipelines_oracle(RECORDS, SEED),
        "after {runs} runs: {} lines, {} expected",
        got.len(),
        pipelines_oracle(RECORDS, SEED).len()
    );
}

#[test]
fn resume_needs_a_checkpoint_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let line = fails_with_one_error_line(&[
        "run",
        "pipelines",
        "--records",
        "10",
        "--output",
        s(&out),
        "--checkpoint-interval",
        "20",
        "--resume",
    ]);
    assert!(line.contains("--resume needs --checkpoint-dir"), "{line}");
}
