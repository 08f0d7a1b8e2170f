//! `--output` has one shape on every `run` job, with and without
//! checkpointing: one file of lines (never a directory of part files),
//! `-` is stdout, and `/dev/null` works. An output naming the same file as
//! the input (or as the other output) is refused before anything is
//! written, however the path is spelled.
//!
//! The bugs: `floe run pipelines --output X` wrote a directory of part
//! files without checkpointing and one file with it, and refused
//! `/dev/null`; `--output -` wrote a file named `-`; and
//! `floe run wordcount --input F --output F` destroyed F and exited 0 with
//! wrong counts.

use crate::cli_common;
use cli_common::{SplitMix, count_words, parse_counts, pipelines_oracle, sorted, summary_field};
use std::path::Path;
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Runs `floe args...` in `cwd` (so a stray file named `-` would land in a
/// temporary directory).
fn floe_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .current_dir(cwd)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("floe binary runs")
}

/// Runs `floe args...` in `cwd`, asserts success; returns (stdout, stderr).
fn ok_in(cwd: &Path, args: &[&str]) -> (String, String) {
    let out = floe_in(cwd, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "floe {args:?} failed:\n{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Checkpointing off, and on (a long interval: the output's shape, not the
/// checkpoints, is under test).
const MODES: [&[&str]; 2] = [&[], &["--checkpoint-interval", "60000"]];

const WINDOW_INPUT: &str = "a,1000,5\nb,1200,7\na,1500,1\nb,2100,4\na,2999,2\n";

/// Tumbling 1 s window sums of [`WINDOW_INPUT`], computed in a HashMap.
fn window_oracle() -> Vec<String> {
    let mut sums = std::collections::HashMap::<(&str, i64), i64>::new();
    for line in WINDOW_INPUT.lines() {
        let f: Vec<&str> = line.split(',').collect();
        let (ts, value): (i64, i64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        *sums.entry((f[0], ts.div_euclid(1000) * 1000)).or_insert(0) += value;
    }
    let mut lines: Vec<String> = sums
        .into_iter()
        .map(|((k, start), v)| format!("{k},{start},{},{v}", start + 1000))
        .collect();
    lines.sort();
    lines
}

/// Each job's arguments (without `--output`) and its oracle's sorted lines.
fn jobs(dir: &Path) -> Vec<(Vec<String>, Vec<String>)> {
    let text = "The cat; the DOG.\nthe end\n";
    let input = dir.join("words.txt");
    std::fs::write(&input, text).unwrap();
    let events = dir.join("events.csv");
    std::fs::write(&events, WINDOW_INPUT).unwrap();
    let mut wordcount: Vec<String> = count_words(text)
        .into_iter()
        .map(|(w, c)| format!("{w},{c}"))
        .collect();
    wordcount.sort();
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        (
            args(&[
                "run",
                "wordcount",
                "--input",
                s(&input),
                "--parallelism",
                "2",
            ]),
            wordcount,
        ),
        (
            args(&[
                "run",
                "window",
                "--input",
                s(&events),
                "--window",
                "tumbling:1000",
                "--agg",
                "sum",
                "--watermarks",
                "per-record",
            ]),
            window_oracle(),
        ),
        (
            args(&["run", "pipelines", "--parallelism", "3", "--records", "900"]),
            pipelines_oracle(900, 42),
        ),
    ]
}

#[test]
fn output_is_one_file_on_every_job_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    for (job, oracle) in jobs(dir.path()) {
        for mode in MODES {
            let out = dir.path().join("out.txt");
            let _ = std::fs::remove_file(&out);
            let mut args: Vec<&str> = job.iter().map(String::as_str).collect();
            args.extend_from_slice(&["--output", s(&out)]);
            args.extend_from_slice(mode);
            let (stdout, _) = ok_in(dir.path(), &args);
            assert!(stdout.is_empty(), "{args:?} wrote to stdout: {stdout}");
            assert!(out.is_file(), "{args:?}: {} is not one file", out.display());
            let got = sorted(&std::fs::read_to_string(&out).unwrap());
            assert_eq!(got, oracle, "{args:?}");
        }
    }
}

#[test]
fn dash_is_stdout_and_dev_null_works_on_every_job_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    for (job, oracle) in jobs(dir.path()) {
        for mode in MODES {
            let mut args: Vec<&str> = job.iter().map(String::as_str).collect();
            args.extend_from_slice(mode);
            // No --output and --output - write the same lines to stdout.
            let (default, _) = ok_in(dir.path(), &args);
            assert_eq!(sorted(&default), oracle, "{args:?}");
            let dash = [&args[..], &["--output", "-"]].concat();
            let (stdout, stderr) = ok_in(dir.path(), &dash);
            assert_eq!(sorted(&stdout), oracle, "{dash:?}");
            assert!(!dir.path().join("-").exists(), "{dash:?} wrote a file '-'");
            summary_field(&stderr, "records");

            let null = [&args[..], &["--output", "/dev/null"]].concat();
            let (stdout, stderr) = ok_in(dir.path(), &null);
            assert!(stdout.is_empty(), "{null:?}: {stdout}");
            summary_field(&stderr, "records");
        }
    }
}

