//! Sources and sinks.
//!
//! A [`SourceFunction`] fills a batch per call and says whether more follows, must
//! wait (rate limit) or is exhausted. [`SourceNode`] drives one inside a source
//! subtask: it counts records, runs the function under `catch_unwind`, and at
//! exhaustion sends the final watermark and end-of-input down the chain.
//!
//! Sinks implement one of two traits:
//! [`SinkFunction`](crate::operators::sink::SinkFunction) (at-least-once)
//! or [`two_phase::TwoPhaseCommitSink`] (exactly-once). Their methods are
//! `async fn`s. A sink whose calls finish before they return (memory, a
//! file, the Kafka connectors, whose flush and transaction steps block
//! the subtask's thread for at most the sink's request timeout) runs on
//! the subtask's thread; one that waits on I/O (the PostgreSQL sink,
//! feature `postgres`, [`async_sink::ChannelSink`],
//! [`async_sink::FuturesSink`]) sets `AWAITS` and runs as a task on the
//! subtask's arbiter with backpressure ([`async_sink`]).
//!
//! Sources: the Kafka source's reader, `kafka::KafkaSourceReader` (feature
//! `kafka`), is a [`SourceFunction`] that polls librdkafka without waiting
//! (librdkafka runs its own network threads);
//! [`async_source::AsyncSource`] has methods that `.await`, run on the
//! subtask's arbiter; [`async_source::StreamSource`] and
//! [`async_source::ChannelSource`] bridge `futures` streams and bounded
//! tokio channels.

pub mod async_sink;
pub mod async_source;
pub mod collect;
pub mod collection;
pub mod file_sink;
pub mod file_source;
pub mod generator;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub mod kafka_sink;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod print;
pub mod text_file;
pub mod transactional_file;
pub mod two_phase;

use crate::Result;
use crate::operators::node::NodeInfo;
use floe_actors::chain::{ChainEvent, ChainInput, Control, Next, Pending};
use floe_actors::element::{MAX_WATERMARK, Record};
use floe_actors::ids::{CheckpointId, SubtaskIndex};
use floe_actors::source::{SourceDriver, SourceStep};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

/// What a source reports after filling a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePoll {
    /// More records are available now.
    Ready,
    /// Call again after this long.
    Wait(Duration),
    /// Nothing now; the source arranged to wake its subtask when there is
    /// (an async source whose future is pending, see [`async_source`]).
    Parked,
    /// No more records.
    Finished,
}

/// What a source subtask knows of itself when it is created.
#[derive(Clone, Copy, Debug)]
pub struct SourceContext {
    /// This subtask.
    pub subtask: SubtaskIndex,
    /// Number of source subtasks.
    pub parallelism: usize,
    /// The job's seed.
    pub seed: u64,
}

impl SourceContext {
    /// The half-open slice `[start, end)` of `0..count` this subtask owns.
    pub fn split(&self, count: u64) -> (u64, u64) {
        let (i, p) = (self.subtask.0 as u128, self.parallelism as u128);
        let c = count as u128;
        ((c * i / p) as u64, (c * (i + 1) / p) as u64)
    }
}

/// A source of records of type `T`, one instance per source subtask.
///
/// For exactly-once a source must be replayable: [`snapshot_state`]
/// (Self::snapshot_state) returns its position (one entry per split it
/// reads), and [`restore_state`](Self::restore_state) rewinds to it. On a
/// restore at another parallelism the entries of all subtasks are dealt out
/// evenly, as Flink does with source splits; a subtask may get none and
/// then has nothing to read.
pub trait SourceFunction<T>: Send + 'static {
    /// Appends at most `max` records to `out`.
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll>;

    /// The source's position, taken between two batches at a checkpoint.
    /// The default (no entries) marks a source that cannot rewind.
    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }

    /// Rewinds to positions [`snapshot_state`](Self::snapshot_state) took
    /// (this subtask's share of them); called once before the first poll.
    fn restore_state(&mut self, _entries: Vec<Vec<u8>>) -> Result<()> {
        Ok(())
    }

    /// Records the source read but did not emit since the last call (bad
    /// input it skipped): counted as emitted by the source's metrics and
    /// by `--savepoint-at-records`, so that a source's record count is its
    /// input's. Default: none.
    fn take_skipped(&mut self) -> u64 {
        0
    }

    /// Entries every subtask receives whole on a restore (union list
    /// state), taken at checkpoint `checkpoint` right after
    /// [`snapshot_state`](Self::snapshot_state): e.g. the splits all
    /// subtasks read, so none is assigned twice. Default: none.
    fn snapshot_union_state(&mut self, _checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }

    /// Every subtask's [`snapshot_union_state`](Self::snapshot_union_state)
    /// entries; called once before [`restore_state`](Self::restore_state).
    fn restore_union_state(&mut self, _entries: Vec<Vec<u8>>) -> Result<()> {
        Ok(())
    }

    /// A checkpoint completed.
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// The source's own watermark, for a source that generates them (per
    /// Kafka partition, say); asked after each batch, forwarded when it
    /// advanced. Default: none (watermarks come from an assigner after
    /// the source).
    fn watermark(&mut self) -> Option<floe_actors::element::Timestamp> {
        None
    }
}

