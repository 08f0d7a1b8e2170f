//! A Kafka sink with the delivery guarantees of Flink's `KafkaSink` (cargo
//! feature `kafka`).
//!
//! - **At least once** ([`KafkaSink`] as a plain sink): records are sent as
//!   they come; a checkpoint barrier flushes the producer and fails the
//!   checkpoint on any undelivered record, so every record before a
//!   completed checkpoint is in the topic. A restore replays what came
//!   after it: duplicates, never losses.
//! - **Exactly once** ([`KafkaSink::exactly_once`], a
//!   [`TwoPhaseCommitSink`]): each checkpoint interval writes into its own
//!   Kafka transaction; pre-commit flushes it, the checkpoint's completion
//!   commits it (`read_committed` consumers see it then). Transactional ids
//!   are `PREFIX-SUBTASK-N`, derived from the job's prefix, the subtask and
//!   a counter; a subtask that starts (fresh or restored) first runs
//!   `InitProducerId` on each id its predecessor may have left open, which
//!   fences the previous attempt's producers and aborts their open
//!   transactions, as Flink's `KafkaSink` does on recovery.
//!
//!   A pre-committed transaction is checkpointed with its producer id and
//!   epoch (read from librdkafka's statistics, `eos.producer_id` /
//!   `eos.producer_epoch`). librdkafka cannot resume another producer's
//!   transaction (Flink does it by reflection into the Java client), so on
//!   recovery each subtask commits the restored transactions of the ids it
//!   is about to fence with an `EndTxn` of its own
//!   ([`txn_recovery`](super::kafka::txn_recovery)), before it initialises
//!   them: a transaction whose checkpoint completed but whose process died
//!   before committing it (a `kill -9`, a restart before the completion
//!   reached the sink) is committed, not lost. A checkpoint written before
//!   the producer ids were kept restores as before: its transactions are
//!   aborted by the fencing, with a warning.

use super::kafka::KafkaError;
use super::kafka::close::{CLOSE_DEADLINE, close_in_background};
use super::kafka::group::GroupCommit;
use super::kafka::txn_recovery::{self, CoordinatorClient, Ended, ProducerIdentity};
use super::two_phase::{Recovery, TwoPhaseCommitSink};
use crate::Result;
use crate::operators::sink::{SinkContext, SinkFunction};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError as ClientError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

/// Writes a record's key and value into the two buffers (cleared before;
/// an empty key is sent as none).
pub type RecordSerializer<T> = Arc<dyn Fn(&T, &mut Vec<u8>, &mut Vec<u8>) + Send + Sync>;

/// Picks a record's partition.
pub type RecordPartitioner<T> = Arc<dyn Fn(&T) -> i32 + Send + Sync>;

/// Group mode: the offsets of these topics commit in the sink's
/// transactions.
type GroupOffsets = (Arc<GroupCommit>, Vec<String>);
/// Whether a record is a tombstone (its key, no value: an upsert's delete).
pub type TombstoneTest<T> = Arc<dyn Fn(&T) -> bool + Send + Sync>;

type Client = BaseProducer<Deliveries>;

/// A Kafka sink; one instance per subtask is cloned from it.
pub struct KafkaSink<T> {
    brokers: String,
    topic: String,
    serialize: RecordSerializer<T>,
    partition: Option<RecordPartitioner<T>>,
    group: Option<GroupOffsets>,
    tombstone: Option<TombstoneTest<T>>,
    properties: Vec<(String, String)>,
    prefix: String,
    timeout: Duration,
    /// Exactly-once: the topic's partition count, read in `open`.
    partitions: usize,
    /// At-least-once: the producer, made in `open`.
    producer: Option<(Client, Deliveries)>,
    /// Exactly-once: the open transactions' producers, by transactional id.
    open: HashMap<String, (Client, Deliveries)>,
    subtask: usize,
    next_txn: u64,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl<T> Clone for KafkaSink<T> {
    fn clone(&self) -> Self {
        KafkaSink {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            serialize: self.serialize.clone(),
            partition: self.partition.clone(),
            group: self.group.clone(),
            tombstone: self.tombstone.clone(),
            properties: self.properties.clone(),
            prefix: self.prefix.clone(),
            timeout: self.timeout,
            partitions: self.partitions,
            producer: None,
            open: HashMap::new(),
            subtask: 0,
            next_txn: 0,
            key: Vec::new(),
            value: Vec::new(),
        }
    }
}

impl<T: std::fmt::Display> KafkaSink<T> {
    /// Each record's `Display` text as the value; the key is the text up to
    /// its first comma (the word of a `word,count` line), so the updates of
    /// one key go to one partition in order.
    pub fn lines(brokers: &str, topic: &str) -> Self {
        KafkaSink::new(
            brokers,
            topic,
            Arc::new(|v: &T, key: &mut Vec<u8>, value: &mut Vec<u8>| {
                use std::io::Write;
                // Writing into a Vec cannot fail.
                let _ = write!(value, "{v}");
                if let Some(comma) = value.iter().position(|b| *b == b',') {
                    key.extend_from_slice(&value[..comma]);
                }
            }),
        )
    }
}

impl<T> KafkaSink<T> {
    /// Writes into `topic` of the cluster at `brokers`.
    pub fn new(brokers: &str, topic: &str, serialize: RecordSerializer<T>) -> Self {
        KafkaSink {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            serialize,
            partition: None,
            group: None,
            tombstone: None,
            properties: Vec::new(),
            prefix: format!("floe-{topic}"),
            timeout: Duration::from_secs(30),
            partitions: 0,
            producer: None,
            open: HashMap::new(),
            subtask: 0,
            next_txn: 0,
            key: Vec::new(),
            value: Vec::new(),
        }
    }

