//! Counters a running job exposes: records in and out per operator subtask, and
//! the high-water marks of queued batches that show flow control at work.
//!
//! Counters are updated once per batch with relaxed atomics, so reading them from
//! a job handle never slows the data path.

use crate::ids::{OperatorId, SubtaskIndex};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counters of one operator subtask.
#[derive(Debug)]
pub struct OperatorMetrics {
    /// The operator.
    pub operator: OperatorId,
    /// Its name.
    pub name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Records that entered the operator.
    pub records_in: AtomicU64,
    /// Records the operator emitted (main output).
    pub records_out: AtomicU64,
}

impl OperatorMetrics {
    /// Adds `n` records in.
    #[inline]
    pub fn add_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Adds `n` records out.
    #[inline]
    pub fn add_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Queue high-water marks of one subtask.
#[derive(Debug, Default)]
pub struct QueueMetrics {
    /// Most record batches ever queued on one input channel.
    pub max_input_batches: AtomicUsize,
    /// Most record batches ever queued on one output channel without credit.
    pub max_output_batches: AtomicUsize,
}

impl QueueMetrics {
    /// Records an input queue length.
    #[inline]
    pub fn observe_input(&self, n: usize) {
        if n > self.max_input_batches.load(Ordering::Relaxed) {
            self.max_input_batches.fetch_max(n, Ordering::Relaxed);
        }
    }

    /// Records an output queue length.
    #[inline]
    pub fn observe_output(&self, n: usize) {
        if n > self.max_output_batches.load(Ordering::Relaxed) {
            self.max_output_batches.fetch_max(n, Ordering::Relaxed);
        }
    }
}

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

/// Every counter of a job.
#[derive(Debug, Default)]
pub struct JobMetrics {
    operators: Mutex<Vec<Arc<OperatorMetrics>>>,
    queues: Mutex<Vec<Arc<QueueMetrics>>>,
}

impl JobMetrics {
    /// Registers the counters of one operator subtask.
    pub fn operator(
        &self,
        operator: OperatorId,
        name: &str,
        subtask: SubtaskIndex,
    ) -> Arc<OperatorMetrics> {
        let m = Arc::new(OperatorMetrics {
            operator,
            name: name.to_string(),
            subtask,
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
        });
        self.operators
            .lock()
            .expect("metrics lock poisoned")
            .push(m.clone());
        m
    }

    /// Registers the queue counters of one subtask.
    pub fn queues(&self) -> Arc<QueueMetrics> {
        let q = Arc::new(QueueMetrics::default());
        self.queues
            .lock()
            .expect("metrics lock poisoned")
            .push(q.clone());
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

    /// The most record batches queued on any output channel of any subtask.
    pub fn max_output_batches(&self) -> usize {
        let q = self.queues.lock().expect("metrics lock poisoned");
        q.iter()
            .map(|q| q.max_output_batches.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }
}
