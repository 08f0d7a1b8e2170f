//! A job's status as one serializable snapshot: its state, its graph and
//! pipelined regions, records, time shares, state size and late records per
//! operator, watermarks per subtask and channel, checkpoints, failures.
//!
//! The snapshot is what `/status` of the CLI's metrics endpoint serves and what
//! `--explain-watermarks` reads. Building one samples relaxed atomics and takes
//! the metrics registry's lock once; it never touches the data path.

use floe_actors::element::{MAX_WATERMARK, MIN_WATERMARK, Timestamp};
use floe_actors::ids::CheckpointId;
use floe_actors::metrics::{JobMetrics, watermark_lag_ms};
use floe_actors::supervisor::JobStatus;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// One operator of the stream graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorInfo {
    /// The operator's id (its index in the stream graph).
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: usize,
    /// The vertex (chain) it runs in.
    pub vertex: u32,
}

/// One edge of the stream graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeInfo {
    /// The producing operator.
    pub from: u32,
    /// The consuming operator.
    pub to: u32,
    /// The partitioner: forward, rebalance, hash, broadcast, …
    pub partitioner: String,
    /// True when the edge is a function call inside a chain, not a channel.
    pub chained: bool,
}

/// One vertex: a chain of operators run by the same subtasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexInfo {
    /// The vertex's id.
    pub id: u32,
    /// The chain's name: "source -> map -> sum".
    pub name: String,
    /// Its operators, in chain order.
    pub operators: Vec<u32>,
    /// Its parallelism.
    pub parallelism: usize,
}

/// One pipelined region: subtasks linked by channels, directly or not. A
/// failure restarts its region only (region failover).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    /// The region's index.
    pub id: usize,
    /// Its subtasks as (vertex id, subtask index), sorted.
    pub subtasks: Vec<(u32, u32)>,
}

/// The job's graph as deployed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGraphInfo {
    /// Every operator.
    pub operators: Vec<OperatorInfo>,
    /// Every edge.
    pub edges: Vec<EdgeInfo>,
    /// Every vertex (chain).
    pub vertices: Vec<VertexInfo>,
    /// The pipelined regions (connected components of the subtasks).
    #[serde(default)]
    pub regions: Vec<RegionInfo>,
}

/// Counters of one operator, over its subtasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorStatus {
    /// The operator's id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Records in, summed over subtasks.
    pub records_in: u64,
    /// Records out, summed over subtasks.
    pub records_out: u64,
    /// Share of its subtasks' time spent backpressured (0..=1), averaged over
    /// subtasks; shared by every operator of a chain.
    pub backpressured_share: f64,
    /// Share of its subtasks' time spent idle, waiting for input (0..=1).
    pub idle_share: f64,
    /// Entries of its state summed over subtasks (`None`: stateless), as
    /// last sampled (every metrics interval, and at the end of input).
    pub state_entries: Option<u64>,
    /// Bytes of its state summed over subtasks (the backend's estimate).
    pub state_bytes: Option<u64>,
    /// Records that arrived after their windows closed (window operators).
    pub late_records: u64,
    /// Of those, records dropped (no late side output).
    pub late_records_dropped: u64,
}

/// One input channel of a subtask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStatus {
    /// The channel's index at the subtask.
    pub channel: usize,
    /// Its watermark (`None` before the first one).
    pub watermark: Option<Timestamp>,
    /// Whether it is marked idle (ignored by the subtask's watermark).
    pub idle: bool,
    /// Whether it delivered end-of-input.
    pub ended: bool,
    /// Record batches queued now.
    pub queued_batches: usize,
    /// Most record batches ever queued.
    pub max_queued_batches: usize,
}

/// One subtask: its time shares, watermarks and channels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubtaskStatus {
    /// The vertex (chain) it runs.
    pub vertex: u32,
    /// The chain's name.
    pub name: String,
    /// Its index.
    pub subtask: u32,
    /// Its watermark (`None` before the first one).
    pub watermark: Option<Timestamp>,
    /// How far the watermark lags behind processing time, ms (`None` before
    /// the first watermark and after the end of input).
    pub watermark_lag_ms: Option<i64>,
    /// Its input channels.
    pub inputs: Vec<ChannelStatus>,
    /// The channel holding the watermark back: the live, active channel with
    /// the smallest watermark, if any.
    pub holding_back: Option<usize>,
    /// Batches queued per output channel now.
    pub output_queued_batches: Vec<usize>,
    /// Most batches ever queued per output channel.
    pub output_max_queued_batches: Vec<usize>,
    /// Share of its time backpressured.
    pub backpressured_share: f64,
    /// Share of its time idle.
    pub idle_share: f64,
    /// Records into its chain (its first operator's input).
    #[serde(default)]
    pub records_in: u64,
    /// Records out of its chain (its last operator's output).
    #[serde(default)]
    pub records_out: u64,
    /// Entries of its chain's state (`None`: stateless), as last sampled.
    #[serde(default)]
    pub state_entries: Option<u64>,
    /// Bytes of its chain's state (the backend's estimate).
    #[serde(default)]
    pub state_bytes: Option<u64>,
}

