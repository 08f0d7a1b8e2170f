//! The runtime: deploys a job's plan and keeps it running.
//!
//! - `graph`: the stream graph's operators, erased to closures that build
//!   each operator, fan out its output and spawn its subtask actor.
//! - `deploy`: one attempt of a job: its arbiters, checkpoint coordinator,
//!   supervisor and subtasks (chains built on their arbiters), and region
//!   failover's redeployment of one pipelined region.
//! - `manager`: the restart loop over attempts (restart strategy, restore of
//!   the latest completed checkpoint, injected failures).
//!
//! Direction of dependencies: `api` -> `runtime` -> {`checkpoint`,
//! `failover`} -> `plan`; `tests/module_layering.rs` checks it.

pub(crate) mod deploy;
pub(crate) mod graph;
pub(crate) mod manager;
mod pool;
mod region;
mod spawn;

pub use pool::ArbiterPool;

pub use manager::FailoverStats;
