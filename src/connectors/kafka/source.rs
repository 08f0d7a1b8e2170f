//! The reader of one source subtask: its partitions, their positions and
//! watermarks, fetching, discovery, checkpointing and offset commits.

use super::assign::{partition_owner, partitions_of};
use super::event_time::{Heard, Upstreams};
use super::{Client, KafkaError, KafkaSource, StartingOffsets};
use crate::Result;
use crate::connectors::{SourceContext, SourceFunction, SourcePoll};
use floe_actors::element::Record;
use floe_actors::ids::CheckpointId;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError as ClientError;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

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
    /// What its upstreams reported (an internal topic's partition).
    upstreams: Upstreams,
}

impl Part {
    fn done(&self) -> bool {
        self.end.is_some_and(|end| self.next >= end)
    }
}

/// The subtask's client. Present until the reader is dropped, which
/// closes it (see the reader's `Drop`).
struct OwnedClient(Option<Client>);

impl std::ops::Deref for OwnedClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.0
            .as_ref()
            .expect("the consumer is taken only when the reader drops")
    }
}

/// A split entry: one partition's position.
type Position = (String, i32, i64);

/// The source of one subtask (see the module documentation).
pub struct KafkaSourceReader<T> {
    config: KafkaSource<T>,
    consumer: OwnedClient,
    subtask: usize,
    parallelism: usize,
    parts: Vec<Part>,
    /// Every partition that existed at this subtask's discoveries or in the
    /// restored union state (each had an owner reading it): never assigned
    /// again as new.
    known: BTreeSet<(String, i32)>,
    restored: Option<Vec<Position>>,
    /// The restored union state was empty: every subtask had finished (or
    /// no partition existed) when the checkpoint was taken.
    restored_none_known: bool,
    started: bool,
    /// The first discovery ran.
    started_once: bool,
    /// The current discovery is the first of a fresh start.
    initial: bool,
    next_discovery: Option<Instant>,
    /// Positions taken at checkpoints not yet complete, oldest first.
    positions: VecDeque<(CheckpointId, Vec<Position>)>,
    /// Since when the client has lost its brokers and no record came
    /// (cleared by a record or a broker's answer).
    lost_since: Option<Instant>,
    /// A record was emitted (group mode reports the first).
    emitted: bool,
    /// When to emit the next watermark records.
    next_watermark_records: Option<Instant>,
}

impl<T> KafkaSourceReader<T> {
    /// The reader of the subtask `ctx` describes, on `consumer`, before its
    /// first poll.
    pub(super) fn new(consumer: Client, config: KafkaSource<T>, ctx: &SourceContext) -> Self {
        KafkaSourceReader {
            consumer: OwnedClient(Some(consumer)),
            config,
            subtask: ctx.subtask.0 as usize,
            parallelism: ctx.parallelism,
            parts: Vec::new(),
            known: BTreeSet::new(),
            restored: None,
            restored_none_known: false,
            started: false,
            started_once: false,
            initial: false,
            next_discovery: None,
            positions: VecDeque::new(),
            lost_since: None,
            emitted: false,
            next_watermark_records: None,
        }
    }

    /// The partitions this subtask reads and their next offsets.
    ///
    /// Before the first poll after a restore these are the restored
    /// positions: a checkpoint taken then (the subtask may be backpressured
    /// from the start) must carry them on, or the next restore would read
    /// the partitions again from the configured start.
    pub fn positions(&self) -> Vec<(String, i32, i64)> {
        let mut out: Vec<Position> = self
            .parts
            .iter()
            .map(|p| (p.topic.clone(), p.partition, p.next))
            .collect();
        out.extend(self.restored.iter().flatten().cloned());
        out
    }
}

