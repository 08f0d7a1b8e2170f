//! An embeddable HTTP surface (feature `http`): an axum router serving a
//! job registry's metrics, status and controls, which a service mounts into
//! its own app (`Router::nest` or `Router::merge`), and which the CLI's
//! `--metrics-addr` serves on a thread of its own.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text: every registered job's counters, published at the scrape, and whatever else the recorder holds |
//! | `GET /status[?job=NAME]` | the job's [`JobStatusSnapshot`](crate::JobStatusSnapshot) as JSON (default: the job registered last) |
//! | `GET /jobs` | the registered jobs: `[{"name", "state", "elapsed_ms"}]` |
//! | `GET /jobs/{name}` | that job's status snapshot |
//! | `POST /jobs/{name}/savepoint` | takes a savepoint into the registry's savepoint directory: `{"job", "path"}` |
//! | `POST /jobs/{name}/stop` | stops the job with a savepoint there: `{"job", "path", "state"}` |
//! | `POST /jobs/{name}/cancel` | cancels the job and waits for its end: `{"job", "state", "end"}` (`end`: `canceled`, or `finished` / `failed` when it ended first; 202 and no `end` after the cancel timeout) |
//! | `DELETE /jobs/{name}` | forgets an ended job; its series are deleted from the recorder |
//! | `GET /dashboard/` | the web dashboard (`/` and `/dashboard` redirect there): the job graph, subtasks, checkpoints, failures, actions |
//!
//! Errors answer a status code and `{"error": "..."}`. Jobs are registered
//! with a [`Jobs`] registry; [`router`] serves it. Every handler is async and
//! never blocks the server's threads: a savepoint, a stop and a cancel wait
//! on the job's actors through channels.
//!
//! `/metrics` is rendered by floe's own recorder ([`PrometheusRecorder`],
//! `prometheus.rs`), which can delete series: forgetting a job deletes
//! every series labelled with its name, so a service that starts a job per
//! request does not grow with every job it ever ran.

use crate::{JobEnd, JobHandle};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

mod dashboard;
mod prometheus;
mod server;
pub use prometheus::{DEFAULT_BUCKETS, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
pub use server::BackgroundServer;

/// Errors of the HTTP surface.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The address could not be bound.
    #[error("cannot serve on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server's runtime or thread could not start.
    #[error("cannot start the HTTP server: {0}")]
    Start(std::io::Error),
    /// The Prometheus recorder could not be built or installed (another
    /// recorder is installed already, or a bucket list is empty).
    #[error("cannot install the metrics recorder: {0}")]
    Recorder(String),
}

/// Histogram buckets (seconds) of the `_seconds` histograms: checkpoint
/// durations, from 1 ms to 10 minutes.
pub const SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0, 600.0,
];

/// Histogram buckets (bytes) of the `_bytes` histograms: checkpoint sizes,
/// from 1 KiB to 64 GiB by factors of 4.
pub const BYTES_BUCKETS: [f64; 14] = [
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
    17179869184.0,
    68719476736.0,
];

/// A Prometheus builder configured for floe's metrics: real histograms
/// (cumulative buckets, [`SECONDS_BUCKETS`] for names ending in `_seconds`,
/// [`BYTES_BUCKETS`] for `_bytes`). A program adds its own settings and
/// installs it.
pub fn prometheus_builder() -> Result<PrometheusBuilder, HttpError> {
    PrometheusBuilder::new()
        .set_buckets_for_suffix("_seconds", &SECONDS_BUCKETS)?
        .set_buckets_for_suffix("_bytes", &BYTES_BUCKETS)
}

/// Installs [`prometheus_builder`]'s recorder as the process's global
/// `metrics` recorder, with HELP text for every floe metric, and returns the
/// handle that renders it (give it to [`Jobs::with_prometheus`]). A process
/// has one global recorder: a second call fails.
pub fn install_prometheus() -> Result<PrometheusHandle, HttpError> {
    let handle = prometheus_builder()?.install_recorder()?;
    floe_actors::metrics::describe_metrics();
    Ok(handle)
}

/// The jobs a router serves. Cloning is cheap; every clone is the same
/// registry, so a service keeps one and registers each job it starts.
#[derive(Clone, Default)]
pub struct Jobs {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Registered jobs, oldest first.
    jobs: Mutex<Vec<(String, JobHandle)>>,
    /// Jobs removed before their end: their series are deleted again at
    /// each sweep (a running job publishes anew) until the job ended.
    retiring: Mutex<Vec<(String, EndProbe)>>,
    prometheus: Option<PrometheusHandle>,
    savepoint_dir: Option<PathBuf>,
    cancel_timeout: Option<Duration>,
}

/// Whether a removed job's end was reported (`JobHandle::end_probe`).
type EndProbe = Arc<dyn Fn() -> bool + Send + Sync>;

