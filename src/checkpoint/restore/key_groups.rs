//! A restore that takes each key group from a checkpoint of its own: a
//! group member's partitions, each restored from the checkpoint its
//! committed offset names (see `docs/scale-out.md`).
//!
//! Only keyed state is restored: sources start from their configured
//! positions (the group's committed offsets), list state, watermarks and
//! channel state start empty. The checkpoints must be aligned (no channel
//! state): in-flight records are not part of a key group.

use super::{RestorePlan, keyed_share, read_keyed};
use crate::operators::RestoredState;
use crate::plan::Plan;
use crate::state::KeyGroupBytes;
use floe_actors::ids::CheckpointId;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

impl RestorePlan {
    /// What every subtask restores when key group `g` comes from the
    /// checkpoint at `p` for each `(p, groups)` of `sources` with `g` in
    /// `groups`; key groups not listed start empty.
    pub fn build_key_groups(
        sources: &[(PathBuf, Vec<u32>)],
        plan: &Plan,
        max_parallelism: u32,
    ) -> crate::Result<Self> {
        let uids: HashMap<String, usize> = plan
            .nodes
            .iter()
            .enumerate()
            .map(|(id, n)| (n.uid(id), id))
            .collect();
        // Per operator, per key group, its entries in blob order.
        let mut keyed: HashMap<usize, BTreeMap<u32, Vec<KeyGroupBytes>>> = HashMap::new();
        let mut newest = CheckpointId(0);
        for (path, groups) in sources {
            let loaded = crate::checkpoint::load_snapshot(path)?;
            if loaded.meta.max_parallelism != max_parallelism {
                return Err(crate::checkpoint::CheckpointError::Incompatible {
                    checkpoint: loaded.meta.id.0.to_string(),
                    message: format!(
                        "it was taken with max parallelism {}, the job has {}",
                        loaded.meta.max_parallelism, max_parallelism
                    ),
                }
                .into());
            }
            newest = newest.max(loaded.meta.id);
            for op in &loaded.meta.operators {
                // An operator the job no longer has keeps nothing here.
                let Some(&node) = uids.get(&op.uid) else {
                    continue;
                };
                let mut subtasks: Vec<_> = op.subtasks.iter().collect();
                subtasks.sort_by_key(|s| s.subtask);
                for s in subtasks {
                    for blob in &s.keyed {
                        for g in read_keyed(&loaded, blob)? {
                            if groups.contains(&g.key_group) {
                                keyed
                                    .entry(node)
                                    .or_default()
                                    .entry(g.key_group)
                                    .or_default()
                                    .push(g);
                            }
                        }
                    }
                }
            }
        }
        let mut operators = HashMap::new();
        for (node, groups) in keyed {
            let p = plan.nodes[node].parallelism;
            for j in 0..p {
                let restored = RestoredState {
                    keyed: keyed_share(&groups, j, p, max_parallelism),
                    split_list: Vec::new(),
                    union_list: Vec::new(),
                    partial: false,
                    from_scratch: None,
                    checkpoint: Some(newest),
                };
                operators.insert((node, j), restored);
            }
        }
        Ok(RestorePlan {
            checkpoint_id: newest,
            operators,
            runtime: HashMap::new(),
        })
    }
}
