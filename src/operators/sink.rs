//! The sink interface and the operator that runs a sink in a chain.

use super::{Operator, Output};
use crate::Result;
use floe_actors::element::{Batch, Timestamp};
use floe_actors::ids::{CheckpointId, SubtaskIndex};

/// What a sink learns when it opens.
#[derive(Clone, Copy, Debug)]
pub struct SinkContext {
    /// This sink subtask.
    pub subtask: SubtaskIndex,
    /// Number of sink subtasks.
    pub parallelism: usize,
}

/// The end of a stream: writes records somewhere.
///
/// One instance per subtask is cloned from the instance given to
/// `DataStream::add_sink`, then opened.
pub trait SinkFunction<T>: Send + 'static {
    /// Called once before any record.
    fn open(&mut self, _ctx: &SinkContext) -> Result<()> {
        Ok(())
    }

    /// Writes one record.
    fn invoke(&mut self, value: T, timestamp: Option<Timestamp>) -> Result<()>;

    /// Writes a batch; override to write batches at once.
    fn invoke_batch(&mut self, batch: Batch<T>) -> Result<()> {
        for r in batch {
            self.invoke(r.value, r.timestamp)?;
        }
        Ok(())
    }

    /// The input is complete: flush and close.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }

    /// Checkpoint: the sink's state (see
    /// [`Operator::snapshot_state`](super::Operator::snapshot_state)).
    fn snapshot_state(&mut self, _ctx: &super::SnapshotContext) -> Result<super::StateCapture> {
        Ok(super::StateCapture::default())
    }

    /// Restore: the state [`snapshot_state`](Self::snapshot_state) took;
    /// called before `open`.
    fn restore_state(&mut self, _state: super::RestoredState) -> Result<()> {
        Ok(())
    }

    /// A checkpoint completed.
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }
}

/// Runs a sink as the last operator of a chain; opens it before its first
/// batch, so a failing `open` fails the job naming the sink.
pub struct SinkOp<S> {
    sink: S,
    ctx: SinkContext,
    opened: bool,
}

impl<S> SinkOp<S> {
    /// Wraps `sink` for the subtask described by `ctx`.
    pub fn new(sink: S, ctx: SinkContext) -> Self {
        SinkOp {
            sink,
            ctx,
            opened: false,
        }
    }

    fn ensure_open<T>(&mut self) -> Result<()>
    where
        S: SinkFunction<T>,
    {
        if !self.opened {
            self.opened = true;
            self.sink.open(&self.ctx)?;
        }
        Ok(())
    }
}

impl<T, S> Operator<T, ()> for SinkOp<S>
where
    S: SinkFunction<T>,
{
    fn process_batch(&mut self, batch: Batch<T>, _: &mut Output<'_, ()>) -> Result<()> {
        self.ensure_open()?;
        self.sink.invoke_batch(batch)
    }

    fn on_end_of_input(&mut self, _: &mut Output<'_, ()>) -> Result<()> {
        self.ensure_open()?;
        self.sink.finish()
    }

    fn snapshot_state(&mut self, ctx: &super::SnapshotContext) -> Result<super::StateCapture> {
        self.sink.snapshot_state(ctx)
    }

    fn restore_state(&mut self, state: super::RestoredState) -> Result<()> {
        self.sink.restore_state(state)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.sink.notify_checkpoint_complete(checkpoint)
    }
}
