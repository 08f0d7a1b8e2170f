//! The subtask actor: one parallel instance of an operator chain.
//!
//! 1. **Data flow.** A `Deliver` handler only hands the element to the input
//!    gate (which queues it) and schedules a `Step`; the work happens in steps
//!    of at most `batches_per_step` batches, so control messages (credits,
//!    cancel) interleave with processing and a mailbox drain is cheap.
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
//!
//! The parts, one concern each:
//!
//! - [`gate`]: the input channels as a pure state machine — queues, credit,
//!   watermarks and idleness, barrier alignment (with [`alignment`]'s rules),
//!   the alignment timeout and channel-state recording. The actor feeds it
//!   events and executes the [`GateAction`]s it returns
//!   ([`SubtaskActor::execute`]).
//! - `actions`: the gate's actions, carried out in order.
//! - `checkpointing`: capture, the asynchronous write, held acks and barrier
//!   promotion in the output queues.
//! - `restore`: watermarks and channel state taken back from a checkpoint.
//! - `throttle`: the input rate of a throttled sink.

mod actions;
mod activity;
pub mod alignment;
mod checkpointing;
mod drain;
pub mod gate;
mod restore;
mod throttle;

pub use activity::FirstActivity;
pub use restore::SubtaskRestore;

use crate::chain::{ChainInput, Control, Next, Pending};
use crate::config::RuntimeConfig;
use crate::element::{MAX_WATERMARK, StreamElement};
use crate::error::{Error, Result, panic_message};
use crate::ids::{ChannelId, CheckpointId, SubtaskIndex, VertexId};
use crate::messages::{
    CancelSubtask, ConnectChannel, Deliver, GrantCredit, InjectFailure, Step, SubtaskEnded,
    SubtaskFailed, SubtaskFinished,
};
use crate::metrics::{QueueMetrics, WaitState};
use crate::snapshot::{CheckpointLink, ElementCodec, NotifyCheckpoint, TriggerCheckpoint};
use crate::source::{SourceDriver, SourceStep};
use crate::writer::{OutputGate, OutputTarget, WriterControl};
use actix::prelude::*;
use checkpointing::Checkpointing;
use gate::{GateAction, InputGate, Timeout};
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use throttle::Throttle;

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
    pub activity: Option<Arc<FirstActivity>>,
}

/// What heads a chain: a source, or the network inputs.
pub enum Head<IN> {
    /// A source subtask.
    Source(Box<dyn SourceDriver>),
    /// A subtask fed by input channels.
    Inputs(Box<dyn ChainInput<IN>>),
}

