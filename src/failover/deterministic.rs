//! Deterministic execution: the runtime side of the chaos harness
//! (`floe::testing::chaos`, `testing` feature). A job whose
//! [`FaultInjector`](super::FaultInjector) returns a [`DeterministicMode`]
//! runs every actor on one thread, reads processing time and triggers
//! checkpoints on the mode's clock, and records what happened in its
//! [`Trace`]. See `floe::testing::chaos` for the whole picture.

use super::{Fault, FaultPoint};
use crate::Config;
use crate::time::{Clock, ManualClock};
use actix::{Actor, Context, Handler, Recipient};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use floe_actors::messages::SubtaskFailed;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The switch to deterministic execution: the job's clock and its trace.
///
/// Clones share the clock and the trace; two modes are equal when they
/// share them.
#[derive(Clone, Debug)]
pub struct DeterministicMode {
    /// The job's processing time; it advances on every read by the job.
    pub clock: ManualClock,
    /// How far the clock advances per read (logical milliseconds, > 0).
    pub tick_ms: i64,
    /// What the job records.
    pub trace: Trace,
    /// Per subtask, whether its current incarnation's failures still count.
    taps: Arc<Mutex<Incarnations>>,
    /// The planned faults that fired, in order (the injector reports them).
    fired: Arc<Mutex<Vec<Fault>>>,
}

/// Per `(vertex, subtask)`, the "still current" flag of its latest
/// incarnation's failure tap.
type Incarnations = HashMap<(u32, u32), Arc<AtomicBool>>;

impl DeterministicMode {
    /// A mode whose clock starts at `start_ms` and advances `tick_ms` per read.
    pub fn new(start_ms: Timestamp, tick_ms: i64) -> Self {
        DeterministicMode {
            clock: ManualClock::new(start_ms),
            tick_ms,
            trace: Trace::default(),
            taps: Arc::default(),
            fired: Arc::default(),
        }
    }

    /// A planned fault fired (its injector reports it).
    pub fn note_fired(&self, fault: &Fault) {
        if let Ok(mut f) = self.fired.lock() {
            f.push(fault.clone());
        }
    }

    /// The fault that failed the asynchronous write of checkpoint `id`, if
    /// one fired: what an abort of that checkpoint is traced with.
    pub(crate) fn fired_async_write(&self, id: CheckpointId) -> Option<Fault> {
        let fired = self.fired.lock().ok()?;
        fired
            .iter()
            .find(|f| f.at == FaultPoint::AsyncWrite(id))
            .cloned()
    }

    /// Makes processing time on this thread read (and advance) the mode's
    /// clock; the deployment calls it on the job's thread.
    pub(crate) fn install(&self) {
        let (clock, tick) = (self.clock.clone(), self.tick_ms);
        floe_actors::element::set_thread_clock(Some(Box::new(move || clock.advance(tick))));
    }

    /// Gives this thread the wall clock back.
    pub(crate) fn uninstall() {
        floe_actors::element::set_thread_clock(None);
    }

    /// Records `event` at the clock's current time (without advancing it).
    pub(crate) fn record(&self, event: TraceEvent) {
        self.trace.push(Traced {
            at_ms: self.clock.now_ms(),
            event,
        });
    }

    /// Passes every `SubtaskFailed` of a new incarnation of subtask
    /// `(vertex, subtask)` through the trace on its way to `to`.
    pub(crate) fn tap_failures(
        &self,
        vertex: u32,
        subtask: u32,
        to: Recipient<SubtaskFailed>,
    ) -> Recipient<SubtaskFailed> {
        let live = Arc::new(AtomicBool::new(true));
        if let Ok(mut taps) = self.taps.lock() {
            taps.insert((vertex, subtask), live.clone());
        }
        FailureTap {
            mode: self.clone(),
            to,
            live,
        }
        .start()
        .recipient()
    }

    /// The current incarnations of `subtasks` are being restarted: what they
    /// report from now on is traced but no longer reaches the supervisor
    /// (it would restart their successors).
    pub(crate) fn retire(&self, subtasks: impl IntoIterator<Item = (u32, u32)>) {
        if let Ok(taps) = self.taps.lock() {
            for key in subtasks {
                if let Some(live) = taps.get(&key) {
                    live.store(false, Ordering::Release);
                }
            }
        }
    }

