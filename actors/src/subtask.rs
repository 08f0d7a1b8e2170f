//! The subtask actor: one parallel instance of an operator chain.
//!
//! 1. **Data flow.** A `Deliver` handler only appends the element to its input
//!    channel's queue and schedules a `Step`; the work happens in steps of at
//!    most `batches_per_step` batches, so control messages (credits, cancel)
//!    interleave with processing and a mailbox drain is cheap.
//! 2. **Flow control.** Each consumed batch returns a credit to its sender (in
//!    groups of half the window). A step stops early while a record writer is
//!    backpressured and resumes when credit arrives.
//! 3. **Watermarks.** A subtask's watermark is the minimum over its live input
//!    channels (finished channels do not count); it never goes backwards.
//! 4. **Lifecycle.** End-of-input on every channel (or an exhausted source)
//!    flushes the chain; once every output is drained the subtask reports
//!    `SubtaskFinished` and stops — or, when the job ends with a final
//!    checkpoint (FLIP-147), reports `SubtaskEnded` to the coordinator,
//!    snapshots its final state when triggered directly, and stops once
//!    such a checkpoint completed (its operators committed on it). A
//!    failure (error or panic, caught here) is reported as `SubtaskFailed`
//!    naming the operator and subtask.
//! 5. **Metrics.** Queue lengths and watermarks go to relaxed atomics per batch
//!    or per watermark; time is accounted as busy, backpressured (a step stopped
//!    on a full output queue, until the credit grant that frees it) or idle
//!    (running with nothing queued) at the end of each step and credit grant
//!    only, so the data path never reads the clock per record.

use crate::barrier::{BarrierAction, BarrierHandler};
use crate::chain::ChainInput;
use crate::config::RuntimeConfig;
use crate::element::{Barrier, BarrierKind};
use crate::element::{MAX_WATERMARK, MIN_WATERMARK, StreamElement, Timestamp, WatermarkStatus};
use crate::error::{Error, Result, panic_message};
use crate::ids::CheckpointId;
use crate::ids::{ChannelId, SubtaskIndex, VertexId};
use crate::messages::{
    CancelSubtask, ConnectChannel, Deliver, GrantCredit, InjectFailure, Step, SubtaskEnded,
    SubtaskFailed, SubtaskFinished,
};
use crate::metrics::{QueueMetrics, WaitState};
use crate::snapshot::{
    AcknowledgeCheckpoint, ChainSnapshot, CheckpointLink, DeclineCheckpoint, ElementCodec,
    NotifyCheckpoint, OperatorHandles, TriggerCheckpoint,
};
use crate::source::{SourceDriver, SourceStep};
use crate::writer::{OutputTarget, WriterControl};
use actix::prelude::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Who a subtask is and where it reports.
#[derive(Clone)]
pub struct SubtaskSetup {
    /// The vertex (chain) it runs.
    pub vertex: VertexId,
    /// The chain's name, for errors and logs.
    pub name: String,
    /// Its index among the vertex's subtasks.
    pub index: SubtaskIndex,
    /// Number of input channels (zero for a source).
    pub inputs: usize,
    /// Batching and flow-control settings.
    pub config: RuntimeConfig,
    /// Where `SubtaskFinished` goes.
    pub on_finished: Recipient<SubtaskFinished>,
    /// Where `SubtaskFailed` goes.
    pub on_failed: Recipient<SubtaskFailed>,
    /// Queue, watermark and time counters.
    pub queue_metrics: Arc<QueueMetrics>,
    /// Where checkpoint acks go and how state is persisted; `None` when the
    /// job does not checkpoint (barriers are then forwarded only).
    pub checkpoint: Option<CheckpointLink>,
    /// What the subtask restores before any new element, when the job
    /// starts from a checkpoint.
    pub restore: Option<SubtaskRestore>,
    /// Consume input records at most this fast (records per second): a
    /// throttled sink, which backpressures its inputs without blocking.
    pub input_rate: Option<f64>,
    /// Set when the subtask first processes (or, a source, emits) records:
    /// how long a restart took to get records flowing again.
    pub activity: Option<Arc<std::sync::OnceLock<Instant>>>,
}

/// Paces input consumption: records consumed vs. the rate times the time
/// since the first record.
struct Throttle {
    per_second: f64,
    started: Option<Instant>,
    consumed: u64,
}

impl Throttle {
    /// How long to wait before consuming more, or `None` to go on now.
    fn wait(&mut self) -> Option<std::time::Duration> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let allowed = started.elapsed().as_secs_f64() * self.per_second;
        let ahead = self.consumed as f64 - allowed;
        (ahead > 0.0).then(|| std::time::Duration::from_secs_f64(ahead / self.per_second))
    }
}

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

/// A snapshot taken synchronously whose asynchronous part has not started:
/// unaligned snapshots wait here until their channel state is complete.
struct PendingCapture {
    barrier: Barrier,
    unaligned: bool,
    snapshot: ChainSnapshot,
    watermark: Timestamp,
    channel_watermarks: Vec<Timestamp>,
    input_channel_state: Vec<(u32, Vec<u8>)>,
    alignment_ms: u64,
    sync_ms: u64,
}

