//! Region failover on `floe run pipelines`: P independent forward-only
//! pipelines, each a pipelined region of five subtasks. Failures restart one
//! region (restarted_subtasks = failures × 5) or, with restart-all, every
//! subtask (failures × 5P); either way the committed output equals the
//! records the pipeline logic yields, computed here on its own.
//!
//! With `--state heap|redb` the enrich step counts each event key's events
//! per pipeline in keyed state: the counts (computed here from the
//! generator's split of the records) stay exact through region and
//! restart-all failover over both backends.
//!
//! At-least-once checkpoints with failures lose no line (duplicates would
//! be allowed).

use floe::text::mix64;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The output lines the pipelines must produce for `records` and `seed`:
/// generate, parse, filter, enrich, as the demo defines them.
fn oracle(records: u64, seed: u64) -> BTreeMap<String, usize> {
    oracle_with_counts(records, seed, None)
}

/// Like [`oracle`]; with `Some(p)` each line also carries the number of
/// events of its key seen so far in its pipeline, pipeline `j` of `p`
/// generating the indices `records * j / p .. records * (j + 1) / p`.
fn oracle_with_counts(records: u64, seed: u64, pipelines: Option<u64>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let p = pipelines.unwrap_or(1);
    for j in 0..p {
        let mut seen = std::collections::HashMap::<u64, u64>::new();
        for i in records * j / p..records * (j + 1) / p {
            let h = mix64(i ^ mix64(seed));
            let (key, value) = (h % 97, (h >> 16) % 10_000);
            if value % 3 == 0 {
                continue;
            }
            let mut line = format!("{i},k{key},{value},{}", (value * 7 + key) % 13);
            if pipelines.is_some() {
                let n = seen.entry(key).or_insert(0);
                *n += 1;
                line.push_str(&format!(",{n}"));
            }
            *out.entry(line).or_insert(0) += 1;
        }
    }
    out
}

fn lines(path: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = BTreeMap::new();
    for l in text.lines() {
        *out.entry(l.to_string()).or_insert(0) += 1;
    }
    out
}

fn field(stderr: &str, name: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("records="))
        .unwrap_or_else(|| panic!("no summary line:\n{stderr}"));
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
        .parse()
        .unwrap()
}

fn pipelines(parallelism: usize, seed: u64, failover: &str, output: &Path) -> String {
    pipelines_with(parallelism, seed, failover, output, &[])
}

fn pipelines_with(
    parallelism: usize,
    seed: u64,
    failover: &str,
    output: &Path,
    extra: &[&str],
) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["run", "pipelines", "--records", "60000", "--parallelism"])
        .arg(parallelism.to_string())
        .args(["--seed", &seed.to_string()])
        .args(["--checkpoint-interval", "30", "--inject-failures", "5"])
        .args([
            "--restart",
            "fixed:10,0",
            "--failover",
            failover,
            "--output",
        ])
        .arg(output)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "pipelines failed: {stderr}");
    stderr
}

/// Asserts five restarts, each restarting one region of five subtasks
/// (region failover) or all 5P subtasks (restart-all).
fn assert_five_restarts(stderr: &str, failover: &str, parallelism: usize, what: &str) {
    assert_eq!(field(stderr, "restarts"), 5, "{what}: {stderr}");
    let per_failure = if failover == "region" {
        5
    } else {
        5 * parallelism as u64
    };
    assert_eq!(
        field(stderr, "restarted_subtasks"),
        5 * per_failure,
        "{what}: {stderr}"
    );
}

/// Up to three lines of `a` missing from `b`.
fn missing<'a>(a: &'a BTreeMap<String, usize>, b: &BTreeMap<String, usize>) -> Vec<&'a String> {
    a.keys().filter(|l| !b.contains_key(*l)).take(3).collect()
}

#[test]
fn region_failover_restarts_one_region_per_failure_and_stays_exact() {
    for (parallelism, seed) in [(2, 3), (4, 11)] {
        let expected = oracle(60_000, seed);
        for failover in ["region", "all"] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.txt");
            let stderr = pipelines(parallelism, seed, failover, &path);
            let what = format!("{failover} at P={parallelism}");
            assert_five_restarts(&stderr, failover, parallelism, &what);
            assert!(
                lines(&path) == expected,
                "{failover} at P={parallelism}: output differs from the pipeline logic"
            );
        }
    }
}

#[test]
fn keyed_state_in_each_region_survives_region_and_full_restarts() {
    for (parallelism, seed, state) in [(2, 5, "redb"), (3, 6, "heap"), (4, 7, "redb")] {
        let expected = oracle_with_counts(60_000, seed, Some(parallelism as u64));
        for failover in ["region", "all"] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.txt");
            let state_dir = dir.path().join("state");
            let mut extra = vec!["--state", state];
            if state == "redb" {
                extra.extend(["--state-dir", state_dir.to_str().unwrap()]);
            }
            let stderr = pipelines_with(parallelism, seed, failover, &path, &extra);
            let what = format!("{failover} at P={parallelism} with {state} state");
            assert_five_restarts(&stderr, failover, parallelism, &what);
            let got = lines(&path);
            assert!(
                got == expected,
                "{what}: output differs from the pipeline logic: {} lines, {} expected; missing {:?}, unexpected {:?}",
                got.values().sum::<usize>(),
                expected.values().sum::<usize>(),
                missing(&expected, &got),
                missing(&got, &expected),
            );
        }
    }
}

#[test]
fn at_least_once_pipelines_lose_nothing_under_failures() {
    let (parallelism, seed) = (3, 8);
    let expected = oracle(60_000, seed);
    for failover in ["region", "all"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let stderr = pipelines_with(
            parallelism,
            seed,
            failover,
            &path,
            &["--checkpoint-mode", "at-least-once"],
        );
        assert_eq!(field(&stderr, "restarts"), 5, "{failover}: {stderr}");
        let got = lines(&path);
        let (lost, invented) = (missing(&expected, &got), missing(&got, &expected));
        assert!(
            lost.is_empty() && invented.is_empty(),
            "{failover}: at-least-once lost {lost:?} or invented {invented:?}"
        );
    }
}
