//! Job handles: status, wait, cancel, live metrics of a running job.
//!
//! [`JobHandle::status_snapshot`] gives the whole observable state of a job in
//! one serializable value (see [`super::status`]).

use super::status::{JobGraphInfo, JobStatusSnapshot, StatusReporter};
use crate::checkpoint::CheckpointStats;
use crate::checkpoint::coordinator::{CheckpointCoordinator, StopWithCheckpoint, TriggerSavepoint};
use crate::{Error, Result};
use actix::Addr;
use floe_actors::messages::CancelJob;
use floe_actors::metrics::{JobMetrics, OperatorSummary};
use floe_actors::supervisor::{JobOutcome, JobStatus, JobSupervisor};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::sync::{Arc, Mutex};

/// What a finished job reports: elapsed time, records per operator, queue peaks.
pub type JobResult = JobOutcome;

/// A handle on a running job. Cloning it is cheap; every clone sees the same job.
#[derive(Clone)]
pub struct JobHandle {
    control: Arc<JobControl>,
    status: Arc<Mutex<JobStatus>>,
    metrics: Arc<JobMetrics>,
    graph: Arc<JobGraphInfo>,
    done: Shared<BoxFuture<'static, floe_actors::Result<JobOutcome>>>,
    checkpoints: Arc<Mutex<CheckpointStats>>,
}

/// Reaches the current attempt of a job (restarts replace it).
pub(crate) struct JobControl {
    current: Mutex<(Addr<JobSupervisor>, Addr<CheckpointCoordinator>)>,
    cancelled: std::sync::atomic::AtomicBool,
    failover: Arc<Mutex<super::manager::FailoverStats>>,
    events: Arc<super::events::EventLog>,
}

impl JobControl {
    pub fn new(
        supervisor: Addr<JobSupervisor>,
        coordinator: Addr<CheckpointCoordinator>,
        failover: Arc<Mutex<super::manager::FailoverStats>>,
        events: Arc<super::events::EventLog>,
    ) -> Self {
        JobControl {
            current: Mutex::new((supervisor, coordinator)),
            cancelled: Default::default(),
            failover,
            events,
        }
    }

    pub fn set_current(
        &self,
        supervisor: Addr<JobSupervisor>,
        coordinator: Addr<CheckpointCoordinator>,
    ) {
        if let Ok(mut c) = self.current.lock() {
            *c = (supervisor, coordinator);
        }
        if self.cancelled() {
            self.cancel();
        }
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }

    fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::Release);
        if let Ok(c) = self.current.lock() {
            c.0.do_send(CancelJob);
        }
    }

    fn coordinator(&self) -> Option<Addr<CheckpointCoordinator>> {
        self.current.lock().ok().map(|c| c.1.clone())
    }

    pub fn update_failover(&self, f: impl FnOnce(&mut super::manager::FailoverStats)) {
        if let Ok(mut s) = self.failover.lock() {
            f(&mut s);
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
            control,
            status,
            metrics,
            graph: Arc::new(graph),
            done,
            checkpoints: Arc::default(),
        }
    }

    pub(crate) fn with_checkpoints(mut self, stats: Arc<Mutex<CheckpointStats>>) -> Self {
        self.checkpoints = stats;
        self
    }

    /// Restarts so far: how many, how many subtasks, the longest recovery.
    pub fn failover_stats(&self) -> super::manager::FailoverStats {
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
    pub fn events(&self) -> impl futures::Stream<Item = super::JobEvent> + Send + Unpin + 'static {
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
    pub async fn trigger_savepoint(
        &self,
        dir: impl Into<std::path::PathBuf>,
    ) -> Result<std::path::PathBuf> {
        let Some(coordinator) = self.control.coordinator() else {
            return Err(Error::Config(
                "the job has no checkpoint coordinator".into(),
            ));
        };
        let (reply, rx) = futures::channel::oneshot::channel();
        coordinator.do_send(TriggerSavepoint {
            dir: dir.into(),
            reply,
        });
        rx.await.map_err(|_| {
            Error::Runtime(floe_actors::Error::Runtime(
                "the job ended before the savepoint completed".into(),
            ))
        })?
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
        let Some(coordinator) = self.control.coordinator() else {
            return Err(Error::Config(
                "the job has no checkpoint coordinator".into(),
            ));
        };
        let (reply, rx) = futures::channel::oneshot::channel();
        coordinator.do_send(StopWithCheckpoint {
            savepoint_dir,
            reply,
        });
        rx.await.map_err(|_| {
            Error::Runtime(floe_actors::Error::Runtime(
                "the job ended or restarted before its final checkpoint completed".into(),
            ))
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

    /// Waits for the job to end: its result, or the error that ended it.
    pub async fn wait(&self) -> Result<JobResult> {
        self.done.clone().await.map_err(Error::Runtime)
    }

    /// Asks the job to cancel; `wait` then returns `Cancelled`.
    pub fn cancel(&self) {
        self.control.cancel();
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
        }
    }
}