impl<T: Send + 'static> KafkaSourceReader<T> {
    /// Assigns the restored partitions, or this subtask's share of the
    /// topics' partitions; once, before the first poll.
    fn start(&mut self) -> Result<()> {
        self.started = true;
        // Bounded, a restored subtask that nobody's union state mentions
        // had finished with all the others (a finished subtask is restored
        // with empty state): it stays finished rather than reading its
        // partitions again from the start.
        let finished = self.config.bounded && self.restored_none_known;
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
                    upstreams: Upstreams::default(),
                });
            }
            if self.config.bounded {
                self.set_ends(&mut new)?;
            }
            self.parts.extend(new);
            self.assign()?;
        }
        if finished {
            return Ok(());
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
                // Every partition is recorded (union state), the owner's
                // too: should its owner finish, a restore must not take the
                // partition for a new one.
                let fresh = self.known.insert((topic.clone(), partition));
                let listed = self
                    .config
                    .only
                    .as_ref()
                    .is_none_or(|only| only.contains(&(topic.clone(), partition)));
                if fresh
                    && listed
                    && partition_owner(&topic, partition, self.parallelism) == self.subtask
                {
                    new.push(Part {
                        topic: topic.clone(),
                        partition,
                        next: 0,
                        end: None,
                        max_timestamp: None,
                        active: Instant::now(),
                        upstreams: Upstreams::default(),
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
        if let Some(at) = self.config.start_at.as_ref().filter(|_| self.initial) {
            for p in new.iter_mut() {
                if let Some(next) = at.get(&(p.topic.clone(), p.partition)) {
                    p.next = *next;
                }
            }
        }
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

impl<T> KafkaSourceReader<T> {
    /// Fails the subtask when the client lost its brokers and none has
    /// answered for the request timeout: librdkafka would reconnect forever
    /// while the job, reading nothing, looked healthy. The failure restarts
    /// the job (a `restart` line), whose bounded restarts end it with one
    /// error line should the brokers stay away.
    fn check_brokers(&mut self) -> Result<()> {
        if self.consumer.context().take_lost_brokers() && self.lost_since.is_none() {
            self.lost_since = Some(Instant::now());
        }
        let Some(since) = self.lost_since else {
            return Ok(());
        };
        if since.elapsed() < self.config.timeout {
            return Ok(());
        }
        // A metadata request tells a broker that is back (the client
        // reconnects without saying so) from one that is still away.
        match self.consumer.fetch_metadata(None, self.config.timeout) {
            Ok(_) => {
                self.lost_since = None;
                Ok(())
            }
            Err(e) => Err(KafkaError::Unreachable {
                brokers: self.config.brokers.clone(),
                reason: format!(
                    "connection lost, no answer for {} s: {e}",
                    since.elapsed().as_secs()
                ),
            }
            .into()),
        }
    }
}

impl<T> KafkaSourceReader<T> {
    /// Each partition's watermark (`None`: idle) as a record, every
    /// interval of [`KafkaSource::watermark_records`]: after the records of
    /// this poll, so each follows the records it covers.
    fn emit_watermark_records(&mut self, out: &mut Vec<Record<T>>) {
        let (Some(emit), Some(config)) = (&self.config.emit_watermarks, self.config.watermarks)
        else {
            return;
        };
        let now = Instant::now();
        if self.next_watermark_records.is_some_and(|at| now < at) {
            return;
        }
        self.next_watermark_records = Some(now + emit.every);
        for p in self.parts.iter().filter(|p| !p.done()) {
            let idle = config
                .idleness
                .is_some_and(|idle| now.duration_since(p.active) >= idle);
            let watermark = match p.max_timestamp {
                _ if idle => None,
                // Not idle and nothing read yet: nothing to say.
                None => continue,
                Some(max) => Some(
                    max.saturating_sub(config.out_of_orderness)
                        .saturating_sub(1),
                ),
            };
            out.push(Record {
                value: (emit.make)(p.partition, watermark),
                timestamp: None,
            });
        }
    }
}

impl<T> Drop for KafkaSourceReader<T> {
    /// Closes the client on a thread of its own (see [`super::close`]):
    /// librdkafka's consumer close waits for the group coordinator without
    /// a deadline, and whether the broker is still there is not known here
    /// (the reader may not have noticed it gone).
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.0.take() {
            super::close::close_in_background(
                "Kafka source's consumer",
                consumer,
                super::close::CLOSE_DEADLINE,
            );
        }
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
        self.check_brokers()?;
        while out.len() < max {
            let message = match self.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Err(e)) if transient(&e) => {
                    tracing::debug!(error = %e, "Kafka source: transient error");
                    break;
                }
                Some(Err(e)) => return Err(KafkaError::client("poll")(e).into()),
                Some(Ok(m)) => {
                    self.lost_since = None;
                    m
                }
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
            if let Some(collect) = &self.config.collect_watermarks
                && let Some((upstream, watermark)) = (collect.read)(&value)
            {
                part.upstreams.report(upstream, watermark);
                continue;
            }
            let timestamp = match &self.config.timestamps {
                Some(of) => of(&value),
                None => message.timestamp().to_millis(),
            };
            if self.config.watermarks.is_some() {
                part.active = Instant::now();
                if let Some(ts) = timestamp {
                    part.max_timestamp = Some(part.max_timestamp.map_or(ts, |m| m.max(ts)));
                }
            }
            out.push(Record { value, timestamp });
        }
        if !self.emitted && !out.is_empty() {
            self.emitted = true;
            if let Some(group) = &self.config.group_commit {
                group.record_emitted();
            }
        }
        self.emit_watermark_records(out);
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
        if !self.started && self.restored.is_none() {
            // A checkpoint before the first poll of a fresh start: assign
            // now, so that the state says which partitions exist and where
            // they start (empty state means "finished" to a restore).
            self.start()?;
        }
        self.positions()
            .iter()
            .map(|(topic, partition, next)| {
                super::encode_entry(&(topic.as_str(), *partition, *next))
            })
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
        let mut known = self.known.clone();
        known.extend(positions.iter().map(|(t, p, _)| (t.clone(), *p)));
        let union = known
            .iter()
            .map(|(topic, partition)| super::encode_entry(&(topic.as_str(), *partition)))
            .collect();
        match &self.config.group_commit {
            // Committed by the group's transactions.
            Some(group) => group.record(checkpoint, &positions),
            // Committed to the group when the checkpoint completes.
            None => self.positions.push_back((checkpoint, positions)),
        }
        union
    }

    fn restore_union_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        self.restored_none_known = entries.is_empty();
        for e in &entries {
            self.known.insert(super::decode_entry::<(String, i32)>(e)?);
        }
        Ok(())
    }

    fn watermark(&mut self) -> Option<floe_actors::element::Timestamp> {
        if let Some(collect) = &self.config.collect_watermarks {
            let mut min: Option<i64> = None;
            for p in &self.parts {
                match p.upstreams.watermark(collect.upstreams) {
                    Heard::Holding => return None,
                    Heard::Idle => {}
                    Heard::At(w) => min = Some(min.map_or(w, |m| m.min(w))),
                }
            }
            return min;
        }
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