/// A failure the job saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// The JSON keeps `restored_checkpoint` a plain number or null: null while
// no restart followed, 0 for a restart from the beginning.
#[serde(into = "FailureJson", from = "FailureJson")]
pub struct FailureInfo {
    /// Milliseconds after the job started.
    pub at_ms: u64,
    /// The failed vertex's name, if a subtask failed.
    pub vertex: Option<String>,
    /// The failed subtask.
    pub subtask: Option<u32>,
    /// The error.
    pub message: String,
    /// Subtasks the restart that followed restarted (`None`: no restart
    /// followed, yet or at all).
    pub restarted_subtasks: Option<u64>,
    /// The checkpoint that restart restored (`None`: it started from the
    /// beginning, or no restart followed: see `restarted_subtasks`).
    pub restored_checkpoint: Option<CheckpointId>,
}

/// [`FailureInfo`] as the JSON of `/status` has it.
#[derive(Serialize, Deserialize)]
struct FailureJson {
    at_ms: u64,
    vertex: Option<String>,
    subtask: Option<u32>,
    message: String,
    restarted_subtasks: Option<u64>,
    restored_checkpoint: Option<u64>,
}

impl From<FailureInfo> for FailureJson {
    fn from(f: FailureInfo) -> Self {
        FailureJson {
            restored_checkpoint: f
                .restarted_subtasks
                .map(|_| f.restored_checkpoint.map_or(0, |c| c.0)),
            at_ms: f.at_ms,
            vertex: f.vertex,
            subtask: f.subtask,
            message: f.message,
            restarted_subtasks: f.restarted_subtasks,
        }
    }
}

impl From<FailureJson> for FailureInfo {
    fn from(f: FailureJson) -> Self {
        FailureInfo {
            at_ms: f.at_ms,
            vertex: f.vertex,
            subtask: f.subtask,
            message: f.message,
            restarted_subtasks: f.restarted_subtasks,
            restored_checkpoint: f.restored_checkpoint.filter(|&c| c != 0).map(CheckpointId),
        }
    }
}

/// Restarts of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverStats {
    /// Restarts done.
    pub restarts: u64,
    /// Subtasks restarted, summed over restarts.
    pub restarted_subtasks: u64,
    /// Longest time from a failure to the restarted subtasks processing
    /// records again, ms.
    pub max_recovery_ms: u64,
    /// Per restart: the checkpoint restored (`None`: from the beginning;
    /// 0 in the JSON).
    #[serde(with = "restored_as_numbers")]
    pub restored_checkpoints: Vec<Option<CheckpointId>>,
}

/// Serializes a restart's restored checkpoint per restart as the plain
/// number, 0 for a restart from the beginning (the JSON of `/status`).
mod restored_as_numbers {
    use floe_actors::ids::CheckpointId;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[Option<CheckpointId>], s: S) -> Result<S::Ok, S::Error> {
        let numbers: Vec<u64> = v.iter().map(|c| c.map_or(0, |c| c.0)).collect();
        numbers.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Option<CheckpointId>>, D::Error> {
        let numbers = Vec::<u64>::deserialize(d)?;
        Ok(numbers
            .into_iter()
            .map(|n| (n != 0).then_some(CheckpointId(n)))
            .collect())
    }
}

/// Everything observable about a job at one moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatusSnapshot {
    /// The job's name (the `job` label of its metrics).
    pub job: String,
    /// The job's state: Created, Running, Finished, Failed, …
    pub state: String,
    /// Milliseconds since the job started.
    pub elapsed_ms: u64,
    /// The job's graph.
    pub graph: JobGraphInfo,
    /// Per operator, in operator order.
    pub operators: Vec<OperatorStatus>,
    /// Per subtask, in vertex then subtask order.
    pub subtasks: Vec<SubtaskStatus>,
    /// Failures, oldest first (empty for a healthy job).
    pub failures: Vec<FailureInfo>,
    /// Checkpoint counters and the last checkpoints and savepoints.
    pub checkpoints: crate::checkpoint::CheckpointStats,
    /// Restarts: how many, how many subtasks, the longest recovery, the
    /// checkpoint each restored.
    pub failover: FailoverStats,
    /// Facts about the job its configuration gives (`Config::job_info`),
    /// e.g. a group member's generation and partitions.
    #[serde(default)]
    pub info: std::collections::BTreeMap<String, String>,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 / whole as f64).min(1.0)
    }
}

