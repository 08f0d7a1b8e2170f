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

use crate::cli_common;
use cli_common::{WindowInput, run_ok_output, serve, summary_field, tumbling_sums};

use serde_json::Value;
use std::path::Path;

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
        sink_placement(&serve(&args).status(), "Text File Sink"),
        (2, true)
    );
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(whole_lines(&written), tumbling_sums(&events, WINDOW_MS));

    // Stdout too.
    let args = window_args(s(&path), "2");
    assert_eq!(
        sink_placement(&serve(&args).status(), "Print Sink"),
        (2, true)
    );

    // A throttled sink stays one subtask: the rate is the sink's records.
    let mut args = window_args(s(&path), "2");
    args.extend_from_slice(&["--output", s(&out), "--sink-rate", "1000000"]);
    assert_eq!(
        sink_placement(&serve(&args).status(), "Text File Sink"),
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
        sink_placement(&serve(&args).status(), "TransactionalFileSink"),
        (1, false)
    );
    let written = std::fs::read_to_string(&tx).unwrap();
    assert_eq!(whole_lines(&written), tumbling_sums(&events, WINDOW_MS));
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
    let want = tumbling_sums(&events, WINDOW_MS);
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
