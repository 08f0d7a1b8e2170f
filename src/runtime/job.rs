//! Job handles: status, wait, cancel, live metrics of a running job, and
//! its lifecycle: stop with a savepoint, cancel and wait, cancel on drop.
//!
//! By default dropping every clone of a [`JobHandle`] leaves the job
//! running (it ends on its own, or with the process);
//! [`JobHandle::cancel_on_drop`] makes the last drop cancel it.
//!
//! [`JobHandle::status_snapshot`] gives the whole observable state of a job in
//! one serializable value (see [`super::status`]).

use super::events::{EventLog, JobEvent};
use super::status::{FailoverStats, JobGraphInfo, JobStatusSnapshot, StatusReporter};
use crate::checkpoint::CheckpointStats;
use crate::checkpoint::coordinator::CheckpointCoordinator;
use crate::checkpoint::requests::{StopWithCheckpoint, TriggerSavepoint};
use crate::{Error, Result};
use actix::Addr;
use floe_actors::messages::CancelJob;
use floe_actors::metrics::{JobMetrics, OperatorSummary};
use floe_actors::supervisor::{JobOutcome, JobStatus, JobSupervisor};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::sync::{Arc, Mutex};

/// How many restarts of the job a savepoint is taken again after, before
/// it fails.
const SAVEPOINT_RESTARTS: u32 = 3;

fn runtime_error(message: impl Into<String>) -> Error {
    Error::Runtime(floe_actors::Error::Runtime(message.into()))
}

/// What a finished job reports: elapsed time, records per operator, queue peaks.
pub type JobResult = JobOutcome;

/// How a job ended ([`JobHandle::outcome`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum JobEnd {
    /// Every subtask finished (or the job stopped with a savepoint).
    Finished(JobResult),
    /// The job was canceled.
    Canceled,
    /// The job failed for good.
    Failed(Error),
}

/// A handle on a running job. Cloning it is cheap; every clone sees the same job.
#[derive(Clone)]
pub struct JobHandle {
    control: Arc<JobControl>,
    /// Shared by every clone: cancels the job when the last one drops, if
    /// asked to.
    guard: Arc<DropGuard>,
    status: Arc<Mutex<JobStatus>>,
    metrics: Arc<JobMetrics>,
    graph: Arc<JobGraphInfo>,
    done: Shared<BoxFuture<'static, floe_actors::Result<JobOutcome>>>,
    checkpoints: Arc<Mutex<CheckpointStats>>,
    info: Arc<std::collections::BTreeMap<String, String>>,
}

/// Reaches the current attempt of a job (restarts replace it). The job's
/// first attempt is deployed after the handle exists (so that starting a
/// job never waits for a restore): until then there is no attempt.
pub(crate) struct JobControl {
    current: Mutex<Option<(Addr<JobSupervisor>, Addr<CheckpointCoordinator>)>>,
    /// The coordinator a savepoint or a stop can reach now: none between a
    /// failed attempt and the next one (a request sent then would reach a
    /// coordinator that is gone).
    live: tokio::sync::watch::Sender<Live>,
    /// Fired (and dropped) when the first attempt is deployed; dropped
    /// unfired when its deployment failed.
    deployed_tx: Mutex<Option<futures::channel::oneshot::Sender<()>>>,
    /// Resolves to whether the first attempt was deployed.
    deployed: Shared<BoxFuture<'static, bool>>,
    /// Why the first deployment failed, as its typed error: handed to the
    /// first waiter (later ones get the runtime error's text).
    deploy_error: Mutex<Option<Error>>,
    canceled: std::sync::atomic::AtomicBool,
    failover: Arc<Mutex<FailoverStats>>,
    events: Arc<EventLog>,
    observers: Arc<crate::failover::Observers>,
}

/// Where the job's attempts are, for requests to the coordinator.
#[derive(Clone)]
enum Live {
    Starting,
    Running(Addr<CheckpointCoordinator>),
    /// Between a failed attempt and the next one (or the job's end).
    Restarting,
    Ended,
}

impl JobControl {
    pub fn new(
        failover: Arc<Mutex<FailoverStats>>,
        events: Arc<EventLog>,
        observers: Arc<crate::failover::Observers>,
    ) -> Self {
        let (deployed_tx, deployed_rx) = futures::channel::oneshot::channel();
        JobControl {
            current: Mutex::new(None),
            live: tokio::sync::watch::Sender::new(Live::Starting),
            deployed_tx: Mutex::new(Some(deployed_tx)),
            deployed: deployed_rx.map(|r| r.is_ok()).boxed().shared(),
            deploy_error: Mutex::new(None),
            canceled: Default::default(),
            failover,
            events,
            observers,
        }
    }