/// How long `POST /jobs/{name}/cancel` waits for the job to end by default.
pub const DEFAULT_CANCEL_TIMEOUT: Duration = Duration::from_secs(60);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The registry's data stays consistent whatever panicked: each critical
    // section is one push, retain or clone.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Jobs {
    /// An empty registry, without metrics (`/metrics` answers 404) and
    /// without a savepoint directory (savepoints answer 409).
    pub fn new() -> Self {
        Jobs::default()
    }

    fn configure(self, f: impl FnOnce(&mut Inner)) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            jobs: Mutex::new(lock(&shared.jobs).clone()),
            retiring: Mutex::new(lock(&shared.retiring).clone()),
            prometheus: shared.prometheus.clone(),
            savepoint_dir: shared.savepoint_dir.clone(),
            cancel_timeout: shared.cancel_timeout,
        });
        let mut inner = inner;
        f(&mut inner);
        Jobs {
            inner: Arc::new(inner),
        }
    }

    /// Serves `/metrics` from this Prometheus handle (see
    /// [`install_prometheus`]).
    pub fn with_prometheus(self, handle: PrometheusHandle) -> Self {
        self.configure(|i| i.prometheus = Some(handle))
    }

    /// Takes the savepoints of `POST …/savepoint` and `POST …/stop` into new
    /// directories under `dir` (a client never chooses the path).
    pub fn with_savepoint_dir(self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        self.configure(|i| i.savepoint_dir = Some(dir))
    }

    /// How long `POST /jobs/{name}/cancel` waits for the job to end before
    /// answering `202 Accepted` (default [`DEFAULT_CANCEL_TIMEOUT`]).
    pub fn with_cancel_timeout(self, timeout: Duration) -> Self {
        self.configure(|i| i.cancel_timeout = Some(timeout))
    }

    /// Registers a job under its name ([`JobHandle::job_name`]). A job of
    /// that name that ended is replaced (the new job takes over the series
    /// of that name); one still running is not, and its handle is returned
    /// as the error.
    pub fn insert(&self, handle: JobHandle) -> Result<(), JobHandle> {
        let name = handle.job_name().to_string();
        {
            let mut jobs = lock(&self.inner.jobs);
            if let Some(i) = jobs.iter().position(|(n, _)| *n == name) {
                if !jobs[i].1.status().is_terminal() {
                    return Err(handle);
                }
                jobs.remove(i);
            }
            // The name's series are the new job's from now on.
            lock(&self.inner.retiring).retain(|(n, _)| *n != name);
            jobs.push((name, handle));
        }
        self.sweep();
        Ok(())
    }

    /// The job registered under `name`.
    pub fn get(&self, name: &str) -> Option<JobHandle> {
        lock(&self.inner.jobs)
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| h.clone())
    }

    /// Forgets the job registered under `name`, returning it, and deletes
    /// every series labelled `job="name"` from the recorder (it is not
    /// canceled: cancel it first if it runs; the series it publishes until
    /// its end are deleted at each scrape, then for good).
    pub fn remove(&self, name: &str) -> Option<JobHandle> {
        let handle = {
            let mut jobs = lock(&self.inner.jobs);
            let i = jobs.iter().position(|(n, _)| n == name)?;
            let handle = jobs.remove(i).1;
            // A probe, not the handle: holding a clone would keep
            // `cancel_on_drop` from firing.
            let probe: EndProbe = Arc::new(handle.end_probe());
            lock(&self.inner.retiring).push((name.to_string(), probe));
            handle
        };
        self.sweep();
        Some(handle)
    }

    /// Deletes the series of the removed jobs; forgets those that ended.
    fn sweep(&self) {
        let Some(prometheus) = self.inner.prometheus.as_ref() else {
            lock(&self.inner.retiring).clear();
            return;
        };
        lock(&self.inner.retiring).retain(|(name, ended)| {
            // Asked before deleting: a job whose end was reported publishes
            // nothing more, so what is deleted now stays deleted.
            let ended = ended();
            prometheus.remove_series("job", name);
            !ended
        });
    }

    /// The registered jobs' names, oldest first.
    pub fn names(&self) -> Vec<String> {
        lock(&self.inner.jobs)
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn handles(&self) -> Vec<(String, JobHandle)> {
        lock(&self.inner.jobs).clone()
    }

    fn latest(&self) -> Option<JobHandle> {
        lock(&self.inner.jobs).last().map(|(_, h)| h.clone())
    }

    /// The Prometheus text of `/metrics`: every registered job's counters
    /// published now, then the recorder rendered (after deleting again the
    /// series of removed jobs that had not ended). `None` without a
    /// Prometheus handle.
    pub fn render_metrics(&self) -> Option<String> {
        let prometheus = self.inner.prometheus.as_ref()?;
        for (_, h) in self.handles() {
            h.status_reporter().publish_metrics();
        }
        self.sweep();
        Some(prometheus.render())
    }

    /// The Prometheus handle of `/metrics`, if any (to count its series).
    pub fn prometheus(&self) -> Option<&PrometheusHandle> {
        self.inner.prometheus.as_ref()
    }
}

