//! The job supervisor actor: owns a job's lifecycle.
//!
//! It learns the job's subtasks once they are deployed, counts the ones that
//! finish, and turns the first failure into the job's failure: every other
//! subtask is canceled and the job's result becomes that error, naming the
//! operator and subtask. Restart strategies build on this actor.
//!
//! It also publishes the job's counters into the `metrics` crate facade on an
//! interval and once at the end, and logs the job's lifecycle at `info`
//! (started, finished, failed, canceled; a subtask failed at `warn`).

use crate::error::{Error, Result};
use crate::ids::{SubtaskIndex, VertexId};
use crate::messages::{CancelJob, CancelSubtask, SubtaskFailed, SubtaskFinished};
use crate::metrics::{JobMetrics, OperatorSummary};
use actix::prelude::*;
use futures::channel::oneshot;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use teardown::Teardown;

mod teardown;
pub use teardown::TEARDOWN_DEADLINE;

/// The states of a job, as in Flink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobStatus {
    /// Built, not yet deployed.
    Created,
    /// Subtasks are running.
    Running,
    /// A subtask failed; the others are being canceled.
    Failing,
    /// Restarting from the latest checkpoint.
    Restarting,
    /// Every subtask finished.
    Finished,
    /// The job failed for good.
    Failed,
    /// Cancel was requested; subtasks are stopping.
    Canceling,
    /// The job was canceled.
    Canceled,
}

impl JobStatus {
    /// True for Finished, Failed and Canceled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Canceled
        )
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f).map(|_| ())?;
        Ok(())
    }
}

/// What a finished job reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// From deployment to the last subtask finishing.
    pub elapsed: Duration,
    /// Records in and out per operator.
    pub operators: Vec<OperatorSummary>,
    /// The most record batches queued on one input channel.
    pub max_input_queued_batches: usize,
    /// The most record batches queued on one output channel.
    pub max_output_queued_batches: usize,
    /// The most records one subtask held in its channels at once (input
    /// queues, partly filled and queued output batches).
    pub max_buffered_records: usize,
}

impl JobOutcome {
    /// The totals of the operator named `name`, if there is one.
    pub fn operator(&self, name: &str) -> Option<&OperatorSummary> {
        self.operators.iter().find(|o| o.name == name)
    }
}

/// Restarts pipelined regions in place (region failover), supplied by the
/// layer that deploys subtasks.
pub trait RegionFailover: Send + 'static {
    /// The region of a subtask.
    fn region_of(&self, vertex: VertexId, subtask: SubtaskIndex) -> usize;
    /// The subtasks of a region.
    fn members(&self, region: usize) -> Vec<(VertexId, SubtaskIndex)>;
    /// A subtask failed: the delay before restarting its region, or `None`
    /// when the restart strategy is exhausted.
    fn on_failure(&mut self) -> Option<Duration>;
    /// The region is about to restart: its subtasks are being canceled,
    /// so what they report from now on is stale.
    fn restarting(&mut self, _region: usize) {}
    /// Deploys the region's subtasks anew from the latest completed
    /// checkpoint; their cancel handles.
    fn redeploy(&mut self, region: usize) -> Result<Vec<(SubtaskKey, Recipient<CancelSubtask>)>>;
}

/// A subtask: its vertex and index.
pub type SubtaskKey = (VertexId, SubtaskIndex);

/// Hands the supervisor the deployed subtasks and the arbiters they run on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Supervise {
    /// Cancel handles of every subtask.
    pub subtasks: Vec<(SubtaskKey, Recipient<CancelSubtask>)>,
    /// The job's arbiters, stopped and joined when the job ends, before its
    /// result is reported.
    pub arbiters: Vec<Arbiter>,
    /// One more arbiter to stop and join (the checkpoint coordinator's).
    pub joined: Option<Arbiter>,
    /// Region failover, when the job restarts regions in place.
    pub region: Option<Box<dyn RegionFailover>>,
}

/// Fails the job with `error` (a checkpoint failure beyond tolerance, say).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct FailJob {
    /// Why.
    pub error: Error,
}