    /// The prefix of the exactly-once sink's transactional ids (default
    /// `floe-TOPIC`): unique per job and sink, the same across its restarts.
    pub fn transactional_id_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// A librdkafka producer property, set last (overrides floe's own).
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.properties.push((key.to_string(), value.to_string()));
        self
    }

    /// Sends each record to the partition `partition` picks (default: the
    /// client's partitioner, by key).
    pub fn partitioner(mut self, partition: RecordPartitioner<T>) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Group mode, exactly-once: each transaction also commits the offsets
    /// of `topics` that `commit` recorded at its checkpoint, with the
    /// group's metadata ([`GroupCommit`]).
    pub fn group_offsets(mut self, commit: Arc<GroupCommit>, topics: &[&str]) -> Self {
        self.group = Some((commit, topics.iter().map(|t| t.to_string()).collect()));
        self
    }

    /// Records for which `test` holds are sent as tombstones (no value).
    pub fn tombstones(mut self, test: TombstoneTest<T>) -> Self {
        self.tombstone = Some(test);
        self
    }

    /// How long a flush or a transaction step may take (default 30 s);
    /// the start's metadata check waits the shorter of it and 10 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// This sink as the exactly-once, transactional sink.
    pub fn exactly_once(self) -> KafkaTransactionalSink<T> {
        KafkaTransactionalSink { sink: self }
    }

    /// Checks that the brokers answer and the topic exists.
    pub fn check(&self) -> std::result::Result<(), KafkaError> {
        let (producer, _) = self.producer(None)?;
        // A metadata answer takes milliseconds: 10 s at most, less when
        // the request timeout is shorter (a job that must notice a broker
        // gone soon).
        let metadata = producer
            .client()
            .fetch_metadata(Some(&self.topic), self.timeout.min(Duration::from_secs(10)))
            .map_err(|e| KafkaError::Unreachable {
                brokers: self.brokers.clone(),
                reason: e.to_string(),
            })?;
        match metadata.topics().iter().find(|t| t.name() == self.topic) {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => Ok(()),
            _ => Err(KafkaError::NoSuchTopic {
                topic: self.topic.clone(),
                brokers: self.brokers.clone(),
            }),
        }
    }

