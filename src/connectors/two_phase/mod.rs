//! Exactly-once sinks by two-phase commit, as Flink's `TwoPhaseCommitSinkFunction`
//! and its `SinkWriter`/`Committer` pair.
//!
//! A [`TwoPhaseCommitSink`] writes records into a transaction. At checkpoint
//! n's barrier the current transaction is pre-committed (durable, not yet
//! visible) and recorded in the checkpoint as pending under n, and the next
//! one begins; the subtask acks n only once its transaction is durable. A
//! transaction is pre-committed at every checkpoint, even an empty one.
//! When checkpoint n completes everywhere, the pending transactions of n and
//! earlier are committed (published) in checkpoint order; an aborted
//! checkpoint's stay pending (the next completed checkpoint commits them).
//! Records thus become visible only once the state that produced them is
//! durable, and a failure replays exactly the records whose transactions
//! were not part of the restored checkpoint.
//!
//! On (re)start, before anything else, [`recover`](TwoPhaseCommitSink::recover)
//! gets one [`Recovery`]: the pending transactions of the restored checkpoint
//! (of every former subtask, in union list state) with their checkpoints.
//! One subtask commits them (subtask 0; every restored subtask of a region
//! failover), every subtask rolls back what it left after the checkpoint.
//!
//! At the end of a bounded input the last transaction is pre-committed.
//! With periodic checkpoints on, it is committed when a checkpoint taken
//! after the end (the subtask's final checkpoint, as Flink does since 1.14,
//! FLIP-147) completes, so committed output is never taken back; without
//! checkpoints it is committed at once.
//!
//! One trait, two runners, one bookkeeping ([`ledger`]); a sink is added
//! with [`DataStream::sink_exactly_once`](crate::DataStream::sink_exactly_once),
//! which picks the runner by [`TwoPhaseCommitSink::AWAITS`]:
//! - [`TwoPhaseCommitSinkOp`] runs the sink on the subtask's own thread,
//!   for a connector whose calls finish before they return (a file, a
//!   blocking client such as the Kafka sink): its methods are `async fn`s
//!   that never wait, polled once; one that waits is an error.
//! - [`AsyncTwoPhaseCommitSinkOp`] runs it as two tasks on the subtask's
//!   arbiter, the writer and a committer (a clone of the sink taken before
//!   `recover`, as Flink's `Committer`) that commits concurrently with the
//!   writes, with a bounded queue and backpressure (see
//!   [`async_sink`](crate::connectors::async_sink)): for clients whose calls
//!   `.await` (PostgreSQL).

pub(crate) mod inline;
pub(crate) mod ledger;
pub(crate) mod tasks;

pub use inline::TwoPhaseCommitSinkOp;
pub use tasks::AsyncTwoPhaseCommitSinkOp;

use crate::Result;
use crate::operators::sink::SinkContext;
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;

/// The checkpoint a transaction committed at the end of the input without
/// a checkpoint is committed for (after every checkpoint): a restore of any
/// checkpoint keeps it.
pub const AFTER_END: CheckpointId = CheckpointId(u64::MAX);

/// What a two-phase-commit sink learns when its subtask starts: see
/// [`TwoPhaseCommitSink::recover`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovery<Txn> {
    /// The transactions the restored checkpoint recorded as pre-committed,
    /// of every former subtask, with the checkpoint each was pre-committed
    /// for, in checkpoint order; empty on a fresh start.
    pub pending: Vec<(CheckpointId, Txn)>,
    /// Whether this subtask must commit `pending` (subtask 0 of a restore,
    /// or every restored subtask of a region failover); the others leave
    /// them to it.
    pub commit_pending: bool,
    /// The job starts from a checkpoint or savepoint (false: fresh start,
    /// or a start from scratch).
    pub restored: bool,
    /// The checkpoint or savepoint restored, when `restored`: output
    /// committed for a later checkpoint is produced again by the replay.
    pub checkpoint: Option<CheckpointId>,
    /// `Some(n)`: the whole job restarts from the beginning after a
    /// failure (the n-th such restart): what earlier attempts committed
    /// will be produced again.
    pub from_scratch: Option<u64>,
    /// Only some subtasks restore (region failover): the others run on.
    pub partial: bool,
}

