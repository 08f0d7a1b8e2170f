//! The runtime: deploys a job's plan and keeps it running.
//!
//! - `graph`: the stream graph's operators, erased to closures that build
//!   each operator, fan out its output and spawn its subtask actor.
//! - `job_graph`: those operators with the plan made of them (vertices,
//!   channels, pipelined regions): what every attempt deploys.
//! - `shared`: what every attempt of a job shares (status, metrics,
//!   checkpoint counters, events, its test instrumentation, its pool).
//! - `instrumentation`: a job's test instrumentation as one value (planned
//!   faults, random kills, holds on the sources, the savepoint pause).
//! - `spawn`: the subtasks of an attempt or of one region, and the chain
//!   each builds on its arbiter.
//! - `region`: region failover's redeployment of one pipelined region.
//! - `deploy`: one attempt of a job: its arbiters, checkpoint coordinator,
//!   supervisor and subtasks.
//! - `manager`: the launch of a job and the restart loop over its attempts
//!   (restart strategy, restore of the latest completed checkpoint,
//!   injected failures).
//! - `pool`: arbiter threads that several jobs share.
//! - `job`, `events`, `status`: what a running job hands its program: the
//!   [`JobHandle`] and its control, the job's events and its status
//!   snapshot. `floe::api` re-exports them (the paths users name).
//!
//! Direction of dependencies: `api` -> `runtime` -> {`checkpoint`,
//! `failover`} -> `plan`. Inside the runtime, `manager` -> `deploy` ->
//! `region` -> `spawn` -> `job_graph` -> `graph` -> `instrumentation`, with
//! `shared`, `job`, `events`, `status` and `pool` below them; no two files
//! use each other.
//! `tests/module_layering.rs` checks both.

mod deploy;
pub(crate) mod events;
pub(crate) mod graph;
mod instrumentation;
pub(crate) mod job;
pub(crate) mod job_graph;
pub(crate) mod manager;
mod pool;
mod region;
mod shared;
mod spawn;
pub mod status;

pub use pool::ArbiterPool;

pub use events::{FallbackEvent, JobEvent, RestartEvent, SkippedCheckpoint};
pub use job::{JobEnd, JobHandle, JobResult};
pub use status::{FailoverStats, JobStatusSnapshot, StatusReporter};
