//! Final counts straight from the keyed state, and sinks that write a batch
//! at a time, checked against oracles computed in this file.
//!
//! - `KeyedStream::sum_at_end_of_input` emits one record per key, its sum,
//!   and nothing per input record (a per-record sum emits one per record);
//!   the sums equal a `HashMap` count of the input.
//! - `floe run wordcount` prints the oracle's counts, each word once, to a
//!   file written directly, to stdout, and through the transactional sink
//!   with checkpoints and failures restored from them.
//! - `write_as_text` writes, byte for byte, the lines `format!("{v}\n")`
//!   gives, over batches of every size.

use crate::rng;
use rng::SplitMix;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// `n` words over a vocabulary of `distinct` (some words longer than an
/// inline key), seeded.
fn words(seed: u64, n: usize, distinct: u64) -> Vec<String> {
    let mut rng = SplitMix(seed);
    (0..n)
        .map(|_| {
            let w = rng.below(distinct);
            if w.is_multiple_of(7) {
                format!("longwordofthevocabularynumber{w}")
            } else {
                format!("w{w}")
            }
        })
        .collect()
}

fn oracle(words: &[String]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for w in words {
        *counts.entry(w.clone()).or_insert(0u64) += 1;
    }
    counts
}

#[test]
fn sum_at_end_of_input_emits_each_keys_final_sum_once() {
    let input = words(11, 20_000, 700);
    let expected = oracle(&input);
    for parallelism in [1, 3] {
        let env = floe::StreamExecutionEnvironment::new();
        env.set_parallelism(parallelism);
        // Small batches: many batches per key before the end.
        env.set_batch_size(64);
        let out = env
            .from_collection(input.iter().map(|w| (w.clone(), 1u64)).collect::<Vec<_>>())
            .key_by_field(|t: &(String, u64)| &t.0)
            .sum_at_end_of_input(|t: &mut (String, u64)| &mut t.1)
            .collect();
        env.execute().expect("job runs");
        let got = out.take();
        assert_eq!(
            got.len(),
            expected.len(),
            "P={parallelism}: one record per key, none per input record"
        );
        let got: HashMap<String, u64> = got.into_iter().collect();
        assert_eq!(got, expected, "P={parallelism}");
    }
}

fn floe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_floe"));
    cmd.env_remove("FLOE_LOG");
    cmd
}

/// Runs the CLI; its stdout and stderr on success.
fn run_ok(cmd: &mut Command) -> (Vec<u8>, String) {
    let out = cmd.output().expect("floe binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "floe failed with {:?}; stderr:\n{stderr}",
        out.status,
    );
    (out.stdout, stderr)
}

/// Parses `word,count` lines; a word must not appear twice.
fn parse_counts(text: &[u8]) -> HashMap<String, u64> {
    let text = std::str::from_utf8(text).expect("output is UTF-8");
    let mut counts = HashMap::new();
    for line in text.lines() {
        let (word, count) = line
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("malformed output line {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        assert!(
            counts.insert(word.to_string(), count).is_none(),
            "word {word:?} appears twice in the output"
        );
    }
    counts
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

#[test]
fn wordcount_prints_the_oracles_counts_directly_and_through_restores() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("input.txt");
    // 20,000 distinct words among 60,000: many words per batch of the sink.
    let all = words(5, 60_000, 20_000);
    let text: String = all
        .chunks(6)
        .map(|line| line.join(" ") + "\n")
        .collect::<String>();
    std::fs::write(&input, &text).expect("input written");
    // Lowercase letters and digits: the tokenizer keeps each word whole.
    let expected = oracle(&all);

    for parallelism in ["1", "3"] {
        let out = dir.path().join(format!("direct-{parallelism}.txt"));
        run_ok(floe().args([
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--parallelism",
            parallelism,
            "--batch-size",
            "100",
            "--output",
            s(&out),
        ]));
        let got = parse_counts(&std::fs::read(&out).expect("output read"));
        assert_eq!(got, expected, "file written directly, P={parallelism}");

        let (stdout, _) = run_ok(floe().args([
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--parallelism",
            parallelism,
        ]));
        assert_eq!(parse_counts(&stdout), expected, "stdout, P={parallelism}");
    }

    // Transactional: checkpoints, random failures, restores from them.
    let out = dir.path().join("committed.txt");
    let ck = dir.path().join("ck");
    let (_, stderr) = run_ok(floe().args([
        "run",
        "wordcount",
        "--input",
        s(&input),
        "--parallelism",
        "2",
        "--batch-size",
        "100",
        "--checkpoint-interval",
        "5",
        "--checkpoint-dir",
        s(&ck),
        "--inject-failures",
        "3",
        "--restart",
        "fixed:10,0",
        "--output",
        s(&out),
    ]));
    let got = parse_counts(&std::fs::read(&out).expect("output read"));
    assert_eq!(got, expected, "transactional output after restores");
    let restarts: u64 = stderr
        .split_whitespace()
        .find_map(|f| f.strip_prefix("restarts="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no restarts= in the summary:\n{stderr}"));
    assert!(restarts >= 1, "no failure was restored:\n{stderr}");
}

#[test]
fn write_as_text_writes_the_lines_of_every_record_byte_for_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = SplitMix(3);
    // Lines of 1..2000 bytes: batches below, at and far above the buffer's
    // flush size.
    let values: Vec<String> = (0..3_000)
        .map(|i| {
            let len = 1 + rng.below(2_000) as usize;
            format!("{i}:{}", "x".repeat(len))
        })
        .collect();
    let expected: String = values.iter().map(|v| format!("{v}\n")).collect();
    for batch in [1, 7, 4096] {
        let path = dir.path().join(format!("out-{batch}.txt"));
        let env = floe::StreamExecutionEnvironment::new();
        env.set_parallelism(1);
        env.set_batch_size(batch);
        env.from_collection(values.clone()).write_as_text(&path);
        env.execute().expect("job runs");
        let got = std::fs::read_to_string(&path).expect("output read");
        assert!(got == expected, "batch size {batch}: the file differs");
    }
}