/// Supervises one job.
pub struct JobSupervisor {
    /// Told of every finished subtask (the checkpoint coordinator).
    observer: Option<Recipient<SubtaskFinished>>,
    status: Arc<Mutex<JobStatus>>,
    metrics: Arc<JobMetrics>,
    started: Instant,
    subtasks: HashMap<SubtaskKey, Recipient<CancelSubtask>>,
    arbiters: Vec<Arbiter>,
    joined: Option<Arbiter>,
    /// The supervisor runs on an arbiter of its own, stopped with the job.
    own_arbiter: bool,
    restartable: bool,
    expected: Option<usize>,
    finished: HashSet<SubtaskKey>,
    region: Option<Box<dyn RegionFailover>>,
    /// Regions waiting for their redeployment.
    restarting: HashSet<usize>,
    pending_error: Option<Error>,
    /// Failures reported before [`Supervise`] named the subtasks and the
    /// regions: handled once it has (a region failover needs both).
    early_failures: Vec<SubtaskFailed>,
    done: Option<oneshot::Sender<Result<JobOutcome>>>,
    publish_interval: Duration,
    name: String,
    /// Deterministic execution: regions are redeployed through the
    /// supervisor's own mailbox, not after a wall-clock delay.
    deterministic: bool,
    /// How long the job's threads get to stop once it ended.
    teardown_deadline: Duration,
}

impl JobSupervisor {
    /// A supervisor reporting into `status` and `done`.
    pub fn new(
        status: Arc<Mutex<JobStatus>>,
        metrics: Arc<JobMetrics>,
        done: oneshot::Sender<Result<JobOutcome>>,
    ) -> Self {
        JobSupervisor {
            observer: None,
            status,
            metrics,
            started: Instant::now(),
            subtasks: HashMap::new(),
            arbiters: Vec::new(),
            joined: None,
            own_arbiter: false,
            restartable: false,
            expected: None,
            finished: HashSet::new(),
            region: None,
            restarting: HashSet::new(),
            pending_error: None,
            early_failures: Vec::new(),
            done: Some(done),
            publish_interval: Duration::ZERO,
            name: String::from("job"),
            deterministic: false,
            teardown_deadline: TEARDOWN_DEADLINE,
        }
    }

    /// How long the job's threads get to stop once it ended before its
    /// result is reported without them (default [`TEARDOWN_DEADLINE`]).
    pub fn with_teardown_deadline(mut self, deadline: Duration) -> Self {
        self.teardown_deadline = deadline;
        self
    }

    /// Publishes the job's counters into the `metrics` facade every `interval`
    /// (zero: only when the job ends).
    pub fn with_publish_interval(mut self, interval: Duration) -> Self {
        self.publish_interval = interval;
        self
    }

    /// Restarts only the failed subtask's region, in place.
    pub fn with_region_failover(mut self, region: Box<dyn RegionFailover>) -> Self {
        self.region = Some(region);
        self
    }

    /// A failure ends this attempt but not the job (its manager may
    /// restart it): the status stays `Failing` instead of `Failed`.
    pub fn restartable(mut self) -> Self {
        self.restartable = true;
        self
    }

    /// The supervisor runs alone on its arbiter: it stops that arbiter when
    /// the job ends.
    pub fn on_own_arbiter(mut self) -> Self {
        self.own_arbiter = true;
        self
    }

