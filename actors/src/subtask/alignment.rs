//! Checkpoint barrier alignment for a subtask with N input channels: the rules
//! of the input gate ([`super::gate`]), as a pure state machine.
//!
//! The gate feeds [`BarrierHandler`] the barriers and end-of-input markers of
//! its input channels and gets back [`BarrierAction`]s: when to snapshot, when a
//! checkpoint is complete, when one was given up. The handler owns no queue, so
//! its rules are unit tested on their own below; the gate that plays the other
//! side of the contract (queues, channel state) is tested through random
//! interleavings in `actors/tests/barrier_props.rs`. It follows Flink's
//! `SingleCheckpointBarrierHandler`: one checkpoint is pending at a time and a
//! barrier of a newer checkpoint cancels the pending one.
//!
//! # Modes
//!
//! - **Aligned** (and savepoints): a channel that delivered barrier n is
//!   blocked until barrier n came from every live channel; then the subtask
//!   snapshots and everything is unblocked.
//! - **At-least-once**: nothing blocks; the snapshot is taken when the last live
//!   channel delivered barrier n.
//! - **Unaligned**: the first barrier n triggers the snapshot at once; the
//!   elements that precede barrier n on their channel and were not processed
//!   before the snapshot become input channel state.
//!
//! # The gate's side of the contract
//!
//! 1. Feed aligned, savepoint and at-least-once barriers when they are
//!    *dequeued* (processed in channel order); feed [`BarrierKind::Unaligned`]
//!    barriers when they *arrive* in the mailbox, without queueing them.
//! 2. Never process an element of a channel for which
//!    [`BarrierHandler::is_blocked`] is true.
//! 3. On `Snapshot { unaligned: true }` record as input channel state, for
//!    every channel, the queued (unprocessed) elements that precede barrier n
//!    on that channel:
//!    - after [`BarrierHandler::on_barrier`]: the *whole* queue of the channel
//!      that delivered the barrier (the barrier was handled on arrival, so all
//!      of that queue is ahead of it) and the whole queue of every channel for
//!      which [`BarrierHandler::is_recording`] is true;
//!    - after [`BarrierHandler::alignment_timeout`]: for every recording
//!      channel, its queued elements up to barrier n if barrier n is already
//!      queued there (then take that barrier out of the queue and feed it to
//!      the handler at once: it overtakes, as Flink turns it into a priority
//!      event), else its whole queue. Channels that already delivered barrier
//!      n are not recorded: what they queue is after the cut.
//! 4. While `is_recording(c)`, record every element that arrives on `c`, and
//!    feed a barrier that arrives on `c` on arrival (whatever its kind): that is
//!    what ends the recording of `c`.
//!    End of input arriving on a recording channel (or already queued there
//!    when the unaligned snapshot is taken) ends its recording too: feed it
//!    to [`BarrierHandler::on_end_of_input_arrival`] once it is recorded.
//! 5. Queued elements recorded as channel state are still processed normally
//!    after the snapshot; the recording only copies them.
//! 6. On `Canceled(n)` drop channel state recorded for n, unblock, and report
//!    n declined if its snapshot was taken.

use crate::element::{Barrier, BarrierKind};
use crate::ids::CheckpointId;

/// What the subtask must do after feeding an event to the handler. Several may
/// come at once, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BarrierAction {
    /// Take the synchronous snapshot of checkpoint `barrier.checkpoint_id` now
    /// and emit `barrier` on every output.
    ///
    /// `unaligned == true`: the barrier overtakes queued output (those batches
    /// become output channel state) and the subtask must record as input
    /// channel state (a) every element currently queued, unprocessed, ahead of
    /// the barrier on every channel for which
    /// [`is_recording`](BarrierHandler::is_recording) is now true, and on the
    /// channel whose barrier triggered the snapshot (all of its queue, since an
    /// unaligned barrier is handled on arrival), and (b) every element that
    /// arrives later on a recording channel until that channel's barrier for
    /// this checkpoint arrives. See the module documentation for the full
    /// contract, including the alignment-timeout case.
    Snapshot {
        /// The barrier to emit downstream. After an alignment timeout its kind
        /// is [`BarrierKind::Unaligned`], so downstream subtasks do not align.
        barrier: Barrier,
        /// Whether the snapshot is unaligned (channel state is recorded).
        unaligned: bool,
    },
    /// The checkpoint's barrier has arrived on every live channel: aligned →
    /// every channel is unblocked; unaligned → recording of channel state is
    /// complete (the subtask can now finish and ack the snapshot);
    /// at-least-once → the checkpoint is done. Always emitted after (or
    /// together with, later in the same `Vec`) its `Snapshot`.
    Complete(CheckpointId),
    /// A pending checkpoint was given up (a barrier of a newer checkpoint
    /// arrived before it completed, or [`abort`](BarrierHandler::abort) was
    /// called): unblock everything, drop any recorded channel state for it. If
    /// its `Snapshot` was already emitted the subtask must report it
    /// declined/aborted.
    Canceled(CheckpointId),
}

