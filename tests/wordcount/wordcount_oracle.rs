//! End-to-end check of `floe run wordcount` (the CLI binary) against a plain,
//! single-threaded word count written independently in this file.
//!
//! - File mode: a seeded random text (mixed case, punctuation, digits,
//!   non-ASCII letters, combining marks, empty lines, `\r\n` endings, no final
//!   newline) is counted at parallelism 1, 2 and 4; the `word,count` output must
//!   equal the oracle's map, and the stderr summary line must report the
//!   input's lines as `records=` (the source's records), the oracle's total
//!   word count as `words=`, and the parallelism.
//! - Generated mode: `--records 200000 --vocabulary 500 --seed 7` at
//!   parallelism 1 and 2 must equal the counts of
//!   `floe::text::WordGenerator::new(500, 7).word(i)` for `i in 0..200000`.

use crate::rng;
use rng::SplitMix;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

/// Words with non-ASCII letters, digits, case changes and marks that split or
/// do not split words.
const SPECIAL_WORDS: &[&str] = &[
    "Ärger",
    "ärger",
    "ÄRGER",
    "ÉCOLE",
    "école",
    "naïve",
    "NAÏVE",
    "Straße",
    "ΟΔΟΣ",
    "οδός",
    "İstanbul",
    "Ĳssel",
    "ǅemal",
    "ﬁsh",
    "cafe\u{301}",
    "日本語",
    "x86_64",
    "3.14",
    "2024",
    "½",
    "x²",
    "Ω",
    "ÑANDÚ",
    "żółw",
    // Around 23 bytes, where a word may stop fitting an inline key.
    "aaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaa",
    "ÄÄÄÄÄÄÄÄÄÄÄa",
    "ÄÄÄÄÄÄÄÄÄÄÄÄ",
    "Donaudampfschifffahrtsgesellschaftskapitän",
    "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
];

const SEPARATORS: &[&str] = &[
    " ", " ", " ", "  ", ", ", ". ", "! ", "? ", "; ", ": ", "\t", " — ", "...", " «", "» ", "'",
    "-", "/", "\u{a0}", " (", ") ", "\"", " & ", "\u{3000}",
];

fn random_ascii_word(rng: &mut SplitMix) -> String {
    // A small alphabet and short words so that words repeat often.
    let len = 1 + rng.below(4) as usize;
    (0..len)
        .map(|_| {
            let c = (b'a' + rng.below(6) as u8) as char;
            if rng.below(4) == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// A seeded random text with `lines` lines.
fn random_text(seed: u64, lines: usize) -> String {
    let mut rng = SplitMix(seed);
    let mut text = String::new();
    for line in 0..lines {
        let tokens = match rng.below(10) {
            0 => 0, // an empty line
            _ => rng.below(16) as usize,
        };
        if rng.below(7) == 0 {
            text.push_str(rng.pick(SEPARATORS));
        }
        for t in 0..tokens {
            if t > 0 {
                text.push_str(rng.pick(SEPARATORS));
            }
            match rng.below(10) {
                0..=2 => text.push_str(rng.pick(SPECIAL_WORDS)),
                3 => text.push_str(&rng.below(1000).to_string()),
                _ => text.push_str(&random_ascii_word(&mut rng)),
            }
        }
        if line + 1 == lines {
            break; // the last line has no line ending
        }
        text.push_str(if rng.below(3) == 0 { "\r\n" } else { "\n" });
    }
    text
}

/// The oracle: maximal runs of `char::is_alphanumeric`, lowercased with
/// `str::to_lowercase`, counted in a HashMap. Line endings are not
/// alphanumeric, so the whole file can be scanned as one string.
fn oracle_counts(text: &str) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    let mut word = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() {
            word.push(c);
        } else if !word.is_empty() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
            word.clear();
        }
    }
    counts
}

fn floe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_floe"));
    cmd.env_remove("FLOE_LOG");
    cmd
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("floe binary runs");
    assert!(
        out.status.success(),
        "floe failed with {:?}; stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Parses `word,count` lines; a word must not appear twice.
fn parse_counts(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).expect("output is UTF-8");
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

/// The fields of the stderr summary line
/// `records=N elapsed_ms=T throughput_rps=X parallelism=P words=W`.
struct Summary {
    records: u64,
    parallelism: usize,
    words: u64,
}

fn parse_summary(stderr: &[u8]) -> Summary {
    let stderr = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("records="))
        .collect();
    assert_eq!(lines.len(), 1, "one summary line expected in:\n{stderr}");
    let fields: Vec<&str> = lines[0].split(' ').collect();
    let keys: Vec<&str> = fields
        .iter()
        .map(|f| f.split_once('=').map_or("", |(k, _)| k))
        .collect();
    assert_eq!(
        keys,
        [
            "records",
            "elapsed_ms",
            "throughput_rps",
            "parallelism",
            "words"
        ],
        "summary line {:?}",
        lines[0]
    );
    let value = |i: usize| fields[i].split_once('=').expect("key=value").1;
    let records = value(0).parse().expect("records is an integer");
    let _: u64 = value(1).parse().expect("elapsed_ms is an integer");
    let rps: u64 = value(2)
        .parse()
        .expect("throughput_rps is a whole number of records per second");
    if records == 0 {
        assert_eq!(rps, 0, "no records but throughput {rps}");
    }
    let parallelism = value(3).parse().expect("parallelism is an integer");
    let words = value(4).parse().expect("words is an integer");
    Summary {
        records,
        parallelism,
        words,
    }
}

