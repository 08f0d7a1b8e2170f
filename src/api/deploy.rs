//! From stream graph to running subtasks.
//!
//! 1. **Chaining.** A node joins its input's chain when it has exactly one input,
//!    that edge is a default (forward) edge, both sides have the same parallelism,
//!    and neither side disabled chaining. Otherwise it heads a new vertex.
//! 2. **Channels.** Every (edge, upstream subtask, downstream subtask) pair the
//!    edge's pattern connects becomes a channel, numbered per receiving subtask.
//! 3. **Deployment.** Vertices are spawned downstream first, so each record
//!    writer is built with the addresses of its receivers; subtask `i` of every
//!    vertex runs on arbiter `i mod arbiters`, so connected subtasks share a
//!    thread where they can. Each chain is built on its arbiter's thread.

use super::graph::{
    ErasedChain, ErasedHead, Node, NodeId, NodeKind, Port, Spawned, node_ctx, node_uid,
};
use super::job::JobHandle;
use super::status::{EdgeInfo, JobGraphInfo, OperatorInfo, VertexInfo};
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::coordinator::{
    BlobRouter, CheckpointCoordinator, CheckpointStats, CoordinatorSetup, RegisterSubtasks,
    RequestSavepoint, SubtaskInfo,
};
use crate::checkpoint::restore::RestorePlan;
use crate::config::Config;
use crate::{Error, Result};
use actix::{Actor, Arbiter};
use floe_actors::ids::{ChannelId, SubtaskIndex, VertexId};
use floe_actors::metrics::{JobMetrics, QueueMetrics};
use floe_actors::partitioner::{Pattern, connected};
use floe_actors::snapshot::CheckpointLink;
use floe_actors::subtask::{ChainBuilder, SubtaskSetup};
use floe_actors::supervisor::SubtaskKey;
use floe_actors::supervisor::{JobStatus, JobSupervisor, Supervise};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A consumer of a node's output: (port, consuming node, index of the edge in its inputs).
type Consumer = (Port, NodeId, usize);

pub(crate) struct Plan {
    pub nodes: Vec<Node>,
    pub consumers: Vec<Vec<Consumer>>,
    pub chained: Vec<bool>,
    pub vertex_of: Vec<usize>,
    /// Head node of each vertex, in topological order.
    pub heads: Vec<NodeId>,
    /// Channel ids: (consumer node, edge index, upstream subtask, downstream subtask).
    pub channels: HashMap<(NodeId, usize, usize, usize), ChannelId>,
    pub inputs_per_subtask: Vec<Vec<usize>>,
}