/// How the pending checkpoint is being handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Block delivered channels, snapshot when all live channels delivered.
    /// `timeout_allowed` is false for savepoints, which stay aligned.
    Aligned { timeout_allowed: bool },
    /// Snapshot taken at the first barrier; channels still awaited record.
    Unaligned,
    /// No blocking; snapshot when all live channels delivered.
    AtLeastOnce,
}

/// The checkpoint whose barrier came from some but not all live channels.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The first barrier seen for it (its kind decides the mode).
    barrier: Barrier,
    mode: Mode,
    /// Live channels that have not delivered the barrier yet.
    awaiting: usize,
}

/// Per-channel flags.
#[derive(Clone, Copy, Debug, Default)]
struct Channel {
    /// End of input was seen: the channel is no longer awaited.
    ended: bool,
    /// The pending checkpoint's barrier came from this channel.
    delivered: bool,
}

/// Barrier alignment state machine of one subtask with N input channels.
///
/// Feed it barriers, end-of-input markers, aborts and alignment timeouts; act
/// on the returned [`BarrierAction`]s in order; ask it which channels are
/// blocked or recording. See the module documentation for the contract.
#[derive(Clone, Debug)]
pub struct BarrierHandler {
    channels: Vec<Channel>,
    /// Channels not ended.
    live: usize,
    pending: Option<Pending>,
    /// The newest checkpoint completed, canceled or aborted: barriers of it
    /// and of older checkpoints are ignored.
    finished: Option<CheckpointId>,
}

impl BarrierHandler {
    /// A handler for `channels` input channels (>= 1).
    pub fn new(channels: usize) -> Self {
        debug_assert!(channels >= 1, "a subtask with inputs has >= 1 channel");
        BarrierHandler {
            channels: vec![Channel::default(); channels],
            live: channels,
            pending: None,
            finished: None,
        }
    }

    /// A barrier arrived on `channel`. Call it for aligned / at-least-once /
    /// savepoint barriers when the barrier is dequeued in channel order
    /// (processing time); for [`BarrierKind::Unaligned`] barriers call it when
    /// the barrier arrives in the mailbox (before the elements queued ahead of
    /// it are processed).
    ///
    /// Ignored (empty result): barriers of a checkpoint not newer than the
    /// last completed, canceled or aborted one, barriers older than the
    /// pending one, duplicates, and barriers on an ended or unknown channel.
    pub fn on_barrier(&mut self, channel: usize, barrier: Barrier) -> Vec<BarrierAction> {
        let id = barrier.checkpoint_id;
        let mut actions = Vec::new();
        match self.channels.get(channel) {
            Some(c) if !c.ended => {}
            _ => {
                debug_assert!(channel < self.channels.len(), "unknown channel {channel}");
                return actions;
            }
        }
        if self.finished.is_some_and(|f| id <= f) {
            return actions;
        }
        match self.pending {
            Some(p) if id < p.barrier.checkpoint_id => return actions,
            Some(p) if id == p.barrier.checkpoint_id => {
                if self.channels[channel].delivered {
                    return actions;
                }
                if barrier.kind == BarrierKind::Unaligned {
                    // An upstream subtask's alignment timed out and its
                    // barrier overtook: this checkpoint is unaligned here
                    // too, snapshotted before the barrier counts, so that
                    // the data it overtook on this channel is recorded.
                    actions.extend(self.alignment_timeout());
                }
                self.channels[channel].delivered = true;
                self.awaited_one(&mut actions);
            }
            Some(p) => {
                self.cancel(p.barrier.checkpoint_id, &mut actions);
                self.start(channel, barrier, &mut actions);
            }
            None => self.start(channel, barrier, &mut actions),
        }
        actions
    }

