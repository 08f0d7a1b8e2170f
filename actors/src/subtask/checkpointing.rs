//! The checkpoint part of a subtask: capture, the asynchronous write, the ack.
//!
//! 1. **Capture.** When the input gate says so ([`GateAction::Snapshot`]), or
//!    a source or an ended subtask is triggered directly, the chain captures
//!    its state synchronously and emits the barrier downstream
//!    ([`SubtaskActor::take_snapshot`]).
//! 2. **Write.** Once the checkpoint is complete at this subtask (an unaligned
//!    one when its channel state is recorded) the capture is serialized and
//!    written on a blocking thread, then acknowledged to the coordinator.
//! 3. **Held ack.** An aligned checkpoint whose barrier still waits in an
//!    output queue (behind batches without credit) with an alignment timeout
//!    configured holds its ack until the barrier has left the queues; when
//!    the timeout expires first, the barrier is promoted: it overtakes the
//!    queued output, and the ack carries what it overtook as output channel
//!    state.
//!
//! [`GateAction::Snapshot`]: super::gate::GateAction::Snapshot

use super::gate::{ChannelState, remaining};
use super::{Head, Phase, SubtaskActor};
use crate::chain::{Control, Next, Pending};
use crate::checkpoint::files::{channel_blob_name, operator_blob_name};
use crate::element::{Barrier, BarrierKind, Timestamp};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, SubtaskIndex, VertexId};
use crate::snapshot::{
    AcknowledgeCheckpoint, BlobSink, ChainSnapshot, CheckpointLink, DeclineCheckpoint,
    NotifyCheckpoint, OperatorHandles, TriggerCheckpoint,
};
use actix::prelude::*;
use std::time::Instant;

/// A snapshot taken synchronously whose asynchronous part has not started:
/// unaligned snapshots wait here until their channel state is complete.
pub(super) struct PendingCapture {
    barrier: Barrier,
    unaligned: bool,
    snapshot: ChainSnapshot,
    watermark: Timestamp,
    channel_watermarks: Vec<Timestamp>,
    input_channel_state: ChannelState,
    alignment_ms: u64,
    sync_ms: u64,
}

/// Checkpoint bookkeeping of one subtask.
pub(super) struct Checkpointing {
    pub(super) link: CheckpointLink,
    /// When the pending checkpoint's first barrier was seen.
    pub(super) first_barrier: Option<(CheckpointId, Instant)>,
    capture: Option<PendingCapture>,
    /// Asynchronous parts still running, acks held included (the subtask
    /// finishes after them).
    pub(super) in_flight: usize,
    /// Aligned checkpoints whose barrier still waits in an output queue.
    held: Vec<HeldAck>,
    /// The first checkpoint snapshotted after the subtask ended: its
    /// completion (or a later one's) finishes the subtask.
    pub(super) final_snapshot: Option<CheckpointId>,
}

impl Checkpointing {
    /// Bookkeeping for a subtask that reports through `link`.
    pub(super) fn new(link: CheckpointLink) -> Self {
        Checkpointing {
            link,
            first_barrier: None,
            capture: None,
            in_flight: 0,
            held: Vec::new(),
            final_snapshot: None,
        }
    }

    /// Whether some ack waits for its barrier to leave the output queues.
    pub(super) fn holds_acks(&self) -> bool {
        !self.held.is_empty()
    }

    /// The coordinator aborted `id`: held acks of it and older ones are
    /// dropped (one still being written is sent when done, and ignored).
    pub(super) fn drop_held(&mut self, id: CheckpointId) {
        let aborted = self
            .held
            .extract_if(.., |h| h.id <= id)
            .filter(|h| h.ack.is_some())
            .count();
        self.in_flight -= aborted;
    }
}

/// The ack of an aligned checkpoint whose barrier was queued behind output
/// waiting for credit, with an alignment timeout configured. It is sent
/// once the barrier has left the queues; or, when the timeout expires
/// first, the barrier overtakes the queued output (turned unaligned) and
/// the ack carries what it overtook as output channel state.
struct HeldAck {
    id: CheckpointId,
    /// The written snapshot, once the asynchronous part is done.
    ack: Option<AcknowledgeCheckpoint>,
    /// What the barrier overtook, once promoted.
    promoted: Option<Vec<(u32, u32, Vec<u8>)>>,
}

