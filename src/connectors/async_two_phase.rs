//! Exactly-once async sinks by two-phase commit: the async counterpart of
//! [`two_phase`](crate::connectors::two_phase), for clients whose calls
//! `.await` (PostgreSQL, Kafka transactions).
//!
//! An [`AsyncTwoPhaseCommitSink`] is driven by a task on its subtask's
//! arbiter, as an [`AsyncSink`](crate::connectors::async_sink::AsyncSink)
//! is (bounded queue, backpressure, wake-ups; see
//! [`async_sink`](crate::connectors::async_sink)). The transaction protocol
//! is the one of [`TwoPhaseCommitSinkOp`](crate::connectors::two_phase::TwoPhaseCommitSinkOp):
//!
//! 1. Records go into the current transaction, begun on the first write.
//! 2. At checkpoint n's barrier the current transaction is pre-committed
//!    (durable, not visible) and recorded as pending under n; the
//!    checkpoint's asynchronous part waits for the pre-commit, so the
//!    subtask acks n only once its transaction is durable. A transaction
//!    is pre-committed at every checkpoint, even an empty one.
//! 3. When checkpoint n completes, the pending transactions of n and
//!    earlier are committed in order, by a second task (the committer, on
//!    a clone of the sink) that runs concurrently with the writes ([`commit`](AsyncTwoPhaseCommitSink::commit)
//!    must be idempotent). An aborted checkpoint's stay pending.
//! 4. On (re)start, before anything else,
//!    [`recover`](AsyncTwoPhaseCommitSink::recover) gets the pending
//!    transactions of the restored checkpoint (every former subtask's):
//!    one subtask commits them, every subtask rolls back what it left
//!    after the checkpoint.
//! 5. At the end of the input the last transaction is pre-committed, and
//!    committed when the final checkpoint completes (or at once without
//!    checkpoints); the subtask finishes only after that commit.

use super::async_sink::{DriverGuard, Shared, deferred_reply, spawn_driver};
use crate::operators::sink::SinkContext;
use crate::operators::{Operator, Output, RestoredState, SnapshotContext, StateCapture};
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use floe_actors::wake::SubtaskWaker;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// What a two-phase-commit sink learns when its subtask starts: see
/// [`AsyncTwoPhaseCommitSink::recover`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovery<Txn> {
    /// The transactions the restored checkpoint recorded as pre-committed,
    /// of every former subtask, in checkpoint order; empty on a fresh start.
    pub pending: Vec<Txn>,
    /// Whether this subtask must commit `pending` (subtask 0 of a restore,
    /// or every restored subtask of a region failover); the others leave
    /// them to it.
    pub commit_pending: bool,
    /// The job starts from a checkpoint or savepoint (false: fresh start).
    pub restored: bool,
    /// `Some(n)`: the whole job restarts from the beginning after a
    /// failure (the n-th such restart): what earlier attempts committed
    /// will be produced again.
    pub from_scratch: Option<u64>,
    /// Only some subtasks restore (region failover): the others run on.
    pub partial: bool,
}

/// A sink that writes in transactions and publishes them in two phases,
/// with asynchronous calls; one instance per subtask, cloned from the one
/// given to
/// [`DataStream::add_async_two_phase_sink`](crate::DataStream::add_async_two_phase_sink).
///
/// Call order on the writer, each awaited before the next:
/// [`recover`](Self::recover), [`open`](Self::open), then cycles of
/// [`begin`](Self::begin) → [`write`](Self::write)* →
/// [`pre_commit`](Self::pre_commit). [`commit`](Self::commit) is called
/// on a clone of the sink taken before `recover` (the committer), when a
/// checkpoint completes, concurrently with the writer's calls: it must
/// not rely on the writer's connection or state.
pub trait AsyncTwoPhaseCommitSink<T>: Send + 'static {
    /// A transaction handle, persisted in checkpoints (e.g. a prepared
    /// transaction's id).
    type Txn: Serialize + DeserializeOwned + Clone + Send + std::fmt::Debug + 'static;

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
                for t in recovery.pending {
                    self.commit(t).await?;
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

    /// Publishes a pre-committed transaction. MUST be idempotent: it may be
    /// called again for the same transaction after a restore.
    fn commit(&mut self, txn: Self::Txn) -> impl Future<Output = Result<()>> + Send;

    /// Discards a transaction that will never be committed.
    fn abort(&mut self, txn: Self::Txn) -> impl Future<Output = Result<()>> + Send;
}

/// The pending key of the transaction pre-committed at the end of input,
/// until a checkpoint takes it.
const AFTER_END: CheckpointId = CheckpointId(u64::MAX);

type UnionReply = futures::channel::oneshot::Sender<Result<Vec<Vec<u8>>>>;

enum Command<T, Txn> {
    Recover(Recovery<Txn>),
    Write(Batch<T>),
    PreCommit(CheckpointId, UnionReply),
    Finish,
}

/// Pre-committed transactions by checkpoint, shared by the writer and the
/// committer (never locked across an await).
type Pending<Txn> = Arc<Mutex<BTreeMap<CheckpointId, Vec<Txn>>>>;

