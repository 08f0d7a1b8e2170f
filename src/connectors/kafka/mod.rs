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
//!   partitions it reads as union state, so that after a restore every
//!   subtask knows all partitions already being read and only truly new ones
//!   are assigned by the rule above.
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

use super::{SourceContext, SourceFunction, SourcePoll};
use crate::Result;
use floe_actors::element::Record;
use floe_actors::ids::CheckpointId;
use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError as ClientError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
/// stream of client log lines on stderr.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Quiet;

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
        }
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
            .create_with_context(Quiet)
            .map_err(KafkaError::client("consumer"))
    }

    /// The source of the subtask `ctx` describes.
    pub fn reader(&self, ctx: &SourceContext) -> Result<KafkaSourceReader<T>> {
        Ok(KafkaSourceReader {
            consumer: self.consumer()?,
            config: self.clone(),
            subtask: ctx.subtask.0 as usize,
            parallelism: ctx.parallelism,
            parts: Vec::new(),
            known: BTreeSet::new(),
            restored: None,
            started: false,
            started_once: false,
            initial: false,
            next_discovery: None,
            positions: VecDeque::new(),
        })
    }
}

/// The subtask of `parallelism` that owns a new partition: Flink's
/// `KafkaSourceEnumerator.getSplitOwner`.
pub fn partition_owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let hash = topic
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    let p = parallelism as i64;
    let start = ((hash.wrapping_mul(31) & 0x7FFF_FFFF) as i64) % p;
    ((start + partition as i64) % p) as usize
}

/// The number of partitions of `topic`.
fn partitions_of(
    consumer: &Client,
    brokers: &str,
    topic: &str,
    timeout: Duration,
) -> std::result::Result<i32, KafkaError> {
    let metadata =
        consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| KafkaError::Unreachable {
                brokers: brokers.to_string(),
                reason: e.to_string(),
            })?;
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().len() as i32)
        }
        _ => Err(KafkaError::NoSuchTopic {
            topic: topic.to_string(),
            brokers: brokers.to_string(),
        }),
    }
}

/// One partition a subtask reads.
struct Part {
    topic: String,
    partition: i32,
    /// The offset of the next record to emit.
    next: i64,
    /// Bounded: the offset to stop at.
    end: Option<i64>,
    /// The highest record timestamp seen.
    max_timestamp: Option<i64>,
    /// When the partition last had a record (or was assigned).
    active: Instant,
}

impl Part {
    fn done(&self) -> bool {
        self.end.is_some_and(|end| self.next >= end)
    }
}

/// A split entry: one partition's position.
type Position = (String, i32, i64);

/// The source of one subtask (see the module documentation).
pub struct KafkaSourceReader<T> {
    config: KafkaSource<T>,
    consumer: Client,
    subtask: usize,
    parallelism: usize,
    parts: Vec<Part>,
    /// Every partition some subtask reads (own ones and restored union
    /// state): never assigned again as new.
    known: BTreeSet<(String, i32)>,
    restored: Option<Vec<Position>>,
    started: bool,
    /// The first discovery ran.
    started_once: bool,
    /// The current discovery is the first of a fresh start.
    initial: bool,
    next_discovery: Option<Instant>,
    /// Positions taken at checkpoints not yet complete, oldest first.
    positions: VecDeque<(CheckpointId, Vec<Position>)>,
}

impl<T> KafkaSourceReader<T> {
    /// The partitions this subtask reads and their next offsets.
    pub fn positions(&self) -> Vec<(String, i32, i64)> {
        self.parts
            .iter()
            .map(|p| (p.topic.clone(), p.partition, p.next))
            .collect()
    }
}