    pub fn set_current(
        &self,
        supervisor: Addr<JobSupervisor>,
        coordinator: Addr<CheckpointCoordinator>,
    ) {
        self.live.send_replace(Live::Running(coordinator.clone()));
        if let Ok(mut c) = self.current.lock() {
            *c = Some((supervisor, coordinator));
        }
        if let Some(tx) = self.deployed_tx.lock().ok().and_then(|mut t| t.take()) {
            let _ = tx.send(());
        }
        if self.canceled() {
            self.cancel();
        }
    }

    /// The current attempt ended (failed: a restart may follow, or the
    /// job's end).
    pub fn attempt_ended(&self) {
        self.live.send_if_modified(|live| match live {
            Live::Running(_) => {
                *live = Live::Restarting;
                true
            }
            _ => false,
        });
    }

    /// The job ended: no attempt follows.
    pub fn job_ended(&self) {
        self.live.send_replace(Live::Ended);
    }

    /// The first deployment failed with `error` (the job's result).
    pub fn deploy_failed(&self, error: Error) {
        self.live.send_replace(Live::Ended);
        if let Ok(mut e) = self.deploy_error.lock() {
            *e = Some(error);
        }
        // Dropped unfired: whoever waits for the deployment hears it failed.
        drop(self.deployed_tx.lock().ok().and_then(|mut t| t.take()));
    }

    pub fn canceled(&self) -> bool {
        self.canceled.load(std::sync::atomic::Ordering::Acquire)
    }

    fn cancel(&self) {
        self.canceled
            .store(true, std::sync::atomic::Ordering::Release);
        if let Ok(c) = self.current.lock()
            && let Some((supervisor, _)) = c.as_ref()
        {
            supervisor.do_send(CancelJob);
        }
    }

    /// Whether the first attempt was deployed (waits for it).
    async fn started(&self) -> bool {
        self.deployed.clone().await
    }

    /// The coordinator of a running attempt other than `previous`'s: waits
    /// through a restart for the next attempt; `None` once the job ended.
    async fn running_coordinator(
        &self,
        previous: Option<&Addr<CheckpointCoordinator>>,
    ) -> Option<Addr<CheckpointCoordinator>> {
        let mut live = self.live.subscribe();
        let state = live
            .wait_for(|l| match l {
                Live::Running(c) => previous != Some(c),
                Live::Ended => true,
                Live::Starting | Live::Restarting => false,
            })
            .await
            .ok()?
            .clone();
        match state {
            Live::Running(c) => Some(c),
            _ => None,
        }
    }

    pub fn update_failover(&self, f: impl FnOnce(&mut FailoverStats)) {
        if let Ok(mut s) = self.failover.lock() {
            f(&mut s);
        }
    }
}

/// Cancels the job when dropped, if [`JobHandle::cancel_on_drop`] asked.
struct DropGuard {
    control: Arc<JobControl>,
    cancel: std::sync::atomic::AtomicBool,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if self.cancel.load(std::sync::atomic::Ordering::Acquire) {
            self.control.cancel();
        }
    }
}

impl JobHandle {
    pub(crate) fn new(
        control: Arc<JobControl>,
        status: Arc<Mutex<JobStatus>>,
        metrics: Arc<JobMetrics>,
        graph: JobGraphInfo,
        done: futures::channel::oneshot::Receiver<floe_actors::Result<JobOutcome>>,
    ) -> Self {
        let done = async move {
            match done.await {
                Ok(r) => r,
                Err(_) => Err(floe_actors::Error::Runtime(
                    "the job supervisor stopped without a result".into(),
                )),
            }
        }
        .boxed()
        .shared();
        JobHandle {
            guard: Arc::new(DropGuard {
                control: control.clone(),
                cancel: Default::default(),
            }),
            control,
            status,
            metrics,
            graph: Arc::new(graph),
            done,
            checkpoints: Arc::default(),
            info: Arc::default(),
        }
    }

    pub(crate) fn with_info(mut self, info: std::collections::BTreeMap<String, String>) -> Self {
        self.info = Arc::new(info);
        self
    }

    pub(crate) fn with_checkpoints(mut self, stats: Arc<Mutex<CheckpointStats>>) -> Self {
        self.checkpoints = stats;
        self
    }

    /// Restarts so far: how many, how many subtasks, the longest recovery.
    pub fn failover_stats(&self) -> FailoverStats {
        self.control
            .failover
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The job's events — restarts, restores that fell back to an older
    /// checkpoint — as a stream: every event so far, then each new one; it
    /// ends when the job ends. The library only logs them (`tracing`); a
    /// program shows them its own way:
    ///
    /// ```no_run
    /// # fn show(handle: &floe::JobHandle) {
    /// for event in futures::executor::block_on_stream(handle.events()) {
    ///     eprintln!("{event:?}");
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> impl futures::Stream<Item = JobEvent> + Send + Unpin + 'static {
        self.control.events.subscribe()
    }

