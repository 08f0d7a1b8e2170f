//! Exactly-once sinks by two-phase commit, as Flink's `TwoPhaseCommitSinkFunction`.
//!
//! A [`TwoPhaseCommitSink`] writes records into a transaction. At a checkpoint
//! barrier [`TwoPhaseCommitSinkOp`] pre-commits the current transaction (makes it
//! durable, not yet visible), records it in the checkpoint as pending, and begins
//! the next one; when the checkpoint is complete everywhere it commits (publishes)
//! every pending transaction of that checkpoint or earlier. Records thus become
//! visible only once the state that produced them is durable, and a failure
//! replays exactly the records whose transactions were not part of the restored
//! checkpoint.
//!
//! Invariants the operator keeps:
//!
//! 1. Transactions are committed in the order of their checkpoints, each at most
//!    once per run; a commit repeated after a restore must be harmless, which is
//!    why [`TwoPhaseCommitSink::commit`] is required to be idempotent.
//! 2. An aborted checkpoint leaves its transactions pending: the next completed
//!    checkpoint commits them (a later checkpoint subsumes an earlier one).
//! 3. On restore from checkpoint n, the transactions pending at n — those of
//!    every former subtask, kept in union list state — are handed to
//!    [`TwoPhaseCommitSink::recover_to`] (with n and each one's checkpoint)
//!    by subtask 0 only, before any record, so that exactly one subtask
//!    commits them and cleans up what was begun after n. Every commit goes
//!    through [`TwoPhaseCommitSink::commit_for`], naming its checkpoint:
//!    sink subtasks commit in any order, so only the checkpoint tells a
//!    commit covered by n from a later one.
//! 4. At the end of a bounded input the last transaction is pre-committed.
//!    With periodic checkpoints on, it is committed like every other one:
//!    when a checkpoint taken after the end (the subtask's final checkpoint,
//!    as Flink does since 1.14, FLIP-147) completes — so committed output is
//!    never taken back: a failure before then restores a checkpoint that
//!    does not cover it (it was never visible), one after it restores a
//!    checkpoint that holds it as pre-committed. Without checkpoints it is
//!    committed at once.

