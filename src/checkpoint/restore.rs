//! From a loaded checkpoint to what each new subtask restores.
//!
//! Operators are matched by uid. Keyed state is split by key group: each new
//! subtask gets the groups of its key-group range, whatever the old
//! parallelism. Even-split list state is dealt out round-robin over the new
//! subtasks (operator list states of process functions: per state, and each
//! subtask keeps its own entries at an unchanged parallelism), union list
//! state goes whole to each. Watermarks and channel state are per subtask:
//! at the same parallelism each subtask takes its own back; at another
//! parallelism every channel starts at the lowest old watermark, and
//! channel state cannot be mapped: its channels are numbered by both ends'
//! old parallelism. So a restore is refused when any subtask holds channel
//! state (input or output) on an edge one of whose ends changes
//! parallelism — a source at the same parallelism feeding a rescaled
//! keyed operator included, whose queued records would otherwise be sent
//! to the subtasks of the old key-group ranges.

use super::{CheckpointError, LoadedSnapshot};
use crate::operators::RestoredState;
use crate::plan::Plan;
use crate::state::KeyGroupBytes;
use floe_actors::element::MIN_WATERMARK;
use floe_actors::ids::CheckpointId;
use floe_actors::keygroup::key_group_range;
use floe_actors::subtask::SubtaskRestore;
use std::collections::{BTreeMap, HashMap};

/// What every subtask of a job restores.
pub(crate) struct RestorePlan {
    /// The checkpoint restored.
    pub checkpoint_id: CheckpointId,
    operators: HashMap<(usize, usize), RestoredState>,
    runtime: HashMap<(usize, usize), SubtaskRestore>,
}

impl RestorePlan {
    /// State of node `node` in new subtask `subtask`: `None` for an operator
    /// the checkpoint does not know (it starts empty).
    pub fn operator(&self, node: usize, subtask: usize) -> Option<RestoredState> {
        self.operators.get(&(node, subtask)).cloned()
    }

    /// Runtime state of vertex `vertex`'s subtask `subtask`.
    pub fn runtime(&self, vertex: usize, subtask: usize) -> Option<SubtaskRestore> {
        self.runtime.get(&(vertex, subtask)).cloned()
    }

    pub fn build(
        loaded: &LoadedSnapshot,
        plan: &Plan,
        max_parallelism: u32,
    ) -> crate::Result<Self> {
        let meta = &loaded.meta;
        let name = meta.id.0.to_string();
        let incompatible = |message: String| CheckpointError::Incompatible {
            checkpoint: name.clone(),
            message,
        };
        if meta.max_parallelism != max_parallelism {
            return Err(incompatible(format!(
                "it was taken with max parallelism {}, the job has {}",
                meta.max_parallelism, max_parallelism
            ))
            .into());
        }
        let uids: HashMap<String, usize> = plan
            .nodes
            .iter()
            .enumerate()
            .map(|(id, n)| (n.uid(id), id))
            .collect();
        for op in &meta.operators {
            if !uids.contains_key(&op.uid) {
                return Err(CheckpointError::UnknownOperator {
                    checkpoint: name.clone(),
                    uid: op.uid.clone(),
                    name: op.name.clone(),
                }
                .into());
            }
        }
        // Vertices the checkpoint knows: every operator in them is restored
        // (possibly empty), so a finished source stays finished.
        let known_heads: std::collections::HashSet<&str> =
            meta.runtime.iter().map(|r| r.head_uid.as_str()).collect();
        let mut operators = HashMap::new();
        for (id, node) in plan.nodes.iter().enumerate() {
            let uid = node.uid(id);
            let v = plan.vertex_of[id];
            let head_uid = plan.uid(plan.heads[v]);
            let state = meta.operators.iter().find(|o| o.uid == uid);
            if state.is_none() && !known_heads.contains(head_uid.as_str()) {
                continue;
            }
            let p = node.parallelism;
            // Per key group, its entries in blob order: a base, then deltas.
            let mut keyed: BTreeMap<u32, Vec<KeyGroupBytes>> = BTreeMap::new();
            let mut split: Vec<(u32, Vec<Vec<u8>>)> = Vec::new();
            let mut union = Vec::new();
            if let Some(state) = state {
                let mut subtasks: Vec<_> = state.subtasks.iter().collect();
                subtasks.sort_by_key(|s| s.subtask);
                for s in subtasks {
                    for blob in &s.keyed {
                        for g in read_keyed(loaded, blob)? {
                            keyed.entry(g.key_group).or_default().push(g);
                        }
                    }
                    let mut own_split = Vec::new();
                    for (blob, out) in
                        [(&s.split_list, &mut own_split), (&s.union_list, &mut union)]
                    {
                        if let Some(blob) = blob {
                            let bytes = loaded.read_blob(blob)?;
                            let entries: Vec<Vec<u8>> =
                                postcard::from_bytes(&bytes).map_err(|e| {
                                    CheckpointError::Corrupt {
                                        checkpoint: name.clone(),
                                        file: blob.path.clone().into(),
                                        reason: format!("undecodable list state: {e}"),
                                    }
                                })?;
                            out.extend(entries);
                        }
                    }
                    split.push((s.subtask, own_split));
                }
            }
            let old_parallelism = state.map_or(p, |s| s.parallelism as usize);
            let mut split =
                crate::state::operator::deal_split_list(split, old_parallelism, p).into_iter();
            for j in 0..p {
                let restored = RestoredState {
                    keyed: keyed_share(&keyed, j, p, max_parallelism),
                    split_list: split.next().unwrap_or_default(),
                    union_list: union.clone(),
                    partial: false,
                    from_scratch: None,
                    checkpoint: Some(meta.id),
                };
                operators.insert((id, j), restored);
            }
        }
        if let Some(message) = rescaled_channel_state(meta, plan) {
            return Err(incompatible(message).into());
        }
        let mut runtime = HashMap::new();
        for (v, &head) in plan.heads.iter().enumerate() {
            let head_uid = plan.uid(head);
            let entries: Vec<_> = meta
                .runtime
                .iter()
                .filter(|r| r.head_uid == head_uid)
                .collect();
            if entries.is_empty() {
                continue;
            }
            let p = plan.nodes[head].parallelism;
            let same = entries.iter().all(|r| r.parallelism as usize == p);
            let lowest = entries
                .iter()
                .filter(|r| !r.finished)
                .map(|r| r.watermark)
                .min()
                .unwrap_or(MIN_WATERMARK);
            for j in 0..p {
                let channels = plan.inputs_per_subtask[v][j];
                let own = entries.iter().find(|r| same && r.subtask as usize == j);
                let mut restore = SubtaskRestore {
                    watermark: lowest,
                    ..Default::default()
                };
                if let Some(r) = own {
                    if r.finished {
                        continue;
                    }
                    restore.watermark = r.watermark;
                    if r.channel_watermarks.len() == channels {
                        restore.channel_watermarks = r.channel_watermarks.clone();
                    }
                    if let Some(blob) = &r.input_channel_state {
                        let bytes = loaded.read_blob(blob)?;
                        restore.input_channel_state =
                            postcard::from_bytes(&bytes).map_err(|e| CheckpointError::Corrupt {
                                checkpoint: name.clone(),
                                file: blob.path.clone().into(),
                                reason: format!("undecodable channel state: {e}"),
                            })?;
                    }
                    if let Some(blob) = &r.output_channel_state {
                        let bytes = loaded.read_blob(blob)?;
                        restore.output_channel_state =
                            postcard::from_bytes(&bytes).map_err(|e| CheckpointError::Corrupt {
                                checkpoint: name.clone(),
                                file: blob.path.clone().into(),
                                reason: format!("undecodable channel state: {e}"),
                            })?;
                    }
                }
                runtime.insert((v, j), restore);
            }
        }
        Ok(RestorePlan {
            checkpoint_id: meta.id,
            operators,
            runtime,
        })
    }
}

