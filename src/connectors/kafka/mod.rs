//! A Kafka source with the semantics of Flink's `KafkaSource` (cargo feature
//! `kafka`, client: librdkafka through the `rdkafka` crate).
//!
//! - **Assignment.** The source assigns partitions itself (no consumer-group
//!   rebalancing): a new partition goes to the subtask Flink's enumerator
//!   picks, `((hash(topic) * 31) & 0x7FFFFFFF) % P + partition) % P` with
//!   Java's `String.hashCode`, so the owner of a partition is stable.
//! - **Positions.** Each subtask's checkpoint holds one split entry per
//!   partition it reads (topic, partition, next offset). On restore the
//!   entries are dealt out like every source's split state (at another
//!   parallelism too) and each subtask reads the partitions it was dealt
//!   from their checkpointed offsets. Every subtask also writes the list of
//!   partitions that existed at its discoveries as union state, so that
//!   after a restore every subtask knows all partitions already being read
//!   (or read to their end by a subtask that finished: a finished subtask is
//!   restored with empty state) and only truly new ones are assigned by the
//!   rule above. Bounded, a restore whose union state is empty (every
//!   subtask had finished) reads nothing. A checkpoint before the first
//!   poll assigns the partitions first, so empty state always means finished.
//! - **Discovery.** Unbounded, the source looks for new partitions every
//!   [`discovery_interval`](KafkaSource::discovery_interval); a new
//!   partition is read from the earliest offset (it is new: nothing of it
//!   was seen).
//! - **Start.** Earliest, latest, the first offset at or after a timestamp,
//!   or the group's committed offsets (earliest where none), resolved to
//!   concrete offsets when a partition is assigned.
//! - **Commit.** When a checkpoint completes, the offsets it holds are
//!   committed to the consumer group, for monitoring only: a restore always
//!   uses the checkpoint's offsets.
//! - **Bounded.** [`bounded`](KafkaSource::bounded) stops each partition at
//!   the end offset it had when it was assigned; the subtask finishes when
//!   all its partitions did (discovery is off, as in Flink).
//!
//! Records carry the Kafka record's timestamp as their event time. With
//! [`per_partition_watermarks`](KafkaSource::per_partition_watermarks) the
//! source generates watermarks itself, per partition, as Flink's
//! split-aware watermarks do: the subtask's watermark is the minimum over
//! its partitions that are not idle. Every
//! record is emitted once per partition offset: after a restore, offsets
//! below a partition's position (a fetch that was already under way) are
//! dropped.

use super::{SourceContext, decode_entry, encode_entry};
use crate::Result;
use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError as ClientError, RDKafkaErrorCode};
use std::sync::Arc;
use std::time::Duration;

mod assign;
pub(crate) mod close;
pub mod event_time;
pub mod group;
pub mod producers;
mod source;
pub mod txn_recovery;
mod url;
pub mod wire;

pub use assign::partition_owner;
use assign::partitions_of;
pub use close::wait_for_closes;
pub use source::KafkaSourceReader;
pub use url::KafkaUrl;