/// Checkpoint bookkeeping of one subtask.
struct Checkpointing {
    link: CheckpointLink,
    barriers: BarrierHandler,
    /// When the pending checkpoint's first barrier was seen.
    first_barrier: Option<(CheckpointId, Instant)>,
    capture: Option<PendingCapture>,
    /// Asynchronous parts still running, acks held included (the subtask
    /// finishes after them).
    in_flight: usize,
    /// Aligned checkpoints whose barrier still waits in an output queue.
    held: Vec<HeldAck>,
    /// The first checkpoint snapshotted after the subtask ended: its
    /// completion (or a later one's) finishes the subtask.
    final_snapshot: Option<CheckpointId>,
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

/// What heads a chain: a source, or the network inputs.
pub enum Head<IN> {
    /// A source subtask.
    Source(Box<dyn SourceDriver>),
    /// A subtask fed by input channels.
    Inputs(Box<dyn ChainInput<IN>>),
}

/// Collects the record writers a chain creates while it is built, so the actor
/// can route credits to them.
#[derive(Default)]
pub struct ChainBuilder {
    writers: Vec<Rc<RefCell<dyn WriterControl>>>,
}

impl ChainBuilder {
    /// Registers a writer's control handle.
    pub fn add_writer(&mut self, writer: Rc<RefCell<dyn WriterControl>>) {
        self.writers.push(writer);
    }
}

struct InputChannel<T> {
    queue: VecDeque<StreamElement<T>>,
    queued_batches: usize,
    /// Batches re-injected from channel state at the head of the queue: they
    /// took no credit, so consuming them returns none.
    restored_batches: usize,
    credit_to: Option<(Recipient<GrantCredit>, u32, u32)>,
    ungranted: u32,
    ended: bool,
    idle: bool,
    watermark: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Finishing,
    /// Input processed and outputs drained; waiting for the final
    /// checkpoint (see [`CheckpointLink::final_checkpoint`]).
    Ended,
    Done,
}

/// One parallel instance of an operator chain, as an actix actor.
pub struct SubtaskActor<IN: Send + 'static> {
    setup: SubtaskSetup,
    head: Option<Head<IN>>,
    build_error: Option<Error>,
    inputs: Vec<InputChannel<IN>>,
    writers: Vec<Rc<RefCell<dyn WriterControl>>>,
    phase: Phase,
    scheduled: bool,
    next_channel: usize,
    watermark: Timestamp,
    grant_threshold: u32,
    /// Whether this subtask told its outputs that it is idle.
    idle_out: bool,
    /// What the time counters currently account this subtask's time to.
    wait: WaitState,
    /// Encodes input elements (unaligned channel state); `None` keeps
    /// unaligned barriers in channel order.
    codec: Option<Arc<dyn ElementCodec<IN>>>,
    checkpointing: Option<Checkpointing>,
    throttle: Option<Throttle>,
    /// A throttled step waits for a timer; no other step runs meanwhile.
    throttled: bool,
    /// A source paused after the barrier of the checkpoint the job stops
    /// with, until that checkpoint completes (finish) or is aborted.
    paused: Option<CheckpointId>,
}

// The actor is never pinned-projected; its queues hold values by ownership only.
impl<IN: Send + 'static> Unpin for SubtaskActor<IN> {}

