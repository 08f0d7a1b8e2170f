//! Unaligned checkpoints on every job of the `floe` binary, under a throttled
//! sink with one credit per channel, with a failure injected after a
//! completed checkpoint.
//!
//! The bug: `run wordcount --input F` never took an unaligned checkpoint (the
//! text file source's lines could not be recorded as channel state, so its
//! barriers queued behind them and the checkpoints were aborted when the
//! source finished), and `run pipelines` recorded no channel state at all
//! (none of its channels could be encoded). Every job's every channel can now
//! hold channel state. Each run here must complete checkpoints while the sink
//! is throttled, record channel state, restore from one after the injected
//! failure, and still end with the oracle's output: a HashMap count for word
//! count, a fault-free run without checkpoints for window and pipelines.
//! Nothing is timed: the sink's throttle keeps data in flight.

use crate::cli_common;
use cli_common::{SplitMix, run_ok, summary_field};
use std::collections::HashMap;
use std::path::Path;

/// The flags every run shares: checkpoints every 200 ms, unaligned, one
/// credit per channel, one injected failure.
const UNALIGNED: &[&str] = &[
    "--checkpoint-interval",
    "200",
    "--unaligned",
    "--credits",
    "1",
    "--inject-failures",
    "1",
];

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Runs `args` + [`UNALIGNED`] + a throttle of `rate` (the word count's
/// `--count-rate`, the other jobs' `--sink-rate`); asserts the checkpoint
/// facts of the summary line and returns stderr.
fn run_unaligned(args: &[&str], rate: &str) -> String {
    let mut all = args.to_vec();
    all.extend_from_slice(UNALIGNED);
    let throttle = if args.get(1) == Some(&"wordcount") {
        "--count-rate"
    } else {
        "--sink-rate"
    };
    all.extend_from_slice(&[throttle, rate]);
    let stderr = run_ok(&all);
    assert!(
        summary_field(&stderr, "checkpoints") >= 2,
        "fewer than 2 checkpoints completed under the throttled sink:\n{stderr}"
    );
    assert!(
        summary_field(&stderr, "channel_state_bytes") > 0,
        "no channel state recorded although data was in flight:\n{stderr}"
    );
    assert!(
        summary_field(&stderr, "restarts") >= 1,
        "the injected failure did not restart the job:\n{stderr}"
    );
    stderr
}

/// Reads `word,count` lines, failing on a word written twice.
fn read_counts(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).expect("read the output");
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

/// The sorted lines of a file, or of every file of a directory (a parallel
/// sink writes one `part-N` file per subtask).
fn sorted_lines(path: &Path) -> Vec<String> {
    let files: Vec<std::path::PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .expect("read the output directory")
            .map(|e| e.expect("a directory entry").path())
            .collect()
    } else {
        vec![path.to_path_buf()]
    };
    let mut lines: Vec<String> = files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read the output")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn wordcount_from_a_file_takes_unaligned_checkpoints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("words.txt");
    let mut rng = SplitMix(7);
    let mut text = String::new();
    for _ in 0..40_000 {
        for k in 0..3 {
            if k > 0 {
                text.push(' ');
            }
            text.push_str(&format!("w{}", rng.below(300)));
        }
        text.push('\n');
    }
    std::fs::write(&input, &text).expect("write the input");
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for line in text.lines() {
        for w in floe::tokenize(line) {
            *oracle.entry(w).or_insert(0) += 1;
        }
    }
    let output = dir.path().join("counts.txt");
    // Small batches: the lines in flight are few, so the source is still
    // reading when the checkpoints come, before and after the restart.
    run_unaligned(
        &[
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--batch-size",
            "64",
            "--output",
            s(&output),
        ],
        "20000",
    );
    assert_eq!(read_counts(&output), oracle);
}

#[test]
fn generated_wordcount_takes_unaligned_checkpoints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = dir.path().join("counts.txt");
    let (records, vocabulary, seed) = (60_000u64, 400usize, 3u64);
    let generator = floe::text::WordGenerator::new(vocabulary, seed);
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for i in 0..records {
        *oracle.entry(generator.word(i)).or_insert(0) += 1;
    }
    run_unaligned(
        &[
            "run",
            "wordcount",
            "--records",
            &records.to_string(),
            "--vocabulary",
            &vocabulary.to_string(),
            "--seed",
            &seed.to_string(),
            "--output",
            s(&output),
        ],
        "10000",
    );
    assert_eq!(read_counts(&output), oracle);
}

#[test]
fn window_takes_unaligned_checkpoints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let mut rng = SplitMix(5);
    let mut text = String::new();
    for i in 0..40_000u64 {
        let ts = i * 10 + rng.below(100);
        text.push_str(&format!("k{},{ts},{}\n", rng.below(50), rng.below(100)));
    }
    std::fs::write(&input, &text).expect("write the input");
    let job = |output: &Path| {
        vec![
            "run".to_string(),
            "window".into(),
            "--input".into(),
            s(&input).into(),
            "--window".into(),
            "tumbling:1000".into(),
            "--agg".into(),
            "sum".into(),
            "--watermarks".into(),
            "per-record".into(),
            "--output".into(),
            s(output).into(),
        ]
    };
    let expected = dir.path().join("expected.txt");
    let args = job(&expected);
    run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let output = dir.path().join("fired.txt");
    let args = job(&output);
    run_unaligned(&args.iter().map(String::as_str).collect::<Vec<_>>(), "5000");
    assert_eq!(sorted_lines(&output), sorted_lines(&expected));
}

#[test]
fn pipelines_take_unaligned_checkpoints() {
    let dir = tempfile::tempdir().expect("temp dir");
    let job = |output: &Path| {
        vec![
            "run".to_string(),
            "pipelines".into(),
            "--records".into(),
            "100000".into(),
            "--seed".into(),
            "9".into(),
            "--output".into(),
            s(output).into(),
        ]
    };
    let expected = dir.path().join("expected.txt");
    let args = job(&expected);
    run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let output = dir.path().join("out.txt");
    let args = job(&output);
    run_unaligned(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        "10000",
    );
    assert_eq!(sorted_lines(&output), sorted_lines(&expected));
}