/// Errors of the Kafka connectors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// A `kafka://` URL could not be understood.
    #[error("invalid Kafka URL '{url}': {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No broker answered in time.
    #[error("cannot reach Kafka broker {brokers}: {reason}")]
    Unreachable {
        /// The bootstrap servers.
        brokers: String,
        /// The client's last error.
        reason: String,
    },
    /// A topic the job reads does not exist.
    #[error("Kafka topic '{topic}' does not exist on {brokers}")]
    NoSuchTopic {
        /// The topic.
        topic: String,
        /// The bootstrap servers.
        brokers: String,
    },
    /// The broker refuses Kafka transactions, which the exactly-once sink
    /// needs.
    #[error(
        "the Kafka broker at {brokers} does not support transactions ({reason}); \
         use the at-least-once delivery guarantee"
    )]
    NoTransactions {
        /// The bootstrap servers.
        brokers: String,
        /// What the client reported.
        reason: String,
    },
    /// The broker did not acknowledge a record the sink sent.
    #[error("Kafka record to '{topic}' not delivered: {reason}")]
    Undelivered {
        /// The topic.
        topic: String,
        /// The client's error.
        reason: String,
    },
    /// A record could not be decoded.
    #[error("record at {topic}-{partition} offset {offset}: {reason}")]
    BadRecord {
        /// Its topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// A transaction a restored checkpoint holds as pre-committed (its
    /// checkpoint completed) could not be committed on recovery.
    #[error("cannot commit the restored Kafka transaction '{transactional_id}': {source}")]
    Recovery {
        /// Its transactional id.
        transactional_id: String,
        /// Why.
        #[source]
        source: txn_recovery::RecoveryError,
    },
    /// No statistics of a transactional producer told its producer id and
    /// epoch in time, which its checkpointed transaction needs.
    #[error("Kafka transaction '{transactional_id}': no producer id and epoch within {timeout:?}")]
    NoProducerId {
        /// The transactional id.
        transactional_id: String,
        /// How long the sink waited.
        timeout: std::time::Duration,
    },
    /// Every transactional id of a sink subtask holds a pre-committed
    /// transaction whose checkpoint has not completed (checkpoints failed
    /// in a row, tolerated): a new transaction on one of them would abort
    /// it. The job restarts from its last completed checkpoint instead.
    #[error(
        "Kafka sink subtask {subtask}: all {ids} of its transactional ids hold transactions          awaiting their checkpoints ({failed} checkpoints in a row did not complete);          restarting from the last completed checkpoint"
    )]
    IdsInUse {
        /// The sink subtask.
        subtask: usize,
        /// How many transactional ids a subtask has.
        ids: u64,
        /// How many checkpoints in a row did not complete.
        failed: u64,
    },
    /// A transaction about to be pre-committed would also commit records
    /// of a fenced attempt left open in a partition (their abort marker
    /// lost by the broker; see [`producers`]). The job restarts, and its
    /// fencing aborts them with the transaction.
    #[error(
        "Kafka transaction '{transactional_id}': partition {partition} holds records of its \
         producer from before its fencing, still open from offset {start} (its first record \
         is at {first}; the broker lost their abort marker); restarting, which aborts them"
    )]
    StaleRecords {
        /// The transactional id.
        transactional_id: String,
        /// The partition.
        partition: i32,
        /// Where the open transaction starts.
        start: i64,
        /// The transaction's first offset in the partition.
        first: i64,
    },
    /// A committed transaction stayed open in some partitions: the broker
    /// lost its commit markers and writing them failed too (see
    /// [`producers::finish_commit`]). The job restarts and commits it
    /// again from its checkpoint.
    #[error(
        "Kafka transaction '{transactional_id}' is committed, but topic {topic} holds it \
         {source}; restarting, which commits it again"
    )]
    CommitUnfinished {
        /// The transactional id.
        transactional_id: String,
        /// The topic.
        topic: String,
        /// Where it stayed open, and why.
        source: producers::Unfinished,
    },
    /// The client failed.
    #[error("Kafka {action}: {source}")]
    Client {
        /// What was being done.
        action: &'static str,
        /// The client's error.
        #[source]
        source: ClientError,
    },
}

impl KafkaError {
    /// Whether a restart may help: a broker that is away, a failed
    /// request; not a bad URL, a missing topic, a broker without
    /// transactions or an undecodable record (the same again).
    pub fn is_retriable(&self) -> bool {
        if let KafkaError::Recovery { source, .. } = self {
            return source.is_retriable();
        }
        !matches!(
            self,
            KafkaError::BadUrl { .. }
                | KafkaError::NoSuchTopic { .. }
                | KafkaError::NoTransactions { .. }
                | KafkaError::BadRecord { .. }
        )
    }

    pub(crate) fn client(action: &'static str) -> impl FnOnce(ClientError) -> KafkaError {
        move |source| KafkaError::Client { action, source }
    }
}

/// The client's own log lines go to `tracing` as warnings and below: a
/// broker that is away is reported once, as the job's error, not as a
/// stream of client log lines on stderr. It also notes that the client
/// lost its brokers (librdkafka reports that only here, and reconnects
/// silently), for the source to check them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Quiet {
    lost_brokers: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Quiet {
    /// Whether the client reported a lost connection since the last call.
    pub(crate) fn take_lost_brokers(&self) -> bool {
        self.lost_brokers
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }
}

/// Forwards one librdkafka log line to `tracing`.
pub(crate) fn log_to_tracing(level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error
        | RDKafkaLogLevel::Warning => tracing::warn!(facility, "librdkafka: {message}"),
        _ => tracing::debug!(facility, "librdkafka: {message}"),
    }
}

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log_to_tracing(level, facility, message);
    }

    fn error(&self, error: ClientError, reason: &str) {
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
        ) {
            self.lost_brokers
                .store(true, std::sync::atomic::Ordering::Release);
        }
        tracing::warn!(%error, "librdkafka: {reason}");
    }
}