    /// `channel` ended (end of input): it is no longer awaited; this may
    /// complete a pending checkpoint.
    pub fn on_end_of_input(&mut self, channel: usize) -> Vec<BarrierAction> {
        let mut actions = Vec::new();
        let Some(c) = self.channels.get_mut(channel) else {
            debug_assert!(false, "unknown channel {channel}");
            return actions;
        };
        if c.ended {
            return actions;
        }
        c.ended = true;
        let delivered = c.delivered;
        self.live -= 1;
        if self.pending.is_some() && !delivered {
            self.awaited_one(&mut actions);
        }
        actions
    }

    /// End of input *arrived* on `channel` (queued, not yet dequeued) while
    /// the channel records for the pending unaligned checkpoint: no barrier
    /// of it will come there, and everything the channel still delivers is
    /// recorded already, so the checkpoint stops awaiting it instead of
    /// waiting until the queued data ahead of the end is processed. The
    /// channel stays live until its end of input is dequeued
    /// ([`on_end_of_input`](Self::on_end_of_input)). No-op unless
    /// [`is_recording`](Self::is_recording).
    pub fn on_end_of_input_arrival(&mut self, channel: usize) -> Vec<BarrierAction> {
        let mut actions = Vec::new();
        if self.is_recording(channel) {
            self.channels[channel].delivered = true;
            self.awaited_one(&mut actions);
        }
        actions
    }

    /// The coordinator aborted checkpoint `id`: cancel it if pending; ignore
    /// its barriers (and those of any older id) from now on.
    ///
    /// A pending checkpoint older than `id` is canceled too: its remaining
    /// barriers could only arrive after barrier `id` on their channels, and
    /// those are ignored now, so it could never complete.
    pub fn abort(&mut self, id: CheckpointId) -> Vec<BarrierAction> {
        let mut actions = Vec::new();
        if let Some(p) = self.pending
            && p.barrier.checkpoint_id <= id
        {
            self.cancel(p.barrier.checkpoint_id, &mut actions);
        }
        self.finish(id);
        actions
    }

    /// Alignment timeout of a pending aligned checkpoint expired: switch it to
    /// unaligned. Returns `[Snapshot { unaligned: true }]` (the barrier's kind
    /// turned to [`BarrierKind::Unaligned`]): channels that already delivered
    /// the barrier are unblocked (their later data is after the cut), channels
    /// still awaiting it start recording.
    ///
    /// It never completes the checkpoint: a pending checkpoint always awaits
    /// some live channel. No-op (empty result) when nothing aligned is pending
    /// (an unaligned or timed-out one is already snapshotted). Savepoints never
    /// time out (like Flink's): they must stay self-contained, without
    /// channel state.
    pub fn alignment_timeout(&mut self) -> Vec<BarrierAction> {
        let mut actions = Vec::new();
        if let Some(p) = self.pending.as_mut()
            && matches!(
                p.mode,
                Mode::Aligned {
                    timeout_allowed: true
                }
            )
        {
            p.mode = Mode::Unaligned;
            p.barrier.kind = BarrierKind::Unaligned;
            actions.push(BarrierAction::Snapshot {
                barrier: p.barrier,
                unaligned: true,
            });
        }
        actions
    }

    /// Whether elements of `channel` must not be processed now (aligned: its
    /// barrier for the pending checkpoint arrived).
    pub fn is_blocked(&self, channel: usize) -> bool {
        matches!(
            self.pending,
            Some(Pending {
                mode: Mode::Aligned { .. },
                ..
            })
        ) && self
            .channels
            .get(channel)
            .is_some_and(|c| c.delivered && !c.ended)
    }