    /// Checks that the brokers can run this sink's transactions (the
    /// exactly-once sink needs them): initialises a producer on the id
    /// `PREFIX-probe-PID-N` (unique: processes that start together do not
    /// fence each other) and commits a transaction holding only an offset
    /// of the group `PREFIX-probe` (no record in the topic), which makes the
    /// commit reach the broker (librdkafka commits an empty transaction
    /// without asking it, so a broker without `EndTxn` would pass).
    pub fn check_transactions(&self) -> Result<()> {
        let group_id = format!("{}-probe", self.prefix);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let id = format!("{group_id}-{}-{nanos}", std::process::id());
        let (producer, _) = self.producer(Some(&id))?;
        let brokers = &self.brokers;
        let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &group_id)
            .set("log_level", "4")
            .create()
            .map_err(KafkaError::client("consumer"))?;
        let group = rdkafka::consumer::Consumer::group_metadata(&consumer).ok_or_else(|| {
            KafkaError::client("consumer")(ClientError::Global(RDKafkaErrorCode::InvalidGroupId))
        })?;
        let mut offsets = rdkafka::TopicPartitionList::new();
        offsets
            .add_partition_offset(&self.topic, 0, rdkafka::Offset::Offset(0))
            .map_err(KafkaError::client("transaction"))?;
        producer
            .init_transactions(self.timeout)
            .and_then(|()| producer.begin_transaction())
            .and_then(|()| producer.send_offsets_to_transaction(&offsets, &group, self.timeout))
            .and_then(|()| producer.commit_transaction(self.timeout))
            .map_err(|e| no_transactions(brokers, e))
    }

    fn producer(
        &self,
        transactional_id: Option<&str>,
    ) -> std::result::Result<(Client, Deliveries), KafkaError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("log_level", "4");
        if let Some(id) = transactional_id {
            config
                .set("transactional.id", id)
                .set("statistics.interval.ms", STATS_INTERVAL_MS);
        }
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        let deliveries = Deliveries {
            offsets: Arc::new(
                (0..if transactional_id.is_some() {
                    self.partitions
                } else {
                    0
                })
                    .map(|_| AtomicI64::new(i64::MAX))
                    .collect(),
            ),
            ..Deliveries::default()
        };
        let producer = config
            .create_with_context(deliveries.clone())
            .map_err(KafkaError::client("producer"))?;
        Ok((producer, deliveries))
    }

    /// Sends every record of `batch` through `producer`. While the client's
    /// queue is full the send waits for deliveries, saying so once, and
    /// fails after `timeout` (a broker that takes nothing).
    fn send(
        producer: &Client,
        topic: &str,
        (serialize, partition, tombstone): (
            &RecordSerializer<T>,
            Option<&RecordPartitioner<T>>,
            Option<&TombstoneTest<T>>,
        ),
        (key, value): (&mut Vec<u8>, &mut Vec<u8>),
        batch: Batch<T>,
        timeout: Duration,
    ) -> Result<()> {
        let mut full_since: Option<std::time::Instant> = None;
        for r in batch {
            key.clear();
            value.clear();
            serialize(&r.value, key, value);
            let to = partition.map(|p| p(&r.value));
            let null = tombstone.is_some_and(|t| t(&r.value));
            loop {
                let mut record = BaseRecord::<[u8], [u8]>::to(topic);
                if !null {
                    record = record.payload(value.as_slice());
                }
                if !key.is_empty() {
                    record = record.key(key.as_slice());
                }
                if let Some(ts) = r.timestamp {
                    record = record.timestamp(ts);
                }
                if let Some(p) = to {
                    record = record.partition(p);
                }
                match producer.send(record) {
                    Ok(()) => break,
                    // The client's queue is full: let it deliver, then retry.
                    Err((ClientError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        let since = *full_since.get_or_insert_with(|| {
                            tracing::warn!(
                                target: crate::RECOVERY_LOG_TARGET,
                                topic,
                                "Kafka sink: the client's queue is full; retrying as it delivers"
                            );
                            std::time::Instant::now()
                        });
                        if since.elapsed() >= timeout {
                            return Err(KafkaError::Undelivered {
                                topic: topic.to_string(),
                                reason: format!(
                                    "the client's queue stayed full for {} ms (no broker takes the records)",
                                    timeout.as_millis()
                                ),
                            }
                            .into());
                        }
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((ClientError::MessageProduction(RDKafkaErrorCode::Fatal), _)) => {
                        return Err(txn::fatal(producer.client(), topic).into());
                    }
                    Err((e, _)) => return Err(KafkaError::client("send")(e).into()),
                }
            }
        }
        producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Waits until everything sent is acknowledged; fails on an undelivered
    /// record.
    fn flush_deliveries(&self, producer: &Client, deliveries: &Deliveries) -> Result<()> {
        producer
            .flush(self.timeout)
            .map_err(KafkaError::client("flush"))?;
        if let Some(reason) = deliveries.take() {
            return Err(KafkaError::Undelivered {
                topic: self.topic.clone(),
                reason,
            }
            .into());
        }
        Ok(())
    }
}

/// At least once; each call finishes before it returns (librdkafka's
/// calls block for at most the request timeout).
impl<T: Send + 'static> SinkFunction<T> for KafkaSink<T> {
    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.subtask = ctx.subtask.0 as usize;
        self.producer = Some(self.producer(None)?);
        Ok(())
    }

    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        let (producer, _) = self
            .producer
            .as_ref()
            .expect("the sink is opened before its first record");
        Self::send(
            producer,
            &self.topic,
            (
                &self.serialize,
                self.partition.as_ref(),
                self.tombstone.as_ref(),
            ),
            (&mut self.key, &mut self.value),
            batch,
            self.timeout,
        )
    }

    /// At a barrier and at the end of the input: every record sent is
    /// delivered (what came before the barrier is in the topic).
    async fn flush(&mut self) -> Result<()> {
        if let Some((producer, deliveries)) = &self.producer {
            self.flush_deliveries(producer, deliveries)?;
        }
        Ok(())
    }
}

