//! The `floe` binary rejects bad input cleanly: a non-zero exit status and
//! exactly one line on stderr that names the problem (the file path,
//! "parallelism", "UTF-8", the unknown job or flag), with no panic message and
//! no backtrace, for a missing input file, a directory as input, a file that
//! is not valid UTF-8, `--parallelism 0`, a non-numeric parallelism,
//! `--batch-size 0`, `--vocabulary 0`, an unknown job and an unknown flag.
//!
//! `floe run window --on-bad-record skip` counts a line that is not valid
//! UTF-8 as a bad record like a malformed one and goes on (it used to fail
//! the job whatever the flag said); a UTF-8 byte order mark at the start of
//! an input is not part of its first line.

use std::path::Path;
use std::process::Command;

/// Runs `floe args...`, asserts it failed with exactly one clean stderr line,
/// and returns that line.
fn fails_with_one_line(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .env_remove("FLOE_LOG")
        // A panic anywhere would print a backtrace; make sure it shows.
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("floe binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "floe {args:?}: expected a non-zero exit code, got {:?}; stderr:\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "floe {args:?}: stderr shows a panic:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "floe {args:?}: expected exactly one line on stderr, got:\n{stderr}"
    );
    assert!(
        !lines[0].trim().is_empty(),
        "floe {args:?}: the stderr line is blank"
    );
    lines[0].to_string()
}

fn wordcount_on(path: &Path) -> String {
    fails_with_one_line(&[
        "run",
        "wordcount",
        "--input",
        path.to_str().expect("UTF-8 temp path"),
        "--parallelism",
        "2",
    ])
}

#[test]
fn missing_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("does-not-exist.txt");
    let line = wordcount_on(&path);
    assert!(
        line.contains(path.to_str().unwrap()),
        "the error should name the file: {line}"
    );
}

#[test]
fn directory_as_input() {
    let dir = tempfile::tempdir().unwrap();
    let line = wordcount_on(dir.path());
    assert!(
        line.contains(dir.path().to_str().unwrap()),
        "the error should name the directory: {line}"
    );
    assert!(
        line.to_lowercase().contains("directory"),
        "the error should say it is a directory: {line}"
    );
}

#[test]
fn input_that_is_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.txt");
    // Two valid lines, then "caf\xe9" (Latin-1), then more text.
    let mut bytes = b"hello world\r\nsecond line\n".to_vec();
    bytes.extend_from_slice(b"caf\xe9 au lait\nlast line\n");
    std::fs::write(&path, bytes).unwrap();
    let line = wordcount_on(&path);
    assert!(line.contains("UTF-8"), "the error should say UTF-8: {line}");
    assert!(
        line.contains(path.to_str().unwrap()),
        "the error should name the file: {line}"
    );
    assert!(
        line.contains("line 3"),
        "the error should give the line number: {line}"
    );
}

#[test]
fn zero_parallelism() {
    let line = fails_with_one_line(&["run", "wordcount", "--records", "10", "--parallelism", "0"]);
    assert!(
        line.contains("parallelism"),
        "the error should name the parallelism: {line}"
    );
}

#[test]
fn zero_parallelism_with_file_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.txt");
    std::fs::write(&path, "a b c\n").unwrap();
    let line = fails_with_one_line(&[
        "run",
        "wordcount",
        "--input",
        path.to_str().unwrap(),
        "--parallelism",
        "0",
    ]);
    assert!(
        line.contains("parallelism"),
        "the error should name the parallelism: {line}"
    );
}

#[test]
fn non_numeric_parallelism() {
    let line = fails_with_one_line(&["run", "wordcount", "--parallelism", "many"]);
    assert!(
        line.contains("parallelism") && line.contains("many"),
        "the error should name the flag and the value: {line}"
    );
}

#[test]
fn zero_batch_size() {
    let line = fails_with_one_line(&["run", "wordcount", "--records", "10", "--batch-size", "0"]);
    assert!(
        line.contains("batch"),
        "the error should name the batch size: {line}"
    );
}

#[test]
fn unknown_job() {
    let line = fails_with_one_line(&["run", "nosuchjob"]);
    assert!(
        line.contains("nosuchjob"),
        "the error should name the job: {line}"
    );
}

#[test]
fn unknown_flag() {
    let line = fails_with_one_line(&["run", "wordcount", "--records", "10", "--no-such-flag"]);
    assert!(
        line.contains("--no-such-flag"),
        "the error should name the flag: {line}"
    );
}

#[test]
fn zero_vocabulary() {
    let line = fails_with_one_line(&["run", "wordcount", "--records", "10", "--vocabulary", "0"]);
    assert!(
        line.contains("vocabulary"),
        "the error should name the vocabulary: {line}"
    );
}

/// Window input in event-time order (none late): line 3 is Latin-1, line 5
/// malformed, the rest valid.
const WINDOW_BYTES: &[u8] = b"a,1000,5\nb,1200,7\nb,caf\xe9,3\na,1500,1\nnot a record\nb,2100,4\n";

