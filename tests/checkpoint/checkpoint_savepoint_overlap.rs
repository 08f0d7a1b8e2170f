//! A savepoint overlapped by periodic checkpoints must still complete.
//!
//! The bug: the coordinator triggered periodic checkpoints while a savepoint
//! was pending. A newer (here unaligned) barrier reaching a subtask before
//! the savepoint's aligned barrier was dequeued canceled the savepoint
//! there ("declined … canceled by a newer checkpoint"), or left its
//! barriers ignored until the subtasks finished. The periodic trigger now
//! waits behind a pending savepoint, as Flink's does.
//!
//! The overlap is forced, not timed: the keyed sum is throttled, so the
//! savepoint's barrier waits behind a full backlog of batches while the
//! periodic trigger fires every millisecond. Through the library
//! (`JobHandle::trigger_savepoint`) and the binary (`--savepoint-at-records`).

use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

const RECORDS: u64 = 40_000;
const WORDS: u64 = 29;

fn word(i: u64) -> String {
    format!("w{}", floe::text::mix64(i) % WORDS)
}

fn oracle() -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for i in 0..RECORDS {
        *m.entry(word(i)).or_insert(0) += 1;
    }
    m
}

/// Counts words; `rate` throttles the keyed sum; `restore` starts from a
/// savepoint.
fn job(
    dir: &Path,
    rate: Option<f64>,
    restore: Option<&Path>,
) -> (
    StreamExecutionEnvironment,
    floe::connectors::collect::Collected<(String, u64)>,
) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let mut checkpoints = CheckpointConfig::every(Duration::from_millis(1)).with_dir(dir);
    checkpoints.unaligned = true;
    checkpoints.timeout = Duration::from_secs(120);
    env.set_checkpoint_config(checkpoints);
    if let Some(path) = restore {
        env.restore_from(path);
    }
    let words = env
        .from_generator(RECORDS, |i| (word(i), 1u64))
        .uid("words");
    let mut counts = words
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .uid("sum");
    if let Some(rate) = rate {
        counts = counts.set_input_rate(rate);
    }
    let collected = counts.collect();
    (env, collected)
}

#[test]
fn savepoint_completes_while_periodic_checkpoints_are_due() {
    let dir = tempfile::tempdir().unwrap();
    let (env, first) = job(&dir.path().join("ck"), Some(8_000.0), None);
    let handle = env.execute_async().expect("job starts");
    // The job runs and checkpoints before the savepoint is asked for.
    assert!(
        futures::executor::block_on(handle.wait_for_checkpoints(1)),
        "the job ended before its first checkpoint"
    );
    let savepoint = futures::executor::block_on(handle.trigger_savepoint(dir.path().join("sp")))
        .expect("the savepoint completes although periodic checkpoints were due");
    futures::executor::block_on(handle.wait()).expect("job finishes");
    assert_eq!(last_per_key(first.take()), oracle(), "the first run");
    let stats = handle.checkpoint_stats();
    assert!(
        stats
            .history
            .iter()
            .all(|r| r.status != "failed" || !r.savepoint),
        "a savepoint failed: {:?}",
        stats.history
    );

    // Restored from the savepoint, the job ends with the oracle's counts.
    let (env, restored) = job(&dir.path().join("ck2"), None, Some(&savepoint));
    env.execute().expect("restored job finishes");
    assert_eq!(
        last_per_key(restored.take()),
        oracle(),
        "restored from the savepoint"
    );
}

fn last_per_key(updates: Vec<(String, u64)>) -> HashMap<String, u64> {
    updates.into_iter().collect()
}

/// `floe run wordcount` with `extra` flags; its stderr, or a panic with it.
fn wordcount(output: &Path, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "run",
            "wordcount",
            "--records",
            "40000",
            "--vocabulary",
            "200",
            "--seed",
            "3",
            "--parallelism",
            "2",
            "--batch-size",
            "64",
            "--output",
            output.to_str().expect("UTF-8 path"),
        ])
        .args(extra)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("floe runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "floe failed: {stderr}");
    stderr
}

#[test]
fn cli_savepoint_at_records_completes_under_unaligned_checkpoints_every_millisecond() {
    let dir = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
    let (sp, ck) = (dir.path().join("sp"), dir.path().join("ck"));
    let first = dir.path().join("first.txt");
    let stderr = wordcount(
        &first,
        &[
            "--checkpoint-interval",
            "1",
            "--unaligned",
            "--checkpoint-dir",
            &s(&ck),
            "--count-rate",
            "20000",
            "--savepoint-at-records",
            "8000",
            "--savepoint-dir",
            &s(&sp),
        ],
    );
    let savepoint = stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .unwrap_or_else(|| panic!("no savepoint= line: {stderr}"))
        .to_string();
    // The oracle: the generated words counted in a HashMap.
    let generator = floe::text::WordGenerator::new(200, 3);
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for i in 0..40_000 {
        *oracle.entry(generator.word(i)).or_insert(0) += 1;
    }
    let read = |p: &Path| -> HashMap<String, u64> {
        std::fs::read_to_string(p)
            .expect("output")
            .lines()
            .map(|l| {
                let (w, c) = l.rsplit_once(',').expect("word,count");
                (w.to_string(), c.parse().expect("count"))
            })
            .collect()
    };
    assert_eq!(read(&first), oracle, "the run with the savepoint");
    let restored = dir.path().join("restored.txt");
    wordcount(&restored, &["--from-checkpoint", &savepoint]);
    assert_eq!(read(&restored), oracle, "restored from the savepoint");
}
