//! `/status` and `/metrics` of the CLI's endpoint, scraped after the job
//! ended (`--metrics-linger-ms`), each against an oracle computed another way:
//!
//! - the checkpoint history equals what `floe checkpoints list` reads from
//!   the store (ids, durations, alignments), and its count equals the
//!   summary's `checkpoints=`;
//! - the pipelined regions equal the connected components computed here from
//!   the graph's edges (`pipelines --parallelism 3`: 3 regions of 5 subtasks;
//!   wordcount: 1 region);
//! - the state entries of the keyed sum equal the number of distinct words of
//!   the input (a `HashSet`);
//! - the late records of the window operator (status and metric) equal the
//!   summary's `late=` and the number of late lines this file wrote;
//! - with `--status-interval`, status lines appear and the last one counts
//!   every record of the summary.

use crate::cli_common;
use cli_common::{Served, serve};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

/// Runs `floe run ARGS` with an endpoint that lingers, and waits for the
/// summary line (the job has then ended).
fn run_served(args: &[&str]) -> Served {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    serve(&all)
}

/// The pipelined regions computed from the graph of a status: subtasks
/// (vertex, index) joined by every channel a non-chained edge makes
/// (forward: subtask i to i; other partitioners: every pair).
fn regions_from_graph(status: &Value) -> BTreeSet<BTreeSet<(u64, u64)>> {
    let graph = &status["graph"];
    let vertex_of: BTreeMap<u64, u64> = graph["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .map(|o| (o["id"].as_u64().unwrap(), o["vertex"].as_u64().unwrap()))
        .collect();
    let parallelism: BTreeMap<u64, u64> = graph["vertices"]
        .as_array()
        .expect("vertices")
        .iter()
        .map(|v| {
            (
                v["id"].as_u64().unwrap(),
                v["parallelism"].as_u64().unwrap(),
            )
        })
        .collect();
    let nodes: Vec<(u64, u64)> = parallelism
        .iter()
        .flat_map(|(&v, &p)| (0..p).map(move |j| (v, j)))
        .collect();
    let index = |n: (u64, u64)| nodes.iter().position(|&x| x == n).expect("a subtask");
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    fn root(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            x = p[x];
        }
        x
    }
    for e in graph["edges"].as_array().expect("edges") {
        if e["chained"].as_bool().unwrap() {
            continue;
        }
        let up = vertex_of[&e["from"].as_u64().unwrap()];
        let down = vertex_of[&e["to"].as_u64().unwrap()];
        let (pu, pd) = (parallelism[&up], parallelism[&down]);
        let forward = e["partitioner"] == "forward";
        for i in 0..pu {
            for d in 0..pd {
                if forward && i != d {
                    continue;
                }
                let (a, b) = (index((up, i)), index((down, d)));
                let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                parent[ra] = rb;
            }
        }
    }
    let mut groups: BTreeMap<usize, BTreeSet<(u64, u64)>> = BTreeMap::new();
    for (i, &n) in nodes.iter().enumerate() {
        groups.entry(root(&mut parent, i)).or_default().insert(n);
    }
    groups.into_values().collect()
}

/// The regions `/status` reports.
fn regions_reported(status: &Value) -> BTreeSet<BTreeSet<(u64, u64)>> {
    status["graph"]["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| {
            r["subtasks"]
                .as_array()
                .expect("subtasks")
                .iter()
                .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap()))
                .collect()
        })
        .collect()
}

/// Rows of `floe checkpoints list DIR`: id → (duration_ms, alignment_ms).
fn listed_checkpoints(dir: &Path) -> BTreeMap<u64, (u64, u64)> {
    let out = cli_common::floe(&["checkpoints", "list", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| -> u64 { cols[i].parse().unwrap_or_else(|_| panic!("{l}")) };
            (n(0), (n(3), n(4)))
        })
        .collect()
}

/// Sums a metric's series whose labels contain all of `labels`.
fn metric_sum(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    let mut sum = None;
    for line in text
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
    {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        if labels.iter().all(|l| series.contains(l)) {
            *sum.get_or_insert(0.0) += value.parse::<f64>().expect("a number");
        }
    }
    sum
}

