//! Partition assignment: the subtask that owns a partition (Flink's rule)
//! and the partitions of a topic.

use super::{Client, KafkaError};
use rdkafka::consumer::Consumer;
use std::time::Duration;

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
pub(super) fn partitions_of(
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
}
