//! The job's plan: pure decisions on the shape of the stream graph.
//!
//! Given each operator's name, parallelism, chaining flags and input edges
//! (a [`NodeShape`], no closures, no record types), [`Plan::new`]:
//!
//! 1. **Validates** the graph: at least one operator, no parallelism 0, a
//!    keyed edge never above the max parallelism, an explicit forward edge
//!    only between equal parallelisms, edges only to later operators (no
//!    cycle). A default forward edge between different parallelisms becomes
//!    a rebalance (as Flink does).
//! 2. **Chains** an operator into its input's chain when it has exactly one
//!    input, that edge is a default (forward) edge, both sides have the same
//!    parallelism and chain, and it does not suspend mid-record behind a
//!    source. Otherwise it heads a new vertex.
//! 3. **Numbers channels**: every (edge, upstream subtask, downstream
//!    subtask) pair the edge's pattern connects is a channel, numbered per
//!    receiving subtask.
//! 4. **Finds pipelined regions** ([`Plan::regions`]): the connected
//!    components of the execution graph, restarted alone by region failover.
//!
//! Nothing here spawns, opens or allocates per record; the runtime
//! (`crate::runtime`) deploys a plan and checkpoint restore
//! (`crate::checkpoint::restore`) maps state onto it.

use floe_actors::ids::ChannelId;
use floe_actors::partitioner::{PartitionKind, connected};
use std::collections::HashMap;

#[cfg(test)]
mod tests;

/// An operator's index in the stream graph (its insertion order, which is a
/// topological order: inputs come first).
pub(crate) type NodeId = usize;

/// Which output of a node an edge reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Port {
    /// The main output.
    Main,
    /// The side output of the tag with this id.
    Side(u64),
}

/// An input edge, as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EdgeShape {
    /// The producing operator.
    pub from: NodeId,
    /// Which of its outputs.
    pub port: Port,
    /// How records are distributed.
    pub kind: PartitionKind,
    /// Set by the user (rebalance, key_by, ...); a default edge may chain.
    pub explicit: bool,
    /// A default edge that can fall back to round robin when the two sides
    /// differ in parallelism.
    pub can_rebalance: bool,
}

/// An operator, as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeShape {
    pub name: String,
    /// The uid the user set with `.uid(..)`.
    pub uid: Option<String>,
    pub parallelism: usize,
    /// False once `disable_chaining` was called on this operator.
    pub chainable: bool,
    /// Never chained into its input's chain (a throttled operator), though
    /// the operators after it may chain into its own.
    pub head: bool,
    /// May suspend in the middle of a record under backpressure
    /// (`flat_map`): never chained into a source's chain, whose position is
    /// taken between steps.
    pub suspends: bool,
    /// A source (no inputs; a chain head).
    pub source: bool,
    /// A two-phase-commit sink.
    pub transactional: bool,
    pub inputs: Vec<EdgeShape>,
}

impl NodeShape {
    /// The uid of node `id`: the user's, or one derived from its position and
    /// name (stable as long as the job graph is built the same way).
    pub fn uid(&self, id: NodeId) -> String {
        operator_uid(id, self.uid.as_deref(), &self.name)
    }
}

/// The uid checkpoints match operator `id`'s state by: the user's `uid`, or
/// one derived from its position and `name`.
pub(crate) fn operator_uid(id: NodeId, uid: Option<&str>, name: &str) -> String {
    match uid {
        Some(u) => u.to_string(),
        None => format!("{id}:{name}"),
    }
}

/// The job settings a plan depends on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanOptions {
    /// Fuse operators into chains (`Config::chaining`).
    pub chaining: bool,
    /// Number of key groups (`Config::max_parallelism`).
    pub max_parallelism: u32,
}

/// Why a stream graph cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The graph has no operator.
    #[error("the job has no operators")]
    Empty,
    /// An operator has parallelism 0.
    #[error("operator '{operator}' has parallelism 0; it must be at least 1")]
    ZeroParallelism {
        /// The operator's name.
        operator: String,
    },
    /// A keyed operator has more subtasks than there are key groups.
    #[error(
        "keyed operator '{operator}' has parallelism {parallelism} above the max parallelism {max}"
    )]
    KeyedAboveMax {
        /// The operator's name.
        operator: String,
        /// Its parallelism.
        parallelism: usize,
        /// The job's max parallelism.
        max: u32,
    },
    /// An operator has more subtasks than the job has key groups (the max
    /// parallelism bounds every operator, as in Flink).
    #[error("operator '{operator}' has parallelism {parallelism} above the max parallelism {max}")]
    AboveMax {
        /// The operator's name.
        operator: String,
        /// Its parallelism.
        parallelism: usize,
        /// The job's max parallelism.
        max: u32,
    },
    /// An explicit forward edge joins different parallelisms.
    #[error("forward edge into '{operator}' needs equal parallelism ({up} vs {down})")]
    ForwardMismatch {
        /// The consuming operator's name.
        operator: String,
        /// The producer's parallelism.
        up: usize,
        /// The consumer's parallelism.
        down: usize,
    },
    /// A pointwise edge between different parallelisms has no fallback.
    #[error("edge into '{operator}' cannot be rebalanced")]
    CannotRebalance {
        /// The consuming operator's name.
        operator: String,
    },
    /// An edge reads from the operator itself or a later one.
    #[error("the stream graph has a cycle")]
    Cycle,
}