fn shown(wm: Timestamp) -> Option<Timestamp> {
    (wm != MIN_WATERMARK).then_some(wm)
}

impl JobStatusSnapshot {
    /// The operator named `name`, if there is one.
    pub fn operator(&self, name: &str) -> Option<&OperatorStatus> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// The subtasks of the vertex that runs the operator named `name`.
    pub fn subtasks_of(&self, name: &str) -> Vec<&SubtaskStatus> {
        let Some(op) = self.graph.operators.iter().find(|o| o.name == name) else {
            return Vec::new();
        };
        self.subtasks
            .iter()
            .filter(|s| s.vertex == op.vertex)
            .collect()
    }

    /// A human explanation of the watermarks of the subtasks running `name`:
    /// per channel its watermark, idleness, and which one holds the minimum back.
    pub fn explain_watermarks(&self, name: &str) -> String {
        let mut out = String::new();
        for s in self.subtasks_of(name) {
            let wm = fmt_wm(s.watermark);
            let _ = writeln!(
                out,
                "{} [{}] subtask {}: watermark {wm}",
                name, s.name, s.subtask
            );
            for c in &s.inputs {
                let mut flags = Vec::new();
                if c.idle {
                    flags.push("idle");
                }
                if c.ended {
                    flags.push("ended");
                }
                if s.holding_back == Some(c.channel) {
                    flags.push("holds the watermark back");
                }
                let flags = if flags.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", flags.join(", "))
                };
                let _ = writeln!(
                    out,
                    "  channel {}: watermark {}{flags}",
                    c.channel,
                    fmt_wm(c.watermark)
                );
            }
            if s.holding_back.is_none() {
                let _ = writeln!(out, "  no live active channel holds the watermark back");
            }
        }
        out
    }
}

fn fmt_wm(wm: Option<Timestamp>) -> String {
    match wm {
        None => "none".into(),
        Some(MAX_WATERMARK) => "end".into(),
        Some(w) => w.to_string(),
    }
}

/// Builds status snapshots of one job; cheap to clone and `Send + Sync`, so a
/// metrics endpoint's thread can hold one.
#[derive(Clone)]
pub struct StatusReporter {
    pub(crate) status: Arc<Mutex<JobStatus>>,
    pub(crate) metrics: Arc<JobMetrics>,
    pub(crate) graph: Arc<JobGraphInfo>,
    pub(crate) checkpoints: Arc<Mutex<crate::checkpoint::CheckpointStats>>,
    pub(crate) failover: Arc<Mutex<FailoverStats>>,
    pub(crate) info: Arc<std::collections::BTreeMap<String, String>>,
}

