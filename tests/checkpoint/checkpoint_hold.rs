//! `CheckpointConfig::finish_after_checkpoints` (`--finish-after-checkpoints
//! N`): the sources hold at their end until N checkpoints completed, so a
//! job of a handful of records still takes N checkpoints, however fast the
//! machine runs it. The output stays the oracle's (a HashMap over the
//! input), and the hold adds no injected failure.

use crate::cli_common;
use cli_common::{fails_with_one_error_line, run_ok, summary_field};
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use std::collections::HashMap;
use std::time::Duration;

const VOCABULARY: usize = 50;
const SEED: u64 = 3;

/// The generated words counted in a HashMap.
fn oracle(records: u64) -> HashMap<String, u64> {
    let generator = floe::text::WordGenerator::new(VOCABULARY, SEED);
    let mut counts = HashMap::new();
    for i in 0..records {
        *counts.entry(generator.word(i)).or_insert(0) += 1;
    }
    counts
}

/// `word,count` lines of `path`.
fn read_counts(path: &std::path::Path) -> HashMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let (w, c) = l.rsplit_once(',').expect("word,count");
            (w.to_string(), c.parse().expect("a count"))
        })
        .collect()
}

/// Ten records end long before a 30 ms interval's first trigger: only the
/// hold gets the job its checkpoints.
#[test]
fn a_tiny_library_job_takes_the_checkpoints_it_waits_for() {
    let records = 10u64;
    let wanted = 3u64;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let mut checkpoints = CheckpointConfig::every(Duration::from_millis(30));
    checkpoints.finish_after_checkpoints = wanted;
    env.set_checkpoint_config(checkpoints);
    let generator = std::sync::Arc::new(floe::text::WordGenerator::new(VOCABULARY, SEED));
    let counts = env
        .from_generator(records, move |i| (generator.word(i), 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .collect();
    let handle = env.execute_async().expect("job starts");
    futures::executor::block_on(handle.wait()).expect("job finishes");
    let completed = handle.checkpoint_stats().completed;
    assert!(
        completed >= wanted,
        "{completed} checkpoints completed, {wanted} waited for"
    );
    let got: HashMap<String, u64> = counts.take().into_iter().collect();
    assert_eq!(got, oracle(records));
}

#[test]
fn the_cli_job_holds_for_its_checkpoints_and_its_output_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let records = 10u64;
    let stderr = run_ok(&[
        "run",
        "wordcount",
        "--records",
        &records.to_string(),
        "--vocabulary",
        &VOCABULARY.to_string(),
        "--seed",
        &SEED.to_string(),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "30",
        "--finish-after-checkpoints",
        "3",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(summary_field(&stderr, "checkpoints") >= 3, "{stderr}");
    assert_eq!(read_counts(&out), oracle(records), "{stderr}");
}

/// The hold and injected failures share the sources' hold: the hold must
/// not count as a kill (one more restart), nor a kill release the hold.
#[test]
fn the_hold_and_injected_failures_together_restart_exactly_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let records = 2_000u64;
    let wanted = 6u64;
    let stderr = run_ok(&[
        "run",
        "wordcount",
        "--records",
        &records.to_string(),
        "--vocabulary",
        &VOCABULARY.to_string(),
        "--seed",
        &SEED.to_string(),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "20",
        "--inject-failures",
        "2",
        "--restart",
        "fixed:5,0",
        "--finish-after-checkpoints",
        &wanted.to_string(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(summary_field(&stderr, "restarts"), 2, "{stderr}");
    assert!(summary_field(&stderr, "checkpoints") >= wanted, "{stderr}");
    assert_eq!(read_counts(&out), oracle(records), "{stderr}");
}

#[test]
fn the_hold_needs_checkpoints() {
    let line = fails_with_one_error_line(&[
        "run",
        "wordcount",
        "--records",
        "10",
        "--finish-after-checkpoints",
        "1",
    ]);
    assert!(line.contains("checkpoint-interval"), "{line}");
    let env = StreamExecutionEnvironment::new();
    let mut checkpoints = CheckpointConfig::default();
    checkpoints.finish_after_checkpoints = 1;
    env.set_checkpoint_config(checkpoints);
    env.from_generator(10, |i| i).collect();
    assert!(
        matches!(env.execute(), Err(floe::Error::Config(_))),
        "a hold without checkpoints is a configuration error"
    );
}
