//! One attempt of a job: from the job graph to running actors.
//!
//! [`deploy_attempt`] deploys one attempt: arbiters (its own or a shared
//! pool's), the checkpoint coordinator, the supervisor and every subtask
//! (`spawn.rs`), with region failover (`region.rs`) when configured. The
//! job's manager (`manager.rs`) calls it for the first attempt and after
//! each restart of the whole job.

use super::graph::node_uid;
use super::instrumentation::{KillTargets, SavepointRequest};
use super::job_graph::Job;
use super::region::Regions;
use super::shared::Shared;
use super::spawn::Spawner;
use crate::Result;
use crate::checkpoint::coordinator::{BlobRouter, CheckpointCoordinator, CoordinatorSetup};
use crate::checkpoint::restore::RestorePlan;
use crate::checkpoint::{CheckpointStorage, ExternalizedRetention, setup};
use crate::config::Config;
use actix::{Actor, Arbiter};
use floe_actors::checkpoint::messages::{RegisterSubtasks, RequestSavepoint};
use floe_actors::checkpoint::tracker::JobShape;
use floe_actors::ids::{SubtaskIndex, VertexId};
use floe_actors::snapshot::CheckpointLink;
use floe_actors::supervisor::SubtaskKey;
use floe_actors::supervisor::{JobSupervisor, Supervise};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One deployment of the job.
pub(crate) struct Attempt {
    pub supervisor: actix::Addr<JobSupervisor>,
    pub coordinator: actix::Addr<CheckpointCoordinator>,
    pub done: futures::channel::oneshot::Receiver<
        floe_actors::Result<floe_actors::supervisor::JobOutcome>,
    >,
    /// Each subtask's kill switch, for injected failures.
    pub fail: KillTargets,
    pub subtasks: usize,
    /// Resolves when the attempt's subtasks first process records (or
    /// with `Canceled` if they all stop before): the end of a restart's
    /// recovery time.
    pub first_activity: Option<futures::channel::oneshot::Receiver<std::time::Instant>>,
    /// The checkpoint or savepoint the attempt restored, if any.
    pub restored: Option<floe_actors::ids::CheckpointId>,
}

