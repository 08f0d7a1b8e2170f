//! From a plan to a running job.
//!
//! [`Job`] pairs the plan ([`crate::plan`]: vertices, channels, regions)
//! with the stream graph's operators. [`launch`] starts the job's manager
//! (`manager.rs`) on its first attempt; [`deploy_attempt`] deploys one
//! attempt: arbiters (its own or a shared pool's), the checkpoint
//! coordinator, the supervisor and every subtask (`spawn.rs`), with region
//! failover (`region.rs`) when configured.

use super::graph::{Node, node_uid};
use super::job::JobHandle;
use super::region::Regions;
use super::spawn::{SavepointRequest, Spawner};
use super::status::{EdgeInfo, JobGraphInfo, OperatorInfo, RegionInfo, VertexInfo};
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::coordinator::{
    BlobRouter, CheckpointCoordinator, CheckpointStats, CoordinatorSetup, RegisterSubtasks,
    RequestSavepoint,
};
use crate::checkpoint::restore::RestorePlan;
use crate::config::Config;
use crate::plan::{Plan, PlanError, PlanOptions};
use crate::{Error, Result};
use actix::{Actor, Arbiter};
use floe_actors::ids::{SubtaskIndex, VertexId};
use floe_actors::metrics::JobMetrics;
use floe_actors::snapshot::CheckpointLink;
use floe_actors::supervisor::SubtaskKey;
use floe_actors::supervisor::{JobStatus, JobSupervisor, Supervise};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A plan with the stream graph's operators: what the runtime deploys. It
/// derefs to its [`Plan`] (vertices, channels, regions).
pub(crate) struct Job {
    pub plan: Plan,
    /// The operators, with their closures; `plan.nodes` holds their shapes.
    pub nodes: Vec<Node>,
}

impl std::ops::Deref for Job {
    type Target = Plan;

    fn deref(&self) -> &Plan {
        &self.plan
    }
}

impl Job {
    /// Plans `nodes` (see [`crate::plan`]) under `config`.
    pub fn new(mut nodes: Vec<Node>, config: &Config) -> Result<Job> {
        let options = PlanOptions {
            chaining: config.chaining,
            max_parallelism: config.max_parallelism,
        };
        let plan = Plan::new(nodes.iter().map(Node::shape).collect(), options)?;
        // A default edge the plan turned into a rebalance (its sides differ
        // in parallelism) takes its round-robin fallback.
        for (id, node) in nodes.iter_mut().enumerate() {
            for (k, edge) in node.inputs.iter_mut().enumerate() {
                let planned = &plan.nodes[id].inputs[k];
                if planned.kind == edge.partition.kind {
                    continue;
                }
                let make = edge.partition.fallback.take().ok_or_else(|| {
                    Error::Internal(format!(
                        "the plan rebalanced the edge into '{}', which has no fallback",
                        node.name
                    ))
                })?;
                edge.partition = super::graph::Partition {
                    kind: planned.kind,
                    make,
                    explicit: planned.explicit,
                    fallback: None,
                };
            }
        }
        Ok(Job { plan, nodes })
    }

    /// The deployed graph, for status snapshots.
    fn describe(&self) -> JobGraphInfo {
        let plan = &self.plan;
        let operators = plan
            .nodes
            .iter()
            .enumerate()
            .map(|(id, n)| OperatorInfo {
                id: id as u32,
                name: n.name.clone(),
                parallelism: n.parallelism,
                vertex: plan.vertex_of[id] as u32,
            })
            .collect();
        let edges = plan
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(id, n)| {
                n.inputs.iter().map(move |e| EdgeInfo {
                    from: e.from as u32,
                    to: id as u32,
                    partitioner: e.kind.name().to_string(),
                    chained: plan.chained[id],
                })
            })
            .collect();
        let vertices = plan
            .heads
            .iter()
            .enumerate()
            .map(|(v, &h)| VertexInfo {
                id: v as u32,
                name: plan.vertex_name(v),
                operators: plan.vertex_members(v).map(|id| id as u32).collect(),
                parallelism: plan.nodes[h].parallelism,
            })
            .collect();
        JobGraphInfo {
            operators,
            edges,
            vertices,
            regions: self.region_infos(),
        }
    }

    /// The pipelined regions for the job's status: members as (vertex id,
    /// subtask), sorted.
    pub fn region_infos(&self) -> Vec<RegionInfo> {
        let (_, members) = self.regions();
        members
            .into_iter()
            .enumerate()
            .map(|(id, mut m)| {
                m.sort_unstable();
                RegionInfo {
                    id,
                    subtasks: m.into_iter().map(|(v, j)| (v as u32, j as u32)).collect(),
                }
            })
            .collect()
    }
}

