//! A job's test instrumentation, carried as one value: the planned faults
//! and whether each fired, the random kills still to come, the holds that
//! keep the sources from finishing meanwhile, and the savepoint pause of
//! `savepoint_at_records`.
//!
//! What a job is instrumented with is installed on its
//! [`Config`](crate::Config) (a [`FaultInjector`](crate::failover::FaultInjector)
//! from the `floe` binary's flags or the `testing` feature's chaos harness,
//! `finish_after_checkpoints`, `savepoint_at_records`). The manager makes
//! one [`Instrumentation`] per job ([`Instrumentation::new`]), each attempt
//! adds how its sources ask for the savepoint
//! ([`Instrumentation::for_attempt`]), and each subtask's operators find it
//! in their `NodeCtx`. A job without any carries an empty one: no counter,
//! no flag, nothing on its data path.
//!
//! The kills themselves are sent from here ([`Instrumentation::inject_failures`]),
//! driven by the job's progress, not by the data path.

use crate::config::Config;
use crate::failover::{Count, Latch, Observers};
use crate::operators::node::FaultTrigger;
use floe_actors::ids::{SubtaskIndex, VertexId};
use floe_actors::messages::InjectFailure;
use floe_actors::supervisor::SubtaskKey;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a source subtask that reached its share of `savepoint_at_records`
/// tells the coordinator.
pub(crate) type SavepointRequest = Arc<dyn Fn(VertexId, SubtaskIndex) + Send + Sync>;

/// The subtasks an injected kill may hit, each with its kill switch.
pub(crate) type KillTargets = Arc<Mutex<HashMap<SubtaskKey, actix::Recipient<InjectFailure>>>>;

/// The test instrumentation of one job (see the module's documentation).
/// Cloning it is cheap; every clone shares the counters and flags.
#[derive(Clone, Default)]
pub(crate) struct Instrumentation {
    /// Reasons the sources still hold at their end, not finishing: each
    /// injected failure still to come, and the wait for
    /// `finish_after_checkpoints` completed checkpoints.
    hold: Option<Arc<AtomicU32>>,
    /// Injected failures still to come (each also counted in `hold`).
    kills: Option<Arc<AtomicU32>>,
    /// Per planned fault: whether it fired (once per job).
    fault_fired: Option<Arc<Vec<AtomicBool>>>,
    /// How the current attempt's sources ask for the savepoint of
    /// `savepoint_at_records`.
    savepoint_request: Option<SavepointRequest>,
}

impl Instrumentation {
    /// The instrumentation `config` asks for, shared by every attempt.
    pub fn new(config: &Config) -> Self {
        let injected = config.random_failures().0;
        let held = injected + u32::from(config.checkpoint.finish_after_checkpoints > 0);
        let planned = config.planned_faults();
        Instrumentation {
            hold: (held > 0).then(|| Arc::new(AtomicU32::new(held))),
            kills: (injected > 0).then(|| Arc::new(AtomicU32::new(injected))),
            fault_fired: (!planned.is_empty())
                .then(|| Arc::new(planned.iter().map(|_| AtomicBool::new(false)).collect())),
            savepoint_request: None,
        }
    }

    /// This instrumentation for one attempt, whose sources ask for the
    /// savepoint with `request`.
    pub fn for_attempt(&self, request: Option<SavepointRequest>) -> Self {
        Instrumentation {
            savepoint_request: request,
            ..self.clone()
        }
    }

    /// What keeps a source from finishing while it is above zero.
    pub fn source_hold(&self) -> Option<Arc<AtomicU32>> {
        self.hold.clone()
    }