use crate::operators::sink::SinkContext;
use crate::operators::{Operator, Output, RestoredState, SnapshotContext, StateCapture};
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A sink that writes in transactions and publishes them in two phases.
///
/// One instance per subtask is cloned from the instance given to
/// [`DataStream::add_two_phase_sink`](crate::api::DataStream::add_two_phase_sink).
/// The call order on one instance is: [`on_restore`](Self::on_restore) and
/// [`recover`](Self::recover) (only when the job starts from a checkpoint or
/// savepoint), [`open`](Self::open), then any number of
/// `begin` → `write`* → `pre_commit` → `commit` (or `abort`) cycles, several
/// transactions being pre-committed but not yet committed at a time.
pub trait TwoPhaseCommitSink<T>: Send + 'static {
    /// A transaction handle, persisted in checkpoints (e.g. a pending file's name).
    type Txn: Serialize + DeserializeOwned + Clone + Send + std::fmt::Debug + 'static;

    /// Called once before the first transaction begins.
    fn open(&mut self, _ctx: &SinkContext) -> Result<()> {
        Ok(())
    }

    /// Called on every subtask, before [`recover`](Self::recover) and
    /// [`open`](Self::open), when the job starts from a checkpoint or
    /// savepoint: a sink that resets its output on a fresh start must keep it
    /// now.
    fn on_restore(&mut self, _ctx: &SinkContext) -> Result<()> {
        Ok(())
    }

    /// Called on every subtask when the whole job restores a checkpoint or
    /// savepoint (not on a region failover), after
    /// [`on_restore`](Self::on_restore) and before
    /// [`recover`](Self::recover) and [`open`](Self::open), with every
    /// transaction the checkpoint holds as pre-committed, in checkpoint
    /// order: for a sink whose subtasks must each settle some of them
    /// before they open (the Kafka sink commits the transactions of the ids
    /// a subtask is about to fence).
    fn on_restore_pending(&mut self, _ctx: &SinkContext, _pending: &[Self::Txn]) -> Result<()> {
        Ok(())
    }

    /// Called on every subtask, before [`open`](Self::open), when the whole
    /// job restarts from the beginning after a failure (restart-all before
    /// any checkpoint completed): everything committed so far, e.g. by
    /// subtasks that had finished their input, will be committed again by
    /// the replay, so a sink that resets its output on a fresh start must
    /// reset it again now — once per `restart` (numbered from 1), by the
    /// first subtask that gets here. Not called when only a region
    /// restarts: the rest of the job keeps its output.
    fn on_restart_from_scratch(&mut self, _ctx: &SinkContext, _restart: u64) -> Result<()> {
        Ok(())
    }

    /// Starts a new transaction.
    fn begin(&mut self) -> Result<Self::Txn>;

    /// Writes a batch of records into `txn`.
    fn write(&mut self, txn: &mut Self::Txn, batch: Batch<T>) -> Result<()>;

    /// Flush and make durable; after this the txn must be committable even after a crash.
    fn pre_commit(&mut self, txn: &mut Self::Txn) -> Result<()>;

    /// Publish. MUST be idempotent: called again for the same txn after a restore.
    fn commit(&mut self, txn: Self::Txn) -> Result<()>;

    /// Discards a transaction that will never be committed.
    fn abort(&mut self, txn: Self::Txn) -> Result<()>;

    /// On restore, before anything else: called once with every transaction the
    /// checkpoint recorded as pre-committed (they must be committed,
    /// idempotently) — by ONE subtask only (subtask 0 of the new parallelism) —
    /// so it can also clean up leftovers (transactions begun after the
    /// checkpoint and never pre-committed). Default: commit each.
    fn recover(&mut self, committed: Vec<Self::Txn>) -> Result<()> {
        for t in committed {
            self.commit(t)?;
        }
        Ok(())
    }

    /// [`commit`](Self::commit) of a transaction pre-committed for
    /// `checkpoint`. The operator commits through this method, so a sink
    /// that must tell on a later restore which checkpoint each commit
    /// belongs to records it here (the transactional file sink does).
    /// Default: `commit`.
    fn commit_for(&mut self, _checkpoint: CheckpointId, txn: Self::Txn) -> Result<()> {
        self.commit(txn)
    }

    /// [`recover`](Self::recover) on a restore of checkpoint `restored`,
    /// with the checkpoint each pending transaction was pre-committed for.
    /// The operator recovers through this method, so a sink that rolls back
    /// what was committed for checkpoints after `restored` tells those
    /// commits by their checkpoint, not by their order (commits of
    /// different subtasks interleave in any order). Default: `recover`.
    fn recover_to(
        &mut self,
        _restored: CheckpointId,
        pending: Vec<(CheckpointId, Self::Txn)>,
    ) -> Result<()> {
        self.recover(pending.into_iter().map(|(_, txn)| txn).collect())
    }
}

/// The pending key of the transaction pre-committed at the end of input,
/// until a checkpoint takes it.
const AFTER_END: CheckpointId = CheckpointId(u64::MAX);

