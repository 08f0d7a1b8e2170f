//! Broadcast process functions: a stream connected with a broadcast stream.
//!
//! Flink's broadcast state pattern. The broadcast input (rules, say) reaches
//! every subtask; each subtask keeps a copy of the broadcast state (named
//! maps, [`BroadcastStateStore`]) that `process_broadcast_element` reads and
//! writes. The other input — a keyed stream, hash-partitioned by key, or a
//! plain stream — is handled by `process_element`, which may only read the
//! broadcast state (and, when keyed, reads and writes the keyed state of the
//! current key and registers timers for it).
//!
//! The operator takes one input of [`BroadcastInput`] elements: the job
//! graph maps each side into it and unions the two with their own
//! partitioners (hash by key, broadcast). The two inputs are not ordered
//! with respect to each other: an element may be processed before a
//! broadcast element sent earlier, so functions must not depend on the
//! interleaving (hold elements in keyed state until their rule arrives, or
//! send the rules first and wait for them), as in Flink.
//!
//! Checkpoints hold each subtask's copy of the broadcast state (in the
//! operator's union list) besides the keyed state and timers; on restore at
//! any parallelism every subtask takes one former copy.

use super::keyed::{KeyedProcessFunction, KeyedProcessOp};
use super::process::{OnTimerContext, ProcessContext};
use super::{Operator, Output, RestoredState, SnapshotContext, StateCapture};
use crate::state::{
    BroadcastState, BroadcastStateStore, MapStateDescriptor, ReadOnlyBroadcastState, StateKey,
    StateValue,
};
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use floe_actors::ids::CheckpointId;
use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// The element type of a broadcast-connected operator's single input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BroadcastInput<IN, B> {
    /// An element of the keyed (or plain) input.
    Element(IN),
    /// An element of the broadcast input.
    Broadcast(B),
}

fn timers_in_broadcast() -> Error {
    Error::User(
        "timers cannot be registered in process_broadcast_element: there is no current key".into(),
    )
}

/// Read-only access to the broadcast states (in `on_timer`).
pub struct BroadcastStates<'a> {
    store: &'a mut BroadcastStateStore,
}

impl BroadcastStates<'_> {
    /// The broadcast state named by `desc`, read-only.
    pub fn get<BK: StateValue + Hash + Eq, BV: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<BK, BV>,
    ) -> Result<ReadOnlyBroadcastState<'_, BK, BV>> {
        Ok(self.store.read_only(desc)?)
    }
}

/// The context of `process_element`: everything a [`ProcessContext`] offers
/// (through `Deref`: output, keyed state of the current key, timers) plus
/// read-only broadcast state.
pub struct ReadOnlyContext<'a, 'o, OUT, K = ()> {
    inner: ProcessContext<'a, 'o, OUT, K>,
    broadcast: &'a mut BroadcastStateStore,
}

impl<OUT, K> ReadOnlyContext<'_, '_, OUT, K> {
    /// The broadcast state named by `desc`, read-only (empty until the
    /// broadcast side puts something in it).
    pub fn broadcast_state<BK: StateValue + Hash + Eq, BV: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<BK, BV>,
    ) -> Result<ReadOnlyBroadcastState<'_, BK, BV>> {
        Ok(self.broadcast.read_only(desc)?)
    }
}

impl<'a, 'o, OUT, K> Deref for ReadOnlyContext<'a, 'o, OUT, K> {
    type Target = ProcessContext<'a, 'o, OUT, K>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<OUT, K> DerefMut for ReadOnlyContext<'_, '_, OUT, K> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// The context of `process_broadcast_element`: output and side outputs
/// (through `Deref` to a [`ProcessContext`] without key) plus read-write
/// broadcast state. There is no current key: keyed state calls fail with
/// [`StateError::NoCurrentKey`](crate::state::StateError::NoCurrentKey),
/// timer calls fail the job.
pub struct BroadcastContext<'a, 'o, OUT, K = ()> {
    inner: ProcessContext<'a, 'o, OUT, K>,
    broadcast: &'a mut BroadcastStateStore,
}

impl<OUT, K> BroadcastContext<'_, '_, OUT, K> {
    /// The broadcast state named by `desc`, for reading and writing. Every
    /// subtask runs the same broadcast elements: update it the same way in
    /// all of them (depend on nothing but the element and the state).
    pub fn broadcast_state<BK: StateValue + Hash + Eq, BV: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<BK, BV>,
    ) -> Result<BroadcastState<'_, BK, BV>> {
        Ok(self.broadcast.state(desc)?)
    }
}

impl<'a, 'o, OUT, K> Deref for BroadcastContext<'a, 'o, OUT, K> {
    type Target = ProcessContext<'a, 'o, OUT, K>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<OUT, K> DerefMut for BroadcastContext<'_, '_, OUT, K> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// A function over a keyed stream connected with a broadcast stream
/// (Flink's `KeyedBroadcastProcessFunction`); see the [module](self) docs.
pub trait KeyedBroadcastProcessFunction<K, IN, B, OUT>: Send + 'static {
    /// Handles one element of the keyed input, with the keyed state of its
    /// key and read-only broadcast state.
    fn process_element(
        &mut self,
        value: IN,
        ctx: &mut ReadOnlyContext<'_, '_, OUT, K>,
    ) -> Result<()>;