impl<IN: Send + 'static> SubtaskActor<IN> {
    /// Starts a subtask on `arbiter`; `build` runs there and creates the chain.
    pub fn spawn<B>(
        arbiter: &ArbiterHandle,
        setup: SubtaskSetup,
        codec: Option<Arc<dyn ElementCodec<IN>>>,
        build: B,
    ) -> Addr<Self>
    where
        B: FnOnce(&mut ChainBuilder) -> Result<Head<IN>> + Send + 'static,
    {
        Self::start_in_arbiter(arbiter, move |_ctx| {
            let mut builder = ChainBuilder::default();
            let built = catch_unwind(AssertUnwindSafe(|| build(&mut builder)));
            let (head, build_error) = match built {
                Ok(Ok(h)) => (Some(h), None),
                Ok(Err(e)) => (None, Some(e)),
                Err(p) => (
                    None,
                    Some(Error::UserPanic {
                        operator: setup.name.clone(),
                        subtask: setup.index,
                        message: panic_message(&*p),
                    }),
                ),
            };
            let inputs = (0..setup.inputs)
                .map(|_| InputChannel {
                    queue: VecDeque::new(),
                    queued_batches: 0,
                    restored_batches: 0,
                    credit_to: None,
                    ungranted: 0,
                    ended: false,
                    idle: false,
                    watermark: MIN_WATERMARK,
                })
                .collect();
            let grant_threshold = (setup.config.credits / 2).max(1);
            let checkpointing = setup.checkpoint.clone().map(|link| Checkpointing {
                link,
                barriers: BarrierHandler::new(setup.inputs.max(1)),
                first_barrier: None,
                capture: None,
                in_flight: 0,
                held: Vec::new(),
                final_snapshot: None,
            });
            let throttle = setup.input_rate.map(|per_second| Throttle {
                per_second,
                started: None,
                consumed: 0,
            });
            SubtaskActor {
                codec,
                checkpointing,
                throttle,
                throttled: false,
                paused: None,
                setup,
                head,
                build_error,
                inputs,
                writers: builder.writers,
                phase: Phase::Running,
                scheduled: false,
                next_channel: 0,
                watermark: MIN_WATERMARK,
                grant_threshold,
                idle_out: false,
                wait: WaitState::Busy,
            }
        })
    }

    /// The endpoint upstream writers send to for input channel `channel`.
    pub fn target(addr: &Addr<Self>, channel: ChannelId) -> OutputTarget<IN> {
        OutputTarget {
            data: addr.clone().recipient(),
            connect: addr.clone().recipient(),
            channel,
        }
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        if !self.scheduled && !self.throttled && !matches!(self.phase, Phase::Done | Phase::Ended) {
            self.scheduled = true;
            ctx.notify(Step);
        }
    }

    #[inline]
    fn mark_active(&self) {
        if let Some(a) = &self.setup.activity
            && a.get().is_none()
        {
            let _ = a.set(Instant::now());
        }
    }

    fn backpressured(&self) -> bool {
        self.writers.iter().any(|w| w.borrow().backpressured())
    }

    /// Whether the chain holds output of an input it already took (a
    /// flat_map suspended in the middle of a record): it goes on before
    /// any new input element, and no snapshot cuts through it.
    fn chain_pending(&self) -> bool {
        matches!(&self.head, Some(Head::Inputs(chain)) if chain.has_pending())
    }

    /// Lets the chain emit all of its pending output now, whatever the
    /// credit: a snapshot must not cut through a record. Only a barrier
    /// that overtakes queued input (unaligned, alignment timeout) needs it;
    /// any other element waits for the pending output in the step loop.
    fn finish_pending(&mut self) -> Result<()> {
        if let Some(Head::Inputs(chain)) = self.head.as_mut() {
            while chain.has_pending() {
                chain.resume()?;
            }
        }
        Ok(())
    }

    /// Whether an unblocked channel holds an element (a channel blocked by
    /// barrier alignment does not count: stepping cannot consume it), or the
    /// chain has pending output to resume.
    fn has_ready_input(&self) -> bool {
        self.chain_pending()
            || self.inputs.iter().enumerate().any(|(c, ch)| {
                !ch.queue.is_empty()
                    && !self
                        .checkpointing
                        .as_ref()
                        .is_some_and(|cp| cp.barriers.is_blocked(c))
            })
    }

    fn has_input_work(&self) -> bool {
        self.inputs.iter().any(|c| !c.queue.is_empty())
    }

    /// Accounts the subtask's time from now on: backpressured (an output queue
    /// is full), idle (a running subtask with nothing queued) or busy. Called
    /// once per step and per credit grant, never per record.
    fn update_wait(&mut self) {
        let to = if matches!(self.phase, Phase::Done | Phase::Ended) {
            WaitState::Busy
        } else if self.backpressured() {
            WaitState::Backpressured
        } else if self.phase == Phase::Running
            && matches!(self.head, Some(Head::Inputs(_)))
            && !self.has_input_work()
        {
            WaitState::Idle
        } else {
            WaitState::Busy
        };
        if to != self.wait {
            self.setup.queue_metrics.transition(self.wait, to);
            self.wait = to;
        }
    }

    /// Closes the time counters: the subtask ended.
    fn end_metrics(&mut self) {
        self.setup.queue_metrics.end(self.wait);
        self.wait = WaitState::Busy;
    }

    fn fail(&mut self, error: Error, ctx: &mut Context<Self>) {
        if self.phase == Phase::Done {
            return;
        }
        tracing::warn!(subtask = %self.setup.index, vertex = %self.setup.name, %error, "subtask failed");
        self.phase = Phase::Done;
        self.end_metrics();
        self.setup.on_failed.do_send(SubtaskFailed {
            vertex: self.setup.vertex,
            subtask: self.setup.index,
            error,
        });
        ctx.stop();
    }

    fn flush_partial(&mut self) {
        for w in &self.writers {
            w.borrow_mut().flush_partial();
        }
    }

    fn check_finished(&mut self, ctx: &mut Context<Self>) {
        let snapshots_done = self
            .checkpointing
            .as_ref()
            .is_none_or(|cp| cp.in_flight == 0);
        if self.phase == Phase::Finishing
            && snapshots_done
            && self.writers.iter().all(|w| w.borrow().drained())
        {
            let ended_to = self
                .checkpointing
                .as_ref()
                .and_then(|cp| cp.link.final_checkpoint.clone());
            if let Some(coordinator) = ended_to {
                // Stays for the final checkpoint: what its operators commit
                // on completion must be covered by a checkpoint first.
                self.phase = Phase::Ended;
                self.end_metrics();
                coordinator.do_send(SubtaskEnded {
                    vertex: self.setup.vertex,
                    subtask: self.setup.index,
                });
                return;
            }
            self.finish(ctx);
        }
    }

    /// Reports the subtask finished and stops it.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        self.end_metrics();
        self.setup.on_finished.do_send(SubtaskFinished {
            vertex: self.setup.vertex,
            subtask: self.setup.index,
        });
        ctx.stop();
    }

    /// One bounded unit of work. Returns whether more work is ready now.
    fn run_step(&mut self, ctx: &mut Context<Self>) -> Result<bool> {
        let mut budget = self.setup.config.batches_per_step;
        let mut more = false;
        match self.head.as_mut() {
            None => return Ok(false),
            Some(Head::Source(_)) if self.paused.is_some() => return Ok(false),
            Some(Head::Source(driver)) => {
                while budget > 0 {
                    if self.writers.iter().any(|w| w.borrow().backpressured()) {
                        break;
                    }
                    match driver.step()? {
                        SourceStep::Emitted => {
                            if let Some(a) = &self.setup.activity
                                && a.get().is_none()
                            {
                                let _ = a.set(Instant::now());
                            }
                            budget -= 1;
                            more = budget == 0;
                        }
                        SourceStep::Wait(d) => {
                            ctx.run_later(d, |actor, ctx| actor.schedule(ctx));
                            break;
                        }
                        SourceStep::Finished => {
                            self.phase = Phase::Finishing;
                            break;
                        }
                    }
                }
            }
            Some(Head::Inputs(_)) => {
                while budget > 0 && !self.backpressured() {
                    if let Some(Head::Inputs(chain)) = self.head.as_mut()
                        && chain.has_pending()
                    {
                        chain.resume()?;
                        budget -= 1;
                        continue;
                    }
                    let Some(c) = self.next_ready_channel() else {
                        break;
                    };
                    if let Some(t) = self.throttle.as_mut()
                        && let Some(StreamElement::Records(batch)) = self.inputs[c].queue.front()
                    {
                        if let Some(wait) = t.wait() {
                            // Undo the round-robin advance: this channel is next.
                            self.next_channel = c;
                            self.throttled = true;
                            ctx.run_later(wait, |actor, ctx| {
                                actor.throttled = false;
                                actor.schedule(ctx);
                            });
                            return Ok(false);
                        }
                        t.consumed += batch.len() as u64;
                    }
                    let element = self.inputs[c]
                        .queue
                        .pop_front()
                        .expect("ready channel has an element");
                    budget -= self.handle_element(c, element, ctx)?;
                }
                more = self.phase == Phase::Running && self.has_ready_input();
            }
        }
        if self.setup.config.buffer_timeout.is_zero() || self.phase == Phase::Finishing {
            self.flush_partial();
        }
        Ok(more && !self.backpressured())
    }

    fn next_ready_channel(&mut self) -> Option<usize> {
        let n = self.inputs.len();
        for i in 0..n {
            let c = (self.next_channel + i) % n;
            if !self.inputs[c].queue.is_empty()
                && !self
                    .checkpointing
                    .as_ref()
                    .is_some_and(|cp| cp.barriers.is_blocked(c))
            {
                self.next_channel = (c + 1) % n;
                return Some(c);
            }
        }
        None
    }

    /// Handles one input element; returns the budget it used.
    fn handle_element(
        &mut self,
        c: usize,
        element: StreamElement<IN>,
        ctx: &mut Context<Self>,
    ) -> Result<usize> {
        if !matches!(self.head, Some(Head::Inputs(_))) {
            return Ok(1);
        }
        match element {
            StreamElement::Records(batch) => {
                let ch = &mut self.inputs[c];
                ch.queued_batches -= 1;
                if ch.restored_batches > 0 {
                    ch.restored_batches -= 1;
                } else {
                    ch.ungranted += 1;
                }
                self.setup.queue_metrics.input_queued(c, ch.queued_batches);
                if ch.idle {
                    // Data makes an idle channel active again.
                    ch.idle = false;
                    if let Some(m) = self.setup.queue_metrics.inputs.get(c) {
                        m.idle.store(false, Ordering::Relaxed);
                    }
                    self.update_idleness()?;
                }
                let Some(Head::Inputs(chain)) = self.head.as_mut() else {
                    return Ok(1);
                };
                let ch = &mut self.inputs[c];
                if ch.ungranted >= self.grant_threshold
                    && let Some((to, writer, output)) = &ch.credit_to
                {
                    to.do_send(GrantCredit {
                        writer: *writer,
                        output: *output,
                        credits: ch.ungranted,
                    });
                    ch.ungranted = 0;
                }
                chain.process(batch)?;
                self.mark_active();
                Ok(1)
            }
            StreamElement::Watermark(wm) => {
                let ch = &mut self.inputs[c];
                if wm > ch.watermark {
                    ch.watermark = wm;
                    self.setup.queue_metrics.input_watermark(c, wm);
                }
                self.advance_watermark()?;
                Ok(0)
            }
            StreamElement::WatermarkStatus(status) => {
                let idle = status == WatermarkStatus::Idle;
                self.inputs[c].idle = idle;
                if let Some(m) = self.setup.queue_metrics.inputs.get(c) {
                    m.idle.store(idle, Ordering::Relaxed);
                }
                self.update_idleness()?;
                self.advance_watermark()?;
                Ok(0)
            }
            StreamElement::Barrier(barrier) => {
                self.on_barrier(c, barrier, ctx)?;
                Ok(0)
            }
            StreamElement::EndOfInput if self.inputs[c].ended => Ok(0),
            StreamElement::EndOfInput => {
                if let Some(cp) = self.checkpointing.as_mut() {
                    let actions = cp.barriers.on_end_of_input(c);
                    self.apply(actions, ctx)?;
                }
                let ch = &mut self.inputs[c];
                ch.ended = true;
                ch.watermark = MAX_WATERMARK;
                if let Some(m) = self.setup.queue_metrics.inputs.get(c) {
                    m.ended.store(true, Ordering::Relaxed);
                    m.watermark.store(MAX_WATERMARK, Ordering::Relaxed);
                }
                if self.inputs.iter().all(|i| i.ended) {
                    self.advance_watermark()?;
                    if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                        chain.end_of_input()?;
                    }
                    self.phase = Phase::Finishing;
                }
                Ok(0)
            }
        }
    }

    /// Tells the chain when every live input went idle, or one became active.
    fn update_idleness(&mut self) -> Result<()> {
        let live: Vec<&InputChannel<IN>> = self.inputs.iter().filter(|c| !c.ended).collect();
        let all_idle = !live.is_empty() && live.iter().all(|c| c.idle);
        if all_idle != self.idle_out {
            self.idle_out = all_idle;
            if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                chain.watermark_status(if all_idle {
                    WatermarkStatus::Idle
                } else {
                    WatermarkStatus::Active
                })?;
            }
        }
        Ok(())
    }

    /// Ticks the chain with the processing time.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.phase != Phase::Running {
            return;
        }
        let now = crate::element::now_ms();
        self.guard(ctx, |a, _| match a.head.as_mut() {
            Some(Head::Inputs(chain)) => chain.processing_time(now),
            _ => Ok(()),
        });
    }

    /// The error of a panic caught in this subtask.
    fn panic_error(&self, payload: &(dyn std::any::Any + Send)) -> Error {
        Error::UserPanic {
            operator: self.setup.name.clone(),
            subtask: self.setup.index,
            message: panic_message(payload),
        }
    }

    fn advance_watermark(&mut self) -> Result<()> {
        let live = self.inputs.iter().filter(|c| !c.idle || c.ended);
        let min = live.map(|c| c.watermark).min();
        if let Some(min) = min
            && min > self.watermark
        {
            self.watermark = min;
            self.setup
                .queue_metrics
                .watermark
                .store(min, Ordering::Relaxed);
            if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                chain.watermark(min)?;
            }
        }
        Ok(())
    }
}

