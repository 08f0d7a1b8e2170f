//! Checkpoints and savepoints on a real S3 server (s3s-fs, started by
//! `scripts/services.sh start s3`), through the `floe` binary:
//!
//! - every job of the CLI (wordcount, window, pipelines) checkpointing to
//!   `s3://BUCKET/PREFIX` is killed with SIGKILL once a checkpoint
//!   completed, and the same command line with `--resume` ends it; the
//!   output equals an oracle computed here (a HashMap, a sort);
//! - a savepoint to S3 is restored at another parallelism;
//! - a checkpoint whose metadata upload was cut off (a truncated
//!   `_metadata`) is ignored on restore: the newest complete one is
//!   restored and a line says which was skipped;
//! - retention leaves only the retained checkpoints' objects (the bucket
//!   listed), and an incremental (redb) checkpoint's reference to an
//!   earlier checkpoint's object keeps that object.
//!
//! Each test uses its own prefix, so they run in parallel; none waits on
//! the clock: each waits for its event (a status line counting a completed
//! checkpoint, the end of the process).

use crate::cli_common;
use crate::s3_common;

use cli_common::{
    WindowInput, checkpointed, pipelines_oracle, run_watching, sorted, summary_field,
};
use s3_common::{S3, floe_s3, fresh_prefix, listed_ids, run_s3_ok, s3};
use std::collections::HashMap;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Runs `args` (which hold `--resume`) against `s3`, killed with SIGKILL
/// at the first status line counting a completed checkpoint, then again
/// until it ends. Returns the stderr of both runs.
fn kill_9_and_resume(s3: &S3, args: &[&str]) -> (String, String) {
    let mut killed = false;
    let (status, first) = run_watching(&mut floe_s3(s3, args), |line, child| {
        if !killed && checkpointed(line) {
            child.kill().expect("SIGKILL");
            killed = true;
        }
    });
    assert!(
        killed && !status.success(),
        "the first run is killed after its first checkpoint; stderr:\n{first}"
    );
    let (status, second) = run_watching(&mut floe_s3(s3, args), |_, _| {});
    assert!(
        status.success(),
        "the resumed run ends; first stderr:\n{first}\nsecond stderr:\n{second}"
    );
    assert!(
        second
            .lines()
            .any(|l| l.starts_with("resume: from the newest intact checkpoint in s3://")),
        "the second run resumes from S3 and says so; stderr:\n{second}"
    );
    (first, second)
}

// ---------------------------------------------------------------- wordcount

const WORDS: u64 = 60_000;

/// The generated words counted in a HashMap.
fn wordcount_oracle(records: u64) -> HashMap<String, u64> {
    let generator = floe::text::WordGenerator::new(400, 11);
    let mut counts = HashMap::new();
    for i in 0..records {
        *counts.entry(generator.word(i)).or_insert(0) += 1;
    }
    counts
}

fn read_counts(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).expect("output");
    let mut counts = HashMap::new();
    for line in text.lines() {
        let (word, count) = line.rsplit_once(',').expect("word,count");
        let count: u64 = count.parse().expect("a count");
        assert!(
            counts.insert(word.to_string(), count).is_none(),
            "{word} twice"
        );
    }
    counts
}

fn wordcount_args<'a>(parallelism: &'a str, output: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "wordcount",
        "--records",
        "60000",
        "--vocabulary",
        "400",
        "--seed",
        "11",
        "--parallelism",
        parallelism,
        "--batch-size",
        "256",
        "--output",
        s(output),
    ];
    args.extend_from_slice(extra);
    args
}

/// Checkpointing flags of a job killed mid-way: sources hold until
/// `hold` checkpoints completed, so the kill finds it running.
fn checkpointing<'a>(url: &'a str, hold: &'a str) -> Vec<&'a str> {
    vec![
        "--checkpoint-interval",
        "30",
        "--checkpoint-dir",
        url,
        "--resume",
        "--finish-after-checkpoints",
        hold,
        "--status-interval",
        "5",
    ]
}