impl From<PlanError> for Error {
    /// A graph the plan refuses is an invalid configuration, as before the
    /// plan had its own error type.
    fn from(e: PlanError) -> Self {
        Error::InvalidConfig {
            source: Box::new(e),
        }
    }
}

/// What every attempt of a job shares.
pub(crate) struct Shared {
    pub status: Arc<Mutex<JobStatus>>,
    pub metrics: Arc<JobMetrics>,
    pub stats: Arc<Mutex<CheckpointStats>>,
    /// Reasons the sources still hold at their end, not finishing: each
    /// injected failure still to come, and the wait for
    /// `finish_after_checkpoints` completed checkpoints.
    pub hold: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// Injected failures still to come (each also counted in `hold`).
    pub kills: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// Restart counts.
    pub failover: Arc<Mutex<super::manager::FailoverStats>>,
    /// Per configured fault: whether it fired (once per job).
    pub fault_fired: Option<Arc<Vec<std::sync::atomic::AtomicBool>>>,
    /// The next checkpoint id (ids are never reused across attempts).
    pub checkpoint_ids: Arc<std::sync::atomic::AtomicU64>,
    /// Restarts so far that started from the beginning (no checkpoint).
    pub scratch_restarts: Arc<std::sync::atomic::AtomicU64>,
    /// Restarts and restore fallbacks, for the job's subscribers.
    pub events: Arc<super::events::EventLog>,
    /// Region restarts begun, against which checkpoints complete.
    pub region_fence: crate::checkpoint::coordinator::RegionFence,
    /// The job's progress and the configured observers.
    pub observers: Arc<crate::failover::Observers>,
    /// The shared threads every attempt runs on, if any (else each attempt
    /// starts its own).
    pub pool: Option<super::pool::ArbiterPool>,
}

/// One deployment of the job.
pub(crate) struct Attempt {
    pub supervisor: actix::Addr<JobSupervisor>,
    pub coordinator: actix::Addr<CheckpointCoordinator>,
    pub done: futures::channel::oneshot::Receiver<
        floe_actors::Result<floe_actors::supervisor::JobOutcome>,
    >,
    pub fail:
        Arc<Mutex<HashMap<SubtaskKey, actix::Recipient<floe_actors::messages::InjectFailure>>>>,
    pub subtasks: usize,
    /// Resolves when the attempt's subtasks first process records (or
    /// with `Canceled` if they all stop before): the end of a restart's
    /// recovery time.
    pub first_activity: Option<futures::channel::oneshot::Receiver<std::time::Instant>>,
    /// The checkpoint or savepoint the attempt restored, if any.
    pub restored: Option<floe_actors::ids::CheckpointId>,
}

