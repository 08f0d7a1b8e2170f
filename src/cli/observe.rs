//! The CLI's metrics endpoint: `/metrics` (Prometheus text) and `/status`
//! (the job's status snapshot as JSON), served by `tiny_http` on a background
//! thread for the life of the job, and for `--metrics-linger-ms` after it.
//!
//! The Prometheus recorder is installed globally, so only the binary does it;
//! every scrape first copies the job's counters into the `metrics` facade, so
//! the answer is current whatever the publishing interval.

use floe::{Error, Result, StatusReporter, StreamExecutionEnvironment};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
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
}

/// A running endpoint; stops serving when dropped.
pub struct Endpoint {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    linger: Duration,
}

impl ObserveArgs {
    /// Names the job (`--job-name`, else `command`), switches periodic
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
        if self.no_metrics {
            config.runtime.metrics_interval = Duration::ZERO;
        }
        env.set_config(config);
        if self.metrics_addr.is_none() {
            return Ok(None);
        }
        PrometheusBuilder::new()
            .install_recorder()
            .map(Some)
            .map_err(|e| Error::Config(format!("cannot install the metrics recorder: {e}")))
    }

    /// Starts serving, if an address was given.
    pub fn serve(
        &self,
        prometheus: Option<PrometheusHandle>,
        reporter: StatusReporter,
    ) -> Result<Option<Endpoint>> {
        let (Some(addr), Some(prometheus)) = (&self.metrics_addr, prometheus) else {
            return Ok(None);
        };
        let server = tiny_http::Server::http(addr.as_str())
            .map_err(|e| Error::Config(format!("cannot serve metrics on {addr}: {e}")))?;
        if let Some(a) = server.server_addr().to_ip() {
            eprintln!("metrics: http://{a}/metrics status: http://{a}/status");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match server.recv_timeout(Duration::from_millis(50)) {
                    Ok(Some(request)) => respond(request, &prometheus, &reporter),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint stopped");
                        break;
                    }
                }
            }
        });
        Ok(Some(Endpoint {
            stop,
            thread: Some(thread),
            linger: Duration::from_millis(self.metrics_linger_ms),
        }))
    }
}

fn respond(request: tiny_http::Request, prometheus: &PrometheusHandle, reporter: &StatusReporter) {
    let path = request.url().split('?').next().unwrap_or("").to_string();
    let (body, content_type, code) = match path.as_str() {
        "/metrics" => {
            reporter.publish_metrics();
            (prometheus.render(), "text/plain; version=0.0.4", 200)
        }
        "/status" => (reporter.to_json(), "application/json", 200),
        _ => (
            "not found: try /metrics or /status\n".to_string(),
            "text/plain",
            404,
        ),
    };
    let mut response = tiny_http::Response::from_string(body).with_status_code(code);
    if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", content_type) {
        response = response.with_header(h);
    }
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "metrics scrape not answered");
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

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
