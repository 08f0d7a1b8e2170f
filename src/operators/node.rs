//! The nodes of a chain: what adapts user code to the runtime's chain
//! interface.
//!
//! An operator node owns the operator, the next element of the chain, and
//! the side output ports; a [`SourceNode`] drives a
//! [`SourceFunction`](super::source::SourceFunction) at the head of a
//! source subtask's chain. Every call into user code runs under
//! `catch_unwind`; a panic or an error becomes a runtime error naming this
//! operator and subtask. At a barrier each node captures its state and
//! passes the barrier on, so one file holds every chain element a barrier
//! passes between the subtask and its record writers.

use super::Marker;
use super::{Operator, Output, SnapshotContext, StateCapture};
use floe_actors::chain::{ChainEvent, ChainInput, Control, Next, Pending};
use floe_actors::element::{Barrier, BarrierKind, Batch, Record, Timestamp, WatermarkStatus};
use floe_actors::error::panic_message;
use floe_actors::ids::CheckpointId;
use floe_actors::ids::SubtaskIndex;
use floe_actors::metrics::OperatorMetrics;
use floe_actors::snapshot::{ChainSnapshot, OperatorBytes, OperatorCapture};
use std::any::Any;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A side output's buffer and its consumers.
pub trait SidePort {
    /// The tag id.
    fn tag(&self) -> u64;
    /// The buffer, as `Vec<Record<X>>`.
    fn buffer(&mut self) -> &mut dyn Any;
    /// Pushes the buffered records on.
    fn flush(&mut self) -> floe_actors::Result<()>;
    /// Passes a control event on (a barrier after the buffered records).
    fn control(&mut self, event: Control<'_>) -> floe_actors::Result<()>;
}

/// The side port of records of type `X`.
pub struct TypedSidePort<X> {
    pub(crate) tag: u64,
    pub(crate) buffer: Vec<Record<X>>,
    pub(crate) next: Box<dyn ChainInput<X>>,
}

impl<X: 'static> SidePort for TypedSidePort<X> {
    fn tag(&self) -> u64 {
        self.tag
    }
    fn buffer(&mut self) -> &mut dyn Any {
        super::as_any(&mut self.buffer)
    }
    fn flush(&mut self) -> floe_actors::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.buffer);
        self.next.handle(ChainEvent::Records(batch))
    }
    fn control(&mut self, event: Control<'_>) -> floe_actors::Result<()> {
        if matches!(event, Control::Barrier { .. }) {
            self.flush()?;
        }
        self.next.handle(ChainEvent::Control(event))
    }
}

/// Identifies an operator instance in errors.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Operator name.
    pub name: String,
    /// The operator's stable uid (checkpoints match state by it).
    pub uid: String,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// The key groups this subtask owns.
    pub key_groups: std::ops::Range<u32>,
    /// Subtask index.
    pub subtask: SubtaskIndex,
    /// Record counters.
    pub metrics: Arc<OperatorMetrics>,
    /// Failures to inject into this subtask.
    pub faults: Vec<FaultTrigger>,
}

/// A configured fault of one operator subtask.
#[derive(Clone, Debug)]
pub struct FaultTrigger {
    /// When it fires.
    pub at: crate::failover::FaultPoint,
    /// Its index in the configured faults.
    pub index: usize,
    /// Fired flags of every configured fault, shared by all attempts.
    pub fired: Arc<Vec<std::sync::atomic::AtomicBool>>,
    /// The injector the fault came from, told when it fires.
    pub injector: Option<Arc<dyn crate::failover::FaultInjector>>,
}

impl NodeInfo {
    /// An injected failure due at `at`; each fault fires once per job.
    pub(crate) fn injected_fault(
        &self,
        at: crate::failover::FaultMoment,
    ) -> floe_actors::Result<()> {
        for f in &self.faults {
            if at.reached(f.at)
                && let Some(flag) = f.fired.get(f.index)
                && !flag.swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                if let Some(injector) = &f.injector {
                    injector.fired(&crate::failover::Fault {
                        operator: self.name.clone(),
                        subtask: self.subtask.0 as usize,
                        at: f.at,
                    });
                }
                return Err(floe_actors::Error::InjectedFault {
                    operator: self.name.clone(),
                    subtask: self.subtask,
                    point: Some(f.at),
                });
            }
        }
        Ok(())
    }
}