    /// Checkpoint counters and recent history.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.checkpoints
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Takes a savepoint into a new directory under `dir` and returns its
    /// path: aligned barriers through the whole job, state written
    /// self-contained, with a format version and checksums. A job can start
    /// from it (`Config::restore_from`), at another parallelism.
    ///
    /// Requested while the job restarts, it is taken by the next attempt;
    /// interrupted by a restart, it is taken again by the next attempt (a
    /// line says so), up to three times.
    pub async fn trigger_savepoint(
        &self,
        dir: impl Into<std::path::PathBuf>,
    ) -> Result<std::path::PathBuf> {
        let dir = dir.into();
        if !self.control.started().await {
            return Err(runtime_error("the job failed to start"));
        }
        let mut previous = None;
        let mut restarts = 0;
        loop {
            let Some(coordinator) = self.control.running_coordinator(previous.as_ref()).await
            else {
                return Err(runtime_error(
                    "the job ended before the savepoint completed",
                ));
            };
            if restarts > 0 {
                tracing::warn!(
                    restarts,
                    "the job restarted before the savepoint completed; taking it again"
                );
            }
            let (reply, rx) = futures::channel::oneshot::channel();
            coordinator.do_send(TriggerSavepoint {
                dir: dir.clone(),
                reply,
            });
            match rx.await {
                Ok(result) => return result,
                // Its attempt ended: the job restarts, or it ended.
                Err(_) if restarts == SAVEPOINT_RESTARTS => {
                    return Err(runtime_error(format!(
                        "the job restarted or ended {} times before the savepoint completed",
                        restarts + 1
                    )));
                }
                Err(_) => {
                    restarts += 1;
                    previous = Some(coordinator);
                }
            }
        }
    }

    /// Stops the job cleanly (Flink's stop-with-savepoint, without
    /// draining): a final checkpoint — or, with `savepoint_dir`, a savepoint
    /// into a new directory there — is taken, and once it completed every
    /// subtask is notified (two-phase-commit sinks commit up to it) and
    /// finishes where it is: no end of input is signalled, so windows are
    /// not fired early. [`wait`](Self::wait) then returns the job's result
    /// as for a job that finished, and a job restored from that checkpoint
    /// (`Config::restore_from` on the checkpoint directory, or the
    /// savepoint) goes on exactly from there.
    ///
    /// Returns the savepoint's path (`None` for a checkpoint). When the
    /// checkpoint fails the job runs on and the error is returned: cancel it
    /// or try again.
    pub async fn stop_with_checkpoint(
        &self,
        savepoint_dir: Option<std::path::PathBuf>,
    ) -> Result<Option<std::path::PathBuf>> {
        if !self.control.started().await {
            return Err(runtime_error("the job failed to start"));
        }
        // Sent to a running attempt (after a restart under way).
        let Some(coordinator) = self.control.running_coordinator(None).await else {
            return Err(runtime_error("the job ended before its final checkpoint"));
        };
        let (reply, rx) = futures::channel::oneshot::channel();
        coordinator.do_send(StopWithCheckpoint {
            savepoint_dir,
            reply,
        });
        rx.await.map_err(|_| {
            runtime_error("the job ended or restarted before its final checkpoint completed")
        })?
    }

    /// The job's name: the `job` label of its metrics.
    pub fn job_name(&self) -> &str {
        self.metrics.job()
    }

    /// The job's current state.
    pub fn status(&self) -> JobStatus {
        *self.status.lock().expect("status lock poisoned")
    }

    /// Waits for the job to end: its result, [`Error::Canceled`] when it
    /// was canceled, or the error that failed it.
    pub async fn wait(&self) -> Result<JobResult> {
        self.ended().await
    }

    /// Resolves when the job ended, without holding a clone of the handle
    /// (so that it does not keep [`cancel_on_drop`](Self::cancel_on_drop)
    /// from firing) and without taking its result: for the runtime's own
    /// keep-alive, never for a waiter of the result.
    pub(crate) fn finished(&self) -> impl std::future::Future<Output = ()> + use<> {
        self.done.clone().map(|_| ())
    }