impl<IN: Send + 'static> SubtaskActor<IN> {
    /// The synchronous part: the chain captures its state and emits the
    /// barrier downstream. Pending output of a record the chain already took
    /// goes first: a snapshot never cuts through a record.
    pub(super) fn take_snapshot(
        &mut self,
        barrier: Barrier,
        unaligned: bool,
        watermark: Timestamp,
        channel_watermarks: Vec<Timestamp>,
    ) -> Result<()> {
        let started = Instant::now();
        let span = tracing::info_span!("checkpoint_snapshot", checkpoint = %barrier.checkpoint_id, vertex = %self.setup.name, subtask = %self.setup.index);
        let _entered = span.enter();
        let mut snapshot = ChainSnapshot::default();
        match self.head.as_mut() {
            Some(Head::Inputs(chain)) => {
                while chain.pending(Next::Other) != Pending::None {
                    chain.resume()?;
                }
                chain.handle(
                    Control::Barrier {
                        barrier,
                        unaligned,
                        snapshot: &mut snapshot,
                    }
                    .into(),
                )?
            }
            Some(Head::Source(driver)) => driver.checkpoint(barrier, &mut snapshot)?,
            None => return Ok(()),
        }
        let Some(cp) = self.checkpointing.as_mut() else {
            return Ok(());
        };
        let alignment_ms = match cp.first_barrier {
            Some((id, at)) if id == barrier.checkpoint_id => at.elapsed().as_millis() as u64,
            _ => 0,
        };
        let sync_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            alignment_ms,
            sync_ms,
            unaligned,
            "checkpoint snapshot taken"
        );
        cp.capture = Some(PendingCapture {
            barrier,
            unaligned,
            snapshot,
            watermark,
            channel_watermarks,
            input_channel_state: Vec::new(),
            alignment_ms,
            sync_ms,
        });
        Ok(())
    }

    /// Checkpoint `id` is complete at this subtask, with the input channel
    /// state recorded for it: its asynchronous part starts.
    pub(super) fn complete_checkpoint(
        &mut self,
        id: CheckpointId,
        input_channel_state: ChannelState,
        ctx: &mut Context<Self>,
    ) {
        if let Some(capture) = self
            .checkpointing
            .as_mut()
            .and_then(|cp| cp.capture.as_mut())
            .filter(|c| c.barrier.checkpoint_id == id)
        {
            capture.input_channel_state = input_channel_state;
        }
        self.start_async_part(id, ctx);
    }

    /// Checkpoint `id` was given up before it completed here: its capture is
    /// dropped and the coordinator told.
    pub(super) fn cancel_checkpoint(&mut self, id: CheckpointId) {
        if let Some(cp) = self.checkpointing.as_mut() {
            cp.capture.take_if(|c| c.barrier.checkpoint_id == id);
            cp.link.decline.do_send(DeclineCheckpoint {
                checkpoint: id,
                vertex: self.setup.vertex,
                subtask: self.setup.index,
                reason: "canceled by a newer checkpoint or an abort".into(),
            });
        }
    }

    /// The asynchronous part: serialize and write on a blocking thread, then
    /// acknowledge to the coordinator.
    pub(super) fn start_async_part(&mut self, id: CheckpointId, ctx: &mut Context<Self>) {
        let Some(cp) = self.checkpointing.as_mut() else {
            return;
        };
        let Some(capture) = cp.capture.take_if(|c| c.barrier.checkpoint_id == id) else {
            return;
        };
        cp.in_flight += 1;
        let barrier = capture.barrier;
        if let (BarrierKind::Aligned, Some(timeout), false) = (
            barrier.kind,
            cp.link.alignment_timeout,
            self.setup.config.deterministic,
        ) && self.writers.iter().any(|w| w.borrow().holds_barrier(id))
        {
            cp.held.push(HeldAck {
                id,
                ack: None,
                promoted: None,
            });
            let left = remaining(timeout, barrier.timestamp, crate::element::now_ms());
            ctx.run_later(left, move |actor, ctx| {
                actor.guard(ctx, |a, ctx| a.promote_output(id, ctx))
            });
        }
        let link = cp.link.clone();
        let (vertex, subtask) = (self.setup.vertex, self.setup.index);
        let writer = link.writer.clone();
        let span = tracing::info_span!("checkpoint_write", checkpoint = %id, vertex = %self.setup.name, subtask = %subtask);
        let job = move || span.in_scope(|| write_capture(&*writer, vertex, subtask, capture));
        let fut = if self.setup.config.deterministic {
            // No other thread may decide when the ack arrives.
            futures::FutureExt::left_future(futures::future::ready(Ok(job())))
        } else {
            futures::FutureExt::right_future(actix_rt::task::spawn_blocking(job))
        };
        ctx.spawn(fut.into_actor(self).map(move |res, actor, ctx| {
            let held = actor
                .checkpointing
                .as_mut()
                .and_then(|cp| cp.held.iter_mut().find(|h| h.id == id));
            let reason = match (res, held) {
                (Ok(Ok(ack)), Some(held)) => {
                    // Sent when its barrier leaves the output queues.
                    held.ack = Some(ack);
                    actor.release_held(ctx);
                    return;
                }
                (Ok(Ok(ack)), None) => {
                    tracing::info!(checkpoint = %id, %vertex, %subtask, async_ms = ack.async_ms, state_bytes = ack.state_bytes, channel_state_bytes = ack.channel_state_bytes, "checkpoint acknowledged");
                    link.ack.do_send(ack);
                    None
                }
                (Ok(Err(e)), _) => Some(e.to_string()),
                (Err(e), _) => Some(format!("snapshot writer failed: {e}")),
            };
            if let Some(cp) = actor.checkpointing.as_mut() {
                cp.in_flight -= 1;
                cp.held.retain(|h| h.id != id);
            }
            if let Some(reason) = reason {
                tracing::warn!(checkpoint = %id, %subtask, %reason, "checkpoint declined");
                link.decline.do_send(DeclineCheckpoint {
                    checkpoint: id,
                    vertex,
                    subtask,
                    reason,
                });
            }
            actor.check_finished(ctx);
        }));
    }

    /// The alignment timeout of checkpoint `id` expired while its barrier
    /// still waits in an output queue: it overtakes the queued output.
    fn promote_output(&mut self, id: CheckpointId, ctx: &mut Context<Self>) -> Result<()> {
        let Some(cp) = self.checkpointing.as_mut() else {
            return Ok(());
        };
        let Some(held) = cp
            .held
            .iter_mut()
            .find(|h| h.id == id && h.promoted.is_none())
        else {
            return Ok(());
        };
        let mut state = Vec::new();
        let mut promoted = false;
        for w in &self.writers {
            promoted |= w.borrow_mut().promote_barrier(id, &mut state)?;
        }
        if promoted {
            tracing::info!(checkpoint = %id, vertex = %self.setup.name, subtask = %self.setup.index, overtaken = state.len(), "alignment timed out in the output; the barrier overtakes");
            held.promoted = Some(state);
        }
        self.release_held(ctx);
        Ok(())
    }

    /// Sends the held acks that are ready: written, and either promoted or
    /// with their barrier out of every output queue. A promoted one first
    /// writes what its barrier overtook, as output channel state.
    pub(super) fn release_held(&mut self, ctx: &mut Context<Self>) {
        let Some(cp) = self.checkpointing.as_mut() else {
            return;
        };
        let writers = &self.writers;
        let ready: Vec<HeldAck> = cp
            .held
            .extract_if(.., |h| {
                h.ack.is_some()
                    && (h.promoted.is_some()
                        || !writers.iter().any(|w| w.borrow().holds_barrier(h.id)))
            })
            .collect();
        let link = cp.link.clone();
        let (vertex, subtask) = (self.setup.vertex, self.setup.index);
        for held in ready {
            let (id, mut ack) = (held.id, held.ack.expect("ready acks are written"));
            let link = link.clone();
            let state = match held.promoted {
                Some(state) if !state.is_empty() => state,
                _ => {
                    tracing::info!(checkpoint = %id, %vertex, %subtask, "checkpoint acknowledged");
                    link.ack.do_send(ack);
                    if let Some(cp) = self.checkpointing.as_mut() {
                        cp.in_flight -= 1;
                    }
                    continue;
                }
            };
            let writer = link.writer.clone();
            let job = move || -> Result<AcknowledgeCheckpoint> {
                let bytes = postcard::to_allocvec(&state).map_err(|e| {
                    Error::Runtime(format!("cannot encode output channel state: {e}"))
                })?;
                let name = channel_blob_name(vertex, subtask, "output");
                ack.output_channel_state = Some(writer.put(id, &name, &bytes)?);
                ack.channel_state_bytes += bytes.len() as u64;
                ack.unaligned = true;
                Ok(ack)
            };
            let write = actix_rt::task::spawn_blocking(job);
            ctx.spawn(write.into_actor(self).map(move |res, actor, ctx| {
                if let Some(cp) = actor.checkpointing.as_mut() {
                    cp.in_flight -= 1;
                }
                match res {
                    Ok(Ok(ack)) => {
                        tracing::info!(checkpoint = %id, %vertex, %subtask, channel_state_bytes = ack.channel_state_bytes, "checkpoint acknowledged");
                        link.ack.do_send(ack);
                    }
                    Ok(Err(e)) => link.decline.do_send(DeclineCheckpoint {
                        checkpoint: id,
                        vertex,
                        subtask,
                        reason: e.to_string(),
                    }),
                    Err(e) => link.decline.do_send(DeclineCheckpoint {
                        checkpoint: id,
                        vertex,
                        subtask,
                        reason: format!("snapshot writer failed: {e}"),
                    }),
                }
                actor.check_finished(ctx);
            }));
        }
        self.check_finished(ctx);
    }

    /// A checkpoint triggered at this subtask directly: a source, or a
    /// subtask that ended and waits for the final checkpoint.
    pub(super) fn trigger_checkpoint(&mut self, msg: TriggerCheckpoint, ctx: &mut Context<Self>) {
        // A source that is finishing (input exhausted, output still
        // draining) still takes part: its position is final, and its barrier
        // follows the end of input (or, unaligned, overtakes it).
        // An ended subtask (waiting for the final checkpoint) is triggered
        // directly and snapshots its final state.
        let source = matches!(self.head, Some(Head::Source(_)));
        let live = self.phase == Phase::Running
            || self.phase == Phase::Ended
            || (source && self.phase == Phase::Finishing);
        if !live || self.checkpointing.is_none() {
            return;
        }
        let id = msg.barrier.checkpoint_id;
        let ended = self.phase == Phase::Ended;
        if msg.stop && source {
            // Nothing after the barrier: the job stops with this checkpoint.
            self.paused = Some(id);
        }
        self.guard(ctx, |a, ctx| {
            if let Some(cp) = a.checkpointing.as_mut() {
                cp.first_barrier = Some((id, Instant::now()));
                if ended {
                    cp.final_snapshot.get_or_insert(id);
                }
            }
            let (watermark, channel_watermarks) = (a.gate.watermark(), a.gate.channel_watermarks());
            a.take_snapshot(msg.barrier, false, watermark, channel_watermarks)?;
            a.start_async_part(id, ctx);
            Ok(())
        });
        if self.setup.config.buffer_timeout.is_zero() {
            self.flush_partial();
        }
    }

    /// The coordinator completed or aborted a checkpoint.
    pub(super) fn notify_checkpoint(&mut self, msg: NotifyCheckpoint, ctx: &mut Context<Self>) {
        if msg.completed {
            tracing::info!(checkpoint = %msg.checkpoint, vertex = %self.setup.name, subtask = %self.setup.index, "checkpoint complete");
        } else {
            tracing::info!(checkpoint = %msg.checkpoint, vertex = %self.setup.name, subtask = %self.setup.index, "checkpoint aborted");
        }
        self.guard(ctx, |a, ctx| {
            if !msg.completed
                && let Some(cp) = a.checkpointing.as_mut()
            {
                cp.drop_held(msg.checkpoint);
                let mut actions = Vec::new();
                a.gate.abort(msg.checkpoint, &mut actions);
                a.execute(&mut actions, ctx)?;
            }
            match a.head.as_mut() {
                Some(Head::Inputs(chain)) => chain.handle(
                    Control::Notify {
                        checkpoint: msg.checkpoint,
                        completed: msg.completed,
                    }
                    .into(),
                ),
                Some(Head::Source(driver)) => {
                    driver.notify_checkpoint(msg.checkpoint, msg.completed)
                }
                None => Ok(()),
            }
        });
        let covered = self
            .checkpointing
            .as_ref()
            .and_then(|cp| cp.final_snapshot)
            .is_some_and(|f| msg.completed && msg.checkpoint >= f);
        if (self.phase == Phase::Ended && covered) || (msg.completed && msg.finish) {
            // The final checkpoint completed (or the job stops with this
            // one) and the chain committed (async sinks: once drained).
            self.finish_when_drained(ctx);
            return;
        }
        if !msg.completed && self.paused.is_some_and(|p| p <= msg.checkpoint) {
            // The stop's checkpoint was aborted: the source goes on.
            self.paused = None;
            self.schedule(ctx);
        }
        // A blocked channel may have been released.
        if self.has_ready_input() {
            self.schedule(ctx);
        }
    }
}