impl NodeInfo {
    /// Converts the result of a call into user code into a runtime result.
    pub fn check<R>(&self, r: std::thread::Result<crate::Result<R>>) -> floe_actors::Result<R> {
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(crate::Error::Runtime(e))) => Err(e),
            Ok(Err(e)) => Err(e.into_operator_failure(&self.name, self.subtask, "")),
            Err(p) => Err(floe_actors::Error::UserPanic {
                operator: self.name.clone(),
                subtask: self.subtask,
                message: panic_message(&*p),
            }),
        }
    }
}

/// An operator in a chain.
pub struct OperatorNode<IN, OUT, O> {
    op: O,
    next: Box<dyn ChainInput<OUT>>,
    sides: Vec<Box<dyn SidePort>>,
    info: NodeInfo,
    /// A watermark that arrived while the operator had output left to emit
    /// (windows firing a bounded part at a time): forwarded after it.
    held_watermark: Option<Timestamp>,
    _in: PhantomData<fn(IN)>,
}

impl<IN, OUT, O> OperatorNode<IN, OUT, O>
where
    IN: 'static,
    OUT: 'static,
    O: Operator<IN, OUT>,
{
    /// A node running `op`, feeding `next` and `sides`.
    pub fn new(
        op: O,
        next: Box<dyn ChainInput<OUT>>,
        sides: Vec<Box<dyn SidePort>>,
        info: NodeInfo,
    ) -> Self {
        OperatorNode {
            op,
            next,
            sides,
            info,
            held_watermark: None,
            _in: PhantomData,
        }
    }

    fn run(
        &mut self,
        f: impl FnOnce(&mut O, &mut Output<'_, OUT>) -> crate::Result<()>,
    ) -> floe_actors::Result<()> {
        // Empty: operators either collect into it in place or grow it.
        let mut records = Vec::new();
        let mut watermarks = Vec::new();
        let op = &mut self.op;
        let sides = &mut self.sides;
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut out = Output {
                records: &mut records,
                sides,
                watermarks: &mut watermarks,
            };
            f(op, &mut out)
        }));
        self.info.check(r)?;
        self.info.metrics.add_out(records.len());
        if watermarks.is_empty() {
            if !records.is_empty() {
                self.next.handle(ChainEvent::Records(records))?;
            }
        } else {
            // Records and the watermarks emitted between them, in order.
            let mut it = records.into_iter();
            let mut sent = 0;
            for (pos, marker) in watermarks {
                let segment: Vec<_> = it.by_ref().take(pos - sent).collect();
                sent = pos;
                if !segment.is_empty() {
                    self.next.handle(ChainEvent::Records(segment))?;
                }
                let control = match marker {
                    Marker::Watermark(wm) => Control::Watermark(wm),
                    Marker::Status(st) => Control::Status(st),
                };
                self.next.handle(control.into())?;
            }
            let rest: Vec<_> = it.collect();
            if !rest.is_empty() {
                self.next.handle(ChainEvent::Records(rest))?;
            }
        }
        for s in &mut self.sides {
            s.flush()?;
        }
        if self.info.metrics.sample_due() {
            self.sample_metrics();
        }
        Ok(())
    }

    /// Passes `watermark` on (a watermark generator's own input watermarks
    /// stop here, but the final one).
    fn forward_watermark(&mut self, watermark: Timestamp) -> floe_actors::Result<()> {
        if !self.op.forwards_watermarks() && watermark != floe_actors::element::MAX_WATERMARK {
            return Ok(());
        }
        self.pass_on(Control::Watermark(watermark))
    }

    /// Passes a control event to the next element and the side outputs.
    fn pass_on(&mut self, mut event: Control<'_>) -> floe_actors::Result<()> {
        self.next.handle(event.reborrow().into())?;
        for s in &mut self.sides {
            s.control(event.reborrow())?;
        }
        Ok(())
    }

    /// Forwards the watermark held back behind pending output once the
    /// operator has emitted all of it.
    fn release_held_watermark(&mut self) -> floe_actors::Result<()> {
        if !self.op.has_pending()
            && let Some(watermark) = self.held_watermark.take()
        {
            self.forward_watermark(watermark)?;
        }
        Ok(())
    }

    /// Emits whatever the operator still holds, then the held watermark:
    /// nothing overtakes them, even an element that arrives without the
    /// subtask resuming the chain first.
    fn finish_pending(&mut self) -> floe_actors::Result<()> {
        while self.op.has_pending() {
            self.run(|op, out| op.resume(out))?;
        }
        self.release_held_watermark()
    }

    /// Stores the operator's state size and late records in its counters.
    fn sample_metrics(&self) {
        let op = &self.op;
        if let Ok(s) = catch_unwind(AssertUnwindSafe(|| op.metrics_sample())) {
            self.info.metrics.record_sample(s);
        }
    }
}

