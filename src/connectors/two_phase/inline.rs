//! The inline runner: a [`TwoPhaseCommitSink`] whose calls finish before
//! they return, run on its subtask's own thread (see the
//! [module docs](super)).

use super::ledger::{Ledger, recovery};
use super::{AFTER_END, Recovery, TwoPhaseCommitSink};
use crate::operators::sink::{SinkContext, ready_now as now};
use crate::operators::{Operator, Output, RestoredState, SnapshotContext, StateCapture};
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs a [`TwoPhaseCommitSink`] as the last operator of a chain, on the
/// subtask's thread.
pub struct TwoPhaseCommitSinkOp<S, T>
where
    S: TwoPhaseCommitSink<T>,
{
    sink: S,
    ctx: SinkContext,
    /// Recovered (a restore, or a fresh start at the first record).
    recovered: bool,
    opened: bool,
    /// The transaction records are written into; begun lazily.
    current: Option<S::Txn>,
    ledger: Ledger<S::Txn>,
    /// The job ends with a final checkpoint: the last transaction waits
    /// for it instead of being committed at the end of input.
    final_checkpoint: bool,
    /// The input ended: no transaction is begun any more.
    ended: bool,
    _type: PhantomData<fn(T)>,
}

impl<S, T> TwoPhaseCommitSinkOp<S, T>
where
    S: TwoPhaseCommitSink<T>,
{
    /// Wraps `sink` for the subtask described by `ctx`.
    pub fn new(sink: S, ctx: SinkContext) -> Self {
        TwoPhaseCommitSinkOp {
            sink,
            ctx,
            recovered: false,
            opened: false,
            current: None,
            ledger: Ledger::default(),
            final_checkpoint: false,
            ended: false,
            _type: PhantomData,
        }
    }

    /// `true`: the job ends with a final checkpoint (periodic checkpoints
    /// on), so the transaction pre-committed at the end of input is
    /// committed when a checkpoint taken after it completes, not at once.
    pub fn commit_on_final_checkpoint(mut self, yes: bool) -> Self {
        self.final_checkpoint = yes;
        self
    }

    /// The transactions pre-committed and not yet committed, with their
    /// checkpoints, in checkpoint order.
    pub fn pending(&self) -> Vec<(CheckpointId, S::Txn)> {
        self.ledger.entries().map(|(c, t)| (c, t.clone())).collect()
    }

    fn recover(&mut self, recovery: Recovery<S::Txn>) -> Result<()> {
        self.recovered = true;
        now("recover", self.sink.recover(&self.ctx, recovery))
    }

    fn ensure_open(&mut self) -> Result<()> {
        if !self.recovered {
            self.recover(Recovery::fresh())?;
        }
        if !self.opened {
            self.opened = true;
            now("open", self.sink.open(&self.ctx))?;
        }
        Ok(())
    }

    fn ensure_current(&mut self) -> Result<()> {
        self.ensure_open()?;
        if self.current.is_none() {
            self.current = Some(now("begin", self.sink.begin())?);
        }
        Ok(())
    }

    /// Commits, in checkpoint order, every pending transaction of a checkpoint
    /// up to `up_to`; a failed commit keeps itself and the later ones pending.
    fn commit_up_to(&mut self, up_to: CheckpointId) -> Result<()> {
        while let Some((checkpoint, txn)) = self.ledger.next_due(up_to) {
            if let Err(e) = now("commit", self.sink.commit(txn.clone(), checkpoint)) {
                return Err(Error::Commit {
                    txn: format!("{txn:?}"),
                    checkpoint: checkpoint.0,
                    source: Box::new(e),
                });
            }
            self.ledger.committed(checkpoint);
        }
        Ok(())
    }

    /// Writes a batch into the current transaction, beginning it if needed:
    /// [`Operator::process_batch`] without an output (this operator emits
    /// nothing), for driving the operator directly.
    pub fn write_batch(&mut self, batch: Batch<T>) -> Result<()> {
        self.ensure_current()?;
        let txn = self
            .current
            .as_mut()
            .expect("current transaction was just begun");
        now("write", self.sink.write(txn, batch))
    }

    /// The input is complete: pre-commits the current transaction. With a
    /// final checkpoint to come (see
    /// [`commit_on_final_checkpoint`](Self::commit_on_final_checkpoint)) it
    /// stays pending until that checkpoint completes; otherwise it is
    /// committed at once, after every pending one.
    /// [`Operator::on_end_of_input`] without an output.
    pub fn finish(&mut self) -> Result<()> {
        // Opened even without records, so an empty input yields empty output.
        self.ensure_open()?;
        self.ended = true;
        if let Some(mut txn) = self.current.take() {
            now("pre_commit", self.sink.pre_commit(&mut txn, None))?;
            self.ledger.pre_committed(None, txn);
        }
        if self.final_checkpoint {
            return Ok(());
        }
        self.commit_up_to(AFTER_END)
    }
}