/// postcard-encodes one source position entry.
pub(crate) fn encode_entry<S: serde::Serialize>(entry: &S) -> Result<Vec<u8>> {
    postcard::to_allocvec(entry)
        .map_err(|e| crate::Error::User(format!("cannot encode source position: {e}")))
}

/// Decodes one source position entry.
pub(crate) fn decode_entry<S: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<S> {
    postcard::from_bytes(bytes)
        .map_err(|e| crate::Error::User(format!("cannot decode source position: {e}")))
}

/// Drives a source function and its chain inside a source subtask.
pub struct SourceNode<T> {
    source: Box<dyn SourceFunction<T>>,
    next: Box<dyn ChainInput<T>>,
    info: NodeInfo,
    batch_size: usize,
    pause: Option<SavepointPause>,
    hold: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    /// The last watermark the source generated itself.
    watermark: floe_actors::element::Timestamp,
}

/// Holds a source at a record count until a savepoint's barrier passed it:
/// `--savepoint-at-records` cuts the input at a known point. The held
/// source is parked (no timer): the savepoint's barrier wakes it.
pub(crate) struct SavepointPause {
    /// Records this subtask may still emit before the savepoint.
    pub remaining: u64,
    /// Asks the coordinator for the savepoint.
    pub request: std::sync::Arc<dyn Fn() + Send + Sync>,
    pub requested: bool,
    /// Wakes the parked subtask once the savepoint's barrier passed.
    pub wake: std::sync::Arc<floe_actors::wake::SubtaskWaker>,
}

impl<T: 'static> SourceNode<T> {
    /// A driver for `source`, feeding `next`.
    pub fn new(
        source: Box<dyn SourceFunction<T>>,
        next: Box<dyn ChainInput<T>>,
        info: NodeInfo,
        batch_size: usize,
    ) -> Self {
        SourceNode {
            source,
            next,
            info,
            batch_size,
            pause: None,
            hold: None,
            watermark: floe_actors::element::Timestamp::MIN,
        }
    }

    /// Does not finish while `pending` (injected failures to come) is
    /// above zero: the failures then happen while the job runs.
    pub(crate) fn with_hold(
        mut self,
        pending: std::sync::Arc<std::sync::atomic::AtomicU32>,
    ) -> Self {
        self.hold = Some(pending);
        self
    }

    /// Pauses after `records` records until a savepoint barrier passed,
    /// asking for the savepoint with `request`. Called while the subtask's
    /// chain is built (its waker wakes the paused source).
    pub(crate) fn with_savepoint_pause(
        mut self,
        records: u64,
        request: std::sync::Arc<dyn Fn() + Send + Sync>,
    ) -> crate::Result<Self> {
        let wake = floe_actors::wake::current_waker().ok_or_else(|| {
            crate::Error::Config(
                "a source paused for a savepoint must be built by its subtask".into(),
            )
        })?;
        self.pause = Some(SavepointPause {
            remaining: records,
            request,
            requested: false,
            wake,
        });
        Ok(self)
    }
}

