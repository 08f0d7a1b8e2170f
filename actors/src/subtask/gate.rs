//! The input gate of a subtask: its input channels as a pure state machine.
//!
//! The subtask actor feeds the gate events — an element arrived on a channel
//! ([`InputGate::arrive`]), the head of a channel is taken
//! ([`InputGate::dequeue`]), an alignment timer fired
//! ([`InputGate::on_timeout`]), the coordinator aborted a checkpoint
//! ([`InputGate::abort`]) — and executes the [`GateAction`]s it returns, in
//! order: process a batch, return credit, emit a watermark or a watermark
//! status, end the input, snapshot, complete or cancel a checkpoint, arm a
//! timer. The gate holds no actor address, reads no clock (the caller passes
//! the time where a decision needs it) and does no I/O; its only side effect
//! is the relaxed per-channel queue and watermark counters of
//! [`QueueMetrics`]. So `actors/tests/barrier_props.rs` drives this very code
//! through random interleavings, without an actor.
//!
//! What it keeps:
//!
//! 1. **Queues.** One FIFO queue per channel; [`next_ready`](InputGate::next_ready)
//!    picks the channels round-robin and skips a channel blocked by barrier
//!    alignment.
//! 2. **Credit.** Every consumed batch owes its sender one credit, returned in
//!    groups of `credits / 2` once the channel is connected; batches
//!    re-injected from channel state took no credit and return none.
//! 3. **Watermarks.** The subtask's watermark is the minimum over the channels
//!    that are active or ended (an ended channel counts as `MAX_WATERMARK`);
//!    it never goes back. When every live channel is idle the chain is told
//!    so, and told again when one becomes active.
//! 4. **Barriers.** Aligned, savepoint and at-least-once barriers are handled
//!    when dequeued; an unaligned barrier (with a codec to record channel
//!    state) and any barrier on a channel that records are handled on
//!    arrival. An aligned barrier queued when the alignment timeout expires
//!    overtakes the data ahead of it. The rules of alignment themselves are
//!    [`alignment`](super::alignment)'s.
//! 5. **Channel state.** For an unaligned snapshot the gate encodes the queued
//!    elements ahead of the barrier on every channel still awaited, then every
//!    element arriving there until that channel's barrier (or end of input),
//!    and hands it over with [`GateAction::Complete`].

use super::alignment::{BarrierAction, BarrierHandler};
use crate::element::{
    Barrier, BarrierKind, Batch, MAX_WATERMARK, MIN_WATERMARK, StreamElement, Timestamp,
    WatermarkStatus,
};
use crate::error::Result;
use crate::ids::CheckpointId;
use crate::metrics::QueueMetrics;
use crate::snapshot::ElementCodec;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Input channel state: `(channel, encoded element)` in arrival order.
pub type ChannelState = Vec<(u32, Vec<u8>)>;

/// What the subtask must do after an event, in order.
#[derive(Debug)]
pub enum GateAction<T> {
    /// Push this batch through the chain.
    Process(Batch<T>),
    /// Grant `credits` back to the sender of `channel`.
    ReturnCredit {
        /// The input channel.
        channel: usize,
        /// How many batches of it were consumed since the last return.
        credits: u32,
    },
    /// The subtask's watermark advanced to this.
    Watermark(Timestamp),
    /// Every live input went idle, or one became active again.
    WatermarkStatus(WatermarkStatus),
    /// Every channel ended: the chain's input is complete.
    EndOfInput,
    /// The first barrier of a checkpoint reached the barrier logic (for the
    /// alignment time the ack reports).
    AlignmentStarted {
        /// That barrier.
        barrier: Barrier,
        /// Its channel.
        channel: usize,
    },
    /// Arm a timer: when it fires, feed `timer` to [`InputGate::on_timeout`].
    /// It fires [`remaining`]`(timeout, started_ms, now)` from now.
    ScheduleTimeout {
        /// What expires.
        timer: Timeout,
        /// The alignment timeout.
        timeout: Duration,
        /// When the checkpoint started (its barrier's timestamp).
        started_ms: Timestamp,
    },
    /// Take the synchronous snapshot of `barrier`'s checkpoint now and emit
    /// `barrier` on every output (overtaking queued output if `unaligned`).
    Snapshot {
        /// The barrier to emit downstream.
        barrier: Barrier,
        /// Whether channel state is recorded (the barrier overtakes).
        unaligned: bool,
        /// The subtask's watermark at the cut.
        watermark: Timestamp,
        /// Every channel's watermark at the cut.
        channel_watermarks: Vec<Timestamp>,
    },
    /// The checkpoint's barrier came from every live channel: its snapshot is
    /// complete and may be written.
    Complete {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// The input channel state recorded for it (empty unless unaligned).
        input_channel_state: ChannelState,
    },
    /// The checkpoint was given up (a newer barrier or an abort); if its
    /// snapshot was taken, the subtask declines it.
    Canceled(CheckpointId),
}