impl<T: Send + 'static> KafkaSourceReader<T> {
    /// Assigns the restored partitions, or this subtask's share of the
    /// topics' partitions; once, before the first poll.
    fn start(&mut self) -> Result<()> {
        self.started = true;
        if let Some(restored) = self.restored.take() {
            let mut new = Vec::new();
            for (topic, partition, next) in restored {
                self.known.insert((topic.clone(), partition));
                new.push(Part {
                    topic,
                    partition,
                    next,
                    end: None,
                    max_timestamp: None,
                    active: Instant::now(),
                });
            }
            if self.config.bounded {
                self.set_ends(&mut new)?;
            }
            self.parts.extend(new);
            self.assign()?;
        }
        self.discover()?;
        if let Some(every) = self.config.discovery.filter(|_| !self.config.bounded) {
            self.next_discovery = Some(Instant::now() + every);
        }
        Ok(())
    }

    /// Adds the partitions this subtask owns that nobody reads yet.
    fn discover(&mut self) -> Result<()> {
        let mut new = Vec::new();
        // Only the first discovery of a fresh start uses the configured
        // start; a restore or a later discovery finds new partitions.
        if !self.started_once {
            self.started_once = true;
            self.initial = self.known.is_empty();
        } else {
            self.initial = false;
        }
        for topic in self.config.topics.clone() {
            let count = match partitions_of(
                &self.consumer,
                &self.config.brokers,
                &topic,
                self.config.timeout,
            ) {
                Ok(count) => count,
                // A listed topic may be created later: a later discovery
                // finds it ([`KafkaSource::check`] insists on it at start).
                Err(KafkaError::NoSuchTopic { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            for partition in 0..count {
                if partition_owner(&topic, partition, self.parallelism) == self.subtask
                    && !self.known.contains(&(topic.clone(), partition))
                {
                    self.known.insert((topic.clone(), partition));
                    new.push(Part {
                        topic: topic.clone(),
                        partition,
                        next: 0,
                        end: None,
                        max_timestamp: None,
                        active: Instant::now(),
                    });
                }
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        // At the first assignment the configured start applies; a
        // partition that appears later is new and read from its start.
        let start = if self.initial {
            self.config.start
        } else {
            StartingOffsets::Earliest
        };
        self.resolve(&mut new, start)?;
        if self.config.bounded {
            self.set_ends(&mut new)?;
        }
        self.parts.extend(new);
        self.assign()
    }

    /// Turns `start` into concrete offsets for `parts`.
    fn resolve(&self, parts: &mut [Part], start: StartingOffsets) -> Result<()> {
        let timeout = self.config.timeout;
        let committed = match start {
            StartingOffsets::Committed => {
                let mut list = TopicPartitionList::new();
                for p in parts.iter() {
                    list.add_partition(&p.topic, p.partition);
                }
                Some(
                    self.consumer
                        .committed_offsets(list, timeout)
                        .map_err(KafkaError::client("committed offsets"))?,
                )
            }
            _ => None,
        };
        for p in parts.iter_mut() {
            let (low, high) = self
                .consumer
                .fetch_watermarks(&p.topic, p.partition, timeout)
                .map_err(|e| KafkaError::Unreachable {
                    brokers: self.config.brokers.clone(),
                    reason: e.to_string(),
                })?;
            p.next = match start {
                StartingOffsets::Earliest => low,
                StartingOffsets::Latest => high,
                StartingOffsets::Timestamp(ts) => {
                    let mut list = TopicPartitionList::new();
                    list.add_partition_offset(&p.topic, p.partition, Offset::Offset(ts))
                        .map_err(KafkaError::client("offsets for times"))?;
                    let found = self
                        .consumer
                        .offsets_for_times(list, timeout)
                        .map_err(KafkaError::client("offsets for times"))?;
                    match found
                        .find_partition(&p.topic, p.partition)
                        .map(|e| e.offset())
                    {
                        Some(Offset::Offset(o)) if o >= 0 => o,
                        _ => high,
                    }
                }
                StartingOffsets::Committed => match committed
                    .as_ref()
                    .and_then(|c| c.find_partition(&p.topic, p.partition))
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) if o >= 0 => o,
                    _ => low,
                },
            };
        }
        Ok(())
    }

    /// Bounded: each partition stops at its current log end.
    fn set_ends(&self, parts: &mut [Part]) -> Result<()> {
        for p in parts.iter_mut() {
            let (_, high) = self
                .consumer
                .fetch_watermarks(&p.topic, p.partition, self.config.timeout)
                .map_err(|e| KafkaError::Unreachable {
                    brokers: self.config.brokers.clone(),
                    reason: e.to_string(),
                })?;
            p.end = Some(high);
        }
        Ok(())
    }

    /// Hands the unfinished partitions and their positions to the client.
    fn assign(&mut self) -> Result<()> {
        let mut list = TopicPartitionList::new();
        for p in self.parts.iter().filter(|p| !p.done()) {
            list.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.next))
                .map_err(KafkaError::client("assign"))?;
        }
        self.consumer
            .assign(&list)
            .map_err(KafkaError::client("assign"))?;
        Ok(())
    }
}