impl ConsumerContext for Quiet {}

type Client = BaseConsumer<Quiet>;

/// Where a partition without a checkpointed position starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartingOffsets {
    /// The first offset still in the log.
    Earliest,
    /// The log end at assignment: only records written afterwards.
    Latest,
    /// The first record whose timestamp is at or after this (ms since the
    /// epoch); the log end where there is none.
    Timestamp(i64),
    /// The consumer group's committed offset; the earliest where none.
    Committed,
}

/// Decodes a record's value.
pub type ValueDecoder<T> = Arc<dyn Fn(&[u8]) -> std::result::Result<T, String> + Send + Sync>;

/// How a Kafka source is configured; [`reader`](Self::reader) makes the
/// source of one subtask.
pub struct KafkaSource<T> {
    brokers: String,
    topics: Vec<String>,
    group: String,
    start: StartingOffsets,
    bounded: bool,
    discovery: Option<Duration>,
    timeout: Duration,
    properties: Vec<(String, String)>,
    decode: ValueDecoder<T>,
    watermarks: Option<PartitionWatermarks>,
    only: Option<Arc<std::collections::BTreeSet<(String, i32)>>>,
    group_commit: Option<Arc<group::GroupCommit>>,
    start_at: Option<Arc<std::collections::BTreeMap<(String, i32), i64>>>,
    timestamps: Option<event_time::TimestampOf<T>>,
    emit_watermarks: Option<event_time::Emit<T>>,
    collect_watermarks: Option<event_time::Collect<T>>,
}

/// Per-partition watermarks of a Kafka source (Flink's bounded
/// out-of-orderness per split, with idleness).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionWatermarks {
    /// Each partition's watermark is its highest timestamp minus this,
    /// minus 1 (ms).
    pub out_of_orderness: i64,
    /// A partition without records for this long stops holding the
    /// subtask's watermark back (until it has records again).
    pub idleness: Option<Duration>,
}

impl<T> Clone for KafkaSource<T> {
    fn clone(&self) -> Self {
        KafkaSource {
            brokers: self.brokers.clone(),
            topics: self.topics.clone(),
            group: self.group.clone(),
            start: self.start,
            bounded: self.bounded,
            discovery: self.discovery,
            timeout: self.timeout,
            properties: self.properties.clone(),
            decode: self.decode.clone(),
            watermarks: self.watermarks,
            only: self.only.clone(),
            group_commit: self.group_commit.clone(),
            start_at: self.start_at.clone(),
            timestamps: self.timestamps.clone(),
            emit_watermarks: self.emit_watermarks.clone(),
            collect_watermarks: self.collect_watermarks.clone(),
        }
    }
}

impl KafkaSource<String> {
    /// Record values as UTF-8 text (a value that is not fails the job).
    pub fn lines(brokers: &str, topics: &[&str]) -> Self {
        KafkaSource::new(
            brokers,
            topics,
            Arc::new(|bytes: &[u8]| {
                std::str::from_utf8(bytes)
                    .map(str::to_owned)
                    .map_err(|e| format!("value is not valid UTF-8: {e}"))
            }),
        )
    }
}