/// Serializes a capture and writes its blobs (runs on a blocking thread).
fn write_capture(
    writer: &dyn BlobSink,
    vertex: VertexId,
    subtask: SubtaskIndex,
    capture: PendingCapture,
) -> Result<AcknowledgeCheckpoint> {
    let started = Instant::now();
    let id = capture.barrier.checkpoint_id;
    let mut operators = Vec::with_capacity(capture.snapshot.operators.len());
    let mut state_bytes = 0u64;
    for (i, op) in capture.snapshot.operators.into_iter().enumerate() {
        let bytes = (op.finish)()?;
        let name = |part: &str| operator_blob_name(vertex, subtask, i, part);
        let mut handles = OperatorHandles {
            uid: op.uid,
            keyed: bytes.keyed_base,
            ..Default::default()
        };
        if let Some(b) = bytes.keyed {
            state_bytes += b.len() as u64;
            handles.keyed.push(writer.put(id, &name("keyed"), &b)?);
        }
        if let Some(b) = bytes.split_list {
            state_bytes += b.len() as u64;
            handles.split_list = Some(writer.put(id, &name("split"), &b)?);
        }
        if let Some(b) = bytes.union_list {
            state_bytes += b.len() as u64;
            handles.union_list = Some(writer.put(id, &name("union"), &b)?);
        }
        if let Some(persisted) = op.persisted {
            persisted(&handles.keyed);
        }
        operators.push(handles);
    }
    let encode =
        |what: &str, e: postcard::Error| Error::Runtime(format!("cannot encode {what}: {e}"));
    let mut channel_state_bytes = 0u64;
    let input_channel_state = if capture.input_channel_state.is_empty() {
        None
    } else {
        let b = postcard::to_allocvec(&capture.input_channel_state)
            .map_err(|e| encode("input channel state", e))?;
        channel_state_bytes += b.len() as u64;
        Some(writer.put(id, &channel_blob_name(vertex, subtask, "input"), &b)?)
    };
    let output_channel_state = if capture.snapshot.output_channel_state.is_empty() {
        None
    } else {
        let b = postcard::to_allocvec(&capture.snapshot.output_channel_state)
            .map_err(|e| encode("output channel state", e))?;
        channel_state_bytes += b.len() as u64;
        Some(writer.put(id, &channel_blob_name(vertex, subtask, "output"), &b)?)
    };
    Ok(AcknowledgeCheckpoint {
        checkpoint: id,
        vertex,
        subtask,
        operators,
        watermark: capture.watermark,
        channel_watermarks: capture.channel_watermarks,
        input_channel_state,
        output_channel_state,
        channel_state_bytes,
        state_bytes,
        alignment_ms: capture.alignment_ms,
        sync_ms: capture.sync_ms,
        async_ms: started.elapsed().as_millis() as u64,
        unaligned: capture.unaligned,
    })
}