#[test]
fn file_wordcount_matches_oracle_at_every_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    let text = random_text(0x5eed_1234, 4000);
    std::fs::File::create(&input)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let expected = oracle_counts(&text);
    let total: u64 = expected.values().sum();
    // The generated text really exercises the interesting cases.
    assert!(text.contains("\r\n") && text.contains("\n\n") && !text.ends_with('\n'));
    assert!(expected.contains_key("ärger") && expected.contains_key("école"));
    assert!(expected.keys().any(|w| w.len() == 23) && expected.keys().any(|w| w.len() > 40));
    assert!(total > 10_000, "only {total} words");

    for p in [1usize, 2, 4] {
        let output = dir.path().join(format!("out-{p}.csv"));
        let out = run_ok(
            floe()
                .args(["run", "wordcount", "--input"])
                .arg(&input)
                .args([
                    "--parallelism",
                    &p.to_string(),
                    "--output",
                    output.to_str().unwrap(),
                ]),
        );
        let got = parse_counts(&output);
        if got != expected {
            let mut diff: Vec<String> = expected
                .keys()
                .chain(got.keys())
                .filter(|w| got.get(*w) != expected.get(*w))
                .map(|w| format!("{w:?}: got {:?} want {:?}", got.get(w), expected.get(w)))
                .collect();
            diff.sort();
            diff.dedup();
            panic!(
                "parallelism {p}: {} words differ: {:?}",
                diff.len(),
                &diff[..diff.len().min(20)]
            );
        }
        let summary = parse_summary(&out.stderr);
        assert_eq!(summary.words, total, "parallelism {p}: summary words");
        assert_eq!(
            summary.records,
            text.lines().count() as u64,
            "parallelism {p}: summary records (lines)"
        );
        assert_eq!(
            summary.parallelism, p,
            "parallelism {p}: summary parallelism"
        );
    }
}

#[test]
fn empty_file_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.txt");
    std::fs::write(&input, "\n\r\n ,;!\n").unwrap();
    assert!(oracle_counts("\n\r\n ,;!\n").is_empty());
    let output = dir.path().join("out.csv");
    let out = run_ok(
        floe()
            .args(["run", "wordcount", "--input"])
            .arg(&input)
            .args(["--parallelism", "2", "--output", output.to_str().unwrap()]),
    );
    assert!(parse_counts(&output).is_empty());
    let summary = parse_summary(&out.stderr);
    assert_eq!(summary.words, 0);
    assert_eq!(summary.records, 3, "three (empty) lines");
    assert_eq!(summary.parallelism, 2);
}

#[test]
fn generated_wordcount_matches_word_generator() {
    const RECORDS: u64 = 200_000;
    let generator = floe::text::WordGenerator::new(500, 7);
    let mut expected: HashMap<String, u64> = HashMap::new();
    for i in 0..RECORDS {
        *expected.entry(generator.word(i)).or_insert(0) += 1;
    }
    assert_eq!(expected.values().sum::<u64>(), RECORDS);

    let dir = tempfile::tempdir().unwrap();
    for p in [1usize, 2] {
        let output = dir.path().join(format!("gen-{p}.csv"));
        let out = run_ok(floe().args([
            "run",
            "wordcount",
            "--records",
            &RECORDS.to_string(),
            "--vocabulary",
            "500",
            "--seed",
            "7",
            "--parallelism",
            &p.to_string(),
            "--output",
            output.to_str().unwrap(),
        ]));
        let got = parse_counts(&output);
        assert_eq!(
            got.values().sum::<u64>(),
            RECORDS,
            "parallelism {p}: sum of counts"
        );
        assert_eq!(got, expected, "parallelism {p}");
        let summary = parse_summary(&out.stderr);
        assert_eq!(summary.records, RECORDS);
        assert_eq!(summary.words, RECORDS);
        assert_eq!(summary.parallelism, p);
    }
}