impl Plan {
    pub fn new(mut nodes: Vec<Node>, config: &Config) -> Result<Plan> {
        if nodes.is_empty() {
            return Err(Error::Config("the job has no operators".into()));
        }
        let n = nodes.len();
        // Resolve default edges whose sides differ in parallelism to rebalance.
        for id in 0..n {
            let p = nodes[id].parallelism;
            if p == 0 {
                return Err(Error::Config(format!(
                    "operator '{}' has parallelism 0; it must be at least 1",
                    nodes[id].name
                )));
            }
            for k in 0..nodes[id].inputs.len() {
                let e = &nodes[id].inputs[k];
                if e.partition.name == "hash" && p > config.max_parallelism as usize {
                    return Err(Error::Config(format!(
                        "keyed operator '{}' has parallelism {} above the max parallelism {}",
                        nodes[id].name, p, config.max_parallelism
                    )));
                }
                let up = nodes[e.from].parallelism;
                if e.partition.pattern == Pattern::Pointwise && up != p {
                    if e.partition.explicit {
                        return Err(Error::Config(format!(
                            "forward edge into '{}' needs equal parallelism ({} vs {})",
                            nodes[id].name, up, p
                        )));
                    }
                    let make = e.partition.fallback.clone().ok_or_else(|| {
                        Error::Config(format!(
                            "edge into '{}' cannot be rebalanced",
                            nodes[id].name
                        ))
                    })?;
                    nodes[id].inputs[k].partition = super::graph::Partition {
                        pattern: Pattern::AllToAll,
                        make,
                        explicit: true,
                        name: "rebalance",
                        fallback: None,
                    };
                }
            }
        }
        let mut consumers: Vec<Vec<Consumer>> = vec![Vec::new(); n];
        for (id, node) in nodes.iter().enumerate() {
            for (k, e) in node.inputs.iter().enumerate() {
                if e.from >= id {
                    return Err(Error::Config("the stream graph has a cycle".into()));
                }
                consumers[e.from].push((e.port, id, k));
            }
        }
        let mut chained = vec![false; n];
        let mut vertex_of = vec![0; n];
        let mut heads: Vec<usize> = Vec::new();
        for id in 0..n {
            let node = &nodes[id];
            let chain = config.chaining
                && node.inputs.len() == 1
                && !node.inputs[0].partition.explicit
                && node.chainable
                && nodes[node.inputs[0].from].chainable
                && nodes[node.inputs[0].from].parallelism == node.parallelism
                && !(node.suspends
                    && nodes[heads[vertex_of[node.inputs[0].from]]]
                        .inputs
                        .is_empty());
            chained[id] = chain;
            if chain {
                vertex_of[id] = vertex_of[node.inputs[0].from];
            } else {
                vertex_of[id] = heads.len();
                heads.push(id);
            }
        }
        for (id, node) in nodes.iter().enumerate() {
            for e in &node.inputs {
                tracing::debug!(
                    from = %nodes[e.from].name,
                    to = %node.name,
                    partition = e.partition.name,
                    chained = chained[id],
                    "edge"
                );
            }
        }
        let mut channels = HashMap::new();
        let mut inputs_per_subtask = Vec::with_capacity(heads.len());
        for &h in &heads {
            let p = nodes[h].parallelism;
            let mut next = vec![0usize; p];
            for (k, e) in nodes[h].inputs.iter().enumerate() {
                let up_p = nodes[e.from].parallelism;
                for i in 0..up_p {
                    for j in connected(e.partition.pattern, i, up_p, p) {
                        channels.insert((h, k, i, j), ChannelId(next[j] as u32));
                        next[j] += 1;
                    }
                }
            }
            inputs_per_subtask.push(next);
        }
        Ok(Plan {
            nodes,
            consumers,
            chained,
            vertex_of,
            heads,
            channels,
            inputs_per_subtask,
        })
    }

