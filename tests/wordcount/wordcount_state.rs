//! `floe run wordcount --state heap|redb`: the counts kept in a `ValueState`
//! of either backend must equal a plain `HashMap` word count, on generated
//! words and on a small text file, at parallelism 1 and 2; bad `--state`
//! values and unusable `--state-dir`s fail with one readable line.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

fn floe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_floe"));
    cmd.args(["run", "wordcount"]);
    cmd
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run floe");
    assert!(
        out.status.success(),
        "floe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn parse_counts(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).expect("read output");
    let mut counts = HashMap::new();
    for line in text.lines() {
        let (word, count) = line.rsplit_once(',').expect("word,count");
        let prev = counts.insert(word.to_string(), count.parse().expect("count"));
        assert!(prev.is_none(), "word {word} printed twice");
    }
    counts
}

/// The summary line's `words=` (the words counted) and `parallelism=`.
fn summary(stderr: &[u8]) -> (u64, usize) {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .find(|l| l.starts_with("records="))
        .unwrap_or_else(|| panic!("no summary line in {text}"));
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .to_string()
    };
    (
        field("words=").parse().unwrap(),
        field("parallelism=").parse().unwrap(),
    )
}

/// Runs the word count with each state backend at parallelism 1 and 2 and
/// checks the counts and the summary against `oracle`.
fn check_backends(input: &[&str], oracle: &HashMap<String, u64>, dir: &Path) {
    let total: u64 = oracle.values().sum();
    for p in [1usize, 2] {
        for state in ["heap", "redb"] {
            let out_path = dir.join(format!("out-{state}-{p}.csv"));
            let mut cmd = floe();
            cmd.args(input)
                .args(["--parallelism", &p.to_string(), "--state", state])
                .arg("--output")
                .arg(&out_path);
            if state == "redb" {
                cmd.arg("--state-dir").arg(dir.join("state"));
            }
            let out = run_ok(&mut cmd);
            assert_eq!(
                &parse_counts(&out_path),
                oracle,
                "--state {state} --parallelism {p}"
            );
            assert_eq!(summary(&out.stderr), (total, p), "--state {state}");
        }
    }
}

#[test]
fn generated_words_match_oracle_with_both_backends() {
    let (records, vocabulary, seed) = (200_000u64, 2000usize, 7u64);
    let generator = floe::text::WordGenerator::new(vocabulary, seed);
    let mut oracle = HashMap::new();
    for i in 0..records {
        *oracle.entry(generator.word(i)).or_insert(0u64) += 1;
    }
    let dir = tempfile::tempdir().unwrap();
    check_backends(
        &[
            "--records",
            &records.to_string(),
            "--vocabulary",
            &vocabulary.to_string(),
            "--seed",
            &seed.to_string(),
        ],
        &oracle,
        dir.path(),
    );
}

#[test]
fn text_file_matches_oracle_with_both_backends() {
    let text = "The quick brown fox\njumps over the lazy dog.\r\n\nÄrger, ärger; \
                the DOG! x86_64 3.14 naïve Straße straße\nfox fox fox";
    let mut oracle = HashMap::new();
    let mut word = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() {
            word.push(c);
        } else if !word.is_empty() {
            *oracle.entry(word.to_lowercase()).or_insert(0u64) += 1;
            word.clear();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    std::fs::write(&input, text).unwrap();
    check_backends(&["--input", input.to_str().unwrap()], &oracle, dir.path());
}

fn one_error_line(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(text.trim_end().lines().count(), 1, "one line: {text}");
    text
}

#[test]
fn bad_state_value_is_one_readable_line() {
    let out = floe()
        .args(["--records", "10", "--state", "rocksdb"])
        .output()
        .unwrap();
    let text = one_error_line(&out);
    assert!(
        text.contains("rocksdb") && text.contains("--state"),
        "{text}"
    );
}

#[test]
fn unwritable_state_dir_is_one_readable_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    // A directory below a regular file can be created by no one (not even root).
    let bad = file.join("state");
    let out = floe()
        .args(["--records", "10", "--state", "redb", "--state-dir"])
        .arg(&bad)
        .output()
        .unwrap();
    let text = one_error_line(&out);
    assert!(
        text.starts_with("error:") && text.contains("state directory"),
        "{text}"
    );
}