impl<IN: Send + 'static> Actor for SubtaskActor<IN> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(e) = self.build_error.take() {
            self.fail(e, ctx);
            return;
        }
        let me: Recipient<GrantCredit> = ctx.address().recipient();
        for (i, w) in self.writers.iter().enumerate() {
            w.borrow_mut().connect(i as u32, &me);
        }
        self.guard(ctx, |a, _| a.restore_runtime());
        if self.phase == Phase::Done {
            return;
        }
        if self.has_input_work() {
            self.schedule(ctx);
        }
        let timeout = self.setup.config.buffer_timeout;
        let wall_clock = !self.setup.config.deterministic;
        if wall_clock && !timeout.is_zero() && !self.writers.is_empty() {
            ctx.run_interval(timeout, |actor, _| actor.flush_partial());
        }
        let tick = self.setup.config.tick_interval;
        if wall_clock
            && !tick.is_zero()
            && matches!(self.head, Some(Head::Inputs(_)))
            && !self.inputs.is_empty()
        {
            ctx.run_interval(tick, |actor, ctx| actor.tick(ctx));
        }
        if matches!(self.head, Some(Head::Source(_))) || self.inputs.is_empty() {
            if self.inputs.is_empty() && matches!(self.head, Some(Head::Inputs(_))) {
                // A chain without inputs (an empty union) is complete at once.
                if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                    let done = chain
                        .watermark(MAX_WATERMARK)
                        .and_then(|_| chain.end_of_input());
                    if let Err(e) = done {
                        self.fail(e, ctx);
                        return;
                    }
                }
                self.phase = Phase::Finishing;
                self.flush_partial();
                self.check_finished(ctx);
                return;
            }
            self.schedule(ctx);
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.end_metrics();
        if self.phase != Phase::Done {
            self.setup.on_failed.do_send(SubtaskFailed {
                vertex: self.setup.vertex,
                subtask: self.setup.index,
                error: Error::SubtaskLost {
                    vertex: self.setup.name.clone(),
                    subtask: self.setup.index,
                },
            });
        }
    }
}

