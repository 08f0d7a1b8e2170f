//! What every attempt of a job shares: its status, metrics, checkpoint
//! counters and ids, restart counts, events and observers, its test
//! instrumentation, and the arbiter pool it runs on, if any.
//!
//! The manager (`manager.rs`) makes it once per job; each deployment
//! (`deploy.rs`) and region redeployment (`region.rs`) reads it. It depends
//! on no other file of the runtime but the ones defining its fields.

use super::events::EventLog;
use super::instrumentation::Instrumentation;
use super::pool::ArbiterPool;
use super::status::FailoverStats;
use crate::checkpoint::{CheckpointStats, CheckpointStorage};
use floe_actors::metrics::JobMetrics;
use floe_actors::supervisor::JobStatus;
use std::sync::{Arc, Mutex};

/// What every attempt of a job shares.
pub(crate) struct Shared {
    pub status: Arc<Mutex<JobStatus>>,
    pub metrics: Arc<JobMetrics>,
    pub stats: Arc<Mutex<CheckpointStats>>,
    /// Test instrumentation: faults, kills, holds on the sources.
    pub instrumentation: Instrumentation,
    /// Restart counts.
    pub failover: Arc<Mutex<FailoverStats>>,
    /// The next checkpoint id (ids are never reused across attempts).
    pub checkpoint_ids: Arc<std::sync::atomic::AtomicU64>,
    /// Restarts so far that started from the beginning (no checkpoint).
    pub scratch_restarts: Arc<std::sync::atomic::AtomicU64>,
    /// Restarts and restore fallbacks, for the job's subscribers.
    pub events: Arc<EventLog>,
    /// Region restarts begun, against which checkpoints complete.
    pub region_fence: crate::checkpoint::coordinator::RegionFence,
    /// The job's progress and the configured observers.
    pub observers: Arc<crate::failover::Observers>,
    /// The shared threads every attempt runs on, if any (else each attempt
    /// starts its own).
    pub pool: Option<ArbiterPool>,
    /// The checkpoint storage on object storage, opened once for every
    /// attempt: it holds the prefix's lease while the job runs.
    pub object_storage: Mutex<Option<Arc<dyn CheckpointStorage>>>,
}

impl Shared {
    /// The checkpoint storage at `dir` for an attempt: a local directory is
    /// opened by each attempt (its database lock follows the attempt);
    /// object storage once per job.
    pub fn checkpoint_storage(
        &self,
        dir: &std::path::Path,
    ) -> crate::Result<Arc<dyn CheckpointStorage>> {
        if !crate::checkpoint::is_object_url(dir) {
            return Ok(crate::checkpoint::open_storage(dir)?);
        }
        let mut open = self
            .object_storage
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(storage) = open.as_ref() {
            return Ok(storage.clone());
        }
        let storage = crate::checkpoint::open_storage(dir)?;
        *open = Some(storage.clone());
        Ok(storage)
    }
}
