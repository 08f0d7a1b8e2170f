//! What a job can be given from outside, as trait objects: a
//! [`FaultInjector`] (failures to inject: tests, demos) and
//! [`JobObserver`]s (checkpoint, failure, restart and end events as they
//! happen). Both are set on the [`Config`](crate::Config)
//! ([`with_fault_injector`](crate::Config::with_fault_injector),
//! [`with_observer`](crate::Config::with_observer)); a job without them runs
//! exactly as before and pays nothing.
//!
//! Inside the crate, [`Progress`] is an observer every job has: the job
//! manager and [`JobHandle`](crate::JobHandle) wait on it for "n checkpoints
//! completed" or "a restart happened" instead of polling shared counters.

use super::{Fault, FaultInjection};
use floe_actors::ids::CheckpointId;
use floe_actors::supervisor::JobStatus;
use futures::channel::oneshot;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Injects failures into a job (fault-injection tests and demos).
///
/// [`FaultInjection`] is the plain implementation (a list of faults and a
/// number of random kills); the deterministic chaos harness
/// (`floe::testing::chaos`, `testing` feature) has its own. Every injected
/// failure surfaces as the typed
/// [`floe_actors::Error::InjectedFault`], never as text to parse.
pub trait FaultInjector: Send + Sync + fmt::Debug {
    /// Failures at given points of given subtasks; each fires once per job,
    /// whatever the restarts.
    fn faults(&self) -> &[Fault] {
        &[]
    }

    /// How many subtasks to kill, one after each new completed checkpoint
    /// (sources do not finish while kills are pending), and the seed that
    /// chooses them.
    fn random_failures(&self) -> (u32, u64) {
        (0, 0)
    }

    /// Called on the subtask's thread when one of [`faults`](Self::faults)
    /// fires.
    fn fired(&self, fault: &Fault) {
        let _ = fault;
    }

    /// Deterministic execution (one thread, a logical clock, a trace): set
    /// only by the chaos harness.
    #[doc(hidden)]
    fn deterministic(&self) -> Option<&super::deterministic::DeterministicMode> {
        None
    }
}

impl FaultInjector for FaultInjection {
    fn faults(&self) -> &[Fault] {
        &self.faults
    }

    fn random_failures(&self) -> (u32, u64) {
        (self.random_failures, self.seed)
    }
}

/// Told what a job does as it happens. Every method has a no-op default;
/// they are called on the job's threads, so they must return quickly (hand
/// the event to a channel to do more).
pub trait JobObserver: Send + Sync {
    /// Checkpoint `id` completed (savepoints not included).
    fn checkpoint_completed(&self, id: CheckpointId) {
        let _ = id;
    }

    /// Checkpoint `id` was aborted and counts as failed (`reason` says why);
    /// a checkpoint subsumed by a newer completed one is not reported.
    fn checkpoint_failed(&self, id: CheckpointId, reason: &str) {
        let _ = (id, reason);
    }

    /// A failure ended an attempt of the job (restart-all: a restart or
    /// the job's failure follows; a region failover reports the restart
    /// only, through [`restarted`](Self::restarted)).
    fn failed(&self, error: &floe_actors::Error) {
        let _ = error;
    }

    /// The job (restart-all) or a region restarted: restart number
    /// `attempt` (from 1), from checkpoint `restored` (`None`: from the
    /// beginning or the configured restore path).
    fn restarted(&self, attempt: u64, restored: Option<CheckpointId>) {
        let _ = (attempt, restored);
    }

    /// The job ended (`Finished`, `Canceled` or `Failed`).
    fn ended(&self, status: JobStatus) {
        let _ = status;
    }
}

/// The injector and observers of a job ([`Config::hooks`](crate::Config::hooks)).
/// Two hook sets are equal when they hold the same objects.
#[derive(Clone, Default)]
pub struct JobHooks {
    /// Failures to inject; `None`: none.
    pub fault_injector: Option<Arc<dyn FaultInjector>>,
    /// Told every event, in the order added.
    pub observers: Vec<Arc<dyn JobObserver>>,
}