impl<Txn> Recovery<Txn> {
    /// A fresh start: nothing restored.
    pub fn fresh() -> Self {
        Recovery {
            pending: Vec::new(),
            commit_pending: false,
            restored: false,
            checkpoint: None,
            from_scratch: None,
            partial: false,
        }
    }
}

/// A sink that writes in transactions and publishes them in two phases;
/// one instance per subtask, cloned from the one given to
/// [`DataStream::sink_exactly_once`](crate::DataStream::sink_exactly_once)
/// (see the [module docs](self) for how it runs).
///
/// Call order on the writer, each finished before the next:
/// [`recover`](Self::recover), [`open`](Self::open), then cycles of
/// [`begin`](Self::begin) → [`write`](Self::write)* →
/// [`pre_commit`](Self::pre_commit). [`commit`](Self::commit) follows a
/// checkpoint's completion; with the async runner it is called on a clone
/// of the sink taken before `recover` (the committer), concurrently with
/// the writer's calls, so it must not rely on the writer's connection or
/// state; the inline runner calls it on the writer itself.
///
/// A connector whose calls block implements the methods as `async fn`s
/// that do not `.await`; one whose calls wait sets [`AWAITS`](Self::AWAITS).
pub trait TwoPhaseCommitSink<T>: Send + 'static {
    /// A transaction handle, persisted in checkpoints (e.g. a pending
    /// file's name, a prepared transaction's id).
    type Txn: Serialize + DeserializeOwned + Clone + Send + std::fmt::Debug + 'static;

    /// `true`: the sink's futures wait on I/O, so it runs as a writer and a
    /// committer task on the subtask's arbiter
    /// ([`AsyncTwoPhaseCommitSinkOp`]); `false` (the default): its calls
    /// finish before they return and it runs on the subtask's thread
    /// ([`TwoPhaseCommitSinkOp`]; a future that waits is then an error).
    const AWAITS: bool = false;

    /// Called first on every subtask (fresh start or restore): commit
    /// `recovery.pending` if `recovery.commit_pending` (idempotently), and
    /// discard what this subtask began or pre-committed after the restored
    /// checkpoint (transactions not in `pending`). Default: commit them.
    fn recover(
        &mut self,
        _ctx: &SinkContext,
        recovery: Recovery<Self::Txn>,
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            if recovery.commit_pending {
                for (checkpoint, t) in recovery.pending {
                    self.commit(t, checkpoint).await?;
                }
            }
            Ok(())
        }
    }

    /// Called once, after [`recover`](Self::recover), before the first
    /// transaction.
    fn open(&mut self, _ctx: &SinkContext) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Starts a new transaction.
    fn begin(&mut self) -> impl Future<Output = Result<Self::Txn>> + Send;

    /// Writes a batch into `txn`.
    fn write(
        &mut self,
        txn: &mut Self::Txn,
        batch: Batch<T>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Makes `txn` durable and committable even after a crash, not yet
    /// visible. `checkpoint` is the checkpoint it belongs to (`None`: the
    /// end of the input, before the final checkpoint).
    fn pre_commit(
        &mut self,
        txn: &mut Self::Txn,
        checkpoint: Option<CheckpointId>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Publishes a transaction pre-committed for `checkpoint` ([`AFTER_END`]:
    /// committed at the end of the input without a checkpoint). MUST be
    /// idempotent: it may be called again for the same transaction after a
    /// restore. A sink that rolls back, on a restore, what was committed
    /// for later checkpoints records `checkpoint` with the commit (commits
    /// of different subtasks interleave in any order).
    fn commit(
        &mut self,
        txn: Self::Txn,
        checkpoint: CheckpointId,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Discards a transaction that will never be committed.
    fn abort(&mut self, txn: Self::Txn) -> impl Future<Output = Result<()>> + Send;
}