fn lock<Txn>(
    pending: &Pending<Txn>,
) -> std::sync::MutexGuard<'_, BTreeMap<CheckpointId, Vec<Txn>>> {
    pending.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer side of the transaction state machine, owned by the driver task.
struct Writer<S: AsyncTwoPhaseCommitSink<T>, T> {
    sink: S,
    ctx: SinkContext,
    current: Option<S::Txn>,
    pending: Pending<S::Txn>,
    commits: Shared<CheckpointId>,
    final_checkpoint: bool,
    ended: bool,
    started: bool,
}

impl<S: AsyncTwoPhaseCommitSink<T>, T: Send + 'static> Writer<S, T> {
    async fn start(&mut self, recovery: Recovery<S::Txn>) -> Result<()> {
        self.started = true;
        self.sink.recover(&self.ctx, recovery).await?;
        self.sink.open(&self.ctx).await
    }

    async fn ensure_current(&mut self) -> Result<()> {
        if self.current.is_none() {
            self.current = Some(self.sink.begin().await?);
        }
        Ok(())
    }

    fn union_list(&self) -> Result<Vec<Vec<u8>>> {
        lock(&self.pending)
            .iter()
            .flat_map(|(checkpoint, txns)| txns.iter().map(move |t| (*checkpoint, t)))
            .map(|entry| {
                postcard::to_allocvec(&entry).map_err(|e| {
                    Error::User(format!(
                        "cannot encode pending transaction {:?}: {e}",
                        entry.1
                    ))
                })
            })
            .collect()
    }

    async fn run(&mut self, command: Command<T, S::Txn>) -> Result<()> {
        if !self.started {
            let fresh = Recovery {
                pending: Vec::new(),
                commit_pending: false,
                restored: false,
                from_scratch: None,
                partial: false,
            };
            if let Command::Recover(r) = command {
                return self.start(r).await;
            }
            self.start(fresh).await?;
        }
        match command {
            Command::Recover(_) => Ok(()),
            Command::Write(batch) => {
                self.ensure_current().await?;
                let txn = self
                    .current
                    .as_mut()
                    .expect("current transaction was just begun");
                self.sink.write(txn, batch).await
            }
            Command::PreCommit(checkpoint, reply) => {
                let r = self.pre_commit(checkpoint).await;
                let failed = r.as_ref().err().map(|e| e.to_string());
                let _ = reply.send(r);
                match failed {
                    Some(e) => Err(Error::User(e)),
                    None => Ok(()),
                }
            }
            Command::Finish => {
                self.ended = true;
                if let Some(mut txn) = self.current.take() {
                    self.sink.pre_commit(&mut txn, None).await?;
                    lock(&self.pending).entry(AFTER_END).or_default().push(txn);
                }
                if self.final_checkpoint {
                    return Ok(());
                }
                self.commits.push(AFTER_END, false)
            }
        }
    }

    async fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>> {
        if self.ended {
            // The final checkpoint takes the transaction pre-committed at
            // the end of the input; nothing new is begun.
            let mut pending = lock(&self.pending);
            if let Some(last) = pending.remove(&AFTER_END) {
                pending.entry(checkpoint).or_default().extend(last);
            }
        } else {
            self.ensure_current().await?;
            let mut txn = self
                .current
                .take()
                .expect("current transaction was just begun");
            self.sink.pre_commit(&mut txn, Some(checkpoint)).await?;
            lock(&self.pending).entry(checkpoint).or_default().push(txn);
        }
        self.union_list()
    }
}

/// Commits, in checkpoint order, every pending transaction of a checkpoint
/// up to `up_to`. A transaction leaves the pending map only once its commit
/// returned: a snapshot taken meanwhile (by the writer, concurrently) still
/// lists it, so a failure in the middle of the commit commits it again on
/// restore instead of rolling it back.
async fn commit_up_to<S, T>(
    committer: &mut S,
    pending: &Pending<S::Txn>,
    up_to: CheckpointId,
) -> Result<()>
where
    S: AsyncTwoPhaseCommitSink<T>,
{
    loop {
        let next = {
            let p = lock(pending);
            p.first_key_value()
                .filter(|(c, _)| **c <= up_to)
                .and_then(|(c, txns)| txns.first().map(|t| (*c, t.clone())))
        };
        let Some((checkpoint, txn)) = next else {
            return Ok(());
        };
        if let Err(e) = committer.commit(txn.clone()).await {
            return Err(Error::User(format!(
                "cannot commit transaction {txn:?} of checkpoint {}: {e}",
                checkpoint.0
            )));
        }
        let mut p = lock(pending);
        if let Some(txns) = p.get_mut(&checkpoint) {
            txns.remove(0);
            if txns.is_empty() {
                p.remove(&checkpoint);
            }
        }
    }
}