    /// Whether elements arriving on `channel` are input channel state of the
    /// pending unaligned checkpoint.
    pub fn is_recording(&self, channel: usize) -> bool {
        matches!(
            self.pending,
            Some(Pending {
                mode: Mode::Unaligned,
                ..
            })
        ) && self
            .channels
            .get(channel)
            .is_some_and(|c| !c.delivered && !c.ended)
    }

    /// The checkpoint currently pending (barrier seen on some but not all live
    /// channels), if any.
    pub fn pending(&self) -> Option<CheckpointId> {
        self.pending.map(|p| p.barrier.checkpoint_id)
    }

    /// Makes `barrier`, the first one of its checkpoint, arriving on
    /// `channel`, the pending checkpoint.
    fn start(&mut self, channel: usize, barrier: Barrier, actions: &mut Vec<BarrierAction>) {
        for c in &mut self.channels {
            c.delivered = false;
        }
        self.channels[channel].delivered = true;
        let mode = match barrier.kind {
            BarrierKind::Aligned => Mode::Aligned {
                timeout_allowed: true,
            },
            BarrierKind::Savepoint => Mode::Aligned {
                timeout_allowed: false,
            },
            BarrierKind::Unaligned => Mode::Unaligned,
            BarrierKind::AtLeastOnce => Mode::AtLeastOnce,
        };
        if mode == Mode::Unaligned {
            actions.push(BarrierAction::Snapshot {
                barrier,
                unaligned: true,
            });
        }
        // `channel` is live (checked by the caller) and delivered.
        self.pending = Some(Pending {
            barrier,
            mode,
            awaiting: self.live - 1,
        });
        if self.live == 1 {
            self.complete(actions);
        }
    }

    /// One more live channel is no longer awaited by the pending checkpoint.
    fn awaited_one(&mut self, actions: &mut Vec<BarrierAction>) {
        if let Some(p) = self.pending.as_mut() {
            p.awaiting -= 1;
            if p.awaiting == 0 {
                self.complete(actions);
            }
        }
    }

    /// Completes the pending checkpoint, snapshotting first unless done.
    fn complete(&mut self, actions: &mut Vec<BarrierAction>) {
        let Some(p) = self.pending.take() else {
            return;
        };
        if p.mode != Mode::Unaligned {
            actions.push(BarrierAction::Snapshot {
                barrier: p.barrier,
                unaligned: false,
            });
        }
        actions.push(BarrierAction::Complete(p.barrier.checkpoint_id));
        self.finish(p.barrier.checkpoint_id);
    }

    /// Gives up the pending checkpoint `id`.
    fn cancel(&mut self, id: CheckpointId, actions: &mut Vec<BarrierAction>) {
        self.pending = None;
        actions.push(BarrierAction::Canceled(id));
        self.finish(id);
    }