#[test]
fn checkpoint_history_matches_the_store_and_the_summary() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cp = dir.path().join("cp");
    let served = run_served(&[
        "wordcount",
        "--records",
        "300000",
        "--parallelism",
        "2",
        "--batch-size",
        "256",
        "--checkpoint-interval",
        "20",
        "--retain-checkpoints",
        "1000",
        // However fast the run, it completes a checkpoint.
        "--finish-after-checkpoints",
        "1",
        "--count-rate",
        "1000000",
        "--checkpoint-dir",
        cp.to_str().unwrap(),
        "--output",
        dir.path().join("counts.csv").to_str().unwrap(),
    ]);
    let completed = cli_common::summary_field(&served.stderr, "checkpoints");
    let status = served.status();
    let listed = listed_checkpoints(&cp);
    assert_eq!(listed.len() as u64, completed, "{}", served.stderr);
    assert_eq!(status["checkpoints"]["completed"].as_u64(), Some(completed));
    let history: BTreeMap<u64, (u64, u64)> = status["checkpoints"]["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|c| c["status"] == "completed" && c["savepoint"] == false)
        .map(|c| {
            (
                c["id"].as_u64().unwrap(),
                (
                    c["duration_ms"].as_u64().unwrap(),
                    c["alignment_ms"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert!(!history.is_empty(), "no completed checkpoint: {status}");
    // The history keeps the newest ones: the newest rows of the store.
    let newest: BTreeMap<u64, (u64, u64)> = listed
        .iter()
        .rev()
        .take(history.len())
        .map(|(k, v)| (*k, *v))
        .collect();
    assert_eq!(history, newest);
    // The metrics agree with the status.
    let metrics = served.metrics();
    assert_eq!(
        metric_sum(
            &metrics,
            "floe_checkpoints_completed_total",
            &["job=\"wordcount\""]
        ),
        Some(completed as f64),
        "{metrics}"
    );
    let last = *listed.keys().last().unwrap();
    assert_eq!(
        metric_sum(&metrics, "floe_last_checkpoint_id", &["job=\"wordcount\""]),
        Some(last as f64),
        "{metrics}"
    );
    // Wordcount: every subtask is linked to every other by the hash edge.
    assert_eq!(regions_reported(&status), regions_from_graph(&status));
    assert_eq!(regions_reported(&status).len(), 1);
}

#[test]
fn pipelines_have_one_region_per_slice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let served = run_served(&[
        "pipelines",
        "--parallelism",
        "3",
        "--records",
        "3000",
        "--output",
        dir.path().join("out.txt").to_str().unwrap(),
    ]);
    let status = served.status();
    let reported = regions_reported(&status);
    assert_eq!(reported, regions_from_graph(&status));
    assert_eq!(reported.len(), 3, "{status}");
    let vertices = status["graph"]["vertices"].as_array().unwrap().len();
    for r in &reported {
        // One subtask of each vertex: a slice of the pipelines.
        assert_eq!(r.len(), vertices, "{reported:?}");
        let vs: BTreeSet<u64> = r.iter().map(|s| s.0).collect();
        assert_eq!(vs.len(), vertices, "{reported:?}");
    }
}

#[test]
fn keyed_state_entries_are_the_distinct_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("words.txt");
    let mut rng = cli_common::SplitMix(7);
    let mut words = HashSet::new();
    let mut text = String::new();
    for _ in 0..3000 {
        let line: Vec<String> = (0..5).map(|_| format!("w{}", rng.below(700))).collect();
        words.extend(line.iter().cloned());
        text.push_str(&line.join(" "));
        text.push('\n');
    }
    std::fs::write(&input, text).expect("write input");
    for state in [None, Some("heap"), Some("redb")] {
        let mut args = vec![
            "wordcount",
            "--input",
            input.to_str().unwrap(),
            "--parallelism",
            "2",
        ];
        let out = dir.path().join("counts.csv");
        args.extend(["--output", out.to_str().unwrap()]);
        if let Some(s) = state {
            args.extend(["--state", s]);
        }
        let served = run_served(&args);
        let status = served.status();
        let keyed = status["operators"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == "Keyed Sum" || o["name"] == "Keyed Process")
            .unwrap_or_else(|| panic!("no keyed operator: {status}"))
            .clone();
        assert_eq!(
            keyed["state_entries"].as_u64(),
            Some(words.len() as u64),
            "state {state:?}: {keyed}"
        );
        assert!(keyed["state_bytes"].as_u64().unwrap() > 0, "{keyed}");
        let metrics = served.metrics();
        let name = keyed["name"].as_str().unwrap();
        assert_eq!(
            metric_sum(
                &metrics,
                "floe_state_entries",
                &[&format!("operator=\"{name}\""), "job=\"wordcount\""]
            ),
            Some(words.len() as f64),
            "{metrics}"
        );
        // Stateless operators report no state.
        let source = status["operators"].as_array().unwrap()[0].clone();
        assert!(source["state_entries"].is_null(), "{source}");
    }
}

#[test]
fn late_records_match_the_summary_and_the_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    // On-time records move forward 100 ms at a time; every fifth line is a
    // record from far behind (ts 0..=99), late once the watermark passed the
    // first window.
    let mut text = String::new();
    let mut late = 0;
    let mut rng = cli_common::SplitMix(11);
    for i in 0..2000u64 {
        let ts = 2000 + i * 100;
        if i % 5 == 4 {
            text.push_str(&format!("k{},{},1\n", rng.below(9), rng.below(100)));
            late += 1;
        }
        text.push_str(&format!("k{},{ts},1\n", rng.below(9)));
    }
    std::fs::write(&input, text).expect("write input");
    let served = run_served(&[
        "window",
        "--input",
        input.to_str().unwrap(),
        "--window",
        "tumbling:1000",
        "--agg",
        "count",
        "--watermarks",
        "per-record",
        "--parallelism",
        "2",
        "--output",
        dir.path().join("out.csv").to_str().unwrap(),
    ]);
    let summary_late = cli_common::summary_field(&served.stderr, "late");
    assert_eq!(summary_late, late);
    let status = served.status();
    let window = status["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "Window")
        .expect("the window operator")
        .clone();
    assert_eq!(
        window["late_records"].as_u64(),
        Some(summary_late),
        "{window}"
    );
    assert_eq!(window["late_records_dropped"].as_u64(), Some(0), "{window}");
    let metrics = served.metrics();
    assert_eq!(
        metric_sum(
            &metrics,
            "floe_late_records_total",
            &["operator=\"Window\"", "job=\"window\""]
        ),
        Some(summary_late as f64),
        "{metrics}"
    );
}

#[test]
fn status_lines_appear_with_status_interval() {
    let stderr = cli_common::run_ok(&[
        "run",
        "wordcount",
        "--records",
        "200000",
        "--parallelism",
        "2",
        "--status-interval",
        "20",
        "--checkpoint-interval",
        "20",
        "--output",
        tempfile::tempdir()
            .expect("temp dir")
            .path()
            .join("c.csv")
            .to_str()
            .unwrap(),
    ]);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("status "))
        .collect();
    assert!(!lines.is_empty(), "{stderr}");
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{line}")))
    };
    // Records only grow; the last line, printed once the job ended, counts
    // every record of the summary.
    let records: Vec<u64> = lines.iter().map(|l| field(l, "records").unwrap()).collect();
    assert!(records.windows(2).all(|w| w[0] <= w[1]), "{records:?}");
    assert_eq!(
        *records.last().unwrap(),
        cli_common::summary_field(&stderr, "records")
    );
    let last = lines.last().unwrap();
    assert_eq!(
        field(last, "checkpoints"),
        Some(cli_common::summary_field(&stderr, "checkpoints"))
    );
    for l in &lines {
        assert!(field(l, "records_per_s").is_some(), "{l}");
        assert!(l.contains(" backpressured="), "{l}");
    }
    // The summary line keeps its format: it still starts with records=.
    assert!(stderr.lines().any(|l| l.starts_with("records=")));
}

#[test]
fn failure_history_names_each_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let served = run_served(&[
        "pipelines",
        "--parallelism",
        "3",
        "--records",
        "300000",
        "--checkpoint-interval",
        "20",
        "--failover",
        "region",
        "--inject-failures",
        "2",
        "--output",
        dir.path().join("out.txt").to_str().unwrap(),
    ]);
    let restarts = cli_common::summary_field(&served.stderr, "restarts");
    let restarted = cli_common::summary_field(&served.stderr, "restarted_subtasks");
    assert_eq!(restarts, 2, "{}", served.stderr);
    let status = served.status();
    let failures = status["failures"].as_array().expect("failures");
    assert_eq!(failures.len() as u64, restarts, "{status}");
    let completed: HashSet<u64> = status["checkpoints"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "completed")
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    let region_size = status["graph"]["vertices"].as_array().unwrap().len() as u64;
    let restored: Vec<u64> = status["failover"]["restored_checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    let mut sum = 0;
    for (f, want) in failures.iter().zip(&restored) {
        assert!(
            f["message"].as_str().unwrap().contains("injected failure"),
            "{f}"
        );
        assert!(f["vertex"].is_string() && f["subtask"].is_u64(), "{f}");
        assert!(f["at_ms"].is_u64(), "{f}");
        // A region of pipelines is one slice: one subtask per vertex.
        assert_eq!(f["restarted_subtasks"].as_u64(), Some(region_size), "{f}");
        let cp = f["restored_checkpoint"]
            .as_u64()
            .expect("a restored checkpoint");
        assert_eq!(cp, *want, "{f}");
        // Restored: the beginning, or a completed checkpoint (still in the
        // history unless 20 newer ones pushed it out).
        let oldest = completed.iter().min().copied().unwrap_or(u64::MAX);
        assert!(
            cp == 0 || completed.contains(&cp) || cp < oldest,
            "{f} not in {completed:?}"
        );
        sum += region_size;
    }
    assert_eq!(sum, restarted);
}

#[test]
fn bad_observe_flags_are_one_error_line() {
    let line =
        cli_common::fails_with_one_error_line(&["run", "wordcount", "--status-interval", "0"]);
    assert!(line.contains("--status-interval"), "{line}");
    let line = cli_common::fails_with_one_error_line(&[
        "run",
        "wordcount",
        "--no-metrics",
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    assert!(line.contains("--no-metrics"), "{line}");
}