/// Runs `floe args...` and returns (success, stdout, stderr).
fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .env_remove("FLOE_LOG")
        .output()
        .expect("floe binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `floe run window` over `path` with `--on-bad-record on_bad_record`.
fn window_on(path: &Path, on_bad_record: &str) -> Vec<String> {
    [
        "run",
        "window",
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--watermarks",
        "per-record",
        "--parallelism",
        "1",
        "--on-bad-record",
        on_bad_record,
        "--input",
        path.to_str().expect("UTF-8 temp path"),
    ]
    .map(str::to_string)
    .to_vec()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The sorted tumbling 1 s sums of the valid lines of `bytes`, computed here.
fn window_oracle(bytes: &[u8]) -> Vec<String> {
    let mut sums = std::collections::BTreeMap::<(String, i64), i64>::new();
    for line in bytes.split(|b| *b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let line = line.trim_start_matches('\u{feff}');
        let f: Vec<&str> = line.split(',').collect();
        let (Some(k), Some(Ok(ts)), Some(Ok(v))) = (
            f.first(),
            f.get(1).map(|t| t.parse::<i64>()),
            f.get(2).map(|v| v.parse::<i64>()),
        ) else {
            continue;
        };
        *sums
            .entry((k.to_string(), ts.div_euclid(1000) * 1000))
            .or_insert(0) += v;
    }
    sums.into_iter()
        .map(|((k, start), v)| format!("{k},{start},{},{v}", start + 1000))
        .collect()
}

fn sorted(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn window_skip_covers_lines_that_are_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.csv");
    std::fs::write(&path, WINDOW_BYTES).unwrap();
    let (ok, stdout, stderr) = run(&strs(&window_on(&path, "skip")));
    assert!(ok, "skip should go on past the bad lines:\n{stderr}");
    assert_eq!(sorted(&stdout), window_oracle(WINDOW_BYTES));
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("records="))
        .unwrap_or_else(|| panic!("no summary:\n{stderr}"));
    assert!(summary.contains(" bad=2 "), "{summary}");
    assert!(summary.starts_with("records=6 "), "{summary}");

    let line = fails_with_one_line(&strs(&window_on(&path, "fail")));
    assert!(
        line.contains("UTF-8") && line.contains("line 3") && line.contains(path.to_str().unwrap()),
        "the error should name the file, the line and UTF-8: {line}"
    );
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bom.csv");
    let bytes = [b"\xEF\xBB\xBF".as_slice(), b"a,1000,5\na,1200,7\n"].concat();
    std::fs::write(&path, &bytes).unwrap();
    let (ok, stdout, stderr) = run(&strs(&window_on(&path, "fail")));
    assert!(ok, "{stderr}");
    // One window of key "a" (not "\u{feff}a" and "a").
    assert_eq!(sorted(&stdout), ["a,1000,2000,12"]);
    assert_eq!(window_oracle(&bytes), ["a,1000,2000,12"]);

    let words = dir.path().join("bom.txt");
    std::fs::write(&words, [b"\xEF\xBB\xBF".as_slice(), b"x1 y\n"].concat()).unwrap();
    let (ok, stdout, stderr) = run(&["run", "wordcount", "--input", words.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert_eq!(sorted(&stdout), ["x1,1", "y,1"]);
}

/// A negative number for a numeric flag says the flag needs a
/// non-negative number (clap alone took `-5` for an unknown flag).
#[test]
fn negative_numbers_name_the_flag() {
    for args in [
        &["run", "wordcount", "--records", "-5"][..],
        &["run", "pipelines", "--parallelism=-3"],
        &["run", "wordcount", "--records", "10", "--sink-rate", "-2.5"],
    ] {
        let line = fails_with_one_line(args);
        let (flag, value) = match args.last().expect("a value").split_once('=') {
            Some((flag, value)) => (flag, value),
            None => (args[args.len() - 2], args[args.len() - 1]),
        };
        assert!(
            line.contains(flag) && line.contains(value) && line.contains("non-negative number"),
            "{args:?}: {line}"
        );
    }
}

/// A parallelism above the max parallelism (the number of key groups,
/// which bounds every operator) is refused before the job starts, on
/// every job; it used to start 100,000 pipelines and grow to 2 GB.
#[test]
fn parallelism_above_the_max_parallelism() {
    let max = floe::Config::default().max_parallelism as usize;
    for job in ["wordcount", "pipelines", "window"] {
        let above = (max + 1).to_string();
        let mut args = vec!["run", job, "--parallelism", above.as_str()];
        if job == "window" {
            args.extend_from_slice(&["--input", "/dev/null", "--window", "tumbling:10"]);
            args.extend_from_slice(&["--agg", "sum"]);
        }
        let line = fails_with_one_line(&args);
        assert!(
            line.contains(&format!("--parallelism {above}"))
                && line.contains(&format!("max parallelism {max}")),
            "{job}: {line}"
        );
    }
}

/// More arbiters than the open-files limit allows (each holds a few
/// files) is one line before anything starts; it used to panic with "Too
/// many open files".
#[test]
fn arbiters_above_the_open_files_limit() {
    let Some(max) = floe::config::max_arbiters() else {
        // No finite limit (`ulimit -n unlimited`): nothing to exceed.
        return;
    };
    let above = (max + 1).to_string();
    let line = fails_with_one_line(&["run", "wordcount", "--records", "10", "--arbiters", &above]);
    assert!(
        line.contains(&format!("--arbiters {above}")) && line.contains("open files"),
        "{line}"
    );
}

/// A checkpoint of one job restored into another (here the word count's
/// built-in sum into its `--state heap` process function) names the
/// operator it cannot place and says what a CLI user can do; `.uid(..)`
/// is for programs.
#[test]
fn a_restore_into_another_job_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("sp");
    let out = dir.path().join("out.txt");
    // A savepoint mid-input: the sum holds the counts so far.
    let (ok, _, stderr) = run(&[
        "run",
        "wordcount",
        "--records",
        "2000",
        "--checkpoint-interval",
        "1000",
        "--savepoint-at-records",
        "1000",
        "--savepoint-dir",
        sp.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let savepoint = stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .unwrap_or_else(|| panic!("no savepoint line:\n{stderr}"));
    let line = fails_with_one_line(&[
        "run",
        "wordcount",
        "--records",
        "2000",
        "--state",
        "heap",
        "--from-checkpoint",
        savepoint,
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(
        line.contains("Keyed Sum") && line.contains("--from-checkpoint") && !line.contains(".uid"),
        "{line}"
    );
}
