//! The CLI's metrics endpoint: `floe::http`'s router (`/metrics` in
//! Prometheus text, `/status` as JSON, the job's controls) served on a
//! thread of its own for the life of the job, and for `--metrics-linger-ms`
//! after it.
//!
//! The Prometheus recorder is installed globally, so only the binary does it;
//! every scrape first copies the job's counters into the `metrics` facade, so
//! the answer is current whatever the publishing interval.

use floe::http::{BackgroundServer, Jobs, PrometheusHandle};
use floe::{Error, JobHandle, Result, StreamExecutionEnvironment};
use std::time::Duration;

/// Options shared by the `run` jobs.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ObserveArgs {
    /// Serve `/metrics` (Prometheus) and `/status` (JSON) on this address,
    /// e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub metrics_addr: Option<String>,
    /// Keep serving this long after the job ended (milliseconds).
    #[arg(long, default_value_t = 0)]
    pub metrics_linger_ms: u64,
    /// Print a status line on stderr every this many milliseconds (records/s,
    /// backpressure, last checkpoint) instead of the progress bar.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub status_interval: Option<u64>,
    /// Do not publish metrics while the job runs (counters are still kept
    /// and published once at the end; operator state sizes are sampled at
    /// the end only).
    #[arg(long, conflicts_with = "metrics_addr")]
    pub no_metrics: bool,
    /// The job's name: the `job` label of every metric (default: the
    /// command's name).
    #[arg(long)]
    pub job_name: Option<String>,
    /// A fact about the job shown in `/status` (`info`) and as a card on
    /// the dashboard, e.g. `--job-info team=payments` (repeatable).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_job_info)]
    pub job_info: Vec<(String, String)>,
}

/// Parses `KEY=VALUE`: a key of letters, digits, `_`, `-` and `.`.
fn parse_job_info(s: &str) -> std::result::Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE"))?;
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err(format!(
            "'{key}': a key is letters, digits, '_', '-' and '.'"
        ));
    }
    Ok((key.to_string(), value.to_string()))
}

/// A running endpoint; stops serving when dropped.
pub struct Endpoint {
    _server: BackgroundServer,
    linger: Duration,
}

impl ObserveArgs {
    /// Names the job (`--job-name`, else `command`), adds `--job-info`,
    /// switches periodic
    /// metrics off with `--no-metrics`, and installs the Prometheus recorder
    /// when an address was given. Call before the job starts, so every
    /// counter is recorded.
    pub fn install(
        &self,
        env: &StreamExecutionEnvironment,
        command: &str,
    ) -> Result<Option<PrometheusHandle>> {
        let mut config = env.config();
        config.job_name = Some(self.job_name.clone().unwrap_or_else(|| command.to_string()));
        config.job_info.extend(self.job_info.iter().cloned());
        if self.no_metrics {
            config.runtime.metrics_interval = Duration::ZERO;
        }
        env.set_config(config);
        if self.metrics_addr.is_none() {
            return Ok(None);
        }
        floe::http::install_prometheus()
            .map(Some)
            .map_err(|e| Error::InvalidConfig {
                source: Box::new(e),
            })
    }

    /// Starts serving, if an address was given; savepoints and stops asked
    /// for over HTTP (and from the dashboard) go to `savepoints`.
    pub fn serve(
        &self,
        prometheus: Option<PrometheusHandle>,
        job: &JobHandle,
        savepoints: Option<std::path::PathBuf>,
    ) -> Result<Option<Endpoint>> {
        Ok(self
            .serve_jobs(prometheus, savepoints, Some(job))?
            .map(|(endpoint, _)| endpoint))
    }

    /// Starts serving a registry holding `first` (registered before the
    /// address is printed, so a client reading it finds the job), if an
    /// address was given: a command that runs one job after another (group
    /// mode) registers each later one itself.
    pub fn serve_jobs(
        &self,
        prometheus: Option<PrometheusHandle>,
        savepoints: Option<std::path::PathBuf>,
        first: Option<&JobHandle>,
    ) -> Result<Option<(Endpoint, Jobs)>> {
        let (Some(addr), Some(prometheus)) = (&self.metrics_addr, prometheus) else {
            return Ok(None);
        };
        let mut jobs = Jobs::new().with_prometheus(prometheus);
        if let Some(dir) = savepoints {
            jobs = jobs.with_savepoint_dir(dir);
        }
        if let Some(job) = first {
            // A new registry holds no job yet: the insert cannot be refused.
            let _ = jobs.insert(job.clone());
        }
        let server =
            BackgroundServer::start(addr, floe::http::router(jobs.clone())).map_err(|e| {
                Error::InvalidConfig {
                    source: Box::new(e),
                }
            })?;
        let a = server.local_addr();
        eprintln!("metrics: http://{a}/metrics status: http://{a}/status");
        eprintln!("dashboard: http://{a}/dashboard/");
        Ok(Some((
            Endpoint {
                _server: server,
                linger: Duration::from_millis(self.metrics_linger_ms),
            },
            jobs,
        )))
    }
}

impl ObserveArgs {
    /// The status line interval, if `--status-interval` was given.
    pub fn status_interval(&self) -> Option<Duration> {
        self.status_interval.map(Duration::from_millis)
    }
}

impl Endpoint {
    /// Serves for the linger time (the job has ended), then stops.
    pub fn linger(self) {
        if !self.linger.is_zero() {
            // Deliberate: the endpoint stays up this long for late scrapers.
            std::thread::sleep(self.linger);
        }
    }
}
