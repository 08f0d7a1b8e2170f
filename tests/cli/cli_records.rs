//! One meaning of "records" in the CLI: the records the job's source emits
//! (the lines of an `--input` file, or the generated records), for the
//! summary's `records=`, the status line's `records=` and
//! `--savepoint-at-records N`.
//!
//! The bug: `floe run wordcount --input F` reported the words as
//! `records=`, while `--savepoint-at-records` counted lines, so a user who
//! saw `records=8000` and asked for a savepoint at 4000 got "the input
//! ended before 4000 records". Here each input job reads `records=`, asks
//! for a savepoint at half of it, which must be taken, and the run restored
//! from it must end with the oracle's output.

use crate::cli_common;
use cli_common::{SplitMix, count_words, parse_counts, run_ok, sorted, summary_field};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// The path of the `savepoint=PATH` line.
fn savepoint_path(stderr: &str) -> PathBuf {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no savepoint= line in stderr:\n{stderr}"))
}

/// Lines of several words each, so words and lines differ.
fn text(lines: usize) -> String {
    let words = ["one", "Two", "three", "four", "five", "six"];
    let mut rng = SplitMix(21);
    let mut out = String::new();
    for _ in 0..lines {
        for _ in 0..2 + rng.below(5) {
            out.push_str(words[rng.below(words.len() as u64) as usize]);
            out.push(' ');
        }
        out.push('\n');
    }
    out
}

#[test]
fn wordcount_savepoint_at_half_the_reported_records() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let text = text(2_000);
    std::fs::write(&input, &text).unwrap();
    let oracle = count_words(&text);
    let wordcount = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--batch-size",
            "64",
            "--output",
            s(out),
            "--status-interval",
            "60000",
        ];
        args.extend_from_slice(extra);
        run_ok(&args)
    };
    let full = dir.path().join("full.txt");
    let stderr = wordcount(&full, &[]);
    let records = summary_field(&stderr, "records");
    assert_eq!(records, text.lines().count() as u64, "{stderr}");
    assert_eq!(
        summary_field(&stderr, "words"),
        oracle.values().sum::<u64>(),
        "{stderr}"
    );
    // The status line printed when the job ends counts the same records.
    let status = stderr
        .lines()
        .rfind(|l| l.starts_with("status "))
        .unwrap_or_else(|| panic!("no status line:\n{stderr}"));
    assert!(
        status.contains(&format!(" records={records} ")),
        "{status}\n{stderr}"
    );

    let sp = dir.path().join("sp");
    let half = (records / 2).to_string();
    let run1 = dir.path().join("run1.txt");
    let stderr = wordcount(
        &run1,
        &[
            "--checkpoint-interval",
            "60000",
            "--savepoint-at-records",
            &half,
            "--savepoint-dir",
            s(&sp),
        ],
    );
    let savepoint = savepoint_path(&stderr);
    assert_eq!(
        parse_counts(&std::fs::read_to_string(&run1).unwrap()),
        oracle
    );

    let restored = dir.path().join("restored.txt");
    let stderr = wordcount(&restored, &["--from-checkpoint", s(&savepoint)]);
    assert_eq!(
        parse_counts(&std::fs::read_to_string(&restored).unwrap()),
        oracle
    );
    assert_eq!(
        summary_field(&stderr, "records"),
        records - records / 2,
        "the restored run resumes after the savepoint's records:\n{stderr}"
    );
}

#[test]
fn window_records_count_every_line_bad_ones_included() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.csv");
    // Valid events with a malformed line every 7th line.
    let mut rng = SplitMix(5);
    let (mut text, mut sums) = (String::new(), HashMap::<(String, i64), i64>::new());
    let mut bad = 0u64;
    for i in 0..1_000i64 {
        if i % 7 == 3 {
            text.push_str("not,a,record\n");
            bad += 1;
            continue;
        }
        let key = format!("k{}", rng.below(5));
        let value = rng.below(10) as i64;
        let ts = 1_000 + i;
        text.push_str(&format!("{key},{ts},{value}\n"));
        *sums.entry((key, ts.div_euclid(100) * 100)).or_insert(0) += value;
    }
    std::fs::write(&input, &text).unwrap();
    let mut oracle: Vec<String> = sums
        .into_iter()
        .map(|((k, start), v)| format!("{k},{start},{},{v}", start + 100))
        .collect();
    oracle.sort();
    let window = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            "window",
            "--input",
            s(&input),
            "--window",
            "tumbling:100",
            "--agg",
            "sum",
            "--watermarks",
            "per-record",
            "--on-bad-record",
            "skip",
            "--output",
            s(out),
        ];
        args.extend_from_slice(extra);
        run_ok(&args)
    };
    let full = dir.path().join("full.csv");
    let stderr = window(&full, &[]);
    let records = summary_field(&stderr, "records");
    assert_eq!(records, 1_000, "{stderr}");
    assert_eq!(summary_field(&stderr, "bad"), bad, "{stderr}");
    assert_eq!(sorted(&std::fs::read_to_string(&full).unwrap()), oracle);

    let sp = dir.path().join("sp");
    let half = (records / 2).to_string();
    let out = dir.path().join("out.csv");
    let stderr = window(
        &out,
        &[
            "--checkpoint-interval",
            "60000",
            "--savepoint-at-records",
            &half,
            "--savepoint-dir",
            s(&sp),
        ],
    );
    let savepoint = savepoint_path(&stderr);
    let stderr = window(&out, &["--from-checkpoint", s(&savepoint)]);
    assert_eq!(sorted(&std::fs::read_to_string(&out).unwrap()), oracle);
    assert_eq!(summary_field(&stderr, "records"), records - records / 2);
}