    /// Checks the rest of the configuration can run deterministically.
    pub(crate) fn validate(&self, config: &Config) -> crate::Result<()> {
        let bad = |what: &str| {
            Err(crate::Error::Config(format!(
                "deterministic execution: {what}"
            )))
        };
        if self.tick_ms <= 0 {
            return bad("the clock's tick must be at least 1 ms");
        }
        if config.random_failures().0 > 0 {
            return bad(
                "random failures are timed by the wall clock; list them in the injector's faults",
            );
        }
        if config.checkpoint.finish_after_checkpoints > 0 {
            return bad(
                "holding the sources for checkpoints waits on the wall clock; leave finish_after_checkpoints 0",
            );
        }
        if config.checkpoint.alignment_timeout.is_some() {
            return bad("alignment timeouts run on the wall clock; leave alignment_timeout unset");
        }
        if !config.checkpoint.min_pause.is_zero() {
            return bad(
                "the minimum pause between checkpoints runs on the wall clock; leave it zero",
            );
        }
        Ok(())
    }
}

impl PartialEq for DeterministicMode {
    fn eq(&self, other: &Self) -> bool {
        self.tick_ms == other.tick_ms
            && self.clock.shares_time_with(&other.clock)
            && Arc::ptr_eq(&self.trace.events, &other.trace.events)
    }
}

/// The events of a deterministic run, in order. Clones share the events.
#[derive(Clone, Default)]
pub struct Trace {
    events: Arc<Mutex<Vec<Traced>>>,
}

impl Trace {
    fn push(&self, t: Traced) {
        if let Ok(mut e) = self.events.lock() {
            e.push(t);
        }
    }

    /// The events so far.
    pub fn events(&self) -> Vec<Traced> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.events()).finish()
    }
}

/// One event of a [`Trace`], at the logical time it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traced {
    /// The job's clock when it was recorded.
    pub at_ms: Timestamp,
    /// What happened.
    pub event: TraceEvent,
}

/// What a deterministic run records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// The coordinator triggered checkpoint `id` at the sources.
    CheckpointTriggered {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// Checkpoint `id` is in the store.
    CheckpointCompleted {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// Checkpoint `id` was aborted.
    CheckpointAborted {
        /// The checkpoint.
        id: CheckpointId,
        /// Why (a decline names the subtask and its error).
        reason: String,
        /// The injected fault behind it (a failed asynchronous write).
        fault: Option<Fault>,
    },
    /// A subtask failed.
    SubtaskFailed {
        /// Its vertex (chain).
        vertex: u32,
        /// Its index.
        subtask: u32,
        /// The error, naming the operator.
        error: String,
        /// The injected fault it came from, if it was one.
        fault: Option<Fault>,
    },
    /// Subtasks were redeployed from a checkpoint (a restart-all attempt, or
    /// a region).
    Restarted {
        /// `(vertex, subtask)` of every redeployed subtask, sorted.
        subtasks: Vec<(u32, u32)>,
        /// The checkpoint restored (`None`: from the beginning).
        checkpoint: Option<CheckpointId>,
    },
}

impl TraceEvent {
    /// The injected fault behind this event, if any.
    pub fn fault(&self) -> Option<&Fault> {
        match self {
            TraceEvent::CheckpointAborted { fault, .. }
            | TraceEvent::SubtaskFailed { fault, .. } => fault.as_ref(),
            _ => None,
        }
    }
}

/// Records subtask failures on their way to the supervisor.
struct FailureTap {
    mode: DeterministicMode,
    to: Recipient<SubtaskFailed>,
    /// Cleared when this incarnation of the subtask is being restarted.
    live: Arc<AtomicBool>,
}

impl Actor for FailureTap {
    type Context = Context<Self>;
}

impl Handler<SubtaskFailed> for FailureTap {
    type Result = ();

    fn handle(&mut self, msg: SubtaskFailed, _: &mut Context<Self>) {
        if msg.error != floe_actors::Error::Canceled {
            let error = msg.error.to_string();
            self.mode.record(TraceEvent::SubtaskFailed {
                vertex: msg.vertex.0,
                subtask: msg.subtask.0,
                fault: Fault::from_error(&msg.error),
                error,
            });
        }
        if self.live.load(Ordering::Acquire) {
            self.to.do_send(msg);
        }
    }
}