/// Deploys one attempt of the job: every subtask, its supervisor and its
/// checkpoint coordinator, restoring from `restore_from` when given.
pub(crate) fn deploy_attempt(
    plan: &Arc<Job>,
    config: &Arc<Config>,
    shared: &Shared,
    restore_from: Option<&std::path::Path>,
    restart: bool,
) -> Result<Attempt> {
    let (plan, config) = (plan.clone(), config.clone());
    let (status, metrics) = (shared.status.clone(), shared.metrics.clone());
    let (done_tx, done_rx) = futures::channel::oneshot::channel();
    // Deterministic execution: every actor on the current arbiter. On a
    // pool: the subtasks on its arbiters, the rest on its system's.
    let deterministic = config.deterministic().is_some();
    let pool = shared.pool.as_ref();
    let own_threads = !deterministic && pool.is_none();
    let new_arbiter = || own_threads.then(Arbiter::new);
    let arbiters: Vec<Arbiter> = (0..config.runtime.arbiters)
        .filter_map(|_| new_arbiter())
        .collect();
    let handle_of = |a: &Option<Arbiter>| match (a, pool) {
        (Some(a), _) => a.handle(),
        (None, Some(pool)) => pool.home(),
        (None, None) => Arbiter::current(),
    };
    let (activity, first_activity) = floe_actors::subtask::FirstActivity::with_waiter();
    let activity = Arc::new(activity);
    let restore = match restore_from {
        Some(path) => {
            let loaded = crate::checkpoint::load_snapshot(path)?;
            shared.events.report_fallback(&loaded);
            tracing::info!(checkpoint = loaded.meta.id.0, from = %loaded.source.display(), "restoring");
            Some(RestorePlan::build(&loaded, &plan, config.max_parallelism)?)
        }
        None if !config.restore_key_groups.is_empty() => Some(RestorePlan::build_key_groups(
            &config.restore_key_groups,
            &plan,
            config.max_parallelism,
        )?),
        None => None,
    };
    let restored = restore.as_ref().map(|r| r.checkpoint_id);
    let restore = Arc::new(restore);
    // `launch` gives checkpointing jobs a directory (a temporary one if
    // none was configured), shared by every attempt.
    let store = match &config.checkpoint.dir {
        Some(dir) if config.checkpoint.enabled() => Some(shared.checkpoint_storage(dir)?),
        _ => None,
    };
    let checkpoints = checkpoint_setup(
        &plan,
        &config,
        restore.as_ref().as_ref(),
        store.clone(),
        shared,
    )?;
    let router = checkpoints.router.clone();
    let coordinator_arbiter = new_arbiter();
    let coordinator =
        CheckpointCoordinator::start_in_arbiter(&handle_of(&coordinator_arbiter), move |_| {
            CheckpointCoordinator::new(checkpoints)
        });
    let supervisor_arbiter = new_arbiter();
    let supervisor = JobSupervisor::start_in_arbiter(&handle_of(&supervisor_arbiter), {
        let (status, metrics) = (status.clone(), metrics.clone());
        let interval = config.runtime.metrics_interval;
        let observer = coordinator.clone().recipient();
        move |_| {
            let name = metrics.job().to_string();
            let supervisor = JobSupervisor::new(status, metrics, done_tx)
                .with_name(&name)
                .with_publish_interval(interval)
                .with_observer(observer)
                .restartable();
            if deterministic {
                supervisor.deterministic()
            } else if own_threads {
                supervisor.on_own_arbiter()
            } else {
                supervisor
            }
        }
    });
    let savepoint_request: Option<SavepointRequest> =
        config.checkpoint.savepoint_at_records.map(|_| {
            let to: actix::Recipient<RequestSavepoint> = coordinator.clone().recipient();
            Arc::new(move |vertex, subtask| to.do_send(RequestSavepoint { vertex, subtask }))
                as SavepointRequest
        });
    let link = CheckpointLink {
        ack: coordinator.clone().recipient(),
        decline: coordinator.clone().recipient(),
        writer: router,
        alignment_timeout: config.checkpoint.alignment_timeout,
        // Periodic checkpoints on: the job ends with a final checkpoint.
        final_checkpoint: config
            .checkpoint
            .interval
            .is_some()
            .then(|| coordinator.clone().recipient()),
    };

    let spawner = Spawner {
        plan: plan.clone(),
        config: config.clone(),
        metrics: metrics.clone(),
        link,
        supervisor: supervisor.clone(),
        instrumentation: shared.instrumentation.for_attempt(savepoint_request),
        arbiters: match (arbiters.is_empty(), pool) {
            (false, _) => arbiters.iter().map(|a| a.handle()).collect(),
            (true, Some(pool)) => pool.workers(),
            (true, None) => vec![Arbiter::current()],
        },
        activity: activity.clone(),
        scratch_restarts: shared.scratch_restarts.clone(),
    };
    // A restart with nothing to restore starts the job from the beginning.
    let from_scratch = (restart && restore.is_none()).then(|| spawner.next_scratch_restart());
    let spawned = spawner.spawn(None, &restore, from_scratch)?;
    let cancels = spawned
        .iter()
        .map(|(&(v, j), s)| {
            (
                (VertexId(v as u32), SubtaskIndex(j as u32)),
                s.cancel.clone(),
            )
        })
        .collect();
    let fail: HashMap<SubtaskKey, _> = spawned
        .iter()
        .map(|(&(v, j), s)| ((VertexId(v as u32), SubtaskIndex(j as u32)), s.fail.clone()))
        .collect();
    let fail = Arc::new(Mutex::new(fail));
    let infos = spawner.subtasks(&spawned);
    let subtasks = infos.len();
    coordinator.do_send(RegisterSubtasks {
        subtasks: infos,
        supervisor: supervisor.clone().recipient(),
    });
    let region = (config.failover == crate::failover::FailoverStrategy::Region).then(|| {
        Box::new(Regions::new(
            spawner,
            store,
            coordinator.clone(),
            fail.clone(),
            shared,
        )) as Box<dyn floe_actors::supervisor::RegionFailover>
    });
    supervisor.do_send(Supervise {
        subtasks: cancels,
        arbiters,
        joined: coordinator_arbiter,
        region,
    });
    Ok(Attempt {
        supervisor,
        coordinator,
        done: done_rx,
        fail,
        subtasks,
        first_activity: Some(first_activity),
        restored,
    })
}

/// The coordinator's setup: the job's checkpoint settings, the store
/// (`None` without checkpointing), and the next id, never below what the
/// store or the restored snapshot used.
fn checkpoint_setup(
    plan: &Job,
    config: &Config,
    restore: Option<&RestorePlan>,
    store: Option<Arc<dyn CheckpointStorage>>,
    shared: &Shared,
) -> Result<CoordinatorSetup> {
    let cp = &config.checkpoint;
    let stored = match &store {
        Some(s) => s.max_id()?.0,
        None => 0,
    };
    let restored = restore.map_or(0, |r| r.checkpoint_id.0);
    let ids = shared.checkpoint_ids.clone();
    ids.fetch_max(
        stored.max(restored) + 1,
        std::sync::atomic::Ordering::AcqRel,
    );
    let operators = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(id, n)| (node_uid(id, n), (n.name.clone(), n.parallelism as u32)))
        .collect();
    let transactional_sinks = plan
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.transactional)
        .map(|(id, n)| node_uid(id, n))
        .collect();
    Ok(CoordinatorSetup {
        tracker: setup::tracker_config(cp),
        interval: cp.interval,
        retained: cp.retained,
        delete_on_cancel: cp.retention_on_cancel == ExternalizedRetention::Delete,
        router: Arc::new(BlobRouter::new(store.clone())),
        savepoints: Arc::new(crate::checkpoint::location::AnySavepoints),
        store,
        next_id: ids,
        shape: JobShape {
            max_parallelism: config.max_parallelism,
            operators,
            transactional_sinks,
        },
        stats: shared.stats.clone(),
        status: shared.status.clone(),
        job: config.job_name.clone().unwrap_or_default(),
        region_fence: shared.region_fence.clone(),
        clock: setup::clock(config.deterministic()),
        observer: Some(setup::observer(
            config.deterministic().cloned(),
            shared.observers.clone(),
        )),
    })
}