impl<IN, OUT, O> OperatorNode<IN, OUT, O>
where
    IN: 'static,
    OUT: 'static,
    O: Operator<IN, OUT>,
{
    #[inline]
    fn records(&mut self, batch: Batch<IN>) -> floe_actors::Result<()> {
        // A batch the operator admits goes in ahead of its pending output
        // (which nothing it emits precedes); any other waits for all of it.
        if self.pending(Next::Records(&batch)) != Pending::Admits {
            self.finish_pending()?;
        }
        let n = batch.len();
        self.run(move |op, out| op.process_batch(batch, out))?;
        // Counted once processed, so a reader that sees the count knows the
        // records went through.
        self.info.metrics.add_in(n);
        if !self.info.faults.is_empty() {
            let total = self
                .info
                .metrics
                .records_in
                .load(std::sync::atomic::Ordering::Relaxed);
            self.info
                .injected_fault(crate::failover::FaultMoment::Records(total))?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp) -> floe_actors::Result<()> {
        if self.pending(Next::Watermark) != Pending::Admits {
            self.finish_pending()?;
        }
        self.run(|op, out| op.on_watermark(watermark, out))?;
        if self.op.has_pending() {
            // The operator fires the rest by `resume`, a bounded part at a
            // time; the watermark (the newest, if one was held) follows its
            // last output.
            self.held_watermark = Some(watermark);
            return Ok(());
        }
        self.held_watermark = None;
        self.forward_watermark(watermark)
    }

    fn on_status(&mut self, status: WatermarkStatus) -> floe_actors::Result<()> {
        self.finish_pending()?;
        if !self.op.forwards_watermarks() {
            // A watermark generator decides the status of its own output.
            return Ok(());
        }
        self.pass_on(Control::Status(status))
    }

    fn on_end_of_input(&mut self) -> floe_actors::Result<()> {
        self.finish_pending()?;
        self.run(|op, out| op.on_end_of_input(out))?;
        // The final values, whatever the sampling round.
        self.sample_metrics();
        self.pass_on(Control::EndOfInput)
    }

    fn on_barrier(
        &mut self,
        barrier: Barrier,
        unaligned: bool,
        snapshot: &mut ChainSnapshot,
    ) -> floe_actors::Result<()> {
        self.finish_pending()?;
        if !self.info.faults.is_empty() {
            self.info
                .injected_fault(crate::failover::FaultMoment::Snapshot(
                    barrier.checkpoint_id,
                ))?;
        }
        let ctx = SnapshotContext {
            checkpoint: barrier.checkpoint_id,
            savepoint: barrier.kind == BarrierKind::Savepoint,
            max_parallelism: self.info.max_parallelism,
            key_groups: self.info.key_groups.clone(),
        };
        let op = &mut self.op;
        let r = catch_unwind(AssertUnwindSafe(|| op.snapshot_state(&ctx)));
        let mut capture = self.info.check(r)?;
        if !capture.is_empty() {
            let info = self.info.clone();
            snapshot.operators.push(OperatorCapture {
                persisted: capture.keyed_persisted.take(),
                uid: self.info.uid.clone(),
                finish: Box::new(move || {
                    info.injected_fault(crate::failover::FaultMoment::AsyncWrite(ctx.checkpoint))?;
                    encode_capture(capture, &info)
                }),
            });
        }
        self.pass_on(Control::Barrier {
            barrier,
            unaligned,
            snapshot,
        })
    }

    fn on_notify(&mut self, checkpoint: CheckpointId, completed: bool) -> floe_actors::Result<()> {
        let op = &mut self.op;
        let r = catch_unwind(AssertUnwindSafe(|| {
            if completed {
                op.notify_checkpoint_complete(checkpoint)
            } else {
                op.notify_checkpoint_aborted(checkpoint)
            }
        }));
        self.info.check(r)?;
        self.pass_on(Control::Notify {
            checkpoint,
            completed,
        })
    }
}

impl<IN, OUT, O> ChainInput<IN> for OperatorNode<IN, OUT, O>
where
    IN: 'static,
    OUT: 'static,
    O: Operator<IN, OUT>,
{
    #[inline]
    fn handle(&mut self, event: ChainEvent<'_, IN>) -> floe_actors::Result<()> {
        let control = match event {
            ChainEvent::Records(batch) => return self.records(batch),
            ChainEvent::Control(c) => c,
        };
        match control {
            Control::Watermark(watermark) => self.on_watermark(watermark),
            Control::Status(status) => self.on_status(status),
            Control::Tick(now_ms) => {
                self.run(|op, out| op.on_processing_time(now_ms, out))?;
                self.pass_on(Control::Tick(now_ms))
            }
            Control::EndOfInput => self.on_end_of_input(),
            Control::Barrier {
                barrier,
                unaligned,
                snapshot,
            } => self.on_barrier(barrier, unaligned, snapshot),
            Control::Notify {
                checkpoint,
                completed,
            } => self.on_notify(checkpoint, completed),
            Control::RestoreWatermark(watermark) => {
                let op = &mut self.op;
                let r = catch_unwind(AssertUnwindSafe(|| op.restore_watermark(watermark)));
                self.info.check(r)?;
                self.pass_on(Control::RestoreWatermark(watermark))
            }
        }
    }

    fn pending(&self, next: Next<'_, IN>) -> Pending {
        // What this operator emitted earlier goes on first.
        if self.next.pending(Next::Other) != Pending::None {
            return Pending::Holds;
        }
        if !self.op.has_pending() {
            return Pending::None;
        }
        let admits = match next {
            Next::Records(batch) => self.op.admits_while_pending(batch),
            Next::Watermark => self.op.admits_watermark_while_pending(),
            Next::Other => false,
        };
        if admits {
            Pending::Admits
        } else {
            Pending::Holds
        }
    }

    fn resume(&mut self) -> floe_actors::Result<()> {
        // What this operator emitted earlier goes on first.
        if self.next.pending(Next::Other) != Pending::None {
            return self.next.resume();
        }
        self.run(|op, out| op.resume(out))?;
        self.release_held_watermark()
    }
}

/// The asynchronous part of an operator's snapshot: serializes what it captured.
pub(crate) fn encode_capture(
    capture: StateCapture,
    info: &NodeInfo,
) -> floe_actors::Result<OperatorBytes> {
    let fail = |e: String| floe_actors::Error::operator(info.name.clone(), info.subtask, e);
    let list = |l: Vec<Vec<u8>>| -> floe_actors::Result<Option<Vec<u8>>> {
        if l.is_empty() {
            return Ok(None);
        }
        postcard::to_allocvec(&l)
            .map(Some)
            .map_err(|e| fail(format!("cannot encode list state: {e}")))
    };
    let mut union_list = capture.union_list;
    if let Some(deferred) = capture.deferred {
        let more = catch_unwind(AssertUnwindSafe(deferred));
        union_list.extend(info.check(more)?);
    }
    let keyed = match capture.keyed {
        None => None,
        Some(f) => {
            let groups = catch_unwind(AssertUnwindSafe(f));
            let groups = info.check(groups)?;
            Some(
                postcard::to_allocvec(&groups)
                    .map_err(|e| fail(format!("cannot encode keyed state: {e}")))?,
            )
        }
    };
    Ok(OperatorBytes {
        keyed,
        keyed_base: capture.keyed_base,
        split_list: list(capture.split_list)?,
        union_list: list(union_list)?,
    })
}

/// Drives a source function and its chain inside a source subtask.
pub struct SourceNode<T> {
    source: Box<dyn super::source::SourceFunction<T>>,
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
        source: Box<dyn super::source::SourceFunction<T>>,
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

impl<T: 'static> floe_actors::source::SourceDriver for SourceNode<T> {
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
                finish: Box::new(move || encode_capture(capture, &info)),
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

    fn step(&mut self) -> floe_actors::Result<floe_actors::source::SourceStep> {
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
                return Ok(floe_actors::source::SourceStep::Parked);
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
            super::source::SourcePoll::Ready => floe_actors::source::SourceStep::Emitted,
            super::source::SourcePoll::Wait(d) => floe_actors::source::SourceStep::Wait(d),
            super::source::SourcePoll::Parked => floe_actors::source::SourceStep::Parked,
            super::source::SourcePoll::Finished
                if self
                    .hold
                    .as_ref()
                    .is_some_and(|h| h.load(std::sync::atomic::Ordering::Acquire) > 0) =>
            {
                floe_actors::source::SourceStep::Wait(std::time::Duration::from_millis(2))
            }
            super::source::SourcePoll::Finished => {
                self.next
                    .handle(Control::Watermark(floe_actors::element::MAX_WATERMARK).into())?;
                self.next.handle(Control::EndOfInput.into())?;
                floe_actors::source::SourceStep::Finished
            }
        })
    }
}