/// Whether a writer or an async sink's queue is full.
fn outputs_full(
    writers: &[Rc<RefCell<dyn WriterControl>>],
    sink_gates: &[Rc<RefCell<dyn OutputGate>>],
) -> bool {
    writers.iter().any(|w| w.borrow().backpressured())
        || sink_gates.iter().any(|g| g.borrow().backpressured())
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
    /// The input channels: queues, credit, watermarks, barrier alignment.
    gate: InputGate<IN>,
    /// Where each input channel returns credit: `(sender, writer, output)`.
    credit_to: Vec<Option<(Recipient<GrantCredit>, u32, u32)>>,
    /// A spare action buffer, reused so the data path allocates none.
    actions: Vec<GateAction<IN>>,
    writers: Vec<Rc<RefCell<dyn WriterControl>>>,
    /// The async sinks' queues (registered while the chain was built).
    sink_gates: Vec<Rc<RefCell<dyn OutputGate>>>,
    phase: Phase,
    scheduled: bool,
    /// What the time counters currently account this subtask's time to.
    wait: WaitState,
    /// Decodes restored input channel state (the gate encodes with it too).
    codec: Option<Arc<dyn ElementCodec<IN>>>,
    checkpointing: Option<Checkpointing>,
    throttle: Option<Throttle>,
    /// A throttled step waits for a timer; no other step runs meanwhile.
    throttled: bool,
    /// The last unit of work was the chain's `resume`: the next is an
    /// input element the chain admits while pending, if one heads a ready
    /// channel, so pending output and input take turns.
    resumed: bool,
    /// A source paused after the barrier of the checkpoint the job stops
    /// with, until that checkpoint completes (finish) or is aborted.
    paused: Option<CheckpointId>,
    /// The chain committed its final checkpoint: finish once drained.
    finish_on_drain: bool,
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
        Self::start_in_arbiter(arbiter, move |ctx| {
            let mut builder = ChainBuilder::default();
            // Async sources and sinks find their subtask's waker while built.
            let (built, gates) = crate::wake::building(ctx.address().recipient(), || {
                catch_unwind(AssertUnwindSafe(|| build(&mut builder)))
            });
            // One budget for all of the subtask's output channels.
            let outputs = builder
                .writers
                .iter()
                .map(|w| w.borrow().output_channels())
                .sum();
            for w in &builder.writers {
                w.borrow_mut().fit_budget(outputs);
            }
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
            // The senders compute the same credits from the same count.
            let mut gate = InputGate::new(
                setup.inputs,
                setup.config.input_credits(setup.inputs),
                setup.queue_metrics.clone(),
            );
            if let Some(link) = &setup.checkpoint {
                gate = gate.with_checkpoints(codec.clone(), link.alignment_timeout);
            }
            let checkpointing = setup.checkpoint.clone().map(Checkpointing::new);
            let throttle = setup.input_rate.map(Throttle::new);
            SubtaskActor {
                codec,
                checkpointing,
                throttle,
                throttled: false,
                resumed: false,
                paused: None,
                finish_on_drain: false,
                setup,
                head,
                build_error,
                credit_to: vec![None; gate.len()],
                gate,
                actions: Vec::new(),
                writers: builder.writers,
                sink_gates: gates,
                phase: Phase::Running,
                scheduled: false,
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
            receiver_inputs: 0,
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
        if let Some(a) = &self.setup.activity {
            a.mark();
        }
    }

    /// Whether a writer or an async sink's queue is full.
    fn backpressured(&self) -> bool {
        outputs_full(&self.writers, &self.sink_gates)
    }

    /// Whether every writer and async sink's queue is drained (each asks
    /// for a wake-up if not, so all are asked).
    fn drained(&self) -> bool {
        let writers = self.writers.iter().all(|w| w.borrow().drained());
        let mut sinks = true;
        for g in &self.sink_gates {
            sinks &= g.borrow().drained();
        }
        writers && sinks
    }

    /// Whether the chain holds output of an input it already took (a
    /// flat_map suspended in the middle of a record): it goes on before
    /// any new input element, and no snapshot cuts through it.
    fn chain_pending(&self) -> bool {
        matches!(&self.head, Some(Head::Inputs(chain)) if chain.pending(Next::Other) != Pending::None)
    }

    /// Whether an unblocked channel holds an element (a channel blocked by
    /// barrier alignment does not count: stepping cannot consume it), or the
    /// chain has pending output to resume.
    fn has_ready_input(&self) -> bool {
        self.chain_pending() || self.gate.has_ready()
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
            && !self.gate.has_queued()
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
        if self.phase == Phase::Finishing && snapshots_done && self.drained() {
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
                    if outputs_full(&self.writers, &self.sink_gates) {
                        break;
                    }
                    match driver.step()? {
                        SourceStep::Emitted => {
                            if let Some(a) = &self.setup.activity {
                                a.mark();
                            }
                            budget -= 1;
                            more = budget == 0;
                        }
                        SourceStep::Wait(d) => {
                            ctx.run_later(d, |actor, ctx| actor.schedule(ctx));
                            break;
                        }
                        SourceStep::Parked => break,
                        SourceStep::Finished => {
                            self.phase = Phase::Finishing;
                            break;
                        }
                    }
                }
            }
            Some(Head::Inputs(_)) => {
                let mut actions = std::mem::take(&mut self.actions);
                while budget > 0 && !self.backpressured() {
                    let mut admitted = None;
                    if let Some(Head::Inputs(chain)) = self.head.as_mut()
                        && chain.pending(Next::Other) != Pending::None
                    {
                        // A ready batch of records (or a watermark) the
                        // chain admits while pending goes in after each part
                        // of its pending output: its input channels keep
                        // returning credit through a long firing.
                        if self.resumed {
                            let watermarks = chain.pending(Next::Watermark) == Pending::Admits;
                            admitted = self.gate.next_ready_admitted(
                                |b| chain.pending(Next::Records(b)) == Pending::Admits,
                                watermarks,
                            );
                        }
                        if admitted.is_none() {
                            chain.resume()?;
                            self.resumed = true;
                            budget -= 1;
                            continue;
                        }
                    }
                    self.resumed = false;
                    let Some(c) = admitted.or_else(|| self.gate.next_ready()) else {
                        break;
                    };
                    if let Some(t) = self.throttle.as_mut()
                        && let Some(StreamElement::Records(batch)) = self.gate.front(c)
                        && let Some(wait) = t.admit(batch.len())
                    {
                        self.gate.keep_turn(c);
                        self.throttled = true;
                        ctx.run_later(wait, |actor, ctx| {
                            actor.throttled = false;
                            actor.schedule(ctx);
                        });
                        self.actions = actions;
                        return Ok(false);
                    }
                    if self.gate.dequeue(c, &mut actions)? {
                        budget -= 1;
                    }
                    self.execute(&mut actions, ctx)?;
                }
                self.actions = actions;
                more = self.phase == Phase::Running && self.has_ready_input();
            }
        }
        if self.setup.config.buffer_timeout.is_zero() || self.phase == Phase::Finishing {
            self.flush_partial();
        }
        Ok(more && !self.backpressured())
    }

    /// An alignment timer of the input gate fired.
    fn on_timeout(&mut self, timer: Timeout, ctx: &mut Context<Self>) -> Result<()> {
        let mut actions = Vec::new();
        self.gate.on_timeout(timer, &mut actions)?;
        self.execute(&mut actions, ctx)
    }

    /// Ticks the chain with the processing time.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.phase != Phase::Running {
            return;
        }
        let now = crate::element::now_ms();
        self.guard(ctx, |a, _| match a.head.as_mut() {
            Some(Head::Inputs(chain)) => chain.handle(Control::Tick(now).into()),
            _ => Ok(()),
        });
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

    /// The error of a panic caught in this subtask.
    fn panic_error(&self, payload: &(dyn std::any::Any + Send)) -> Error {
        Error::UserPanic {
            operator: self.setup.name.clone(),
            subtask: self.setup.index,
            message: panic_message(payload),
        }
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
        if self.gate.has_queued() {
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
            && !self.gate.is_empty()
        {
            ctx.run_interval(tick, |actor, ctx| actor.tick(ctx));
        }
        if matches!(self.head, Some(Head::Source(_))) || self.gate.is_empty() {
            if self.gate.is_empty() && matches!(self.head, Some(Head::Inputs(_))) {
                // A chain without inputs (an empty union) is complete at once.
                if let Some(Head::Inputs(chain)) = self.head.as_mut() {
                    let done = chain
                        .handle(Control::Watermark(MAX_WATERMARK).into())
                        .and_then(|_| chain.handle(Control::EndOfInput.into()));
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
        if msg.channel.as_usize() >= self.gate.len() {
            tracing::error!(channel = %msg.channel, "element for an unknown channel");
            return;
        }
        if self.phase == Phase::Ended {
            // Every input ended: only barriers sent after an end of input
            // come now, and checkpoints reach this subtask directly.
            return;
        }
        let mut actions = std::mem::take(&mut self.actions);
        let now_ms = crate::element::now_ms;
        match self
            .gate
            .arrive(msg.channel.as_usize(), msg.element, now_ms, &mut actions)
        {
            Ok(queued) => {
                if !actions.is_empty() {
                    // A barrier handled on arrival, or an end of input that
                    // ends a recording.
                    self.guard(ctx, |a, ctx| a.execute(&mut actions, ctx));
                    actions.clear();
                }
                if queued && self.wait == WaitState::Idle {
                    // Input arrived: the idle span ends here.
                    self.setup
                        .queue_metrics
                        .transition(WaitState::Idle, WaitState::Busy);
                    self.wait = WaitState::Busy;
                }
            }
            Err(e) => self.fail(e, ctx),
        }
        self.actions = actions;
        self.schedule(ctx);
    }
}

impl<IN: Send + 'static> Handler<ConnectChannel> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: ConnectChannel, _: &mut Context<Self>) {
        let c = msg.channel.as_usize();
        if let Some(to) = self.credit_to.get_mut(c) {
            *to = Some((msg.credit_to, msg.writer, msg.output));
            self.gate.connect(c);
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
            .is_some_and(|cp| cp.holds_acks())
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

impl<IN: Send + 'static> Handler<TriggerCheckpoint> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: TriggerCheckpoint, ctx: &mut Context<Self>) {
        self.trigger_checkpoint(msg, ctx);
    }
}

impl<IN: Send + 'static> Handler<NotifyCheckpoint> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, msg: NotifyCheckpoint, ctx: &mut Context<Self>) {
        self.notify_checkpoint(msg, ctx);
    }
}

impl<IN: Send + 'static> Handler<InjectFailure> for SubtaskActor<IN> {
    type Result = ();

    fn handle(&mut self, _: InjectFailure, ctx: &mut Context<Self>) {
        let e = Error::InjectedFault {
            operator: self.setup.name.clone(),
            subtask: self.setup.index,
            point: None,
        };
        self.fail(e, ctx);
    }
}