impl<IN: Send + 'static> Handler<Deliver<IN>> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: Deliver<IN>, ctx: &mut Context<Self>) {
        if msg.channel.as_usize() >= self.inputs.len() {
            tracing::error!(channel = %msg.channel, "element for an unknown channel");
            return;
        }
        if self.phase == Phase::Ended {
            // Every input ended: only barriers sent after an end of input
            // come now, and checkpoints reach this subtask directly.
            return;
        }
        let c = msg.channel.as_usize();
        let mut element = msg.element;
        if self.checkpointing.is_some() {
            if let StreamElement::Barrier(b) = &mut element {
                let cp = self.checkpointing.as_ref().expect("checked");
                let on_arrival = (b.kind == BarrierKind::Unaligned && self.codec.is_some())
                    || cp.barriers.is_recording(c);
                if on_arrival {
                    let b = *b;
                    self.guard(ctx, |a, ctx| {
                        a.finish_pending()?;
                        a.on_barrier(c, b, ctx)
                    });
                    self.schedule(ctx);
                    return;
                }
                if b.kind == BarrierKind::Unaligned {
                    // Without a codec for this input the barrier keeps its place.
                    b.kind = BarrierKind::Aligned;
                } else if b.kind == BarrierKind::Aligned
                    && self.codec.is_some()
                    && let Some(timeout) = cp.link.alignment_timeout
                {
                    let left = remaining(timeout, *b);
                    if left.is_zero() {
                        // Its checkpoint is older than the alignment timeout:
                        // it continues unaligned at once.
                        b.kind = BarrierKind::Unaligned;
                        let b = *b;
                        self.guard(ctx, |a, ctx| a.on_barrier(c, b, ctx));
                        self.schedule(ctx);
                        return;
                    }
                    let id = b.checkpoint_id;
                    ctx.run_later(left, move |actor, ctx| {
                        actor.guard(ctx, |a, ctx| a.expire_queued_barrier(c, id, ctx))
                    });
                }
            } else if let Err(e) = self.record_arrival(c, &element) {
                self.fail(e, ctx);
                return;
            } else if matches!(element, StreamElement::EndOfInput) {
                // Recorded: the checkpoint need not wait for the data ahead
                // of the end to be processed.
                let cp = self.checkpointing.as_mut().expect("checked");
                let actions = cp.barriers.on_end_of_input_arrival(c);
                if !actions.is_empty() {
                    self.guard(ctx, |a, ctx| a.apply(actions, ctx));
                }
            }
        }
        let ch = &mut self.inputs[c];
        if element.is_records() {
            ch.queued_batches += 1;
            self.setup.queue_metrics.input_queued(c, ch.queued_batches);
        }
        ch.queue.push_back(element);
        if self.wait == WaitState::Idle {
            // Input arrived: the idle span ends here.
            self.setup
                .queue_metrics
                .transition(WaitState::Idle, WaitState::Busy);
            self.wait = WaitState::Busy;
        }
        self.schedule(ctx);
    }
}

impl<IN: Send + 'static> Handler<ConnectChannel> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: ConnectChannel, _: &mut Context<Self>) {
        if let Some(ch) = self.inputs.get_mut(msg.channel.as_usize()) {
            ch.credit_to = Some((msg.credit_to, msg.writer, msg.output));
        }
    }
}

