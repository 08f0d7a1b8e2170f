//! Async sources: a source whose reads `.await`, run on its subtask's arbiter.
//!
//! An [`AsyncSource`] is what a network connector (Kafka, a socket, a
//! channel fed by a service) implements. [`AsyncSourceFunction`] turns one
//! into a [`SourceFunction`]: it polls the source's `next_batch` future on
//! the subtask's own thread (the arbiter's current-thread tokio runtime),
//! with a waker that sends the subtask one message when the future can make
//! progress. So:
//!
//! - **No polling with timers.** A pending future parks the subtask
//!   ([`SourcePoll::Parked`]); it is woken by the data, not by a clock.
//! - **Backpressure.** The subtask polls its source only while its outputs
//!   have credit; a stream faster than the job is read only as credits
//!   allow (nothing is buffered beyond one batch).
//! - **Checkpoints.** A checkpoint is taken between two batches: a pending
//!   `next_batch` future is dropped first (it must be cancel-safe, see
//!   [`AsyncSource::next_batch`]), then
//!   [`snapshot_position`](AsyncSource::snapshot_position) records the
//!   position after the last record handed to the job. A source with a
//!   position (an offset) is replayed from it on restore: exactly-once with
//!   a transactional sink. A source without one ([`StreamSource`],
//!   [`ChannelSource`]) is not rewound (see their docs for what a failure
//!   means for them).
//!
//! [`StreamSource`] reads any `futures::Stream`; [`ChannelSource`] reads a
//! bounded tokio `mpsc` channel.