impl<T: 'static> SourceDriver for SourceNode<T> {
    fn checkpoint(
        &mut self,
        barrier: floe_actors::element::Barrier,
        out: &mut floe_actors::snapshot::ChainSnapshot,
    ) -> floe_actors::Result<()> {
        self.info
            .injected_fault(crate::failover::FaultMoment::Snapshot(
                barrier.checkpoint_id,
            ))?;
        if barrier.kind == floe_actors::element::BarrierKind::Savepoint
            && let Some(pause) = self.pause.take()
        {
            // The savepoint the source waited for has its cut: go on (a
            // source held at its count is parked, and waits for this).
            if pause.requested {
                pause.wake.wake_subtask();
            }
        }
        let source = &mut self.source;
        let checkpoint = barrier.checkpoint_id;
        let r = catch_unwind(AssertUnwindSafe(|| {
            Ok::<_, crate::Error>((
                source.snapshot_state()?,
                source.snapshot_union_state(checkpoint)?,
            ))
        }));
        let (entries, union) = self.info.check(r)?;
        if !entries.is_empty() || !union.is_empty() {
            let capture = crate::operators::StateCapture {
                split_list: entries,
                union_list: union,
                ..Default::default()
            };
            let info = self.info.clone();
            out.operators.push(floe_actors::snapshot::OperatorCapture {
                persisted: None,
                uid: self.info.uid.clone(),
                finish: Box::new(move || crate::operators::node::encode_capture(capture, &info)),
            });
        }
        // The barrier follows every record emitted so far; an unaligned one
        // overtakes those still queued for the network (output channel state).
        let unaligned = barrier.kind == floe_actors::element::BarrierKind::Unaligned;
        self.next.handle(
            Control::Barrier {
                barrier,
                unaligned,
                snapshot: out,
            }
            .into(),
        )
    }

    fn notify_checkpoint(
        &mut self,
        checkpoint: floe_actors::ids::CheckpointId,
        completed: bool,
    ) -> floe_actors::Result<()> {
        if completed {
            let source = &mut self.source;
            let r = catch_unwind(AssertUnwindSafe(|| {
                source.notify_checkpoint_complete(checkpoint)
            }));
            self.info.check(r)?;
        }
        self.next.handle(
            Control::Notify {
                checkpoint,
                completed,
            }
            .into(),
        )
    }

    fn step(&mut self) -> floe_actors::Result<SourceStep> {
        let mut max = self.batch_size;
        if let Some(p) = &mut self.pause {
            if p.remaining == 0 {
                if !p.requested {
                    p.requested = true;
                    p.wake.rearm();
                    (p.request)();
                }
                // Parked until the savepoint's barrier (`checkpoint`) wakes
                // the subtask: nothing polls meanwhile.
                self.next
                    .handle(Control::Tick(floe_actors::element::now_ms()).into())?;
                return Ok(SourceStep::Parked);
            }
            max = max.min(p.remaining as usize);
        }
        let mut batch = Vec::with_capacity(max);
        let source = &mut self.source;
        let r = catch_unwind(AssertUnwindSafe(|| source.poll_batch(max, &mut batch)));
        let poll = self.info.check(r)?;
        let read = batch.len() as u64 + self.source.take_skipped();
        if let Some(p) = &mut self.pause {
            p.remaining = p.remaining.saturating_sub(read);
        }
        if read > batch.len() as u64 {
            self.info
                .metrics
                .add_out((read - batch.len() as u64) as usize);
        }
        if !batch.is_empty() {
            self.info.metrics.add_out(batch.len());
            self.next.handle(ChainEvent::Records(batch))?;
            // A source's position is snapshotted between steps: what its
            // chain holds back must be out by then.
            while self.next.pending(Next::Other) != Pending::None {
                self.next.resume()?;
            }
            if !self.info.faults.is_empty() {
                let emitted = self
                    .info
                    .metrics
                    .records_out
                    .load(std::sync::atomic::Ordering::Relaxed);
                self.info
                    .injected_fault(crate::failover::FaultMoment::Records(emitted))?;
            }
        }
        let source = &mut self.source;
        let r = catch_unwind(AssertUnwindSafe(|| Ok(source.watermark())));
        if let Some(w) = self.info.check(r)?
            && w > self.watermark
        {
            self.watermark = w;
            self.next.handle(Control::Watermark(w).into())?;
        }
        // Periodic watermarks and idleness advance even when nothing came.
        self.next
            .handle(Control::Tick(floe_actors::element::now_ms()).into())?;
        Ok(match poll {
            SourcePoll::Ready => SourceStep::Emitted,
            SourcePoll::Wait(d) => SourceStep::Wait(d),
            SourcePoll::Parked => SourceStep::Parked,
            SourcePoll::Finished
                if self
                    .hold
                    .as_ref()
                    .is_some_and(|h| h.load(std::sync::atomic::Ordering::Acquire) > 0) =>
            {
                SourceStep::Wait(std::time::Duration::from_millis(2))
            }
            SourcePoll::Finished => {
                self.next.handle(Control::Watermark(MAX_WATERMARK).into())?;
                self.next.handle(Control::EndOfInput.into())?;
                SourceStep::Finished
            }
        })
    }
}
