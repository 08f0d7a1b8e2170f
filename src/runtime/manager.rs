//! The job manager: launches a job, runs its attempts and restarts failed
//! ones.
//!
//! 0. [`launch`] readies the configuration (a temporary checkpoint
//!    directory, the job's name), makes what every attempt shares
//!    (`shared.rs`) and the job's handle, and spawns the manager, which
//!    deploys the first attempt (`deploy.rs`) after the caller has its
//!    handle. [`launch_on_pool`] does so on an arbiter pool's thread.
//! 1. An attempt is one deployment: subtasks, supervisor, checkpoint
//!    coordinator. Its supervisor reports the attempt's outcome once every
//!    thread of the attempt has stopped.
//! 2. A failure is handed to the restart strategy: exhausted, the job fails
//!    with the last error; otherwise, after the strategy's delay, a new
//!    attempt restores the latest completed checkpoint (sources rewind,
//!    state reloads, two-phase-commit sinks commit what the checkpoint
//!    pre-committed and drop what came after), or starts from the beginning
//!    when no checkpoint completed yet.
//! 3. Injected failures (tests, demos) kill a seeded choice of subtask after
//!    each new completed checkpoint; sources hold at their end meanwhile.
//!    With `finish_after_checkpoints` they also hold until that many
//!    checkpoints completed. The manager starts both for each attempt;
//!    `instrumentation.rs` keeps their counters and sends the kills.

use super::deploy::{Attempt, deploy_attempt};
use super::events::{EventLog, JobEvent, RestartEvent};
use super::instrumentation::Instrumentation;
use super::job::{JobControl, JobHandle};
use super::job_graph::Job;
use super::pool::ArbiterPool;
use super::region::recovery_ms;
use super::shared::Shared;
use crate::Result;
use crate::checkpoint::CheckpointStats;
use crate::config::Config;
use crate::failover::{JobObserver, Latch, RestartTracker};
use floe_actors::error::Error;
use floe_actors::metrics::JobMetrics;
use floe_actors::supervisor::{JobOutcome, JobStatus};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Deploys `plan` in the current actix system and returns the job's handle;
/// the job's manager restarts it on failure as its restart strategy allows.
pub(crate) fn launch(plan: Job, config: Config, pool: Option<ArbiterPool>) -> Result<JobHandle> {
    config.validate()?;
    let mut config = config;
    config.resolve_restore()?;
    let mut temporary = None;
    if config.checkpoint.enabled() && config.checkpoint.dir.is_none() {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("floe-checkpoints-{}-{n}", std::process::id()));
        config.checkpoint.dir = Some(dir.clone());
        temporary = Some(dir);
    }
    if config.job_name.is_none() {
        static JOBS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        config.job_name = Some(format!("job-{n}"));
    }
    if let Some(mode) = config.deterministic().cloned() {
        // One thread, no wall-clock timer: see `testing::chaos`.
        config.runtime.deterministic = true;
        config.runtime.buffer_timeout = std::time::Duration::ZERO;
        config.runtime.metrics_interval = std::time::Duration::ZERO;
        mode.install();
    }
    let config = Arc::new(config);
    let plan = Arc::new(plan);
    let observers = Arc::new(crate::failover::Observers::new(
        config.hooks.observers.clone(),
    ));
    let shared = Shared {
        observers: observers.clone(),
        status: Arc::new(Mutex::new(JobStatus::Created)),
        metrics: Arc::new(JobMetrics::new(config.job_name.as_deref().unwrap_or("job"))),
        stats: Arc::new(Mutex::new(CheckpointStats::default())),
        instrumentation: Instrumentation::new(&config),
        failover: Arc::default(),
        checkpoint_ids: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        scratch_restarts: Arc::default(),
        events: Arc::new(EventLog::with_observer(observers)),
        region_fence: Default::default(),
        // Deterministic execution keeps every actor on the current arbiter.
        pool: pool.filter(|_| config.deterministic().is_none()),
        object_storage: Mutex::new(None),
    };
    let graph = plan.describe();
    let (done_tx, done_rx) = futures::channel::oneshot::channel();
    let control = Arc::new(JobControl::new(
        shared.failover.clone(),
        shared.events.clone(),
        shared.observers.clone(),
    ));
    let handle = JobHandle::new(
        control.clone(),
        shared.status.clone(),
        shared.metrics.clone(),
        graph,
        done_rx,
    )
    .with_checkpoints(shared.stats.clone())
    .with_info(config.job_info.clone());
    let manager = Manager {
        plan,
        config,
        shared,
        control,
        done: Some(done_tx),
        temporary,
    };
    // Deployed (subtasks spawned, the restored snapshot loaded) by the
    // manager, after the caller has its handle.
    actix::spawn(manager.run());
    Ok(handle)
}