/// Asserts `args` fails with one `error:` line naming both flags and
/// leaves `input` as it was.
fn refused(cwd: &Path, args: &[&str], input: &Path, before: &[u8], flags: [&str; 2]) {
    let out = floe_in(cwd, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} should fail:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line expected:\n{stderr}");
    assert!(
        lines[0].starts_with("error:") && flags.iter().all(|f| lines[0].contains(f)),
        "{args:?}: the error should name {flags:?}: {}",
        lines[0]
    );
    assert_eq!(
        std::fs::read(input).unwrap(),
        before,
        "{args:?} changed the input"
    );
}

#[test]
fn an_output_naming_the_input_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let mut rng = SplitMix(8);
    let words: String = (0..500)
        .map(|_| format!("w{} ", rng.below(20)))
        .collect::<String>()
        + "\n";
    let text_input = dir.path().join("in.txt");
    std::fs::write(&text_input, &words).unwrap();
    let events = dir.path().join("events.csv");
    std::fs::write(&events, WINDOW_INPUT).unwrap();
    for input in [&text_input, &events] {
        let name = input.file_name().unwrap().to_str().unwrap();
        let hard = dir.path().join(format!("hard-{name}"));
        let soft = dir.path().join(format!("soft-{name}"));
        std::fs::hard_link(input, &hard).unwrap();
        std::os::unix::fs::symlink(input, &soft).unwrap();
        // The same file, spelled four ways.
        let spellings = [
            s(input).to_string(),
            format!("sub/../{name}"),
            s(&hard).to_string(),
            s(&soft).to_string(),
        ];
        let before = std::fs::read(input).unwrap();
        for output in &spellings {
            for mode in MODES {
                let mut args = if input == &text_input {
                    vec!["run", "wordcount", "--input", s(input)]
                } else {
                    vec![
                        "run",
                        "window",
                        "--input",
                        s(input),
                        "--window",
                        "tumbling:1000",
                        "--agg",
                        "sum",
                    ]
                };
                args.extend_from_slice(&["--output", output]);
                args.extend_from_slice(mode);
                refused(dir.path(), &args, input, &before, ["--input", "--output"]);
            }
        }
    }
    // The window's two outputs cannot be one file either.
    let out = dir.path().join("fired.csv");
    let args = [
        "run",
        "window",
        "--input",
        s(&events),
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--output",
        s(&out),
        "--late-output",
        "./fired.csv",
    ];
    std::fs::write(&out, "kept\n").unwrap();
    refused(
        dir.path(),
        &args,
        &out,
        b"kept\n",
        ["--output", "--late-output"],
    );
    // Distinct files still work.
    let counts = dir.path().join("counts.txt");
    ok_in(
        dir.path(),
        &[
            "run",
            "wordcount",
            "--input",
            s(&text_input),
            "--output",
            s(&counts),
        ],
    );
    assert_eq!(
        parse_counts(&std::fs::read_to_string(&counts).unwrap()),
        count_words(&words)
    );
}