/// Runs a [`TwoPhaseCommitSink`] as the last operator of a chain.
pub struct TwoPhaseCommitSinkOp<S, T>
where
    S: TwoPhaseCommitSink<T>,
{
    sink: S,
    ctx: SinkContext,
    opened: bool,
    /// The transaction records are written into; begun lazily.
    current: Option<S::Txn>,
    /// Pre-committed transactions by the checkpoint that pre-committed them.
    pending: BTreeMap<CheckpointId, Vec<S::Txn>>,
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
            opened: false,
            current: None,
            pending: BTreeMap::new(),
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

    /// The transactions pre-committed and not yet committed, by checkpoint.
    pub fn pending(&self) -> &BTreeMap<CheckpointId, Vec<S::Txn>> {
        &self.pending
    }

    fn ensure_open(&mut self) -> Result<()> {
        if !self.opened {
            self.opened = true;
            self.sink.open(&self.ctx)?;
        }
        Ok(())
    }

    fn ensure_current(&mut self) -> Result<()> {
        self.ensure_open()?;
        if self.current.is_none() {
            self.current = Some(self.sink.begin()?);
        }
        Ok(())
    }

    /// Commits, in checkpoint order, every pending transaction of a checkpoint
    /// up to `up_to`; a failed commit keeps itself and the later ones pending.
    fn commit_up_to(&mut self, up_to: CheckpointId) -> Result<()> {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > up_to {
                break;
            }
            let (checkpoint, txns) = entry.remove_entry();
            let mut txns = txns.into_iter();
            while let Some(txn) = txns.next() {
                if let Err(e) = self.sink.commit_for(checkpoint, txn.clone()) {
                    let mut rest = vec![txn.clone()];
                    rest.extend(txns);
                    self.pending.insert(checkpoint, rest);
                    return Err(Error::User(format!(
                        "cannot commit transaction {txn:?} of checkpoint {}: {e}",
                        checkpoint.0
                    )));
                }
            }
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
        self.sink.write(txn, batch)
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
            self.sink.pre_commit(&mut txn)?;
            self.pending.entry(AFTER_END).or_default().push(txn);
        }
        if self.final_checkpoint {
            return Ok(());
        }
        self.commit_up_to(AFTER_END)
    }

    fn restore(&mut self, state: RestoredState) -> Result<()> {
        // The checkpoint ids encode as the plain numbers of earlier versions.
        let mut entries: Vec<(CheckpointId, S::Txn)> = state
            .union_list
            .iter()
            .map(|bytes| {
                postcard::from_bytes(bytes)
                    .map_err(|e| Error::User(format!("cannot decode a pending transaction: {e}")))
            })
            .collect::<Result<_>>()?;
        if let Some(restart) = state.from_scratch {
            return self.sink.on_restart_from_scratch(&self.ctx, restart);
        }
        self.sink.on_restore(&self.ctx)?;
        if state.partial {
            // Region failover: the rest of the job runs on, so nothing is
            // rolled back; the checkpoint's pre-committed transactions are
            // committed (idempotently: owners may have done so already).
            entries.sort_by_key(|(checkpoint, _)| *checkpoint);
            for (checkpoint, txn) in entries {
                self.sink.commit_for(checkpoint, txn)?;
            }
            return Ok(());
        }
        // Stable: the order of one former subtask's transactions is kept.
        entries.sort_by_key(|(checkpoint, _)| *checkpoint);
        let pending: Vec<S::Txn> = entries.iter().map(|(_, txn)| txn.clone()).collect();
        self.sink.on_restore_pending(&self.ctx, &pending)?;
        if self.ctx.subtask.0 != 0 {
            // Subtask 0 commits them; doing it here too would commit the same
            // transactions twice, concurrently.
            return Ok(());
        }
        // Without the restored checkpoint's id (an operator driven
        // directly), the newest pending transaction's checkpoint stands in.
        let restored = state
            .checkpoint
            .or_else(|| entries.iter().map(|(checkpoint, _)| *checkpoint).max())
            .unwrap_or(AFTER_END);
        self.sink.recover_to(restored, entries)
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
            if let Some(last) = self.pending.remove(&AFTER_END) {
                self.pending.entry(ctx.checkpoint).or_default().extend(last);
            }
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
            self.sink.pre_commit(&mut txn)?;
            self.pending.entry(ctx.checkpoint).or_default().push(txn);
            self.current = Some(self.sink.begin()?);
        }
        let union_list = self
            .pending
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
            .collect::<Result<_>>()?;
        Ok(StateCapture {
            union_list,
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        // Called outside the node's guard: turn a panic into an error here.
        match catch_unwind(AssertUnwindSafe(|| self.restore(state))) {
            Ok(r) => r,
            Err(p) => Err(Error::User(format!(
                "panic while recovering transactions: {}",
                floe_actors::error::panic_message(&*p)
            ))),
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
    }

    impl TwoPhaseCommitSink<u32> for Probe {
        type Txn = u32;
        fn open(&mut self, ctx: &SinkContext) -> Result<()> {
            self.note(format!("open {}", ctx.subtask.0));
            Ok(())
        }
        fn on_restore_pending(&mut self, ctx: &SinkContext, pending: &[u32]) -> Result<()> {
            self.note(format!("pending {} {pending:?}", ctx.subtask.0));
            Ok(())
        }
        fn begin(&mut self) -> Result<u32> {
            Ok(0)
        }
        fn write(&mut self, _: &mut u32, _: Batch<u32>) -> Result<()> {
            Ok(())
        }
        fn pre_commit(&mut self, _: &mut u32) -> Result<()> {
            Ok(())
        }
        fn commit(&mut self, txn: u32) -> Result<()> {
            self.note(format!("commit {txn}"));
            Ok(())
        }
        fn abort(&mut self, _: u32) -> Result<()> {
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
    fn every_subtask_sees_the_pending_transactions_before_it_opens() {
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
                "commit 10",
                "commit 20",
                "commit 21",
                "open 0"
            ]
        );
        // Not on a region failover: each restored subtask commits instead.
        let probe = Probe::default();
        let mut op = TwoPhaseCommitSinkOp::new(probe.clone(), ctx(1, 2));
        op.restore_state(RestoredState {
            union_list,
            partial: true,
            ..Default::default()
        })
        .expect("restores");
        assert!(
            probe
                .seen
                .lock()
                .expect("lock")
                .iter()
                .all(|s| s.starts_with("commit"))
        );
    }
}
