//! The `floe` binary rejects bad input cleanly: a non-zero exit status and
//! exactly one line on stderr that names the problem (the file path,
//! "parallelism", "UTF-8", the unknown job or flag), with no panic message and
//! no backtrace, for a missing input file, a directory as input, a file that
//! is not valid UTF-8, `--parallelism 0`, a non-numeric parallelism,
//! `--batch-size 0`, an unknown job and an unknown flag.

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
