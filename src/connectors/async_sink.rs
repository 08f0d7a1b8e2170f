//! The task runner of a [`SinkFunction`] whose calls `.await`
//! ([`SinkFunction::AWAITS`]), and the queue it shares with the two-phase
//! task runner.
//!
//! The operator that runs one hands each batch to a *driver* task spawned
//! on the subtask's arbiter (its current-thread tokio runtime), which owns
//! the sink and awaits its calls one at a time, in order:
//!
//! - **Backpressure.** At most `capacity` batches wait for the driver; past
//!   that the sink's gate reports backpressure and the subtask takes no
//!   more input until the driver wakes it (a
//!   [`WakeSubtask`](floe_actors::wake::WakeSubtask) message, no timer): a slow sink or a
//!   full channel slows the job down instead of buffering without bound.
//! - **Checkpoints.** At a barrier the operator queues a flush behind the
//!   batches before it; the checkpoint's asynchronous part waits for it,
//!   so the subtask acks only once everything before the barrier is
//!   written (at-least-once). Processing goes on meanwhile.
//! - **End of input.** The subtask finishes only once the driver has
//!   written, flushed and closed everything.
//! - **Errors** of the driver fail the subtask at once.
//!
//! [`ChannelSink`] sends into a bounded tokio `mpsc` channel and
//! [`FuturesSink`] into any `futures::Sink`;
//! [`DataStream::sink`](crate::DataStream::sink),
//! [`to_channel`](crate::DataStream::to_channel) and
//! [`to_futures_sink`](crate::DataStream::to_futures_sink) add them to a
//! stream.

use crate::operators::sink::{SinkContext, SinkFunction};
use crate::operators::{Operator, Output, SnapshotContext, StateCapture};
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use floe_actors::wake::SubtaskWaker;
use floe_actors::writer::OutputGate;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

/// The queue between an async sink's operator and its driver task, shared
/// with the gate the subtask asks about backpressure.
pub(crate) struct Queue<C> {
    commands: VecDeque<C>,
    /// Write commands among `commands`.
    writes: usize,
    capacity: usize,
    /// The driver is running a command.
    busy: bool,
    /// The driver stopped on an error (it failed the subtask).
    failed: Option<String>,
    /// The operator is gone: the driver ends after the queued commands.
    closed: bool,
    driver: Option<Waker>,
    /// The subtask saw backpressure or an undrained queue and waits for a
    /// wake-up.
    want_wake: bool,
}

/// Shared handle on a [`Queue`].
pub(crate) struct Shared<C>(Arc<Mutex<Queue<C>>>);

