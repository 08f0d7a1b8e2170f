//! The push interface of an operator chain.
//!
//! A chain is a tree of operators fused into one subtask: each operator pushes
//! whole batches into the next through `ChainInput`, so a chained hop is one
//! virtual call per batch and no mailbox. The leaves are record writers (network
//! channels) or sinks. Watermarks and end-of-input travel the same path.

use crate::element::{Barrier, Batch, Timestamp, WatermarkStatus};
use crate::error::Result;
use crate::ids::CheckpointId;
use crate::snapshot::ChainSnapshot;

/// Something that accepts the elements of a stream of `T`: an operator, a
/// fan-out, or a record writer.
pub trait ChainInput<T>: 'static {
    /// Processes one batch of records.
    fn process(&mut self, batch: Batch<T>) -> Result<()>;
    /// Event time advanced to `watermark`.
    fn watermark(&mut self, watermark: Timestamp) -> Result<()>;
    /// The input is complete: flush and forward end-of-input.
    fn end_of_input(&mut self) -> Result<()>;

    /// The stream became idle or active again (it does not hold back
    /// watermarks while idle). Elements that forward must override this.
    fn watermark_status(&mut self, _status: WatermarkStatus) -> Result<()> {
        Ok(())
    }

    /// A processing-time tick (ms since the epoch): periodic watermarks,
    /// idleness and processing-time timers advance here even without records.
    fn processing_time(&mut self, _now_ms: Timestamp) -> Result<()> {
        Ok(())
    }

    /// Whether an element of the chain holds output of an input it already
    /// took that it has not emitted yet (a flat_map suspended in the middle
    /// of a record whose outputs would not fit the output queues). The
    /// subtask then [`resume`](Self::resume)s it, while its outputs have
    /// room, before it takes any new input element (records, watermarks,
    /// barriers), so elements keep their order and a snapshot never cuts
    /// through a record; the exceptions are a batch of records or a
    /// watermark the chain admits while pending
    /// ([`admits_while_pending`](Self::admits_while_pending),
    /// [`admits_watermark_while_pending`](Self::admits_watermark_while_pending)).
    /// Elements that forward must override this.
    fn has_pending(&self) -> bool {
        false
    }
    /// Emits a bounded part of the pending output (see
    /// [`has_pending`](Self::has_pending)), the element furthest down the
    /// chain first. Elements that forward must override this.
    fn resume(&mut self) -> Result<()> {
        Ok(())
    }
    /// Whether, while it [has pending](Self::has_pending) output, the chain
    /// may take `batch` between its `resume`s, ahead of that output: only
    /// when its head alone holds the pending output and says the batch
    /// emits nothing and changes none of it (a window firing a part at a
    /// time; see the operators' `admits_while_pending`). Default: no.
    fn admits_while_pending(&self, _batch: &Batch<T>) -> bool {
        false
    }
    /// Whether, while it [has pending](Self::has_pending) output, the chain
    /// may take a watermark between its `resume`s: its head alone holds
    /// the pending output and goes on with it under the new watermark,
    /// forwarding only the newest after its last part. Default: no.
    fn admits_watermark_while_pending(&self) -> bool {
        false
    }
    /// Checkpoint `barrier`: capture this element's state into `out`, pass the
    /// call on, and (record writers) emit the barrier on every channel before
    /// any later record; `unaligned` lets it overtake queued output, which is
    /// then captured as output channel state. No default: an element that
    /// forgot to forward it would drop the barrier for everything after it.
    fn checkpoint(
        &mut self,
        barrier: Barrier,
        unaligned: bool,
        out: &mut ChainSnapshot,
    ) -> Result<()>;

    /// Restore: event time had reached `watermark` before the checkpoint.
    /// Operators take it as their current watermark without firing anything
    /// (what it fired then is in the restored output already). Elements that
    /// forward must override this.
    fn restore_watermark(&mut self, _watermark: Timestamp) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint` completed (`completed`) or was aborted. No
    /// default: an element that forgot to forward it would keep the
    /// two-phase-commit sinks after it from committing.
    fn notify_checkpoint(&mut self, checkpoint: CheckpointId, completed: bool) -> Result<()>;
}

impl<T: 'static> ChainInput<T> for Box<dyn ChainInput<T>> {
    #[inline]
    fn process(&mut self, batch: Batch<T>) -> Result<()> {
        (**self).process(batch)
    }
    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        (**self).watermark(watermark)
    }
    fn end_of_input(&mut self) -> Result<()> {
        (**self).end_of_input()
    }
    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
        (**self).watermark_status(status)
    }
    fn processing_time(&mut self, now_ms: Timestamp) -> Result<()> {
        (**self).processing_time(now_ms)
    }
    fn checkpoint(
        &mut self,
        barrier: Barrier,
        unaligned: bool,
        out: &mut ChainSnapshot,
    ) -> Result<()> {
        (**self).checkpoint(barrier, unaligned, out)
    }
    fn notify_checkpoint(&mut self, checkpoint: CheckpointId, completed: bool) -> Result<()> {
        (**self).notify_checkpoint(checkpoint, completed)
    }
    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        (**self).restore_watermark(watermark)
    }
    #[inline]
    fn has_pending(&self) -> bool {
        (**self).has_pending()
    }
    fn resume(&mut self) -> Result<()> {
        (**self).resume()
    }
    #[inline]
    fn admits_while_pending(&self, batch: &Batch<T>) -> bool {
        (**self).admits_while_pending(batch)
    }
    fn admits_watermark_while_pending(&self) -> bool {
        (**self).admits_watermark_while_pending()
    }
}

/// Sends every element to several consumers: clones for all but the last, which
/// gets the original.
pub struct Fanout<T> {
    outputs: Vec<Box<dyn ChainInput<T>>>,
}

impl<T> Fanout<T> {
    /// A fan-out over `outputs` (at least one).
    pub fn new(outputs: Vec<Box<dyn ChainInput<T>>>) -> Self {
        Fanout { outputs }
    }
}

impl<T: Clone + 'static> ChainInput<T> for Fanout<T> {
    fn process(&mut self, batch: Batch<T>) -> Result<()> {
        if let Some((last, rest)) = self.outputs.split_last_mut() {
            for out in rest {
                out.process(batch.clone())?;
            }
            last.process(batch)?;
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.watermark(watermark))
    }

    fn end_of_input(&mut self) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.end_of_input())
    }
    fn has_pending(&self) -> bool {
        self.outputs.iter().any(|o| o.has_pending())
    }
    fn resume(&mut self) -> Result<()> {
        match self.outputs.iter_mut().find(|o| o.has_pending()) {
            Some(o) => o.resume(),
            None => Ok(()),
        }
    }

    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.watermark_status(status))
    }

    fn processing_time(&mut self, now_ms: Timestamp) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.processing_time(now_ms))
    }

    fn checkpoint(
        &mut self,
        barrier: Barrier,
        unaligned: bool,
        out: &mut ChainSnapshot,
    ) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.checkpoint(barrier, unaligned, out))
    }

    fn notify_checkpoint(&mut self, checkpoint: CheckpointId, completed: bool) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.notify_checkpoint(checkpoint, completed))
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.restore_watermark(watermark))
    }
}

/// Discards everything (an operator output nobody consumes).
pub struct Discard;

impl<T: 'static> ChainInput<T> for Discard {
    fn process(&mut self, _: Batch<T>) -> Result<()> {
        Ok(())
    }
    fn watermark(&mut self, _: Timestamp) -> Result<()> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<()> {
        Ok(())
    }
    // Nothing follows a discard: no state to capture, no barrier to pass on.
    fn checkpoint(&mut self, _: Barrier, _: bool, _: &mut ChainSnapshot) -> Result<()> {
        Ok(())
    }
    fn notify_checkpoint(&mut self, _: CheckpointId, _: bool) -> Result<()> {
        Ok(())
    }
}