impl<T: Send + 'static> KafkaSource<T> {
    /// Reads `topics` from the cluster at `brokers` (`host:port[,…]`),
    /// decoding each record's value with `decode` (a missing value decodes
    /// as empty).
    pub fn new(brokers: &str, topics: &[&str], decode: ValueDecoder<T>) -> Self {
        KafkaSource {
            brokers: brokers.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            group: "floe".into(),
            start: StartingOffsets::Earliest,
            bounded: false,
            discovery: Some(Duration::from_secs(10)),
            timeout: Duration::from_secs(10),
            properties: Vec::new(),
            decode,
            watermarks: None,
            only: None,
            group_commit: None,
            start_at: None,
            timestamps: None,
            emit_watermarks: None,
            collect_watermarks: None,
        }
    }

    /// Takes each record's event time from its decoded value instead of
    /// the Kafka record's timestamp (a value without one has none): the
    /// timestamp assigner of Flink's watermark strategy, in the source.
    pub fn timestamps(mut self, of: event_time::TimestampOf<T>) -> Self {
        self.timestamps = Some(of);
        self
    }

    /// Every `every`, emits after the records read one record per partition
    /// made by `make` with the partition and its watermark (`None`: idle),
    /// for an internal topic that carries them downstream
    /// ([`event_time`]). Needs [`per_partition_watermarks`](Self::per_partition_watermarks);
    /// a partition without a record yet reports nothing until it is idle.
    pub fn watermark_records(
        mut self,
        every: Duration,
        make: event_time::WatermarkRecord<T>,
    ) -> Self {
        self.emit_watermarks = Some(event_time::Emit { every, make });
        self
    }

    /// Reads the watermark records of `upstreams` upstream partitions
    /// (those [`watermark_records`](Self::watermark_records) writes) with
    /// `read`: they are consumed, not emitted, and each partition's
    /// watermark is the minimum over its active upstreams
    /// ([`event_time`]); the subtask's is the minimum over its partitions.
    pub fn upstream_watermarks(
        mut self,
        upstreams: usize,
        read: event_time::ReadWatermark<T>,
    ) -> Self {
        self.collect_watermarks = Some(event_time::Collect { upstreams, read });
        self
    }

    /// Generate watermarks in the source, per partition: the subtask's
    /// watermark is the minimum over its partitions that are neither idle
    /// nor finished, each partition's being its highest record timestamp
    /// minus `out_of_orderness` minus 1; a partition without a record yet
    /// holds it back until it is idle.
    pub fn per_partition_watermarks(
        mut self,
        out_of_orderness: i64,
        idleness: Option<Duration>,
    ) -> Self {
        self.watermarks = Some(PartitionWatermarks {
            out_of_orderness,
            idleness,
        });
        self
    }

    /// Where partitions without a checkpointed position start (default:
    /// earliest).
    pub fn starting_offsets(mut self, start: StartingOffsets) -> Self {
        self.start = start;
        self
    }

    /// The consumer group offsets are committed to (default `floe`).
    pub fn group_id(mut self, group: &str) -> Self {
        self.group = group.to_string();
        self
    }

    /// Reads exactly `partitions` of its topics, as (topic, partition): a
    /// group member's assignment. Discovery is off; the partitions are
    /// dealt over the subtasks by the usual rule.
    pub fn partitions(mut self, partitions: &[(String, i32)]) -> Self {
        self.only = Some(Arc::new(partitions.iter().cloned().collect()));
        self.discovery = None;
        self
    }

    /// Group mode: the positions at each checkpoint go to `commit`, whose
    /// sinks commit them in their transactions; the source commits none
    /// itself.
    pub fn group_commit(mut self, commit: Arc<group::GroupCommit>) -> Self {
        self.group_commit = Some(commit);
        self
    }

    /// At a fresh start, each listed partition starts at its given next
    /// offset, as ((topic, partition), offset), instead of the configured
    /// start: positions kept outside Kafka (group mode's PostgreSQL
    /// output keeps them with its rows).
    pub fn start_at(mut self, offsets: &[((String, i32), i64)]) -> Self {
        self.start_at = Some(Arc::new(offsets.iter().cloned().collect()));
        self
    }

    /// Stop at the end offsets seen when each partition is assigned.
    pub fn bounded(mut self, yes: bool) -> Self {
        self.bounded = yes;
        self
    }

    /// How often an unbounded source looks for new partitions (`None`:
    /// never; default 10 s).
    pub fn discovery_interval(mut self, every: Option<Duration>) -> Self {
        self.discovery = every;
        self
    }

    /// How long metadata and offset requests may take (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A librdkafka consumer property, set last (overrides floe's own).
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.properties.push((key.to_string(), value.to_string()));
        self
    }

    /// Checks that the brokers answer and the topics exist, so a job fails
    /// before it starts rather than in its first subtask.
    pub fn check(&self) -> std::result::Result<(), KafkaError> {
        let consumer = self.consumer()?;
        for topic in &self.topics {
            partitions_of(&consumer, &self.brokers, topic, self.timeout)?;
        }
        Ok(())
    }

    fn consumer(&self) -> std::result::Result<Client, KafkaError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // A checkpointed offset the log no longer has: read what is left.
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", "read_committed")
            .set("log_level", "4");
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config
            .create_with_context(Quiet::default())
            .map_err(KafkaError::client("consumer"))
    }

    /// The source of the subtask `ctx` describes.
    pub fn reader(&self, ctx: &SourceContext) -> Result<KafkaSourceReader<T>> {
        Ok(KafkaSourceReader::new(self.consumer()?, self.clone(), ctx))
    }
}
