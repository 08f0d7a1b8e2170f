//! A FIFO as `--input` is read as a stream. It used to be taken for an
//! empty file (its length is 0): `records=0`, exit 0, and the writer got
//! SIGPIPE; with no writer, the check that the input is readable blocked
//! forever. Now one source subtask reads it until its writer closes it,
//! and the output is the oracle's. A pipe cannot be read again, so a
//! checkpoint, savepoint or restore flag with it is one error line, given
//! before the pipe is opened (no writer needed).
#![cfg(unix)]

use crate::cli_common;
use cli_common::{
    WindowInput, count_words, fails_with_one_error_line, parse_counts, run_ok_output, sorted,
    summary_field, tumbling_sums, window_input,
};
use std::io::Write;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// A new FIFO at `dir/name`.
fn mkfifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let c = std::ffi::CString::new(s(&path)).expect("no NUL in the path");
    // SAFETY: `c` is a NUL-terminated path that lives for the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
    path
}

/// A thread that opens the FIFO for writing (waiting for its reader),
/// writes `text` in pieces and closes it.
fn writer(path: &Path, text: String) -> std::thread::JoinHandle<()> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("the FIFO opens for writing once floe reads it");
        // Pieces that cut lines in two: the reader joins them.
        for piece in text.as_bytes().chunks(4093) {
            f.write_all(piece).expect("floe reads the whole pipe");
        }
    })
}

#[test]
fn wordcount_reads_a_fifo_as_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "words");
    let mut rng = cli_common::SplitMix(0x5eed_0033);
    let text: String = (0..30_000)
        .map(|i| format!("w{} x{}\r\n", rng.below(300), i % 7))
        .collect();
    let lines = text.lines().count() as u64;
    let out = dir.path().join("counts.txt");
    let writing = writer(&fifo, text.clone());
    let (_, stderr) = run_ok_output(&[
        "run",
        "wordcount",
        "--input",
        s(&fifo),
        "--parallelism",
        "2",
        "--output",
        s(&out),
    ]);
    writing.join().expect("the writer wrote everything");
    let got = parse_counts(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(got, count_words(&text));
    assert_eq!(summary_field(&stderr, "records"), lines, "{stderr}");
}

#[test]
fn window_reads_a_fifo_as_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "events");
    let (text, events) = window_input(
        0x5eed_0034,
        &WindowInput {
            lines: 20_000,
            start: 1_000_000,
            step: 4,
            jitter: 20,
            keys: 40,
            low: -1000,
            high: 1000,
        },
    );
    let writing = writer(&fifo, text);
    let (stdout, stderr) = run_ok_output(&[
        "run",
        "window",
        "--input",
        s(&fifo),
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--out-of-orderness",
        "50",
        "--parallelism",
        "2",
    ]);
    writing.join().expect("the writer wrote everything");
    assert_eq!(sorted(&stdout), tumbling_sums(&events, 1000));
    assert_eq!(
        summary_field(&stderr, "records"),
        events.len() as u64,
        "{stderr}"
    );
    assert_eq!(summary_field(&stderr, "late"), 0, "{stderr}");
}

/// Refused before the pipe is opened: no writer comes, and the command
/// still ends at once with one line naming the pipe.
#[test]
fn a_fifo_takes_no_checkpoint_flags() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "never-written");
    let ck = dir.path().join("ck");
    for extra in [
        &["--checkpoint-interval", "100"][..],
        &["--from-checkpoint", s(&ck)],
        &["--savepoint-dir", s(&ck)],
    ] {
        let mut args = vec!["run", "wordcount", "--input", s(&fifo)];
        args.extend_from_slice(extra);
        if extra[0] == "--from-checkpoint" {
            std::fs::create_dir_all(&ck).unwrap();
        }
        let line = fails_with_one_error_line(&args);
        assert!(
            line.contains(s(&fifo)) && line.contains("pipe"),
            "{extra:?}: {line}"
        );
    }
}