#[test]
fn wordcount_killed_and_resumed_on_s3_counts_the_oracle() {
    let Some(s3) = s3("wordcount on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let url = s3.url(&fresh_prefix("wordcount"));
    let args = wordcount_args("2", &output, &checkpointing(&url, "4"));
    let (first, _) = kill_9_and_resume(&s3, &args);
    assert!(
        first
            .lines()
            .any(|l| l == format!("resume: no checkpoint in {url}; starting fresh")),
        "a fresh prefix starts fresh and says so; stderr:\n{first}"
    );
    assert_eq!(read_counts(&output), wordcount_oracle(WORDS));
    // `checkpoints verify` reads every object back and checks it.
    let stdout = run_s3_ok_stdout(&s3, &["checkpoints", "verify", &url]);
    assert!(
        !stdout.is_empty() && stdout.lines().all(|l| l.ends_with(": ok")),
        "{stdout}"
    );
}

fn run_s3_ok_stdout(s3: &S3, args: &[&str]) -> String {
    let (status, stdout, stderr) = s3_common::run_s3(s3, args);
    assert!(status.success(), "floe {args:?}: {stderr}");
    stdout
}

#[test]
fn savepoint_on_s3_restores_at_another_parallelism() {
    let Some(s3) = s3("savepoints on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = fresh_prefix("savepoint");
    let (ck, sp) = (
        s3.url(&format!("{prefix}/ck")),
        s3.url(&format!("{prefix}/sp")),
    );
    let at = 25_000;
    let run1 = dir.path().join("run1.txt");
    let stderr = run_s3_ok(
        &s3,
        &wordcount_args(
            "2",
            &run1,
            &[
                "--checkpoint-interval",
                "50",
                "--checkpoint-dir",
                &ck,
                "--savepoint-at-records",
                "25000",
                "--savepoint-dir",
                &sp,
            ],
        ),
    );
    let oracle = wordcount_oracle(WORDS);
    assert_eq!(read_counts(&run1), oracle);
    let savepoint = stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .unwrap_or_else(|| panic!("no savepoint= line:\n{stderr}"));
    assert!(
        savepoint.starts_with(&format!("{sp}/savepoint-")),
        "{savepoint}"
    );
    let restored = dir.path().join("restored.txt");
    let stderr = run_s3_ok(
        &s3,
        &wordcount_args("3", &restored, &["--from-checkpoint", savepoint]),
    );
    assert_eq!(read_counts(&restored), oracle, "restored at parallelism 3");
    assert_eq!(summary_field(&stderr, "records"), WORDS - at, "{stderr}");
    assert_eq!(summary_field(&stderr, "parallelism"), 3);
}

#[test]
fn a_checkpoint_whose_metadata_upload_was_cut_off_is_skipped_on_restore() {
    let Some(s3) = s3("cut-off metadata on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let prefix = fresh_prefix("cut-off");
    let url = s3.url(&prefix);
    let mut flags = checkpointing(&url, "6");
    flags.extend(["--retain-checkpoints", "3"]);
    let args = wordcount_args("2", &output, &flags);
    // Killed once two checkpoints completed.
    let mut killed = false;
    let (_, first) = run_watching(&mut floe_s3(&s3, &args), |line, child| {
        if !killed && cli_common::status_field(line, "checkpoints").is_some_and(|n| n >= 2) {
            child.kill().expect("SIGKILL");
            killed = true;
        }
    });
    assert!(killed, "{first}");
    let ids = listed_ids(&s3, &url);
    assert!(ids.len() >= 2, "{ids:?}");
    let (older, newest) = (ids[ids.len() - 2], ids[ids.len() - 1]);
    // The newest one's metadata upload cut off half-way.
    let file = s3.object_file(&prefix, &format!("chk-{newest}/_metadata"));
    let bytes = std::fs::read(&file).expect("the metadata object");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("truncate");
    assert_eq!(listed_ids(&s3, &url), ids[..ids.len() - 1].to_vec());

    let (status, second) = run_watching(&mut floe_s3(&s3, &args), |_, _| {});
    assert!(status.success(), "{second}");
    let line = format!("restore fallback restored_checkpoint={older} skipped_checkpoint={newest} ");
    assert!(
        second.lines().any(|l| l.starts_with(&line)),
        "the restore says it skipped {newest} for {older}; stderr:\n{second}"
    );
    assert_eq!(read_counts(&output), wordcount_oracle(WORDS));
}

#[test]
fn retention_leaves_only_the_retained_checkpoints_objects() {
    let Some(s3) = s3("retention on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let prefix = fresh_prefix("retention");
    let url = s3.url(&prefix);
    run_s3_ok(
        &s3,
        &wordcount_args(
            "2",
            &output,
            &[
                "--checkpoint-interval",
                "20",
                "--checkpoint-dir",
                &url,
                "--retain-checkpoints",
                "2",
                "--finish-after-checkpoints",
                "5",
            ],
        ),
    );
    assert_eq!(read_counts(&output), wordcount_oracle(WORDS));
    let ids = listed_ids(&s3, &url);
    assert_eq!(ids.len(), 2, "two retained: {ids:?}");
    let objects = s3.objects(&prefix);
    let retained: Vec<String> = ids.iter().map(|id| format!("chk-{id}/")).collect();
    let stray: Vec<&String> = objects
        .iter()
        .filter(|o| !retained.iter().any(|r| o.starts_with(r.as_str())))
        .collect();
    assert!(
        stray.is_empty(),
        "only the retained checkpoints' objects (and no lease after a clean stop) remain; \
         stray: {stray:?}"
    );
    for r in &retained {
        assert!(objects.contains(&format!("{r}_metadata")), "{objects:?}");
    }
}

/// The retained checkpoint of `prefix` (retention keeps one) and the
/// objects of earlier checkpoints its metadata references, once it is
/// incremental and retention has run for it: every earlier checkpoint's
/// metadata is gone, its referenced objects are there, and no other object
/// of it is left (objects of checkpoints in flight, newer, may be). `None`
/// before.
fn retained_incremental(s3: &S3, prefix: &str) -> Option<(u64, Vec<String>)> {
    let objects = s3.objects(prefix);
    let committed: Vec<u64> = objects
        .iter()
        .filter_map(|o| {
            o.strip_prefix("chk-")?
                .strip_suffix("/_metadata")?
                .parse()
                .ok()
        })
        .collect();
    let [newest] = committed[..] else {
        return None;
    };
    let file = s3.object_file(prefix, &format!("chk-{newest}/_metadata"));
    let bytes = std::fs::read(&file).ok()?;
    let meta = floe::checkpoint::store::decode_metadata(&bytes, "newest", &file).ok()?;
    let own = format!("chk-{newest}/");
    let borrowed: Vec<String> = meta
        .blobs()
        .iter()
        .map(|b| b.path.clone())
        .filter(|p| !p.starts_with(&own))
        .collect();
    let kept = borrowed.iter().all(|p| objects.contains(p));
    let stray = objects.iter().any(|o| {
        let id = o.strip_prefix("chk-").and_then(|r| r.split('/').next());
        let older = id
            .and_then(|i| i.parse::<u64>().ok())
            .is_some_and(|i| i < newest);
        older && !borrowed.contains(o)
    });
    (!borrowed.is_empty() && kept && !stray).then_some((newest, borrowed))
}

#[test]
fn incremental_checkpoints_share_objects_by_reference_while_retained() {
    let Some(s3) = s3("incremental checkpoints on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let prefix = fresh_prefix("incremental");
    let url = s3.url(&prefix);
    let state_dir = dir.path().join("state");
    let args = wordcount_args(
        "2",
        &output,
        &[
            "--state",
            "redb",
            "--state-dir",
            s(&state_dir),
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            &url,
            "--finish-after-checkpoints",
            "30",
            "--status-interval",
            "5",
        ],
    );
    // The event: the one retained checkpoint is incremental (its metadata
    // references objects of an earlier, dropped checkpoint), and retention
    // left exactly those of the earlier checkpoint. The job ends there.
    let mut seen = None;
    let (_, stderr) = run_watching(&mut floe_s3(&s3, &args), |line, child| {
        if seen.is_none() && line.starts_with("status ") {
            seen = retained_incremental(&s3, &prefix);
            if seen.is_some() {
                child.kill().expect("SIGKILL");
            }
        }
    });
    let (newest, borrowed) = seen.unwrap_or_else(|| {
        panic!(
            "the one retained checkpoint was never incremental with retention done; \
             objects: {:?}\nstderr:\n{stderr}",
            s3.objects(&prefix)
        )
    });
    assert!(
        borrowed
            .iter()
            .all(|p| !p.starts_with(&format!("chk-{newest}/"))),
        "{borrowed:?}"
    );
}

// ------------------------------------------------------------------- window

#[test]
fn window_killed_and_resumed_on_s3_sums_the_oracle() {
    let Some(s3) = s3("window on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (text, events) = cli_common::window_input(
        5,
        &WindowInput {
            lines: 40_000,
            start: 1_000_000,
            step: 12,
            jitter: 26,
            keys: 17,
            low: -1000,
            high: 1000,
        },
    );
    let input = dir.path().join("in.csv");
    std::fs::write(&input, text).unwrap();
    let output = dir.path().join("out.txt");
    let url = s3.url(&fresh_prefix("window"));
    let mut args = vec![
        "run",
        "window",
        "--input",
        s(&input),
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--watermarks",
        "per-record",
        "--out-of-orderness",
        "50",
        "--parallelism",
        "2",
        "--output",
        s(&output),
    ];
    args.extend(checkpointing(&url, "4"));
    kill_9_and_resume(&s3, &args);
    let got = sorted(&std::fs::read_to_string(&output).expect("output"));
    assert_eq!(got, cli_common::tumbling_sums(&events, 1000));
}

// ---------------------------------------------------------------- pipelines

#[test]
fn pipelines_killed_and_resumed_on_s3_commit_the_oracle() {
    let Some(s3) = s3("pipelines on S3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let url = s3.url(&fresh_prefix("pipelines"));
    let mut args = vec![
        "run",
        "pipelines",
        "--records",
        "30000",
        "--seed",
        "3",
        "--parallelism",
        "2",
        "--output",
        s(&output),
        "--sink-rate",
        "10000",
    ];
    args.extend(checkpointing(&url, "3"));
    kill_9_and_resume(&s3, &args);
    let got = sorted(&std::fs::read_to_string(&output).expect("output"));
    assert!(
        got == pipelines_oracle(30_000, 3),
        "{} lines, {} expected",
        got.len(),
        pipelines_oracle(30_000, 3).len()
    );
}
