//! The input gate's actions, carried out in order: batches into the chain,
//! credit back to the senders, watermarks, end of input, and the steps of
//! a checkpoint.

use super::gate::{self, GateAction};
use super::{Head, Phase, SubtaskActor};
use crate::chain::{ChainEvent, ChainInput, Control};
use crate::error::Result;
use crate::messages::GrantCredit;
use actix::prelude::*;
use std::time::Instant;

impl<IN: Send + 'static> SubtaskActor<IN> {
    /// Carries out what the input gate asked for, in order; leaves `actions`
    /// empty (and its capacity for the next event).
    pub(super) fn execute(
        &mut self,
        actions: &mut Vec<GateAction<IN>>,
        ctx: &mut Context<Self>,
    ) -> Result<()> {
        for action in actions.drain(..) {
            match action {
                GateAction::Process(batch) => {
                    if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                        chain.handle(ChainEvent::Records(batch))?;
                    }
                    self.mark_active();
                }
                GateAction::ReturnCredit { channel, credits } => {
                    if let Some(Some((to, writer, output))) = self.credit_to.get(channel) {
                        to.do_send(GrantCredit {
                            writer: *writer,
                            output: *output,
                            credits,
                        });
                    }
                }
                GateAction::Watermark(wm) => {
                    if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                        chain.handle(Control::Watermark(wm).into())?;
                    }
                }
                GateAction::WatermarkStatus(status) => {
                    if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                        chain.handle(Control::Status(status).into())?;
                    }
                }
                GateAction::EndOfInput => {
                    if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                        chain.handle(Control::EndOfInput.into())?;
                    }
                    self.phase = Phase::Finishing;
                }
                GateAction::AlignmentStarted { barrier, channel } => {
                    if let Some(cp) = self.checkpointing.as_mut() {
                        cp.first_barrier = Some((barrier.checkpoint_id, Instant::now()));
                    }
                    tracing::info!(checkpoint = %barrier.checkpoint_id, vertex = %self.setup.name, subtask = %self.setup.index, channel, kind = ?barrier.kind, "checkpoint alignment started");
                }
                GateAction::ScheduleTimeout {
                    timer,
                    timeout,
                    started_ms,
                } => {
                    let left = gate::remaining(timeout, started_ms, crate::element::now_ms());
                    ctx.run_later(left, move |actor, ctx| {
                        actor.guard(ctx, |a, ctx| a.on_timeout(timer, ctx))
                    });
                }
                GateAction::Snapshot {
                    barrier,
                    unaligned,
                    watermark,
                    channel_watermarks,
                } => self.take_snapshot(barrier, unaligned, watermark, channel_watermarks)?,
                GateAction::Complete {
                    checkpoint,
                    input_channel_state,
                } => self.complete_checkpoint(checkpoint, input_channel_state, ctx),
                GateAction::Canceled(checkpoint) => self.cancel_checkpoint(checkpoint),
            }
        }
        Ok(())
    }
}
