//! The transaction handle the exactly-once Kafka sink keeps in checkpoints.

use super::ProducerIdentity;

/// A Kafka transaction of the exactly-once sink, as checkpoints hold it.
///
/// Encoded as the transactional id, a format version (1) and the
/// producer; a checkpoint of format 0 (before the version) holds only the
/// id and decodes with `producer: None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaTxn {
    /// Its transactional id, `PREFIX-SUBTASK-N`.
    pub transactional_id: String,
    /// The producer id and epoch that own it, read at pre-commit: what
    /// recovery needs to commit it from another process. `None` before
    /// pre-commit, and in checkpoints of format 0.
    pub producer: Option<ProducerIdentity>,
}

/// The format version written after the transactional id.
const TXN_FORMAT: u8 = 1;

impl serde::Serialize for KafkaTxn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(3)?;
        t.serialize_element(&self.transactional_id)?;
        t.serialize_element(&TXN_FORMAT)?;
        t.serialize_element(&self.producer)?;
        t.end()
    }
}

impl<'de> serde::Deserialize<'de> for KafkaTxn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = KafkaTxn;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Kafka transaction")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<KafkaTxn, A::Error> {
                let transactional_id: String = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(0, &self))?;
                // Format 0 ends here: the transaction is the last field of
                // its checkpoint entry, so postcard meets the end of the
                // entry's bytes (an error) where the version would be.
                let version = match seq.next_element::<u8>() {
                    Ok(Some(v)) => v,
                    Ok(None) | Err(_) => {
                        return Ok(KafkaTxn {
                            transactional_id,
                            producer: None,
                        });
                    }
                };
                if version != TXN_FORMAT {
                    return Err(serde::de::Error::custom(format!(
                        "Kafka transaction format {version}, this build reads 0 and {TXN_FORMAT}"
                    )));
                }
                let producer = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(2, &self))?;
                Ok(KafkaTxn {
                    transactional_id,
                    producer,
                })
            }
        }
        d.deserialize_tuple(3, Visitor)
    }
}

/// Why a producer failed for good, which only its client knows, as the
/// error of a send to `topic`.
pub(super) fn fatal<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> crate::connectors::kafka::KafkaError {
    use rdkafka::error::RDKafkaErrorCode as Code;
    let (code, reason) = client
        .fatal_error()
        .unwrap_or((Code::Fatal, "no reason given".into()));
    let reason = match code {
        Code::Fenced | Code::ProducerFenced | Code::InvalidProducerEpoch => format!(
            "the producer is fenced: {reason} (a newer producer with its transactional id, \
             or its transaction outlived transaction.timeout.ms and the broker aborted it)"
        ),
        _ => format!("the producer failed for good: {reason} ({code:?})"),
    };
    crate::connectors::kafka::KafkaError::Undelivered {
        topic: topic.to_string(),
        reason,
    }
}

/// A transaction step's error, named as the broker's missing support when
/// that is what it is. A broker that refuses every transactional id
/// (some Kafka-protocol brokers answer `InitProducerId` so on purpose; on
/// Apache Kafka it is a missing ACL, which the reason names) cannot run
/// the sink either.
pub(super) fn no_transactions(brokers: &str, e: rdkafka::error::KafkaError) -> crate::Error {
    let text = e.to_string();
    if e.rdkafka_error_code()
        == Some(rdkafka::error::RDKafkaErrorCode::TransactionalIdAuthorizationFailed)
        || text.contains("Transactional Id authorization failed")
        || text.contains("not supported")
        || text.contains("Unsupported")
        || text.contains("UNSUPPORTED")
        || text.contains("does not support")
    {
        crate::connectors::kafka::KafkaError::NoTransactions {
            brokers: brokers.to_string(),
            reason: text,
        }
        .into()
    } else {
        crate::connectors::kafka::KafkaError::client("transaction")(e).into()
    }
}

