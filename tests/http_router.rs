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
//! - `DELETE /jobs/{name}` removes the ended job's series from `/metrics`;
//! - after 50 small jobs were run and removed, the recorder holds no series
//!   of theirs (counted in the recorder itself, not in the rendered text),
//!   and a live job's `/metrics` still has every family it had before.

mod gated;
mod http_common;

use floe::checkpoint::CheckpointConfig;
use floe::http::{BackgroundServer, Jobs};
use floe::{JobStatus, StreamExecutionEnvironment};
use gated::{Gate, gated_generator, wait_for_new_checkpoints, wait_until};
use http_common::{get, get_json, metric_sum, post, request};
use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

const RECORDS: u64 = 40_000;
const KEYS: u64 = 13;
const JOB: &str = "router-test";

/// The process's Prometheus recorder (one per process).
fn prometheus() -> floe::http::PrometheusHandle {
    static HANDLE: OnceLock<floe::http::PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| floe::http::install_prometheus().expect("the only recorder"))
        .clone()
}

/// The metric families with a sample labelled `job="name"` (a histogram's
/// `_bucket`, `_sum` and `_count` lines count as its family).
fn families_of(text: &str, job: &str) -> BTreeSet<String> {
    let label = format!("job=\"{job}\"");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('{'))
        .filter(|(_, labels)| labels.contains(&label))
        .map(|(name, _)| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|base| text.contains(&format!("# TYPE {base} histogram")))
                .unwrap_or(name)
                .to_string()
        })
        .collect()
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
    env.set_checkpoint_config(
        CheckpointConfig::every(Duration::from_secs(3600)).with_dir(dir.path().join("checkpoints")),
    );
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

/// Starts a small job named `name`: a keyed sum over `records` numbers.
fn small_job(name: &str, records: u64) -> floe::JobHandle {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_job_name(name);
    env.from_generator(records, |i| (i % KEYS, 1u64))
        .uid("numbers")
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .uid("sum")
        .collect();
    env.execute_async().expect("the job starts")
}

#[test]
fn removed_jobs_leave_no_series_in_the_recorder() {
    const LIVE: &str = "churn-live";
    const JOBS: usize = 50;
    let dir = tempfile::tempdir().expect("temp dir");
    let prometheus = prometheus();
    let jobs = Jobs::new().with_prometheus(prometheus.clone());
    let server = BackgroundServer::start("127.0.0.1:0", floe::http::router(jobs.clone()))
        .expect("the router serves");
    let addr = server.local_addr();

    // A live job, held mid-way, with a completed checkpoint (so its
    // checkpoint families exist too).
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    env.set_job_name(LIVE);
    env.set_checkpoint_config(
        CheckpointConfig::every(Duration::from_millis(50)).with_dir(dir.path().join("checkpoints")),
    );
    let gate = Gate::new();
    gated_generator(&env, &gate, RECORDS, &[0.5], |i| (i % KEYS, 1u64))
        .uid("numbers")
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .uid("sum")
        .collect();
    let live = env.execute_async().expect("the live job starts");
    assert!(jobs.insert(live.clone()).is_ok());
    gate.wait_held(2);
    wait_for_new_checkpoints(&live, 1);
    let emitted = gate.emitted() as f64;
    let live_in = |text: &str| {
        metric_sum(
            text,
            "floe_records_in_total",
            &[&format!("job=\"{LIVE}\""), "operator=\"Keyed Sum\""],
        )
    };
    let mut before = String::new();
    wait_until("the live job to count every emitted record", || {
        before = get(addr, "/metrics").1;
        live_in(&before) == Some(emitted)
    });
    let families = families_of(&before, LIVE);
    // What the other tests of /metrics read, and the checkpoint families.
    for family in [
        "floe_records_in_total",
        "floe_records_out_total",
        "floe_backpressured_seconds",
        "floe_idle_seconds",
        "floe_input_queued_batches",
        "floe_output_queued_batches",
        "floe_checkpoints_completed_total",
        "floe_checkpoint_duration_seconds",
        "floe_last_checkpoint_id",
    ] {
        assert!(families.contains(family), "{family} missing: {before}");
    }

    // Jobs that ran to their end, each registered, scraped, then removed.
    let names: Vec<String> = (0..JOBS).map(|i| format!("churn-{i}")).collect();
    for name in &names {
        let h = small_job(name, 500);
        assert!(jobs.insert(h.clone()).is_ok());
        futures::executor::block_on(h.wait()).expect("the small job finishes");
    }
    let (code, text) = get(addr, "/metrics");
    assert_eq!(code, 200);
    let held: Vec<usize> = names
        .iter()
        .map(|n| prometheus.series_with_label("job", n))
        .collect();
    assert!(
        held.iter().all(|&n| n > 0),
        "every job published series: {held:?} {text}"
    );
    let total_before = prometheus.series_count();
    for name in &names {
        assert_eq!(
            request(addr, "DELETE", &format!("/jobs/{name}"), None).0,
            204
        );
    }
    let total_after = prometheus.series_count();
    let left: usize = names
        .iter()
        .map(|n| prometheus.series_with_label("job", n))
        .sum();
    eprintln!(
        "series of the {JOBS} removed jobs: {} before removal, {left} after; \
         the recorder held {total_before} series before, {total_after} after",
        held.iter().sum::<usize>()
    );
    assert_eq!(left, 0, "series of removed jobs left in the recorder");

    // A job removed while it runs: its later publications are deleted
    // too, once it ended for good.
    let running = small_job("churn-running", 1 << 40);
    assert!(jobs.insert(running.clone()).is_ok());
    wait_until("the running job to publish", || {
        jobs.render_metrics();
        prometheus.series_with_label("job", "churn-running") > 0
    });
    assert!(jobs.remove("churn-running").is_some());
    running.cancel();
    let _ = futures::executor::block_on(running.outcome());
    jobs.render_metrics();
    assert_eq!(prometheus.series_with_label("job", "churn-running"), 0);

    // The live job kept every family, and its counts.
    let (_, after) = get(addr, "/metrics");
    let kept = families_of(&after, LIVE);
    let lost: Vec<_> = families.difference(&kept).collect();
    assert!(lost.is_empty(), "families lost: {lost:?} {after}");
    assert_eq!(live_in(&after), Some(emitted), "{after}");
    for name in &names {
        assert!(!after.contains(&format!("job=\"{name}\"")), "{after}");
    }
    gate.open();
    live.cancel();
    let _ = futures::executor::block_on(live.outcome());
}