/// Runs an [`AsyncTwoPhaseCommitSink`] as the last operator of a chain.
///
/// Two tasks run on the subtask's arbiter: the *writer* (the sink itself:
/// recover, begin, write, pre-commit) and the *committer* (a clone of the
/// sink made before it started, as Flink's `Committer`), which commits
/// when checkpoints complete. They run concurrently, so a write that
/// waits for a lock held by an earlier, pre-committed transaction (an
/// upsert of the same key) is not queued behind that transaction's commit.
pub struct AsyncTwoPhaseCommitSinkOp<T: Send + 'static, Txn: Send + 'static> {
    queue: Shared<Command<T, Txn>>,
    commits: Shared<CheckpointId>,
    ctx: SinkContext,
    arbiter: std::thread::ThreadId,
    _writer: DriverGuard,
    _committer: DriverGuard,
}

impl<T: Send + 'static, Txn: Send + 'static> AsyncTwoPhaseCommitSinkOp<T, Txn> {
    /// Starts `sink`'s writer and committer on the arbiter of the subtask
    /// being built (call it from the operator factory). `final_checkpoint`:
    /// the job ends with a final checkpoint, which commits the last
    /// transaction.
    pub fn new<S>(
        sink: S,
        ctx: SinkContext,
        name: String,
        capacity: usize,
        final_checkpoint: bool,
    ) -> Result<Self>
    where
        S: AsyncTwoPhaseCommitSink<T, Txn = Txn> + Clone,
    {
        let wake: Arc<SubtaskWaker> = floe_actors::wake::current_waker().ok_or_else(|| {
            Error::Config("an async sink must be created while its subtask is built".into())
        })?;
        let queue = Shared::new(capacity);
        let commits: Shared<CheckpointId> = Shared::new(usize::MAX);
        queue.register_gate(Some(Box::new(commits.clone())))?;
        let pending: Pending<Txn> = Arc::default();
        let mut committer = sink.clone();
        let mut writer = Writer {
            sink,
            ctx,
            current: None,
            pending: pending.clone(),
            commits: commits.clone(),
            final_checkpoint,
            ended: false,
            started: false,
        };
        let fail = Arc::new(move |e: Error| {
            floe_actors::Error::operator(&name, ctx.subtask, e.to_string())
        });
        let fail2 = fail.clone();
        let (q, w) = (queue.clone(), wake.clone());
        let writer_task = spawn_driver(async move {
            while let Some(c) = q.next(|c| matches!(c, Command::Write(_))).await {
                match writer.run(c).await {
                    Ok(()) => q.done(&w),
                    Err(e) => {
                        q.fail(&w, fail(e));
                        return;
                    }
                }
            }
        });
        let c = commits.clone();
        let committer_task = spawn_driver(async move {
            while let Some(up_to) = c.next(|_| false).await {
                match commit_up_to(&mut committer, &pending, up_to).await {
                    Ok(()) => c.done(&wake),
                    Err(e) => {
                        c.fail(&wake, fail2(e));
                        return;
                    }
                }
            }
        });
        Ok(AsyncTwoPhaseCommitSinkOp {
            queue,
            commits,
            ctx,
            arbiter: std::thread::current().id(),
            _writer: writer_task,
            _committer: committer_task,
        })
    }
}

impl<T: Send + 'static, Txn: Send + 'static> Drop for AsyncTwoPhaseCommitSinkOp<T, Txn> {
    fn drop(&mut self) {
        self.queue.close();
        self.commits.close();
    }
}

impl<T, Txn> Operator<T, ()> for AsyncTwoPhaseCommitSinkOp<T, Txn>
where
    T: Send + 'static,
    Txn: DeserializeOwned + Send + 'static,
{
    fn process_batch(&mut self, batch: Batch<T>, _: &mut Output<'_, ()>) -> Result<()> {
        self.queue.push(Command::Write(batch), true)
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        let (tx, rx) = futures::channel::oneshot::channel();
        self.queue
            .push(Command::PreCommit(ctx.checkpoint, tx), false)?;
        Ok(StateCapture {
            deferred: Some(deferred_reply(self.arbiter, rx, Ok)),
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        // The checkpoint ids encode as the plain numbers of earlier versions.
        let mut entries: Vec<(CheckpointId, Txn)> = state
            .union_list
            .iter()
            .map(|bytes| {
                postcard::from_bytes(bytes)
                    .map_err(|e| Error::User(format!("cannot decode a pending transaction: {e}")))
            })
            .collect::<Result<_>>()?;
        // Stable: the order of one former subtask's transactions is kept.
        entries.sort_by_key(|(checkpoint, _)| *checkpoint);
        let recovery = Recovery {
            pending: entries.into_iter().map(|(_, t)| t).collect(),
            commit_pending: state.from_scratch.is_none()
                && (state.partial || self.ctx.subtask.0 == 0),
            restored: state.from_scratch.is_none(),
            from_scratch: state.from_scratch,
            partial: state.partial,
        };
        self.queue.push(Command::Recover(recovery), false)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.commits.push(checkpoint, false)
    }

    fn on_end_of_input(&mut self, _: &mut Output<'_, ()>) -> Result<()> {
        self.queue.push(Command::Finish, false)
    }
}