impl<C> Clone for Shared<C> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<C: Send + 'static> Shared<C> {
    pub(crate) fn new(capacity: usize) -> Self {
        Shared(Arc::new(Mutex::new(Queue {
            commands: VecDeque::new(),
            writes: 0,
            capacity: capacity.max(1),
            busy: false,
            failed: None,
            closed: false,
            driver: None,
            want_wake: false,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<C>> {
        // Only the subtask's own thread takes the lock, never across an await.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `command` (a write counts against the capacity); fails if the
    /// driver failed.
    pub(crate) fn push(&self, command: C, write: bool) -> Result<()> {
        let mut q = self.lock();
        if let Some(e) = &q.failed {
            return Err(Error::User(e.clone().into()));
        }
        q.commands.push_back(command);
        if write {
            q.writes += 1;
        }
        if let Some(w) = q.driver.take() {
            w.wake();
        }
        Ok(())
    }

    /// The next command for the driver; `None` once the operator is gone
    /// and the queue is empty.
    pub(crate) async fn next(&self, is_write: fn(&C) -> bool) -> Option<C> {
        std::future::poll_fn(|cx| {
            let mut q = self.lock();
            match q.commands.pop_front() {
                Some(c) => {
                    if is_write(&c) {
                        q.writes -= 1;
                    }
                    q.busy = true;
                    Poll::Ready(Some(c))
                }
                None if q.closed => Poll::Ready(None),
                None => {
                    q.driver = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// The driver finished a command: wakes the subtask if it waits for
    /// room or for the queue to drain.
    pub(crate) fn done(&self, wake: &SubtaskWaker) {
        let mut q = self.lock();
        q.busy = false;
        if q.want_wake {
            q.want_wake = false;
            drop(q);
            wake.rearm();
            wake.wake_subtask();
        }
    }

    /// The driver failed: later pushes fail, the subtask fails now.
    pub(crate) fn fail(&self, wake: &SubtaskWaker, error: floe_actors::Error) {
        let mut q = self.lock();
        q.busy = false;
        q.failed = Some(error.to_string());
        q.commands.clear();
        q.writes = 0;
        drop(q);
        wake.fail_subtask(error);
    }

    /// The operator is gone: the driver ends after what is queued.
    pub(crate) fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        if let Some(w) = q.driver.take() {
            w.wake();
        }
    }

    /// Whether the queue is full (for its gate): asks for a wake-up then.
    fn full_or_arm(&self) -> bool {
        let mut q = self.lock();
        let full = q.writes >= q.capacity && q.failed.is_none();
        q.want_wake |= full;
        full
    }

    /// Whether the queue is drained (for its gate): asks for a wake-up if not.
    fn drained_or_arm(&self) -> bool {
        let mut q = self.lock();
        // A failed driver already failed the subtask: never finish it.
        let drained = q.commands.is_empty() && !q.busy && q.failed.is_none();
        q.want_wake |= !drained;
        drained
    }

    /// Registers the gate of this queue with the subtask being built;
    /// `also`, another queue of the same sink (its commits), must drain too.
    pub(crate) fn register_gate(&self, also: Option<Box<dyn QueueState>>) -> Result<()> {
        let gate: Rc<RefCell<dyn OutputGate>> =
            Rc::new(RefCell::new(Gate(Box::new(self.clone()), also)));
        if floe_actors::wake::register_gate(gate) {
            Ok(())
        } else {
            Err(Error::Config(
                "an async sink must be created while its subtask is built".into(),
            ))
        }
    }
}

/// A queue as its gate sees it.
pub(crate) trait QueueState {
    /// Full: take no more input (arms a wake-up).
    fn full(&self) -> bool;
    /// Nothing queued or running (arms a wake-up if not).
    fn drained(&self) -> bool;
}

impl<C: Send + 'static> QueueState for Shared<C> {
    fn full(&self) -> bool {
        self.full_or_arm()
    }
    fn drained(&self) -> bool {
        self.drained_or_arm()
    }
}

/// What the subtask asks an async sink's queues (as it asks a record writer).
struct Gate(Box<dyn QueueState>, Option<Box<dyn QueueState>>);

impl OutputGate for Gate {
    fn backpressured(&self) -> bool {
        self.0.full()
    }
    fn drained(&self) -> bool {
        // Both asked, so both wake the subtask when they drain.
        let a = self.0.drained();
        let b = self.1.as_ref().is_none_or(|q| q.drained());
        a && b
    }
}

/// Waits, off the subtask's thread, for a reply the driver sends once a
/// command queued at a barrier is done.
pub(crate) fn deferred_reply<R: Send + 'static>(
    arbiter: std::thread::ThreadId,
    reply: futures::channel::oneshot::Receiver<Result<R>>,
    then: impl FnOnce(R) -> Result<Vec<Vec<u8>>> + Send + 'static,
) -> crate::operators::DeferredCapture {
    Box::new(move || {
        if std::thread::current().id() == arbiter {
            // Waiting here would block the runtime the driver runs on.
            return Err(Error::Config(
                "async sinks need snapshots written off the subtask's thread (not deterministic mode)"
                    .into(),
            ));
        }
        match futures::executor::block_on(reply) {
            Ok(r) => then(r?),
            Err(_) => Err(Error::User(
                "the async sink stopped before the checkpoint's flush".into(),
            )),
        }
    })
}

/// Spawns `driver` on the current arbiter. The returned guard stops it
/// when the operator is dropped: by then a finished subtask has drained
/// its queue (it finishes only once drained), and a failed one must not
/// go on writing while the next attempt recovers.
pub(crate) fn spawn_driver(driver: impl Future<Output = ()> + 'static) -> DriverGuard {
    DriverGuard(actix::spawn(driver))
}

/// Aborts a driver task when dropped.
pub(crate) struct DriverGuard(actix_rt::task::JoinHandle<()>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum Command<T> {
    Write(Batch<T>),
    Flush(futures::channel::oneshot::Sender<Result<()>>),
    Close,
}

/// Runs a [`SinkFunction`] whose calls `.await` as the last operator of a
/// chain, as a task (see the module doc).
pub struct AsyncSinkOp<T: Send + 'static> {
    queue: Shared<Command<T>>,
    arbiter: std::thread::ThreadId,
    _driver: DriverGuard,
}

impl<T: Send + 'static> AsyncSinkOp<T> {
    /// Starts `sink`'s driver on the arbiter of the subtask being built
    /// (call it from the operator factory); at most `capacity` batches
    /// wait for it. `name` names the operator in errors.
    pub fn new<S: SinkFunction<T>>(
        mut sink: S,
        ctx: SinkContext,
        name: String,
        capacity: usize,
    ) -> Result<Self> {
        let wake = floe_actors::wake::current_waker().ok_or_else(|| {
            Error::Config("an async sink must be created while its subtask is built".into())
        })?;
        let queue = Shared::new(capacity);
        queue.register_gate(None)?;
        let q = queue.clone();
        let driver = spawn_driver(async move {
            let fail = |e: Error| floe_actors::Error::operator(&name, ctx.subtask, e.to_string());
            if let Err(e) = sink.open(&ctx).await {
                q.fail(&wake, fail(e));
                return;
            }
            while let Some(c) = q.next(|c| matches!(c, Command::Write(_))).await {
                let r = match c {
                    Command::Write(batch) => sink.write(batch).await,
                    Command::Flush(reply) => {
                        let r = sink.flush().await;
                        let failed = r.as_ref().err().map(|e| e.to_string());
                        let _ = reply.send(r);
                        match failed {
                            Some(e) => Err(Error::User(e.into())),
                            None => Ok(()),
                        }
                    }
                    Command::Close => match sink.flush().await {
                        Ok(()) => sink.finish().await,
                        Err(e) => Err(e),
                    },
                };
                match r {
                    Ok(()) => q.done(&wake),
                    Err(e) => {
                        q.fail(&wake, fail(e));
                        return;
                    }
                }
            }
        });
        Ok(AsyncSinkOp {
            queue,
            arbiter: std::thread::current().id(),
            _driver: driver,
        })
    }
}

impl<T: Send + 'static> Drop for AsyncSinkOp<T> {
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl<T: Send + 'static> Operator<T, ()> for AsyncSinkOp<T> {
    fn process_batch(&mut self, batch: Batch<T>, _: &mut Output<'_, ()>) -> Result<()> {
        self.queue.push(Command::Write(batch), true)
    }

    fn snapshot_state(&mut self, _ctx: &SnapshotContext) -> Result<StateCapture> {
        let (tx, rx) = futures::channel::oneshot::channel();
        self.queue.push(Command::Flush(tx), false)?;
        Ok(StateCapture {
            deferred: Some(deferred_reply(self.arbiter, rx, |()| Ok(Vec::new()))),
            ..Default::default()
        })
    }

    fn on_end_of_input(&mut self, _: &mut Output<'_, ()>) -> Result<()> {
        self.queue.push(Command::Close, false)
    }
}

/// How many batches may wait for an async sink by default.
pub const DEFAULT_CAPACITY: usize = 2;

/// An operator whose creation may have failed: the error surfaces at its
/// first call (operator factories cannot fail).
pub(crate) struct FallibleOp<O>(std::result::Result<O, (String, Option<Error>)>);

impl<O> FallibleOp<O> {
    /// The operator, or the error that prevented it.
    pub(crate) fn new(op: Result<O>) -> Self {
        FallibleOp(op.map_err(|e| (e.to_string(), Some(e))))
    }

    fn op(&mut self) -> Result<&mut O> {
        match &mut self.0 {
            Ok(op) => Ok(op),
            // The first call hands the creation error on as the source; a
            // later one (the subtask is failing by then) carries its text.
            Err((text, e)) => Err(Error::InvalidConfig {
                source: match e.take() {
                    Some(e) => Box::new(e),
                    None => text.clone().into(),
                },
            }),
        }
    }
}

impl<T, O> Operator<T, ()> for FallibleOp<O>
where
    T: 'static,
    O: Operator<T, ()>,
{
    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, ()>) -> Result<()> {
        self.op()?.process_batch(batch, out)
    }
    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        self.op()?.snapshot_state(ctx)
    }
    fn restore_state(&mut self, state: crate::operators::RestoredState) -> Result<()> {
        self.op()?.restore_state(state)
    }
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.op()?.notify_checkpoint_complete(checkpoint)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.op()?.notify_checkpoint_aborted(checkpoint)
    }
    fn on_end_of_input(&mut self, out: &mut Output<'_, ()>) -> Result<()> {
        self.op()?.on_end_of_input(out)
    }
}

/// Sends every record's value into a bounded tokio `mpsc` channel,
/// waiting while it is full (the job slows down to the receiver's pace).
/// A dropped receiver fails the job.
#[derive(Clone)]
pub struct ChannelSink<T>(pub tokio::sync::mpsc::Sender<T>);

impl<T: Send + 'static> SinkFunction<T> for ChannelSink<T> {
    const AWAITS: bool = true;

    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        for r in batch {
            self.0
                .send(r.value)
                .await
                .map_err(|_| Error::User("the channel sink's receiver was dropped".into()))?;
        }
        Ok(())
    }
}