impl fmt::Debug for JobHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobHooks")
            .field("fault_injector", &self.fault_injector)
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl PartialEq for JobHooks {
    fn eq(&self, other: &Self) -> bool {
        let same_injector = match (&self.fault_injector, &other.fault_injector) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        same_injector
            && self.observers.len() == other.observers.len()
            && self
                .observers
                .iter()
                .zip(&other.observers)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// Every observer of one job: the job's own [`Progress`] first, then the
/// configured ones.
pub(crate) struct Observers {
    pub progress: Arc<Progress>,
    others: Vec<Arc<dyn JobObserver>>,
}

impl Observers {
    pub fn new(others: Vec<Arc<dyn JobObserver>>) -> Self {
        Observers {
            progress: Arc::default(),
            others,
        }
    }

    fn each(&self, f: impl Fn(&dyn JobObserver)) {
        f(&*self.progress);
        for o in &self.others {
            f(&**o);
        }
    }
}

impl JobObserver for Observers {
    fn checkpoint_completed(&self, id: CheckpointId) {
        self.each(|o| o.checkpoint_completed(id));
    }

    fn checkpoint_failed(&self, id: CheckpointId, reason: &str) {
        self.each(|o| o.checkpoint_failed(id, reason));
    }

    fn failed(&self, error: &floe_actors::Error) {
        self.each(|o| o.failed(error));
    }

    fn restarted(&self, attempt: u64, restored: Option<CheckpointId>) {
        self.each(|o| o.restarted(attempt, restored));
    }

    fn ended(&self, status: JobStatus) {
        self.each(|o| o.ended(status));
    }
}

/// Counts a job's completed checkpoints and restarts and wakes whoever
/// waits for a count (a oneshot per waiter: no polling).
#[derive(Default)]
pub(crate) struct Progress {
    inner: Mutex<ProgressState>,
}

#[derive(Default)]
struct ProgressState {
    completed: u64,
    restarts: u64,
    ended: bool,
    waiters: Vec<Waiter>,
}

struct Waiter {
    what: Count,
    at_least: u64,
    wake: oneshot::Sender<bool>,
}

/// What a waiter counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// Completed checkpoints.
    Checkpoints,
    /// Restarts (of the job or of a region).
    Restarts,
}

impl ProgressState {
    fn value(&self, what: Count) -> u64 {
        match what {
            Count::Checkpoints => self.completed,
            Count::Restarts => self.restarts,
        }
    }

    /// Wakes the waiters whose count was reached (`true`), or all of them
    /// once the job ended (`false` for those whose count was not).
    fn wake(&mut self) {
        let waiters = std::mem::take(&mut self.waiters);
        for w in waiters {
            let reached = self.value(w.what) >= w.at_least;
            if reached || self.ended {
                let _ = w.wake.send(reached);
            } else {
                self.waiters.push(w);
            }
        }
    }
}

impl Progress {
    /// The count now.
    pub fn get(&self, what: Count) -> u64 {
        self.inner.lock().map(|s| s.value(what)).unwrap_or(0)
    }

    /// Resolves to `true` once the count reached `at_least`, or to `false`
    /// when the job ended before.
    pub fn reached(
        &self,
        what: Count,
        at_least: u64,
    ) -> impl std::future::Future<Output = bool> + Send + 'static {
        let (wake, rx) = oneshot::channel();
        if let Ok(mut s) = self.inner.lock() {
            s.waiters.push(Waiter {
                what,
                at_least,
                wake,
            });
            s.wake();
        }
        async move { rx.await.unwrap_or(false) }
    }

    fn update(&self, f: impl FnOnce(&mut ProgressState)) {
        if let Ok(mut s) = self.inner.lock() {
            f(&mut s);
            s.wake();
        }
    }
}

impl JobObserver for Progress {
    fn checkpoint_completed(&self, _: CheckpointId) {
        self.update(|s| s.completed += 1);
    }

    fn restarted(&self, _: u64, _: Option<CheckpointId>) {
        self.update(|s| s.restarts += 1);
    }

    fn ended(&self, _: JobStatus) {
        self.update(|s| s.ended = true);
    }
}

/// A flag that can be awaited: set once, waited on by any number.
#[derive(Default)]
pub(crate) struct Latch {
    inner: Mutex<(bool, Vec<oneshot::Sender<()>>)>,
}

impl Latch {
    /// Sets the flag and wakes every waiter.
    pub fn set(&self) {
        if let Ok(mut s) = self.inner.lock() {
            s.0 = true;
            for w in s.1.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        self.inner.lock().map(|s| s.0).unwrap_or(true)
    }

    /// Resolves once it is set.
    pub fn wait(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        match self.inner.lock() {
            Ok(mut s) if !s.0 => s.1.push(tx),
            _ => {
                let _ = tx.send(());
            }
        }
        async move {
            let _ = rx.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn waiters_wake_when_their_count_is_reached_or_the_job_ends() {
        let p = Progress::default();
        let mut two = p.reached(Count::Checkpoints, 2).boxed();
        let mut restart = p.reached(Count::Restarts, 1).boxed();
        p.checkpoint_completed(CheckpointId(1));
        assert_eq!((&mut two).now_or_never(), None);
        p.checkpoint_completed(CheckpointId(2));
        assert_eq!((&mut two).now_or_never(), Some(true));
        assert_eq!(p.reached(Count::Checkpoints, 1).now_or_never(), Some(true));
        p.ended(JobStatus::Finished);
        assert_eq!((&mut restart).now_or_never(), Some(false));
        assert_eq!(p.reached(Count::Restarts, 1).now_or_never(), Some(false));
    }

    #[test]
    fn a_latch_wakes_its_waiters_once_set() {
        let l = Latch::default();
        let mut w = l.wait().boxed();
        assert_eq!((&mut w).now_or_never(), None);
        l.set();
        assert_eq!(w.now_or_never(), Some(()));
        assert_eq!(l.wait().now_or_never(), Some(()));
        assert!(l.is_set());
    }
}
