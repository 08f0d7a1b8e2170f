//! An actix-web 4 service that runs floe jobs on request, with status,
//! cancel, stop-with-savepoint and restart routes of its own, built on
//! `floe::http::Jobs` (the registry behind floe's axum router, usable from
//! any framework).
//!
//! ```sh
//! cargo run --example actix_web_service -- 127.0.0.1:8080
//! curl -XPOST localhost:8080/jobs -H 'content-type: application/json' \
//!      -d '{"name":"counts","records":1000000,"keys":100,"rate":20000}'
//! curl localhost:8080/jobs/counts                  # the status snapshot
//! curl -XPOST localhost:8080/jobs/counts/stop      # {"path": SAVEPOINT, ...}
//! curl -XPOST localhost:8080/jobs -H 'content-type: application/json' \
//!      -d '{"name":"counts","records":1000000,"keys":100,"restore_from":"SAVEPOINT"}'
//! curl localhost:8080/jobs/counts/counts           # once it finished
//! curl -XPOST localhost:8080/jobs/counts/cancel
//! curl localhost:8080/metrics
//! ```
//!
//! The handlers run on actix-web's workers, which are actix arbiters: a job
//! started there with `execute_async` joins the service's actix system and
//! the handler returns at once. Nothing here blocks a worker: `execute()`
//! would (it waits for the job's end), so a service never calls it.

use actix_web::{App, HttpResponse, HttpServer, web};
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

/// The service's state: floe's job registry, each job's output, and where
/// checkpoints and savepoints go.
#[derive(Clone)]
pub struct AppState {
    /// The jobs.
    pub jobs: Jobs,
    results: Arc<Mutex<HashMap<String, LatestCounts>>>,
    work: PathBuf,
}

impl AppState {
    /// State keeping checkpoints and savepoints under `work`; `/metrics`
    /// renders `prometheus`.
    pub fn new(work: impl Into<PathBuf>, prometheus: Option<floe::http::PrometheusHandle>) -> Self {
        let mut jobs = Jobs::new();
        if let Some(p) = prometheus {
            jobs = jobs.with_prometheus(p);
        }
        AppState {
            jobs,
            results: Arc::default(),
            work: work.into(),
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

/// Builds and starts the counting job (the environment is `!Send`: it
/// lives and dies in this plain function).
pub fn start_job(
    req: &JobRequest,
    work: &std::path::Path,
) -> floe::Result<(JobHandle, LatestCounts)> {
    let env = StreamExecutionEnvironment::new();
    env.set_job_name(req.name.clone())
        .set_parallelism(2)
        .set_batch_size(256);
    env.set_checkpoint_config(
        CheckpointConfig::every(Duration::from_secs(10))
            .with_dir(work.join("checkpoints").join(&req.name)),
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

fn error(code: actix_web::http::StatusCode, message: String) -> HttpResponse {
    HttpResponse::build(code).json(serde_json::json!({ "error": message }))
}

fn not_found(name: &str) -> HttpResponse {
    error(
        actix_web::http::StatusCode::NOT_FOUND,
        format!("no job {name}"),
    )
}

async fn start(app: web::Data<AppState>, req: web::Json<JobRequest>) -> HttpResponse {
    if app
        .jobs
        .get(&req.name)
        .is_some_and(|h| !h.status().is_terminal())
    {
        return error(
            actix_web::http::StatusCode::CONFLICT,
            format!("{} is running", req.name),
        );
    }
    let (handle, counts) = match start_job(&req, &app.work) {
        Ok(started) => started,
        Err(e) => return error(actix_web::http::StatusCode::BAD_REQUEST, e.to_string()),
    };
    if let Err(h) = app.jobs.insert(handle) {
        h.cancel();
        return error(
            actix_web::http::StatusCode::CONFLICT,
            format!("{} is running", req.name),
        );
    }
    if let Ok(mut r) = app.results.lock() {
        r.insert(req.name.clone(), counts);
    }
    HttpResponse::Created().json(serde_json::json!({ "name": req.name }))
}

async fn status(app: web::Data<AppState>, name: web::Path<String>) -> HttpResponse {
    match app.jobs.get(&name) {
        Some(h) => HttpResponse::Ok()
            .content_type("application/json")
            .body(h.status_reporter().to_json()),
        None => not_found(&name),
    }
}

async fn cancel(app: web::Data<AppState>, name: web::Path<String>) -> HttpResponse {
    let Some(h) = app.jobs.get(&name) else {
        return not_found(&name);
    };
    // Awaiting the job's end parks this request only, not the worker.
    match h.cancel_and_wait(Duration::from_secs(30)).await {
        Ok(_) => HttpResponse::Ok()
            .json(serde_json::json!({ "job": *name, "state": h.status().to_string() })),
        Err(e) => error(actix_web::http::StatusCode::ACCEPTED, e.to_string()),
    }
}

async fn stop(app: web::Data<AppState>, name: web::Path<String>) -> HttpResponse {
    let Some(h) = app.jobs.get(&name) else {
        return not_found(&name);
    };
    let dir = app.work.join("savepoints");
    // Returns once the job ended, with the savepoint's path.
    match h.stop_with_savepoint(dir).await {
        Ok(path) => HttpResponse::Ok().json(
            serde_json::json!({ "job": *name, "path": path, "state": h.status().to_string() }),
        ),
        Err(e) => error(
            actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
            e.to_string(),
        ),
    }
}

async fn counts(app: web::Data<AppState>, name: web::Path<String>) -> HttpResponse {
    let Some(h) = app.jobs.get(&name) else {
        return not_found(&name);
    };
    if !h.status().is_terminal() {
        return error(
            actix_web::http::StatusCode::CONFLICT,
            format!("{name} is running"),
        );
    }
    let collected = app.results.lock().ok().and_then(|r| r.get(&*name).cloned());
    let last: BTreeMap<String, u64> = collected.map(|c| c.snapshot()).unwrap_or_default();
    HttpResponse::Ok().json(last)
}

async fn metrics(app: web::Data<AppState>) -> HttpResponse {
    match app.jobs.render_metrics() {
        Some(text) => HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4; charset=utf-8")
            .body(text),
        None => not_found("metrics"),
    }
}

/// The service's routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/jobs", web::post().to(start))
        .route("/jobs/{name}", web::get().to(status))
        .route("/jobs/{name}/cancel", web::post().to(cancel))
        .route("/jobs/{name}/stop", web::post().to(stop))
        .route("/jobs/{name}/counts", web::get().to(counts))
        .route("/metrics", web::get().to(metrics));
}

/// Serves the service on `listener` until the server is stopped.
pub fn server(
    listener: std::net::TcpListener,
    state: AppState,
) -> std::io::Result<actix_web::dev::Server> {
    let state = web::Data::new(state);
    Ok(
        HttpServer::new(move || App::new().app_data(state.clone()).configure(configure))
            .workers(2)
            .listen(listener)?
            .run(),
    )
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let prometheus = floe::http::install_prometheus().map_err(std::io::Error::other)?;
    let work = std::env::temp_dir().join(format!("floe-actix-service-{}", std::process::id()));
    let listener = std::net::TcpListener::bind(&addr)?;
    println!("listening on http://{}", listener.local_addr()?);
    server(listener, AppState::new(work, Some(prometheus)))?.await
}
