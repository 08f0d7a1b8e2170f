//! Every command the README's "The CLI" section shows, run through the
//! `floe` binary at a small size, with its output lines checked: so that no
//! command can break without a test going red.
//!
//! The story: `floe bench mailbox` panicked ("`spawn_local` called from
//! outside of a `task::LocalSet`") for a while and nothing noticed, because
//! no test ran it. Here every `run` job (with and without `--output`, with
//! each `--state` backend, with checkpoints and an injected failure), both
//! `bench` commands and `checkpoints list|verify` run; each output is
//! compared with an oracle computed in this file (HashMaps over the input)
//! and each summary field with what the output implies (the word counts
//! sum to `words=`, `records=` is the input's lines or the generated
//! records, `windows_fired=` is the lines written).

use crate::cli_common;
use cli_common::{
    SplitMix, WindowInput, count_words, parse_counts, pipelines_oracle, run_ok_output, sorted,
    summary_field,
};
use std::collections::HashMap;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

// ---------------------------------------------------------------- wordcount

/// The generated words counted in a HashMap.
fn generated_oracle(records: u64, vocabulary: usize, seed: u64) -> HashMap<String, u64> {
    let generator = floe::text::WordGenerator::new(vocabulary, seed);
    let mut counts = HashMap::new();
    for i in 0..records {
        *counts.entry(generator.word(i)).or_insert(0) += 1;
    }
    counts
}

/// Checks the word count summary against the counts written: `words=` is
/// their sum, `records=` what the source emitted.
fn check_wordcount_summary(stderr: &str, counts: &HashMap<String, u64>, records: u64) {
    assert_eq!(
        summary_field(stderr, "words"),
        counts.values().sum::<u64>(),
        "{stderr}"
    );
    assert_eq!(summary_field(stderr, "records"), records, "{stderr}");
    for field in ["elapsed_ms", "throughput_rps", "parallelism"] {
        summary_field(stderr, field);
    }
}

#[test]
fn run_wordcount_generated_to_stdout_and_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = generated_oracle(5_000, 50, 7);
    let common = [
        "run",
        "wordcount",
        "--records",
        "5000",
        "--vocabulary",
        "50",
        "--seed",
        "7",
        "--parallelism",
        "2",
        "--batch-size",
        "64",
        "--arbiters",
        "2",
    ];
    let (stdout, stderr) = run_ok_output(&common);
    let counts = parse_counts(&stdout);
    assert_eq!(counts, oracle);
    check_wordcount_summary(&stderr, &counts, 5_000);
    assert_eq!(summary_field(&stderr, "parallelism"), 2);

    let out = dir.path().join("counts.txt");
    let (stdout, stderr) = run_ok_output(&[&common[..], &["--output", s(&out)]].concat());
    assert!(stdout.is_empty(), "{stdout}");
    let counts = parse_counts(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(counts, oracle);
    check_wordcount_summary(&stderr, &counts, 5_000);
}

/// A text of `lines` lines of words of a small vocabulary, in mixed case,
/// with punctuation and CRLF endings here and there.
fn text(lines: usize, seed: u64) -> String {
    let words = [
        "Alpha", "beta", "GAMMA", "delta", "épée", "x1", "naïve", "Zeta",
    ];
    let seps = [" ", ", ", "; ", " -- ", "\t", "!  "];
    let mut rng = SplitMix(seed);
    let mut out = String::new();
    for _ in 0..lines {
        for _ in 0..rng.below(7) {
            out.push_str(words[rng.below(words.len() as u64) as usize]);
            out.push_str(seps[rng.below(seps.len() as u64) as usize]);
        }
        out.push_str(if rng.below(4) == 0 { "\r\n" } else { "\n" });
    }
    out
}

#[test]
fn run_wordcount_on_an_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let text = text(3_000, 3);
    std::fs::write(&input, &text).unwrap();
    let out = dir.path().join("counts.txt");
    let (_, stderr) = run_ok_output(&[
        "run",
        "wordcount",
        "--input",
        s(&input),
        "--parallelism",
        "3",
        "--output",
        s(&out),
    ]);
    let counts = parse_counts(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(counts, count_words(&text));
    check_wordcount_summary(&stderr, &counts, text.lines().count() as u64);
}

#[test]
fn run_wordcount_with_each_state_backend() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = generated_oracle(4_000, 30, 5);
    for backend in ["heap", "redb"] {
        let out = dir.path().join(format!("{backend}.txt"));
        let state_dir = dir.path().join(format!("{backend}-state"));
        let mut args = vec![
            "run",
            "wordcount",
            "--records",
            "4000",
            "--vocabulary",
            "30",
            "--seed",
            "5",
            "--state",
            backend,
            "--output",
            s(&out),
        ];
        if backend == "redb" {
            args.extend_from_slice(&["--state-dir", s(&state_dir)]);
        }
        let (_, stderr) = run_ok_output(&args);
        let counts = parse_counts(&std::fs::read_to_string(&out).unwrap());
        assert_eq!(counts, oracle, "--state {backend}");
        check_wordcount_summary(&stderr, &counts, 4_000);
    }
}