impl<IN: Send + 'static> Handler<GrantCredit> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: GrantCredit, ctx: &mut Context<Self>) {
        let was_blocked = self.backpressured();
        if let Some(w) = self.writers.get(msg.writer as usize) {
            let mut w = w.borrow_mut();
            w.grant(msg.output, msg.credits);
            if self.setup.config.buffer_timeout.is_zero() {
                // A partial batch held back by a full queue may go now.
                w.flush_partial();
            }
        }
        if self
            .checkpointing
            .as_ref()
            .is_some_and(|cp| !cp.held.is_empty())
        {
            // A held ack's barrier may have left the queue.
            self.release_held(ctx);
        }
        match self.phase {
            Phase::Finishing => self.check_finished(ctx),
            Phase::Running
                if was_blocked
                    && !self.backpressured()
                    && (self.has_ready_input() || matches!(self.head, Some(Head::Source(_)))) =>
            {
                self.schedule(ctx);
            }
            _ => {}
        }
        self.update_wait();
    }
}

impl<IN: Send + 'static> Handler<Step> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, _: Step, ctx: &mut Context<Self>) {
        self.scheduled = false;
        if self.phase != Phase::Running {
            return;
        }
        match catch_unwind(AssertUnwindSafe(|| self.run_step(ctx))) {
            Ok(Ok(more)) => {
                if self.setup.config.deterministic {
                    // Processing time follows steps, not a wall-clock interval.
                    self.tick(ctx);
                }
                if more {
                    self.schedule(ctx);
                }
                self.check_finished(ctx);
                self.update_wait();
            }
            Ok(Err(e)) => self.fail(e, ctx),
            Err(p) => {
                let e = self.panic_error(&*p);
                self.fail(e, ctx)
            }
        }
    }
}

impl<IN: Send + 'static> Handler<CancelSubtask> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, _: CancelSubtask, ctx: &mut Context<Self>) {
        self.phase = Phase::Done;
        self.end_metrics();
        ctx.stop();
    }
}