impl<T> Drop for KafkaSink<T> {
    /// Hands the producers to threads of their own (see
    /// `kafka::close`): a producer's destroy waits for its broker threads,
    /// which must not hold the subtask's arbiter when a broker is away. An
    /// open transaction's producer goes without its transaction ending:
    /// the next attempt's initialisation of its id, or the broker's
    /// transaction timeout, aborts it.
    fn drop(&mut self) {
        if let Some(producer) = self.producer.take() {
            close_in_background("Kafka sink's producer", producer, CLOSE_DEADLINE);
        }
        for (_, producer) in self.open.drain() {
            close_in_background(
                "Kafka sink's transactional producer",
                producer,
                CLOSE_DEADLINE,
            );
        }
    }
}

/// The exactly-once Kafka sink (see the module documentation).
pub struct KafkaTransactionalSink<T> {
    sink: KafkaSink<T>,
}

impl<T> Clone for KafkaTransactionalSink<T> {
    fn clone(&self) -> Self {
        KafkaTransactionalSink {
            sink: self.sink.clone(),
        }
    }
}

/// How many transactional ids per subtask a restart fences: the
/// transactions one subtask can have open at once (the current one and
/// those pre-committed and waiting for their checkpoint).
const ID_POOL: u64 = 8;

impl<T> KafkaTransactionalSink<T> {
    fn id(&self, subtask: usize, n: u64) -> String {
        format!("{}-{subtask}-{}", self.sink.prefix, n % ID_POOL)
    }

    /// A producer for `id`, its transactions initialised: this fences every
    /// earlier producer with that id and aborts its open transaction.
    fn init(&self, id: &str) -> Result<(Client, Deliveries)> {
        let (producer, deliveries) = self.sink.producer(Some(id))?;
        producer
            .init_transactions(self.sink.timeout)
            .map_err(|e| no_transactions(&self.sink.brokers, e))?;
        Ok((producer, deliveries))
    }
}

impl<T> KafkaTransactionalSink<T> {
    /// The producer id and epoch of the transaction `id` open in
    /// `producer`, from the first statistics taken inside the transaction
    /// (they change only when a producer is initialised, which happened
    /// before it began).
    fn producer_identity(
        &self,
        id: &str,
        producer: &Client,
        deliveries: &Deliveries,
    ) -> Result<ProducerIdentity> {
        let deadline = std::time::Instant::now() + self.sink.timeout;
        loop {
            let eos = deliveries.eos.lock().ok().and_then(|e| e.clone());
            if let Some(eos) = eos.filter(|e| e.txn_state == "InTransaction" && e.producer_id >= 0)
                && let Ok(epoch) = i16::try_from(eos.producer_epoch)
            {
                return Ok(ProducerIdentity {
                    producer_id: eos.producer_id,
                    epoch,
                });
            }
            if std::time::Instant::now() >= deadline {
                return Err(KafkaError::NoProducerId {
                    transactional_id: id.to_string(),
                    timeout: self.sink.timeout,
                }
                .into());
            }
            // Serves the statistics callback; returns when one arrives.
            producer.poll(Duration::from_millis(20));
        }
    }

    /// Commits a transaction of an earlier attempt through its coordinator,
    /// then makes sure no partition of the topic holds it open (its commit
    /// markers lost by a broker that restarted: see
    /// [`producers`](crate::connectors::kafka::producers)). Also when the
    /// coordinator says it ended before: the checkpoint says it is
    /// committed, so records of it still open are committed.
    fn end_restored(&self, id: &str, producer: ProducerIdentity) -> Result<()> {
        self.commit_restored(id, producer)?;
        let (probe, _) = self.sink.producer(None)?;
        let finished = txn::finish_commit(
            probe.client(),
            &self.sink.topic,
            id,
            producer,
            None,
            self.sink.timeout,
        );
        close_in_background("Kafka sink's metadata client", probe, CLOSE_DEADLINE);
        finished
    }

