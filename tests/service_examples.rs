//! The embedding examples (`examples/axum_service.rs`,
//! `examples/actix_web_service.rs`, `examples/tokio_service.rs`), compiled
//! in here as modules, started on 127.0.0.1:0 and driven over HTTP:
//!
//! - a job started per request, throttled at its counting operator, is
//!   stopped with a savepoint, restarted from it, and finishes with the
//!   counts a plain `HashMap` computes over the whole input (the first run
//!   stopped short of it: the second continued exactly);
//! - another job is canceled and ends `Canceled`;
//! - the tokio example's job (`Config::resume_latest`) starts fresh on an
//!   empty directory, is canceled after a completed checkpoint, and the
//!   same job started again resumes from it (it counts fewer records than
//!   the input) and ends with the counts of a `HashMap` over the input:
//!   nothing lost, nothing counted twice;
//! - `GET` of a job's status is timed over 200 requests while a job runs
//!   at full speed (printed, not asserted: the figures depend on the
//!   machine).
//!
//! Waits poll the job's status for an event (records counted, a state), never
//! a fixed time.

mod gated;
mod http_common;

#[allow(dead_code)]
#[path = "../examples/actix_web_service.rs"]
mod actix_web_service;
#[allow(dead_code)]
#[path = "../examples/axum_service.rs"]
mod axum_service;
#[allow(dead_code)]
#[path = "../examples/tokio_service.rs"]
mod tokio_service;

use gated::wait_until;
use http_common::{get, get_json, metric_sum, post};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Instant;

const RECORDS: u64 = 40_000;
const KEYS: u64 = 7;

/// The process's Prometheus recorder (one per process).
fn prometheus() -> floe::http::PrometheusHandle {
    static HANDLE: OnceLock<floe::http::PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| floe::http::install_prometheus().expect("the only recorder"))
        .clone()
}

/// The final count per key, computed directly.
fn oracle() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for i in 0..RECORDS {
        *m.entry((i % KEYS).to_string()).or_insert(0) += 1;
    }
    m
}

/// Where a service keeps a job's status and controls.
struct Routes {
    status: fn(&str) -> String,
    stop: fn(&str) -> String,
    cancel: fn(&str) -> String,
}

fn keyed_sum_in(status: &Value) -> u64 {
    status["operators"]
        .as_array()
        .and_then(|ops| ops.iter().find(|o| o["name"] == "Keyed Sum"))
        .and_then(|o| o["records_in"].as_u64())
        .unwrap_or(0)
}

fn start(addr: SocketAddr, body: Value) {
    let (code, text) = post(addr, "/jobs", Some(&body.to_string()));
    assert_eq!(code, 201, "{text}");
}

fn wait_counting(addr: SocketAddr, status: &str) {
    wait_until("the job to count records", || {
        keyed_sum_in(&get_json(addr, status)) > 0
    });
}

/// Start, stop with a savepoint, restart from it, counts exact; cancel;
/// status latency at full speed.
fn drive_service(addr: SocketAddr, routes: &Routes, service: &str) {
    let name = "restartable";
    start(
        addr,
        serde_json::json!({"name": name, "records": RECORDS, "keys": KEYS, "rate": 4000.0}),
    );
    wait_counting(addr, &(routes.status)(name));
    let (code, body) = post(addr, &(routes.stop)(name), None);
    assert_eq!(code, 200, "{body}");
    let stopped: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(stopped["state"], "Finished", "{body}");
    let savepoint = stopped["path"].as_str().expect("a savepoint path");
    assert!(std::path::Path::new(savepoint).is_dir(), "{savepoint}");
    let first: BTreeMap<String, u64> =
        serde_json::from_value(get_json(addr, &format!("/jobs/{name}/counts"))).expect("counts");
    let counted: u64 = first.values().sum();
    assert!(
        counted > 0 && counted < RECORDS,
        "stopped mid-way: {counted}"
    );

    start(
        addr,
        serde_json::json!({"name": name, "records": RECORDS, "keys": KEYS, "restore_from": savepoint}),
    );
    wait_until("the restarted job to finish", || {
        get_json(addr, &(routes.status)(name))["state"] == "Finished"
    });
    let second: BTreeMap<String, u64> =
        serde_json::from_value(get_json(addr, &format!("/jobs/{name}/counts"))).expect("counts");
    assert_eq!(second, oracle(), "the restarted job continued exactly");

    let doomed = "doomed";
    start(
        addr,
        serde_json::json!({"name": doomed, "records": 1u64 << 40, "keys": KEYS, "rate": 1000.0}),
    );
    wait_counting(addr, &(routes.status)(doomed));
    let (code, body) = post(addr, &(routes.cancel)(doomed), None);
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["state"], "Canceled", "{body}");

    let fast = "fast";
    start(
        addr,
        serde_json::json!({"name": fast, "records": 1u64 << 40, "keys": 1000}),
    );
    wait_counting(addr, &(routes.status)(fast));
    let mut took = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        let (code, _) = get(addr, &(routes.status)(fast));
        took.push(t.elapsed());
        assert_eq!(code, 200);
    }
    took.sort();
    eprintln!(
        "{service}: GET status while a job runs at full speed: p50={:?} p99={:?} (200 requests)",
        took[99], took[197]
    );
    let (code, body) = post(addr, &(routes.cancel)(fast), None);
    assert_eq!(code, 200, "{body}");
}

