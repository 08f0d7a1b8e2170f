//! Actix messages between subtasks, the supervisor and job handles.
//!
//! Data (`Deliver`) carries stream elements in channel order; everything else is
//! control: `ConnectChannel` and `GrantCredit` implement credit-based flow
//! control, `Step` is a subtask's self-scheduled unit of work, `CancelSubtask`
//! stops one, and `SubtaskFinished` / `SubtaskFailed` report to the supervisor
//! (`SubtaskEnded` to the checkpoint coordinator).

use crate::element::StreamElement;
use crate::error::Error;
use crate::ids::{ChannelId, SubtaskIndex, VertexId};
use actix::prelude::*;

/// A stream element on input channel `channel` of the receiving subtask.
pub struct Deliver<T> {
    /// The receiver's input channel.
    pub channel: ChannelId,
    /// The element.
    pub element: StreamElement<T>,
}

impl<T: 'static> Message for Deliver<T> {
    type Result = ();
}

/// Sent once by a sender before any data: where to return credits for the channel.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConnectChannel {
    /// The receiver's input channel.
    pub channel: ChannelId,
    /// The sender's output port (record writer) index.
    pub writer: u32,
    /// The channel's index within that record writer.
    pub output: u32,
    /// Where credits for this channel go.
    pub credit_to: Recipient<GrantCredit>,
}

/// The receiver consumed batches and lets the sender send `credits` more.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct GrantCredit {
    /// The sender's record writer.
    pub writer: u32,
    /// The channel within that writer.
    pub output: u32,
    /// Batches granted.
    pub credits: u32,
}

/// A subtask's own "do some work" message.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct Step;

/// Stops a subtask at once (job canceled or failed elsewhere).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct CancelSubtask;

/// A subtask processed all its input and drained its outputs.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct SubtaskFinished {
    /// The vertex (chain) of the subtask.
    pub vertex: VertexId,
    /// The subtask.
    pub subtask: SubtaskIndex,
}

/// A subtask processed all its input and drained its outputs, and waits for
/// a checkpoint that covers its end (the final checkpoint) before it
/// finishes: sent to the checkpoint coordinator, which triggers it directly
/// from now on (no barrier reaches it through its ended inputs).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct SubtaskEnded {
    /// The vertex (chain) of the subtask.
    pub vertex: VertexId,
    /// The subtask.
    pub subtask: SubtaskIndex,
}

/// A subtask failed; the supervisor decides what follows.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct SubtaskFailed {
    /// The vertex (chain) of the subtask.
    pub vertex: VertexId,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// What went wrong, naming the operator.
    pub error: Error,
}

/// Asks the supervisor to cancel the job.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct CancelJob;

/// Fails the receiving subtask at once (fault injection).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct InjectFailure;
