//! Counters a running job exposes: records in and out per operator subtask,
//! batches queued per input and output channel, time backpressured and idle,
//! and the watermarks of every input channel and subtask.
//!
//! Counters are updated once per batch (or per watermark, or per change of
//! state) with relaxed atomics, never per record and never under a lock, so
//! reading them from a job handle or publishing them never slows the data path.
//! [`JobMetrics::publish`] copies them into the `metrics` crate facade, so any
//! exporter a program installs sees them, every series labelled with the job's
//! name; see `docs/operations.md` for names.
//!
//! Operator gauges that cost more than an atomic add (the size of an
//! operator's state) are sampled, not maintained: each publication starts a
//! new sampling round, and an operator subtask samples once when it next
//! sees a new round ([`OperatorMetrics::sample_due`]), on its own thread.

use crate::element::{MAX_WATERMARK, MIN_WATERMARK, Timestamp};
use crate::ids::{OperatorId, SubtaskIndex, VertexId};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

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
    /// Records that arrived after every window they belong to had closed
    /// (window operators; sampled).
    pub late_records: AtomicU64,
    /// Late records dropped because no late side output was set (sampled).
    pub late_records_dropped: AtomicU64,
    /// Entries of the operator's state (sampled; see [`StateSize`]).
    pub state_entries: AtomicU64,
    /// Bytes of the operator's state (sampled; see [`StateSize`]).
    pub state_bytes: AtomicU64,
    /// Whether the operator reported a state size at all.
    pub has_state: AtomicBool,
    /// The sampling round last sampled.
    sampled: AtomicU64,
    /// The job's current sampling round.
    round: Arc<AtomicU64>,
}

/// The size of an operator subtask's state, as its backend reports it.
///
/// `entries` counts keys holding a value (per state, summed over states; a
/// window operator counts (key, window) pairs). `bytes` is the backend's
/// cheap estimate: for the heap, the in-memory size of keys and values
/// without what they point to; for redb, the database file's length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSize {
    /// Entries.
    pub entries: u64,
    /// Bytes (an estimate; see above).
    pub bytes: u64,
}