// ------------------------------------------------------------------- window

const WINDOW_MS: i64 = 100;
const OUT_OF_ORDERNESS: i64 = 30;

/// `key,timestamp_ms,value` lines, out of order by less than the bound (so
/// none is late with per-record watermarks), and their events.
fn window_input(lines: usize, seed: u64) -> (String, Vec<(String, i64, i64)>) {
    cli_common::window_input(
        seed,
        &WindowInput {
            lines,
            start: 10_000,
            step: 5,
            jitter: OUT_OF_ORDERNESS as u64 / 2,
            keys: 7,
            low: -50,
            high: 49,
        },
    )
}

#[test]
fn run_window_with_each_state_backend() {
    let dir = tempfile::tempdir().unwrap();
    let (text, events) = window_input(2_000, 9);
    let input = dir.path().join("events.csv");
    std::fs::write(&input, &text).unwrap();
    let oracle = cli_common::tumbling_sums(&events, WINDOW_MS);
    for state in [&[][..], &["--state", "heap"], &["--state", "redb"]] {
        let out = dir.path().join("fired.csv");
        let late = dir.path().join("late.csv");
        let state_dir = dir.path().join("state");
        let window = format!("tumbling:{WINDOW_MS}");
        let ooo = OUT_OF_ORDERNESS.to_string();
        let mut args = vec![
            "run",
            "window",
            "--input",
            s(&input),
            "--window",
            &window,
            "--agg",
            "sum",
            "--out-of-orderness",
            &ooo,
            "--allowed-lateness",
            "0",
            "--watermarks",
            "per-record",
            "--parallelism",
            "2",
            "--on-bad-record",
            "fail",
            "--output",
            s(&out),
            "--late-output",
            s(&late),
        ];
        args.extend_from_slice(state);
        if state.contains(&"redb") {
            args.extend_from_slice(&["--state-dir", s(&state_dir)]);
        }
        let (_, stderr) = run_ok_output(&args);
        let fired = sorted(&std::fs::read_to_string(&out).unwrap());
        assert_eq!(fired, oracle, "{state:?}");
        assert_eq!(std::fs::read_to_string(&late).unwrap(), "", "{state:?}");
        assert_eq!(summary_field(&stderr, "records"), 2_000, "{stderr}");
        assert_eq!(summary_field(&stderr, "late"), 0, "{stderr}");
        assert_eq!(summary_field(&stderr, "bad"), 0, "{stderr}");
        assert_eq!(
            summary_field(&stderr, "windows_fired"),
            oracle.len() as u64,
            "{stderr}"
        );
    }
}

#[test]
fn run_window_to_stdout_with_explained_watermarks() {
    let dir = tempfile::tempdir().unwrap();
    let (text, events) = window_input(500, 4);
    let input = dir.path().join("events.csv");
    std::fs::write(&input, &text).unwrap();
    let window = format!("tumbling:{WINDOW_MS}");
    let ooo = OUT_OF_ORDERNESS.to_string();
    let (stdout, stderr) = run_ok_output(&[
        "run",
        "window",
        "--input",
        s(&input),
        "--window",
        &window,
        "--agg",
        "sum",
        "--out-of-orderness",
        &ooo,
        "--watermarks",
        "per-record",
        "--explain-watermarks",
    ]);
    assert_eq!(
        sorted(&stdout),
        cli_common::tumbling_sums(&events, WINDOW_MS)
    );
    assert_eq!(summary_field(&stderr, "records"), 500, "{stderr}");
    assert!(
        stderr.lines().any(|l| l.contains("Window")),
        "--explain-watermarks should describe the window subtasks:\n{stderr}"
    );
}

// ---------------------------------------------------------------- pipelines

#[test]
fn run_pipelines_to_stdout_and_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = pipelines_oracle(3_000, 13);
    let common = [
        "run",
        "pipelines",
        "--parallelism",
        "3",
        "--records",
        "3000",
        "--seed",
        "13",
    ];
    let (stdout, stderr) = run_ok_output(&common);
    assert_eq!(sorted(&stdout), oracle);
    assert_eq!(summary_field(&stderr, "records"), 3_000, "{stderr}");
    assert_eq!(summary_field(&stderr, "parallelism"), 3, "{stderr}");

    for state in [&[][..], &["--state", "heap"]] {
        let out = dir.path().join("out.txt");
        let (_, stderr) = run_ok_output(&[&common[..], &["--output", s(&out)], state].concat());
        let lines = sorted(&std::fs::read_to_string(&out).unwrap());
        if state.is_empty() {
            assert_eq!(lines, oracle);
        } else {
            // The same lines, each with its key's running count appended.
            let stripped: Vec<String> = sorted(
                &lines
                    .iter()
                    .map(|l| l.rsplit_once(',').expect("a count").0.to_string() + "\n")
                    .collect::<String>(),
            );
            assert_eq!(stripped, oracle);
        }
        assert_eq!(summary_field(&stderr, "records"), 3_000, "{stderr}");
    }
}