/// Deploys `plan` in the current actix system and returns the job's handle;
/// the job's manager restarts it on failure as its restart strategy allows.
pub(crate) fn launch(
    plan: Job,
    config: Config,
    pool: Option<super::pool::ArbiterPool>,
) -> Result<JobHandle> {
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
    let injected = config.random_failures().0;
    let held = injected + u32::from(config.checkpoint.finish_after_checkpoints > 0);
    let observers = Arc::new(crate::failover::Observers::new(
        config.hooks.observers.clone(),
    ));
    let shared = Shared {
        observers: observers.clone(),
        status: Arc::new(Mutex::new(JobStatus::Created)),
        metrics: Arc::new(JobMetrics::new(config.job_name.as_deref().unwrap_or("job"))),
        stats: Arc::new(Mutex::new(CheckpointStats::default())),
        hold: (held > 0).then(|| Arc::new(std::sync::atomic::AtomicU32::new(held))),
        kills: (injected > 0).then(|| Arc::new(std::sync::atomic::AtomicU32::new(injected))),
        failover: Arc::default(),
        checkpoint_ids: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        scratch_restarts: Arc::default(),
        events: Arc::new(super::events::EventLog::with_observer(observers)),
        region_fence: Default::default(),
        // Deterministic execution keeps every actor on the current arbiter.
        pool: pool.filter(|_| config.deterministic().is_none()),
        fault_fired: (!config.planned_faults().is_empty()).then(|| {
            Arc::new(
                config
                    .planned_faults()
                    .iter()
                    .map(|_| std::sync::atomic::AtomicBool::new(false))
                    .collect(),
            )
        }),
    };
    let graph = plan.describe();
    let (done_tx, done_rx) = futures::channel::oneshot::channel();
    let control = Arc::new(super::job::JobControl::new(
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
    .with_checkpoints(shared.stats.clone());
    let manager = super::manager::Manager {
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
            report_fallback(&shared.events, &loaded);
            tracing::info!(checkpoint = loaded.meta.id.0, from = %loaded.source.display(), "restoring");
            Some(RestorePlan::build(&loaded, &plan, config.max_parallelism)?)
        }
        None => None,
    };
    let restored = restore.as_ref().map(|r| r.checkpoint_id);
    let restore = Arc::new(restore);
    let mut checkpoints = checkpoint_setup(
        &plan,
        &config,
        restore.as_ref().as_ref(),
        status.clone(),
        shared.stats.clone(),
        shared.checkpoint_ids.clone(),
        shared.region_fence.clone(),
    )?;
    checkpoints.observer = Some(shared.observers.clone());
    let router = checkpoints.router.clone();
    let store = checkpoints.store.clone();
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
        savepoint_request,
        hold: shared.hold.clone(),
        fault_fired: shared.fault_fired.clone(),
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

/// Tells the job's subscribers that `loaded` was restored in place of newer,
/// damaged checkpoints (`load_latest` logged each one already).
pub(super) fn report_fallback(
    events: &super::events::EventLog,
    loaded: &crate::checkpoint::LoadedSnapshot,
) {
    use super::events::{FallbackEvent, JobEvent, SkippedCheckpoint};
    if loaded.skipped.is_empty() {
        return;
    }
    events.emit(JobEvent::RestoreFellBack(FallbackEvent {
        restored_checkpoint: loaded.meta.id,
        skipped: loaded
            .skipped
            .iter()
            .map(|(id, e)| SkippedCheckpoint {
                checkpoint: *id,
                reason: e.to_string(),
            })
            .collect(),
    }));
}

/// The coordinator's settings: the store (the configured directory, or a
/// temporary one when checkpoints are on without a directory) and the next id.
fn checkpoint_setup(
    plan: &Job,
    config: &Config,
    restore: Option<&RestorePlan>,
    status: Arc<Mutex<JobStatus>>,
    stats: Arc<Mutex<CheckpointStats>>,
    ids: Arc<std::sync::atomic::AtomicU64>,
    region_fence: crate::checkpoint::coordinator::RegionFence,
) -> Result<CoordinatorSetup> {
    let cp = &config.checkpoint;
    // `launch` gives checkpointing jobs a directory (a temporary one if
    // none was configured), shared by every attempt.
    let store = match &cp.dir {
        Some(dir) if cp.enabled() => Some(Arc::new(CheckpointStore::open(dir)?)),
        _ => None,
    };
    let stored = match &store {
        Some(s) => s.max_id()?.0,
        None => 0,
    };
    let restored = restore.map_or(0, |r| r.checkpoint_id.0);
    let operators = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(id, n)| (node_uid(id, n), (n.name.clone(), n.parallelism as u32)))
        .collect();
    Ok(CoordinatorSetup {
        config: cp.clone(),
        router: Arc::new(BlobRouter::new(store.clone())),
        store,
        max_parallelism: config.max_parallelism,
        next_id: {
            // Never below what the store or the restored snapshot used.
            ids.fetch_max(
                stored.max(restored) + 1,
                std::sync::atomic::Ordering::AcqRel,
            );
            ids
        },
        operators,
        transactional_sinks: plan
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.transactional)
            .map(|(id, n)| node_uid(id, n))
            .collect(),
        stats,
        status,
        job: config.job_name.clone().unwrap_or_default(),
        deterministic: config.deterministic().cloned(),
        observer: None,
        region_fence,
    })
}

/// A job-level error as a runtime error, keeping whether it is retriable.
pub(super) fn to_runtime(e: Error) -> floe_actors::Error {
    match e {
        Error::Runtime(r) => r,
        other if other.is_retriable() => floe_actors::Error::Runtime(other.to_string()),
        other => floe_actors::Error::Runtime(other.to_string()).non_retriable(),
    }
}