/// The router: see the module's documentation for its routes. Mount it with
/// `Router::merge`, or under a prefix with `Router::nest("/floe", …)`.
pub fn router(jobs: Jobs) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/jobs", get(list))
        .route("/jobs/{name}", get(job_status).delete(forget))
        .route("/jobs/{name}/savepoint", post(savepoint))
        .route("/jobs/{name}/stop", post(stop))
        .route("/jobs/{name}/cancel", post(cancel))
        .merge(dashboard::routes())
        .with_state(jobs)
}

/// A failed request: its status code and message, answered as
/// `{"error": message}`.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

type Answer = Result<Response, ApiError>;

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

fn json_text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn find(jobs: &Jobs, name: &str) -> Result<JobHandle, ApiError> {
    jobs.get(name)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no job named {name:?}")))
}

async fn metrics(State(jobs): State<Jobs>) -> Answer {
    let text = jobs.render_metrics().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "no Prometheus recorder: see floe::http::install_prometheus".into(),
        )
    })?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// `?job=NAME` of `/status`.
#[derive(serde::Deserialize)]
struct JobQuery {
    job: Option<String>,
}

async fn status(State(jobs): State<Jobs>, Query(q): Query<JobQuery>) -> Answer {
    let h = match q.job {
        Some(name) => find(&jobs, &name)?,
        None => jobs
            .latest()
            .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, "no job registered".into()))?,
    };
    Ok(json_text(h.status_reporter().to_json()))
}

async fn job_status(State(jobs): State<Jobs>, Path(name): Path<String>) -> Answer {
    Ok(json_text(find(&jobs, &name)?.status_reporter().to_json()))
}

async fn list(State(jobs): State<Jobs>) -> Response {
    let list: Vec<serde_json::Value> = jobs
        .handles()
        .into_iter()
        .map(|(name, h)| {
            serde_json::json!({
                "name": name,
                "state": format!("{:?}", h.status()),
                "elapsed_ms": h.status_snapshot().elapsed_ms,
            })
        })
        .collect();
    Json(list).into_response()
}

async fn forget(State(jobs): State<Jobs>, Path(name): Path<String>) -> Answer {
    if !find(&jobs, &name)?.status().is_terminal() {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("job {name:?} is still running: cancel or stop it first"),
        ));
    }
    jobs.remove(&name);
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn savepoint_dir(jobs: &Jobs) -> Result<PathBuf, ApiError> {
    jobs.inner.savepoint_dir.clone().ok_or_else(|| {
        ApiError(
            StatusCode::CONFLICT,
            "no savepoint directory: see Jobs::with_savepoint_dir".into(),
        )
    })
}

async fn savepoint(State(jobs): State<Jobs>, Path(name): Path<String>) -> Answer {
    let h = find(&jobs, &name)?;
    let dir = savepoint_dir(&jobs)?;
    let path = h.trigger_savepoint(dir).await.map_err(internal)?;
    Ok(Json(serde_json::json!({ "job": name, "path": path })).into_response())
}

async fn stop(State(jobs): State<Jobs>, Path(name): Path<String>) -> Answer {
    let h = find(&jobs, &name)?;
    let dir = savepoint_dir(&jobs)?;
    // Returns once the job ended: the answer's state is final and a
    // restart finds the savepoint whole.
    let path = h.stop_with_savepoint(dir).await.map_err(internal)?;
    let state = h.status();
    Ok(
        Json(serde_json::json!({ "job": name, "path": path, "state": format!("{state:?}") }))
            .into_response(),
    )
}

async fn cancel(State(jobs): State<Jobs>, Path(name): Path<String>) -> Answer {
    let h = find(&jobs, &name)?;
    h.cancel();
    let timeout = jobs.inner.cancel_timeout.unwrap_or(DEFAULT_CANCEL_TIMEOUT);
    // The server's own timer bounds the wait (no thread per request). A job
    // that finished or failed before the cancel took effect says so.
    let (code, end) = match tokio::time::timeout(timeout, h.outcome()).await {
        Ok(JobEnd::Finished(_)) => (StatusCode::OK, Some("finished")),
        Ok(JobEnd::Canceled) => (StatusCode::OK, Some("canceled")),
        Ok(JobEnd::Failed(_)) => (StatusCode::OK, Some("failed")),
        Err(_) => (StatusCode::ACCEPTED, None),
    };
    Ok((
        code,
        Json(serde_json::json!({ "job": name, "state": format!("{:?}", h.status()), "end": end })),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_bytes_are_histograms_with_buckets_and_help() {
        let recorder = prometheus_builder().expect("buckets").build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            floe_actors::metrics::describe_metrics();
            metrics::histogram!("floe_checkpoint_duration_seconds", "job" => "j").record(0.2);
            metrics::histogram!("floe_checkpoint_state_bytes", "job" => "j").record(5000.0);
        });
        let text = handle.render();
        assert!(
            text.contains("# TYPE floe_checkpoint_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("floe_checkpoint_duration_seconds_bucket{job=\"j\",le=\"0.25\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("floe_checkpoint_duration_seconds_bucket{job=\"j\",le=\"0.1\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("floe_checkpoint_state_bytes_bucket{job=\"j\",le=\"16384\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# HELP floe_checkpoint_duration_seconds "),
            "{text}"
        );
    }
}
