//! The job graph: the stream graph's operators with the plan made of them
//! ([`crate::plan`]: vertices, channels, pipelined regions), what the
//! runtime deploys on every attempt, and its description for status
//! snapshots.

use super::graph::{Node, Partition};
use super::status::{EdgeInfo, JobGraphInfo, OperatorInfo, RegionInfo, VertexInfo};
use crate::config::Config;
use crate::plan::{Plan, PlanError, PlanOptions};
use crate::{Error, Result};

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
                edge.partition = Partition {
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
    pub fn describe(&self) -> JobGraphInfo {
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
