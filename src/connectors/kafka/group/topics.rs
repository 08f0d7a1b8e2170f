//! The group's internal topics and its committed offsets.

use super::super::{KafkaError, Quiet};
use super::OffsetMark;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

/// The number of partitions of `topic` (an error if it does not exist).
pub fn partition_count(brokers: &str, topic: &str, timeout: Duration) -> Result<i32, KafkaError> {
    let consumer: BaseConsumer<Quiet> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("log_level", "4")
        .create_with_context(Quiet::default())
        .map_err(KafkaError::client("metadata client"))?;
    super::super::partitions_of(&consumer, brokers, topic, timeout)
}

/// The number of partitions of `topic`, creating it with `partitions`
/// (and `replication`) when it does not exist. An existing topic keeps
/// its count: its partitions are the key groups of the state it feeds.
pub fn ensure_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    timeout: Duration,
) -> Result<i32, KafkaError> {
    let consumer: BaseConsumer<Quiet> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("log_level", "4")
        .create_with_context(Quiet::default())
        .map_err(KafkaError::client("metadata client"))?;
    match super::super::partitions_of(&consumer, brokers, topic, timeout) {
        Ok(n) => return Ok(n),
        Err(KafkaError::NoSuchTopic { .. }) => {}
        Err(e) => return Err(e),
    }
    let admin: AdminClient<Quiet> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("log_level", "4")
        .create_with_context(Quiet::default())
        .map_err(KafkaError::client("admin client"))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = futures::executor::block_on(admin.create_topics([&new], &options))
        .map_err(KafkaError::client("create topic"))?;
    for result in results {
        match result {
            Ok(_) => {}
            // Another member created it meanwhile.
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(KafkaError::Unreachable {
                    brokers: brokers.to_string(),
                    reason: format!("cannot create topic '{name}': {code}"),
                });
            }
        }
    }
    // The new topic's metadata reaches every broker a moment later.
    let until = std::time::Instant::now() + timeout;
    loop {
        match super::super::partitions_of(&consumer, brokers, topic, timeout) {
            Ok(n) => return Ok(n),
            Err(KafkaError::NoSuchTopic { .. }) if std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A partition's committed position in the group: its offset (`None`:
/// nothing committed) and the checkpoint its metadata names.
pub type CommittedMark = ((String, i32), Option<i64>, Option<OffsetMark>);

/// The group's committed offsets of `partitions`, with the checkpoints
/// their metadata name. Transactional commits still open are waited for
/// (a read_committed fetch asks for stable offsets).
pub fn committed_marks(
    brokers: &str,
    group: &str,
    partitions: &[(String, i32)],
    timeout: Duration,
) -> Result<Vec<CommittedMark>, KafkaError> {
    let consumer: BaseConsumer<Quiet> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("log_level", "4")
        .create_with_context(Quiet::default())
        .map_err(KafkaError::client("committed offsets client"))?;
    let mut list = TopicPartitionList::new();
    for (topic, partition) in partitions {
        list.add_partition(topic, *partition);
    }
    let committed = consumer
        .committed_offsets(list, timeout)
        .map_err(KafkaError::client("committed offsets"))?;
    Ok(partitions
        .iter()
        .map(|(topic, partition)| {
            let e = committed.find_partition(topic, *partition);
            let offset = match e.as_ref().map(|e| e.offset()) {
                Some(Offset::Offset(o)) if o >= 0 => Some(o),
                _ => None,
            };
            let mark = e.and_then(|e| OffsetMark::parse(e.metadata()));
            ((topic.clone(), *partition), offset, mark)
        })
        .collect())
}