/// A timer the gate asked for with [`GateAction::ScheduleTimeout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// The alignment of the pending checkpoint took too long: it continues
    /// unaligned.
    Alignment(CheckpointId),
    /// An aligned barrier queued on `channel` may still wait behind data when
    /// its checkpoint's alignment timeout expires: it then overtakes.
    Queued {
        /// The barrier's channel.
        channel: usize,
        /// Its checkpoint.
        checkpoint: CheckpointId,
    },
}

/// What is left at `now_ms` of an alignment timeout counted from the
/// checkpoint's start (`started_ms`, the barrier's timestamp).
pub fn remaining(timeout: Duration, started_ms: Timestamp, now_ms: Timestamp) -> Duration {
    let elapsed = now_ms.saturating_sub(started_ms).max(0) as u64;
    timeout.saturating_sub(Duration::from_millis(elapsed))
}

/// One input channel.
struct Channel<T> {
    queue: VecDeque<StreamElement<T>>,
    queued_batches: usize,
    /// Batches re-injected from channel state at the head of the queue: they
    /// took no credit, so consuming them returns none.
    restored_batches: usize,
    /// Whether the sender connected (credit can be returned).
    connected: bool,
    ungranted: u32,
    ended: bool,
    idle: bool,
    watermark: Timestamp,
}

/// The input channels of one subtask; see the module documentation.
pub struct InputGate<T: 'static> {
    channels: Vec<Channel<T>>,
    /// `None` when the job does not checkpoint: barriers are dropped.
    alignment: Option<BarrierHandler>,
    /// Encodes input elements (channel state); `None` keeps unaligned
    /// barriers in channel order.
    codec: Option<Arc<dyn ElementCodec<T>>>,
    alignment_timeout: Option<Duration>,
    watermark: Timestamp,
    /// Whether the chain was told that every live input is idle.
    idle_out: bool,
    next_channel: usize,
    grant_threshold: u32,
    /// The checkpoint whose start was last announced.
    started: Option<CheckpointId>,
    /// Channel state recorded for the pending unaligned checkpoint.
    recorded: Option<(CheckpointId, ChannelState)>,
    metrics: Arc<QueueMetrics>,
}

