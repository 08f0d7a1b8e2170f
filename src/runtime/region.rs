//! Region failover of one attempt: which pipelined region each subtask is
//! in, and how to redeploy a failed region from the latest completed
//! checkpoint while the others run on.

use super::events::{EventLog, JobEvent, RestartEvent};
use super::instrumentation::KillTargets;
use super::shared::Shared;
use super::spawn::Spawner;
use super::status::FailoverStats;
use crate::Error;
use crate::checkpoint::CheckpointStats;
use crate::checkpoint::CheckpointStorage;
use crate::checkpoint::coordinator::CheckpointCoordinator;
use crate::checkpoint::restore::RestorePlan;
use floe_actors::ids::{SubtaskIndex, VertexId};
use floe_actors::supervisor::SubtaskKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Region failover of one attempt: the pipelined regions (connected
/// components of the execution graph) and how to redeploy one of them from
/// the latest completed checkpoint while the others run on.
pub(super) struct Regions {
    spawner: Spawner,
    store: Option<Arc<dyn CheckpointStorage>>,
    coordinator: actix::Addr<CheckpointCoordinator>,
    fail: KillTargets,
    tracker: crate::failover::RestartTracker,
    failover: Arc<Mutex<FailoverStats>>,
    events: Arc<EventLog>,
    /// The restart strategy's last delay, for the restart's event.
    last_delay_ms: u64,
    stats: Arc<Mutex<CheckpointStats>>,
    region_of: HashMap<(usize, usize), usize>,
    members: Vec<Vec<(usize, usize)>>,
    /// Told of each restart before it picks its checkpoint.
    region_fence: crate::checkpoint::coordinator::RegionFence,
}

impl Regions {
    pub(super) fn new(
        spawner: Spawner,
        store: Option<Arc<dyn CheckpointStorage>>,
        coordinator: actix::Addr<CheckpointCoordinator>,
        fail: KillTargets,
        shared: &Shared,
    ) -> Self {
        let (region_of, members) = spawner.plan.regions();
        let tracker = crate::failover::RestartTracker::new(
            spawner.config.restart_strategy(),
            spawner.config.seed,
        );
        Regions {
            spawner,
            store,
            coordinator,
            fail,
            tracker,
            failover: shared.failover.clone(),
            events: shared.events.clone(),
            last_delay_ms: 0,
            stats: shared.stats.clone(),
            region_of,
            members,
            region_fence: shared.region_fence.clone(),
        }
    }
}

impl floe_actors::supervisor::RegionFailover for Regions {
    fn region_of(&self, vertex: VertexId, subtask: SubtaskIndex) -> usize {
        self.region_of
            .get(&(vertex.0 as usize, subtask.0 as usize))
            .copied()
            .unwrap_or(0)
    }

    fn members(&self, region: usize) -> Vec<SubtaskKey> {
        self.members
            .get(region)
            .map(|m| {
                m.iter()
                    .map(|&(v, j)| (VertexId(v as u32), SubtaskIndex(j as u32)))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn on_failure(&mut self) -> Option<std::time::Duration> {
        let delay = self.tracker.on_failure(std::time::Instant::now());
        self.last_delay_ms = delay.map_or(0, |d| d.as_millis() as u64);
        delay
    }

    fn restarting(&mut self, region: usize) {
        // Before `redeploy` picks the checkpoint to restore: checkpoints
        // still pending hold the failed incarnation's state and must not
        // complete after that choice.
        self.region_fence.region_restarting();
        if let (Some(mode), Some(members)) = (
            self.spawner.config.deterministic(),
            self.members.get(region),
        ) {
            mode.retire(members.iter().map(|&(v, j)| (v as u32, j as u32)));
        }
    }

    fn redeploy(
        &mut self,
        region: usize,
    ) -> floe_actors::Result<
        Vec<(
            SubtaskKey,
            actix::Recipient<floe_actors::messages::CancelSubtask>,
        )>,
    > {
        let members: std::collections::HashSet<(usize, usize)> = self
            .members
            .get(region)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let completed = self.stats.lock().ok().and_then(|s| s.last_completed);
        let plan = &self.spawner.plan;
        let restore = match (completed, &self.store) {
            (Some(_), Some(store)) => {
                let loaded = crate::checkpoint::load_latest(store.as_ref())
                    .map_err(|e| Error::from(e).into_runtime())?;
                self.events.report_fallback(&loaded);
                Some(
                    RestorePlan::build(&loaded, plan, self.spawner.config.max_parallelism)
                        .map_err(Error::into_runtime)?,
                )
            }
            _ => match &self.spawner.config.restore_from {
                Some(path) => {
                    let loaded = crate::checkpoint::load_snapshot(path)
                        .map_err(|e| Error::from(e).into_runtime())?;
                    Some(
                        RestorePlan::build(&loaded, plan, self.spawner.config.max_parallelism)
                            .map_err(Error::into_runtime)?,
                    )
                }
                None => None,
            },
        };
        let restored = restore.as_ref().map(|r| r.checkpoint_id);
        // 0 in the logs: from the beginning.
        let restored_id = restored.map_or(0, |c| c.0);
        tracing::info!(
            region,
            checkpoint = restored_id,
            subtasks = members.len(),
            "redeploying a region"
        );
        // Recovery: from the failure to the region's subtasks processing
        // records again.
        let failed_at = self.spawner.metrics.last_failure_at();
        let mut spawner = self.spawner.clone();
        let (activity, first_activity) = floe_actors::subtask::FirstActivity::with_waiter();
        spawner.activity = Arc::new(activity);
        let failover = self.failover.clone();
        let deterministic = self.spawner.config.deterministic().cloned();
        if let Some(mode) = &deterministic {
            let mut subtasks: Vec<(u32, u32)> =
                members.iter().map(|&(v, j)| (v as u32, j as u32)).collect();
            subtasks.sort_unstable();
            mode.record(crate::failover::deterministic::TraceEvent::Restarted {
                subtasks,
                checkpoint: restored,
            });
        }
        // Not in deterministic execution, which measures no wall-clock time.
        if let (Some(failed_at), None) = (failed_at, deterministic) {
            // Woken by the region's first record (an event, not a poll);
            // canceled if the region stops before it.
            actix::spawn(async move {
                if let Some(ms) = recovery_ms(first_activity, failed_at).await
                    && let Ok(mut f) = failover.lock()
                {
                    f.max_recovery_ms = f.max_recovery_ms.max(ms);
                }
            });
        }
        let from_scratch = restore.is_none().then(|| spawner.next_scratch_restart());
        let spawned = spawner
            .spawn(Some(&members), &Arc::new(restore), from_scratch)
            .map_err(Error::into_runtime)?;
        let subtasks = self.spawner.subtasks(&spawned);
        self.coordinator
            .do_send(floe_actors::checkpoint::messages::ReplaceSubtasks { subtasks });
        if let Ok(mut f) = self.fail.lock() {
            for (&(v, j), s) in &spawned {
                f.insert((VertexId(v as u32), SubtaskIndex(j as u32)), s.fail.clone());
            }
        }
        let attempt = match self.failover.lock() {
            Ok(mut f) => {
                f.restarts += 1;
                f.restarted_subtasks += members.len() as u64;
                f.restored_checkpoints.push(restored);
                f.restarts
            }
            Err(_) => 0,
        };
        let cause = self
            .spawner
            .metrics
            .failures()
            .last()
            .map(|f| f.message.clone())
            .unwrap_or_default();
        tracing::warn!(
            attempt,
            region,
            cause = %cause,
            checkpoint = restored_id,
            "restarted a region"
        );
        self.events.emit(JobEvent::Restarted(RestartEvent {
            attempt,
            cause,
            restored_checkpoint: restored,
            subtasks: members.len() as u64,
            delay_ms: self.last_delay_ms,
        }));
        self.spawner
            .metrics
            .record_restart(members.len() as u64, restored);
        Ok(spawned
            .iter()
            .map(|(&(v, j), s)| {
                (
                    (VertexId(v as u32), SubtaskIndex(j as u32)),
                    s.cancel.clone(),
                )
            })
            .collect())
    }
}

/// The time from `failed_at` to a redeployment's first activity, in ms;
/// `None` when the redeployment stopped before any (its
/// [`FirstActivity`](floe_actors::subtask::FirstActivity) dropped unset).
pub(super) async fn recovery_ms(
    first_activity: futures::channel::oneshot::Receiver<std::time::Instant>,
    failed_at: std::time::Instant,
) -> Option<u64> {
    let active = first_activity.await.ok()?;
    Some(active.saturating_duration_since(failed_at).as_millis() as u64)
}