/// Errors the client recovers from itself (it reconnects): the source waits.
fn transient(e: &ClientError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::NetworkException
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::PartitionEOF
        )
    )
}

/// How long an idle source waits before polling again.
const IDLE_WAIT: Duration = Duration::from_millis(5);

impl<T: Send + 'static> SourceFunction<T> for KafkaSourceReader<T> {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        if !self.started {
            self.start()?;
        }
        if let Some(at) = self.next_discovery
            && Instant::now() >= at
        {
            self.discover()?;
            self.next_discovery = self.config.discovery.map(|d| Instant::now() + d);
        }
        if self.config.bounded && self.parts.iter().all(Part::done) {
            return Ok(SourcePoll::Finished);
        }
        while out.len() < max {
            let message = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Err(e)) if transient(&e) => {
                    tracing::debug!(error = %e, "Kafka source: transient error");
                    break;
                }
                Some(Err(e)) => return Err(KafkaError::client("poll")(e).into()),
                Some(Ok(m)) => m,
            };
            let (topic, partition, offset) =
                (message.topic(), message.partition(), message.offset());
            let Some(part) = self
                .parts
                .iter_mut()
                .find(|p| p.partition == partition && p.topic == topic)
            else {
                continue;
            };
            if offset < part.next || part.done() {
                continue;
            }
            if part.end.is_some_and(|end| offset >= end) {
                part.next = part.end.unwrap_or(offset);
                continue;
            }
            part.next = offset + 1;
            let value =
                (self.config.decode)(message.payload().unwrap_or_default()).map_err(|reason| {
                    KafkaError::BadRecord {
                        topic: topic.to_string(),
                        partition,
                        offset,
                        reason,
                    }
                })?;
            let timestamp = message.timestamp().to_millis();
            if self.config.watermarks.is_some() {
                part.active = Instant::now();
                if let Some(ts) = timestamp {
                    part.max_timestamp = Some(part.max_timestamp.map_or(ts, |m| m.max(ts)));
                }
            }
            out.push(Record { value, timestamp });
        }
        if self.config.bounded && self.parts.iter().all(Part::done) {
            return Ok(if out.is_empty() {
                SourcePoll::Finished
            } else {
                SourcePoll::Ready
            });
        }
        Ok(if out.is_empty() {
            SourcePoll::Wait(IDLE_WAIT)
        } else {
            SourcePoll::Ready
        })
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        self.parts
            .iter()
            .map(|p| super::encode_entry(&(p.topic.as_str(), p.partition, p.next)))
            .collect()
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        let positions = entries
            .iter()
            .map(|e| super::decode_entry::<Position>(e))
            .collect::<Result<Vec<_>>>()?;
        self.restored = Some(positions);
        Ok(())
    }

    fn snapshot_union_state(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>> {
        let positions = self.positions();
        // Committed to the group when the checkpoint completes.
        self.positions.push_back((checkpoint, positions));
        self.parts
            .iter()
            .map(|p| super::encode_entry(&(p.topic.as_str(), p.partition)))
            .collect()
    }

    fn restore_union_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        for e in &entries {
            self.known.insert(super::decode_entry::<(String, i32)>(e)?);
        }
        Ok(())
    }

    fn watermark(&mut self) -> Option<floe_actors::element::Timestamp> {
        let config = self.config.watermarks?;
        let now = Instant::now();
        let mut min: Option<i64> = None;
        for p in self.parts.iter().filter(|p| !p.done()) {
            if config
                .idleness
                .is_some_and(|idle| now.duration_since(p.active) >= idle)
            {
                continue;
            }
            // A partition without records yet holds the watermark back.
            let w = p
                .max_timestamp?
                .saturating_sub(config.out_of_orderness)
                .saturating_sub(1);
            min = Some(min.map_or(w, |m| m.min(w)));
        }
        min
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let mut latest = None;
        while self
            .positions
            .front()
            .is_some_and(|(c, _)| *c <= checkpoint)
        {
            latest = self.positions.pop_front();
        }
        let Some((_, positions)) = latest else {
            return Ok(());
        };
        let mut list = TopicPartitionList::new();
        for (topic, partition, next) in &positions {
            list.add_partition_offset(topic, *partition, Offset::Offset(*next))
                .map_err(KafkaError::client("commit"))?;
        }
        // For monitoring only: a failed commit does not fail the job.
        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
            tracing::warn!(error = %e, "Kafka source: cannot commit offsets to the group");
        }
        Ok(())
    }
}

