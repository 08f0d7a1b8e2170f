//! Spawning subtasks: the output targets of each subtask, its setup, and
//! the chain it builds on its arbiter (`ChainBuild`), for a whole attempt or
//! one region again.

use super::graph::{
    ErasedChain, ErasedHead, Node, NodeCtx, NodeId, NodeKind, Port, Spawned, TypeOps, node_ctx,
    node_uid,
};
use super::instrumentation::Instrumentation;
use super::job_graph::Job;
use crate::checkpoint::restore::RestorePlan;
use crate::config::Config;
use crate::{Error, Result};
use floe_actors::checkpoint::messages::SubtaskInfo;
use floe_actors::ids::{SubtaskIndex, VertexId};
use floe_actors::metrics::{JobMetrics, QueueMetrics};
use floe_actors::partitioner::connected;
use floe_actors::snapshot::CheckpointLink;
use floe_actors::subtask::{ChainBuilder, SubtaskSetup};
use floe_actors::supervisor::JobSupervisor;
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// Key of the precomputed output targets of one subtask: (node, port, consumer, edge index).
type TargetKey = (NodeId, Port, NodeId, usize);

/// Everything needed to spawn subtasks of one attempt (all of them, or a
/// region's again).
#[derive(Clone)]
pub(super) struct Spawner {
    pub(super) plan: Arc<Job>,
    pub(super) config: Arc<Config>,
    pub(super) metrics: Arc<JobMetrics>,
    pub(super) link: CheckpointLink,
    pub(super) supervisor: actix::Addr<JobSupervisor>,
    /// The job's test instrumentation, with this attempt's savepoint
    /// request.
    pub(super) instrumentation: Instrumentation,
    pub(super) arbiters: Vec<actix::ArbiterHandle>,
    /// Shared by the subtasks spawned: when records first flowed.
    pub(super) activity: Arc<floe_actors::subtask::FirstActivity>,
    pub(super) scratch_restarts: Arc<std::sync::atomic::AtomicU64>,
}

impl Spawner {
    /// Numbers a restart from the beginning (1, 2, …).
    pub(super) fn next_scratch_restart(&self) -> u64 {
        self.scratch_restarts
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1
    }

    /// Spawns the subtasks in `only` (every subtask when `None`), downstream
    /// first; a subset must be closed under the graph's edges (a region).
    /// `from_scratch`: a restart without a checkpoint (see
    /// [`RestoredState::from_scratch`](crate::operators::RestoredState)).
    pub(super) fn spawn(
        &self,
        only: Option<&std::collections::HashSet<(usize, usize)>>,
        restore: &Arc<Option<RestorePlan>>,
        from_scratch: Option<u64>,
    ) -> Result<HashMap<(usize, usize), Spawned>> {
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
                        let to: Vec<_> = connected(edge.partition.kind.pattern(), j, p, down_p)
                            .into_iter()
                            .map(|d| {
                                (
                                    &spawned[&(w, d)].addr,
                                    plan.channels[&(c, k, j, d)],
                                    plan.inputs_per_subtask[w][d],
                                )
                            })
                            .collect();
                        let ops = match port {
                            Port::Main => &plan.nodes[x].out_type,
                            Port::Side(tag) => side_ops(&plan.nodes[x], tag)?,
                        };
                        targets.insert((x, port, c, k), ops.targets(&to)?);
                    }
                }
                let setup = SubtaskSetup {
                    vertex: VertexId(v as u32),
                    name: name.clone(),
                    index: SubtaskIndex(j as u32),
                    inputs: plan.inputs_per_subtask[v][j],
                    config: config.runtime.clone(),
                    on_finished: self.supervisor.clone().recipient(),
                    on_failed: match config.deterministic() {
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
                    let instrumentation = self.instrumentation.clone();
                    let queue_metrics = setup.queue_metrics.clone();
                    Box::new(move |builder: &mut ChainBuilder| {
                        let mut b = ChainBuild {
                            plan: &plan,
                            restore: restore.as_ref().as_ref(),
                            partial,
                            from_scratch,
                            instrumentation,
                            config: &config,
                            metrics: &metrics,
                            queue_metrics,
                            subtask: j,
                            targets,
                            builder,
                        };
                        b.head(head).map_err(Error::into_runtime)
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
        Ok(spawned)
    }

    /// The coordinator's view of spawned subtasks.
    pub(super) fn subtasks(&self, spawned: &HashMap<(usize, usize), Spawned>) -> Vec<SubtaskInfo> {
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

/// The type operations of `node`'s side output `tag`.
fn side_ops(node: &Node, tag: u64) -> Result<&Arc<dyn TypeOps>> {
    node.side_types
        .iter()
        .find(|(t, _)| *t == tag)
        .map(|s| &s.1)
        .ok_or_else(|| {
            Error::Internal(format!(
                "side output {tag} of '{}' is consumed but has no type",
                node.name
            ))
        })
}

/// Builds one subtask's chain on its arbiter.
struct ChainBuild<'a> {
    plan: &'a Job,
    restore: Option<&'a RestorePlan>,
    /// Only some subtasks restore (region failover).
    partial: bool,
    /// A restart from the beginning (no checkpoint to restore).
    from_scratch: Option<u64>,
    instrumentation: Instrumentation,
    config: &'a Arc<Config>,
    metrics: &'a Arc<JobMetrics>,
    queue_metrics: Arc<QueueMetrics>,
    subtask: usize,
    targets: HashMap<TargetKey, Box<dyn Any + Send>>,
    builder: &'a mut ChainBuilder,
}

impl ChainBuild<'_> {
    fn ctx(&self, id: NodeId) -> NodeCtx {
        let node = &self.plan.nodes[id];
        let vertex = self.plan.vertex_of[id];
        let mut ctx = node_ctx(id, node, vertex, self.subtask, self.config, self.metrics);
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
        ctx.instrumentation = self.instrumentation.clone();
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
            sides.push(ops.side_port(*tag, next)?);
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
            Port::Side(tag) => side_ops(node, tag)?.clone(),
        };
        let mut outs = Vec::new();
        for &(p, c, k) in &self.plan.consumers[id] {
            if p != port {
                continue;
            }
            if self.plan.chained[c] {
                outs.push(self.node(c)?);
            } else {
                let targets = self.targets.remove(&(id, port, c, k)).ok_or_else(|| {
                    Error::Internal(format!(
                        "no output targets for the edge from '{}' to '{}'",
                        node.name, self.plan.nodes[c].name
                    ))
                })?;
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
                )?);
            }
        }
        ops.fanout(outs)
    }
}