    fn commit_restored(&self, id: &str, producer: ProducerIdentity) -> Result<()> {
        let client = CoordinatorClient::new(&self.sink.brokers, self.sink.timeout);
        match client.commit(id, producer) {
            Ok(Ended::Committed) => {
                tracing::info!(id, "Kafka sink: committed a restored transaction");
                Ok(())
            }
            Ok(Ended::AlreadyEnded(code)) => {
                tracing::warn!(
                    target: crate::RECOVERY_LOG_TARGET,
                    id,
                    "Kafka sink: restored transaction {id} was ended before ({}): \
                     committed before the failure or by another subtask's recovery, \
                     or aborted by the broker (transaction.timeout.ms shorter than the \
                     recovery: its records are lost)",
                    txn_recovery::error_name(code)
                );
                Ok(())
            }
            Err(source) => Err(KafkaError::Recovery {
                transactional_id: id.to_string(),
                source,
            }
            .into()),
        }
    }
}

/// The transaction steps; each finishes before it returns (librdkafka's
/// calls block), so the sink runs on the inline runner.
impl<T: Send + 'static> TwoPhaseCommitSink<T> for KafkaTransactionalSink<T> {
    type Txn = KafkaTxn;

    /// On a restore, every subtask commits the transactions of the ids it
    /// is about to initialise (its own, in `open`; subtask 0 also those of
    /// former subtasks beyond the new parallelism) before it does: an
    /// initialisation would abort them. None is open in this process. On a
    /// region failover each restored subtask commits every restored
    /// transaction (idempotently).
    async fn recover(&mut self, ctx: &SinkContext, r: Recovery<KafkaTxn>) -> Result<()> {
        if r.partial {
            for (checkpoint, txn) in r.pending {
                self.commit_now(txn, checkpoint)?;
            }
            return Ok(());
        }
        if !r.restored {
            return Ok(());
        }
        let restored: Vec<(String, Option<ProducerIdentity>)> = r
            .pending
            .iter()
            .map(|(_, t)| (t.transactional_id.clone(), t.producer))
            .collect();
        tracing::debug!(?restored, "Kafka sink: recover");
        let plan = txn_recovery::plan(
            &self.sink.prefix,
            ctx.subtask.0 as usize,
            ctx.parallelism,
            &restored,
        );
        for id in &plan.legacy {
            tracing::warn!(
                target: crate::RECOVERY_LOG_TARGET,
                id = %id,
                "Kafka sink: the checkpoint holds transaction {id} without its producer id \
                 and epoch (an older checkpoint format): it is aborted, not committed"
            );
        }
        for (id, producer) in plan.commit {
            self.end_restored(&id, producer)?;
        }
        for id in plan.fence {
            close_in_background(
                "Kafka sink's fencing producer",
                self.init(&id)?,
                CLOSE_DEADLINE,
            );
        }
        Ok(())
    }

    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.sink.subtask = ctx.subtask.0 as usize;
        let (probe, _) = self.sink.producer(None)?;
        self.sink.partitions =
            txn::leaders(probe.client(), &self.sink.topic, self.sink.timeout)?.len();
        close_in_background("Kafka sink's metadata client", probe, CLOSE_DEADLINE);
        // Fence the previous attempt of this subtask: its open transactions
        // are aborted, its producers can no longer write.
        for n in 0..ID_POOL {
            let id = self.id(self.sink.subtask, n);
            close_in_background(
                "Kafka sink's fencing producer",
                self.init(&id)?,
                CLOSE_DEADLINE,
            );
        }
        Ok(())
    }

    async fn begin(&mut self) -> Result<KafkaTxn> {
        let id = self.id(self.sink.subtask, self.sink.next_txn);
        if self.sink.open.contains_key(&id) {
            // Its transaction awaits its checkpoint: initialising the id
            // would abort it, and its commit would then commit this one.
            return Err(KafkaError::IdsInUse {
                subtask: self.sink.subtask,
                ids: ID_POOL,
                failed: ID_POOL - 1,
            }
            .into());
        }
        self.sink.next_txn += 1;
        let (producer, deliveries) = self.init(&id)?;
        producer
            .begin_transaction()
            .map_err(|e| no_transactions(&self.sink.brokers, e))?;
        tracing::debug!(id, "Kafka sink: began a transaction");
        self.sink.open.insert(id.clone(), (producer, deliveries));
        Ok(KafkaTxn {
            transactional_id: id,
            producer: None,
        })
    }

    async fn write(&mut self, txn: &mut KafkaTxn, batch: Batch<T>) -> Result<()> {
        let sink = &mut self.sink;
        let (producer, _) = sink
            .open
            .get(&txn.transactional_id)
            .expect("a transaction is written only while open");
        KafkaSink::send(
            producer,
            &sink.topic,
            (
                &sink.serialize,
                sink.partition.as_ref(),
                sink.tombstone.as_ref(),
            ),
            (&mut sink.key, &mut sink.value),
            batch,
            sink.timeout,
        )
    }

    async fn pre_commit(
        &mut self,
        txn: &mut KafkaTxn,
        _checkpoint: Option<CheckpointId>,
    ) -> Result<()> {
        if let Some((producer, deliveries)) = self.sink.open.get(&txn.transactional_id) {
            self.sink.flush_deliveries(producer, deliveries)?;
            let identity = self.producer_identity(&txn.transactional_id, producer, deliveries)?;
            txn::check_own_records(
                producer.client(),
                &self.sink.topic,
                &txn.transactional_id,
                identity.producer_id,
                &deliveries.offsets,
                self.sink.timeout,
            )?;
            txn.producer = Some(identity);
            tracing::debug!(id = %txn.transactional_id, producer = ?txn.producer, checkpoint = ?_checkpoint, "Kafka sink: pre-committed");
        }
        Ok(())
    }

    async fn commit(&mut self, txn: KafkaTxn, checkpoint: CheckpointId) -> Result<()> {
        self.commit_now(txn, checkpoint)
    }

    async fn abort(&mut self, txn: KafkaTxn) -> Result<()> {
        tracing::debug!(id = %txn.transactional_id, "Kafka sink: abort");
        if let Some((producer, _)) = self.sink.open.remove(&txn.transactional_id) {
            producer
                .abort_transaction(self.sink.timeout)
                .map_err(|e| no_transactions(&self.sink.brokers, e))?;
        }
        Ok(())
    }
}