/// Checkpoints: barrier handling, snapshots, restore.
impl<IN: Send + 'static> SubtaskActor<IN> {
    /// Encodes the queued elements of channel `c` up to (not including) the
    /// first barrier of checkpoint `upto`, or all of them.
    fn encode_queue(&self, c: usize, upto: Option<CheckpointId>) -> Result<Vec<(u32, Vec<u8>)>> {
        let Some(codec) = &self.codec else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for e in &self.inputs[c].queue {
            if let (StreamElement::Barrier(b), Some(id)) = (e, upto)
                && b.checkpoint_id == id
            {
                break;
            }
            out.push((c as u32, codec.encode(e)?));
        }
        Ok(out)
    }

    /// A barrier reached the barrier logic: on arrival (unaligned, or on a
    /// recording channel) or when dequeued (aligned, at-least-once).
    fn on_barrier(&mut self, c: usize, barrier: Barrier, ctx: &mut Context<Self>) -> Result<()> {
        self.on_barrier_with(c, barrier, None, ctx)
    }

    /// `ahead`: for a barrier taken out of the middle of channel `c`'s
    /// queue, how many queued elements precede it (otherwise all of them
    /// do: the barrier was handled on arrival).
    fn on_barrier_with(
        &mut self,
        c: usize,
        barrier: Barrier,
        ahead: Option<usize>,
        ctx: &mut Context<Self>,
    ) -> Result<()> {
        let Some(cp) = self.checkpointing.as_mut() else {
            return Ok(());
        };
        let actions = cp.barriers.on_barrier(c, barrier);
        let id = barrier.checkpoint_id;
        let started = cp.barriers.pending() == Some(id)
            || actions
                .iter()
                .any(|a| matches!(a, BarrierAction::Snapshot { .. }));
        if started && cp.first_barrier.map(|(f, _)| f) != Some(id) {
            cp.first_barrier = Some((id, Instant::now()));
            tracing::info!(checkpoint = %id, vertex = %self.setup.name, subtask = %self.setup.index, channel = c, kind = ?barrier.kind, "checkpoint alignment started");
            if matches!(barrier.kind, BarrierKind::Aligned)
                && self.codec.is_some()
                && let Some(timeout) = cp.link.alignment_timeout
            {
                // Counted from the checkpoint's start, as Flink does.
                ctx.run_later(remaining(timeout, barrier), move |actor, ctx| {
                    actor.guard(ctx, |a, ctx| a.on_alignment_timeout(id, ctx))
                });
            }
        }
        // Unaligned snapshots record what precedes the barrier on its channel
        // and, on every channel still awaiting it, what is queued ahead of
        // its barrier n (a barrier n already queued there overtakes too).
        let mut input_state = Vec::new();
        let mut overtaking = Vec::new();
        let mut ending = Vec::new();
        if actions.iter().any(|a| {
            matches!(
                a,
                BarrierAction::Snapshot {
                    unaligned: true,
                    ..
                }
            )
        }) {
            let recording: Vec<usize> = {
                let cp = self.checkpointing.as_ref().expect("checked above");
                (0..self.inputs.len())
                    .filter(|&ch| ch != c && cp.barriers.is_recording(ch))
                    .collect()
            };
            let mut own = self.encode_queue(c, None)?;
            if let Some(n) = ahead {
                own.truncate(n);
            }
            input_state.extend(own);
            for ch in recording {
                input_state.extend(self.encode_queue(ch, Some(id))?);
                let queue = &mut self.inputs[ch].queue;
                if let Some(pos) = queue
                    .iter()
                    .position(|e| matches!(e, StreamElement::Barrier(b) if b.checkpoint_id == id))
                    && let Some(StreamElement::Barrier(b)) = queue.remove(pos)
                {
                    overtaking.push((ch, b));
                } else if queue.iter().any(|e| matches!(e, StreamElement::EndOfInput)) {
                    // Its whole rest is recorded: no barrier n will come.
                    ending.push(ch);
                }
            }
        }
        self.apply_with(actions, input_state, ctx)?;
        for (ch, b) in overtaking {
            self.on_barrier(ch, b, ctx)?;
        }
        for ch in ending {
            if let Some(cp) = self.checkpointing.as_mut() {
                let actions = cp.barriers.on_end_of_input_arrival(ch);
                self.apply(actions, ctx)?;
            }
        }
        Ok(())
    }

    /// An aligned barrier still queued on channel `c` when its checkpoint's
    /// alignment timeout expired: it overtakes the data ahead of it.
    fn expire_queued_barrier(
        &mut self,
        c: usize,
        id: CheckpointId,
        ctx: &mut Context<Self>,
    ) -> Result<()> {
        let Some(cp) = self.checkpointing.as_ref() else {
            return Ok(());
        };
        if cp.barriers.pending() == Some(id) {
            // Alignment started elsewhere: its own timeout handles it.
            return self.on_alignment_timeout(id, ctx);
        }
        let queue = &mut self.inputs[c].queue;
        let Some(pos) = queue
            .iter()
            .position(|e| matches!(e, StreamElement::Barrier(b) if b.checkpoint_id == id))
        else {
            return Ok(());
        };
        let Some(StreamElement::Barrier(mut b)) = queue.remove(pos) else {
            return Ok(());
        };
        self.finish_pending()?;
        b.kind = BarrierKind::Unaligned;
        tracing::debug!(checkpoint = %id, subtask = %self.setup.index, "alignment timed out in the queue; the barrier overtakes");
        self.on_barrier_with(c, b, Some(pos), ctx)
    }

    /// An aligned checkpoint waited too long: it becomes unaligned.
    fn on_alignment_timeout(&mut self, id: CheckpointId, ctx: &mut Context<Self>) -> Result<()> {
        self.finish_pending()?;
        let Some(cp) = self.checkpointing.as_mut() else {
            return Ok(());
        };
        if cp.barriers.pending() != Some(id) || cp.capture.is_some() {
            return Ok(());
        }
        let actions = cp.barriers.alignment_timeout();
        if actions.is_empty() {
            return Ok(());
        }
        let recording: Vec<usize> = (0..self.inputs.len())
            .filter(|&ch| cp.barriers.is_recording(ch))
            .collect();
        let mut input_state = Vec::new();
        let mut overtaking = Vec::new();
        for &ch in &recording {
            input_state.extend(self.encode_queue(ch, Some(id))?);
            let queue = &mut self.inputs[ch].queue;
            if let Some(pos) = queue
                .iter()
                .position(|e| matches!(e, StreamElement::Barrier(b) if b.checkpoint_id == id))
                && let Some(StreamElement::Barrier(b)) = queue.remove(pos)
            {
                overtaking.push((ch, b));
            }
        }
        tracing::debug!(checkpoint = %id, subtask = %self.setup.index, "alignment timed out; checkpoint continues unaligned");
        self.apply_with(actions, input_state, ctx)?;
        for (ch, b) in overtaking {
            self.on_barrier(ch, b, ctx)?;
        }
        Ok(())
    }

    fn apply(&mut self, actions: Vec<BarrierAction>, ctx: &mut Context<Self>) -> Result<()> {
        self.apply_with(actions, Vec::new(), ctx)
    }

    fn apply_with(
        &mut self,
        actions: Vec<BarrierAction>,
        mut input_state: Vec<(u32, Vec<u8>)>,
        ctx: &mut Context<Self>,
    ) -> Result<()> {
        for action in actions {
            match action {
                BarrierAction::Snapshot { barrier, unaligned } => {
                    self.take_snapshot(barrier, unaligned, std::mem::take(&mut input_state))?
                }
                BarrierAction::Complete(id) => self.start_async_part(id, ctx),
                BarrierAction::Cancelled(id) => {
                    if let Some(cp) = self.checkpointing.as_mut() {
                        if cp
                            .capture
                            .as_ref()
                            .is_some_and(|c| c.barrier.checkpoint_id == id)
                        {
                            cp.capture = None;
                        }
                        cp.link.decline.do_send(DeclineCheckpoint {
                            checkpoint: id,
                            vertex: self.setup.vertex,
                            subtask: self.setup.index,
                            reason: "cancelled by a newer checkpoint or an abort".into(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The synchronous part: the chain captures its state and emits the
    /// barrier downstream.
    fn take_snapshot(
        &mut self,
        barrier: Barrier,
        unaligned: bool,
        input_channel_state: Vec<(u32, Vec<u8>)>,
    ) -> Result<()> {
        let started = Instant::now();
        let span = tracing::info_span!("checkpoint_snapshot", checkpoint = %barrier.checkpoint_id, vertex = %self.setup.name, subtask = %self.setup.index);
        let _entered = span.enter();
        let mut snapshot = ChainSnapshot::default();
        match self.head.as_mut() {
            Some(Head::Inputs(chain)) => chain.checkpoint(barrier, unaligned, &mut snapshot)?,
            Some(Head::Source(driver)) => driver.checkpoint(barrier, &mut snapshot)?,
            None => return Ok(()),
        }
        let channel_watermarks = self.inputs.iter().map(|c| c.watermark).collect();
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
            watermark: self.watermark,
            channel_watermarks,
            input_channel_state,
            alignment_ms,
            sync_ms,
        });
        Ok(())
    }

    /// Records an element arriving on a channel whose in-flight data is
    /// channel state of the pending unaligned checkpoint.
    fn record_arrival(&mut self, c: usize, element: &StreamElement<IN>) -> Result<()> {
        let (Some(cp), Some(codec)) = (self.checkpointing.as_mut(), &self.codec) else {
            return Ok(());
        };
        if cp.barriers.is_recording(c)
            && let Some(capture) = cp.capture.as_mut()
        {
            capture
                .input_channel_state
                .push((c as u32, codec.encode(element)?));
        }
        Ok(())
    }

    /// The asynchronous part: serialize and write on a blocking thread, then
    /// acknowledge to the coordinator.
    fn start_async_part(&mut self, id: CheckpointId, ctx: &mut Context<Self>) {
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
            ctx.run_later(remaining(timeout, barrier), move |actor, ctx| {
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
    fn release_held(&mut self, ctx: &mut Context<Self>) {
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
                let name = format!("v{}-s{}-output-channels", vertex.0, subtask.0);
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

    /// Re-establishes watermarks and re-injects channel state before any new
    /// element.
    fn restore_runtime(&mut self) -> Result<()> {
        let Some(r) = self.setup.restore.take() else {
            return Ok(());
        };
        for (i, ch) in self.inputs.iter_mut().enumerate() {
            ch.watermark = r.channel_watermarks.get(i).copied().unwrap_or(r.watermark);
            self.setup.queue_metrics.input_watermark(i, ch.watermark);
        }
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
                let Some(ch) = self.inputs.get_mut(*c as usize) else {
                    return Err(Error::Runtime(format!(
                        "channel state for unknown input channel {c} of '{}'",
                        self.setup.name
                    )));
                };
                if element.is_records() {
                    ch.queued_batches += 1;
                    ch.restored_batches += 1;
                }
                ch.queue.push_back(element);
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
            self.watermark = r.watermark;
            self.setup
                .queue_metrics
                .watermark
                .store(r.watermark, Ordering::Relaxed);
            chain.restore_watermark(r.watermark)?;
        }
        Ok(())
    }

    /// Runs `f` under `catch_unwind`; an error or panic fails the subtask.
    fn guard(
        &mut self,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut Self, &mut Context<Self>) -> Result<()>,
    ) {
        if self.phase == Phase::Done {
            return;
        }
        match catch_unwind(AssertUnwindSafe(|| f(self, ctx))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail(e, ctx),
            Err(p) => {
                let e = self.panic_error(&*p);
                self.fail(e, ctx)
            }
        }
    }
}

/// What is left of an alignment timeout counted from the barrier's
/// checkpoint start.
fn remaining(timeout: std::time::Duration, barrier: Barrier) -> std::time::Duration {
    let elapsed = crate::element::now_ms()
        .saturating_sub(barrier.timestamp)
        .max(0) as u64;
    timeout.saturating_sub(std::time::Duration::from_millis(elapsed))
}

/// Serializes a capture and writes its blobs (runs on a blocking thread).
fn write_capture(
    writer: &dyn crate::snapshot::BlobSink,
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
        let name = |part: &str| format!("v{}-s{}-op{i}-{part}", vertex.0, subtask.0);
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
        Some(writer.put(
            id,
            &format!("v{}-s{}-input-channels", vertex.0, subtask.0),
            &b,
        )?)
    };
    let output_channel_state = if capture.snapshot.output_channel_state.is_empty() {
        None
    } else {
        let b = postcard::to_allocvec(&capture.snapshot.output_channel_state)
            .map_err(|e| encode("output channel state", e))?;
        channel_state_bytes += b.len() as u64;
        Some(writer.put(
            id,
            &format!("v{}-s{}-output-channels", vertex.0, subtask.0),
            &b,
        )?)
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

impl<IN: Send + 'static> Handler<TriggerCheckpoint> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: TriggerCheckpoint, ctx: &mut Context<Self>) {
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
            a.take_snapshot(msg.barrier, false, Vec::new())?;
            a.start_async_part(id, ctx);
            Ok(())
        });
        if self.setup.config.buffer_timeout.is_zero() {
            self.flush_partial();
        }
    }
}

impl<IN: Send + 'static> Handler<NotifyCheckpoint> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: NotifyCheckpoint, ctx: &mut Context<Self>) {
        if msg.completed {
            tracing::info!(checkpoint = %msg.checkpoint, vertex = %self.setup.name, subtask = %self.setup.index, "checkpoint complete");
        } else {
            tracing::info!(checkpoint = %msg.checkpoint, vertex = %self.setup.name, subtask = %self.setup.index, "checkpoint aborted");
        }
        self.guard(ctx, |a, ctx| {
            if !msg.completed
                && let Some(cp) = a.checkpointing.as_mut()
            {
                // Held acks of aborted checkpoints are dropped; one still
                // being written is sent when done (and ignored).
                let aborted = cp
                    .held
                    .extract_if(.., |h| h.id <= msg.checkpoint)
                    .filter(|h| h.ack.is_some())
                    .count();
                cp.in_flight -= aborted;
                let actions = cp.barriers.abort(msg.checkpoint);
                a.apply(actions, ctx)?;
            }
            match a.head.as_mut() {
                Some(Head::Inputs(chain)) => chain.notify_checkpoint(msg.checkpoint, msg.completed),
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
            // one) and the chain committed.
            self.finish(ctx);
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

impl<IN: Send + 'static> Handler<InjectFailure> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, _: InjectFailure, ctx: &mut Context<Self>) {
        let e = Error::operator(
            self.setup.name.clone(),
            self.setup.index,
            "injected failure",
        );
        self.fail(e, ctx);
    }
}