    /// Forwards every `SubtaskFinished` to `observer`.
    pub fn with_observer(mut self, observer: Recipient<SubtaskFinished>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Deterministic execution: a region restarts without waiting for the
    /// restart strategy's delay (a wall-clock timer would decide how far
    /// the other regions get meanwhile), once the supervisor has handled
    /// the messages queued before the restart began.
    pub fn deterministic(mut self) -> Self {
        self.deterministic = true;
        self
    }

    /// Names the job in its log events.
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    fn set_status(&self, s: JobStatus) {
        *self.status.lock().expect("status lock poisoned") = s;
    }

    fn complete(&mut self, result: Result<()>, ctx: &mut Context<Self>) {
        let Some(done) = self.done.take() else {
            return;
        };
        let outcome = result.map(|()| JobOutcome {
            elapsed: self.started.elapsed(),
            operators: self.metrics.operator_summaries(),
            max_input_queued_batches: self.metrics.max_input_batches(),
            max_output_queued_batches: self.metrics.max_output_batches(),
            max_buffered_records: self.metrics.max_buffered_records(),
        });
        self.set_status(match &outcome {
            Ok(_) if self.restartable => JobStatus::Running,
            Ok(_) => JobStatus::Finished,
            Err(Error::Canceled) if self.restartable => JobStatus::Canceling,
            Err(Error::Canceled) => JobStatus::Canceled,
            Err(_) if self.restartable => JobStatus::Failing,
            Err(_) => JobStatus::Failed,
        });
        self.metrics.publish();
        let elapsed_ms = self.started.elapsed().as_millis() as u64;
        match &outcome {
            Ok(_) => tracing::info!(job = %self.name, elapsed_ms, "job finished"),
            Err(Error::Canceled) => tracing::info!(job = %self.name, elapsed_ms, "job canceled"),
            Err(error) => tracing::info!(job = %self.name, elapsed_ms, %error, "job failed"),
        }
        // Every thread of the job ends before its result is reported: the
        // files and databases its subtasks held are released by then. The
        // joins run off this arbiter and within a deadline (see
        // `teardown`), so a stuck subtask cannot freeze the job.
        ctx.stop();
        Teardown {
            job: self.name.clone(),
            arbiters: self.arbiters.drain(..).collect(),
            last: self.joined.take(),
            deadline: self.teardown_deadline,
            report: Box::new(move || {
                let _ = done.send(outcome);
            }),
            own: self.own_arbiter.then(actix::Arbiter::current),
        }
        .start();
    }

    fn cancel_all(&mut self) {
        for s in self.subtasks.values() {
            s.do_send(CancelSubtask);
        }
    }

    /// Region failover: restarts the failed subtask's region; false when the
    /// job must fail instead.
    fn restart_region(&mut self, key: SubtaskKey, ctx: &mut Context<Self>) -> bool {
        let Some(rf) = self.region.as_mut() else {
            return false;
        };
        let region = rf.region_of(key.0, key.1);
        if self.restarting.contains(&region) {
            return true;
        }
        let Some(delay) = rf.on_failure() else {
            return false;
        };
        let members = rf.members(region);
        rf.restarting(region);
        for m in &members {
            if *m != key
                && let Some(c) = self.subtasks.get(m)
            {
                c.do_send(CancelSubtask);
            }
            self.finished.remove(m);
        }
        self.restarting.insert(region);
        tracing::info!(job = %self.name, region, subtasks = members.len(), "restarting a region");
        if self.deterministic {
            // Behind what is already queued: failures of the region's
            // subtasks reported before this restart find it restarting.
            ctx.address().do_send(RedeployRegion(region));
            return true;
        }
        // The canceled subtasks release their files meanwhile.
        let delay = delay.max(Duration::from_millis(20));
        ctx.run_later(delay, move |actor, ctx| actor.redeploy_region(region, ctx));
        true
    }

    fn redeploy_region(&mut self, region: usize, ctx: &mut Context<Self>) {
        let Some(rf) = self.region.as_mut() else {
            return;
        };
        match rf.redeploy(region) {
            Ok(handles) => {
                self.subtasks.extend(handles);
                self.restarting.remove(&region);
            }
            Err(e) => self.fail(e, ctx),
        }
    }

    fn fail(&mut self, error: Error, ctx: &mut Context<Self>) {
        if self.done.is_none() {
            return;
        }
        if self.expected.is_none() {
            // Not every subtask is known yet; finish once they are.
            self.pending_error.get_or_insert(error);
            self.set_status(JobStatus::Failing);
            return;
        }
        self.set_status(if error == Error::Canceled {
            JobStatus::Canceling
        } else {
            JobStatus::Failing
        });
        self.cancel_all();
        self.complete(Err(error), ctx);
    }
}

impl Actor for JobSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.publish_interval.is_zero() {
            ctx.run_interval(self.publish_interval, |actor, _| actor.metrics.publish());
        }
    }
}

