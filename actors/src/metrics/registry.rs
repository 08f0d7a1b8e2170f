//! The counters of a whole job: the registry of its operator subtasks and
//! queues, the samples and summaries read from them, and its failures.

use super::queue::QueueMetrics;
use super::{OperatorMetrics, StateSize};
use crate::element::Timestamp;
use crate::ids::{CheckpointId, OperatorId, SubtaskIndex, VertexId};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Totals of one operator over its subtasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorSummary {
    /// The operator.
    pub operator: OperatorId,
    /// Its name.
    pub name: String,
    /// Records in, summed over subtasks.
    pub records_in: u64,
    /// Records out, summed over subtasks.
    pub records_out: u64,
}

/// One input channel's counters, as sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSample {
    /// Batches queued now.
    pub queued: usize,
    /// Most batches ever queued.
    pub max_queued: usize,
    /// The channel's watermark.
    pub watermark: Timestamp,
    /// Whether the channel is idle.
    pub idle: bool,
    /// Whether the channel ended.
    pub ended: bool,
}

/// One subtask's counters, as sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubtaskSample {
    /// The vertex (chain).
    pub vertex: VertexId,
    /// The chain's name.
    pub name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Nanoseconds from the job's start to the subtask's end (or now).
    pub lifetime_ns: u64,
    /// Nanoseconds backpressured.
    pub backpressured_ns: u64,
    /// Nanoseconds idle.
    pub idle_ns: u64,
    /// The subtask's watermark.
    pub watermark: Timestamp,
    /// Per input channel.
    pub inputs: Vec<InputSample>,
    /// Per output channel: (queued now, most queued).
    pub outputs: Vec<(usize, usize)>,
}

/// A failure the supervisor saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureRecord {
    /// Milliseconds after the job's start.
    pub at_ms: u64,
    /// The failed vertex (chain), if a subtask failed.
    pub vertex: Option<VertexId>,
    /// The failed subtask.
    pub subtask: Option<SubtaskIndex>,
    /// The error.
    pub message: String,
    /// Subtasks restarted for this failure (`None`: none restarted yet, or
    /// the job failed for good).
    pub restarted_subtasks: Option<u64>,
    /// The checkpoint the restart restored (`None`: it started from the
    /// beginning, or no restart followed yet: see `restarted_subtasks`).
    pub restored_checkpoint: Option<CheckpointId>,
}

/// One operator subtask's counters, as sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorSubtaskSample {
    /// The operator.
    pub operator: OperatorId,
    /// Its name.
    pub name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Records in.
    pub records_in: u64,
    /// Records out.
    pub records_out: u64,
    /// Late records (window operators).
    pub late_records: u64,
    /// Late records dropped.
    pub late_records_dropped: u64,
    /// State size, if the operator reported one.
    pub state: Option<StateSize>,
}

/// Every counter of a job.
#[derive(Debug)]
pub struct JobMetrics {
    pub(super) job: String,
    pub(super) round: Arc<AtomicU64>,
    pub(super) epoch: Instant,
    pub(super) operators: Mutex<Vec<Arc<OperatorMetrics>>>,
    pub(super) queues: Mutex<Vec<Arc<QueueMetrics>>>,
    pub(super) failures: Mutex<Vec<FailureRecord>>,
    pub(super) last_failure_at: Mutex<Option<std::time::Instant>>,
}

impl Default for JobMetrics {
    fn default() -> Self {
        JobMetrics::new("job")
    }
}