    /// Barriers of `id` and older are ignored from now on.
    fn finish(&mut self, id: CheckpointId) {
        self.finished = Some(self.finished.map_or(id, |f| f.max(id)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BarrierAction::{Canceled, Complete, Snapshot};

    fn barrier(id: u64, kind: BarrierKind) -> Barrier {
        Barrier {
            checkpoint_id: CheckpointId(id),
            timestamp: 1_000 + id as i64,
            kind,
        }
    }

    fn aligned(id: u64) -> Barrier {
        barrier(id, BarrierKind::Aligned)
    }

    fn unaligned(id: u64) -> Barrier {
        barrier(id, BarrierKind::Unaligned)
    }

    fn snap(b: Barrier, unaligned: bool) -> BarrierAction {
        Snapshot {
            barrier: b,
            unaligned,
        }
    }

    fn done(id: u64) -> BarrierAction {
        Complete(CheckpointId(id))
    }

    fn canceled(id: u64) -> BarrierAction {
        Canceled(CheckpointId(id))
    }

    #[test]
    fn unaligned_end_of_input_arrival_ends_recording() {
        let mut h = BarrierHandler::new(2);
        assert_eq!(
            h.on_barrier(0, unaligned(1)),
            vec![snap(unaligned(1), true)]
        );
        assert!(h.is_recording(1));
        // Channel 1's end of input is queued behind data: the checkpoint
        // completes without waiting for that data to be processed.
        assert_eq!(h.on_end_of_input_arrival(1), vec![done(1)]);
        assert!(!h.is_recording(1));
        // Dequeuing it later changes nothing for checkpoint 1 ...
        assert_eq!(h.on_end_of_input(1), vec![]);
        // ... and the next checkpoint awaits channel 0 only.
        assert_eq!(
            h.on_barrier(0, unaligned(2)),
            vec![snap(unaligned(2), true), done(2)]
        );
    }

    #[test]
    fn end_of_input_arrival_does_not_touch_aligned() {
        let mut h = BarrierHandler::new(2);
        assert_eq!(h.on_barrier(0, aligned(1)), vec![]);
        // Aligned: the queued data ahead of the end must be processed first.
        assert_eq!(h.on_end_of_input_arrival(1), vec![]);
        assert_eq!(h.on_end_of_input(1), vec![snap(aligned(1), false), done(1)]);
    }

    #[test]
    fn aligned_one_channel_completes_at_once() {
        let mut h = BarrierHandler::new(1);
        assert_eq!(
            h.on_barrier(0, aligned(1)),
            vec![snap(aligned(1), false), done(1)]
        );
        assert_eq!(h.pending(), None);
        assert!(!h.is_blocked(0));
    }

    #[test]
    fn aligned_three_channels_blocks_until_all_delivered() {
        let mut h = BarrierHandler::new(3);
        assert!(h.on_barrier(1, aligned(1)).is_empty());
        assert_eq!(h.pending(), Some(CheckpointId(1)));
        assert!(h.is_blocked(1));
        assert!(!h.is_blocked(0) && !h.is_blocked(2));
        assert!(!h.is_recording(0));
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert!(h.is_blocked(0) && h.is_blocked(1) && !h.is_blocked(2));
        assert_eq!(
            h.on_barrier(2, aligned(1)),
            vec![snap(aligned(1), false), done(1)]
        );
        assert!((0..3).all(|c| !h.is_blocked(c)));
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn savepoint_is_aligned() {
        let sp = barrier(1, BarrierKind::Savepoint);
        let mut h = BarrierHandler::new(2);
        assert!(h.on_barrier(0, sp).is_empty());
        assert!(h.is_blocked(0));
        assert_eq!(h.on_barrier(1, sp), vec![snap(sp, false), done(1)]);
    }

    #[test]
    fn duplicate_barrier_is_ignored() {
        let mut h = BarrierHandler::new(2);
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(h.pending(), Some(CheckpointId(1)));
        assert_eq!(h.on_barrier(1, aligned(1)).len(), 2);
    }

    #[test]
    fn at_least_once_never_blocks() {
        let b = barrier(1, BarrierKind::AtLeastOnce);
        let mut h = BarrierHandler::new(3);
        assert!(h.on_barrier(0, b).is_empty());
        assert!(h.on_barrier(2, b).is_empty());
        assert!((0..3).all(|c| !h.is_blocked(c) && !h.is_recording(c)));
        assert_eq!(h.on_barrier(1, b), vec![snap(b, false), done(1)]);
    }

    #[test]
    fn unaligned_snapshots_on_first_barrier_and_records_the_others() {
        let mut h = BarrierHandler::new(3);
        assert_eq!(
            h.on_barrier(1, unaligned(1)),
            vec![snap(unaligned(1), true)]
        );
        assert!(
            !h.is_recording(1),
            "the triggering channel is past its barrier"
        );
        assert!(h.is_recording(0) && h.is_recording(2));
        assert!((0..3).all(|c| !h.is_blocked(c)));
        assert!(h.on_barrier(0, unaligned(1)).is_empty());
        assert!(!h.is_recording(0) && h.is_recording(2));
        assert_eq!(h.on_barrier(2, unaligned(1)), vec![done(1)]);
        assert!((0..3).all(|c| !h.is_recording(c)));
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn unaligned_one_channel_completes_at_once() {
        let mut h = BarrierHandler::new(1);
        assert_eq!(
            h.on_barrier(0, unaligned(4)),
            vec![snap(unaligned(4), true), done(4)]
        );
        assert!(!h.is_recording(0));
    }

    #[test]
    fn newer_barrier_cancels_pending_and_older_ones_are_ignored() {
        let mut h = BarrierHandler::new(2);
        assert_eq!(
            h.on_barrier(0, unaligned(1)),
            vec![snap(unaligned(1), true)]
        );
        assert_eq!(
            h.on_barrier(0, unaligned(2)),
            vec![canceled(1), snap(unaligned(2), true)]
        );
        assert_eq!(h.pending(), Some(CheckpointId(2)));
        assert!(h.is_recording(1));
        // Channel 1's barrier 1 is late: ignored, and channel 1 still records.
        assert!(h.on_barrier(1, unaligned(1)).is_empty());
        assert!(h.is_recording(1));
        assert_eq!(h.on_barrier(1, unaligned(2)), vec![done(2)]);
    }

    #[test]
    fn newer_aligned_barrier_cancels_and_unblocks() {
        let mut h = BarrierHandler::new(3);
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(h.on_barrier(1, aligned(3)), vec![canceled(1)]);
        assert!(!h.is_blocked(0));
        assert!(h.is_blocked(1));
        assert_eq!(h.pending(), Some(CheckpointId(3)));
        // Barriers of 1 and 2 (older than the pending 3) are ignored.
        assert!(h.on_barrier(2, aligned(1)).is_empty());
        assert!(h.on_barrier(2, aligned(2)).is_empty());
        assert_eq!(h.pending(), Some(CheckpointId(3)));
    }

    #[test]
    fn completed_checkpoint_barriers_are_ignored() {
        let mut h = BarrierHandler::new(1);
        assert_eq!(h.on_barrier(0, aligned(2)).len(), 2);
        assert!(h.on_barrier(0, aligned(2)).is_empty());
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn abort_cancels_pending_and_ignores_its_barriers() {
        let mut h = BarrierHandler::new(2);
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(h.abort(CheckpointId(1)), vec![canceled(1)]);
        assert!(!h.is_blocked(0));
        assert_eq!(h.pending(), None);
        assert!(h.on_barrier(1, aligned(1)).is_empty());
        assert_eq!(h.pending(), None);
        // Aborting an already-finished checkpoint is a no-op.
        assert!(h.abort(CheckpointId(1)).is_empty());
    }

    #[test]
    fn abort_before_start_ignores_that_checkpoint_and_older() {
        let mut h = BarrierHandler::new(2);
        assert!(h.abort(CheckpointId(2)).is_empty());
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert!(h.on_barrier(0, aligned(2)).is_empty());
        assert_eq!(h.pending(), None);
        assert!(h.on_barrier(0, aligned(3)).is_empty());
        assert_eq!(h.pending(), Some(CheckpointId(3)));
    }

    #[test]
    fn abort_of_newer_id_cancels_older_pending() {
        let mut h = BarrierHandler::new(2);
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(h.abort(CheckpointId(2)), vec![canceled(1)]);
        // Abort of an older id leaves a pending checkpoint alone.
        assert!(h.on_barrier(0, aligned(3)).is_empty());
        assert!(h.abort(CheckpointId(2)).is_empty());
        assert_eq!(h.pending(), Some(CheckpointId(3)));
    }

    #[test]
    fn end_of_input_completes_aligned() {
        let mut h = BarrierHandler::new(3);
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert!(h.on_barrier(1, aligned(1)).is_empty());
        assert_eq!(h.on_end_of_input(2), vec![snap(aligned(1), false), done(1)]);
        assert!((0..3).all(|c| !h.is_blocked(c)));
        // The ended channel is not awaited by later checkpoints.
        assert!(h.on_barrier(0, aligned(2)).is_empty());
        assert_eq!(
            h.on_barrier(1, aligned(2)),
            vec![snap(aligned(2), false), done(2)]
        );
    }

    #[test]
    fn end_of_input_completes_unaligned() {
        let mut h = BarrierHandler::new(2);
        assert_eq!(
            h.on_barrier(0, unaligned(1)),
            vec![snap(unaligned(1), true)]
        );
        assert!(h.is_recording(1));
        assert_eq!(h.on_end_of_input(1), vec![done(1)]);
        assert!(!h.is_recording(1));
    }

    #[test]
    fn end_of_input_of_a_delivered_channel_does_not_complete() {
        let mut h = BarrierHandler::new(3);
        assert_eq!(
            h.on_barrier(0, unaligned(1)),
            vec![snap(unaligned(1), true)]
        );
        assert!(h.on_end_of_input(0).is_empty());
        assert!(h.on_end_of_input(0).is_empty(), "second end is ignored");
        assert!(h.on_barrier(1, unaligned(1)).is_empty());
        assert_eq!(h.on_end_of_input(2), vec![done(1)]);
        // Barriers on an ended channel are ignored.
        assert!(h.on_barrier(0, unaligned(2)).is_empty());
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn all_channels_ended_before_any_barrier() {
        let mut h = BarrierHandler::new(2);
        assert!(h.on_end_of_input(0).is_empty());
        assert!(h.on_end_of_input(1).is_empty());
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn alignment_timeout_switches_to_unaligned() {
        let mut h = BarrierHandler::new(3);
        assert!(h.alignment_timeout().is_empty(), "nothing pending");
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert!(h.is_blocked(0));
        assert_eq!(h.alignment_timeout(), vec![snap(unaligned(1), true)]);
        assert!((0..3).all(|c| !h.is_blocked(c)));
        assert!(!h.is_recording(0));
        assert!(h.is_recording(1) && h.is_recording(2));
        assert!(h.alignment_timeout().is_empty(), "already snapshotted");
        assert!(h.on_barrier(1, aligned(1)).is_empty());
        assert!(!h.is_recording(1));
        assert_eq!(h.on_barrier(2, aligned(1)), vec![done(1)]);
        assert_eq!(h.pending(), None);
    }

    #[test]
    fn alignment_timeout_ignores_other_modes() {
        let mut h = BarrierHandler::new(2);
        h.on_barrier(0, barrier(1, BarrierKind::Savepoint));
        assert!(h.alignment_timeout().is_empty(), "savepoints stay aligned");
        assert!(h.is_blocked(0));

        let mut h = BarrierHandler::new(2);
        h.on_barrier(0, barrier(1, BarrierKind::AtLeastOnce));
        assert!(h.alignment_timeout().is_empty());

        let mut h = BarrierHandler::new(2);
        h.on_barrier(0, unaligned(1));
        assert!(h.alignment_timeout().is_empty());
    }

    #[test]
    fn unaligned_barrier_switches_a_pending_aligned_checkpoint() {
        // Snapshot (unaligned) before the barrier counts, even when it is
        // the last one awaited: what it overtook must be recorded.
        let mut h = BarrierHandler::new(2);
        assert!(h.on_barrier(0, aligned(1)).is_empty());
        assert_eq!(
            h.on_barrier(1, unaligned(1)),
            vec![snap(unaligned(1), true), done(1)]
        );
        // With a third channel still awaited, it records from then on.
        let mut h = BarrierHandler::new(3);
        h.on_barrier(0, aligned(2));
        assert_eq!(
            h.on_barrier(1, unaligned(2)),
            vec![snap(unaligned(2), true)]
        );
        assert!(!h.is_blocked(0) && h.is_recording(2) && !h.is_recording(1));
        assert_eq!(h.on_barrier(2, aligned(2)), vec![done(2)]);
        // Savepoints stay aligned.
        let mut h = BarrierHandler::new(2);
        h.on_barrier(0, barrier(3, BarrierKind::Savepoint));
        assert_eq!(
            h.on_barrier(1, unaligned(3)),
            vec![snap(barrier(3, BarrierKind::Savepoint), false), done(3)]
        );
    }

    #[test]
    fn timed_out_checkpoint_is_canceled_by_newer_barrier() {
        let mut h = BarrierHandler::new(2);
        h.on_barrier(0, aligned(1));
        assert_eq!(h.alignment_timeout().len(), 1);
        assert_eq!(h.on_barrier(0, aligned(2)), vec![canceled(1)]);
        assert!(h.is_blocked(0) && !h.is_recording(1));
    }
}