impl<T: Send + 'static> KafkaTransactionalSink<T> {
    /// Commits `txn`: its open producer's transaction, or a restored one
    /// through its coordinator.
    fn commit_now(&mut self, txn: KafkaTxn, checkpoint: CheckpointId) -> Result<()> {
        tracing::debug!(id = %txn.transactional_id, producer = ?txn.producer, ?checkpoint, open = self.sink.open.contains_key(&txn.transactional_id), "Kafka sink: commit");
        match self.sink.open.remove(&txn.transactional_id) {
            Some((producer, deliveries)) => {
                if let Some((group, topics)) = &self.sink.group {
                    group.send_offsets(&producer, topics, checkpoint, self.sink.timeout)?;
                }
                producer
                    .commit_transaction(self.sink.timeout)
                    .map_err(|e| no_transactions(&self.sink.brokers, e))?;
                let Some(identity) = txn.producer else {
                    return Ok(());
                };
                // The partitions it wrote to hold its commit marker.
                let written: Vec<i32> = (0..)
                    .zip(deliveries.offsets.iter())
                    .filter(|(_, o)| o.load(std::sync::atomic::Ordering::Relaxed) != i64::MAX)
                    .map(|(p, _)| p)
                    .collect();
                txn::finish_commit(
                    producer.client(),
                    &self.sink.topic,
                    &txn.transactional_id,
                    identity,
                    Some(&written),
                    self.sink.timeout,
                )
            }
            None => match txn.producer {
                // Another process's transaction (see the module docs): its
                // producer is gone, its coordinator commits it.
                Some(producer) => self.end_restored(&txn.transactional_id, producer),
                None => {
                    tracing::warn!(
                        target: crate::RECOVERY_LOG_TARGET,
                        id = %txn.transactional_id,
                        "Kafka sink: a restored transaction without its producer id \
                         (a checkpoint of an older format) cannot be committed"
                    );
                    Ok(())
                }
            },
        }
    }
}

mod deliveries;
mod txn;
use deliveries::{Deliveries, STATS_INTERVAL_MS};
pub use txn::KafkaTxn;
use txn::no_transactions;

#[cfg(test)]
mod tests;
