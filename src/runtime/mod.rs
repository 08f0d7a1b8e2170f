//! The runtime: deploys a job's plan and keeps it running.
//!
//! - `graph`: the stream graph's operators, erased to closures that build
//!   each operator, fan out its output and spawn its subtask actor.
//! - `deploy`: one attempt of a job: its arbiters, checkpoint coordinator,
//!   supervisor and subtasks (chains built on their arbiters), and region
//!   failover's redeployment of one pipelined region.
//! - `manager`: the restart loop over attempts (restart strategy, restore of
//!   the latest completed checkpoint, injected failures).
//! - `job`, `events`, `status`: what a running job hands its program: the
//!   [`JobHandle`] and its control, the job's events and its status
//!   snapshot. `floe::api` re-exports them (the paths users name).
//!
//! Direction of dependencies: `api` -> `runtime` -> {`checkpoint`,
//! `failover`} -> `plan`; `tests/module_layering.rs` checks it.

pub(crate) mod deploy;
pub(crate) mod events;
pub(crate) mod graph;
pub(crate) mod job;
pub(crate) mod manager;
mod pool;
mod region;
mod spawn;
pub mod status;

pub use pool::ArbiterPool;

pub use events::{FallbackEvent, JobEvent, RestartEvent, SkippedCheckpoint};
pub use job::{JobEnd, JobHandle, JobResult};
pub use manager::FailoverStats;
pub use status::{JobStatusSnapshot, StatusReporter};