    /// Handles one element of the broadcast input (every subtask gets each),
    /// with read-write broadcast state.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut BroadcastContext<'_, '_, OUT, K>,
    ) -> Result<()>;

    /// A timer of the current key fired. The default does nothing.
    fn on_timer(
        &mut self,
        _timestamp: Timestamp,
        _ctx: &mut OnTimerContext<'_, '_, OUT, K>,
        _broadcast: &mut BroadcastStates<'_>,
    ) -> Result<()> {
        Ok(())
    }
}

/// A function over a plain stream connected with a broadcast stream
/// (Flink's `BroadcastProcessFunction`).
pub trait BroadcastProcessFunction<IN, B, OUT>: Send + 'static {
    /// Handles one element of the plain input, with read-only broadcast
    /// state.
    fn process_element(&mut self, value: IN, ctx: &mut ReadOnlyContext<'_, '_, OUT>) -> Result<()>;

    /// Handles one element of the broadcast input, with read-write
    /// broadcast state.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut BroadcastContext<'_, '_, OUT>,
    ) -> Result<()>;
}

/// A fresh context over the same output, key, timers and keyed state.
fn reborrow<'b, 'o, OUT, K>(
    ctx: &'b mut ProcessContext<'_, 'o, OUT, K>,
) -> ProcessContext<'b, 'o, OUT, K> {
    ProcessContext {
        out: &mut *ctx.out,
        timestamp: ctx.timestamp,
        watermark: ctx.watermark,
        key: ctx.key,
        timers: ctx.timers.as_deref_mut(),
        timer_misuse: false,
        state: match ctx.state.as_deref_mut() {
            Some(s) => Some(s),
            None => None,
        },
        operator_state: None,
    }
}

/// Runs the user's keyed broadcast function as the keyed process function of
/// a [`KeyedProcessOp`], holding the broadcast state.
pub(crate) struct KeyedAdapter<F, B> {
    function: F,
    broadcast: BroadcastStateStore,
    _b: PhantomData<fn(B)>,
}

impl<K, IN, B, OUT, F> KeyedProcessFunction<K, IN, OUT> for KeyedAdapter<F, B>
where
    F: KeyedBroadcastProcessFunction<K, IN, B, OUT>,
    B: 'static,
{
    fn process_element(
        &mut self,
        value: IN,
        ctx: &mut ProcessContext<'_, '_, OUT, K>,
    ) -> Result<()> {
        let mut ro = ReadOnlyContext {
            inner: reborrow(ctx),
            broadcast: &mut self.broadcast,
        };
        self.function.process_element(value, &mut ro)
    }

    fn on_timer(
        &mut self,
        timestamp: Timestamp,
        ctx: &mut OnTimerContext<'_, '_, OUT, K>,
    ) -> Result<()> {
        let mut states = BroadcastStates {
            store: &mut self.broadcast,
        };
        self.function.on_timer(timestamp, ctx, &mut states)
    }
}

/// Runs a [`KeyedBroadcastProcessFunction`]: keyed elements go through a
/// [`KeyedProcessOp`] (keyed state, timers), broadcast elements straight to
/// the function.
pub struct KeyedBroadcastOp<IN, B, K, F> {
    inner: KeyedProcessOp<IN, K, KeyedAdapter<F, B>>,
    subtask: u32,
}

impl<IN, B, K, F> KeyedBroadcastOp<IN, B, K, F>
where
    K: Send + 'static,
{
    /// Wraps `function` run as subtask `subtask` of a keyed process
    /// operator `keyed` (built with the function's adapter by `make`);
    /// `operator` names the broadcast state in errors.
    pub(crate) fn new(
        function: F,
        operator: String,
        subtask: u32,
        make: impl FnOnce(KeyedAdapter<F, B>) -> KeyedProcessOp<IN, K, KeyedAdapter<F, B>>,
    ) -> Self {
        let adapter = KeyedAdapter {
            function,
            broadcast: BroadcastStateStore::new(operator),
            _b: PhantomData,
        };
        KeyedBroadcastOp {
            inner: make(adapter),
            subtask,
        }
    }
}