/// The parts of a `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?k=v&…]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaUrl {
    /// The bootstrap servers, `host:port[,…]`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The query's `key=value` pairs, in order.
    pub params: Vec<(String, String)>,
}

impl KafkaUrl {
    /// Parses `url`; `None` when it does not start with `kafka://`.
    pub fn parse(url: &str) -> Option<std::result::Result<KafkaUrl, KafkaError>> {
        let rest = url.strip_prefix("kafka://")?;
        let bad = |reason: &str| KafkaError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        Some((|| {
            let (path, query) = match rest.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (rest, None),
            };
            let (brokers, topic) = path
                .split_once('/')
                .ok_or_else(|| bad("expected kafka://HOST:PORT/TOPIC"))?;
            if brokers.is_empty() {
                return Err(bad("no broker address"));
            }
            for b in brokers.split(',') {
                let (host, port) = b
                    .rsplit_once(':')
                    .ok_or_else(|| bad("a broker address needs a port (HOST:PORT)"))?;
                if host.is_empty() || port.parse::<u16>().is_err() {
                    return Err(bad("a broker address needs a port (HOST:PORT)"));
                }
            }
            if topic.is_empty() || topic.contains('/') {
                return Err(bad("expected one topic after the address"));
            }
            if !topic
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(bad(
                    "a topic name has only letters, digits, '.', '_' and '-'",
                ));
            }
            let mut params = Vec::new();
            for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| bad("query parameters are key=value"))?;
                params.push((k.to_string(), v.to_string()));
            }
            Ok(KafkaUrl {
                brokers: brokers.to_string(),
                topic: topic.to_string(),
                params,
            })
        })())
    }

    /// The value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_follow_flinks_rule() {
        // Java: "words".hashCode() == 113318569 (119, 111, 114, 100, 115
        // folded as h * 31 + c, by hand).
        let hash = "words"
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
        assert_eq!(hash, 113_318_569);
        let start = ((113_318_569i32.wrapping_mul(31) & 0x7FFF_FFFF) as i64 % 3) as usize;
        for partition in 0..8 {
            assert_eq!(
                partition_owner("words", partition, 3),
                (start + partition as usize) % 3
            );
        }
        // Consecutive partitions go to consecutive subtasks: 4 over 2 is 2 each.
        let mut per = [0; 2];
        for partition in 0..4 {
            per[partition_owner("t", partition, 2)] += 1;
        }
        assert_eq!(per, [2, 2]);
    }

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        let u = KafkaUrl::parse("kafka://127.0.0.1:9092/words?start=latest")
            .expect("a kafka URL")
            .expect("valid");
        assert_eq!(u.brokers, "127.0.0.1:9092");
        assert_eq!(u.topic, "words");
        assert_eq!(u.param("start"), Some("latest"));
        assert!(KafkaUrl::parse("words.txt").is_none());
        for bad in [
            "kafka://",
            "kafka://host/words",
            "kafka://host:x/words",
            "kafka://host:1/",
            "kafka://host:1/a/b",
            "kafka://host:1/t?start",
        ] {
            let e = KafkaUrl::parse(bad).expect("a kafka URL").expect_err(bad);
            assert!(e.to_string().starts_with("invalid Kafka URL"), "{e}");
        }
    }
}