impl Handler<Supervise> for JobSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Supervise, ctx: &mut Context<Self>) {
        self.expected = Some(msg.subtasks.len());
        self.subtasks = msg.subtasks.into_iter().collect();
        self.arbiters = msg.arbiters;
        self.joined = msg.joined;
        if msg.region.is_some() {
            self.region = msg.region;
        }
        if let Some(e) = self.pending_error.take() {
            self.fail(e, ctx);
        } else if !self.early_failures.is_empty() {
            tracing::info!(job = %self.name, subtasks = self.subtasks.len(), "job started");
            self.set_status(JobStatus::Running);
            for failed in std::mem::take(&mut self.early_failures) {
                self.on_failed(failed, ctx);
            }
        } else if self.finished.len() >= self.subtasks.len() {
            self.complete(Ok(()), ctx);
        } else {
            tracing::info!(job = %self.name, subtasks = self.subtasks.len(), "job started");
            self.set_status(JobStatus::Running);
        }
    }
}

impl Handler<SubtaskFinished> for JobSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SubtaskFinished, ctx: &mut Context<Self>) {
        tracing::debug!(vertex = %msg.vertex, subtask = %msg.subtask, "subtask finished");
        if let Some(o) = &self.observer {
            o.do_send(msg);
        }
        self.finished.insert((msg.vertex, msg.subtask));
        if Some(self.finished.len()) == self.expected
            && self.pending_error.is_none()
            && self.restarting.is_empty()
        {
            self.complete(Ok(()), ctx);
        }
    }
}

impl Handler<SubtaskFailed> for JobSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SubtaskFailed, ctx: &mut Context<Self>) {
        // A subtask may fail before the deployment's `Supervise` arrived
        // (a fault in its first records): whether its region can restart
        // is known only then.
        if self.expected.is_none()
            && self.done.is_some()
            && msg.error != Error::Canceled
            && msg.error.is_retriable()
        {
            self.early_failures.push(msg);
            return;
        }
        self.on_failed(msg, ctx);
    }
}

impl JobSupervisor {
    /// A subtask failed: restarts its region when region failover allows,
    /// else fails the attempt.
    fn on_failed(&mut self, msg: SubtaskFailed, ctx: &mut Context<Self>) {
        if self.done.is_some() && msg.error != Error::Canceled {
            tracing::warn!(
                job = %self.name,
                vertex = %msg.vertex,
                subtask = %msg.subtask,
                error = %msg.error,
                "subtask failed"
            );
            self.metrics
                .record_failure(Some(msg.vertex), Some(msg.subtask), msg.error.to_string());
            // A failure no restart can mend fails the job at once, without
            // spending the restart strategy's attempts.
            if msg.error != Error::Canceled
                && msg.error.is_retriable()
                && self.expected.is_some()
                && self.restart_region((msg.vertex, msg.subtask), ctx)
            {
                return;
            }
        }
        self.fail(msg.error, ctx);
    }
}

/// Deterministic execution: redeploys a region after the messages queued
/// before its restart began.
#[derive(Message)]
#[rtype(result = "()")]
struct RedeployRegion(usize);

impl Handler<RedeployRegion> for JobSupervisor {
    type Result = ();

    fn handle(&mut self, msg: RedeployRegion, ctx: &mut Context<Self>) {
        self.redeploy_region(msg.0, ctx);
    }
}

impl Handler<CancelJob> for JobSupervisor {
    type Result = ();

    fn handle(&mut self, _: CancelJob, ctx: &mut Context<Self>) {
        self.fail(Error::Canceled, ctx);
    }
}

impl Handler<FailJob> for JobSupervisor {
    type Result = ();

