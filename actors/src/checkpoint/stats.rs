//! A job's checkpoint counters and recent history, as job handles and the
//! status output report them.

use crate::ids::CheckpointId;
use serde::Serialize;
use std::collections::VecDeque;

/// A checkpoint's record in the job's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CheckpointRecord {
    /// Its id (a plain number in JSON).
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub savepoint: bool,
    /// Completed, failed (declined, expired, not written) or aborted (a
    /// subtask reached its end first; not a failure).
    pub status: String,
    /// When it was triggered (ms since the epoch).
    pub trigger_ms: i64,
    /// Trigger to completion (or failure), ms.
    pub duration_ms: u64,
    /// Longest alignment of a subtask, ms.
    pub alignment_ms: u64,
    /// Longest synchronous part, ms.
    pub sync_ms: u64,
    /// Longest asynchronous part, ms.
    pub async_ms: u64,
    /// Operator state bytes.
    pub state_bytes: u64,
    /// Channel state bytes.
    pub channel_state_bytes: u64,
    /// Whether some subtask took it unaligned.
    pub unaligned: bool,
    /// Why it failed.
    pub failure: Option<String>,
}

/// Checkpoint counters and the recent history of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CheckpointStats {
    /// Checkpoints completed (savepoints not included).
    pub completed: u64,
    /// Checkpoints that failed.
    pub failed: u64,
    /// Longest trigger-to-completion of a completed checkpoint, ms.
    pub max_duration_ms: u64,
    /// Channel state bytes summed over completed checkpoints.
    pub channel_state_bytes: u64,
    /// The newest completed checkpoint.
    pub last_completed: Option<CheckpointId>,
    /// The last checkpoints and savepoints, newest last (at most 20).
    pub history: VecDeque<CheckpointRecord>,
    /// The savepoint `savepoint_at_records` asked for: its path, or why it
    /// failed.
    pub savepoint: Option<Result<String, String>>,
}

const HISTORY: usize = 20;

impl CheckpointStats {
    /// Counts `r` (a completed or failed checkpoint; savepoints and aborted
    /// checkpoints only go into the history) and appends it to the history.
    pub(crate) fn record(&mut self, r: CheckpointRecord) {
        if !r.savepoint {
            match r.status.as_str() {
                "completed" => {
                    self.completed += 1;
                    self.max_duration_ms = self.max_duration_ms.max(r.duration_ms);
                    self.channel_state_bytes += r.channel_state_bytes;
                    self.last_completed = Some(r.id);
                }
                "failed" => self.failed += 1,
                _ => {}
            }
        }
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(r);
    }
}
