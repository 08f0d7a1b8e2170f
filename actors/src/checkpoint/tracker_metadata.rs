//! The metadata a completed checkpoint is committed with, assembled from
//! its acks and the subtasks that finished before it (pure, part of the
//! [`Tracker`]).

use super::*;

impl Tracker {
    /// The metadata of checkpoint `id`, every ack in.
    pub(super) fn metadata(&self, id: CheckpointId, at: Moment) -> CheckpointMetadata {
        let p = &self.pending[&id];
        let mut operators: BTreeMap<String, OperatorState> = BTreeMap::new();
        let mut runtime = Vec::new();
        let (mut alignment_ms, mut sync_ms, mut async_ms) = (0, 0, 0);
        let (mut state_bytes, mut channel_state_bytes, mut unaligned) = (0, 0, false);
        let mut acks: Vec<&AcknowledgeCheckpoint> = p.acks.iter().collect();
        acks.sort_by_key(|a| (a.vertex, a.subtask));
        for ack in acks {
            alignment_ms = alignment_ms.max(ack.alignment_ms);
            sync_ms = sync_ms.max(ack.sync_ms);
            async_ms = async_ms.max(ack.async_ms);
            state_bytes += ack.state_bytes;
            channel_state_bytes += ack.channel_state_bytes;
            unaligned |= ack.unaligned;
            for op in &ack.operators {
                let (name, parallelism) = self
                    .shape
                    .operators
                    .get(&op.uid)
                    .cloned()
                    .unwrap_or_else(|| (op.uid.clone(), 0));
                let entry = operators
                    .entry(op.uid.clone())
                    .or_insert_with(|| OperatorState {
                        uid: op.uid.clone(),
                        name,
                        parallelism,
                        subtasks: Vec::new(),
                    });
                entry.subtasks.push(SubtaskOperatorState {
                    subtask: ack.subtask.0,
                    keyed: op.keyed.clone(),
                    split_list: op.split_list.clone(),
                    union_list: op.union_list.clone(),
                });
            }
            if let Some(s) = self
                .subtasks
                .iter()
                .find(|s| s.key == (ack.vertex, ack.subtask))
            {
                runtime.push(SubtaskRuntimeState {
                    head_uid: s.head_uid.clone(),
                    subtask: ack.subtask.0,
                    parallelism: s.parallelism,
                    watermark: ack.watermark,
                    channel_watermarks: ack.channel_watermarks.clone(),
                    input_channel_state: ack.input_channel_state.clone(),
                    output_channel_state: ack.output_channel_state.clone(),
                    finished: false,
                });
            }
        }
        // Subtasks that finished before this checkpoint: restored finished.
        for s in &self.subtasks {
            if self.finished.contains(&s.key)
                && !p.acks.iter().any(|a| (a.vertex, a.subtask) == s.key)
            {
                runtime.push(SubtaskRuntimeState {
                    head_uid: s.head_uid.clone(),
                    subtask: s.key.1.0,
                    parallelism: s.parallelism,
                    finished: true,
                    ..Default::default()
                });
            }
        }
        CheckpointMetadata {
            version: CHECKPOINT_FORMAT_VERSION,
            id,
            kind: p.kind,
            trigger_ms: p.trigger_ms,
            duration_ms: elapsed(p.trigger_ms, at),
            alignment_ms,
            sync_ms,
            async_ms,
            state_bytes,
            channel_state_bytes,
            unaligned,
            max_parallelism: self.shape.max_parallelism,
            operators: operators.into_values().collect(),
            runtime,
            transactional_sinks: self.shape.transactional_sinks.clone(),
        }
    }
}

pub(super) fn elapsed(since_ms: Timestamp, at: Moment) -> u64 {
    at.now_ms.saturating_sub(since_ms).max(0) as u64
}

/// The history record of a snapshot described by `meta`.
pub(crate) fn record_of(
    meta: &CheckpointMetadata,
    status: &'static str,
    failure: Option<String>,
) -> CheckpointRecord {
    CheckpointRecord {
        id: meta.id,
        savepoint: meta.kind == SnapshotKind::Savepoint,
        status: status.to_string(),
        trigger_ms: meta.trigger_ms,
        duration_ms: meta.duration_ms,
        alignment_ms: meta.alignment_ms,
        sync_ms: meta.sync_ms,
        async_ms: meta.async_ms,
        state_bytes: meta.state_bytes,
        channel_state_bytes: meta.channel_state_bytes,
        unaligned: meta.unaligned,
        failure,
    }
}
