//! Deterministic chaos testing: one thread, a clock the harness drives, a
//! seeded fault plan, and a trace of what happened.
//!
//! A job normally runs on several arbiters (threads), writes the
//! asynchronous part of its snapshots on a blocking pool, and triggers
//! checkpoints, flushes partial batches and ticks processing time on
//! wall-clock timers: two runs of one job interleave differently, so a
//! failure found by a fault-injection test may never show again.
//!
//! With a [`ChaosInjector`] (a [`DeterministicMode`] and faults) as the
//! job's [`FaultInjector`] ([`Config::with_fault_injector`]), the job runs so that the order of every message is
//! a function of its configuration:
//!
//! 1. **One arbiter.** Every subtask, the checkpoint coordinator and the
//!    supervisor of every attempt run on the thread that launched the job
//!    (the job's own thread with [`execute`](crate::StreamExecutionEnvironment::execute)).
//!    The asynchronous part of a snapshot runs inline, so an acknowledgement
//!    is sent at a point fixed by the subtask's own processing.
//! 2. **No wall clock.** Processing time (`floe_actors::element::now_ms` and
//!    [`SystemClock`](crate::time::SystemClock) on that thread) reads the
//!    mode's [`ManualClock`], which advances
//!    [`tick_ms`](DeterministicMode::tick_ms) on every read: a source reads it
//!    once per batch it emits and every other subtask once per step, so time
//!    follows the work done. Periodic checkpoints are triggered when that
//!    clock passes the next multiple of the checkpoint interval (read as
//!    logical milliseconds), the checkpoint timeout runs on it too, partial
//!    batches are flushed after every step (buffer timeout zero), restart
//!    delays are not waited for, and no metrics publisher runs.
//! 3. **A trace.** The coordinator, the supervisor's failure path and both
//!    restart paths (restart-all, region) record [`TraceEvent`]s into the
//!    mode's [`Trace`]: checkpoints triggered, completed and aborted, subtask
//!    failures (with the injected fault they came from), restarts (the
//!    subtasks restarted and the checkpoint restored). Two runs of one
//!    configuration give equal traces.
//!
//! [`FaultPlan::generate`] draws, from a seed, the parallelism, the failover
//! strategy, the checkpoint interval and K faults (operator, subtask and
//! [`FaultPoint`]); [`FaultPlan::config`] turns it into a [`Config`] and
//! [`run`] executes a job under it and collects its committed output through
//! an [`ExactlyOnceCollector`] (an in-memory two-phase-commit sink). See
//! `tests/failover/chaos.rs` and `docs/fault-tolerance.md`, "Deterministic chaos
//! testing".
//!
//! What the mode cannot make deterministic: user code that reads the wall
//! clock or other threads, rate-limited sources and throttled sinks (they
//! wait on wall-clock timers), random failures (`random_failures`, timed by
//! the wall clock: [`Config::validate`](crate::Config::validate) refuses
//! them, use [`FaultInjection::faults`]), alignment timeouts, the sources'
//! hold of `finish_after_checkpoints` and a minimum pause between
//! checkpoints (refused too).

use crate::Config;
use crate::connectors::two_phase::{Recovery, TwoPhaseCommitSink};
use crate::failover::{
    FailoverStrategy, Fault, FaultInjection, FaultInjector, FaultPoint, RestartStrategy,
};
use crate::text::SplitMix;
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::failover::deterministic::{DeterministicMode, Trace, TraceEvent, Traced};

/// The fault injector of a deterministic run: the plan's faults, and the
/// [`DeterministicMode`] that runs the job on one thread and traces it.
#[derive(Clone, Debug)]
pub struct ChaosInjector {
    /// The faults (random failures are refused in deterministic execution).
    pub faults: FaultInjection,
    /// The job's clock and trace.
    pub mode: DeterministicMode,
}

impl FaultInjector for ChaosInjector {
    fn faults(&self) -> &[Fault] {
        &self.faults.faults
    }

