//! SIGTERM and SIGINT stop `floe run` cleanly, with the real binary.
//!
//! A throttled word count (`--count-rate`) checkpoints; once its status line
//! reports a completed checkpoint (the job made progress), the test signals
//! the process. It must exit 143 (SIGTERM) or 130 (SIGINT) after printing
//! its summary, having stopped early (fewer records than the input), with
//! a final checkpoint — or, with `--savepoint-dir`, a savepoint — to resume
//! from. A run resumed with `--from-checkpoint` must then commit exactly the
//! counts a HashMap computes over the whole generated input.

use crate::cli_common;
use cli_common::{checkpointed, floe_command, run_ok, run_watching, summary_field};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const RECORDS: u64 = 60_000;
const VOCABULARY: usize = 300;
const SEED: u64 = 5;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// The oracle: the generated words counted in a HashMap.
fn oracle() -> HashMap<String, u64> {
    let generator = floe::text::WordGenerator::new(VOCABULARY, SEED);
    let mut counts = HashMap::new();
    for i in 0..RECORDS {
        *counts.entry(generator.word(i)).or_insert(0) += 1;
    }
    counts
}

fn read_counts(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut counts = HashMap::new();
    for line in text.lines() {
        let (word, count) = line.rsplit_once(',').expect("word,count line");
        let count: u64 = count.parse().expect("a count");
        assert!(
            counts.insert(word.to_string(), count).is_none(),
            "{word} written twice"
        );
    }
    counts
}

fn wordcount_args<'a>(output: &'a Path, checkpoints: &'a Path, extra: &[&'a str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "wordcount",
        "--records",
        &RECORDS.to_string(),
        "--vocabulary",
        &VOCABULARY.to_string(),
        "--seed",
        &SEED.to_string(),
        "--parallelism",
        "2",
        "--batch-size",
        "64",
        "--output",
        s(output),
        "--checkpoint-interval",
        "30",
        "--checkpoint-dir",
        s(checkpoints),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Runs a throttled word count, signals it once a checkpoint completed,
/// checks the exit and the summary; returns the stderr.
fn stop_with(signal: &str, code: i32, output: &Path, checkpoints: &Path, extra: &[&str]) -> String {
    let args = wordcount_args(
        output,
        checkpoints,
        &[&["--count-rate", "10000", "--status-interval", "20"], extra].concat(),
    );
    stop_run(signal, code, args, None)
}

/// [`stop_with`] on any arguments, with `TMPDIR` set to `tmp` if given.
fn stop_run(signal: &str, code: i32, args: Vec<String>, tmp: Option<&Path>) -> String {
    let mut command = floe_command(&args);
    if let Some(tmp) = tmp {
        command.env("TMPDIR", tmp);
    }
    // The event: a status line reports a completed checkpoint. The
    // throttled count keeps the job running for seconds after it.
    let mut signalled = false;
    let (status, stderr) = run_watching(&mut command, |line, child| {
        if !signalled && checkpointed(line) {
            cli_common::signal(child, signal);
            signalled = true;
        }
    });
    assert!(
        signalled,
        "no status line with a completed checkpoint; stderr:\n{stderr}"
    );
    assert_eq!(
        status.code(),
        Some(code),
        "exit code after {signal}; stderr:\n{stderr}"
    );
    let records = summary_field(&stderr, "records");
    assert!(
        records < RECORDS,
        "the job stopped before its end ({records} of {RECORDS} records); stderr:\n{stderr}"
    );
    stderr
}

/// Resumes from `from` and checks the committed output against the oracle.
fn resume_and_check(output: &Path, checkpoints: &Path, from: &Path) {
    let stderr = run_ok(
        &wordcount_args(output, checkpoints, &["--from-checkpoint", s(from)])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let got = read_counts(output);
    assert!(
        got == oracle(),
        "resumed output differs from the oracle: {} words, {} expected; stderr:\n{stderr}",
        got.len(),
        oracle().len()
    );
}

#[test]
fn sigterm_stops_with_a_final_checkpoint_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (out, ck) = (dir.path().join("counts.txt"), dir.path().join("ck"));
    stop_with("-TERM", 143, &out, &ck, &[]);
    resume_and_check(&out, &dir.path().join("ck2"), &ck);
}

#[test]
fn sigint_stops_with_a_savepoint_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (out, ck, sp) = (
        dir.path().join("counts.txt"),
        dir.path().join("ck"),
        dir.path().join("sp"),
    );
    let stderr = stop_with("-INT", 130, &out, &ck, &["--savepoint-dir", s(&sp)]);
    let savepoint: PathBuf = stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no savepoint= line; stderr:\n{stderr}"));
    assert!(savepoint.starts_with(&sp) && savepoint.is_dir());
    resume_and_check(&out, &dir.path().join("ck2"), &savepoint);
}

#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (out, ck) = (dir.path().join("counts.txt"), dir.path().join("ck"));
    // So slow a sink that the final checkpoint's barrier waits for seconds
    // behind the queued batches: the second signal comes before it passes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(wordcount_args(
            &out,
            &ck,
            &["--count-rate", "200", "--status-interval", "20"],
        ))
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("floe starts");
    let kill = |pid: u32| {
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    };
    let (events, seen) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.expect("stderr line");
            if line.starts_with("status ") {
                let _ = events.send("running");
            } else if line.starts_with("stopping:") {
                let _ = events.send("stopping");
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Running (the handlers are installed before the first status line).
    while seen.recv().expect("a status line") != "running" {}
    kill(child.id());
    while seen.recv().expect("the stopping line") != "stopping" {}
    kill(child.id());
    let status = child.wait().expect("floe exits");
    let stderr = reader.join().expect("stderr reader");
    assert_eq!(status.code(), Some(143), "stderr:\n{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("records=")),
        "aborted before the final checkpoint completed, without a summary; stderr:\n{stderr}"
    );
}

/// Without `--checkpoint-dir` the checkpoints are temporary, removed when
/// the job ends: the final checkpoint of a stop used to go there and be
/// removed with it, so there was nothing to resume from. The stop now takes
/// a savepoint into `$TMPDIR/floe-savepoints`, kept and printed as
/// `savepoint=PATH`, and resuming from it commits the oracle's counts.
#[test]
fn sigterm_without_a_checkpoint_directory_keeps_a_savepoint_to_resume_from() {
    let dir = tempfile::tempdir().unwrap();
    let (out, tmp) = (dir.path().join("counts.txt"), dir.path().join("tmp"));
    std::fs::create_dir(&tmp).unwrap();
    let mut args = wordcount_args(&out, &dir.path().join("unused"), &[]);
    let at = args.iter().position(|a| a == "--checkpoint-dir").unwrap();
    args.drain(at..at + 2);
    args.extend(["--count-rate", "10000", "--status-interval", "20"].map(String::from));
    let stderr = stop_run("-TERM", 143, args, Some(&tmp));
    let savepoint: PathBuf = stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no savepoint= line; stderr:\n{stderr}"));
    assert!(
        savepoint.starts_with(tmp.join("floe-savepoints")) && savepoint.is_dir(),
        "{}",
        savepoint.display()
    );
    resume_and_check(&out, &dir.path().join("ck2"), &savepoint);
}
