//! `floe::http::router` served on 127.0.0.1:0 with a running job whose
//! sources hold at half their input (the gated generator), so the job is
//! running, and its counts are known, whenever the test looks:
//!
//! - `/metrics` is Prometheus text with a HELP line for every metric, no
//!   sentinel values, and the keyed sum's records in equal the records the
//!   sources emitted (counted by the gate, not by the job);
//! - `/status` and `/jobs` name the running job;
//! - `POST …/savepoint` writes a savepoint directory on disk;
//! - `POST …/cancel` ends the job canceled;
//! - `DELETE /jobs/{name}` removes the ended job's series from `/metrics`.

mod gated;
mod http_common;

use floe::checkpoint::CheckpointConfig;
use floe::http::{BackgroundServer, Jobs};
use floe::{JobStatus, StreamExecutionEnvironment};
use gated::{Gate, gated_generator, wait_until};
use http_common::{get, get_json, metric_sum, post, request};
use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

const RECORDS: u64 = 40_000;
const KEYS: u64 = 13;
const JOB: &str = "router-test";

/// The process's Prometheus recorder (one per process).
fn prometheus() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: OnceLock<metrics_exporter_prometheus::PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| floe::http::install_prometheus().expect("the only recorder"))
        .clone()
}

/// Metric names with a `# TYPE` line and those with a `# HELP` line.
fn declared(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let names = |prefix: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|r| r.split_whitespace().next())
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
    };
    (names("# TYPE "), names("# HELP "))
}

#[test]
fn router_serves_metrics_status_jobs_savepoint_and_cancel() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    env.set_job_name(JOB);
    // Checkpoints only when asked (the savepoint): no timer races the test.
    env.set_checkpoint_config(CheckpointConfig {
        interval: Some(Duration::from_secs(3600)),
        dir: Some(dir.path().join("checkpoints")),
        ..Default::default()
    });
    let gate = Gate::new();
    gated_generator(&env, &gate, RECORDS, &[0.5], |i| (i % KEYS, 1u64))
        .uid("numbers")
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .uid("sum")
        .collect();
    let handle = env.execute_async().expect("the job starts");

    let jobs = Jobs::new()
        .with_prometheus(prometheus())
        .with_savepoint_dir(dir.path().join("savepoints"));
    assert!(jobs.insert(handle.clone()).is_ok());
    let server = BackgroundServer::start("127.0.0.1:0", floe::http::router(jobs.clone()))
        .expect("the router serves");
    let addr = server.local_addr();

    // Every source subtask holds at its stop: the emitted count is final.
    gate.wait_held(2);
    let emitted = gate.emitted();
    assert!(emitted > 0 && emitted < RECORDS);
    let sum_in = format!("job=\"{JOB}\"");
    let mut metrics = String::new();
    wait_until("the keyed sum to count every emitted record", || {
        let (code, text) = get(addr, "/metrics");
        assert_eq!(code, 200, "{text}");
        metrics = text;
        metric_sum(
            &metrics,
            "floe_records_in_total",
            &[&sum_in, "operator=\"Keyed Sum\""],
        ) == Some(emitted as f64)
    });
    assert_eq!(
        metric_sum(
            &metrics,
            "floe_records_out_total",
            &[&sum_in, "operator=\"Gated Generator\""]
        ),
        Some(emitted as f64),
        "{metrics}"
    );
    let (types, helps) = declared(&metrics);
    assert!(types.contains("floe_records_in_total"), "{metrics}");
    assert!(types.contains("floe_backpressured_seconds"), "{metrics}");
    let undescribed: Vec<_> = types.difference(&helps).collect();
    assert!(
        undescribed.is_empty(),
        "metrics without HELP: {undescribed:?}"
    );
    for line in metrics
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let v: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .expect("a sample value");
        assert!(v.abs() < 1e15, "a sentinel value: {line}");
    }

    let status = get_json(addr, "/status");
    assert_eq!(status["job"], JOB);
    assert_eq!(status["state"], "Running");
    assert_eq!(get_json(addr, &format!("/jobs/{JOB}"))["job"], JOB);
    let list = get_json(addr, "/jobs");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["name"], JOB);
    assert_eq!(list[0]["state"], "Running");
    assert_eq!(get(addr, "/jobs/nobody").0, 404);

    let (code, body) = post(addr, &format!("/jobs/{JOB}/savepoint"), None);
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let path = std::path::PathBuf::from(v["path"].as_str().expect("a path"));
    assert!(path.is_dir(), "{path:?}");
    assert!(path.starts_with(dir.path().join("savepoints")), "{path:?}");
    assert!(
        std::fs::read_dir(&path).expect("readable").count() > 0,
        "the savepoint holds files"
    );

    // A running job is not forgotten.
    assert_eq!(
        request(addr, "DELETE", &format!("/jobs/{JOB}"), None).0,
        409
    );
    let (code, body) = post(addr, &format!("/jobs/{JOB}/cancel"), None);
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["state"], "Canceled");
    assert_eq!(v["end"], "canceled");
    assert_eq!(handle.status(), JobStatus::Canceled);
    assert_eq!(get_json(addr, "/jobs")[0]["state"], "Canceled");

    // Forgotten, the ended job's series leave /metrics.
    assert_eq!(
        request(addr, "DELETE", &format!("/jobs/{JOB}"), None).0,
        204
    );
    let (_, metrics) = get(addr, "/metrics");
    assert!(!metrics.contains(&sum_in), "{metrics}");
    assert!(jobs.names().is_empty());
    assert_eq!(get(addr, "/status").0, 404);
}