// ------------------------------------------------ checkpoints, list, verify

#[test]
fn checkpoint_flags_then_checkpoints_list_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let out = dir.path().join("counts.txt");
    // One injected failure: the source holds its end until a checkpoint
    // completed and the failure fired, so the directory has a checkpoint
    // whatever the speed of the machine.
    let (_, stderr) = run_ok_output(&[
        "run",
        "wordcount",
        "--records",
        "6000",
        "--vocabulary",
        "40",
        "--seed",
        "3",
        "--batch-size",
        "128",
        "--checkpoint-interval",
        "10",
        "--checkpoint-dir",
        s(&ck),
        "--retain-checkpoints",
        "2",
        "--inject-failures",
        "1",
        "--restart",
        "fixed:3,0",
        "--failover",
        "all",
        "--output",
        s(&out),
    ]);
    let counts = parse_counts(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(counts, generated_oracle(6_000, 40, 3));
    assert!(summary_field(&stderr, "checkpoints") >= 1, "{stderr}");
    assert_eq!(summary_field(&stderr, "failed_checkpoints"), 0, "{stderr}");
    assert_eq!(summary_field(&stderr, "restarts"), 1, "{stderr}");
    for field in [
        "max_checkpoint_ms",
        "channel_state_bytes",
        "restarted_subtasks",
        "max_recovery_ms",
    ] {
        summary_field(&stderr, field);
    }

    let (listed, _) = run_ok_output(&["checkpoints", "list", s(&ck)]);
    let mut lines = listed.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "id",
            "time",
            "size_bytes",
            "duration_ms",
            "alignment_ms",
            "channel_state_bytes",
            "kind"
        ]
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert!((1..=2).contains(&rows.len()), "{listed}");
    for row in &rows {
        assert_eq!(row.len(), 7, "{listed}");
        assert!(
            row[0].parse::<u64>().is_ok() && row[6] == "aligned",
            "{listed}"
        );
        assert!(ck.join(format!("chk-{}", row[0])).is_dir(), "{listed}");
    }

    let (verified, _) = run_ok_output(&["checkpoints", "verify", s(&ck)]);
    assert_eq!(verified.lines().count(), rows.len(), "{verified}");
    assert!(verified.lines().all(|l| l.ends_with(": ok")), "{verified}");
}

// ------------------------------------------------------------------ benches

/// The `name=value` fields of a `RESULT` line.
fn fields(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|f| f.split_once('='))
        .collect()
}

#[test]
fn bench_mailbox_prints_a_result_per_bench_and_a_table() {
    let (stdout, _) = run_ok_output(&[
        "bench",
        "mailbox",
        "--records",
        "3000",
        "--reps",
        "1",
        "--batch-size",
        "64",
    ]);
    let results: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .collect();
    let names: Vec<&str> = results.iter().map(|l| fields(l)["name"]).collect();
    assert_eq!(
        names,
        ["actix-unbatched", "floe-channel", "floe-pipeline-2hop"],
        "{stdout}"
    );
    for line in &results {
        let f = fields(line);
        assert_eq!(f["records"], "3000", "{line}");
        assert!(f["secs"].parse::<f64>().is_ok_and(|x| x >= 0.0), "{line}");
        assert!(f["rate_per_s"].parse::<f64>().is_ok(), "{line}");
    }
    // The table: a header and a row per bench, the baseline at 1.0x.
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("bench "))
        .collect();
    assert_eq!(table.len(), 4, "{stdout}");
    for (row, name) in table[1..].iter().zip(&names) {
        assert!(row.starts_with(name) && row.ends_with('x'), "{stdout}");
    }
    assert!(table[1].ends_with("1.0x"), "{stdout}");
}

#[test]
fn bench_window_prints_a_result_per_window_kind() {
    let (stdout, _) = run_ok_output(&[
        "bench",
        "window",
        "--records",
        "4000",
        "--keys",
        "8",
        "--parallelism",
        "2",
        "--windows",
        "tumbling,sliding",
    ]);
    let results: Vec<HashMap<&str, &str>> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .map(fields)
        .collect();
    let names: Vec<&str> = results.iter().map(|f| f["name"]).collect();
    assert_eq!(
        names,
        ["floe-window-tumbling", "floe-window-sliding"],
        "{stdout}"
    );
    for f in &results {
        assert_eq!(f["records"], "4000", "{stdout}");
        assert_eq!(f["parallelism"], "2", "{stdout}");
        assert!(f["windows_fired"].parse::<u64>().unwrap() > 0, "{stdout}");
    }
    // Every tumbling window of 1 s is in ten sliding windows of 10 s, and
    // a sliding one holds at least one tumbling one.
    let fired = |i: usize| results[i]["windows_fired"].parse::<u64>().unwrap();
    assert!(
        fired(0) <= fired(1) && fired(1) <= 10 * fired(0),
        "{stdout}"
    );
}