    /// The deployed graph, for status snapshots.
    fn describe(&self) -> JobGraphInfo {
        let operators = self
            .nodes
            .iter()
            .enumerate()
            .map(|(id, n)| OperatorInfo {
                id: id as u32,
                name: n.name.clone(),
                parallelism: n.parallelism,
                vertex: self.vertex_of[id] as u32,
            })
            .collect();
        let edges = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(id, n)| {
                n.inputs.iter().map(move |e| EdgeInfo {
                    from: e.from as u32,
                    to: id as u32,
                    partitioner: e.partition.name.to_string(),
                    chained: self.chained[id],
                })
            })
            .collect();
        let vertices = self
            .heads
            .iter()
            .enumerate()
            .map(|(v, &h)| VertexInfo {
                id: v as u32,
                name: self.vertex_name(v),
                operators: (0..self.nodes.len())
                    .filter(|&id| self.vertex_of[id] == v)
                    .map(|id| id as u32)
                    .collect(),
                parallelism: self.nodes[h].parallelism,
            })
            .collect();
        JobGraphInfo {
            operators,
            edges,
            vertices,
            regions: self.region_infos(),
        }
    }

    /// The pipelined regions: connected components of the execution graph
    /// (subtasks linked by a channel), as a region per `(vertex, subtask)`
    /// and the members of each region.
    pub fn regions(&self) -> Regioning {
        let mut ids: HashMap<(usize, usize), usize> = HashMap::new();
        let mut keys = Vec::new();
        for (v, &h) in self.heads.iter().enumerate() {
            for j in 0..self.nodes[h].parallelism {
                ids.insert((v, j), keys.len());
                keys.push((v, j));
            }
        }
        let mut parent: Vec<usize> = (0..keys.len()).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        for &(c, k, i, d) in self.channels.keys() {
            let down = self.vertex_of[c];
            let up = self.vertex_of[self.nodes[c].inputs[k].from];
            let (a, b) = (ids[&(up, i)], ids[&(down, d)]);
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            if ra != rb {
                parent[ra] = rb;
            }
        }
        let mut region_of = HashMap::new();
        let mut index: HashMap<usize, usize> = HashMap::new();
        let mut members: Vec<Vec<(usize, usize)>> = Vec::new();
        for (n, key) in keys.iter().enumerate() {
            let root = find(&mut parent, n);
            let r = *index.entry(root).or_insert_with(|| {
                members.push(Vec::new());
                members.len() - 1
            });
            members[r].push(*key);
            region_of.insert(*key, r);
        }
        (region_of, members)
    }

    /// The pipelined regions for the job's status: members as (vertex id,
    /// subtask), sorted.
    pub fn region_infos(&self) -> Vec<super::status::RegionInfo> {
        let (_, members) = self.regions();
        members
            .into_iter()
            .enumerate()
            .map(|(id, mut m)| {
                m.sort_unstable();
                super::status::RegionInfo {
                    id,
                    subtasks: m.into_iter().map(|(v, j)| (v as u32, j as u32)).collect(),
                }
            })
            .collect()
    }

    /// Chain names, for logs: "source -> map -> sum".
    fn vertex_name(&self, v: usize) -> String {
        let names: Vec<&str> = (0..self.nodes.len())
            .filter(|&id| self.vertex_of[id] == v)
            .map(|id| self.nodes[id].name.as_str())
            .collect();
        names.join(" -> ")
    }
}

/// How a source subtask that reached its share of `savepoint_at_records`
/// tells the coordinator.
type SavepointRequest = Arc<dyn Fn(VertexId, SubtaskIndex) + Send + Sync>;

/// Regions of an execution graph: the region of each `(vertex, subtask)`
/// and the members of each region.
pub(crate) type Regioning = (HashMap<(usize, usize), usize>, Vec<Vec<(usize, usize)>>);

/// Key of the precomputed output targets of one subtask: (node, port, consumer, edge index).
type TargetKey = (NodeId, Port, NodeId, usize);

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
    /// When the attempt's subtasks first processed records.
    pub activity: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// The checkpoint or savepoint the attempt restored, if any.
    pub restored: Option<u64>,
}

