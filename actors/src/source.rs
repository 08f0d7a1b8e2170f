//! The source side of a subtask: a driver that pulls records from a source
//! function and pushes them, a batch per call, into the source's chain.

use crate::element::Barrier;
use crate::error::Result;
use crate::ids::CheckpointId;
use crate::snapshot::ChainSnapshot;
use std::time::Duration;

/// What one call of a source driver did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceStep {
    /// Emitted a batch; more may follow at once.
    Emitted,
    /// Nothing to emit now; call again after this long (rate limit, no data).
    Wait(Duration),
    /// Nothing to emit now, and the driver arranged to wake its subtask
    /// (a [`WakeSubtask`](crate::wake::WakeSubtask)) when there is: an
    /// async source whose future is pending.
    Parked,
    /// Exhausted: the driver already sent the final watermark and end-of-input
    /// into its chain.
    Finished,
}

/// Runs a source and its chain inside a subtask actor.
pub trait SourceDriver: 'static {
    /// Emits at most one batch into the chain.
    fn step(&mut self) -> Result<SourceStep>;

    /// Checkpoint `barrier`, between two steps: captures the source's
    /// position and its chain's state into `out`, then emits the barrier.
    fn checkpoint(&mut self, barrier: Barrier, out: &mut ChainSnapshot) -> Result<()>;

    /// Checkpoint `checkpoint` completed or was aborted.
    fn notify_checkpoint(&mut self, checkpoint: CheckpointId, completed: bool) -> Result<()>;
}