impl<IN, B, K, OUT, F> Operator<BroadcastInput<IN, B>, OUT> for KeyedBroadcastOp<IN, B, K, F>
where
    IN: Send + 'static,
    B: Send + 'static,
    K: StateKey,
    F: KeyedBroadcastProcessFunction<K, IN, B, OUT>,
{
    fn process_batch(
        &mut self,
        batch: Batch<BroadcastInput<IN, B>>,
        out: &mut Output<'_, OUT>,
    ) -> Result<()> {
        // Runs of keyed elements go to the keyed operator as one batch.
        let mut run: Vec<Record<IN>> = Vec::new();
        let mut records = batch.into_iter();
        while let Some(r) = records.next() {
            match r.value {
                BroadcastInput::Element(v) => {
                    if run.capacity() == 0 {
                        run.reserve(records.len() + 1);
                    }
                    run.push(Record {
                        value: v,
                        timestamp: r.timestamp,
                    });
                }
                BroadcastInput::Broadcast(b) => {
                    if !run.is_empty() {
                        self.inner.process_batch(std::mem::take(&mut run), out)?;
                    }
                    let (adapter, backend, watermark) = self.inner.parts_mut();
                    let mut ctx = BroadcastContext {
                        inner: ProcessContext {
                            out,
                            timestamp: r.timestamp,
                            watermark,
                            key: None,
                            timers: None,
                            timer_misuse: false,
                            state: Some(backend),
                            operator_state: None,
                        },
                        broadcast: &mut adapter.broadcast,
                    };
                    adapter.function.process_broadcast_element(b, &mut ctx)?;
                    if ctx.inner.timer_misuse {
                        return Err(timers_in_broadcast());
                    }
                }
            }
        }
        if !run.is_empty() {
            self.inner.process_batch(run, out)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        Operator::<IN, OUT>::on_watermark(&mut self.inner, watermark, out)
    }

    fn on_processing_time(&mut self, now_ms: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        Operator::<IN, OUT>::on_processing_time(&mut self.inner, now_ms, out)
    }

    fn on_end_of_input(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        Operator::<IN, OUT>::on_end_of_input(&mut self.inner, out)
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        let mut capture = Operator::<IN, OUT>::snapshot_state(&mut self.inner, ctx)?;
        let (adapter, _, _) = self.inner.parts_mut();
        capture.union_list = adapter.broadcast.snapshot(self.subtask)?;
        Ok(capture)
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        let union = state.union_list.clone();
        Operator::<IN, OUT>::restore_state(
            &mut self.inner,
            RestoredState {
                union_list: Vec::new(),
                ..state
            },
        )?;
        let (adapter, _, _) = self.inner.parts_mut();
        adapter.broadcast.restore(&union, self.subtask)?;
        Ok(())
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        Operator::<IN, OUT>::restore_watermark(&mut self.inner, watermark)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        Operator::<IN, OUT>::notify_checkpoint_complete(&mut self.inner, checkpoint)
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<()> {
        Operator::<IN, OUT>::notify_checkpoint_aborted(&mut self.inner, checkpoint)
    }

    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        Operator::<IN, OUT>::metrics_sample(&self.inner)
    }
}

/// Runs a [`BroadcastProcessFunction`] (no keyed state, no timers).
pub struct BroadcastOp<IN, B, F> {
    function: F,
    broadcast: BroadcastStateStore,
    watermark: Timestamp,
    subtask: u32,
    _types: PhantomData<fn(IN, B)>,
}

impl<IN, B, F> BroadcastOp<IN, B, F> {
    /// Wraps `function` run as subtask `subtask`; `operator` names the
    /// broadcast state in errors.
    pub fn new(function: F, operator: impl Into<String>, subtask: u32) -> Self {
        BroadcastOp {
            function,
            broadcast: BroadcastStateStore::new(operator),
            watermark: MIN_WATERMARK,
            subtask,
            _types: PhantomData,
        }
    }
}

impl<IN, B, OUT, F> Operator<BroadcastInput<IN, B>, OUT> for BroadcastOp<IN, B, F>
where
    IN: Send + 'static,
    B: Send + 'static,
    F: BroadcastProcessFunction<IN, B, OUT>,
{
    fn process_batch(
        &mut self,
        batch: Batch<BroadcastInput<IN, B>>,
        out: &mut Output<'_, OUT>,
    ) -> Result<()> {
        for r in batch {
            let inner = ProcessContext::unkeyed(out, r.timestamp, self.watermark);
            let misuse = match r.value {
                BroadcastInput::Element(v) => {
                    let mut ctx = ReadOnlyContext {
                        inner,
                        broadcast: &mut self.broadcast,
                    };
                    self.function.process_element(v, &mut ctx)?;
                    ctx.inner.timer_misuse
                }
                BroadcastInput::Broadcast(b) => {
                    let mut ctx = BroadcastContext {
                        inner,
                        broadcast: &mut self.broadcast,
                    };
                    self.function.process_broadcast_element(b, &mut ctx)?;
                    ctx.inner.timer_misuse
                }
            };
            if misuse {
                return Err(super::process::timers_need_keys());
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, _: &mut Output<'_, OUT>) -> Result<()> {
        self.watermark = watermark;
        Ok(())
    }

    fn snapshot_state(&mut self, _ctx: &SnapshotContext) -> Result<StateCapture> {
        Ok(StateCapture {
            union_list: self.broadcast.snapshot(self.subtask)?,
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        self.broadcast.restore(&state.union_list, self.subtask)?;
        Ok(())
    }
}
