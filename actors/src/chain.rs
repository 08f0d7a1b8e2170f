//! The push interface of an operator chain.
//!
//! A chain is a tree of operators fused into one subtask: each operator pushes
//! whole batches into the next through `ChainInput`, so a chained hop is one
//! virtual call per batch and no mailbox. The leaves are record writers (network
//! channels) or sinks. Watermarks, barriers, end-of-input and the other
//! control events travel the same path, as [`ChainEvent`]s handled by one
//! method: an element that does not act on an event passes it on.

use crate::element::{Barrier, Batch, Timestamp, WatermarkStatus};
use crate::error::Result;
use crate::ids::CheckpointId;
use crate::snapshot::ChainSnapshot;

/// An event down a chain: a batch of records, or a control event.
pub enum ChainEvent<'a, T> {
    /// A batch of records.
    Records(Batch<T>),
    /// Anything else, the same for every record type.
    Control(Control<'a>),
}

/// The events of a chain other than records.
pub enum Control<'a> {
    /// Event time advanced to this watermark.
    Watermark(Timestamp),
    /// The stream became idle or active again (it does not hold back
    /// watermarks while idle).
    Status(WatermarkStatus),
    /// A processing-time tick (ms since the epoch): periodic watermarks,
    /// idleness and processing-time timers advance here even without
    /// records.
    Tick(Timestamp),
    /// The input is complete: flush and pass end-of-input on.
    EndOfInput,
    /// Checkpoint `barrier`: capture this element's state into `snapshot`,
    /// pass the event on, and (record writers) emit the barrier on every
    /// channel before any later record; `unaligned` lets it overtake queued
    /// output, which is then captured as output channel state.
    Barrier {
        /// The barrier.
        barrier: Barrier,
        /// Whether it overtakes queued output.
        unaligned: bool,
        /// Where each element puts its capture.
        snapshot: &'a mut ChainSnapshot,
    },
    /// Checkpoint `checkpoint` completed (`completed`) or was aborted
    /// (two-phase-commit sinks commit on completion).
    Notify {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Completed (true) or aborted.
        completed: bool,
    },
    /// Restore: event time had reached this watermark before the
    /// checkpoint. Operators take it as their current watermark without
    /// firing anything (what it fired then is in the restored output
    /// already).
    RestoreWatermark(Timestamp),
}

impl Control<'_> {
    /// The same event, to pass on to one more consumer.
    pub fn reborrow(&mut self) -> Control<'_> {
        match self {
            Control::Watermark(w) => Control::Watermark(*w),
            Control::Status(s) => Control::Status(*s),
            Control::Tick(t) => Control::Tick(*t),
            Control::EndOfInput => Control::EndOfInput,
            Control::Barrier {
                barrier,
                unaligned,
                snapshot,
            } => Control::Barrier {
                barrier: *barrier,
                unaligned: *unaligned,
                snapshot,
            },
            Control::Notify {
                checkpoint,
                completed,
            } => Control::Notify {
                checkpoint: *checkpoint,
                completed: *completed,
            },
            Control::RestoreWatermark(w) => Control::RestoreWatermark(*w),
        }
    }
}

impl<'a, T> From<Control<'a>> for ChainEvent<'a, T> {
    fn from(c: Control<'a>) -> Self {
        ChainEvent::Control(c)
    }
}

/// The next input element a chain with pending output is asked about
/// ([`ChainInput::pending`]).
#[derive(Clone, Copy)]
pub enum Next<'a, T> {
    /// A batch of records.
    Records(&'a Batch<T>),
    /// A watermark.
    Watermark,
    /// Any other element (or none in particular).
    Other,
}

/// Whether a chain holds output of an input it already took that it has
/// not emitted yet, and whether the next element may go in ahead of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// Nothing pending.
    None,
    /// Output is pending; the element asked about may go in ahead of it
    /// (its head alone holds the output and says the element emits nothing
    /// and changes none of it: a window firing a part at a time).
    Admits,
    /// Output is pending: [`ChainInput::resume`] until it is out before
    /// the element goes in.
    Holds,
}

/// Something that accepts the elements of a stream of `T`: an operator, a
/// fan-out, or a record writer.
pub trait ChainInput<T>: 'static {
    /// Handles one event: a batch of records, or a control event, which an
    /// element passes on after acting on it (or at once). No default: an
    /// element decides for every event, so none is dropped by omission.
    fn handle(&mut self, event: ChainEvent<'_, T>) -> Result<()>;

    /// Whether an element of the chain holds output of an input it already
    /// took (a flat_map suspended in the middle of a record whose outputs
    /// would not fit the output queues, a window firing a part at a time),
    /// and whether `next` may go in ahead of it. The subtask
    /// [`resume`](Self::resume)s a chain that [`Pending::Holds`] before it
    /// takes `next`, so elements keep their order and a snapshot never cuts
    /// through a record. Default: nothing pending.
    fn pending(&self, _next: Next<'_, T>) -> Pending {
        Pending::None
    }

    /// Emits a bounded part of the pending output (see
    /// [`pending`](Self::pending)), the element furthest down the chain
    /// first. Default: nothing to do.
    fn resume(&mut self) -> Result<()> {
        Ok(())
    }
}

impl<T: 'static> ChainInput<T> for Box<dyn ChainInput<T>> {
    #[inline]
    fn handle(&mut self, event: ChainEvent<'_, T>) -> Result<()> {
        (**self).handle(event)
    }
    #[inline]
    fn pending(&self, next: Next<'_, T>) -> Pending {
        (**self).pending(next)
    }
    fn resume(&mut self) -> Result<()> {
        (**self).resume()
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
    fn handle(&mut self, event: ChainEvent<'_, T>) -> Result<()> {
        match event {
            ChainEvent::Records(batch) => {
                if let Some((last, rest)) = self.outputs.split_last_mut() {
                    for out in rest {
                        out.handle(ChainEvent::Records(batch.clone()))?;
                    }
                    last.handle(ChainEvent::Records(batch))?;
                }
                Ok(())
            }
            ChainEvent::Control(mut c) => self
                .outputs
                .iter_mut()
                .try_for_each(|o| o.handle(ChainEvent::Control(c.reborrow()))),
        }
    }

    fn pending(&self, _next: Next<'_, T>) -> Pending {
        if self
            .outputs
            .iter()
            .any(|o| o.pending(Next::Other) != Pending::None)
        {
            Pending::Holds
        } else {
            Pending::None
        }
    }

    fn resume(&mut self) -> Result<()> {
        match self
            .outputs
            .iter_mut()
            .find(|o| o.pending(Next::Other) != Pending::None)
        {
            Some(o) => o.resume(),
            None => Ok(()),
        }
    }
}

/// Discards everything (an operator output nobody consumes): nothing
/// follows it, so there is no state to capture and no barrier to pass on.
pub struct Discard;

impl<T: 'static> ChainInput<T> for Discard {
    fn handle(&mut self, _: ChainEvent<'_, T>) -> Result<()> {
        Ok(())
    }
}