/// A consumer of a node's output: (port, consuming node, index of the edge
/// in its inputs).
pub(crate) type Consumer = (Port, NodeId, usize);

/// Regions of an execution graph: the region of each `(vertex, subtask)`
/// and the members of each region.
pub(crate) type Regioning = (HashMap<(usize, usize), usize>, Vec<Vec<(usize, usize)>>);

/// A validated, chained stream graph with its channels.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The operators, with default edges between different parallelisms
    /// resolved to [`PartitionKind::Rebalance`].
    pub nodes: Vec<NodeShape>,
    pub consumers: Vec<Vec<Consumer>>,
    /// Whether each node is chained into its input's vertex.
    pub chained: Vec<bool>,
    pub vertex_of: Vec<usize>,
    /// Head node of each vertex, in topological order.
    pub heads: Vec<NodeId>,
    /// Channel ids: (consumer node, edge index, upstream subtask, downstream subtask).
    pub channels: HashMap<(NodeId, usize, usize, usize), ChannelId>,
    /// Input channels of each subtask of each vertex.
    pub inputs_per_subtask: Vec<Vec<usize>>,
}

impl Plan {
    /// Validates and chains `nodes` and numbers their channels.
    pub fn new(mut nodes: Vec<NodeShape>, options: PlanOptions) -> Result<Plan, PlanError> {
        if nodes.is_empty() {
            return Err(PlanError::Empty);
        }
        let n = nodes.len();
        for id in 0..n {
            let p = nodes[id].parallelism;
            if p == 0 {
                return Err(PlanError::ZeroParallelism {
                    operator: nodes[id].name.clone(),
                });
            }
            let keyed = nodes[id]
                .inputs
                .iter()
                .any(|e| e.kind == PartitionKind::Hash);
            if !keyed && p > options.max_parallelism as usize {
                return Err(PlanError::AboveMax {
                    operator: nodes[id].name.clone(),
                    parallelism: p,
                    max: options.max_parallelism,
                });
            }
            for k in 0..nodes[id].inputs.len() {
                let e = &nodes[id].inputs[k];
                if e.from >= id {
                    return Err(PlanError::Cycle);
                }
                if e.kind == PartitionKind::Hash && p > options.max_parallelism as usize {
                    return Err(PlanError::KeyedAboveMax {
                        operator: nodes[id].name.clone(),
                        parallelism: p,
                        max: options.max_parallelism,
                    });
                }
                let up = nodes[e.from].parallelism;
                if e.kind == PartitionKind::Forward && up != p {
                    if e.explicit {
                        return Err(PlanError::ForwardMismatch {
                            operator: nodes[id].name.clone(),
                            up,
                            down: p,
                        });
                    }
                    if !e.can_rebalance {
                        return Err(PlanError::CannotRebalance {
                            operator: nodes[id].name.clone(),
                        });
                    }
                    let e = &mut nodes[id].inputs[k];
                    e.kind = PartitionKind::Rebalance;
                    e.explicit = true;
                    e.can_rebalance = false;
                }
            }
        }
        let mut consumers: Vec<Vec<Consumer>> = vec![Vec::new(); n];
        for (id, node) in nodes.iter().enumerate() {
            for (k, e) in node.inputs.iter().enumerate() {
                consumers[e.from].push((e.port, id, k));
            }
        }
        let mut chained = vec![false; n];
        let mut vertex_of = vec![0; n];
        let mut heads: Vec<usize> = Vec::new();
        for id in 0..n {
            let node = &nodes[id];
            let chain = options.chaining
                && node.inputs.len() == 1
                && !node.inputs[0].explicit
                && node.chainable
                && !node.head
                && nodes[node.inputs[0].from].chainable
                && nodes[node.inputs[0].from].parallelism == node.parallelism
                && !(node.suspends && nodes[heads[vertex_of[node.inputs[0].from]]].source);
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
                    partition = e.kind.name(),
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
                    for j in connected(e.kind.pattern(), i, up_p, p) {
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

    /// The operators of vertex `v`, in graph order.
    pub fn vertex_members(&self, v: usize) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).filter(move |&id| self.vertex_of[id] == v)
    }

    /// Chain names, for logs: "source -> map -> sum".
    pub fn vertex_name(&self, v: usize) -> String {
        let names: Vec<&str> = self
            .vertex_members(v)
            .map(|id| self.nodes[id].name.as_str())
            .collect();
        names.join(" -> ")
    }

    /// The uid of node `id` (see [`NodeShape::uid`]).
    pub fn uid(&self, id: NodeId) -> String {
        self.nodes[id].uid(id)
    }
}
