//! Operators: the per-record logic of a job, run inside a subtask's chain.
//!
//! An [`Operator`] handles a whole batch per call and writes its results into an
//! [`Output`]; its hooks for watermarks and end of input default to no-ops, so a
//! stateless operator implements one method. [`node::OperatorNode`] adapts an
//! operator to the runtime's chain interface: it counts records, runs the
//! operator under `catch_unwind`, and names the operator in every error.

pub mod basic;
pub mod broadcast;
pub mod keyed;
pub mod node;
pub mod process;
pub mod sink;
pub mod source;
pub mod timestamps;

use crate::Result;
use floe_actors::element::{Batch, Record, Timestamp};
use floe_actors::ids::CheckpointId;
use std::any::Any;
use std::marker::PhantomData;

/// A stream transformation from `IN` records to `OUT` records.
pub trait Operator<IN, OUT>: Send + 'static {
    /// Processes one batch, writing results to `out`.
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()>;

    /// Whether the operator holds output of an earlier batch or watermark
    /// it has not emitted yet (see [`resume`](Self::resume)).
    fn has_pending(&self) -> bool {
        false
    }

    /// Emits more of the output held back by `process_batch` (a bounded
    /// amount). An operator that emits many records per input record (a
    /// flat_map) may stop in the middle of one and return; the runtime
    /// calls `resume` while [`has_pending`](Self::has_pending) is true and
    /// its outputs have room, before any new input, so memory stays bounded
    /// by the channels' credits however much one record produces.
    fn resume(&mut self, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// Whether `batch` may be processed while the operator has pending
    /// output, before that output is emitted: it must emit nothing and
    /// change none of that output. The subtask lets such batches in between
    /// the `resume` calls, so a long firing does not stop its input
    /// channels (and, by their credits, every upstream subtask); any other
    /// input waits for the last `resume`. Default: none may.
    fn admits_while_pending(&self, _batch: &Batch<IN>) -> bool {
        false
    }

    /// Whether a watermark may come in while the operator has pending
    /// output: `on_watermark` then goes on with that output under the new
    /// watermark (keeping its order), and the node forwards only the newest
    /// watermark, after the last `resume`. Default: no (the pending output
    /// is emitted first).
    fn admits_watermark_while_pending(&self) -> bool {
        false
    }

    /// Event time advanced; the watermark itself is forwarded after this
    /// returns, or, when the operator then [has pending](Self::has_pending)
    /// output (windows firing a part at a time), after its last `resume`.
    fn on_watermark(&mut self, _watermark: Timestamp, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// The input is complete; emit what is still held.
    fn on_end_of_input(&mut self, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// A processing-time tick (ms since the epoch); arrives between batches
    /// and periodically while no records come.
    fn on_processing_time(&mut self, _now_ms: Timestamp, _out: &mut Output<'_, OUT>) -> Result<()> {
        Ok(())
    }

    /// Whether input watermarks pass through this operator (the final one
    /// always does). Watermark generators return false.
    fn forwards_watermarks(&self) -> bool {
        true
    }

    /// The synchronous part of a checkpoint: capture the operator's state
    /// cheaply; serialization may be deferred into
    /// [`StateCapture::keyed`]. Stateless operators keep the default.
    fn snapshot_state(&mut self, _ctx: &SnapshotContext) -> Result<StateCapture> {
        Ok(StateCapture::default())
    }

    /// Restores state captured by [`snapshot_state`](Self::snapshot_state)
    /// (keyed state: only the key groups this subtask owns now); called once,
    /// before any element.
    fn restore_state(&mut self, _state: RestoredState) -> Result<()> {
        Ok(())
    }

    /// Restore: event time had reached `watermark` at the checkpoint. Take
    /// it as the current watermark without firing anything; called after
    /// [`restore_state`](Self::restore_state), before any element.
    fn restore_watermark(&mut self, _watermark: Timestamp) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint` completed: every operator of the job has
    /// persisted its state for it (two-phase-commit sinks commit here).
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// The operator's gauges for the metrics: its state's size (stateful
    /// operators) and its late records (window operators). Called on the
    /// operator's thread once per metrics interval and at the end of input,
    /// never per record; it must be cheap (no serialization).
    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        floe_actors::metrics::OperatorSample::default()
    }
}

/// What an operator learns when it snapshots.
#[derive(Clone, Debug)]
pub struct SnapshotContext {
    /// The checkpoint id.
    pub checkpoint: CheckpointId,
    /// Whether it is a savepoint (must not depend on earlier checkpoints).
    pub savepoint: bool,
    /// The job's max parallelism: the number of key groups.
    pub max_parallelism: u32,
    /// The key groups this subtask owns.
    pub key_groups: std::ops::Range<u32>,
}

/// Serializes captured keyed state, off the processing thread.
pub type KeyedCapture =
    Box<dyn FnOnce() -> Result<Vec<crate::state::KeyGroupBytes>> + Send + 'static>;

/// An operator's state at a checkpoint.
#[derive(Default)]
pub struct StateCapture {
    /// Keyed state, per key group (redistributed by key group on restore).
    pub keyed: Option<KeyedCapture>,
    /// Operator list state redistributed by even split: on restore at
    /// another parallelism, the entries of all subtasks are dealt out.
    pub split_list: Vec<Vec<u8>>,
    /// Operator list state every subtask gets whole on restore.
    pub union_list: Vec<Vec<u8>>,
    /// Keyed state blobs of an earlier, completed checkpoint that `keyed`
    /// builds on (an incremental snapshot), oldest first: a restore applies
    /// them, then `keyed`.
    pub keyed_base: Vec<floe_actors::snapshot::BlobRef>,
    /// Told the keyed blobs (`keyed_base`, then `keyed`'s) once written.
    pub keyed_persisted: Option<floe_actors::snapshot::PersistedHook>,
    /// Completes the capture off the processing thread, before the
    /// subtask acks: waits for work the operator started at the barrier
    /// (an async sink's flush or pre-commit) and returns union list
    /// entries to add to [`union_list`](Self::union_list). An error
    /// declines the checkpoint.
    pub deferred: Option<DeferredCapture>,
}

/// See [`StateCapture::deferred`].
pub type DeferredCapture = Box<dyn FnOnce() -> Result<Vec<Vec<u8>>> + Send + 'static>;

impl StateCapture {
    /// Whether the capture holds nothing.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_none()
            && self.split_list.is_empty()
            && self.union_list.is_empty()
            && self.deferred.is_none()
    }

    /// Keyed state already serialized.
    pub fn keyed_bytes(groups: Vec<crate::state::KeyGroupBytes>) -> Self {
        StateCapture {
            keyed: Some(Box::new(move || Ok(groups))),
            ..Default::default()
        }
    }
}

/// The state an operator gets back on restore.
#[derive(Clone, Debug, Default)]
pub struct RestoredState {
    /// Keyed state of the key groups this subtask owns.
    pub keyed: Vec<crate::state::KeyGroupBytes>,
    /// This subtask's share of the even-split list state.
    pub split_list: Vec<Vec<u8>>,
    /// The union list state of every former subtask.
    pub union_list: Vec<Vec<u8>>,
    /// Only some subtasks of the job restore (region failover) while the
    /// others keep running: each restored subtask recovers for itself.
    pub partial: bool,
    /// `Some(n)`: nothing is restored because the whole job restarts from
    /// the beginning after a failure (restart-all before any checkpoint
    /// completed; `n` numbers such restarts from 1). Everything an earlier
    /// attempt committed will be produced again. Only transactional sinks
    /// are handed this state.
    pub from_scratch: Option<u64>,
    /// The checkpoint or savepoint restored (`None` when unknown, e.g. an
    /// operator driven directly): what a transactional sink rolls its
    /// output back to.
    pub checkpoint: Option<floe_actors::ids::CheckpointId>,
}

impl RestoredState {
    /// Whether there is nothing to restore.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.split_list.is_empty() && self.union_list.is_empty()
    }
}

/// Per-key-group encoding of in-memory keyed maps, for operators that keep
/// their keyed state in plain maps.
pub mod keyed_snapshot {
    use crate::state::KeyGroupBytes;
    use crate::{Error, Result};
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use std::hash::Hash;

    /// Encodes `entries` into one postcard blob per key group, the groups in
    /// order; the key group of an entry is the one its key is partitioned by.
    pub fn encode<'a, K, V, I>(entries: I, max_parallelism: u32) -> Result<Vec<KeyGroupBytes>>
    where
        K: Serialize + Hash + 'a,
        V: Serialize + 'a,
        I: Iterator<Item = (&'a K, &'a V)>,
    {
        let mut groups: std::collections::BTreeMap<u32, Vec<(&K, &V)>> = Default::default();
        for (k, v) in entries {
            let g = floe_actors::keygroup::key_group(k, max_parallelism);
            groups.entry(g).or_default().push((k, v));
        }
        groups
            .into_iter()
            .map(|(key_group, entries)| {
                let bytes = postcard::to_allocvec(&entries)
                    .map_err(|e| Error::encoding("encode keyed state", e))?;
                Ok(KeyGroupBytes { key_group, bytes })
            })
            .collect()
    }

    /// Encoded timers per key group.
    pub type TimerGroups = Vec<(u32, Vec<u8>)>;

    /// postcard bytes of `value`.
    pub fn to_bytes<V: Serialize + ?Sized>(value: &V) -> Result<Vec<u8>> {
        postcard::to_allocvec(value).map_err(|e| Error::encoding("encode state", e))
    }

    /// The value postcard `bytes` encode.
    pub fn from_bytes<V: DeserializeOwned>(bytes: &[u8]) -> Result<V> {
        postcard::from_bytes(bytes).map_err(|e| Error::encoding("decode state", e))
    }

    /// Combines a state backend's key groups with per-key-group timers: each
    /// group's bytes become the postcard pair `(backend bytes, timer bytes)`
    /// (either may be empty).
    pub fn merge(state: Vec<KeyGroupBytes>, timers: Vec<(u32, Vec<u8>)>) -> Vec<KeyGroupBytes> {
        let mut groups: std::collections::BTreeMap<u32, (Vec<u8>, Vec<u8>)> = Default::default();
        for g in state {
            groups.entry(g.key_group).or_default().0 = g.bytes;
        }
        for (g, t) in timers {
            groups.entry(g).or_default().1 = t;
        }
        groups
            .into_iter()
            .map(|(key_group, pair)| KeyGroupBytes {
                key_group,
                bytes: postcard::to_allocvec(&pair).unwrap_or_default(),
            })
            .collect()
    }

    /// Splits what [`merge`] combined: the backend's key groups (non-empty
    /// ones) and the timer bytes per key group.
    pub fn split(groups: &[KeyGroupBytes]) -> Result<(Vec<KeyGroupBytes>, TimerGroups)> {
        let mut state = Vec::new();
        let mut timers = Vec::new();
        for g in groups {
            let (s, t): (Vec<u8>, Vec<u8>) = from_bytes(&g.bytes)?;
            if !s.is_empty() {
                state.push(KeyGroupBytes {
                    key_group: g.key_group,
                    bytes: s,
                });
            }
            if !t.is_empty() {
                timers.push((g.key_group, t));
            }
        }
        Ok((state, timers))
    }

    /// Decodes what [`encode`] wrote, calling `put` per entry.
    pub fn decode<K, V>(groups: &[KeyGroupBytes], mut put: impl FnMut(K, V)) -> Result<()>
    where
        K: DeserializeOwned,
        V: DeserializeOwned,
    {
        for g in groups {
            let entries: Vec<(K, V)> = postcard::from_bytes(&g.bytes).map_err(|e| {
                Error::encoding(
                    format!("decode keyed state of key group {}", g.key_group),
                    e,
                )
            })?;
            for (k, v) in entries {
                put(k, v);
            }
        }
        Ok(())
    }
}

/// A named side output of type `T`.
///
/// # Examples
/// ```
/// let late: floe::OutputTag<String> = floe::OutputTag::new("late");
/// assert_eq!(late.name(), "late");
/// ```
pub struct OutputTag<T> {
    id: u64,
    name: String,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag {
            id: self.id,
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> OutputTag<T> {
    /// A tag; tags with equal names denote the same side output.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        OutputTag {
            id: floe_actors::keygroup::stable_hash(name.as_str()),
            name,
            _type: PhantomData,
        }
    }

    /// The tag's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

/// Where an operator writes its results: the main output and side outputs.
pub struct Output<'a, T> {
    pub(crate) records: &'a mut Vec<Record<T>>,
    pub(crate) sides: &'a mut [Box<dyn node::SidePort>],
    /// Watermarks and status changes emitted between records:
    /// (number of records before it, marker).
    pub(crate) watermarks: &'a mut Vec<(usize, Marker)>,
}

/// A watermark or watermark-status change emitted between records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    Watermark(Timestamp),
    Status(floe_actors::element::WatermarkStatus),
}

impl<T> Output<'_, T> {
    /// Emits a record with the given timestamp.
    #[inline]
    pub fn emit(&mut self, record: Record<T>) {
        self.records.push(record);
    }

    /// Emits all records of `records`. When nothing was emitted yet, the output
    /// vector is collected from the iterator, which reuses the input batch's
    /// allocation in place when the record types have the same layout.
    #[inline]
    pub fn extend_or_reuse(&mut self, records: impl Iterator<Item = Record<T>>) {
        if self.records.is_empty() {
            *self.records = records.collect();
        } else {
            self.records.extend(records);
        }
    }

    /// Emits a watermark after the records emitted so far.
    #[inline]
    pub fn emit_watermark(&mut self, watermark: Timestamp) {
        self.watermarks
            .push((self.records.len(), Marker::Watermark(watermark)));
    }

    /// Marks the stream idle or active again, after the records emitted so far.
    #[inline]
    pub fn emit_watermark_status(&mut self, status: floe_actors::element::WatermarkStatus) {
        self.watermarks
            .push((self.records.len(), Marker::Status(status)));
    }

    /// Emits a value without timestamp.
    #[inline]
    pub fn collect(&mut self, value: T) {
        self.records.push(Record::new(value));
    }

    /// Emits a value with a timestamp (or none).
    #[inline]
    pub fn collect_with_timestamp(&mut self, value: T, timestamp: Option<Timestamp>) {
        self.records.push(Record { value, timestamp });
    }

    /// Emits a value to the side output `tag`. Dropped when nothing consumes it.
    pub fn side<X: 'static>(&mut self, tag: &OutputTag<X>, value: X, timestamp: Option<Timestamp>) {
        for port in self.sides.iter_mut() {
            if port.tag() == tag.id() {
                if let Some(buf) = port.buffer().downcast_mut::<Vec<Record<X>>>() {
                    buf.push(Record { value, timestamp });
                }
                return;
            }
        }
    }
}

/// Type-erased access used by [`Output::side`].
pub(crate) fn as_any<T: 'static>(v: &mut Vec<Record<T>>) -> &mut dyn Any {
    v
}