/// The entries of the key groups subtask `j` of `p` owns.
fn keyed_share(
    keyed: &BTreeMap<u32, Vec<KeyGroupBytes>>,
    j: usize,
    p: usize,
    max_parallelism: u32,
) -> Vec<KeyGroupBytes> {
    keyed
        .range(key_group_range(j as u32, max_parallelism, p as u32))
        .flat_map(|(_, g)| g.iter().cloned())
        .collect()
}

/// The key groups of one keyed-state blob of `loaded`.
fn read_keyed(
    loaded: &LoadedSnapshot,
    blob: &floe_actors::checkpoint::BlobRef,
) -> crate::Result<Vec<KeyGroupBytes>> {
    let bytes = loaded.read_blob(blob)?;
    Ok(
        postcard::from_bytes(&bytes).map_err(|e| CheckpointError::Corrupt {
            checkpoint: loaded.meta.id.0.to_string(),
            file: blob.path.clone().into(),
            reason: format!("undecodable keyed state: {e}"),
        })?,
    )
}

/// Why channel state of `meta` cannot be restored into `plan`: the first
/// edge (in graph order) with channel state at either end whose upstream
/// or downstream vertex changes parallelism; `None` if there is none.
fn rescaled_channel_state(
    meta: &floe_actors::checkpoint::CheckpointMetadata,
    plan: &Plan,
) -> Option<String> {
    // Per vertex: its old parallelism (when the checkpoint knows it) and
    // whether it holds input or output channel state.
    let old: Vec<Option<usize>> = plan
        .heads
        .iter()
        .map(|&head| {
            let uid = plan.uid(head);
            meta.runtime
                .iter()
                .find(|r| r.head_uid == uid)
                .map(|r| r.parallelism as usize)
        })
        .collect();
    let holds = |v: usize, output: bool| {
        let uid = plan.uid(plan.heads[v]);
        meta.runtime.iter().any(|r| {
            r.head_uid == uid
                && if output {
                    r.output_channel_state.is_some()
                } else {
                    r.input_channel_state.is_some()
                }
        })
    };
    let new = |v: usize| plan.nodes[plan.heads[v]].parallelism;
    let rescaled = |v: usize| old[v].is_some_and(|o| o != new(v));
    for (down, &head) in plan.heads.iter().enumerate() {
        for e in &plan.nodes[head].inputs {
            let up = plan.vertex_of[e.from];
            if !(rescaled(up) || rescaled(down)) {
                continue;
            }
            let side = if holds(up, true) {
                up
            } else if holds(down, false) {
                down
            } else {
                continue;
            };
            let change = |v: usize| match old[v] {
                Some(o) if o != new(v) => format!("{o} -> {}", new(v)),
                _ => format!("{} unchanged", new(v)),
            };
            return Some(format!(
                "it holds in-flight records (channel state of an unaligned checkpoint) at '{}' on the edge '{}' -> '{}', whose parallelism changes ({}, {}); restore a savepoint or an aligned checkpoint to rescale",
                plan.nodes[plan.heads[side]].name,
                plan.nodes[e.from].name,
                plan.nodes[head].name,
                change(up),
                change(down)
            ));
        }
    }
    None
}

mod key_groups;

#[cfg(test)]
mod tests;