/// Starts `job` on `pool`: its manager on the pool's system thread, its
/// subtasks on the pool's arbiters. Waits for the launch (on the pool's
/// thread), never for the job.
pub(crate) fn launch_on_pool(pool: &ArbiterPool, job: Job, config: Config) -> Result<JobHandle> {
    if pool.on_home() {
        return launch(job, config, Some(pool.clone()));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let on_pool = pool.clone();
    let sent = pool.home().spawn(async move {
        let _ = tx.send(launch(job, config, Some(on_pool)));
    });
    if !sent {
        return Err(crate::Error::Runtime(Error::Runtime(
            "the arbiter pool has stopped".into(),
        )));
    }
    rx.recv().map_err(|_| {
        crate::Error::Runtime(Error::Runtime(
            "the arbiter pool stopped while starting the job".into(),
        ))
    })?
}

/// Runs a job's attempts until its end (see the module's doc).
struct Manager {
    plan: Arc<Job>,
    config: Arc<Config>,
    shared: Shared,
    control: Arc<JobControl>,
    done: Option<futures::channel::oneshot::Sender<floe_actors::Result<JobOutcome>>>,
    /// A temporary checkpoint directory to remove when the job ends.
    temporary: Option<PathBuf>,
}

impl Manager {
    fn set_status(&self, s: JobStatus) {
        if let Ok(mut st) = self.shared.status.lock() {
            *st = s;
        }
    }

    /// Deploys the first attempt, then runs the job to its end.
    async fn run(mut self) {
        let first = match self.control.canceled() {
            true => Err(Error::Canceled),
            false => deploy_attempt(
                &self.plan,
                &self.config,
                &self.shared,
                self.config.restore_from.as_deref(),
                false,
            )
            .map_err(|e| {
                let runtime = match &e {
                    crate::Error::Runtime(r) => r.clone(),
                    other => Error::Runtime(other.to_string()),
                };
                self.control.deploy_failed(e);
                runtime
            }),
        };
        match first {
            Ok(first) => self.run_from(first).await,
            Err(e) => self.end(Err(e)),
        }
    }

    async fn run_from(mut self, first: Attempt) {
        let started = Instant::now();
        let mut tracker = RestartTracker::new(self.config.restart_strategy(), self.config.seed);
        let mut attempt = first;
        let mut rng = self.config.random_failures().1 ^ 0x9e37_79b9_7f4a_7c15;
        let instrumentation = self.shared.instrumentation.clone();
        instrumentation.release_after_checkpoints(
            self.shared.observers.clone(),
            self.config.checkpoint.finish_after_checkpoints,
        );
        let result = loop {
            self.control
                .set_current(attempt.supervisor.clone(), attempt.coordinator.clone());
            let ended = Arc::new(Latch::default());
            if instrumentation.kills_pending() {
                rng = crate::text::mix64(rng);
                actix::spawn(
                    instrumentation.clone().inject_failures(
                        self.shared.observers.clone(),
                        attempt.fail.clone(),
                        ended.clone(),
                        rng,
                        self.config
                            .checkpoint
                            .interval
                            .unwrap_or(Duration::from_millis(100)),
                    ),
                );
            }
            let outcome = match (&mut attempt.done).await {
                Ok(r) => r,
                Err(_) => Err(Error::Runtime(
                    "the job supervisor stopped without a result".into(),
                )),
            };
            ended.set();
            self.control.attempt_ended();
            if self.config.deterministic().is_some() {
                // Its arbiter is the job's thread, not stopped with the
                // attempt: stop it before anything reads what it completed.
                let _ = attempt
                    .coordinator
                    .send(floe_actors::checkpoint::messages::StopCoordinator)
                    .await;
            }
            if let Err(e) = &outcome
                && e.injected().is_some()
            {
                // A kill of restart-all took effect; the sources stay held
                // until the last one has.
                instrumentation.kill_took_effect();
            }
            let error = match outcome {
                Ok(o) => break Ok(o),
                Err(e) if e == Error::Canceled || self.control.canceled() => {
                    break Err(Error::Canceled);
                }
                Err(e) => e,
            };
            self.shared.observers.failed(&error);
            let now = Instant::now();
            if self.config.failover == crate::failover::FailoverStrategy::Region {
                // Regions restarted in place until the strategy ran out.
                break Err(error);
            }
            if !error.is_retriable() {
                // It would fail every attempt the same way.
                tracing::warn!(error = %error, "non-retriable failure; the job fails without restarting");
                break Err(error);
            }
            let Some(delay) = tracker.on_failure(now) else {
                tracing::warn!(
                    error = %error,
                    restarts = tracker.restarts(),
                    "restart strategy exhausted; the job fails"
                );
                break Err(error);
            };
            let failed_at = self.shared.metrics.last_failure_at().unwrap_or(now);
            self.set_status(JobStatus::Restarting);
            tracing::info!(error = %error, delay_ms = delay.as_millis() as u64, "restarting the job");
            if !delay.is_zero() && self.config.deterministic().is_none() {
                actix_rt::time::sleep(delay).await;
            }
            if self.control.canceled() {
                break Err(Error::Canceled);
            }
            let completed = self.shared.stats.lock().ok().and_then(|s| s.last_completed);
            let restore: Option<PathBuf> = match completed {
                Some(_) => self.config.checkpoint.dir.clone(),
                None => self.config.restore_from.clone(),
            };
            tracing::info!(
                checkpoint = completed.map_or(0, |c| c.0),
                "restoring after a failure"
            );
            match deploy_attempt(
                &self.plan,
                &self.config,
                &self.shared,
                restore.as_deref(),
                true,
            ) {
                Ok(mut a) => {
                    // What was restored: the newest intact checkpoint (an
                    // older one when the newest is damaged), or the
                    // configured restore path, or nothing.
                    if let Some(mode) = self.config.deterministic() {
                        let plan = &self.plan;
                        let subtasks = (0..plan.heads.len())
                            .flat_map(|v| {
                                let p = plan.nodes[plan.heads[v]].parallelism;
                                (0..p as u32).map(move |j| (v as u32, j))
                            })
                            .collect();
                        mode.record(crate::failover::deterministic::TraceEvent::Restarted {
                            subtasks,
                            checkpoint: a.restored,
                        });
                    }
                    self.shared
                        .metrics
                        .record_restart(a.subtasks as u64, a.restored);
                    let mut number = 0;
                    self.control.update_failover(|s| {
                        s.restarts += 1;
                        s.restarted_subtasks += a.subtasks as u64;
                        s.restored_checkpoints.push(a.restored);
                        number = s.restarts;
                    });
                    tracing::warn!(
                        attempt = number,
                        cause = %error,
                        checkpoint = a.restored.map_or(0, |c| c.0),
                        "restarted the job"
                    );
                    self.shared.events.emit(JobEvent::Restarted(RestartEvent {
                        attempt: number,
                        cause: error.to_string(),
                        restored_checkpoint: a.restored,
                        subtasks: a.subtasks as u64,
                        delay_ms: delay.as_millis() as u64,
                    }));
                    if let Some(first) = a.first_activity.take() {
                        // Recorded when the attempt first processes records
                        // (an event, not a poll); nothing if it fails first.
                        let control = self.control.clone();
                        actix::spawn(async move {
                            if let Some(ms) = recovery_ms(first, failed_at).await {
                                control.update_failover(|s| {
                                    s.max_recovery_ms = s.max_recovery_ms.max(ms)
                                });
                            }
                        });
                    }
                    attempt = a;
                }
                Err(e) => break Err(Error::Runtime(restart_failed(&e, completed, &restore))),
            }
        };
        let result = result.map(|mut o| {
            o.elapsed = started.elapsed();
            o.operators = self.shared.metrics.operator_summaries();
            o
        });
        self.end(result);
    }

    /// Ends the job with `result`: its status, observers, event
    /// subscribers, temporary files, and the handle's waiters.
    fn end(&mut self, result: floe_actors::Result<JobOutcome>) {
        self.control.job_ended();
        self.set_status(match &result {
            Ok(_) => JobStatus::Finished,
            Err(Error::Canceled) => JobStatus::Canceled,
            Err(_) => JobStatus::Failed,
        });
        if self.config.deterministic().is_some() {
            crate::failover::deterministic::DeterministicMode::uninstall();
        }
        if let Some(status) = self.shared.status.lock().ok().map(|s| *s) {
            self.shared.observers.ended(status);
        }
        // Subscribers' streams end before the job's result is out.
        self.shared.events.close();
        if let Some(dir) = self.temporary.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        // Before the result is out: a process that exits on it leaves the
        // checkpoint prefix free for the next job.
        let storage = self
            .shared
            .object_storage
            .lock()
            .map(|mut s| s.take())
            .unwrap_or_default();
        if let Some(storage) = storage {
            storage.release();
        }
        if let Some(done) = self.done.take() {
            let _ = done.send(result);
        }
    }
}

impl Drop for Manager {
    /// A manager dropped without ending the job (its actix system stopped)
    /// still ends its event subscribers' streams, so no one waits on them.
    fn drop(&mut self) {
        self.shared.events.close();
        // Nor does anyone wait on its progress (a checkpoint count) forever.
        self.shared.observers.progress.ended(JobStatus::Canceled);
    }
}

/// Why a restart could not be deployed. When the checkpoint directory no
/// longer holds any checkpoint although this job completed `completed`
/// there, the directory was deleted or replaced while the job ran: said so,
/// rather than only that nothing is there.
fn restart_failed(
    error: &crate::Error,
    completed: Option<floe_actors::ids::CheckpointId>,
    restore: &Option<PathBuf>,
) -> String {
    match (error, completed, restore) {
        (
            crate::Error::Checkpoint(crate::checkpoint::CheckpointError::NotFound { .. }),
            Some(id),
            Some(dir),
        ) => format!(
            "restart failed: the checkpoint directory '{}' was deleted or replaced while the \
             job ran: checkpoint {}, which the job completed there, is gone",
            dir.display(),
            id.0
        ),
        _ => format!("restart failed: {error}"),
    }
}
