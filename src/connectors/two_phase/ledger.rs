//! The bookkeeping of a two-phase-commit sink subtask, without I/O: which
//! transactions are pre-committed for which checkpoint, how they are kept in
//! a checkpoint (union list state), what a restore hands the sink, and which
//! transaction a completed checkpoint commits next. Both runners
//! ([`inline`](super::inline) and [`tasks`](super::tasks)) keep one.

use super::{AFTER_END, Recovery};
use crate::operators::RestoredState;
use crate::operators::sink::SinkContext;
use crate::{Error, Result};
use floe_actors::ids::CheckpointId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;

/// Pre-committed transactions by the checkpoint that pre-committed them;
/// [`AFTER_END`] holds the one pre-committed at the end of the input until
/// a checkpoint takes it.
#[derive(Debug)]
pub(crate) struct Ledger<Txn> {
    pending: BTreeMap<CheckpointId, Vec<Txn>>,
}

impl<Txn> Default for Ledger<Txn> {
    fn default() -> Self {
        Ledger {
            pending: BTreeMap::new(),
        }
    }
}

impl<Txn: Clone + Serialize + DeserializeOwned + Debug> Ledger<Txn> {
    /// Records `txn` as pre-committed for `checkpoint` (`None`: at the end
    /// of the input).
    pub(crate) fn pre_committed(&mut self, checkpoint: Option<CheckpointId>, txn: Txn) {
        self.pending
            .entry(checkpoint.unwrap_or(AFTER_END))
            .or_default()
            .push(txn);
    }

    /// The final checkpoint `checkpoint` takes the transaction pre-committed
    /// at the end of the input: its completion commits it.
    pub(crate) fn adopt_after_end(&mut self, checkpoint: CheckpointId) {
        if let Some(last) = self.pending.remove(&AFTER_END) {
            self.pending.entry(checkpoint).or_default().extend(last);
        }
    }

    /// The next transaction to commit when checkpoint `up_to` completed:
    /// the first pending one of the oldest checkpoint up to `up_to`. It
    /// stays listed until [`committed`](Self::committed), so a snapshot
    /// taken while its commit runs still holds it (a restore commits it
    /// again instead of rolling it back).
    pub(crate) fn next_due(&self, up_to: CheckpointId) -> Option<(CheckpointId, Txn)> {
        self.pending
            .first_key_value()
            .filter(|(checkpoint, _)| **checkpoint <= up_to)
            .and_then(|(checkpoint, txns)| txns.first().map(|t| (*checkpoint, t.clone())))
    }

    /// The commit of [`next_due`](Self::next_due)'s transaction of
    /// `checkpoint` returned: it leaves the ledger.
    pub(crate) fn committed(&mut self, checkpoint: CheckpointId) {
        if let Some(txns) = self.pending.get_mut(&checkpoint) {
            txns.remove(0);
            if txns.is_empty() {
                self.pending.remove(&checkpoint);
            }
        }
    }

    /// Every pending transaction with its checkpoint, in checkpoint order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (CheckpointId, &Txn)> {
        self.pending
            .iter()
            .flat_map(|(checkpoint, txns)| txns.iter().map(move |t| (*checkpoint, t)))
    }

    /// The union list state of a snapshot: one `(checkpoint, txn)` entry
    /// each (the checkpoint ids encode as the plain numbers of earlier
    /// versions).
    pub(crate) fn union_list(&self) -> Result<Vec<Vec<u8>>> {
        self.entries()
            .map(|entry| {
                postcard::to_allocvec(&entry).map_err(|e| {
                    Error::encoding(format!("encode pending transaction {:?}", entry.1), e)
                })
            })
            .collect()
    }
}

