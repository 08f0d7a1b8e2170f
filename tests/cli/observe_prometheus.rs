//! The CLI's metrics endpoint, scraped after the job ended.
//!
//! `floe run wordcount --metrics-addr 127.0.0.1:PORT --metrics-linger-ms …`
//! keeps serving after the job. The test waits for the job's summary line on
//! stderr (the job's own count, `records=N`), then scrapes `/metrics` and
//! `/status` over plain HTTP on 127.0.0.1 and checks them against that count
//! and against the number of generated words: the keyed sum's records in,
//! summed over subtasks, equal N; the generator's records out equal the
//! requested count; `/status` is JSON naming the operators.

use crate::cli_common;
use cli_common::{Reap, free_port, get};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const RECORDS: u64 = 200_000;

/// Sums a counter over its series, grouped by the `operator` label.
fn counter_by_operator(text: &str, metric: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
    {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        let op = series
            .split("operator=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("an operator label");
        let v: f64 = value.parse().expect("a number");
        *out.entry(op.to_string()).or_default() += v as u64;
    }
    out
}

#[test]
fn metrics_and_status_match_the_jobs_own_counts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["run", "wordcount", "--parallelism", "2", "--records"])
        .arg(RECORDS.to_string())
        .arg("--output")
        .arg(dir.path().join("counts.csv"))
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
    // The summary line is printed once the job ended; the endpoint lingers.
    let mut job_records = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        if let Some(rest) = line.strip_prefix("records=") {
            job_records = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
            break;
        }
    }
    let job_records = job_records.expect("the job printed its summary");
    assert_eq!(job_records, RECORDS);

    let (code, metrics) = get(port, "/metrics");
    assert_eq!(code, 200);
    let ins = counter_by_operator(&metrics, "floe_records_in_total");
    let outs = counter_by_operator(&metrics, "floe_records_out_total");
    assert_eq!(ins.get("Keyed Sum"), Some(&job_records), "{metrics}");
    assert_eq!(outs.get("Word Generator"), Some(&RECORDS), "{metrics}");
    // The sum emits each word's final count once, at end of input: one
    // record per distinct word of the generator's default vocabulary and
    // seed (10,000 and 42, as the CLI's defaults).
    let generator = floe::text::WordGenerator::new(10_000, 42);
    let distinct: std::collections::HashSet<String> =
        (0..RECORDS).map(|i| generator.word(i)).collect();
    assert_eq!(
        outs.get("Keyed Sum"),
        Some(&(distinct.len() as u64)),
        "{metrics}"
    );
    assert!(metrics.contains("floe_backpressured_seconds{"), "{metrics}");
    assert!(metrics.contains("floe_input_queued_batches{"), "{metrics}");
    assert!(
        metrics.contains("# HELP floe_records_in_total "),
        "{metrics}"
    );
    assert!(metrics.contains("channel=\""), "{metrics}");

    let (code, status) = get(port, "/status");
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&status).expect("/status is JSON");
    assert_eq!(v["state"], "Finished");
    let ops = v["operators"].as_array().expect("operators array");
    let sum = ops
        .iter()
        .find(|o| o["name"] == "Keyed Sum")
        .expect("Keyed Sum in /status");
    assert_eq!(sum["records_in"].as_u64(), Some(job_records));
    assert!(!v["graph"]["edges"].as_array().expect("edges").is_empty());
    assert_eq!(get(port, "/nothing").0, 404);
}