impl<S, T> Operator<T, ()> for TwoPhaseCommitSinkOp<S, T>
where
    S: TwoPhaseCommitSink<T>,
    T: 'static,
{
    fn process_batch(&mut self, batch: Batch<T>, _: &mut Output<'_, ()>) -> Result<()> {
        self.write_batch(batch)
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        if self.ended {
            // The final checkpoint: the last transaction, pre-committed at
            // the end of input, belongs to it (its completion commits it);
            // nothing new is begun.
            self.ledger.adopt_after_end(ctx.checkpoint);
        } else {
            // A transaction is begun even if nothing was written yet, so
            // every running subtask has one pending per checkpoint: recovery
            // relies on it to tell commits before the checkpoint from
            // commits after it.
            self.ensure_current()?;
            let mut txn = self
                .current
                .take()
                .expect("current transaction was just begun");
            now(
                "pre_commit",
                self.sink.pre_commit(&mut txn, Some(ctx.checkpoint)),
            )?;
            self.ledger.pre_committed(Some(ctx.checkpoint), txn);
            self.current = Some(now("begin", self.sink.begin())?);
        }
        Ok(StateCapture {
            union_list: self.ledger.union_list()?,
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        // Called outside the node's guard: turn a panic into an error here.
        match catch_unwind(AssertUnwindSafe(|| {
            let r = recovery(&state, &self.ctx)?;
            self.recover(r)
        })) {
            Ok(r) => r,
            Err(p) => Err(Error::Panicked {
                during: "recovering transactions",
                message: floe_actors::error::panic_message(&*p),
            }),
        }
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.commit_up_to(checkpoint)
    }

    fn notify_checkpoint_aborted(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        // Kept pending: the next completed checkpoint commits them.
        Ok(())
    }

    /// See [`finish`](TwoPhaseCommitSinkOp::finish).
    fn on_end_of_input(&mut self, _: &mut Output<'_, ()>) -> Result<()> {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_actors::ids::SubtaskIndex;
    use std::sync::{Arc, Mutex};

    /// Records which subtask saw which pending transactions, and when.
    #[derive(Clone, Default)]
    struct Probe {
        seen: Arc<Mutex<Vec<String>>>,
        subtask: u32,
    }

    impl TwoPhaseCommitSink<u32> for Probe {
        type Txn = u32;
        async fn recover(&mut self, ctx: &SinkContext, r: Recovery<u32>) -> Result<()> {
            self.subtask = ctx.subtask.0;
            let txns: Vec<u32> = r.pending.iter().map(|(_, t)| *t).collect();
            self.note(format!("pending {} {txns:?}", ctx.subtask.0));
            if r.commit_pending {
                for (c, t) in r.pending {
                    self.note(format!("commit {t} of {}", c.0));
                }
            }
            Ok(())
        }
        async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
            self.note(format!("open {}", ctx.subtask.0));
            Ok(())
        }
        async fn begin(&mut self) -> Result<u32> {
            Ok(0)
        }
        async fn write(&mut self, _: &mut u32, _: Batch<u32>) -> Result<()> {
            Ok(())
        }
        async fn pre_commit(&mut self, _: &mut u32, _: Option<CheckpointId>) -> Result<()> {
            Ok(())
        }
        async fn commit(&mut self, txn: u32, c: CheckpointId) -> Result<()> {
            self.note(format!("commit {txn} of {}", c.0));
            Ok(())
        }
        async fn abort(&mut self, _: u32) -> Result<()> {
            Ok(())
        }
    }

    impl Probe {
        fn note(&self, what: String) {
            self.seen.lock().expect("lock").push(what);
        }
    }

    fn ctx(subtask: u32, parallelism: usize) -> SinkContext {
        SinkContext {
            subtask: SubtaskIndex(subtask),
            parallelism,
        }
    }

    #[test]
    fn every_subtask_recovers_before_it_opens_and_subtask_0_commits() {
        let entries = [(2u64, 20u32), (1, 10), (2, 21)];
        let union_list: Vec<Vec<u8>> = entries
            .iter()
            .map(|e| postcard::to_allocvec(e).expect("encodes"))
            .collect();
        let probe = Probe::default();
        for subtask in [1, 0] {
            let mut op = TwoPhaseCommitSinkOp::new(probe.clone(), ctx(subtask, 2));
            op.restore_state(RestoredState {
                union_list: union_list.clone(),
                ..Default::default()
            })
            .expect("restores");
            op.write_batch(Vec::new()).expect("opens");
        }
        assert_eq!(
            *probe.seen.lock().expect("lock"),
            [
                "pending 1 [10, 20, 21]",
                "open 1",
                "pending 0 [10, 20, 21]",
                "commit 10 of 1",
                "commit 20 of 2",
                "commit 21 of 2",
                "open 0"
            ]
        );
    }

    #[test]
    fn a_fresh_start_recovers_with_nothing_and_the_end_commits_at_once() {
        let probe = Probe::default();
        let mut op = TwoPhaseCommitSinkOp::new(probe.clone(), ctx(0, 1));
        op.write_batch(Vec::new()).expect("opens");
        op.finish().expect("finishes");
        assert_eq!(
            *probe.seen.lock().expect("lock"),
            ["pending 0 []", "open 0", "commit 0 of 18446744073709551615"]
        );
        assert!(op.pending().is_empty());
    }

    /// A sink whose futures wait.
    #[derive(Clone)]
    struct Waits;

    impl TwoPhaseCommitSink<u32> for Waits {
        type Txn = u32;
        async fn begin(&mut self) -> Result<u32> {
            futures::future::pending::<()>().await;
            Ok(0)
        }
        async fn write(&mut self, _: &mut u32, _: Batch<u32>) -> Result<()> {
            Ok(())
        }
        async fn pre_commit(&mut self, _: &mut u32, _: Option<CheckpointId>) -> Result<()> {
            Ok(())
        }
        async fn commit(&mut self, _: u32, _: CheckpointId) -> Result<()> {
            Ok(())
        }
        async fn abort(&mut self, _: u32) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_sink_that_waits_is_refused_with_the_runner_to_use() {
        let mut op = TwoPhaseCommitSinkOp::new(Waits, ctx(0, 1));
        let e = op.write_batch(Vec::new()).expect_err("waits");
        assert!(e.to_string().contains("AWAITS"), "{e}");
    }
}