/// Deploys `plan` in the current actix system and returns the job's handle;
/// the job's manager restarts it on failure as its restart strategy allows.
pub(crate) fn launch(plan: Plan, config: Config) -> Result<JobHandle> {
    config.validate()?;
    let mut config = config;
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
    if let Some(mode) = &config.deterministic {
        // One thread, no wall-clock timer: see `testing::chaos`.
        config.runtime.deterministic = true;
        config.runtime.buffer_timeout = std::time::Duration::ZERO;
        config.runtime.metrics_interval = std::time::Duration::ZERO;
        mode.install();
    }
    let config = Arc::new(config);
    let plan = Arc::new(plan);
    let injected = config.fault_injection.random_failures;
    let held = injected + u32::from(config.checkpoint.finish_after_checkpoints > 0);
    let shared = Shared {
        status: Arc::new(Mutex::new(JobStatus::Created)),
        metrics: Arc::new(JobMetrics::new(config.job_name.as_deref().unwrap_or("job"))),
        stats: Arc::new(Mutex::new(CheckpointStats::default())),
        hold: (held > 0).then(|| Arc::new(std::sync::atomic::AtomicU32::new(held))),
        kills: (injected > 0).then(|| Arc::new(std::sync::atomic::AtomicU32::new(injected))),
        failover: Arc::default(),
        checkpoint_ids: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        scratch_restarts: Arc::default(),
        events: Arc::default(),
        region_fence: Default::default(),
        fault_fired: (!config.fault_injection.faults.is_empty()).then(|| {
            Arc::new(
                config
                    .fault_injection
                    .faults
                    .iter()
                    .map(|_| std::sync::atomic::AtomicBool::new(false))
                    .collect(),
            )
        }),
    };
    let graph = plan.describe();
    let first = deploy_attempt(
        &plan,
        &config,
        &shared,
        config.restore_from.as_deref(),
        false,
    )?;
    let (done_tx, done_rx) = futures::channel::oneshot::channel();
    let control = Arc::new(super::job::JobControl::new(
        first.supervisor.clone(),
        first.coordinator.clone(),
        shared.failover.clone(),
        shared.events.clone(),
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
    actix::spawn(manager.run(first));
    Ok(handle)
}

/// Deploys one attempt of the job: every subtask, its supervisor and its
/// checkpoint coordinator, restoring from `restore_from` when given.
pub(crate) fn deploy_attempt(
    plan: &Arc<Plan>,
    config: &Arc<Config>,
    shared: &Shared,
    restore_from: Option<&std::path::Path>,
    restart: bool,
) -> Result<Attempt> {
    let (plan, config) = (plan.clone(), config.clone());
    let (status, metrics) = (shared.status.clone(), shared.metrics.clone());
    let (done_tx, done_rx) = futures::channel::oneshot::channel();
    // Deterministic execution: every actor on the current arbiter.
    let deterministic = config.deterministic.is_some();
    let new_arbiter = || (!deterministic).then(Arbiter::new);
    let arbiters: Vec<Arbiter> = (0..config.runtime.arbiters)
        .filter_map(|_| new_arbiter())
        .collect();
    let handle_of = |a: &Option<Arbiter>| a.as_ref().map_or_else(Arbiter::current, |a| a.handle());
    let activity: Arc<std::sync::OnceLock<std::time::Instant>> = Arc::default();
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
    let checkpoints = checkpoint_setup(
        &plan,
        &config,
        restore.as_ref().as_ref(),
        status.clone(),
        shared.stats.clone(),
        shared.checkpoint_ids.clone(),
        shared.region_fence.clone(),
    )?;
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
            } else {
                supervisor.on_own_arbiter()
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
        arbiters: match arbiters.is_empty() {
            true => vec![Arbiter::current()],
            false => arbiters.iter().map(|a| a.handle()).collect(),
        },
        activity: activity.clone(),
        scratch_restarts: shared.scratch_restarts.clone(),
    };
    // A restart with nothing to restore starts the job from the beginning.
    let from_scratch = (restart && restore.is_none()).then(|| spawner.next_scratch_restart());
    let spawned = spawner.spawn(None, &restore, from_scratch);
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
    let tasks = spawner.tasks(&spawned);
    let subtasks = tasks.len();
    coordinator.do_send(RegisterSubtasks {
        subtasks: tasks,
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
        activity,
        restored,
    })
}

/// Tells the job's subscribers that `loaded` was restored in place of newer,
/// damaged checkpoints (`load_latest` logged each one already).
fn report_fallback(events: &super::events::EventLog, loaded: &crate::checkpoint::LoadedSnapshot) {
    use super::events::{FallbackEvent, JobEvent, SkippedCheckpoint};
    if loaded.skipped.is_empty() {
        return;
    }
    events.emit(JobEvent::RestoreFellBack(FallbackEvent {
        restored_checkpoint: loaded.meta.id.0,
        skipped: loaded
            .skipped
            .iter()
            .map(|(id, e)| SkippedCheckpoint {
                checkpoint: id.0,
                reason: e.to_string(),
            })
            .collect(),
    }));
}

/// Everything needed to spawn subtasks of one attempt (all of them, or a
/// region's again).
#[derive(Clone)]
struct Spawner {
    plan: Arc<Plan>,
    config: Arc<Config>,
    metrics: Arc<JobMetrics>,
    link: CheckpointLink,
    supervisor: actix::Addr<JobSupervisor>,
    savepoint_request: Option<SavepointRequest>,
    hold: Option<Arc<std::sync::atomic::AtomicU32>>,
    fault_fired: Option<Arc<Vec<std::sync::atomic::AtomicBool>>>,
    arbiters: Vec<actix::ArbiterHandle>,
    activity: Arc<std::sync::OnceLock<std::time::Instant>>,
    scratch_restarts: Arc<std::sync::atomic::AtomicU64>,
}

impl Spawner {
    /// Numbers a restart from the beginning (1, 2, …).
    fn next_scratch_restart(&self) -> u64 {
        self.scratch_restarts
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1
    }

    /// Spawns the subtasks in `only` (every subtask when `None`), downstream
    /// first; a subset must be closed under the graph's edges (a region).
    /// `from_scratch`: a restart without a checkpoint (see
    /// [`RestoredState::from_scratch`](crate::operators::RestoredState)).
    fn spawn(
        &self,
        only: Option<&std::collections::HashSet<(usize, usize)>>,
        restore: &Arc<Option<RestorePlan>>,
        from_scratch: Option<u64>,
    ) -> HashMap<(usize, usize), Spawned> {
        let plan = &self.plan;
        let config = &self.config;
        let mut spawned: HashMap<(usize, usize), Spawned> = HashMap::new();
        for v in (0..plan.heads.len()).rev() {
            let head = plan.heads[v];
            let p = plan.nodes[head].parallelism;
            let name = plan.vertex_name(v);
            for j in 0..p {
                if only.is_some_and(|o| !o.contains(&(v, j))) {
                    continue;
                }
                // Output targets of every network edge leaving this vertex.
                let mut targets: HashMap<TargetKey, Box<dyn Any + Send>> = HashMap::new();
                for x in (0..plan.nodes.len()).filter(|&x| plan.vertex_of[x] == v) {
                    for &(port, c, k) in &plan.consumers[x] {
                        if plan.chained[c] {
                            continue;
                        }
                        let w = plan.vertex_of[c];
                        let edge = &plan.nodes[c].inputs[k];
                        let down_p = plan.nodes[c].parallelism;
                        let to: Vec<_> = connected(edge.partition.pattern, j, p, down_p)
                            .into_iter()
                            .map(|d| (&spawned[&(w, d)].addr, plan.channels[&(c, k, j, d)]))
                            .collect();
                        let ops = match port {
                            Port::Main => &plan.nodes[x].out_type,
                            Port::Side(tag) => side_ops(&plan.nodes[x], tag),
                        };
                        targets.insert((x, port, c, k), ops.targets(&to));
                    }
                }
                let setup = SubtaskSetup {
                    vertex: VertexId(v as u32),
                    name: name.clone(),
                    index: SubtaskIndex(j as u32),
                    inputs: plan.inputs_per_subtask[v][j],
                    config: config.runtime.clone(),
                    on_finished: self.supervisor.clone().recipient(),
                    on_failed: match &config.deterministic {
                        Some(mode) => mode.tap_failures(
                            v as u32,
                            j as u32,
                            self.supervisor.clone().recipient(),
                        ),
                        None => self.supervisor.clone().recipient(),
                    },
                    queue_metrics: self.metrics.queues(
                        VertexId(v as u32),
                        &name,
                        SubtaskIndex(j as u32),
                        plan.inputs_per_subtask[v][j],
                    ),
                    checkpoint: Some(self.link.clone()),
                    input_rate: (0..plan.nodes.len())
                        .filter(|&x| plan.vertex_of[x] == v)
                        .filter_map(|x| plan.nodes[x].input_rate)
                        .reduce(f64::min)
                        .map(|r| r / p as f64),
                    restore: restore.as_ref().as_ref().and_then(|r| r.runtime(v, j)),
                    activity: Some(self.activity.clone()),
                };
                // Partial only when some subtask of this vertex keeps
                // running: a region holding all of them (a keyed job's only
                // region) rolls back as a restart-all does.
                let partial = only.is_some_and(|o| (0..p).any(|i| !o.contains(&(v, i))));
                let build = {
                    let (plan, config, metrics) =
                        (plan.clone(), config.clone(), self.metrics.clone());
                    let restore = restore.clone();
                    let savepoint_request = self.savepoint_request.clone();
                    let hold = self.hold.clone();
                    let fault_fired = self.fault_fired.clone();
                    let queue_metrics = setup.queue_metrics.clone();
                    Box::new(move |builder: &mut ChainBuilder| {
                        let mut b = ChainBuild {
                            plan: &plan,
                            restore: restore.as_ref().as_ref(),
                            partial,
                            from_scratch,
                            fault_fired,
                            savepoint_request,
                            hold,
                            config: &config,
                            metrics: &metrics,
                            queue_metrics,
                            subtask: j,
                            targets,
                            builder,
                        };
                        b.head(head).map_err(to_runtime)
                    })
                };
                let slot = if config.runtime.spread_vertices {
                    v + j
                } else {
                    j
                };
                let arbiter = &self.arbiters[slot % self.arbiters.len()];
                let s = plan.nodes[head].in_type.spawn(arbiter, setup, build);
                spawned.insert((v, j), s);
            }
        }
        spawned
    }

    /// The coordinator's view of spawned subtasks.
    fn tasks(&self, spawned: &HashMap<(usize, usize), Spawned>) -> Vec<SubtaskInfo> {
        let plan = &self.plan;
        let mut keys: Vec<&(usize, usize)> = spawned.keys().collect();
        keys.sort();
        keys.into_iter()
            .map(|&(v, j)| {
                let head = plan.heads[v];
                let s = &spawned[&(v, j)];
                SubtaskInfo {
                    vertex: VertexId(v as u32),
                    subtask: SubtaskIndex(j as u32),
                    is_source: matches!(plan.nodes[head].kind, NodeKind::Source(_)),
                    head_uid: node_uid(head, &plan.nodes[head]),
                    parallelism: plan.nodes[head].parallelism as u32,
                    trigger: s.trigger.clone(),
                    notify: s.notify.clone(),
                }
            })
            .collect()
    }
}

/// Region failover of one attempt: the pipelined regions (connected
/// components of the execution graph) and how to redeploy one of them from
/// the latest completed checkpoint while the others run on.
struct Regions {
    spawner: Spawner,
    store: Option<Arc<CheckpointStore>>,
    coordinator: actix::Addr<CheckpointCoordinator>,
    fail: Arc<Mutex<HashMap<SubtaskKey, actix::Recipient<floe_actors::messages::InjectFailure>>>>,
    tracker: crate::failover::RestartTracker,
    failover: Arc<Mutex<super::manager::FailoverStats>>,
    events: Arc<super::events::EventLog>,
    /// The restart strategy's last delay, for the restart's event.
    last_delay_ms: u64,
    stats: Arc<Mutex<CheckpointStats>>,
    region_of: HashMap<(usize, usize), usize>,
    members: Vec<Vec<(usize, usize)>>,
    /// Told of each restart before it picks its checkpoint.
    region_fence: crate::checkpoint::coordinator::RegionFence,
}

impl Regions {
    fn new(
        spawner: Spawner,
        store: Option<Arc<CheckpointStore>>,
        coordinator: actix::Addr<CheckpointCoordinator>,
        fail: Arc<
            Mutex<HashMap<SubtaskKey, actix::Recipient<floe_actors::messages::InjectFailure>>>,
        >,
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
        if let (Some(mode), Some(members)) =
            (&self.spawner.config.deterministic, self.members.get(region))
        {
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
                let loaded =
                    crate::checkpoint::load_latest(store).map_err(|e| to_runtime(e.into()))?;
                report_fallback(&self.events, &loaded);
                Some(
                    RestorePlan::build(&loaded, plan, self.spawner.config.max_parallelism)
                        .map_err(to_runtime)?,
                )
            }
            _ => match &self.spawner.config.restore_from {
                Some(path) => {
                    let loaded =
                        crate::checkpoint::load_snapshot(path).map_err(|e| to_runtime(e.into()))?;
                    Some(
                        RestorePlan::build(&loaded, plan, self.spawner.config.max_parallelism)
                            .map_err(to_runtime)?,
                    )
                }
                None => None,
            },
        };
        let restored = restore.as_ref().map(|r| r.checkpoint_id);
        let restored_id = restored.unwrap_or(0);
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
        spawner.activity = Arc::default();
        let activity = spawner.activity.clone();
        let failover = self.failover.clone();
        let deterministic = self.spawner.config.deterministic.clone();
        if let Some(mode) = &deterministic {
            let mut subtasks: Vec<(u32, u32)> =
                members.iter().map(|&(v, j)| (v as u32, j as u32)).collect();
            subtasks.sort_unstable();
            mode.record(crate::testing::chaos::TraceEvent::Restarted {
                subtasks,
                checkpoint: restored_id,
            });
        }
        actix::spawn(async move {
            // Not in deterministic execution: it wakes on the wall clock.
            let (Some(failed_at), None) = (failed_at, deterministic) else {
                return;
            };
            for _ in 0..60_000 {
                if let Some(t) = activity.get() {
                    let ms = t.saturating_duration_since(failed_at).as_millis() as u64;
                    if let Ok(mut f) = failover.lock() {
                        f.max_recovery_ms = f.max_recovery_ms.max(ms);
                    }
                    return;
                }
                actix_rt::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        let from_scratch = restore.is_none().then(|| spawner.next_scratch_restart());
        let spawned = spawner.spawn(Some(&members), &Arc::new(restore), from_scratch);
        let tasks = self.spawner.tasks(&spawned);
        self.coordinator
            .do_send(crate::checkpoint::coordinator::ReplaceSubtasks { subtasks: tasks });
        if let Ok(mut f) = self.fail.lock() {
            for (&(v, j), s) in &spawned {
                f.insert((VertexId(v as u32), SubtaskIndex(j as u32)), s.fail.clone());
            }
        }
        let attempt = match self.failover.lock() {
            Ok(mut f) => {
                f.restarts += 1;
                f.restarted_subtasks += members.len() as u64;
                f.restored_checkpoints.push(restored_id);
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
        self.events.emit(super::events::JobEvent::Restarted(
            super::events::RestartEvent {
                attempt,
                cause,
                restored_checkpoint: restored,
                subtasks: members.len() as u64,
                delay_ms: self.last_delay_ms,
            },
        ));
        self.spawner
            .metrics
            .record_restart(members.len() as u64, restored_id);
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

/// The coordinator's settings: the store (the configured directory, or a
/// temporary one when checkpoints are on without a directory) and the next id.
fn checkpoint_setup(
    plan: &Plan,
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
    let restored = restore.map(|r| r.checkpoint_id).unwrap_or(0);
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
        deterministic: config.deterministic.clone(),
        region_fence,
    })
}

fn to_runtime(e: Error) -> floe_actors::Error {
    match e {
        Error::Runtime(r) => r,
        other if other.is_retriable() => floe_actors::Error::Runtime(other.to_string()),
        other => floe_actors::Error::Runtime(other.to_string()).non_retriable(),
    }
}

fn side_ops(node: &Node, tag: u64) -> &Arc<dyn super::graph::TypeOps> {
    &node
        .side_types
        .iter()
        .find(|(t, _)| *t == tag)
        .expect("side output consumed through get_side_output has a type")
        .1
}

/// Builds one subtask's chain on its arbiter.
struct ChainBuild<'a> {
    plan: &'a Plan,
    restore: Option<&'a RestorePlan>,
    /// Only some subtasks restore (region failover).
    partial: bool,
    /// A restart from the beginning (no checkpoint to restore).
    from_scratch: Option<u64>,
    fault_fired: Option<Arc<Vec<std::sync::atomic::AtomicBool>>>,
    savepoint_request: Option<SavepointRequest>,
    hold: Option<Arc<std::sync::atomic::AtomicU32>>,
    config: &'a Arc<Config>,
    metrics: &'a Arc<JobMetrics>,
    queue_metrics: Arc<QueueMetrics>,
    subtask: usize,
    targets: HashMap<TargetKey, Box<dyn Any + Send>>,
    builder: &'a mut ChainBuilder,
}

impl ChainBuild<'_> {
    fn ctx(&self, id: NodeId) -> super::graph::NodeCtx {
        let node = &self.plan.nodes[id];
        let mut ctx = node_ctx(id, node, self.subtask, self.config, self.metrics);
        ctx.restored = self.restore.and_then(|r| r.operator(id, self.subtask));
        if let Some(r) = ctx.restored.as_mut() {
            r.partial = self.partial;
        }
        // A transactional sink whose every subtask restarts from the
        // beginning drops what earlier attempts committed; with some of its
        // subtasks still running (a region), their output stays.
        if let (None, Some(n), false, true) = (
            &ctx.restored,
            self.from_scratch,
            self.partial,
            node.transactional,
        ) {
            ctx.restored = Some(crate::operators::RestoredState {
                from_scratch: Some(n),
                ..Default::default()
            });
        }
        ctx.hold = self.hold.clone();
        ctx.fault_fired = self.fault_fired.clone();
        if let (Some(n), Some(request)) = (
            self.config.checkpoint.savepoint_at_records,
            self.savepoint_request.as_ref(),
        ) && matches!(node.kind, NodeKind::Source(_))
        {
            let (start, end) = ctx.source_context().split(n);
            let request = request.clone();
            let (v, j) = (
                VertexId(self.plan.vertex_of[id] as u32),
                SubtaskIndex(self.subtask as u32),
            );
            ctx.savepoint_pause = Some((end - start, Arc::new(move || request(v, j))));
        }
        ctx
    }

    fn head(&mut self, head: NodeId) -> Result<ErasedHead> {
        let node = &self.plan.nodes[head];
        let ctx = self.ctx(head);
        let main = self.output(head, Port::Main)?;
        match &node.kind {
            NodeKind::Source(build) => Ok(ErasedHead::Source(build(&ctx, main)?)),
            NodeKind::Operator(_) => Ok(ErasedHead::Inputs(self.operator(head, main)?)),
        }
    }

    fn node(&mut self, id: NodeId) -> Result<ErasedChain> {
        let main = self.output(id, Port::Main)?;
        self.operator(id, main)
    }

    fn operator(&mut self, id: NodeId, main: ErasedChain) -> Result<ErasedChain> {
        let node = &self.plan.nodes[id];
        let mut sides = Vec::new();
        for (tag, ops) in &node.side_types {
            let next = self.output(id, Port::Side(*tag))?;
            sides.push(ops.side_port(*tag, next));
        }
        let ctx = self.ctx(id);
        match &node.kind {
            NodeKind::Operator(build) => build(&ctx, main, sides),
            NodeKind::Source(_) => Err(Error::Config(format!(
                "source '{}' cannot be chained after another operator",
                node.name
            ))),
        }
    }

    fn output(&mut self, id: NodeId, port: Port) -> Result<ErasedChain> {
        let node = &self.plan.nodes[id];
        let ops = match port {
            Port::Main => node.out_type.clone(),
            Port::Side(tag) => side_ops(node, tag).clone(),
        };
        let mut outs = Vec::new();
        for &(p, c, k) in &self.plan.consumers[id] {
            if p != port {
                continue;
            }
            if self.plan.chained[c] {
                outs.push(self.node(c)?);
            } else {
                let targets = self
                    .targets
                    .remove(&(id, port, c, k))
                    .expect("targets precomputed for every network edge");
                let edge = &self.plan.nodes[c].inputs[k];
                let partitioner = (edge.partition.make)(self.subtask, self.config.seed);
                // The consumer's type operations know how to encode the
                // records when the producer's do not (same type).
                let consumer = &self.plan.nodes[c].in_type;
                let ops = if !ops.has_codec() && consumer.has_codec() {
                    consumer
                } else {
                    &ops
                };
                outs.push(ops.writer(
                    targets,
                    partitioner,
                    self.config,
                    self.queue_metrics.clone(),
                    self.builder,
                ));
            }
        }
        Ok(ops.fanout(outs))
    }
}