use super::{SourceFunction, SourcePoll};
use crate::{Error, Result};
use floe_actors::element::Record;
use floe_actors::ids::CheckpointId;
use floe_actors::wake::SubtaskWaker;
use futures::{FutureExt, Stream, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A source of records of type `T` whose reads are asynchronous; one
/// instance per source subtask, created by the closure given to
/// [`StreamExecutionEnvironment::add_async_source`](crate::api::StreamExecutionEnvironment::add_async_source).
///
/// The runtime calls, on the subtask's arbiter thread:
/// [`restore_position`](Self::restore_position) (once, when the job starts
/// from a checkpoint), then [`next_batch`](Self::next_batch) repeatedly,
/// with [`snapshot_position`](Self::snapshot_position) between two calls at
/// each checkpoint and
/// [`notify_checkpoint_complete`](Self::notify_checkpoint_complete) when a
/// checkpoint completed.
///
/// # Example
///
/// ```
/// use floe::connectors::SourcePoll;
/// use floe::connectors::async_source::AsyncSource;
/// use floe_actors::element::Record;
///
/// /// Counts from `next` up to `end`; its position is `next`.
/// struct Counter { next: u64, end: u64 }
///
/// impl AsyncSource<u64> for Counter {
///     async fn next_batch(&mut self, max: usize, out: &mut Vec<Record<u64>>) -> floe::Result<SourcePoll> {
///         // A real source would `.await` its client here.
///         while out.len() < max && self.next < self.end {
///             out.push(Record::new(self.next));
///             self.next += 1;
///         }
///         Ok(if self.next == self.end { SourcePoll::Finished } else { SourcePoll::Ready })
///     }
///     fn snapshot_position(&mut self) -> floe::Result<Vec<Vec<u8>>> {
///         Ok(vec![self.next.to_le_bytes().to_vec()])
///     }
///     fn restore_position(&mut self, entries: Vec<Vec<u8>>) -> floe::Result<()> {
///         if let Some(e) = entries.first() {
///             self.next = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait AsyncSource<T>: Send + 'static {
    /// Appends at most `max` records to `out`, waiting until at least one is
    /// available or the source ends. Returns [`SourcePoll::Ready`] when more
    /// may follow, [`SourcePoll::Finished`] when the source is exhausted
    /// (with or without records in `out`), or [`SourcePoll::Wait`] to be
    /// called again after a pause (a rate limit).
    ///
    /// **Cancel-safe**: the future may be dropped before it completes (to
    /// take a checkpoint, or when the job stops); it must then have lost no
    /// record and not moved the position past records it did not append.
    /// Await one thing (a receive), then take what is ready without
    /// awaiting again — as [`StreamSource`] does — and it is.
    fn next_batch(
        &mut self,
        max: usize,
        out: &mut Vec<Record<T>>,
    ) -> impl Future<Output = Result<SourcePoll>> + Send;

    /// The position after the last record returned, one entry per split
    /// the source reads (postcard-encode them, e.g. `(partition, offset)`).
    /// On a restore at another parallelism the entries of all subtasks are
    /// dealt out evenly, as Flink does with source splits. The default (no
    /// entries) marks a source that cannot rewind.
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }

    /// Rewinds to positions [`snapshot_position`](Self::snapshot_position)
    /// took (this subtask's share); called once before the first read.
    fn restore_position(&mut self, _entries: Vec<Vec<u8>>) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint` completed (e.g. commit offsets back to a
    /// consumer group, for monitoring). Must not block: spawn async work
    /// with `actix::spawn` if needed.
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }
}

type PendingBatch<T> = Pin<Box<dyn Future<Output = (Vec<Record<T>>, Result<SourcePoll>)> + Send>>;

/// Runs an [`AsyncSource`] as a [`SourceFunction`] on its subtask's
/// arbiter (see the module doc). Create it while the subtask's chain is
/// built, i.e. inside the closure given to
/// [`StreamExecutionEnvironment::add_source`](crate::api::StreamExecutionEnvironment::add_source)
/// (or use
/// [`StreamExecutionEnvironment::add_async_source`](crate::api::StreamExecutionEnvironment::add_async_source)).
pub struct AsyncSourceFunction<T, S> {
    /// The source; locked by the pending future while a read is under way.
    source: Arc<futures::lock::Mutex<S>>,
    pending: Option<PendingBatch<T>>,
    wake: Arc<SubtaskWaker>,
    waker: Waker,
}

impl<T, S> AsyncSourceFunction<T, S>
where
    T: Send + 'static,
    S: AsyncSource<T>,
{
    /// Wraps `source` for the subtask being built on this thread; fails
    /// outside a subtask's build.
    pub fn new(source: S) -> Result<Self> {
        let wake = floe_actors::wake::current_waker().ok_or_else(|| {
            Error::Config(
                "an async source must be created while its subtask is built (in add_source's closure)"
                    .into(),
            )
        })?;
        Ok(AsyncSourceFunction {
            source: Arc::new(futures::lock::Mutex::new(source)),
            pending: None,
            waker: wake.waker(),
            wake,
        })
    }

    fn with_source<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> R {
        // A pending read holds the lock; dropping it (cancel-safe) frees it.
        self.pending = None;
        let mut guard = self
            .source
            .try_lock()
            .expect("no read is pending, so nothing else holds the source");
        f(&mut guard)
    }
}

impl<T, S> SourceFunction<T> for AsyncSourceFunction<T, S>
where
    T: Send + 'static,
    S: AsyncSource<T>,
{
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        let mut fut = match self.pending.take() {
            Some(f) => f,
            None => {
                let source = self.source.clone();
                Box::pin(async move {
                    let mut s = source.lock().await;
                    let mut batch = Vec::with_capacity(max);
                    let r = s.next_batch(max, &mut batch).await;
                    (batch, r)
                })
            }
        };
        // Wake-ups from here on reach the subtask.
        self.wake.rearm();
        match fut.as_mut().poll(&mut Context::from_waker(&self.waker)) {
            Poll::Ready((mut batch, r)) => {
                if out.is_empty() {
                    std::mem::swap(out, &mut batch);
                } else {
                    out.append(&mut batch);
                }
                r
            }
            Poll::Pending => {
                self.pending = Some(fut);
                Ok(SourcePoll::Parked)
            }
        }
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        self.with_source(|s| s.snapshot_position())
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        self.with_source(|s| s.restore_position(entries))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.with_source(|s| s.notify_checkpoint_complete(checkpoint))
    }
}

/// Reads a `futures::Stream`, one record per item, without event
/// timestamps.
///
/// It has no position: a checkpoint stores nothing for it, and a restart
/// (after a failure) makes a new stream with the factory given to
/// [`from_stream`](crate::api::StreamExecutionEnvironment::from_stream)
/// and reads it from its start. A stream that yields the
/// same items again (a replayable one) thus gives **at-least-once**
/// results: nothing is lost, records after the restored checkpoint may
/// be counted twice. Items are taken only as the job's credits allow.
pub struct StreamSource<St> {
    stream: futures::stream::Fuse<St>,
}

impl<St: Stream + Unpin> StreamSource<St> {
    /// A source reading `stream`.
    pub fn new(stream: St) -> Self {
        StreamSource {
            stream: stream.fuse(),
        }
    }
}

impl<T, St> AsyncSource<T> for StreamSource<St>
where
    T: Send + 'static,
    St: Stream<Item = T> + Send + Unpin + 'static,
{
    async fn next_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        // Awaits the first item only (cancel-safe), then takes what is
        // ready without waiting.
        match self.stream.next().await {
            Some(v) => out.push(Record::new(v)),
            None => return Ok(SourcePoll::Finished),
        }
        while out.len() < max {
            match self.stream.next().now_or_never() {
                Some(Some(v)) => out.push(Record::new(v)),
                Some(None) => return Ok(SourcePoll::Finished),
                None => break,
            }
        }
        Ok(SourcePoll::Ready)
    }
}

/// Reads a bounded tokio `mpsc` channel until every sender is dropped.
///
/// The receiver is shared by the job's attempts: after a failure the
/// restarted source goes on with what the channel holds then. Records it
/// had taken before the failure and that no completed checkpoint covers
/// are not read again (the channel has no position): such a source is
/// **at-most-once** for the records in flight at a failure, exactly as
/// reliable as the channel otherwise. Senders feel the job's backpressure:
/// `send().await` waits while the channel is full.
pub struct ChannelSource<T> {
    slot: Arc<std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<T>>>>,
    rx: Option<tokio::sync::mpsc::Receiver<T>>,
}

impl<T> ChannelSource<T> {
    pub(crate) fn take(
        slot: &Arc<std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<T>>>>,
    ) -> Result<Self> {
        let rx = slot
            .lock()
            .map_err(|_| Error::User("channel source lock poisoned".into()))?
            .take()
            .ok_or_else(|| {
                Error::Config("the channel source's receiver is in use by another subtask".into())
            })?;
        Ok(ChannelSource {
            slot: slot.clone(),
            rx: Some(rx),
        })
    }
}

impl<T> Drop for ChannelSource<T> {
    fn drop(&mut self) {
        // Hands the receiver to the next attempt.
        if let (Some(rx), Ok(mut slot)) = (self.rx.take(), self.slot.lock()) {
            *slot = Some(rx);
        }
    }
}

impl<T: Send + 'static> AsyncSource<T> for ChannelSource<T> {
    async fn next_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        let rx = self
            .rx
            .as_mut()
            .expect("the receiver is held until the source is dropped");
        // `recv` is cancel-safe; the rest is taken without waiting.
        match rx.recv().await {
            Some(v) => out.push(Record::new(v)),
            None => return Ok(SourcePoll::Finished),
        }
        while out.len() < max {
            match rx.try_recv() {
                Ok(v) => out.push(Record::new(v)),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    return Ok(SourcePoll::Finished);
                }
            }
        }
        Ok(SourcePoll::Ready)
    }
}