impl std::ops::Add for StateSize {
    type Output = StateSize;
    fn add(self, o: StateSize) -> StateSize {
        StateSize {
            entries: self.entries + o.entries,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// What an operator reports when sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperatorSample {
    /// Its state's size, if it keeps state.
    pub state: Option<StateSize>,
    /// Late records so far (window operators).
    pub late_records: u64,
    /// Late records dropped so far.
    pub late_records_dropped: u64,
}

impl OperatorMetrics {
    /// True when a sampling round started since this subtask last sampled:
    /// one relaxed load, cheap enough for every batch.
    #[inline]
    pub fn sample_due(&self) -> bool {
        self.round.load(Ordering::Relaxed) != self.sampled.load(Ordering::Relaxed)
    }

    /// Stores a sample taken by the operator's subtask.
    pub fn record_sample(&self, s: OperatorSample) {
        self.sampled
            .store(self.round.load(Ordering::Relaxed), Ordering::Relaxed);
        if let Some(st) = s.state {
            self.state_entries.store(st.entries, Ordering::Relaxed);
            self.state_bytes.store(st.bytes, Ordering::Relaxed);
            self.has_state.store(true, Ordering::Relaxed);
        }
        self.late_records.store(s.late_records, Ordering::Relaxed);
        self.late_records_dropped
            .store(s.late_records_dropped, Ordering::Relaxed);
    }

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

/// Batches queued on one channel: now and at most.
#[derive(Debug, Default)]
pub struct ChannelQueue {
    /// Record batches queued now.
    pub queued: AtomicUsize,
    /// Most record batches ever queued.
    pub max_queued: AtomicUsize,
}

impl ChannelQueue {
    /// Records the queue's length after a change.
    #[inline]
    pub fn set(&self, n: usize) {
        self.queued.store(n, Ordering::Relaxed);
        if n > self.max_queued.load(Ordering::Relaxed) {
            self.max_queued.fetch_max(n, Ordering::Relaxed);
        }
    }
}

/// One input channel of a subtask: its queue, watermark and idleness.
#[derive(Debug)]
pub struct InputChannelMetrics {
    /// Record batches queued, unprocessed.
    pub queue: ChannelQueue,
    /// The channel's watermark (`i64::MIN` before the first).
    pub watermark: AtomicI64,
    /// True while the channel is marked idle.
    pub idle: AtomicBool,
    /// True once the channel delivered end-of-input.
    pub ended: AtomicBool,
}

impl Default for InputChannelMetrics {
    fn default() -> Self {
        InputChannelMetrics {
            queue: ChannelQueue::default(),
            watermark: AtomicI64::new(MIN_WATERMARK),
            idle: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }
}

/// One output channel of a subtask (per record writer and receiver).
#[derive(Debug)]
pub struct OutputChannelMetrics {
    /// Index of the channel among the subtask's output channels.
    pub index: usize,
    /// Batches queued without credit.
    pub queue: ChannelQueue,
}

/// A span of time a subtask spends in one state, accumulated in nanoseconds.
///
/// `since` holds the start of the running span (nanoseconds after the job's
/// epoch, plus one; zero when no span runs), so a reader can add the part of a
/// span that has not ended yet.
#[derive(Debug, Default)]
pub struct TimeSpent {
    total_ns: AtomicU64,
    since: AtomicU64,
}

impl TimeSpent {
    /// Total nanoseconds, including a running span, as of `now_ns`.
    pub fn total_ns(&self, now_ns: u64) -> u64 {
        let total = self.total_ns.load(Ordering::Relaxed);
        match self.since.load(Ordering::Relaxed) {
            0 => total,
            s => total + now_ns.saturating_sub(s - 1),
        }
    }
}

/// Queue, watermark and time counters of one subtask.
#[derive(Debug)]
pub struct QueueMetrics {
    /// The vertex (chain) the subtask runs.
    pub vertex: VertexId,
    /// The chain's name.
    pub name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Most record batches ever queued on one input channel.
    pub max_input_batches: AtomicUsize,
    /// Most record batches ever queued on one output channel without credit.
    pub max_output_batches: AtomicUsize,
    /// Per input channel, by channel id.
    pub inputs: Vec<InputChannelMetrics>,
    /// Per output channel, registered as record writers are built.
    outputs: Mutex<Vec<Arc<OutputChannelMetrics>>>,
    /// The subtask's watermark (minimum over its active inputs).
    pub watermark: AtomicI64,
    /// Time spent unable to take input because an output queue was full.
    pub backpressured: TimeSpent,
    /// Time spent waiting with no input.
    pub idle: TimeSpent,
    /// When the subtask ended (nanoseconds after the epoch plus one; 0 = running).
    ended_ns: AtomicU64,
    epoch: Instant,
}

/// What a subtask is doing, for the time counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitState {
    /// Processing, or ready to.
    Busy,
    /// Stopped because an output queue is full.
    Backpressured,
    /// Waiting for input.
    Idle,
}

impl QueueMetrics {
    /// Counters of a subtask with `inputs` input channels, timed from `epoch`.
    pub fn new(
        vertex: VertexId,
        name: &str,
        subtask: SubtaskIndex,
        inputs: usize,
        epoch: Instant,
    ) -> Self {
        QueueMetrics {
            vertex,
            name: name.to_string(),
            subtask,
            max_input_batches: AtomicUsize::new(0),
            max_output_batches: AtomicUsize::new(0),
            inputs: (0..inputs)
                .map(|_| InputChannelMetrics::default())
                .collect(),
            outputs: Mutex::new(Vec::new()),
            watermark: AtomicI64::new(MIN_WATERMARK),
            backpressured: TimeSpent::default(),
            idle: TimeSpent::default(),
            ended_ns: AtomicU64::new(0),
            epoch,
        }
    }

    /// Nanoseconds since the job's epoch.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Registers one output channel (when a record writer is built).
    pub fn output_channel(&self) -> Arc<OutputChannelMetrics> {
        let mut outs = self.outputs.lock().expect("metrics lock poisoned");
        let m = Arc::new(OutputChannelMetrics {
            index: outs.len(),
            queue: ChannelQueue::default(),
        });
        outs.push(m.clone());
        m
    }

    /// The registered output channels.
    pub fn output_channels(&self) -> Vec<Arc<OutputChannelMetrics>> {
        self.outputs.lock().expect("metrics lock poisoned").clone()
    }

    /// Moves the subtask from state `from` to `to` (called on changes only).
    pub fn transition(&self, from: WaitState, to: WaitState) {
        if from == to {
            return;
        }
        let now = self.now_ns();
        let span = |t: &TimeSpent| match t.since.swap(0, Ordering::Relaxed) {
            0 => {}
            s => {
                t.total_ns
                    .fetch_add(now.saturating_sub(s - 1), Ordering::Relaxed);
            }
        };
        match from {
            WaitState::Backpressured => span(&self.backpressured),
            WaitState::Idle => span(&self.idle),
            WaitState::Busy => {}
        }
        match to {
            WaitState::Backpressured => self.backpressured.since.store(now + 1, Ordering::Relaxed),
            WaitState::Idle => self.idle.since.store(now + 1, Ordering::Relaxed),
            WaitState::Busy => {}
        }
    }

    /// Marks the subtask ended (finished, failed or cancelled).
    pub fn end(&self, state: WaitState) {
        self.transition(state, WaitState::Busy);
        let _ = self.ended_ns.compare_exchange(
            0,
            self.now_ns() + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Nanoseconds the subtask has lived (up to its end, if it ended).
    pub fn lifetime_ns(&self) -> u64 {
        match self.ended_ns.load(Ordering::Relaxed) {
            0 => self.now_ns(),
            e => e - 1,
        }
    }

    /// Records a new watermark of input channel `c`.
    #[inline]
    pub fn input_watermark(&self, c: usize, wm: Timestamp) {
        if let Some(ch) = self.inputs.get(c) {
            ch.watermark.store(wm, Ordering::Relaxed);
        }
    }

    /// Records the length of input channel `c`'s queue.
    #[inline]
    pub fn input_queued(&self, c: usize, n: usize) {
        if let Some(ch) = self.inputs.get(c) {
            ch.queue.set(n);
        }
        self.observe_input(n);
    }

    /// A snapshot of this subtask's counters.
    pub fn sample(&self) -> SubtaskSample {
        let now = self.lifetime_ns();
        SubtaskSample {
            vertex: self.vertex,
            name: self.name.clone(),
            subtask: self.subtask,
            lifetime_ns: now,
            backpressured_ns: self.backpressured.total_ns(now),
            idle_ns: self.idle.total_ns(now),
            watermark: self.watermark.load(Ordering::Relaxed),
            inputs: self
                .inputs
                .iter()
                .map(|c| InputSample {
                    queued: c.queue.queued.load(Ordering::Relaxed),
                    max_queued: c.queue.max_queued.load(Ordering::Relaxed),
                    watermark: c.watermark.load(Ordering::Relaxed),
                    idle: c.idle.load(Ordering::Relaxed),
                    ended: c.ended.load(Ordering::Relaxed),
                })
                .collect(),
            outputs: self
                .output_channels()
                .iter()
                .map(|c| {
                    (
                        c.queue.queued.load(Ordering::Relaxed),
                        c.queue.max_queued.load(Ordering::Relaxed),
                    )
                })
                .collect(),
        }
    }
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
    /// The checkpoint the restart restored (0: from the beginning).
    pub restored_checkpoint: Option<u64>,
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
    job: String,
    round: Arc<AtomicU64>,
    epoch: Instant,
    operators: Mutex<Vec<Arc<OperatorMetrics>>>,
    queues: Mutex<Vec<Arc<QueueMetrics>>>,
    failures: Mutex<Vec<FailureRecord>>,
    last_failure_at: Mutex<Option<std::time::Instant>>,
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
    /// `checkpoint` (0: from the beginning), for every failure not yet
    /// followed by a restart.
    pub fn record_restart(&self, subtasks: u64, checkpoint: u64) {
        let mut failures = self.failures.lock().expect("metrics lock poisoned");
        for f in failures
            .iter_mut()
            .rev()
            .take_while(|f| f.restarted_subtasks.is_none())
        {
            f.restarted_subtasks = Some(subtasks);
            f.restored_checkpoint = Some(checkpoint);
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

    /// Copies every counter into the `metrics` crate facade (whatever recorder
    /// the program installed; a no-op without one) and starts a new sampling
    /// round. Called periodically by the supervisor and once when the job
    /// ends; never on the data path.
    pub fn publish(&self) {
        // HELP text goes to whatever recorder is installed now (a program
        // may install one after the first publication); a recorder keeps
        // the first description, so repeating costs a lookup per metric.
        describe_metrics();
        self.start_sampling_round();
        let job = self.job.clone();
        for o in self.operator_subtasks() {
            let labels = [
                ("job", job.clone()),
                ("operator", o.name),
                ("subtask", o.subtask.to_string()),
            ];
            metrics::counter!("floe_records_in_total", &labels).absolute(o.records_in);
            metrics::counter!("floe_records_out_total", &labels).absolute(o.records_out);
            if o.late_records > 0 {
                metrics::counter!("floe_late_records_total", &labels).absolute(o.late_records);
            }
            if o.late_records_dropped > 0 {
                metrics::counter!("floe_late_records_dropped_total", &labels)
                    .absolute(o.late_records_dropped);
            }
            if let Some(st) = o.state {
                metrics::gauge!("floe_state_entries", &labels).set(st.entries as f64);
                metrics::gauge!("floe_state_bytes", &labels).set(st.bytes as f64);
            }
        }
        let now_ms = crate::element::now_ms();
        for s in self.subtask_samples() {
            let labels = [
                ("job", job.clone()),
                ("operator", s.name.clone()),
                ("subtask", s.subtask.to_string()),
            ];
            // Cumulative seconds, published as gauges: the facade's
            // counters hold integers only.
            metrics::gauge!("floe_backpressured_seconds", &labels).set(ns_to_s(s.backpressured_ns));
            metrics::gauge!("floe_idle_seconds", &labels).set(ns_to_s(s.idle_ns));
            metrics::gauge!("floe_lifetime_seconds", &labels).set(ns_to_s(s.lifetime_ns));
            // No sentinel: the watermark series appear with the first
            // watermark, and keep the last one once the input ended.
            if let Some(wm) = live_watermark_s(s.watermark) {
                metrics::gauge!("floe_watermark_timestamp_seconds", &labels).set(wm);
            }
            if let Some(lag) = watermark_lag_ms(s.watermark, now_ms) {
                metrics::gauge!("floe_watermark_lag_seconds", &labels).set(lag as f64 / 1e3);
            }
            for (c, i) in s.inputs.iter().enumerate() {
                let labels = [
                    ("job", job.clone()),
                    ("operator", s.name.clone()),
                    ("subtask", s.subtask.to_string()),
                    ("channel", c.to_string()),
                ];
                metrics::gauge!("floe_input_queued_batches", &labels).set(i.queued as f64);
                metrics::gauge!("floe_input_queued_batches_max", &labels).set(i.max_queued as f64);
                if let Some(wm) = live_watermark_s(i.watermark) {
                    metrics::gauge!("floe_input_watermark_timestamp_seconds", &labels).set(wm);
                }
                metrics::gauge!("floe_input_idle", &labels).set(if i.idle { 1.0 } else { 0.0 });
            }
            for (c, (q, m)) in s.outputs.iter().enumerate() {
                let labels = [
                    ("job", job.clone()),
                    ("operator", s.name.clone()),
                    ("subtask", s.subtask.to_string()),
                    ("channel", c.to_string()),
                ];
                metrics::gauge!("floe_output_queued_batches", &labels).set(*q as f64);
                metrics::gauge!("floe_output_queued_batches_max", &labels).set(*m as f64);
            }
        }
    }
}

/// Nanoseconds as seconds.
fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A watermark (ms) as seconds since the epoch, `None` for the sentinels
/// before the first watermark and after the end of input.
fn live_watermark_s(wm: Timestamp) -> Option<f64> {
    (wm != MIN_WATERMARK && wm != MAX_WATERMARK).then(|| wm as f64 / 1e3)
}

/// Gives every metric floe publishes its unit and HELP text in the
/// installed recorder (see `docs/operations.md`). [`JobMetrics::publish`]
/// calls it; a program that installs a recorder may call it at once.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "floe_records_in_total",
        Unit::Count,
        "Records that entered the operator subtask."
    );
    describe_counter!(
        "floe_records_out_total",
        Unit::Count,
        "Records the operator subtask emitted on its main output."
    );
    describe_counter!(
        "floe_late_records_total",
        Unit::Count,
        "Records that reached a window operator after every window they belong to had closed."
    );
    describe_counter!(
        "floe_late_records_dropped_total",
        Unit::Count,
        "Late records dropped because no late side output was set."
    );
    describe_gauge!(
        "floe_state_entries",
        Unit::Count,
        "Entries of the operator subtask's state (sampled)."
    );
    describe_gauge!(
        "floe_state_bytes",
        Unit::Bytes,
        "The state backend's estimate of the operator subtask's state size (sampled)."
    );
    describe_gauge!(
        "floe_backpressured_seconds",
        Unit::Seconds,
        "Cumulative seconds the subtask could not take input because an output queue was full."
    );
    describe_gauge!(
        "floe_idle_seconds",
        Unit::Seconds,
        "Cumulative seconds the subtask waited with no input queued."
    );
    describe_gauge!(
        "floe_lifetime_seconds",
        Unit::Seconds,
        "Seconds from the job's start to now or to the subtask's end."
    );
    describe_gauge!(
        "floe_watermark_timestamp_seconds",
        Unit::Seconds,
        "The subtask's event-time watermark, in seconds since the Unix epoch (absent before the first watermark)."
    );
    describe_gauge!(
        "floe_watermark_lag_seconds",
        Unit::Seconds,
        "Processing time minus the subtask's watermark, when published."
    );
    describe_gauge!(
        "floe_input_watermark_timestamp_seconds",
        Unit::Seconds,
        "The input channel's watermark, in seconds since the Unix epoch (absent before the first watermark)."
    );
    describe_gauge!(
        "floe_input_idle",
        "1 while the input channel is marked idle."
    );
    describe_gauge!(
        "floe_input_queued_batches",
        Unit::Count,
        "Record batches received on the input channel, not yet processed."
    );
    describe_gauge!(
        "floe_input_queued_batches_max",
        Unit::Count,
        "Most record batches ever queued on the input channel."
    );
    describe_gauge!(
        "floe_output_queued_batches",
        Unit::Count,
        "Record batches waiting for credit on the output channel."
    );
    describe_gauge!(
        "floe_output_queued_batches_max",
        Unit::Count,
        "Most record batches ever waiting for credit on the output channel."
    );
    describe_counter!(
        "floe_checkpoints_completed_total",
        Unit::Count,
        "Checkpoints completed."
    );
    describe_counter!(
        "floe_checkpoints_failed_total",
        Unit::Count,
        "Checkpoints that failed (declined, expired, not written)."
    );
    describe_counter!(
        "floe_checkpoints_aborted_total",
        Unit::Count,
        "Checkpoints abandoned without counting as failures."
    );
    describe_counter!(
        "floe_savepoints_completed_total",
        Unit::Count,
        "Savepoints completed."
    );
    describe_counter!(
        "floe_savepoints_failed_total",
        Unit::Count,
        "Savepoints that failed."
    );
    describe_counter!(
        "floe_savepoints_aborted_total",
        Unit::Count,
        "Savepoints abandoned."
    );
    describe_histogram!(
        "floe_checkpoint_duration_seconds",
        Unit::Seconds,
        "Checkpoint trigger to completion."
    );
    describe_histogram!(
        "floe_checkpoint_alignment_seconds",
        Unit::Seconds,
        "A checkpoint's longest barrier alignment over subtasks."
    );
    describe_histogram!(
        "floe_checkpoint_sync_seconds",
        Unit::Seconds,
        "A checkpoint's longest synchronous part over subtasks."
    );
    describe_histogram!(
        "floe_checkpoint_async_seconds",
        Unit::Seconds,
        "A checkpoint's longest asynchronous part over subtasks."
    );
    describe_histogram!(
        "floe_checkpoint_state_bytes",
        Unit::Bytes,
        "Operator state bytes a checkpoint wrote."
    );
    describe_gauge!(
        "floe_last_checkpoint_id",
        "Id of the newest completed checkpoint."
    );
    describe_gauge!(
        "floe_last_checkpoint_duration_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's trigger to completion."
    );
    describe_gauge!(
        "floe_last_checkpoint_alignment_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's longest alignment."
    );
    describe_gauge!(
        "floe_last_checkpoint_sync_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's longest synchronous part."
    );
    describe_gauge!(
        "floe_last_checkpoint_async_seconds",
        Unit::Seconds,
        "The newest completed checkpoint's longest asynchronous part."
    );
    describe_gauge!(
        "floe_last_checkpoint_state_bytes",
        Unit::Bytes,
        "Operator state bytes the newest completed checkpoint wrote."
    );
    describe_gauge!(
        "floe_last_checkpoint_channel_state_bytes",
        Unit::Bytes,
        "Channel state (unaligned in-flight data) bytes of the newest completed checkpoint."
    );
    describe_gauge!(
        "floe_last_failed_checkpoint_id",
        "Id of the newest failed checkpoint."
    );
}

/// How far (ms) a watermark lags behind processing time `now_ms`: `None`
/// before the first watermark and once the input ended.
pub fn watermark_lag_ms(watermark: Timestamp, now_ms: Timestamp) -> Option<i64> {
    (watermark != MIN_WATERMARK && watermark != MAX_WATERMARK)
        .then(|| now_ms.saturating_sub(watermark))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subtask() -> QueueMetrics {
        QueueMetrics::new(VertexId(0), "v", SubtaskIndex(0), 2, Instant::now())
    }

    #[test]
    fn channel_queue_keeps_current_and_max() {
        let q = ChannelQueue::default();
        for n in [1, 3, 2, 0] {
            q.set(n);
        }
        assert_eq!(q.queued.load(Ordering::Relaxed), 0);
        assert_eq!(q.max_queued.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn spans_accumulate_per_state_and_stop_at_the_end() {
        let q = subtask();
        q.transition(WaitState::Busy, WaitState::Backpressured);
        assert_ne!(q.backpressured.since.load(Ordering::Relaxed), 0);
        q.transition(WaitState::Backpressured, WaitState::Idle);
        // The backpressured span closed: its total no longer grows.
        let bp = q.backpressured.total_ns(u64::MAX);
        assert_eq!(bp, q.backpressured.total_ns(u64::MAX));
        assert_eq!(q.backpressured.since.load(Ordering::Relaxed), 0);
        // The idle span runs: a reader sees it grow with the reference time.
        let now = q.now_ns();
        assert!(q.idle.total_ns(now + 1_000) >= 1_000);
        q.end(WaitState::Idle);
        let life = q.lifetime_ns();
        assert_eq!(life, q.lifetime_ns(), "an ended subtask's life is fixed");
        let s = q.sample();
        assert!(s.backpressured_ns + s.idle_ns <= life);
        assert_eq!(s.idle_ns, q.idle.total_ns(u64::MAX));
        assert_eq!(s.inputs.len(), 2);
    }

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
        job.record_restart(5, 2);
        job.record_failure(None, None, "b".into());
        job.record_failure(None, None, "c".into());
        let f = job.failures();
        assert_eq!(f[0].restarted_subtasks, Some(5));
        assert_eq!(f[0].restored_checkpoint, Some(2));
        assert_eq!(f[1].restarted_subtasks, None);
        job.record_restart(3, 0);
        let f = job.failures();
        assert_eq!(f[0].restarted_subtasks, Some(5));
        assert_eq!(
            (f[1].restarted_subtasks, f[2].restored_checkpoint),
            (Some(3), Some(0))
        );
    }

    #[test]
    fn watermark_lag_is_none_without_a_live_watermark() {
        assert_eq!(watermark_lag_ms(MIN_WATERMARK, 100), None);
        assert_eq!(watermark_lag_ms(MAX_WATERMARK, 100), None);
        assert_eq!(watermark_lag_ms(40, 100), Some(60));
    }

    #[test]
    fn same_state_transition_is_free() {
        let q = subtask();
        q.transition(WaitState::Busy, WaitState::Busy);
        assert_eq!(q.backpressured.total_ns(u64::MAX), 0);
        assert_eq!(q.idle.total_ns(u64::MAX), 0);
    }
}
