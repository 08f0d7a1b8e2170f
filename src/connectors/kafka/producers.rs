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
//!
//! A commit marker can be lost the same way: the coordinator reports the
//! transaction committed, and a partition still holds its records open
//! (seen after a broker restart under load). `read_committed` readers
//! then see nothing past them, and the producer id's next initialisation
//! would abort them: committed output lost. So after every commit, the
//! sink's own and a restored one, [`finish_commit`] asks the partitions'
//! leaders whether the transaction is still open in any of them; once
//! the coordinator has had [`MARKER_GRACE`] to write its markers, the
//! sink writes the missing commit markers itself (`WriteTxnMarkers`, as
//! Kafka's `kafka-transactions.sh abort` writes an abort marker for a
//! hanging transaction), saying so. A marker written twice is harmless:
//! the second ends nothing.

use super::txn_recovery::{Connection, ProducerIdentity, RecoveryError};
use super::wire::{
    self, DESCRIBE_PRODUCERS, MarkerWritten, PartitionProducers, TxnMarker, WRITE_TXN_MARKERS,
};
use std::collections::{BTreeMap, HashMap};
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
    let body = wire::describe_producers_request(topic, partitions);
    match ask(leader, DESCRIBE_PRODUCERS, &body, timeout) {
        Ok(answer) => Ok(Some(wire::decode_describe_producers(&answer)?)),
        Err(RecoveryError::Unsupported { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sends one `api` request to the broker at `leader` (`HOST:PORT`) in the
/// newest version both speak, within `timeout`: its answer's body.
fn ask(leader: &str, api: i16, body: &[u8], timeout: Duration) -> Result<Vec<u8>, RecoveryError> {
    let deadline = Instant::now() + timeout;
    let timed_out = |reason: String| RecoveryError::TimedOut {
        broker: leader.to_string(),
        timeout,
        reason,
    };
    let mut conn = Connection::open(leader, deadline).map_err(|e| timed_out(e.to_string()))?;
    let version = conn.version(api)?;
    conn.call(api, version, body, deadline)
        .map_err(|e| timed_out(e.to_string()))
}

/// How long after a commit the sink leaves a partition's commit marker to
/// the transaction coordinator before it writes the marker itself (at
/// most half the request timeout).
pub const MARKER_GRACE: Duration = Duration::from_secs(2);

/// The error a broker answers a request only brokers may send.
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

/// A partition where a transaction is still open: the partition, where
/// its open records start, and the coordinator epoch its producer last
/// saw there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StillOpen {
    /// The partition.
    pub partition: i32,
    /// The first offset of the open records.
    pub start: i64,
    /// The coordinator epoch a marker must carry at least.
    pub coordinator_epoch: i32,
}

/// The partitions of `answer` where the transaction of `producer` (its id
/// and epoch) is still open: its producer's last batch there is of that
/// epoch and begins an open transaction.
pub fn still_open(answer: &[PartitionProducers], producer: ProducerIdentity) -> Vec<StillOpen> {
    let mut out = Vec::new();
    for p in answer {
        for a in &p.producers {
            if a.producer_id == producer.producer_id
                && a.producer_epoch == i32::from(producer.epoch)
                && a.current_txn_start_offset >= 0
            {
                out.push(StillOpen {
                    partition: p.partition,
                    start: a.current_txn_start_offset,
                    coordinator_epoch: a.coordinator_epoch,
                });
            }
        }
    }
    out
}

/// Writes `producer`'s commit markers into `open` partitions of `topic`
/// through their leader at `leader`, within `timeout`: each partition's
/// answer.
pub fn write_commit_markers(
    leader: &str,
    topic: &str,
    producer: ProducerIdentity,
    open: &[StillOpen],
    timeout: Duration,
) -> Result<Vec<MarkerWritten>, RecoveryError> {
    // One marker per coordinator epoch the partitions last saw.
    let mut by_epoch: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for o in open {
        by_epoch
            .entry(o.coordinator_epoch.max(0))
            .or_default()
            .push(o.partition);
    }
    let markers: Vec<TxnMarker> = by_epoch
        .into_iter()
        .map(|(coordinator_epoch, partitions)| TxnMarker {
            producer_id: producer.producer_id,
            producer_epoch: producer.epoch,
            commit: true,
            partitions,
            coordinator_epoch,
        })
        .collect();
    let body = wire::write_txn_markers_request(topic, &markers);
    let answer = ask(leader, WRITE_TXN_MARKERS, &body, timeout)?;
    Ok(wire::decode_write_txn_markers(&answer)?)
}

/// The partitions of a topic by the `HOST:PORT` of their leader.
pub type Leaders = HashMap<String, Vec<i32>>;

/// Ends the commit of `producer`'s transaction (`transactional_id`) in
/// `topic`: waits until no partition `leaders` names holds it open, and
/// after `grace` writes the commit markers still missing itself, saying
/// so (see the module documentation). `leaders` is asked again on every
/// round; its error (a partition without a leader) makes the round
/// inconclusive, and the next round asks again.
/// Fails after `timeout` with the partitions still open or the last
/// error. `Ok` holds the partitions whose marker the sink wrote;
/// a broker without `DescribeProducers` (before Apache Kafka 2.8) cannot
/// be checked and gives `Ok` at once.
pub fn finish_commit(
    leaders: &mut dyn FnMut() -> Result<Leaders, String>,
    topic: &str,
    transactional_id: &str,
    producer: ProducerIdentity,
    grace: Duration,
    timeout: Duration,
) -> Result<Vec<i32>, Unfinished> {
    let started = Instant::now();
    let deadline = started + timeout;
    let grace = grace.min(timeout / 2);
    let mut pause = Duration::from_millis(2);
    let mut written = Vec::new();
    let mut rounds = 0u32;
    loop {
        let mut open: Vec<(String, StillOpen)> = Vec::new();
        let mut unknown: Option<String> = None;
        let left = deadline.saturating_duration_since(Instant::now());
        match leaders() {
            Err(e) => unknown = Some(e),
            Ok(leaders) => {
                for (leader, partitions) in leaders {
                    match describe(&leader, topic, &partitions, left) {
                        Ok(None) => return Ok(written),
                        Ok(Some(answer)) => {
                            if let Some(p) = answer.iter().find(|p| p.error_code != 0) {
                                unknown = Some(format!(
                                    "DescribeProducers of partition {}: {}",
                                    p.partition,
                                    super::txn_recovery::error_name(p.error_code)
                                ));
                            }
                            open.extend(
                                still_open(&answer, producer)
                                    .into_iter()
                                    .map(|o| (leader.clone(), o)),
                            );
                        }
                        Err(e) => unknown = Some(format!("DescribeProducers: {e}")),
                    }
                }
            }
        }
        rounds += 1;
        if open.is_empty() && unknown.is_none() {
            tracing::debug!(
                transactional_id,
                rounds,
                micros = started.elapsed().as_micros() as u64,
                "Kafka sink: the commit's markers are in every partition"
            );
            return Ok(written);
        }
        if Instant::now() >= deadline {
            return Err(Unfinished {
                partitions: open.iter().map(|(_, o)| o.partition).collect(),
                reason: unknown.unwrap_or_else(|| "no commit marker was written".into()),
            });
        }
        if !open.is_empty() && started.elapsed() >= grace {
            let mut by_leader: HashMap<String, Vec<StillOpen>> = HashMap::new();
            for (leader, o) in open {
                by_leader.entry(leader).or_default().push(o);
            }
            for (leader, open) in by_leader {
                let partitions: Vec<String> = open
                    .iter()
                    .map(|o| format!("{} (open from offset {})", o.partition, o.start))
                    .collect();
                tracing::warn!(
                    target: crate::RECOVERY_LOG_TARGET,
                    "Kafka sink: transaction '{transactional_id}' (producer {} epoch {}) is \
                     committed, but partitions {} of {topic} still hold it open {} ms after \
                     its commit (the broker lost or delayed its commit marker); writing the \
                     commit marker",
                    producer.producer_id,
                    producer.epoch,
                    partitions.join(", "),
                    started.elapsed().as_millis()
                );
                let left = deadline.saturating_duration_since(Instant::now());
                match write_commit_markers(&leader, topic, producer, &open, left) {
                    Ok(answers) => {
                        for a in answers {
                            if a.error_code == 0 {
                                written.push(a.partition);
                            } else if a.error_code == CLUSTER_AUTHORIZATION_FAILED {
                                return Err(Unfinished {
                                    partitions: vec![a.partition],
                                    reason: "the broker refused to write its commit marker \
                                             (CLUSTER_AUTHORIZATION_FAILED: writing a lost \
                                             marker needs ClusterAction on the cluster)"
                                        .into(),
                                });
                            } else {
                                tracing::warn!(
                                    target: crate::RECOVERY_LOG_TARGET,
                                    "Kafka sink: the commit marker of transaction \
                                     '{transactional_id}' in partition {} of {topic} was \
                                     refused ({}); retrying",
                                    a.partition,
                                    super::txn_recovery::error_name(a.error_code)
                                );
                            }
                        }
                    }
                    Err(e) => tracing::warn!(
                        target: crate::RECOVERY_LOG_TARGET,
                        "Kafka sink: writing the commit marker of transaction \
                         '{transactional_id}' failed ({e}); retrying"
                    ),
                }
            }
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(200));
        if !written.is_empty() || started.elapsed() >= grace {
            // A marker was tried: one line per second at most.
            pause = pause.max(Duration::from_millis(500));
        }
    }
}

/// A committed transaction still open in some partitions after the
/// request timeout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("still open in partitions {partitions:?}: {reason}")]
pub struct Unfinished {
    /// The partitions where it was last seen open.
    pub partitions: Vec<i32>,
    /// The last error, or why no marker ended it.
    pub reason: String,
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
                    coordinator_epoch: 0,
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

    #[test]
    fn a_transaction_is_still_open_only_where_its_epoch_left_records_open() {
        let entry = |producer_id, producer_epoch, current_txn_start_offset| ActiveProducer {
            producer_id,
            producer_epoch,
            coordinator_epoch: 3,
            current_txn_start_offset,
        };
        let answer = [
            PartitionProducers {
                partition: 0,
                error_code: 0,
                // Open, of this epoch: its marker is missing.
                producers: vec![entry(7, 2, 561), entry(8, 2, 10)],
            },
            PartitionProducers {
                partition: 1,
                error_code: 0,
                // Ended.
                producers: vec![entry(7, 2, -1)],
            },
            PartitionProducers {
                partition: 2,
                error_code: 0,
                // A later epoch of the producer: another transaction.
                producers: vec![entry(7, 3, 90)],
            },
        ];
        let producer = ProducerIdentity {
            producer_id: 7,
            epoch: 2,
        };
        assert_eq!(
            still_open(&answer, producer),
            [StillOpen {
                partition: 0,
                start: 561,
                coordinator_epoch: 3
            }]
        );
    }
}