impl JobMetrics {
    /// The counters of job `job` (its name labels every published series).
    pub fn new(job: &str) -> Self {
        JobMetrics {
            job: job.to_string(),
            round: Arc::new(AtomicU64::new(0)),
            epoch: Instant::now(),
            operators: Mutex::default(),
            queues: Mutex::default(),
            failures: Mutex::default(),
            last_failure_at: Mutex::default(),
        }
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Starts a new sampling round: each operator subtask samples its state
    /// size once when it next runs.
    pub fn start_sampling_round(&self) {
        self.round.fetch_add(1, Ordering::Relaxed);
    }

    /// Registers the counters of one operator subtask.
    pub fn operator(
        &self,
        operator: OperatorId,
        name: &str,
        subtask: SubtaskIndex,
    ) -> Arc<OperatorMetrics> {
        let mut ops = self.operators.lock().expect("metrics lock poisoned");
        // A restarted subtask counts on: its records add to the job's.
        if let Some(m) = ops
            .iter()
            .find(|m| m.operator == operator && m.subtask == subtask)
        {
            return m.clone();
        }
        let m = Arc::new(OperatorMetrics {
            operator,
            name: name.to_string(),
            subtask,
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            late_records: AtomicU64::new(0),
            late_records_dropped: AtomicU64::new(0),
            state_entries: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
            has_state: AtomicBool::new(false),
            // Due at once: a subtask samples when it first runs.
            sampled: AtomicU64::new(u64::MAX),
            round: self.round.clone(),
        });
        ops.push(m.clone());
        m
    }

    /// Registers the queue, watermark and time counters of one subtask.
    pub fn queues(
        &self,
        vertex: VertexId,
        name: &str,
        subtask: SubtaskIndex,
        inputs: usize,
    ) -> Arc<QueueMetrics> {
        let q = Arc::new(QueueMetrics::new(vertex, name, subtask, inputs, self.epoch));
        let mut queues = self.queues.lock().expect("metrics lock poisoned");
        // A restarted subtask replaces its predecessor's queues.
        queues.retain(|x| !(x.vertex == vertex && x.subtask == subtask));
        queues.push(q.clone());
        q
    }

    /// Per-operator totals, in operator order.
    pub fn operator_summaries(&self) -> Vec<OperatorSummary> {
        let ops = self.operators.lock().expect("metrics lock poisoned");
        let mut out: Vec<OperatorSummary> = Vec::new();
        for m in ops.iter() {
            let (i, o) = (
                m.records_in.load(Ordering::Relaxed),
                m.records_out.load(Ordering::Relaxed),
            );
            match out.iter_mut().find(|s| s.operator == m.operator) {
                Some(s) => {
                    s.records_in += i;
                    s.records_out += o;
                }
                None => out.push(OperatorSummary {
                    operator: m.operator,
                    name: m.name.clone(),
                    records_in: i,
                    records_out: o,
                }),
            }
        }
        out.sort_by_key(|s| s.operator);
        out
    }

    /// The most record batches queued on any input channel of any subtask.
    pub fn max_input_batches(&self) -> usize {
        let q = self.queues.lock().expect("metrics lock poisoned");
        q.iter()
            .map(|q| q.max_input_batches.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// The most records any one subtask held in its channels at once.
    pub fn max_buffered_records(&self) -> usize {
        let q = self.queues.lock().expect("metrics lock poisoned");
        q.iter()
            .map(|q| q.max_buffered_records.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// The most record batches queued on any output channel of any subtask.
    pub fn max_output_batches(&self) -> usize {
        let q = self.queues.lock().expect("metrics lock poisoned");
        q.iter()
            .map(|q| q.max_output_batches.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }
}

impl JobMetrics {
    /// Samples every subtask, in vertex then subtask order.
    pub fn subtask_samples(&self) -> Vec<SubtaskSample> {
        let q = self.queues.lock().expect("metrics lock poisoned").clone();
        let mut out: Vec<SubtaskSample> = q.iter().map(|q| q.sample()).collect();
        out.sort_by_key(|s| (s.vertex, s.subtask));
        out
    }

    /// The counters of every operator subtask, in registration order.
    pub fn operator_subtasks(&self) -> Vec<OperatorSubtaskSample> {
        let ops = self.operators.lock().expect("metrics lock poisoned");
        ops.iter()
            .map(|m| OperatorSubtaskSample {
                operator: m.operator,
                name: m.name.clone(),
                subtask: m.subtask,
                records_in: m.records_in.load(Ordering::Relaxed),
                records_out: m.records_out.load(Ordering::Relaxed),
                late_records: m.late_records.load(Ordering::Relaxed),
                late_records_dropped: m.late_records_dropped.load(Ordering::Relaxed),
                state: m.has_state.load(Ordering::Relaxed).then(|| StateSize {
                    entries: m.state_entries.load(Ordering::Relaxed),
                    bytes: m.state_bytes.load(Ordering::Relaxed),
                }),
            })
            .collect()
    }

    /// Milliseconds since the job's start.
    pub fn elapsed_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Notes a failure for the job's failure history.
    pub fn record_failure(
        &self,
        vertex: Option<VertexId>,
        subtask: Option<SubtaskIndex>,
        message: String,
    ) {
        let at_ms = self.elapsed_ms();
        if let Ok(mut last) = self.last_failure_at.lock() {
            *last = Some(std::time::Instant::now());
        }
        self.failures
            .lock()
            .expect("metrics lock poisoned")
            .push(FailureRecord {
                at_ms,
                vertex,
                subtask,
                message,
                restarted_subtasks: None,
                restored_checkpoint: None,
            });
    }

    /// Notes a restart: `subtasks` subtasks restarted from checkpoint
    /// `checkpoint` (`None`: from the beginning), for every failure not yet
    /// followed by a restart.
    pub fn record_restart(&self, subtasks: u64, checkpoint: Option<CheckpointId>) {
        let mut failures = self.failures.lock().expect("metrics lock poisoned");
        for f in failures
            .iter_mut()
            .rev()
            .take_while(|f| f.restarted_subtasks.is_none())
        {
            f.restarted_subtasks = Some(subtasks);
            f.restored_checkpoint = checkpoint;
        }
    }

    /// When the latest failure was recorded.
    pub fn last_failure_at(&self) -> Option<std::time::Instant> {
        self.last_failure_at.lock().ok().and_then(|l| *l)
    }

    /// The failures so far, oldest first.
    pub fn failures(&self) -> Vec<FailureRecord> {
        self.failures.lock().expect("metrics lock poisoned").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{OperatorSample, StateSize};

    #[test]
    fn operators_sample_once_per_round() {
        let job = JobMetrics::new("j");
        let op = job.operator(OperatorId(0), "op", SubtaskIndex(0));
        assert!(op.sample_due(), "due before the first sample");
        let sample = OperatorSample {
            state: Some(StateSize {
                entries: 3,
                bytes: 30,
            }),
            late_records: 2,
            late_records_dropped: 1,
        };
        op.record_sample(sample);
        assert!(!op.sample_due());
        job.start_sampling_round();
        assert!(op.sample_due());
        let s = &job.operator_subtasks()[0];
        assert_eq!(s.state, sample.state);
        assert_eq!((s.late_records, s.late_records_dropped), (2, 1));
        assert_eq!(job.job(), "j");
    }

    #[test]
    fn restarts_annotate_the_failures_before_them() {
        let job = JobMetrics::new("j");
        job.record_failure(None, None, "a".into());
        job.record_restart(5, Some(CheckpointId(2)));
        job.record_failure(None, None, "b".into());
        job.record_failure(None, None, "c".into());
        let f = job.failures();
        assert_eq!(f[0].restarted_subtasks, Some(5));
        assert_eq!(f[0].restored_checkpoint, Some(CheckpointId(2)));
        assert_eq!(f[1].restarted_subtasks, None);
        job.record_restart(3, None);
        let f = job.failures();
        assert_eq!(f[0].restarted_subtasks, Some(5));
        assert_eq!(
            (f[1].restarted_subtasks, f[2].restored_checkpoint),
            (Some(3), None)
        );
    }
}
