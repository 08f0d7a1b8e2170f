//! Long lines of an `--input` file, end to end.
//!
//! The bug: the file source read a line whole, however long, and every
//! source subtask whose split began inside it read the rest of it whole
//! too, only to skip it: a 48 MB line of words cost the word count 245 MB
//! at parallelism 1 and up to 429 MB at 2, and the window job needed
//! 639 MB to skip a 100 MB line as one bad record. Now the word count reads
//! a long line in pieces cut between words (each a record under the
//! channels' credits), and the window job refuses a line longer than
//! `--max-line-bytes` as a bad record, read past without being held. The
//! memory itself is measured in docs/benchmarks.md; here the results are
//! checked against HashMaps computed from the input.

use crate::cli_common;
use cli_common::summary_field;
use cli_common::{SplitMix, count_words, fails_with_one_error_line, parse_counts, run_ok};
use std::collections::BTreeMap;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Short lines around one line of about `long` bytes of words, with commas
/// and a few non-ASCII words.
fn text_with_a_long_line(long: usize, seed: u64) -> String {
    let words = ["alpha", "Beta", "gamma", "délta", "e", "zeta42", "ηta"];
    let mut rng = SplitMix(seed);
    let mut word = |out: &mut String| {
        out.push_str(words[rng.below(words.len() as u64) as usize]);
        out.push_str(if rng.below(9) == 0 { ", " } else { " " });
    };
    let mut out = String::new();
    for _ in 0..50 {
        word(&mut out);
        out.push('\n');
    }
    while out.len() < long {
        word(&mut out);
    }
    out.push_str("\r\n");
    for _ in 0..50 {
        word(&mut out);
        out.push('\n');
    }
    out
}

/// A 2 MB line among short ones, counted at parallelism 1 to 3 with splits
/// that begin inside the line, and across injected failures whose
/// checkpoints fall between pieces of it: the HashMap's counts each time.
#[test]
fn wordcount_counts_a_long_line_exactly_at_every_parallelism() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.txt");
    let text = text_with_a_long_line(2 << 20, 5);
    std::fs::write(&input, &text).expect("write the input");
    let oracle = count_words(&text);
    let runs: [(&str, &[&str]); 4] = [
        ("1", &["--split-size", "300000"]),
        ("2", &["--split-size", "65536"]),
        ("3", &["--split-size", "1000000"]),
        (
            "2",
            &[
                "--split-size",
                "500000",
                "--batch-size",
                "8",
                "--checkpoint-interval",
                "10",
                "--inject-failures",
                "3",
            ],
        ),
    ];
    for (i, (parallelism, extra)) in runs.into_iter().enumerate() {
        let out = dir.path().join(format!("out-{i}.txt"));
        let mut args = vec![
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--parallelism",
            parallelism,
            "--output",
            s(&out),
        ];
        args.extend_from_slice(extra);
        let stderr = run_ok(&args);
        let got = parse_counts(&std::fs::read_to_string(&out).expect("the output"));
        assert_eq!(got, oracle, "P={parallelism} {extra:?}: {stderr}");
        if extra.contains(&"--inject-failures") {
            assert!(summary_field(&stderr, "restarts") >= 1, "{stderr}");
        }
    }
}

/// A window input with a 3 MB line and a good 700-byte line among good
/// ones: with `--max-line-bytes 500` both are bad records (skipped and
/// counted, or the first fails the job naming its line); with the default
/// (1 MiB) only the 3 MB one. The firings are the HashMap's sums of the
/// lines within the limit.
#[test]
fn window_refuses_lines_longer_than_the_limit_as_bad_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("ev.csv");
    let mut text = String::new();
    // Window sums of the lines within the default limit, and within 500.
    let mut sums: BTreeMap<(String, i64), i64> = BTreeMap::new();
    let mut sums_500 = sums.clone();
    let mut rng = SplitMix(17);
    for i in 0..4_000i64 {
        match i {
            1_000 => text.push_str(&format!("k1,{i},{}\n", "7".repeat(3 << 20))),
            // A good line of 700 bytes: the value 1 with leading zeros.
            2_500 => {
                text.push_str(&format!("k2,{i},{}1\n", "0".repeat(700)));
                *sums.entry(("k2".into(), 2_500)).or_insert(0) += 1;
            }
            _ => {
                let key = format!("k{}", rng.below(7));
                let value = rng.below(100) as i64;
                text.push_str(&format!("{key},{i},{value}\n"));
                let window = (key, i.div_euclid(100) * 100);
                *sums.entry(window.clone()).or_insert(0) += value;
                *sums_500.entry(window).or_insert(0) += value;
            }
        }
    }
    std::fs::write(&input, &text).expect("write the input");
    let lines = |sums: &BTreeMap<(String, i64), i64>| -> Vec<String> {
        let mut lines: Vec<String> = sums
            .iter()
            .map(|((k, start), v)| format!("{k},{start},{},{v}", start + 100))
            .collect();
        lines.sort();
        lines
    };
    let oracle = lines(&sums);
    let oracle_500 = lines(&sums_500);
    let out = dir.path().join("out.txt");
    let args = |extra: &[&'static str]| {
        let mut args = vec![
            "run".to_string(),
            "window".into(),
            "--input".into(),
            s(&input).into(),
            "--window".into(),
            "tumbling:100".into(),
            "--agg".into(),
            "sum".into(),
            "--parallelism".into(),
            "2".into(),
            "--split-size".into(),
            "200000".into(),
            "--output".into(),
            s(&out).into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let run = |extra: &[&'static str]| {
        let args = args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = run_ok(&args);
        let mut got: Vec<String> = std::fs::read_to_string(&out)
            .expect("the output")
            .lines()
            .map(str::to_string)
            .collect();
        got.sort();
        (got, stderr)
    };
    let (got, stderr) = run(&["--on-bad-record", "skip", "--max-line-bytes", "500"]);
    assert_eq!(got, oracle_500, "{stderr}");
    assert_eq!(summary_field(&stderr, "bad"), 2, "{stderr}");
    let (got, stderr) = run(&["--on-bad-record", "skip"]);
    assert_eq!(got, oracle, "{stderr}");
    assert_eq!(summary_field(&stderr, "bad"), 1, "{stderr}");

    let args = args(&["--max-line-bytes", "500"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = fails_with_one_error_line(&args);
    // Whichever source subtask comes to its long line first names it.
    assert!(
        (line.contains("line 1001: a line of 3145736 bytes")
            || line.contains("line 2501: a line of 709 bytes"))
            && line.contains("longer than 500 bytes"),
        "{line}"
    );
}