/// Each partition of `topic` with its leader's `HOST:PORT`, from the
/// client's metadata.
pub(super) fn leaders<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: std::time::Duration,
) -> crate::Result<Vec<(i32, Option<String>)>> {
    use crate::connectors::kafka::KafkaError;
    let metadata = client
        .fetch_metadata(Some(topic), timeout.min(std::time::Duration::from_secs(10)))
        .map_err(KafkaError::client("metadata"))?;
    let brokers: std::collections::HashMap<i32, String> = metadata
        .brokers()
        .iter()
        .map(|b| (b.id(), format!("{}:{}", b.host(), b.port())))
        .collect();
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(Vec::new());
    };
    Ok(t.partitions()
        .iter()
        .map(|p| (p.id(), brokers.get(&p.leader()).cloned()))
        .collect())
}

/// Fails when a partition this transaction wrote to holds an open
/// transaction of its producer that began before its first record there
/// (see [`producers`](crate::connectors::kafka::producers)).
pub(super) fn check_own_records<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    transactional_id: &str,
    producer_id: i64,
    offsets: &[std::sync::atomic::AtomicI64],
    timeout: std::time::Duration,
) -> crate::Result<()> {
    use crate::connectors::kafka::{KafkaError, producers};
    let first: std::collections::HashMap<i32, i64> = offsets
        .iter()
        .enumerate()
        .map(|(p, o)| (p as i32, o.load(std::sync::atomic::Ordering::Relaxed)))
        .filter(|(_, o)| *o != i64::MAX)
        .collect();
    if first.is_empty() {
        return Ok(());
    }
    let mut by_leader: std::collections::HashMap<String, Vec<i32>> = Default::default();
    for (p, leader) in leaders(client, topic, timeout)? {
        if let (true, Some(leader)) = (first.contains_key(&p), leader) {
            by_leader.entry(leader).or_default().push(p);
        }
    }
    for (leader, partitions) in by_leader {
        let answer = producers::describe(&leader, topic, &partitions, timeout).map_err(|e| {
            KafkaError::Unreachable {
                brokers: leader.clone(),
                reason: format!("DescribeProducers: {e}"),
            }
        })?;
        let Some(answer) = answer else {
            return Ok(());
        };
        if let Some(s) = producers::stale(&answer, producer_id, &first).first() {
            return Err(KafkaError::StaleRecords {
                transactional_id: transactional_id.to_string(),
                partition: s.partition,
                start: s.start,
                first: s.first,
            }
            .into());
        }
    }
    Ok(())
}

/// Ends the commit of `producer`'s transaction `transactional_id` in
/// `topic` (in `only` of its partitions, or in every one): writes the
/// commit markers the broker lost, if any (see
/// [`producers::finish_commit`](crate::connectors::kafka::producers::finish_commit)).
pub(super) fn finish_commit<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    transactional_id: &str,
    producer: crate::connectors::kafka::txn_recovery::ProducerIdentity,
    only: Option<&[i32]>,
    timeout: std::time::Duration,
) -> crate::Result<()> {
    use crate::connectors::kafka::{KafkaError, producers};
    if only.is_some_and(|o| o.is_empty()) {
        return Ok(());
    }
    let mut by_leader = || -> Result<producers::Leaders, String> {
        let mut out = producers::Leaders::new();
        for (p, leader) in leaders(client, topic, timeout).map_err(|e| e.to_string())? {
            if only.is_some_and(|o| !o.contains(&p)) {
                continue;
            }
            match leader {
                Some(leader) => out.entry(leader).or_default().push(p),
                None => return Err(format!("partition {p} has no leader")),
            }
        }
        Ok(out)
    };
    producers::finish_commit(
        &mut by_leader,
        topic,
        transactional_id,
        producer,
        producers::MARKER_GRACE,
        timeout,
    )
    .map(|_| ())
    .map_err(|source| {
        KafkaError::CommitUnfinished {
            transactional_id: transactional_id.to_string(),
            topic: topic.to_string(),
            source,
        }
        .into()
    })
}