/// What the sink of subtask `ctx` must do when its job starts from
/// `state`: the pending transactions of every former subtask, in
/// checkpoint order (stable: one former subtask's order is kept), and who
/// commits them.
pub(crate) fn recovery<Txn: DeserializeOwned>(
    state: &RestoredState,
    ctx: &SinkContext,
) -> Result<Recovery<Txn>> {
    let mut pending: Vec<(CheckpointId, Txn)> = state
        .union_list
        .iter()
        .map(|bytes| {
            postcard::from_bytes(bytes)
                .map_err(|e| Error::encoding("decode a pending transaction", e))
        })
        .collect::<Result<_>>()?;
    pending.sort_by_key(|(checkpoint, _)| *checkpoint);
    if state.from_scratch.is_some() {
        // Nothing is restored: the job starts over.
        pending.clear();
    }
    // Without the restored checkpoint's id (an operator driven directly),
    // the newest pending transaction's checkpoint stands in.
    let checkpoint = state
        .checkpoint
        .or_else(|| pending.last().map(|(checkpoint, _)| *checkpoint))
        .unwrap_or(AFTER_END);
    let restored = state.from_scratch.is_none();
    Ok(Recovery {
        // Subtask 0 commits them on a restore (doing it on several subtasks
        // would commit the same transactions twice, concurrently); on a
        // region failover the rest of the job runs on and each restored
        // subtask commits (idempotently: owners may have done so already).
        commit_pending: restored && (state.partial || ctx.subtask.0 == 0),
        pending,
        checkpoint: restored.then_some(checkpoint),
        restored,
        from_scratch: state.from_scratch,
        partial: state.partial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_actors::ids::SubtaskIndex;
    use proptest::prelude::*;

    fn ctx(subtask: u32, parallelism: usize) -> SinkContext {
        SinkContext {
            subtask: SubtaskIndex(subtask),
            parallelism,
        }
    }

    fn restored(entries: &[(u64, u32)]) -> RestoredState {
        RestoredState {
            union_list: entries
                .iter()
                .map(|e| postcard::to_allocvec(e).expect("encodes"))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_restore_lists_every_former_subtask_in_checkpoint_order_and_subtask_0_commits() {
        let state = restored(&[(2, 20), (1, 10), (2, 21)]);
        let r0 = recovery::<u32>(&state, &ctx(0, 2)).expect("decodes");
        let r1 = recovery::<u32>(&state, &ctx(1, 2)).expect("decodes");
        let expected = [
            (CheckpointId(1), 10),
            (CheckpointId(2), 20),
            (CheckpointId(2), 21),
        ];
        assert_eq!(r0.pending, expected);
        assert_eq!(r1.pending, expected);
        assert!(r0.commit_pending && !r1.commit_pending);
        // The newest pending checkpoint stands in for an unknown one.
        assert_eq!(r0.checkpoint, Some(CheckpointId(2)));
        let partial = RestoredState {
            partial: true,
            checkpoint: Some(CheckpointId(3)),
            ..state.clone()
        };
        let r1 = recovery::<u32>(&partial, &ctx(1, 2)).expect("decodes");
        assert!(r1.commit_pending && r1.partial);
        assert_eq!(r1.checkpoint, Some(CheckpointId(3)));
        let scratch = RestoredState {
            from_scratch: Some(2),
            ..state
        };
        let r0 = recovery::<u32>(&scratch, &ctx(0, 2)).expect("decodes");
        assert!(!r0.restored && !r0.commit_pending && r0.pending.is_empty());
        assert_eq!((r0.from_scratch, r0.checkpoint), (Some(2), None));
    }

    #[test]
    fn a_damaged_entry_is_an_error() {
        let state = RestoredState {
            union_list: vec![vec![0xff; 3]],
            ..Default::default()
        };
        let e = recovery::<u32>(&state, &ctx(0, 1)).expect_err("damaged");
        assert!(e.to_string().contains("cannot decode"), "{e}");
    }

    /// What a subtask does to its ledger, as the runners do it.
    #[derive(Clone, Debug)]
    enum Step {
        /// A barrier of the next checkpoint (pre-commits one transaction).
        Barrier,
        /// The end of the input (pre-commits the last transaction).
        End,
        /// Checkpoint `n` back from the newest completes.
        Complete(u8),
        /// A snapshot is taken and restored into a fresh ledger.
        Restore,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => Just(Step::Barrier),
            1 => Just(Step::End),
            3 => (0u8..3).prop_map(Step::Complete),
            1 => Just(Step::Restore),
        ]
    }

    proptest! {
        /// Against a model (a list of `(checkpoint, txn)` in pre-commit
        /// order): a completed checkpoint commits exactly the pending
        /// transactions of it and earlier, oldest first, each once; the end
        /// of input's transaction waits for the final checkpoint; a
        /// snapshot restores to the same pending list.
        #[test]
        fn commits_follow_the_model(steps in proptest::collection::vec(step(), 1..60)) {
            let mut ledger = Ledger::<u32>::default();
            let mut model: Vec<(u64, u32)> = Vec::new();
            let mut committed = Vec::new();
            let mut model_committed = Vec::new();
            let (mut next_txn, mut checkpoint, mut ended) = (0u32, 0u64, false);
            for s in steps {
                match s {
                    Step::Barrier => {
                        checkpoint += 1;
                        if ended {
                            ledger.adopt_after_end(CheckpointId(checkpoint));
                            for e in model.iter_mut().filter(|e| e.0 == u64::MAX) {
                                e.0 = checkpoint;
                            }
                        } else {
                            ledger.pre_committed(Some(CheckpointId(checkpoint)), next_txn);
                            model.push((checkpoint, next_txn));
                            next_txn += 1;
                        }
                    }
                    Step::End if !ended => {
                        ended = true;
                        ledger.pre_committed(None, next_txn);
                        model.push((u64::MAX, next_txn));
                        next_txn += 1;
                    }
                    Step::End => {}
                    Step::Complete(back) => {
                        let up_to = checkpoint.saturating_sub(u64::from(back));
                        while let Some((c, t)) = ledger.next_due(CheckpointId(up_to)) {
                            committed.push(t);
                            ledger.committed(c);
                        }
                        model.sort_by_key(|e| e.0);
                        let due = model.iter().take_while(|e| e.0 <= up_to).count();
                        model_committed.extend(model.drain(..due).map(|e| e.1));
                    }
                    Step::Restore => {
                        let state = RestoredState {
                            union_list: ledger.union_list().expect("encodes"),
                            ..Default::default()
                        };
                        let r = recovery::<u32>(&state, &ctx(0, 1)).expect("decodes");
                        let mut fresh = Ledger::default();
                        for (c, t) in r.pending {
                            fresh.pre_committed((c != AFTER_END).then_some(c), t);
                        }
                        ledger = fresh;
                    }
                }
                prop_assert_eq!(&committed, &model_committed);
                let mut listed: Vec<(u64, u32)> = ledger.entries().map(|(c, t)| (c.0, *t)).collect();
                let mut expected = model.clone();
                listed.sort();
                expected.sort();
                prop_assert_eq!(listed, expected);
            }
        }
    }
}