    /// The planned faults of subtask `subtask` of operator `operator`, with
    /// their shared "fired" flags (each fires once per job, whatever the
    /// restarts).
    pub fn faults(
        &self,
        config: &Config,
        operator: &str,
        subtask: SubtaskIndex,
    ) -> Vec<FaultTrigger> {
        let Some(fired) = &self.fault_fired else {
            return Vec::new();
        };
        config
            .planned_faults()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.operator == operator && f.subtask == subtask.0 as usize)
            .map(|(i, f)| FaultTrigger {
                at: f.at,
                index: i,
                fired: fired.clone(),
                injector: config.hooks.fault_injector.clone(),
            })
            .collect()
    }

    /// For source subtask `subtask` of vertex `vertex`, which emits
    /// `records` of `savepoint_at_records`: those records and how it asks
    /// for the savepoint once it emitted them.
    pub fn savepoint_pause(
        &self,
        records: u64,
        vertex: VertexId,
        subtask: SubtaskIndex,
    ) -> Option<(u64, Arc<dyn Fn() + Send + Sync>)> {
        let request = self.savepoint_request.clone()?;
        Some((records, Arc::new(move || request(vertex, subtask))))
    }

    /// Whether injected failures are still to come.
    pub fn kills_pending(&self) -> bool {
        matches!(
            (&self.kills, &self.hold),
            (Some(kills), Some(_)) if kills.load(Ordering::Acquire) > 0
        )
    }

    /// One injected failure took effect: one kill fewer to come, one reason
    /// fewer for the sources to hold.
    pub fn kill_took_effect(&self) {
        if let (Some(kills), Some(hold)) = (&self.kills, &self.hold)
            && kills
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1))
                .is_ok()
        {
            let _ = hold.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
        }
    }

    /// Lets the sources finish (drops the hold `finish_after_checkpoints`
    /// put on them) once `wanted` checkpoints completed, over every
    /// attempt; gives up when the job ended without them. Nothing when
    /// `wanted` is 0.
    pub fn release_after_checkpoints(&self, observers: Arc<Observers>, wanted: u64) {
        let (true, Some(hold)) = (wanted > 0, self.hold.clone()) else {
            return;
        };
        actix::spawn(async move {
            if observers.progress.reached(Count::Checkpoints, wanted).await {
                let _ =
                    hold.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
            }
        });
    }

    /// Kills subtasks of the attempt, one after each checkpoint completed
    /// since the previous kill (plus a seeded jitter of up to half an
    /// interval), while kills remain and the attempt runs. A restart-all
    /// ends the attempt after its first kill; a region restart keeps it,
    /// with the region's new subtasks among the targets. It waits on the
    /// job's progress (completed checkpoints, restarts) and the attempt's
    /// end, never polls.
    pub async fn inject_failures(
        self,
        observers: Arc<Observers>,
        targets: KillTargets,
        ended: Arc<Latch>,
        mut seed: u64,
        interval: Duration,
    ) {
        let Some(remaining) = self.kills.clone() else {
            return;
        };
        let progress = &observers.progress;
        while remaining.load(Ordering::Acquire) > 0 {
            let next = progress.get(Count::Checkpoints) + 1;
            if !unless_ended(&ended, progress.reached(Count::Checkpoints, next)).await {
                return;
            }
            seed = crate::text::mix64(seed);
            let jitter_ms = seed % (interval.as_millis() as u64 / 2).max(1);
            actix_rt::time::sleep(Duration::from_millis(jitter_ms)).await;
            if ended.is_set() {
                return;
            }
            let target = {
                let Ok(t) = targets.lock() else {
                    return;
                };
                let mut keys: Vec<_> = t.keys().copied().collect();
                if keys.is_empty() {
                    return;
                }
                keys.sort();
                let key = keys[(crate::text::mix64(seed) % keys.len() as u64) as usize];
                t[&key].clone()
            };
            let restarted = progress.reached(Count::Restarts, progress.get(Count::Restarts) + 1);
            target.do_send(InjectFailure);
            // The kill counts once it took effect: the region restarted, or
            // the attempt ended (restart-all; the manager counts the kill
            // when the attempt failed with it). Until then the sources stay
            // held, so the job cannot reach its end under the kill.
            if !unless_ended(&ended, restarted).await {
                return;
            }
            self.kill_took_effect();
        }
    }
}

/// `wait`'s outcome, or `false` as soon as `ended` is set.
async fn unless_ended(ended: &Latch, wait: impl std::future::Future<Output = bool>) -> bool {
    let wait = std::pin::pin!(wait);
    let end = std::pin::pin!(ended.wait());
    match futures::future::select(wait, end).await {
        futures::future::Either::Left((reached, _)) => reached && !ended.is_set(),
        futures::future::Either::Right(_) => false,
    }
}
