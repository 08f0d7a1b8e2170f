//! The exactly-once sink's check that a transaction it is about to
//! pre-commit holds only its own records.
//!
//! A Kafka commit marker ends every open batch of its producer id in a
//! partition, whatever their epoch. A transaction of an earlier attempt
//! that was fenced must therefore have its abort markers in the
//! partitions before the id's next transaction commits. A single broker
//! that restarts under load can lose them: its coordinator records the
//! abort complete while a partition never keeps the marker (seen with
//! Apache Kafka 4.4: the partition's writes of one leader epoch gone
//! after the broker was fenced and unfenced right after its restart).
//! The next commit on that producer id then publishes the fenced
//! attempt's records a second time.
//!
//! So at pre-commit the sink asks each partition's leader for its active
//! producers (`DescribeProducers`, KIP-664): the open transaction of the
//! sink's producer id must start at the first offset the sink wrote into
//! that partition, not before. If it starts before, the pre-commit fails
//! and the job restarts; the restart's fencing of the id ends the whole
//! open transaction, stale records included, with one abort.

use super::txn_recovery::{Connection, RecoveryError};
use super::wire::{self, DESCRIBE_PRODUCERS, PartitionProducers};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A partition whose open transaction of the producer began before the
/// producer's first record there: the partition and where it began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stale {
    /// The partition.
    pub partition: i32,
    /// The first offset of the open transaction.
    pub start: i64,
    /// The first offset the producer wrote there.
    pub first: i64,
}

/// The partitions of `answer` where `producer_id`'s open transaction
/// starts before `first[partition]`, the first offset this producer wrote
/// there.
pub fn stale(
    answer: &[PartitionProducers],
    producer_id: i64,
    first: &HashMap<i32, i64>,
) -> Vec<Stale> {
    let mut out = Vec::new();
    for p in answer {
        let Some(&first) = first.get(&p.partition) else {
            continue;
        };
        for a in &p.producers {
            if a.producer_id == producer_id
                && a.current_txn_start_offset >= 0
                && a.current_txn_start_offset < first
            {
                out.push(Stale {
                    partition: p.partition,
                    start: a.current_txn_start_offset,
                    first,
                });
            }
        }
    }
    out
}

/// The active producers of `partitions` of `topic`, asked of their leader
/// at `leader` (`HOST:PORT`) within `timeout`. `Ok(None)` when the broker
/// does not serve `DescribeProducers` (before Apache Kafka 2.8): nothing
/// can be checked.
pub fn describe(
    leader: &str,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<Option<Vec<PartitionProducers>>, RecoveryError> {
    let deadline = Instant::now() + timeout;
    let timed_out = |reason: String| RecoveryError::TimedOut {
        broker: leader.to_string(),
        timeout,
        reason,
    };
    let mut conn = Connection::open(leader, deadline).map_err(|e| timed_out(e.to_string()))?;
    let version = match conn.version(DESCRIBE_PRODUCERS) {
        Ok(v) => v,
        Err(RecoveryError::Unsupported { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let body = wire::describe_producers_request(topic, partitions);
    let answer = conn
        .call(DESCRIBE_PRODUCERS, version, &body, deadline)
        .map_err(|e| timed_out(e.to_string()))?;
    Ok(Some(wire::decode_describe_producers(&answer)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::kafka::wire::ActiveProducer;

    fn partition(partition: i32, producers: &[(i64, i64)]) -> PartitionProducers {
        PartitionProducers {
            partition,
            error_code: 0,
            producers: producers
                .iter()
                .map(|&(producer_id, start)| ActiveProducer {
                    producer_id,
                    producer_epoch: 4,
                    current_txn_start_offset: start,
                })
                .collect(),
        }
    }

    #[test]
    fn only_an_open_transaction_of_the_producer_from_before_its_first_record_is_stale() {
        let answer = [
            // Its transaction starts where it wrote first: its own.
            partition(0, &[(7, 100), (8, 50)]),
            // Starts before: a fenced attempt's records left open.
            partition(1, &[(7, 40), (9, 10)]),
            // No open transaction of it.
            partition(2, &[(7, -1)]),
            // Not written to by this transaction.
            partition(3, &[(7, 5)]),
        ];
        let first = HashMap::from([(0, 100), (1, 60), (2, 70)]);
        assert_eq!(
            stale(&answer, 7, &first),
            [Stale {
                partition: 1,
                start: 40,
                first: 60
            }]
        );
        assert!(
            stale(&answer, 10, &first).is_empty(),
            "a producer not in the partitions"
        );
    }
}
