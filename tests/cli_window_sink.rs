//! The window job's sink at the window's parallelism: written directly
//! (stdout, or a file without checkpointing) the sink is chained into the
//! window, so each window subtask writes its own firings to the one shared
//! output, a batch of whole lines at a time.
//!
//! - the job's graph (`/status`) shows the sink with the window's
//!   parallelism and its edge from the window chained, for a file and for
//!   stdout; a throttled sink (`--sink-rate`) and the transactional file
//!   output (checkpointing on) keep one subtask;
//! - whatever the parallelism, the output holds every firing exactly once
//!   and only whole lines: its lines, as a multiset, equal the tumbling
//!   sums computed in a `HashMap`, with enough firings at the end of the
//!   input that one subtask's batch is written in several chunks.

mod cli_common;
use cli_common::{Reap, WindowInput, free_port, get, run_ok_output, summary_field};

use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const WINDOW_MS: i64 = 1000;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `lines` seeded lines over `keys` keys: timestamps rise with jitter below
/// the out-of-orderness (50 ms), so no record is late.
fn input(seed: u64, lines: usize, keys: u64) -> (String, Vec<(String, i64, i64)>) {
    cli_common::window_input(
        seed,
        &WindowInput {
            lines,
            start: 1_000_000,
            step: 4,
            jitter: 20,
            keys,
            low: -1000,
            high: 1000,
        },
    )
}

/// The oracle: tumbling sums per (key, window) in a `HashMap`, as sorted
/// `key,start,end,sum` lines.
fn oracle(events: &[(String, i64, i64)]) -> Vec<String> {
    let mut sums: HashMap<(String, i64), i64> = HashMap::new();
    for (key, ts, value) in events {
        let start = ts.div_euclid(WINDOW_MS) * WINDOW_MS;
        *sums.entry((key.clone(), start)).or_insert(0) += value;
    }
    let mut lines: Vec<String> = sums
        .into_iter()
        .map(|((k, start), v)| format!("{k},{start},{},{v}", start + WINDOW_MS))
        .collect();
    lines.sort();
    lines
}

/// The output's lines, sorted, each checked to be a whole firing line
/// (four fields, three of them numbers).
fn whole_lines(text: &str) -> Vec<String> {
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the output ends mid-line"
    );
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for line in &lines {
        let f: Vec<&str> = line.split(',').collect();
        assert!(
            f.len() == 4 && f[1..].iter().all(|n| n.parse::<i64>().is_ok()),
            "not a whole firing line: {line:?}"
        );
    }
    lines.sort();
    lines
}

fn window_args<'a>(input: &'a str, parallelism: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "window",
        "--input",
        input,
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--out-of-orderness",
        "50",
        "--parallelism",
        parallelism,
        // Small splits: every source subtask reads some of a small file.
        "--split-size",
        "4096",
    ]
}

/// Runs `floe ARGS` with an endpoint that lingers, waits for the summary
/// line (the job has then ended) and returns `/status`.
fn status_after(args: &[&str]) -> Value {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--metrics-linger-ms", "120000"])
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("floe runs");
    let mut child = Reap(child);
    let stderr = child.0.stderr.take().expect("stderr piped");
    let mut seen = String::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("records=") {
            let (code, body) = get(port, "/status");
            assert_eq!(code, 200, "{body}");
            return serde_json::from_str(&body).expect("/status is JSON");
        }
    }
    panic!("floe {args:?} ended without a summary line:\n{seen}");
}

/// The sink operator named `sink` of a status: its parallelism and whether
/// its input edge (from the window) is chained.
fn sink_placement(status: &Value, sink: &str) -> (u64, bool) {
    let graph = &status["graph"];
    let op = |name: &str| {
        graph["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("no operator {name} in {graph}"))
            .clone()
    };
    let (window, sink) = (op("Window"), op(sink));
    let edge = graph["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .find(|e| e["from"] == window["id"] && e["to"] == sink["id"])
        .unwrap_or_else(|| panic!("no edge window -> sink in {graph}"))
        .clone();
    (
        sink["parallelism"].as_u64().expect("parallelism"),
        edge["chained"].as_bool().expect("chained"),
    )
}

#[test]
fn a_direct_sink_runs_chained_at_the_window_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let (text, events) = input(0x51c_0001, 3_000, 13);
    let path = dir.path().join("ev.txt");
    std::fs::write(&path, text).unwrap();
    let out = dir.path().join("out.txt");
    let mut args = window_args(s(&path), "2");
    args.extend_from_slice(&["--output", s(&out)]);
    assert_eq!(
        sink_placement(&status_after(&args), "Text File Sink"),
        (2, true)
    );
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(whole_lines(&written), oracle(&events));

    // Stdout too.
    let args = window_args(s(&path), "2");
    assert_eq!(
        sink_placement(&status_after(&args), "Print Sink"),
        (2, true)
    );

    // A throttled sink stays one subtask: the rate is the sink's records.
    let mut args = window_args(s(&path), "2");
    args.extend_from_slice(&["--output", s(&out), "--sink-rate", "1000000"]);
    assert_eq!(
        sink_placement(&status_after(&args), "Text File Sink"),
        (1, false)
    );

    // With checkpointing the file is written by the one transactional
    // sink subtask, and holds every firing once.
    let tx = dir.path().join("tx.txt");
    let ck = dir.path().join("ck");
    let mut args = window_args(s(&path), "2");
    args.extend_from_slice(&[
        "--output",
        s(&tx),
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        s(&ck),
    ]);
    assert_eq!(
        sink_placement(&status_after(&args), "TransactionalFileSink"),
        (1, false)
    );
    let written = std::fs::read_to_string(&tx).unwrap();
    assert_eq!(whole_lines(&written), oracle(&events));
}

#[test]
fn a_parallel_sink_writes_every_firing_once_in_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    // 2,500 keys over ~60 windows: ~100,000 firings, most at the end of
    // the input, so a subtask's batches go beyond the writer's 256 KiB
    // chunk and the subtasks write at the same time.
    let (text, events) = input(0x51c_0002, 120_000, 2_500);
    let path = dir.path().join("ev.txt");
    std::fs::write(&path, text).unwrap();
    let want = oracle(&events);
    assert!(want.len() > 50_000, "only {} firings", want.len());
    for parallelism in ["1", "2", "3"] {
        let out = dir.path().join(format!("out-{parallelism}.txt"));
        let mut args = window_args(s(&path), parallelism);
        args.extend_from_slice(&["--output", s(&out)]);
        let (_, stderr) = run_ok_output(&args);
        assert_eq!(summary_field(&stderr, "late"), 0, "{stderr}");
        let written = std::fs::read_to_string(&out).unwrap();
        assert_eq!(whole_lines(&written), want, "--output, P={parallelism}");

        let (stdout, _) = run_ok_output(&window_args(s(&path), parallelism));
        assert_eq!(whole_lines(&stdout), want, "stdout, P={parallelism}");
    }
}
