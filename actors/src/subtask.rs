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
//!    `SubtaskFinished` and stops. A failure (error or panic, caught here) is
//!    reported as `SubtaskFailed` naming the operator and subtask.
//! 5. **Metrics.** Queue lengths and watermarks go to relaxed atomics per batch
//!    or per watermark; time is accounted as busy, backpressured (a step stopped
//!    on a full output queue, until the credit grant that frees it) or idle
//!    (running with nothing queued) at the end of each step and credit grant
//!    only, so the data path never reads the clock per record.

use crate::chain::ChainInput;
use crate::config::RuntimeConfig;
use crate::element::{MAX_WATERMARK, MIN_WATERMARK, StreamElement, Timestamp, WatermarkStatus};
use crate::error::{Error, Result, panic_message};
use crate::ids::{ChannelId, SubtaskIndex, VertexId};
use crate::messages::{
    CancelSubtask, ConnectChannel, Deliver, GrantCredit, Step, SubtaskFailed, SubtaskFinished,
};
use crate::metrics::{QueueMetrics, WaitState};
use crate::source::{SourceDriver, SourceStep};
use crate::writer::{OutputTarget, WriterControl};
use actix::prelude::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
}

// The actor is never pinned-projected; its queues hold values by ownership only.
impl<IN: Send + 'static> Unpin for SubtaskActor<IN> {}

impl<IN: Send + 'static> SubtaskActor<IN> {
    /// Starts a subtask on `arbiter`; `build` runs there and creates the chain.
    pub fn spawn<B>(arbiter: &ArbiterHandle, setup: SubtaskSetup, build: B) -> Addr<Self>
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
                    credit_to: None,
                    ungranted: 0,
                    ended: false,
                    idle: false,
                    watermark: MIN_WATERMARK,
                })
                .collect();
            let grant_threshold = (setup.config.credits / 2).max(1);
            SubtaskActor {
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
        if !self.scheduled && self.phase != Phase::Done {
            self.scheduled = true;
            ctx.notify(Step);
        }
    }

    fn backpressured(&self) -> bool {
        self.writers.iter().any(|w| w.borrow().backpressured())
    }

    fn has_input_work(&self) -> bool {
        self.inputs.iter().any(|c| !c.queue.is_empty())
    }

    /// Accounts the subtask's time from now on: backpressured (an output queue
    /// is full), idle (a running subtask with nothing queued) or busy. Called
    /// once per step and per credit grant, never per record.
    fn update_wait(&mut self) {
        let to = if self.phase == Phase::Done {
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
        if self.phase == Phase::Finishing && self.writers.iter().all(|w| w.borrow().drained()) {
            self.phase = Phase::Done;
            self.end_metrics();
            self.setup.on_finished.do_send(SubtaskFinished {
                vertex: self.setup.vertex,
                subtask: self.setup.index,
            });
            ctx.stop();
        }
    }

    /// One bounded unit of work. Returns whether more work is ready now.
    fn run_step(&mut self, ctx: &mut Context<Self>) -> Result<bool> {
        let mut budget = self.setup.config.batches_per_step;
        let mut more = false;
        match self.head.as_mut() {
            None => return Ok(false),
            Some(Head::Source(driver)) => {
                while budget > 0 {
                    if self.writers.iter().any(|w| w.borrow().backpressured()) {
                        break;
                    }
                    match driver.step()? {
                        SourceStep::Emitted => {
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
                    let Some(c) = self.next_ready_channel() else {
                        break;
                    };
                    let element = self.inputs[c]
                        .queue
                        .pop_front()
                        .expect("ready channel has an element");
                    budget -= self.handle_element(c, element)?;
                }
                more = self.phase == Phase::Running && self.has_input_work();
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
            if !self.inputs[c].queue.is_empty() {
                self.next_channel = (c + 1) % n;
                return Some(c);
            }
        }
        None
    }

    /// Handles one input element; returns the budget it used.
    fn handle_element(&mut self, c: usize, element: StreamElement<IN>) -> Result<usize> {
        if !matches!(self.head, Some(Head::Inputs(_))) {
            return Ok(1);
        }
        match element {
            StreamElement::Records(batch) => {
                let ch = &mut self.inputs[c];
                ch.queued_batches -= 1;
                ch.ungranted += 1;
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
            StreamElement::Barrier(_) => Ok(0),
            StreamElement::EndOfInput => {
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
        let r = catch_unwind(AssertUnwindSafe(|| match self.head.as_mut() {
            Some(Head::Inputs(chain)) => chain.processing_time(now),
            _ => Ok(()),
        }));
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail(e, ctx),
            Err(p) => {
                let e = Error::UserPanic {
                    operator: self.setup.name.clone(),
                    subtask: self.setup.index,
                    message: panic_message(&*p),
                };
                self.fail(e, ctx)
            }
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
        let timeout = self.setup.config.buffer_timeout;
        if !timeout.is_zero() && !self.writers.is_empty() {
            ctx.run_interval(timeout, |actor, _| actor.flush_partial());
        }
        let tick = self.setup.config.tick_interval;
        if !tick.is_zero() && matches!(self.head, Some(Head::Inputs(_))) && !self.inputs.is_empty()
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
        let Some(ch) = self.inputs.get_mut(msg.channel.as_usize()) else {
            tracing::error!(channel = %msg.channel, "element for an unknown channel");
            return;
        };
        if msg.element.is_records() {
            ch.queued_batches += 1;
            self.setup
                .queue_metrics
                .input_queued(msg.channel.as_usize(), ch.queued_batches);
        }
        ch.queue.push_back(msg.element);
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
        match self.phase {
            Phase::Finishing => self.check_finished(ctx),
            Phase::Running
                if was_blocked
                    && !self.backpressured()
                    && (self.has_input_work() || matches!(self.head, Some(Head::Source(_)))) =>
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
                if more {
                    self.schedule(ctx);
                }
                self.check_finished(ctx);
                self.update_wait();
            }
            Ok(Err(e)) => self.fail(e, ctx),
            Err(p) => {
                let e = Error::UserPanic {
                    operator: self.setup.name.clone(),
                    subtask: self.setup.index,
                    message: panic_message(&*p),
                };
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
