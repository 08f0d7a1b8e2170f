//! An axum 0.8 service that runs floe jobs on request and mounts
//! `floe::http::router` under `/floe` for their metrics, status and
//! controls.
//!
//! ```sh
//! cargo run --example axum_service -- 127.0.0.1:8080
//! curl -XPOST localhost:8080/jobs -H 'content-type: application/json' \
//!      -d '{"name":"counts","records":1000000,"keys":100,"rate":20000}'
//! curl localhost:8080/floe/status?job=counts
//! curl -XPOST localhost:8080/floe/jobs/counts/stop       # {"path": SAVEPOINT, ...}
//! curl -XPOST localhost:8080/jobs -H 'content-type: application/json' \
//!      -d '{"name":"counts","records":1000000,"keys":100,"restore_from":"SAVEPOINT"}'
//! curl localhost:8080/jobs/counts/counts                 # once it finished
//! curl localhost:8080/floe/metrics
//! ```
//!
//! Routes of the service: `POST /jobs` starts a job (a keyed count of
//! `i % keys` over `0..records`, optionally throttled to `rate` records/s,
//! optionally restored from a savepoint); `GET /jobs/{name}/counts` gives
//! the final count per key of a finished job. `/floe/...` is floe's router.
//!
//! The handlers never block: building a job and `execute_async` return at
//! once (the job runs on an actix system of its own); the stream
//! environment is `!Send`, so it is built and dropped in a plain function
//! that holds no `.await`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use floe::http::Jobs;
use floe::operators::sink::SinkFunction;
use floe::{CheckpointConfig, JobHandle, StreamExecutionEnvironment};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What `POST /jobs` asks for.
#[derive(serde::Deserialize)]
pub struct JobRequest {
    /// The job's name (its metrics' `job` label, its key in the registry).
    pub name: String,
    /// Records to count: `0..records`.
    pub records: u64,
    /// Keys: record `i` counts for key `i % keys`.
    pub keys: u64,
    /// Records per second the counting operator takes (default: all it can).
    #[serde(default)]
    pub rate: Option<f64>,
    /// A savepoint (or checkpoint) to start from.
    #[serde(default)]
    pub restore_from: Option<PathBuf>,
}

/// The service's state: floe's job registry and each job's output.
#[derive(Clone)]
pub struct AppState {
    /// The jobs, shared with floe's router.
    pub jobs: Jobs,
    results: Arc<Mutex<HashMap<String, LatestCounts>>>,
    checkpoints: PathBuf,
}

impl AppState {
    /// State keeping checkpoints under `work/checkpoints` and savepoints
    /// under `work/savepoints`; `/floe/metrics` renders `prometheus`.
    pub fn new(work: impl Into<PathBuf>, prometheus: Option<floe::http::PrometheusHandle>) -> Self {
        let work = work.into();
        let mut jobs = Jobs::new().with_savepoint_dir(work.join("savepoints"));
        if let Some(p) = prometheus {
            jobs = jobs.with_prometheus(p);
        }
        AppState {
            jobs,
            results: Arc::default(),
            checkpoints: work.join("checkpoints"),
        }
    }
}

/// The latest count per key: the keyed sum emits a running count per
/// record, so the last one of a key is its count so far. Memory stays one
/// entry per key, and the lock is taken once per batch.
#[derive(Clone, Default)]
pub struct LatestCounts(Arc<Mutex<BTreeMap<u64, u64>>>);

impl LatestCounts {
    /// The counts, keys as strings (JSON object keys).
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .map(|m| m.iter().map(|(k, c)| (k.to_string(), *c)).collect())
            .unwrap_or_default()
    }
}

impl SinkFunction<(u64, u64)> for LatestCounts {
    async fn write(&mut self, batch: floe::Batch<(u64, u64)>) -> floe::Result<()> {
        if let Ok(mut m) = self.0.lock() {
            for r in batch {
                m.insert(r.value.0, r.value.1);
            }
        }
        Ok(())
    }
}

/// Builds and starts the counting job. A plain function: the environment
/// (`!Send`) lives and dies here, never across an `.await`.
pub fn start_job(
    req: &JobRequest,
    checkpoints: &std::path::Path,
) -> floe::Result<(JobHandle, LatestCounts)> {
    let env = StreamExecutionEnvironment::new();
    env.set_job_name(req.name.clone())
        .set_parallelism(2)
        .set_batch_size(256);
    env.set_checkpoint_config(
        CheckpointConfig::every(Duration::from_secs(10)).with_dir(checkpoints.join(&req.name)),
    );
    if let Some(from) = &req.restore_from {
        env.restore_from(from);
    }
    let keys = req.keys.max(1);
    let mut sum = env
        .from_generator(req.records, move |i| (i % keys, 1u64))
        .uid("numbers")
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .uid("sum");
    if let Some(rate) = req.rate {
        sum = sum.set_input_rate(rate);
    }
    let counts = LatestCounts::default();
    sum.sink("Latest Counts", counts.clone());
    // A job whose handles are all gone (the service shut down) is canceled.
    Ok((env.execute_async()?.cancel_on_drop(true), counts))
}

fn error(code: StatusCode, message: String) -> Response {
    (code, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn start(State(app): State<AppState>, Json(req): Json<JobRequest>) -> Response {
    if app
        .jobs
        .get(&req.name)
        .is_some_and(|h| !h.status().is_terminal())
    {
        return error(StatusCode::CONFLICT, format!("{} is running", req.name));
    }
    let (handle, counts) = match start_job(&req, &app.checkpoints) {
        Ok(started) => started,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    if let Err(h) = app.jobs.insert(handle) {
        // Another request started a job of this name meanwhile.
        h.cancel();
        return error(StatusCode::CONFLICT, format!("{} is running", req.name));
    }
    if let Ok(mut r) = app.results.lock() {
        r.insert(req.name.clone(), counts);
    }
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "name": req.name })),
    )
        .into_response()
}

async fn counts(State(app): State<AppState>, Path(name): Path<String>) -> Response {
    let Some(handle) = app.jobs.get(&name) else {
        return error(StatusCode::NOT_FOUND, format!("no job {name}"));
    };
    if !handle.status().is_terminal() {
        return error(StatusCode::CONFLICT, format!("{name} is running"));
    }
    let collected = app.results.lock().ok().and_then(|r| r.get(&name).cloned());
    let last: BTreeMap<String, u64> = collected.map(|c| c.snapshot()).unwrap_or_default();
    Json(last).into_response()
}

/// The service's routes, with floe's router nested under `/floe`.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/jobs", post(start))
        .route("/jobs/{name}/counts", get(counts))
        .with_state(state.clone())
        .nest("/floe", floe::http::router(state.jobs))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let prometheus = floe::http::install_prometheus().map_err(std::io::Error::other)?;
    let work = std::env::temp_dir().join(format!("floe-axum-service-{}", std::process::id()));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app(AppState::new(work, Some(prometheus)))).await
}