#[test]
fn axum_service_runs_stops_restarts_and_cancels_jobs() {
    let work = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let state = axum_service::AppState::new(work.path(), Some(prometheus()));
    runtime.spawn(async move { axum::serve(listener, axum_service::app(state)).await });
    let routes = Routes {
        status: |n| format!("/floe/status?job={n}"),
        stop: |n| format!("/floe/jobs/{n}/stop"),
        cancel: |n| format!("/floe/jobs/{n}/cancel"),
    };
    drive_service(addr, &routes, "axum_service");
    let (code, metrics) = get(addr, "/floe/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("# HELP floe_records_in_total"),
        "{metrics}"
    );
}

#[test]
fn actix_web_service_runs_stops_restarts_and_cancels_jobs() {
    let work = tempfile::tempdir().expect("temp dir");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let state = actix_web_service::AppState::new(work.path(), Some(prometheus()));
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = actix_web_service::server(listener, state).expect("the service starts");
            tx.send(server.handle()).expect("the test waits");
            server.await
        })
    });
    let handle = rx.recv().expect("the server handle");
    let routes = Routes {
        status: |n| format!("/jobs/{n}"),
        stop: |n| format!("/jobs/{n}/stop"),
        cancel: |n| format!("/jobs/{n}/cancel"),
    };
    drive_service(addr, &routes, "actix_web_service");
    let (code, metrics) = get(addr, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("# HELP floe_records_in_total"),
        "{metrics}"
    );
    futures::executor::block_on(handle.stop(true));
    server
        .join()
        .expect("the server thread")
        .expect("the server ran");
}

#[test]
fn tokio_service_serves_its_job_until_canceled() {
    let work = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let counts = tokio_service::LatestCounts::default();
    let job = tokio_service::start_job(1 << 40, Some(2000.0), work.path(), &counts)
        .expect("the job starts");
    let jobs = floe::http::Jobs::new()
        .with_prometheus(prometheus())
        .with_savepoint_dir(work.path().join("savepoints"));
    assert!(jobs.insert(job.clone()).is_ok());
    let served = runtime.spawn(tokio_service::serve_until_done(listener, jobs, job));

    let list = get_json(addr, "/jobs");
    assert_eq!(list[0]["name"], "numbers", "{list}");
    wait_counting(addr, "/status");
    let (code, body) = post(addr, "/jobs/numbers/savepoint", None);
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert!(
        std::path::Path::new(v["path"].as_str().expect("a path")).is_dir(),
        "{body}"
    );
    let (_, metrics) = get(addr, "/metrics");
    let counted = metric_sum(
        &metrics,
        "floe_records_in_total",
        &["job=\"numbers\"", "operator=\"Keyed Sum\""],
    );
    assert!(counted.is_some_and(|c| c > 0.0), "{metrics}");
    let (code, body) = post(addr, "/jobs/numbers/cancel", None);
    assert_eq!(code, 200, "{body}");
    let state = runtime
        .block_on(served)
        .expect("the server task")
        .expect("served");
    assert_eq!(state, floe::JobStatus::Canceled);
}

#[test]
fn tokio_service_resumes_from_its_latest_checkpoint() {
    let work = tempfile::tempdir().expect("temp dir");
    let mut oracle = std::collections::HashMap::new();
    for i in 0..RECORDS {
        *oracle.entry(i % 100).or_insert(0u64) += 1;
    }
    let counts = tokio_service::LatestCounts::default();

    // First start: the directory is empty, so the job starts fresh (a
    // plain restore would fail here), throttled so it is mid-way when its
    // first checkpoint completes.
    let first = tokio_service::start_job(RECORDS, Some(2000.0), work.path(), &counts)
        .expect("a first start on an empty directory");
    assert!(
        futures::executor::block_on(first.wait_for_checkpoints(1)),
        "the first run ended before a checkpoint completed"
    );
    first.cancel();
    assert!(
        matches!(
            futures::executor::block_on(first.outcome()),
            floe::JobEnd::Canceled
        ),
        "the first run was stopped mid-way"
    );

    // The same job started again resumes from the latest checkpoint.
    let second =
        tokio_service::start_job(RECORDS, None, work.path(), &counts).expect("the second start");
    let result = futures::executor::block_on(second.wait()).expect("the resumed job finishes");
    let counted = result
        .operator("Keyed Sum")
        .expect("the keyed sum")
        .records_in;
    assert!(
        counted < RECORDS,
        "resumed from the checkpoint, not from the start: {counted}"
    );
    let last: std::collections::HashMap<u64, u64> = counts.snapshot().into_iter().collect();
    assert_eq!(last, oracle, "nothing lost, nothing counted twice");
}