/// Feeds every record's value into a `futures::Sink`, shared by the
/// subtasks (behind an async lock): `send` waits for the sink's readiness,
/// and a checkpoint flushes it.
pub struct FuturesSink<Si>(Arc<futures::lock::Mutex<Si>>);

impl<Si> Clone for FuturesSink<Si> {
    fn clone(&self) -> Self {
        FuturesSink(self.0.clone())
    }
}

impl<Si> FuturesSink<Si> {
    /// Wraps `sink`.
    pub fn new(sink: Si) -> Self {
        FuturesSink(Arc::new(futures::lock::Mutex::new(sink)))
    }
}

impl<T, Si> SinkFunction<T> for FuturesSink<Si>
where
    T: Send + 'static,
    Si: futures::Sink<T> + Send + Unpin + 'static,
    Si::Error: std::error::Error + Send + Sync + 'static,
{
    const AWAITS: bool = true;

    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        use futures::SinkExt;
        let mut sink = self.0.lock().await;
        for r in batch {
            // `feed` waits for readiness, without flushing per record.
            sink.feed(r.value)
                .await
                .map_err(|e| Error::User(Box::new(e)))?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        use futures::SinkExt;
        self.0
            .lock()
            .await
            .flush()
            .await
            .map_err(|e| Error::User(Box::new(e)))
    }
}
