//! Window state: where the built-in window operators keep their windows.
//!
//! The window operators (`crate::window`) do not use the generic state API
//! (a handle and a hash lookup per state and record, a clone per read): that
//! costs 1.4–4x their throughput. They are generic over a store instead,
//! and each state backend hands them its own:
//!
//! 1. [`PaneStore`]: the panes of tumbling and sliding windows (one
//!    accumulator per key and pane, fired window by window in time order).
//!    [`HeapPanes`] is time-major — panes sorted by start, one hash table
//!    per pane — the layout that makes a firing a walk of one or a few
//!    tables;
//!    [`RedbPanes`] keeps each key's panes in a redb state backend, and in
//!    memory only the keys of each pane.
//! 2. [`WindowStore`]: per key, its windows and their accumulators
//!    (session windows, merged per key). [`HeapWindows`] is a hash map;
//!    [`RedbWindows`] a redb state backend.
//!
//! The operators are monomorphised over the store: on the heap path there
//! is no dynamic call and no serialization per record, the same code as a
//! map owned by the operator. The redb stores go through the backend's
//! cached tables, so their state may be larger than memory, and their
//! snapshots are the backend's (incremental ones included), restored and
//! redistributed by key group like any keyed state.
//!
//! **Snapshot formats.** A heap store writes, per key group, the postcard
//! list of `(key, windows)` the operators have always written (so
//! checkpoints of earlier versions restore). A redb store writes the pair
//! `(backend bytes, WINDOW_TAG)`; restoring anything else into it (the heap
//! format, a keyed process function's state) fails with a
//! [`StateError::SchemaMismatch`] naming the state.

mod heap;
mod ids;
mod redb;

pub use heap::{HeapPanes, HeapWindows};
pub use redb::{RedbPanes, RedbWindows};

use super::{KeyGroupBytes, StateError};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use floe_actors::snapshot::{BlobRef, PersistedHook};

/// The serialized key groups of a capture, computed off the processing
/// thread.
pub type GroupsFn = Box<dyn FnOnce() -> Result<Vec<KeyGroupBytes>, StateError> + Send>;

/// The synchronous part of a window store's snapshot.
pub struct WindowCapture {
    /// Serializes the key groups (the asynchronous part).
    pub groups: GroupsFn,
    /// Blobs of the completed checkpoint an incremental capture builds on,
    /// oldest first (empty for a full one).
    pub base: Vec<BlobRef>,
    /// Told the blobs the capture was written to (a store that takes
    /// incremental snapshots needs them as the next base).
    pub persisted: Option<PersistedHook>,
}

impl WindowCapture {
    /// A full capture already serialized.
    pub fn full(groups: Vec<KeyGroupBytes>) -> Self {
        WindowCapture {
            groups: Box::new(move || Ok(groups)),
            base: Vec::new(),
            persisted: None,
        }
    }
}

/// What every window store does for checkpoints.
pub trait StoreSnapshots {
    /// The synchronous part of the snapshot of checkpoint `checkpoint`
    /// (a savepoint when `savepoint`).
    fn capture(
        &mut self,
        max_parallelism: u32,
        checkpoint: CheckpointId,
        savepoint: bool,
    ) -> Result<WindowCapture, StateError>;
    /// Replaces the state with restored key groups (a key group may come
    /// several times: a full capture, then deltas).
    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError>;
    /// Checkpoint `checkpoint` completed.
    fn checkpoint_complete(&mut self, _checkpoint: CheckpointId) {}
    /// Checkpoint `checkpoint` was aborted.
    fn checkpoint_aborted(&mut self, _checkpoint: CheckpointId) {}
    /// (key, pane) or (key, window) entries held, for the metrics.
    fn entries(&self) -> usize;
}

/// The panes of aligned (tumbling, sliding) windows: per pane start, an
/// accumulator per key.
///
/// Panes are dropped in order of their start ([`pop_first`](Self::pop_first)).
pub trait PaneStore<K, ACC>: StoreSnapshots + Send + 'static {
    /// Adds to `key`'s accumulator in the pane starting at `pane` (made
    /// with `init` when absent, the key copied only then) with `add`;
    /// returns whether the pane is new. Never called for a pane at or
    /// before one already dropped by [`pop_first`](Self::pop_first). A store
    /// may apply `add` (and `init`) to accumulators it keeps merged from
    /// the pane too.
    fn add(
        &mut self,
        pane: Timestamp,
        key: &K,
        init: impl Fn() -> ACC,
        add: impl Fn(&mut ACC),
    ) -> Result<bool, StateError>;

    /// `key`'s accumulators of the panes starting in `from..to`, merged.
    fn merged(
        &mut self,
        key: &K,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
    ) -> Result<Option<ACC>, StateError>
    where
        ACC: Clone;

    /// Calls `emit` with every key having an accumulator in a pane starting
    /// in `from..to`, and those accumulators merged; stops at `emit`'s
    /// first error. Windows are asked for in order of their end; a store
    /// may keep the last window's merged accumulators and move them to the
    /// next window with `retract` (see
    /// [`AggregateFunction::retract`](crate::state::AggregateFunction::retract)).
    fn for_window<E: From<StateError>>(
        &mut self,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
        retract: impl Fn(&mut ACC, &ACC) -> bool,
        emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E>
    where
        ACC: Clone;

    /// The start of the first pane.
    fn first(&self) -> Option<Timestamp>;

    /// Drops the first pane.
    fn pop_first(&mut self) -> Result<(), StateError>;
}

/// Called with each key and its windows by [`WindowStore::for_each`].
pub type WindowVisitor<'f, K, W, ACC> = dyn FnMut(&K, &[(W, ACC)]) + 'f;

/// Per key, its windows (of type `W`) with their accumulators.
pub trait WindowStore<K, W, ACC>: StoreSnapshots + Send + 'static {
    /// `key`'s windows, if it has any.
    fn get(&mut self, key: &K) -> Result<Option<&Vec<(W, ACC)>>, StateError>;
    /// `key`'s windows, to change in place.
    fn get_mut(&mut self, key: &K) -> Result<Option<&mut Vec<(W, ACC)>>, StateError>;
    /// `key`'s windows, an empty list inserted when it has none.
    fn get_or_insert(&mut self, key: &K) -> Result<&mut Vec<(W, ACC)>, StateError>;
    /// Drops `key`'s windows.
    fn remove(&mut self, key: &K) -> Result<(), StateError>;
    /// Calls `f` with every key and its windows.
    fn for_each(&mut self, f: &mut WindowVisitor<'_, K, W, ACC>) -> Result<(), StateError>;
}