    fn random_failures(&self) -> (u32, u64) {
        (self.faults.random_failures, self.faults.seed)
    }

    fn fired(&self, fault: &Fault) {
        self.mode.note_fired(fault);
    }

    fn deterministic(&self) -> Option<&DeterministicMode> {
        Some(&self.mode)
    }
}

/// An operator of the job a [`FaultPlan`] targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorSpec {
    /// Its name (as set with `.name(..)`, or the default).
    pub name: String,
    /// A source (faults by records emitted and at snapshots only).
    pub source: bool,
    /// Holds state, so it can fail writing a snapshot and restoring one.
    pub stateful: bool,
}

impl OperatorSpec {
    /// A source named `name`.
    pub fn source(name: &str) -> Self {
        OperatorSpec {
            name: name.into(),
            source: true,
            stateful: false,
        }
    }

    /// A stateless operator named `name`.
    pub fn stateless(name: &str) -> Self {
        OperatorSpec {
            name: name.into(),
            source: false,
            stateful: false,
        }
    }

    /// A stateful operator (or a two-phase-commit sink) named `name`.
    pub fn stateful(name: &str) -> Self {
        OperatorSpec {
            name: name.into(),
            source: false,
            stateful: true,
        }
    }

    fn points(&self) -> &'static [PointKind] {
        use PointKind::*;
        if self.stateful && !self.source {
            &[Records, Checkpoint, AsyncWrite, Restore]
        } else {
            &[Records, Checkpoint]
        }
    }
}

#[derive(Clone, Copy)]
enum PointKind {
    Records,
    Checkpoint,
    AsyncWrite,
    Restore,
}

/// What a [`FaultPlan`] may choose from.
#[derive(Clone, Debug, PartialEq)]
pub struct ChaosSpec {
    /// The job's operators; faults target them.
    pub operators: Vec<OperatorSpec>,
    /// Parallelism of every operator.
    pub parallelism: RangeInclusive<usize>,
    /// Failover strategies to choose from.
    pub failover: Vec<FailoverStrategy>,
    /// Number of faults.
    pub faults: RangeInclusive<usize>,
    /// Records the job's input holds: `Records(n)` faults pick `n` up to
    /// this over the parallelism (what one subtask sees, about).
    pub records: u64,
    /// Checkpoint interval, in logical milliseconds of the job's clock.
    pub interval_ms: RangeInclusive<u64>,
    /// `Checkpoint` and `AsyncWrite` faults pick an id up to this.
    pub checkpoint_ids: u64,
}

/// A seeded choice of a job's parallelism, failover, checkpoint interval
/// and faults: print it (`{:#?}`) when a run under it fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Parallelism of every operator.
    pub parallelism: usize,
    /// What restarts on a failure.
    pub failover: FailoverStrategy,
    /// Checkpoint interval in logical milliseconds.
    pub interval_ms: u64,
    /// The faults, each firing at most once.
    pub faults: Vec<Fault>,
}

/// Uniform in `r` (`lo` alone when the range is empty): a plan depends on
/// the seed of its [`SplitMix`] only.
fn in_range(rng: &mut SplitMix, r: &RangeInclusive<u64>) -> u64 {
    let (lo, hi) = (*r.start(), *r.end().max(r.start()));
    lo + rng.below(hi - lo + 1)
}

