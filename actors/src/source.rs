//! The source side of a subtask: a driver that pulls records from a source
//! function and pushes them, a batch per call, into the source's chain.

use crate::error::Result;
use std::time::Duration;

/// What one call of a source driver did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceStep {
    /// Emitted a batch; more may follow at once.
    Emitted,
    /// Nothing to emit now; call again after this long (rate limit, no data).
    Wait(Duration),
    /// Exhausted: the driver already sent the final watermark and end-of-input
    /// into its chain.
    Finished,
}

/// Runs a source and its chain inside a subtask actor.
pub trait SourceDriver: 'static {
    /// Emits at most one batch into the chain.
    fn step(&mut self) -> Result<SourceStep>;
}
