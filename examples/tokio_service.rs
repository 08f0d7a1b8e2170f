//! A plain tokio program that embeds one floe job and serves floe's router
//! beside it (no web framework of its own): the job's metrics, status, a
//! savepoint, stop and cancel over HTTP, while the program awaits the job.
//!
//! ```sh
//! cargo run --example tokio_service -- 127.0.0.1:9464 /tmp/numbers
//! curl localhost:9464/status
//! curl -XPOST localhost:9464/jobs/numbers/savepoint   # {"path": ...}
//! curl -XPOST localhost:9464/jobs/numbers/cancel      # the program exits
//! cargo run --example tokio_service -- 127.0.0.1:9464 /tmp/numbers  # resumes
//! ```
//!
//! The job checkpoints into `WORK/checkpoints` with
//! `Config::resume_latest`: a start resumes from the latest completed
//! checkpoint there, and the first start (nothing there yet) starts fresh,
//! so the program is the same on every start.
//!
//! `execute_async` returns at once (the job runs on an actix system of its
//! own thread); `JobHandle::wait` is a future, awaited here without
//! blocking a tokio worker.

use floe::http::Jobs;
use floe::operators::sink::SinkFunction;
use floe::{CheckpointConfig, JobHandle, StreamExecutionEnvironment};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the job checkpoints.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// The latest count per key the job emitted (a service would write them
/// to its store; here they stay in memory for the caller to read).
#[derive(Clone, Default)]
pub struct LatestCounts(Arc<Mutex<BTreeMap<u64, u64>>>);

impl LatestCounts {
    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<u64, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

impl SinkFunction<(u64, u64)> for LatestCounts {
    async fn write(&mut self, batch: floe::Batch<(u64, u64)>) -> floe::Result<()> {
        // One lock per batch, not per record.
        if let Ok(mut m) = self.0.lock() {
            for r in batch {
                m.insert(r.value.0, r.value.1);
            }
        }
        Ok(())
    }
}

/// Starts the job: `records` numbers counted per key `i % 100`, the
/// counting operator throttled to `rate` records/s if given, the running
/// counts written to `counts`. It resumes from the latest completed
/// checkpoint under `work/checkpoints`, or starts fresh when there is none:
/// start it again with the same `records` (the checkpointed positions are
/// within the generator's range).
pub fn start_job(
    records: u64,
    rate: Option<f64>,
    work: &Path,
    counts: &LatestCounts,
) -> floe::Result<JobHandle> {
    let env = StreamExecutionEnvironment::new();
    env.set_job_name("numbers").set_parallelism(2);
    env.set_checkpoint_config(CheckpointConfig::every(CHECKPOINT_INTERVAL));
    env.set_config(env.config().resume_latest(work.join("checkpoints")));
    let mut sum = env
        .from_generator(records, |i| (i % 100, 1u64))
        .uid("numbers")
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .uid("sum");
    if let Some(rate) = rate {
        sum = sum.set_input_rate(rate);
    }
    sum.sink("Latest Counts", counts.clone());
    // Dropping the last handle (the program's end) cancels the job.
    Ok(env.execute_async()?.cancel_on_drop(true))
}

/// Serves floe's router for `jobs` on `listener` until `job` ends; returns
/// the job's final state.
pub async fn serve_until_done(
    listener: tokio::net::TcpListener,
    jobs: Jobs,
    job: JobHandle,
) -> std::io::Result<floe::JobStatus> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, floe::http::router(jobs))
            .with_graceful_shutdown(async {
                let _ = done_rx.await;
            })
            .await
    });
    // The job's end is a future: awaiting it keeps the worker free.
    let _ = job.wait().await;
    let _ = done_tx.send(());
    server.await.map_err(std::io::Error::other)??;
    Ok(job.status())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9464".into());
    // The same directory on every start: the job resumes from it.
    let work = std::env::args()
        .nth(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("floe-tokio-service"));
    let prometheus = floe::http::install_prometheus().map_err(std::io::Error::other)?;
    let counts = LatestCounts::default();
    let job =
        start_job(u64::MAX / 2, Some(100_000.0), &work, &counts).map_err(std::io::Error::other)?;
    let jobs = Jobs::new()
        .with_prometheus(prometheus)
        .with_savepoint_dir(work.join("savepoints"));
    let _ = jobs.insert(job.clone());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let state = serve_until_done(listener, jobs, job).await?;
    println!("job {state}");
    Ok(())
}