impl FaultPlan {
    /// Draws a plan from `seed`.
    ///
    /// # Examples
    /// ```
    /// use floe::failover::FailoverStrategy;
    /// use floe::testing::chaos::{ChaosSpec, FaultPlan, OperatorSpec};
    ///
    /// let spec = ChaosSpec {
    ///     operators: vec![OperatorSpec::source("Numbers"), OperatorSpec::stateful("Keyed Sum")],
    ///     parallelism: 2..=4,
    ///     failover: vec![FailoverStrategy::All, FailoverStrategy::Region],
    ///     faults: 1..=3,
    ///     records: 10_000,
    ///     interval_ms: 20..=60,
    ///     checkpoint_ids: 8,
    /// };
    /// let plan = FaultPlan::generate(7, &spec);
    /// assert_eq!(plan, FaultPlan::generate(7, &spec)); // a function of the seed
    /// assert!((1..=3).contains(&plan.faults.len()));
    /// ```
    pub fn generate(seed: u64, spec: &ChaosSpec) -> Self {
        let mut rng = SplitMix(seed);
        let p = *spec.parallelism.start() as u64..=*spec.parallelism.end() as u64;
        let parallelism = in_range(&mut rng, &p).max(1) as usize;
        let failover = if spec.failover.is_empty() {
            FailoverStrategy::All
        } else {
            spec.failover[(rng.next() % spec.failover.len() as u64) as usize]
        };
        let interval_ms = in_range(&mut rng, &spec.interval_ms).max(1);
        let k = in_range(
            &mut rng,
            &(*spec.faults.start() as u64..=*spec.faults.end() as u64),
        );
        let per_subtask = (spec.records / parallelism as u64).max(1);
        let ids = spec.checkpoint_ids.max(1);
        let mut faults: Vec<Fault> = Vec::new();
        let mut tries = 0;
        while (faults.len() as u64) < k && !spec.operators.is_empty() && tries < 100 {
            tries += 1;
            let op = &spec.operators[(rng.next() % spec.operators.len() as u64) as usize];
            let points = op.points();
            let at = match points[(rng.next() % points.len() as u64) as usize] {
                PointKind::Records => FaultPoint::Records(1 + rng.next() % per_subtask),
                PointKind::Checkpoint => FaultPoint::Checkpoint(CheckpointId(1 + rng.next() % ids)),
                PointKind::AsyncWrite => FaultPoint::AsyncWrite(CheckpointId(1 + rng.next() % ids)),
                PointKind::Restore => FaultPoint::Restore,
            };
            let fault = Fault {
                operator: op.name.clone(),
                subtask: (rng.next() % parallelism as u64) as usize,
                at,
            };
            if !faults.contains(&fault) {
                faults.push(fault);
            }
        }
        FaultPlan {
            seed,
            parallelism,
            failover,
            interval_ms,
            faults,
        }
    }

    /// `base` set up to run under this plan, deterministically: parallelism,
    /// failover, checkpoints every `interval_ms` of the job's clock, the
    /// faults, restarts without delay (enough of them for every fault), and a
    /// fresh [`DeterministicMode`] (clock at 0, 1 ms per read).
    ///
    /// A failed asynchronous write fails the job under restart-all (no
    /// failed checkpoint is tolerated) and only aborts its checkpoint under
    /// region failover (every failed checkpoint is tolerated, since a job
    /// failure does not restart regions).
    pub fn config(&self, base: Config) -> Config {
        let mut config = base;
        config.parallelism = self.parallelism;
        config.failover = self.failover;
        config.checkpoint.interval = Some(Duration::from_millis(self.interval_ms));
        config.checkpoint.tolerable_failures = match self.failover {
            FailoverStrategy::All => 0,
            FailoverStrategy::Region => u32::MAX,
        };
        config.restart = Some(RestartStrategy::FixedDelay {
            attempts: self.faults.len() as u32 + 3,
            delay: Duration::ZERO,
        });
        config.with_fault_injector(Arc::new(ChaosInjector {
            faults: FaultInjection {
                random_failures: 0,
                seed: self.seed,
                faults: self.faults.clone(),
            },
            mode: DeterministicMode::new(0, 1),
        }))
    }
}