impl StatusReporter {
    /// The job's status now.
    pub fn snapshot(&self) -> JobStatusSnapshot {
        let state = self
            .status
            .lock()
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "Unknown".into());
        let graph = (*self.graph).clone();
        let samples = self.metrics.subtask_samples();
        let now_ms = floe_actors::element::now_ms();
        let subtasks: Vec<SubtaskStatus> = samples
            .iter()
            .map(|s| {
                let holding_back = s
                    .inputs
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| !c.idle && !c.ended)
                    .min_by_key(|(_, c)| c.watermark)
                    .map(|(i, _)| i);
                SubtaskStatus {
                    vertex: s.vertex.0,
                    name: s.name.clone(),
                    subtask: s.subtask.0,
                    watermark: shown(s.watermark),
                    watermark_lag_ms: watermark_lag_ms(s.watermark, now_ms),
                    inputs: s
                        .inputs
                        .iter()
                        .enumerate()
                        .map(|(i, c)| ChannelStatus {
                            channel: i,
                            watermark: shown(c.watermark),
                            idle: c.idle,
                            ended: c.ended,
                            queued_batches: c.queued,
                            max_queued_batches: c.max_queued,
                        })
                        .collect(),
                    holding_back,
                    output_queued_batches: s.outputs.iter().map(|o| o.0).collect(),
                    output_max_queued_batches: s.outputs.iter().map(|o| o.1).collect(),
                    backpressured_share: share(s.backpressured_ns, s.lifetime_ns),
                    idle_share: share(s.idle_ns, s.lifetime_ns),
                    records_in: 0,
                    records_out: 0,
                    state_entries: None,
                    state_bytes: None,
                }
            })
            .collect();
        let counts = self.metrics.operator_subtasks();
        // Each subtask's chain: records into its first operator, out of its
        // last, and the state of all of them.
        let mut subtasks = subtasks;
        for st in &mut subtasks {
            let Some(v) = graph.vertices.iter().find(|v| v.id == st.vertex) else {
                continue;
            };
            let (first, last) = (v.operators.first(), v.operators.last());
            for c in counts
                .iter()
                .filter(|c| c.subtask.0 == st.subtask && v.operators.contains(&c.operator.0))
            {
                if first == Some(&c.operator.0) {
                    st.records_in = c.records_in;
                }
                if last == Some(&c.operator.0) {
                    st.records_out = c.records_out;
                }
                if let Some(size) = c.state {
                    st.state_entries = Some(st.state_entries.unwrap_or(0) + size.entries);
                    st.state_bytes = Some(st.state_bytes.unwrap_or(0) + size.bytes);
                }
            }
        }
        let operators = graph
            .operators
            .iter()
            .map(|op| {
                let (mut records_in, mut records_out) = (0, 0);
                let (mut late_records, mut late_records_dropped) = (0, 0);
                let mut state: Option<floe_actors::metrics::StateSize> = None;
                for c in counts.iter().filter(|c| c.operator.0 == op.id) {
                    records_in += c.records_in;
                    records_out += c.records_out;
                    late_records += c.late_records;
                    late_records_dropped += c.late_records_dropped;
                    if let Some(s) = c.state {
                        state = Some(state.unwrap_or_default() + s);
                    }
                }
                let mine: Vec<&SubtaskStatus> =
                    subtasks.iter().filter(|s| s.vertex == op.vertex).collect();
                let n = mine.len().max(1) as f64;
                OperatorStatus {
                    id: op.id,
                    name: op.name.clone(),
                    records_in,
                    records_out,
                    backpressured_share: mine.iter().map(|s| s.backpressured_share).sum::<f64>()
                        / n,
                    idle_share: mine.iter().map(|s| s.idle_share).sum::<f64>() / n,
                    state_entries: state.map(|s| s.entries),
                    state_bytes: state.map(|s| s.bytes),
                    late_records,
                    late_records_dropped,
                }
            })
            .collect();
        let failures = self
            .metrics
            .failures()
            .into_iter()
            .map(|f| FailureInfo {
                at_ms: f.at_ms,
                vertex: f.vertex.and_then(|v| {
                    graph
                        .vertices
                        .iter()
                        .find(|x| x.id == v.0)
                        .map(|x| x.name.clone())
                }),
                subtask: f.subtask.map(|s| s.0),
                message: f.message,
                restarted_subtasks: f.restarted_subtasks,
                restored_checkpoint: f.restored_checkpoint,
            })
            .collect();
        JobStatusSnapshot {
            job: self.metrics.job().to_string(),
            state,
            elapsed_ms: self.metrics.elapsed_ms(),
            graph,
            operators,
            subtasks,
            failures,
            checkpoints: self
                .checkpoints
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default(),
            failover: self.failover.lock().map(|f| f.clone()).unwrap_or_default(),
            info: (*self.info).clone(),
        }
    }

    /// The snapshot as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.snapshot())
            .unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
    }

    /// Copies the job's counters into the `metrics` facade now.
    pub fn publish_metrics(&self) {
        self.metrics.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(restarted: Option<u64>, restored: Option<CheckpointId>) -> FailureInfo {
        FailureInfo {
            at_ms: 5,
            vertex: None,
            subtask: None,
            message: "boom".into(),
            restarted_subtasks: restarted,
            restored_checkpoint: restored,
        }
    }

    #[test]
    fn restored_checkpoints_stay_plain_numbers_in_the_json() {
        // null: no restart followed; 0: a restart from the beginning.
        let cases = [
            (failure(None, None), serde_json::Value::Null),
            (failure(Some(2), None), serde_json::json!(0)),
            (
                failure(Some(2), Some(CheckpointId(7))),
                serde_json::json!(7),
            ),
        ];
        for (f, want) in cases {
            let json = serde_json::to_value(&f).expect("encodes");
            assert_eq!(json["restored_checkpoint"], want, "{json}");
            assert_eq!(
                json["restarted_subtasks"],
                serde_json::json!(f.restarted_subtasks)
            );
            let back: FailureInfo = serde_json::from_value(json).expect("decodes");
            assert_eq!(back, f);
        }
        let stats = FailoverStats {
            restarts: 2,
            restored_checkpoints: vec![None, Some(CheckpointId(4))],
            ..Default::default()
        };
        let json = serde_json::to_value(&stats).expect("encodes");
        assert_eq!(json["restored_checkpoints"], serde_json::json!([0, 4]));
        let back: FailoverStats = serde_json::from_value(json).expect("decodes");
        assert_eq!(back, stats);
    }
}
