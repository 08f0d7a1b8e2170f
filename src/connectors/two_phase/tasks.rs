//! The task runner: a [`TwoPhaseCommitSink`] whose calls `.await`, driven
//! by a writer task and a committer task on its subtask's arbiter, as an
//! [`SinkFunction`](crate::operators::sink::SinkFunction) that awaits is (bounded
//! queue, backpressure, wake-ups; see
//! [`async_sink`](crate::connectors::async_sink)). The protocol is the one
//! of the [module docs](super); here the checkpoint's asynchronous part
//! waits for the pre-commit, and the subtask finishes only after the last
//! commit.

use super::ledger::{Ledger, recovery};
use super::{AFTER_END, Recovery, TwoPhaseCommitSink};
use crate::connectors::async_sink::{DriverGuard, Shared, deferred_reply, spawn_driver};
use crate::operators::sink::SinkContext;
use crate::operators::{Operator, Output, RestoredState, SnapshotContext, StateCapture};
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use floe_actors::wake::SubtaskWaker;
use serde::de::DeserializeOwned;
use std::sync::{Arc, Mutex};

type UnionReply = futures::channel::oneshot::Sender<Result<Vec<Vec<u8>>>>;

enum Command<T, Txn> {
    Recover(Recovery<Txn>),
    Write(Batch<T>),
    PreCommit(CheckpointId, UnionReply),
    Finish,
}

/// The ledger, shared by the writer and the committer (never locked
/// across an await).
type Pending<Txn> = Arc<Mutex<Ledger<Txn>>>;

fn lock<Txn>(pending: &Pending<Txn>) -> std::sync::MutexGuard<'_, Ledger<Txn>> {
    pending.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer side of the transaction state machine, owned by the driver task.
struct Writer<S: TwoPhaseCommitSink<T>, T> {
    sink: S,
    ctx: SinkContext,
    current: Option<S::Txn>,
    pending: Pending<S::Txn>,
    commits: Shared<CheckpointId>,
    final_checkpoint: bool,
    ended: bool,
    started: bool,
}

impl<S: TwoPhaseCommitSink<T>, T: Send + 'static> Writer<S, T> {
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

    async fn run(&mut self, command: Command<T, S::Txn>) -> Result<()> {
        if !self.started {
            if let Command::Recover(r) = command {
                return self.start(r).await;
            }
            self.start(Recovery::fresh()).await?;
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
                    Some(e) => Err(Error::User(e.into())),
                    None => Ok(()),
                }
            }
            Command::Finish => {
                self.ended = true;
                if let Some(mut txn) = self.current.take() {
                    self.sink.pre_commit(&mut txn, None).await?;
                    lock(&self.pending).pre_committed(None, txn);
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
            lock(&self.pending).adopt_after_end(checkpoint);
        } else {
            self.ensure_current().await?;
            let mut txn = self
                .current
                .take()
                .expect("current transaction was just begun");
            self.sink.pre_commit(&mut txn, Some(checkpoint)).await?;
            lock(&self.pending).pre_committed(Some(checkpoint), txn);
        }
        lock(&self.pending).union_list()
    }
}

/// Commits, in checkpoint order, every pending transaction of a checkpoint
/// up to `up_to` (see [`Ledger::next_due`]).
async fn commit_up_to<S, T>(
    committer: &mut S,
    pending: &Pending<S::Txn>,
    up_to: CheckpointId,
) -> Result<()>
where
    S: TwoPhaseCommitSink<T>,
{
    loop {
        let next = lock(pending).next_due(up_to);
        let Some((checkpoint, txn)) = next else {
            return Ok(());
        };
        if let Err(e) = committer.commit(txn.clone(), checkpoint).await {
            return Err(Error::Commit {
                txn: format!("{txn:?}"),
                checkpoint: checkpoint.0,
                source: Box::new(e),
            });
        }
        lock(pending).committed(checkpoint);
    }
}

/// Runs a [`TwoPhaseCommitSink`] as the last operator of a chain, as two
/// tasks.
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
        S: TwoPhaseCommitSink<T, Txn = Txn> + Clone,
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
        let recovery = recovery(&state, &self.ctx)?;
        self.queue.push(Command::Recover(recovery), false)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.commits.push(checkpoint, false)
    }

    fn on_end_of_input(&mut self, _: &mut Output<'_, ()>) -> Result<()> {
        self.queue.push(Command::Finish, false)
    }
}
