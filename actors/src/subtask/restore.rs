//! Restore: a subtask's runtime state taken back from a checkpoint.
//!
//! Before any new element, the subtask re-establishes its channels' and its
//! own watermarks and re-injects channel state: input channel state at the
//! head of its input queues (those batches took no credit), output channel
//! state at the head of its writers' queues, sent with the channels' initial
//! credit.

use super::{Head, SubtaskActor};
use crate::chain::Control;
use crate::element::{MIN_WATERMARK, Timestamp};
use crate::error::{Error, Result};

/// A subtask's runtime state taken back from a checkpoint.
#[derive(Clone, Debug, Default)]
pub struct SubtaskRestore {
    /// The combined input watermark at the cut.
    pub watermark: Timestamp,
    /// Per input channel watermarks at the cut (may be shorter than the
    /// channel count after a rescale; missing ones take `watermark`).
    pub channel_watermarks: Vec<Timestamp>,
    /// Input channel state: `(channel, encoded element)` in arrival order.
    pub input_channel_state: Vec<(u32, Vec<u8>)>,
    /// Output channel state: `(writer, output, encoded element)` in order.
    pub output_channel_state: Vec<(u32, u32, Vec<u8>)>,
}

impl<IN: Send + 'static> SubtaskActor<IN> {
    /// Re-establishes watermarks and re-injects channel state before any new
    /// element.
    pub(super) fn restore_runtime(&mut self) -> Result<()> {
        let Some(r) = self.setup.restore.take() else {
            return Ok(());
        };
        self.gate
            .restore_channel_watermarks(&r.channel_watermarks, r.watermark);
        if !r.input_channel_state.is_empty() {
            // Output channel state is decoded by its writer's own codec.
            let Some(codec) = self.codec.clone() else {
                return Err(Error::Runtime(format!(
                    "subtask {} of '{}' cannot decode its channel state",
                    self.setup.index, self.setup.name
                )));
            };
            for (c, bytes) in &r.input_channel_state {
                let element = codec.decode(bytes)?;
                if !self.gate.restore_element(*c as usize, element) {
                    return Err(Error::Runtime(format!(
                        "channel state for unknown input channel {c} of '{}'",
                        self.setup.name
                    )));
                }
            }
        }
        for (w, o, bytes) in &r.output_channel_state {
            let restored = match self.writers.get(*w as usize) {
                Some(writer) => writer.borrow_mut().restore_output(*o, bytes)?,
                None => false,
            };
            if !restored {
                return Err(Error::Runtime(format!(
                    "cannot restore output channel state of '{}' (writer {w}, channel {o})",
                    self.setup.name
                )));
            }
        }
        // The restored batches go out with the channels' initial credit
        // (new ones queue behind them): nothing else would send them.
        for (w, o, _) in &r.output_channel_state {
            if let Some(writer) = self.writers.get(*w as usize) {
                writer.borrow_mut().grant(*o, 0);
            }
        }
        if r.watermark > MIN_WATERMARK
            && let Some(Head::Inputs(chain)) = self.head.as_mut()
        {
            self.gate.restore_watermark(r.watermark);
            chain.handle(Control::RestoreWatermark(r.watermark).into())?;
        }
        Ok(())
    }
}