    /// A probe telling, without waiting, whether the job's end was reported
    /// (its threads have ended: nothing of it publishes metrics any more).
    /// Holds no clone of the handle, so it does not keep
    /// [`cancel_on_drop`](Self::cancel_on_drop) from firing.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn end_probe(&self) -> impl Fn() -> bool + Send + Sync + 'static + use<> {
        let done = self.done.clone();
        move || done.peek().is_some() || done.clone().now_or_never().is_some()
    }

    /// The job's end, without holding a clone of the handle (so that a
    /// waiter does not keep [`cancel_on_drop`](Self::cancel_on_drop) from
    /// firing).
    pub(crate) fn ended(&self) -> impl std::future::Future<Output = Result<JobResult>> + use<> {
        let control = self.control.clone();
        self.done.clone().map(move |r| {
            r.map_err(|e| match e {
                floe_actors::Error::Canceled => Error::Canceled,
                e => match control.deploy_error.lock().ok().and_then(|mut d| d.take()) {
                    Some(typed) => typed,
                    None => Error::Runtime(e),
                },
            })
        })
    }

    /// Waits for the job to end and tells how: finished (with its result),
    /// canceled, or failed (with the error).
    pub async fn outcome(&self) -> JobEnd {
        match self.wait().await {
            Ok(r) => JobEnd::Finished(r),
            Err(Error::Canceled) => JobEnd::Canceled,
            Err(e) => JobEnd::Failed(e),
        }
    }

    /// Asks the job to cancel; `wait` then returns [`Error::Canceled`].
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// Cancels the job and waits for it to end, at most `timeout`: how it
    /// ended (a job that finished or failed before the cancel took effect
    /// says so), or [`Error::TimedOut`] (the job may still be stopping).
    ///
    /// The timer runs on a thread of its own (which ends with the wait),
    /// so this works from any executor (tokio, actix,
    /// `futures::executor::block_on`).
    pub async fn cancel_and_wait(&self, timeout: std::time::Duration) -> Result<JobEnd> {
        self.cancel();
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        // Dropped when this returns: the timer thread wakes and ends.
        let (_done, done_rx) = std::sync::mpsc::channel::<()>();
        let timer = std::thread::Builder::new()
            .name("floe-cancel-timer".into())
            .spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    done_rx.recv_timeout(timeout)
                {
                    let _ = tx.send(());
                }
            });
        let outcome = std::pin::pin!(self.outcome());
        if timer.is_err() {
            // No thread for the timer: wait without a bound.
            return Ok(outcome.await);
        }
        match futures::future::select(outcome, rx).await {
            futures::future::Either::Left((end, _)) => Ok(end),
            futures::future::Either::Right(_) => Err(Error::TimedOut {
                waiting_for: "the canceled job to end",
                after: timeout,
            }),
        }
    }

    /// Whether dropping the last clone of this handle cancels the job
    /// (default `false`: the job runs on without a handle, as before).
    /// Returns the handle, for `env.execute_async()?.cancel_on_drop(true)`.
    pub fn cancel_on_drop(self, cancel: bool) -> Self {
        self.guard
            .cancel
            .store(cancel, std::sync::atomic::Ordering::Release);
        self
    }

    /// Flink's stop-with-savepoint: takes a savepoint into a new directory
    /// under `dir`, then the sources stop where they are, every subtask is
    /// notified of the savepoint (two-phase-commit sinks commit up to it)
    /// and the job finishes. Returns once the job ended, with the
    /// savepoint's path: a job started from it (`Config::restore_from`)
    /// goes on exactly from there.
    ///
    /// When the savepoint fails the job runs on and the error is returned.
    pub async fn stop_with_savepoint(
        &self,
        dir: impl Into<std::path::PathBuf>,
    ) -> Result<std::path::PathBuf> {
        let path = self
            .stop_with_checkpoint(Some(dir.into()))
            .await?
            .ok_or_else(|| {
                Error::Runtime(floe_actors::Error::Runtime(
                    "the final savepoint reported no path".into(),
                ))
            })?;
        self.wait().await?;
        Ok(path)
    }

    /// Waits until the job completed `n` checkpoints in all (savepoints not
    /// counted); `false` if it ended before. Wakes on the completion, no
    /// polling.
    pub async fn wait_for_checkpoints(&self, n: u64) -> bool {
        self.control
            .observers
            .progress
            .reached(crate::failover::Count::Checkpoints, n)
            .await
    }

    /// Waits until the job restarted `n` times in all (restart-all or a
    /// region); `false` if it ended before.
    pub async fn wait_for_restarts(&self, n: u64) -> bool {
        self.control
            .observers
            .progress
            .reached(crate::failover::Count::Restarts, n)
            .await
    }

    /// Records in and out per operator so far.
    pub fn operator_metrics(&self) -> Vec<OperatorSummary> {
        self.metrics.operator_summaries()
    }

    /// Everything observable about the job now: state, graph, records and
    /// time shares per operator, watermarks per subtask and channel, failures.
    pub fn status_snapshot(&self) -> JobStatusSnapshot {
        self.status_reporter().snapshot()
    }

    /// A `Send + Sync` snapshot builder for another thread (an HTTP endpoint).
    pub fn status_reporter(&self) -> StatusReporter {
        StatusReporter {
            status: self.status.clone(),
            metrics: self.metrics.clone(),
            graph: self.graph.clone(),
            checkpoints: self.checkpoints.clone(),
            failover: self.control.failover.clone(),
            info: self.info.clone(),
        }
    }
}