/// An exactly-once sink into memory, by two-phase commit: what it holds
/// after a run is the job's committed output, in commit order.
///
/// Transactions are buffered per id; commit appends a transaction's
/// records to the output once (a repeated commit does nothing); a recovery
/// from checkpoint n first drops what was committed after n's
/// transactions (the replay produces it again), as
/// [`TransactionalFileSink`](crate::connectors::transactional_file::TransactionalFileSink)
/// does for a file. A fresh start empties the output once per sink value.
///
/// # Examples
/// ```
/// use floe::StreamExecutionEnvironment;
/// use floe::testing::chaos::ExactlyOnceCollector;
///
/// let env = StreamExecutionEnvironment::new();
/// let out = ExactlyOnceCollector::new();
/// env.from_collection(vec![1u32, 2, 3]).sink_exactly_once("ExactlyOnceCollector", out.clone());
/// env.execute().unwrap();
/// let mut got = out.committed();
/// got.sort(); // the sink's subtasks commit in any order
/// assert_eq!(got, vec![1, 2, 3]);
/// ```
pub struct ExactlyOnceCollector<T> {
    inner: Arc<Mutex<Collected<T>>>,
}

impl<T> Clone for ExactlyOnceCollector<T> {
    fn clone(&self) -> Self {
        ExactlyOnceCollector {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Default for ExactlyOnceCollector<T> {
    fn default() -> Self {
        ExactlyOnceCollector {
            inner: Arc::new(Mutex::new(Collected {
                next: 0,
                open: HashMap::new(),
                log: Vec::new(),
                committed: HashSet::new(),
                initialized: false,
                scratch_reset: 0,
                taken_back: 0,
            })),
        }
    }
}

struct Collected<T> {
    next: u64,
    /// Begun or pre-committed, not committed.
    open: HashMap<u64, Vec<T>>,
    /// Committed transactions, in commit order.
    log: Vec<(u64, Vec<T>)>,
    committed: HashSet<u64>,
    initialized: bool,
    /// The last restart from the beginning whose reset was done.
    scratch_reset: u64,
    /// Committed records removed again (by a recovery or a reset).
    taken_back: usize,
}

impl<T> Collected<T> {
    fn commit(&mut self, txn: u64) {
        if self.committed.insert(txn) {
            let records = self.open.remove(&txn).unwrap_or_default();
            self.log.push((txn, records));
        }
    }
}

impl<T: Clone> ExactlyOnceCollector<T> {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many committed records a recovery or a restart from the
    /// beginning removed again, over the collector's life: what a reader of
    /// the committed output saw disappear. Committed output is never taken
    /// back, so a job should leave this at 0.
    pub fn taken_back(&self) -> usize {
        self.inner.lock().map(|c| c.taken_back).unwrap_or(0)
    }

    /// The committed records, in commit order.
    pub fn committed(&self) -> Vec<T> {
        self.inner
            .lock()
            .map(|c| c.log.iter().flat_map(|(_, r)| r.iter().cloned()).collect())
            .unwrap_or_default()
    }
}

fn poisoned<E>(_: E) -> crate::Error {
    crate::Error::User("the collector's lock is poisoned".into())
}

impl<T: Clone + Send + 'static> TwoPhaseCommitSink<T> for ExactlyOnceCollector<T> {
    type Txn = u64;

    async fn recover(
        &mut self,
        _: &crate::operators::sink::SinkContext,
        r: Recovery<u64>,
    ) -> crate::Result<()> {
        let mut c = self.inner.lock().map_err(poisoned)?;
        if let Some(restart) = r.from_scratch {
            if c.scratch_reset < restart {
                c.scratch_reset = restart;
                c.taken_back += c.log.iter().map(|(_, r)| r.len()).sum::<usize>();
                c.log.clear();
                c.committed.clear();
            }
            c.initialized = true;
            return Ok(());
        }
        if !r.restored {
            return Ok(());
        }
        c.initialized = true;
        if r.partial {
            // Region failover: nothing is taken back.
            for (_, t) in r.pending {
                c.commit(t);
            }
            return Ok(());
        }
        if !r.commit_pending {
            return Ok(());
        }
        let restored: Vec<u64> = r.pending.into_iter().map(|(_, t)| t).collect();
        let keep: HashSet<u64> = restored.iter().copied().collect();
        // Every subtask running at the checkpoint has a transaction pending
        // at it, committed after everything of earlier checkpoints: from the
        // first restored transaction on, the log holds the checkpoint's
        // transactions and later ones, whose records the replay produces
        // again.
        if let Some(first) = c.log.iter().position(|(t, _)| keep.contains(t))
            && c.log[first..].iter().any(|(t, _)| !keep.contains(t))
        {
            let tail = c.log.split_off(first);
            c.taken_back += tail.iter().map(|(_, r)| r.len()).sum::<usize>();
            for (t, records) in tail {
                c.committed.remove(&t);
                if keep.contains(&t) {
                    c.open.insert(t, records);
                }
            }
        }
        for t in restored {
            c.commit(t);
        }
        Ok(())
    }

    async fn open(&mut self, _: &crate::operators::sink::SinkContext) -> crate::Result<()> {
        let mut c = self.inner.lock().map_err(poisoned)?;
        if !c.initialized {
            c.initialized = true;
            c.log.clear();
            c.committed.clear();
        }
        Ok(())
    }

    async fn begin(&mut self) -> crate::Result<u64> {
        let mut c = self.inner.lock().map_err(poisoned)?;
        let txn = c.next;
        c.next += 1;
        c.open.insert(txn, Vec::new());
        Ok(txn)
    }

    async fn write(&mut self, txn: &mut u64, batch: Batch<T>) -> crate::Result<()> {
        let mut c = self.inner.lock().map_err(poisoned)?;
        let open = c.open.entry(*txn).or_default();
        open.extend(batch.into_iter().map(|r| r.value));
        Ok(())
    }

    async fn pre_commit(&mut self, _: &mut u64, _: Option<CheckpointId>) -> crate::Result<()> {
        Ok(())
    }

    async fn commit(&mut self, txn: u64, _: CheckpointId) -> crate::Result<()> {
        self.inner.lock().map_err(poisoned)?.commit(txn);
        Ok(())
    }

    async fn abort(&mut self, txn: u64) -> crate::Result<()> {
        self.inner.lock().map_err(poisoned)?.open.remove(&txn);
        Ok(())
    }
}

/// What a run under a plan produced.
#[derive(Debug)]
pub struct ChaosRun<T> {
    /// The job's result (its error as text).
    pub result: Result<(), String>,
    /// The trace, in order.
    pub trace: Vec<Traced>,
    /// The committed output, in commit order.
    pub output: Vec<T>,
}

impl<T> ChaosRun<T> {
    /// The injected faults that fired, in the order they did.
    pub fn fired(&self) -> Vec<&Fault> {
        self.trace.iter().filter_map(|t| t.event.fault()).collect()
    }

    /// Failures that no injected fault explains (a bug, or a lost subtask).
    pub fn unplanned_failures(&self) -> Vec<&TraceEvent> {
        self.trace
            .iter()
            .map(|t| &t.event)
            .filter(|e| matches!(e, TraceEvent::SubtaskFailed { fault: None, .. }))
            .collect()
    }
}

/// Runs the job `build` adds to the environment under `config` (which
/// must be deterministic, e.g. [`FaultPlan::config`]) and returns its
/// result, trace and committed output.
///
/// The job runs on a thread of its own; if it has not ended after
/// `give_up`, it is canceled and the run reports that it hung (a hang is
/// a finding too: something waited for an event that never came).
pub fn run<T, F>(config: Config, give_up: Duration, build: F) -> ChaosRun<T>
where
    T: Clone + Send + 'static,
    F: FnOnce(&crate::StreamExecutionEnvironment) -> ExactlyOnceCollector<T>,
{
    let trace = config.deterministic().map(|m| m.trace.clone());
    let env = crate::StreamExecutionEnvironment::with_config(config);
    let out = build(&env);
    let result = match (&trace, env.execute_async()) {
        (None, _) => Err("the configuration is not deterministic".to_string()),
        (_, Err(e)) => Err(e.to_string()),
        (Some(_), Ok(handle)) => {
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = handle.clone();
            std::thread::spawn(move || {
                let _ = tx.send(futures::executor::block_on(waiter.wait()));
            });
            match rx.recv_timeout(give_up) {
                Ok(r) => r.map(|_| ()).map_err(|e| e.to_string()),
                Err(_) => {
                    handle.cancel();
                    Err(format!(
                        "the job had not ended after {} s: it hung",
                        give_up.as_secs()
                    ))
                }
            }
        }
    };
    ChaosRun {
        result,
        trace: trace.map(|t| t.events()).unwrap_or_default(),
        output: out.committed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ChaosSpec {
        ChaosSpec {
            operators: vec![
                OperatorSpec::source("Source"),
                OperatorSpec::stateless("Map"),
                OperatorSpec::stateful("Sum"),
            ],
            parallelism: 2..=4,
            failover: vec![FailoverStrategy::All, FailoverStrategy::Region],
            faults: 1..=4,
            records: 1_000,
            interval_ms: 10..=50,
            checkpoint_ids: 6,
        }
    }

    #[test]
    fn a_plan_is_a_function_of_its_seed_and_stays_in_its_spec() {
        let spec = spec();
        let plans: Vec<FaultPlan> = (0..200).map(|s| FaultPlan::generate(s, &spec)).collect();
        for (s, plan) in plans.iter().enumerate() {
            assert_eq!(plan, &FaultPlan::generate(s as u64, &spec));
            assert!((2..=4).contains(&plan.parallelism));
            assert!((10..=50).contains(&plan.interval_ms));
            assert!((1..=4).contains(&plan.faults.len()), "{plan:?}");
            for f in &plan.faults {
                assert!(f.subtask < plan.parallelism);
                let stateful = f.operator == "Sum";
                match f.at {
                    FaultPoint::Records(n) => assert!((1..=1_000 / 2).contains(&n)),
                    FaultPoint::Checkpoint(id) => assert!((1..=6).contains(&id.0)),
                    FaultPoint::AsyncWrite(id) => assert!(stateful && (1..=6).contains(&id.0)),
                    FaultPoint::Restore => assert!(stateful),
                }
            }
        }
        // The seeds spread over the choices.
        let distinct: HashSet<String> = plans.iter().map(|p| format!("{:?}", p.faults)).collect();
        assert!(distinct.len() > 150, "{}", distinct.len());
        for point in ["Records", "Checkpoint", "AsyncWrite", "Restore"] {
            assert!(
                plans
                    .iter()
                    .any(|p| format!("{:?}", p.faults).contains(point))
            );
        }
        assert!(plans.iter().any(|p| p.failover == FailoverStrategy::Region));
        assert!(plans.iter().any(|p| p.failover == FailoverStrategy::All));
    }

    #[test]
    fn the_mode_refuses_what_runs_on_the_wall_clock() {
        let mut config = FaultPlan::generate(1, &spec()).config(Config::default());
        assert!(config.validate().is_ok());
        let injector = |random_failures, tick_ms| {
            let mut mode = DeterministicMode::new(0, 1);
            mode.tick_ms = tick_ms;
            Arc::new(ChaosInjector {
                faults: FaultInjection {
                    random_failures,
                    ..Default::default()
                },
                mode,
            })
        };
        config = config.with_fault_injector(injector(2, 1));
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("random failures"), "{e}");
        config = config.with_fault_injector(injector(0, 1));
        assert!(config.validate().is_ok());
        config.checkpoint.finish_after_checkpoints = 1;
        assert!(config.validate().is_err());
        config.checkpoint.finish_after_checkpoints = 0;
        config.checkpoint.alignment_timeout = Some(Duration::from_millis(5));
        assert!(config.validate().is_err());
        config.checkpoint.alignment_timeout = None;
        config.checkpoint.min_pause = Duration::from_millis(5);
        assert!(config.validate().is_err());
        config.checkpoint.min_pause = Duration::ZERO;
        config = config.with_fault_injector(injector(0, 0));
        assert!(config.validate().is_err());
    }

    #[test]
    fn modes_are_equal_when_they_share_clock_and_trace() {
        let a = DeterministicMode::new(0, 1);
        assert_eq!(a, a.clone());
        assert_ne!(a, DeterministicMode::new(0, 1));
    }

    #[test]
    fn injected_faults_are_read_back_from_the_typed_error() {
        let points = [
            FaultPoint::Records(120),
            FaultPoint::Checkpoint(CheckpointId(3)),
            FaultPoint::AsyncWrite(CheckpointId(14)),
            FaultPoint::Restore,
        ];
        for at in points {
            let e = floe_actors::Error::InjectedFault {
                operator: "Keyed Sum".into(),
                subtask: floe_actors::ids::SubtaskIndex(2),
                point: Some(at),
            };
            let expected = Fault {
                operator: "Keyed Sum".into(),
                subtask: 2,
                at,
            };
            assert_eq!(Fault::from_error(&e), Some(expected.clone()));
            assert_eq!(Fault::from_error(&e.non_retriable()), Some(expected));
        }
        // The text alone is not a fault, nor is a random kill.
        let text = floe_actors::Error::operator(
            "x",
            floe_actors::ids::SubtaskIndex(0),
            "injected failure after 3 records",
        );
        assert_eq!(Fault::from_error(&text), None);
        let kill = floe_actors::Error::InjectedFault {
            operator: "x".into(),
            subtask: floe_actors::ids::SubtaskIndex(0),
            point: None,
        };
        assert_eq!(Fault::from_error(&kill), None);
    }

    fn batch(values: &[u32]) -> Batch<u32> {
        values
            .iter()
            .map(|&v| floe_actors::element::Record {
                value: v,
                timestamp: None,
            })
            .collect()
    }

    #[test]
    fn recovery_drops_what_was_committed_after_the_restored_transactions() {
        let ctx = crate::operators::sink::SinkContext {
            subtask: floe_actors::ids::SubtaskIndex(0),
            parallelism: 1,
        };
        use futures::executor::block_on;
        let one = CheckpointId(1);
        let restore = |pending: &[u64]| Recovery {
            pending: pending.iter().map(|t| (one, *t)).collect(),
            commit_pending: true,
            restored: true,
            checkpoint: Some(one),
            from_scratch: None,
            partial: false,
        };
        let mut sink = ExactlyOnceCollector::<u32>::new();
        block_on(sink.open(&ctx)).unwrap();
        let mut a = block_on(sink.begin()).unwrap();
        block_on(sink.write(&mut a, batch(&[1, 2]))).unwrap();
        block_on(sink.commit(a, one)).unwrap();
        // Pending at the checkpoint, then committed with a later one.
        let mut b = block_on(sink.begin()).unwrap();
        block_on(sink.write(&mut b, batch(&[3]))).unwrap();
        let mut c = block_on(sink.begin()).unwrap();
        block_on(sink.write(&mut c, batch(&[4]))).unwrap();
        block_on(sink.commit(b, one)).unwrap();
        block_on(sink.commit(c, one)).unwrap();
        block_on(sink.commit(c, one)).unwrap();
        assert_eq!(sink.committed(), vec![1, 2, 3, 4]);
        // Restored from the checkpoint that pre-committed `b`: `c`'s records
        // will be replayed, so they go.
        let mut restored = sink.clone();
        block_on(restored.recover(&ctx, restore(&[b]))).unwrap();
        block_on(restored.open(&ctx)).unwrap();
        assert_eq!(restored.committed(), vec![1, 2, 3]);
        // A restore with nothing after its transactions keeps everything.
        block_on(restored.recover(&ctx, restore(&[b]))).unwrap();
        assert_eq!(restored.committed(), vec![1, 2, 3]);
    }
}