    fn handle(&mut self, msg: FailJob, ctx: &mut Context<Self>) {
        if self.done.is_some() {
            tracing::warn!(job = %self.name, error = %msg.error, "job failing");
            self.metrics
                .record_failure(None, None, msg.error.to_string());
        }
        self.fail(msg.error, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use futures::channel::mpsc;

    /// A subtask that only takes cancellations.
    struct Idle;

    impl Actor for Idle {
        type Context = Context<Self>;
    }

    impl Handler<CancelSubtask> for Idle {
        type Result = ();
        fn handle(&mut self, _: CancelSubtask, _: &mut Context<Self>) {}
    }

    /// One region holding both subtasks; redeploys report on a channel.
    struct OneRegion {
        members: Vec<SubtaskKey>,
        redeployed: mpsc::UnboundedSender<usize>,
    }

    impl RegionFailover for OneRegion {
        fn region_of(&self, _: VertexId, _: SubtaskIndex) -> usize {
            0
        }
        fn members(&self, _: usize) -> Vec<SubtaskKey> {
            self.members.clone()
        }
        fn on_failure(&mut self) -> Option<Duration> {
            Some(Duration::ZERO)
        }
        fn redeploy(
            &mut self,
            region: usize,
        ) -> Result<Vec<(SubtaskKey, Recipient<CancelSubtask>)>> {
            let _ = self.redeployed.unbounded_send(region);
            Ok(self
                .members
                .iter()
                .map(|&k| (k, Idle.start().recipient()))
                .collect())
        }
    }

    /// A subtask may fail before the deployment's `Supervise` arrives (a
    /// fault in its first records): its region restarts, as for a later
    /// failure, instead of the job failing.
    #[test]
    fn a_failure_before_supervise_restarts_its_region() {
        let keys: Vec<SubtaskKey> = (0..2).map(|j| (VertexId(0), SubtaskIndex(j))).collect();
        let (redeployed_tx, mut redeployed) = mpsc::unbounded();
        let system = actix::System::new();
        let outcome = system.block_on(async move {
            let (done_tx, done) = oneshot::channel();
            let supervisor = JobSupervisor::new(
                Arc::new(Mutex::new(JobStatus::Created)),
                Arc::new(JobMetrics::new("early failure")),
                done_tx,
            )
            .start();
            supervisor.do_send(SubtaskFailed {
                vertex: keys[0].0,
                subtask: keys[0].1,
                error: Error::Runtime("failed in its first records".into()),
            });
            supervisor.do_send(Supervise {
                subtasks: keys
                    .iter()
                    .map(|&k| (k, Idle.start().recipient()))
                    .collect(),
                arbiters: Vec::new(),
                joined: None,
                region: Some(Box::new(OneRegion {
                    members: keys.clone(),
                    redeployed: redeployed_tx,
                })),
            });
            // The region comes back after its restart delay; then both of
            // its subtasks finish.
            let region = redeployed.next().await;
            assert_eq!(
                region,
                Some(0),
                "the failed subtask's region was redeployed"
            );
            for &(vertex, subtask) in &keys {
                supervisor.do_send(SubtaskFinished { vertex, subtask });
            }
            done.await.expect("the supervisor reports")
        });
        assert!(outcome.is_ok(), "the job failed instead: {outcome:?}");
    }

    /// A subtask's thread whose teardown never ends (a client library
    /// waiting for a server that is gone) does not freeze the job: once the
    /// teardown deadline passed, the job's failure is reported all the same.
    #[test]
    fn a_stuck_teardown_still_reports_the_failure() {
        let release = Arc::new(std::sync::Barrier::new(2));
        let system = actix::System::new();
        let stuck = Arbiter::new();
        let blocked = release.clone();
        let (entered_tx, entered) = std::sync::mpsc::channel();
        // Blocks the arbiter's thread: it cannot take its stop.
        assert!(stuck.spawn(async move {
            let _ = entered_tx.send(());
            blocked.wait();
        }));
        // Blocked before the job ends (a stop that came first would end
        // the arbiter without running the future).
        entered.recv().expect("the arbiter runs the future");
        let key = (VertexId(0), SubtaskIndex(0));
        let outcome = system.block_on(async move {
            let (done_tx, done) = oneshot::channel();
            let supervisor = JobSupervisor::new(
                Arc::new(Mutex::new(JobStatus::Created)),
                Arc::new(JobMetrics::new("stuck teardown")),
                done_tx,
            )
            .with_teardown_deadline(Duration::ZERO)
            .start();
            supervisor.do_send(Supervise {
                subtasks: vec![(key, Idle.start().recipient())],
                arbiters: vec![stuck],
                joined: None,
                region: None,
            });
            supervisor.do_send(FailJob {
                error: Error::Runtime("the broker is gone".into()),
            });
            done.await.expect("the supervisor reports")
        });
        assert_eq!(
            outcome,
            Err(Error::Runtime("the broker is gone".into())),
            "the job's own failure is its result"
        );
        // The stuck thread ends now (its join helper was waiting for it).
        release.wait();
    }
}