impl<T: 'static> InputGate<T> {
    /// A gate over `channels` input channels granting `credits` per channel;
    /// barriers are dropped until [`with_checkpoints`](Self::with_checkpoints).
    pub fn new(channels: usize, credits: u32, metrics: Arc<QueueMetrics>) -> Self {
        InputGate {
            channels: (0..channels)
                .map(|_| Channel {
                    queue: VecDeque::new(),
                    queued_batches: 0,
                    restored_batches: 0,
                    connected: false,
                    ungranted: 0,
                    ended: false,
                    idle: false,
                    watermark: MIN_WATERMARK,
                })
                .collect(),
            alignment: None,
            codec: None,
            alignment_timeout: None,
            watermark: MIN_WATERMARK,
            idle_out: false,
            next_channel: 0,
            grant_threshold: (credits / 2).max(1),
            started: None,
            recorded: None,
            metrics,
        }
    }

    /// Takes part in checkpoints: aligns barriers; with a `codec`, records
    /// channel state (unaligned checkpoints, `alignment_timeout`).
    pub fn with_checkpoints(
        mut self,
        codec: Option<Arc<dyn ElementCodec<T>>>,
        alignment_timeout: Option<Duration>,
    ) -> Self {
        self.alignment = Some(BarrierHandler::new(self.channels.len().max(1)));
        self.codec = codec;
        self.alignment_timeout = alignment_timeout;
        self
    }

    /// Number of input channels.
    pub fn len(&self) -> usize {
        self.channels.len()
    }

    /// Whether the gate has no channel (a source, or an empty union).
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// The sender of `channel` connected: consumed batches return credit.
    pub fn connect(&mut self, channel: usize) {
        if let Some(ch) = self.channels.get_mut(channel) {
            ch.connected = true;
        }
    }

    /// The subtask's watermark.
    pub fn watermark(&self) -> Timestamp {
        self.watermark
    }

    /// Every channel's watermark.
    pub fn channel_watermarks(&self) -> Vec<Timestamp> {
        self.channels.iter().map(|c| c.watermark).collect()
    }

    /// Whether `channel` must not be dequeued now (aligned: its barrier of
    /// the pending checkpoint arrived).
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.alignment
            .as_ref()
            .is_some_and(|a| a.is_blocked(channel))
    }

    /// Whether what arrives on `channel` is channel state of the pending
    /// unaligned checkpoint.
    pub fn is_recording(&self, channel: usize) -> bool {
        self.alignment
            .as_ref()
            .is_some_and(|a| a.is_recording(channel))
    }

    /// The checkpoint whose barrier came from some but not all live channels.
    pub fn pending(&self) -> Option<CheckpointId> {
        self.alignment.as_ref().and_then(|a| a.pending())
    }

    /// Whether an unblocked channel holds an element.
    pub fn has_ready(&self) -> bool {
        (0..self.channels.len()).any(|c| self.is_ready(c))
    }

    /// Whether any channel holds an element, blocked or not.
    pub fn has_queued(&self) -> bool {
        self.channels.iter().any(|c| !c.queue.is_empty())
    }

    /// The next channel to dequeue from, round-robin, or `None`.
    pub fn next_ready(&mut self) -> Option<usize> {
        self.next_where(|_| true)
    }

    /// Like [`next_ready`](Self::next_ready), among the channels whose
    /// queue a batch of records that `admits` heads, or a watermark when
    /// `watermarks` (not a barrier, a status or the end).
    pub fn next_ready_admitted(
        &mut self,
        admits: impl Fn(&Batch<T>) -> bool,
        watermarks: bool,
    ) -> Option<usize> {
        self.next_where(|front| match front {
            Some(StreamElement::Records(b)) => admits(b),
            Some(StreamElement::Watermark(_)) => watermarks,
            _ => false,
        })
    }

    /// The next ready channel, round-robin, whose queue's front `takes`;
    /// the turn passes to the one after it.
    fn next_where(&mut self, takes: impl Fn(Option<&StreamElement<T>>) -> bool) -> Option<usize> {
        let n = self.channels.len();
        let c = (0..n)
            .map(|i| (self.next_channel + i) % n)
            .find(|&c| self.is_ready(c) && takes(self.front(c)))?;
        self.next_channel = (c + 1) % n;
        Some(c)
    }

    /// `channel`, just returned by [`next_ready`](Self::next_ready), was not
    /// dequeued (a throttled input waits): it is next again.
    pub fn keep_turn(&mut self, channel: usize) {
        self.next_channel = channel;
    }

    /// The element heading `channel`'s queue.
    pub fn front(&self, channel: usize) -> Option<&StreamElement<T>> {
        self.channels.get(channel)?.queue.front()
    }

    fn is_ready(&self, c: usize) -> bool {
        !self.channels[c].queue.is_empty() && !self.is_blocked(c)
    }

    /// Restore: the channels' watermarks at the cut (missing ones take
    /// `default`).
    pub fn restore_channel_watermarks(&mut self, watermarks: &[Timestamp], default: Timestamp) {
        for (i, ch) in self.channels.iter_mut().enumerate() {
            ch.watermark = watermarks.get(i).copied().unwrap_or(default);
            self.metrics.input_watermark(i, ch.watermark);
        }
    }

    /// Restore: the subtask's watermark at the cut.
    pub fn restore_watermark(&mut self, watermark: Timestamp) {
        self.watermark = watermark;
        self.metrics.watermark.store(watermark, Ordering::Relaxed);
    }

    /// Restore: re-injects an element of `channel`'s state (it took no
    /// credit). Returns `false` for an unknown channel.
    pub fn restore_element(&mut self, channel: usize, element: StreamElement<T>) -> bool {
        let Some(ch) = self.channels.get_mut(channel) else {
            return false;
        };
        if let StreamElement::Records(batch) = &element {
            ch.queued_batches += 1;
            ch.restored_batches += 1;
            self.metrics.hold_records(batch.len());
        }
        ch.queue.push_back(element);
        true
    }

    /// `element` arrived on `channel` (`channel < len()`). A barrier the
    /// alignment takes on arrival is handled now (`now_ms` is asked only for
    /// a barrier); anything else is queued. Returns whether the element was
    /// queued.
    pub fn arrive(
        &mut self,
        channel: usize,
        mut element: StreamElement<T>,
        now_ms: impl FnOnce() -> Timestamp,
        out: &mut Vec<GateAction<T>>,
    ) -> Result<bool> {
        if let Some(alignment) = &self.alignment {
            if let StreamElement::Barrier(b) = &mut element {
                let on_arrival = (b.kind == BarrierKind::Unaligned && self.codec.is_some())
                    || alignment.is_recording(channel);
                if on_arrival {
                    self.barrier(channel, *b, None, out)?;
                    return Ok(false);
                }
                if b.kind == BarrierKind::Unaligned {
                    // Without a codec for this input the barrier keeps its place.
                    b.kind = BarrierKind::Aligned;
                } else if b.kind == BarrierKind::Aligned
                    && self.codec.is_some()
                    && let Some(timeout) = self.alignment_timeout
                {
                    if remaining(timeout, b.timestamp, now_ms()).is_zero() {
                        // Its checkpoint is older than the alignment timeout:
                        // it continues unaligned at once.
                        b.kind = BarrierKind::Unaligned;
                        let b = *b;
                        self.barrier(channel, b, None, out)?;
                        return Ok(false);
                    }
                    out.push(GateAction::ScheduleTimeout {
                        timer: Timeout::Queued {
                            channel,
                            checkpoint: b.checkpoint_id,
                        },
                        timeout,
                        started_ms: b.timestamp,
                    });
                }
            } else {
                self.record_arrival(channel, &element)?;
                if matches!(element, StreamElement::EndOfInput) {
                    // Recorded: the checkpoint need not wait for the data
                    // ahead of the end to be processed.
                    let actions = self.alignment_mut().on_end_of_input_arrival(channel);
                    self.apply(actions, Vec::new(), out);
                }
            }
        }
        let ch = &mut self.channels[channel];
        if let StreamElement::Records(batch) = &element {
            ch.queued_batches += 1;
            self.metrics.input_queued(channel, ch.queued_batches);
            self.metrics.hold_records(batch.len());
        }
        ch.queue.push_back(element);
        Ok(true)
    }

    /// Takes the element heading `channel` (one [`next_ready`](Self::next_ready)
    /// returned). Returns whether it was a batch of records.
    pub fn dequeue(&mut self, channel: usize, out: &mut Vec<GateAction<T>>) -> Result<bool> {
        let Some(element) = self.channels[channel].queue.pop_front() else {
            return Ok(false);
        };
        match element {
            StreamElement::Records(batch) => {
                self.metrics.release_records(batch.len());
                let ch = &mut self.channels[channel];
                ch.queued_batches -= 1;
                if ch.restored_batches > 0 {
                    ch.restored_batches -= 1;
                } else {
                    ch.ungranted += 1;
                }
                self.metrics.input_queued(channel, ch.queued_batches);
                if ch.idle {
                    // Data makes an idle channel active again.
                    ch.idle = false;
                    if let Some(m) = self.metrics.inputs.get(channel) {
                        m.idle.store(false, Ordering::Relaxed);
                    }
                    self.update_idleness(out);
                }
                let ch = &mut self.channels[channel];
                if ch.ungranted >= self.grant_threshold && ch.connected {
                    out.push(GateAction::ReturnCredit {
                        channel,
                        credits: ch.ungranted,
                    });
                    ch.ungranted = 0;
                }
                out.push(GateAction::Process(batch));
                return Ok(true);
            }
            StreamElement::Watermark(wm) => {
                let ch = &mut self.channels[channel];
                if wm > ch.watermark {
                    ch.watermark = wm;
                    self.metrics.input_watermark(channel, wm);
                }
                self.advance_watermark(out);
            }
            StreamElement::WatermarkStatus(status) => {
                let idle = status == WatermarkStatus::Idle;
                self.channels[channel].idle = idle;
                if let Some(m) = self.metrics.inputs.get(channel) {
                    m.idle.store(idle, Ordering::Relaxed);
                }
                self.update_idleness(out);
                self.advance_watermark(out);
            }
            StreamElement::Barrier(barrier) => self.barrier(channel, barrier, None, out)?,
            StreamElement::EndOfInput if self.channels[channel].ended => {}
            StreamElement::EndOfInput => {
                if let Some(alignment) = self.alignment.as_mut() {
                    let actions = alignment.on_end_of_input(channel);
                    self.apply(actions, Vec::new(), out);
                }
                let ch = &mut self.channels[channel];
                ch.ended = true;
                ch.watermark = MAX_WATERMARK;
                if let Some(m) = self.metrics.inputs.get(channel) {
                    m.ended.store(true, Ordering::Relaxed);
                    m.watermark.store(MAX_WATERMARK, Ordering::Relaxed);
                }
                if self.channels.iter().all(|c| c.ended) {
                    self.advance_watermark(out);
                    out.push(GateAction::EndOfInput);
                }
            }
        }
        Ok(false)
    }

    /// A timer the gate asked for fired.
    pub fn on_timeout(&mut self, timer: Timeout, out: &mut Vec<GateAction<T>>) -> Result<()> {
        match timer {
            Timeout::Alignment(id) => self.alignment_timeout(id, out),
            Timeout::Queued {
                channel,
                checkpoint,
            } => self.expire_queued_barrier(channel, checkpoint, out),
        }
    }

    /// The coordinator aborted checkpoint `id`: a pending checkpoint not newer
    /// is canceled; barriers of `id` and older are ignored from now on.
    pub fn abort(&mut self, id: CheckpointId, out: &mut Vec<GateAction<T>>) {
        if let Some(alignment) = self.alignment.as_mut() {
            let actions = alignment.abort(id);
            self.apply(actions, Vec::new(), out);
        }
    }

    fn alignment_mut(&mut self) -> &mut BarrierHandler {
        self.alignment
            .as_mut()
            .expect("barriers are handled only when checkpointing")
    }

    /// A barrier reached the barrier logic: on arrival (unaligned, or on a
    /// recording channel) or when dequeued (aligned, at-least-once).
    /// `ahead`: for a barrier taken out of the middle of `channel`'s queue,
    /// how many queued elements precede it (otherwise all of them do: the
    /// barrier was handled on arrival, or the queue ahead was consumed).
    fn barrier(
        &mut self,
        channel: usize,
        barrier: Barrier,
        ahead: Option<usize>,
        out: &mut Vec<GateAction<T>>,
    ) -> Result<()> {
        let Some(alignment) = self.alignment.as_mut() else {
            return Ok(());
        };
        let actions = alignment.on_barrier(channel, barrier);
        let id = barrier.checkpoint_id;
        let started = alignment.pending() == Some(id)
            || actions
                .iter()
                .any(|a| matches!(a, BarrierAction::Snapshot { .. }));
        if started && self.started != Some(id) {
            self.started = Some(id);
            out.push(GateAction::AlignmentStarted { barrier, channel });
            if barrier.kind == BarrierKind::Aligned
                && self.codec.is_some()
                && let Some(timeout) = self.alignment_timeout
            {
                // Counted from the checkpoint's start, as Flink does.
                out.push(GateAction::ScheduleTimeout {
                    timer: Timeout::Alignment(id),
                    timeout,
                    started_ms: barrier.timestamp,
                });
            }
        }
        let unaligned = actions.iter().any(|a| {
            matches!(
                a,
                BarrierAction::Snapshot {
                    unaligned: true,
                    ..
                }
            )
        });
        if !unaligned {
            self.apply(actions, Vec::new(), out);
            return Ok(());
        }
        // What precedes the barrier on its own channel is channel state, and
        // so is what is queued ahead of barrier n on every channel still
        // awaiting it.
        let mut state = self.encode_queue(channel, None, ahead.unwrap_or(usize::MAX))?;
        let awaited = self.record_awaited(id, Some(channel), &mut state)?;
        self.apply(actions, state, out);
        self.settle_awaited(awaited, out)
    }

    /// An aligned barrier still queued on `channel` when its checkpoint's
    /// alignment timeout expired: it overtakes the data ahead of it.
    fn expire_queued_barrier(
        &mut self,
        channel: usize,
        id: CheckpointId,
        out: &mut Vec<GateAction<T>>,
    ) -> Result<()> {
        let Some(alignment) = self.alignment.as_ref() else {
            return Ok(());
        };
        if alignment.pending() == Some(id) {
            // Alignment started elsewhere: its own timeout handles it.
            return self.alignment_timeout(id, out);
        }
        let Some(queue) = self.channels.get_mut(channel).map(|c| &mut c.queue) else {
            return Ok(());
        };
        let Some(pos) = queue
            .iter()
            .position(|e| matches!(e, StreamElement::Barrier(b) if b.checkpoint_id == id))
        else {
            return Ok(());
        };
        let Some(StreamElement::Barrier(mut b)) = queue.remove(pos) else {
            return Ok(());
        };
        b.kind = BarrierKind::Unaligned;
        tracing::debug!(checkpoint = %id, channel, "alignment timed out in the queue; the barrier overtakes");
        self.barrier(channel, b, Some(pos), out)
    }

    /// The pending aligned checkpoint `id` waited too long: it continues
    /// unaligned.
    fn alignment_timeout(&mut self, id: CheckpointId, out: &mut Vec<GateAction<T>>) -> Result<()> {
        let Some(alignment) = self.alignment.as_mut() else {
            return Ok(());
        };
        if alignment.pending() != Some(id) {
            return Ok(());
        }
        let actions = alignment.alignment_timeout();
        if actions.is_empty() {
            return Ok(());
        }
        tracing::debug!(checkpoint = %id, "alignment timed out; checkpoint continues unaligned");
        let mut state = Vec::new();
        let awaited = self.record_awaited(id, None, &mut state)?;
        self.apply(actions, state, out);
        self.settle_awaited(awaited, out)
    }

    /// For an unaligned snapshot of `id`: appends to `state` what is queued
    /// ahead of barrier `id` on every recording channel but `except`, and
    /// takes out barrier `id` where it is queued already (it overtakes).
    fn record_awaited(
        &mut self,
        id: CheckpointId,
        except: Option<usize>,
        state: &mut ChannelState,
    ) -> Result<Awaited> {
        let mut awaited = Awaited::default();
        for ch in 0..self.channels.len() {
            if Some(ch) == except || !self.is_recording(ch) {
                continue;
            }
            state.extend(self.encode_queue(ch, Some(id), usize::MAX)?);
            let queue = &mut self.channels[ch].queue;
            if let Some(pos) = queue
                .iter()
                .position(|e| matches!(e, StreamElement::Barrier(b) if b.checkpoint_id == id))
                && let Some(StreamElement::Barrier(b)) = queue.remove(pos)
            {
                awaited.overtaking.push((ch, b));
            } else if queue.iter().any(|e| matches!(e, StreamElement::EndOfInput)) {
                // Its whole rest is recorded: no barrier n will come.
                awaited.ending.push(ch);
            }
        }
        Ok(awaited)
    }

    /// Feeds the barriers and ends [`record_awaited`](Self::record_awaited)
    /// found queued.
    fn settle_awaited(&mut self, awaited: Awaited, out: &mut Vec<GateAction<T>>) -> Result<()> {
        for (ch, b) in awaited.overtaking {
            self.barrier(ch, b, None, out)?;
        }
        for ch in awaited.ending {
            let actions = self.alignment_mut().on_end_of_input_arrival(ch);
            self.apply(actions, Vec::new(), out);
        }
        Ok(())
    }

    /// Turns the alignment's actions into the subtask's; `state` is the
    /// channel state recorded so far for an unaligned snapshot among them.
    fn apply(
        &mut self,
        actions: Vec<BarrierAction>,
        state: ChannelState,
        out: &mut Vec<GateAction<T>>,
    ) {
        let mut state = Some(state);
        for action in actions {
            match action {
                BarrierAction::Snapshot { barrier, unaligned } => {
                    if unaligned {
                        let recorded = state.take().unwrap_or_default();
                        self.recorded = Some((barrier.checkpoint_id, recorded));
                    }
                    out.push(GateAction::Snapshot {
                        barrier,
                        unaligned,
                        watermark: self.watermark,
                        channel_watermarks: self.channel_watermarks(),
                    });
                }
                BarrierAction::Complete(id) => {
                    let input_channel_state = self
                        .recorded
                        .take_if(|(r, _)| *r == id)
                        .map(|(_, s)| s)
                        .unwrap_or_default();
                    out.push(GateAction::Complete {
                        checkpoint: id,
                        input_channel_state,
                    });
                }
                BarrierAction::Canceled(id) => {
                    self.recorded.take_if(|(r, _)| *r == id);
                    out.push(GateAction::Canceled(id));
                }
            }
        }
    }

    /// Records an element arriving on a channel whose in-flight data is
    /// channel state of the pending unaligned checkpoint.
    fn record_arrival(&mut self, channel: usize, element: &StreamElement<T>) -> Result<()> {
        if !self.is_recording(channel) {
            return Ok(());
        }
        if let (Some(codec), Some((_, state))) = (&self.codec, self.recorded.as_mut()) {
            state.push((channel as u32, codec.encode(element)?));
        }
        Ok(())
    }

    /// Encodes at most `limit` queued elements of `channel`, up to (not
    /// including) the first barrier of checkpoint `upto`.
    fn encode_queue(
        &self,
        channel: usize,
        upto: Option<CheckpointId>,
        limit: usize,
    ) -> Result<ChannelState> {
        let Some(codec) = &self.codec else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for e in self.channels[channel].queue.iter().take(limit) {
            if let (StreamElement::Barrier(b), Some(id)) = (e, upto)
                && b.checkpoint_id == id
            {
                break;
            }
            out.push((channel as u32, codec.encode(e)?));
        }
        Ok(out)
    }

    /// Tells the chain when every live input went idle, or one became active.
    fn update_idleness(&mut self, out: &mut Vec<GateAction<T>>) {
        let mut live = self.channels.iter().filter(|c| !c.ended).peekable();
        let all_idle = live.peek().is_some() && live.all(|c| c.idle);
        if all_idle != self.idle_out {
            self.idle_out = all_idle;
            out.push(GateAction::WatermarkStatus(if all_idle {
                WatermarkStatus::Idle
            } else {
                WatermarkStatus::Active
            }));
        }
    }

    fn advance_watermark(&mut self, out: &mut Vec<GateAction<T>>) {
        let live = self.channels.iter().filter(|c| !c.idle || c.ended);
        if let Some(min) = live.map(|c| c.watermark).min()
            && min > self.watermark
        {
            self.watermark = min;
            self.metrics.watermark.store(min, Ordering::Relaxed);
            out.push(GateAction::Watermark(min));
        }
    }
}

/// Channels an unaligned snapshot found with barrier n, or the end, queued.
#[derive(Default)]
struct Awaited {
    overtaking: Vec<(usize, Barrier)>,
    ending: Vec<usize>,
}
