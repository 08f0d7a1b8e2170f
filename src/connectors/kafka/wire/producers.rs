//! `DescribeProducers` (a partition's open transactions, KIP-664) and
//! `WriteTxnMarkers` (a commit or abort marker written into partitions,
//! as a transaction coordinator does, and as Kafka's
//! `kafka-transactions.sh abort` does for a hanging transaction).

use super::{DecodeError, Reader, put_string, put_uvarint};

/// The body of a `DescribeProducers` request (version 0) for
/// `partitions` of `topic`.
pub fn describe_producers_request(topic: &str, partitions: &[i32]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, 2); // one topic
    put_string(&mut out, topic, true);
    put_uvarint(&mut out, partitions.len() as u64 + 1);
    for p in partitions {
        out.extend_from_slice(&p.to_be_bytes());
    }
    put_uvarint(&mut out, 0); // the topic's tags
    put_uvarint(&mut out, 0); // the request's tags
    out
}

/// One active producer of a partition, as `DescribeProducers` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveProducer {
    /// Its producer id.
    pub producer_id: i64,
    /// The epoch of its last batch.
    pub producer_epoch: i32,
    /// The epoch of the transaction coordinator that wrote its last
    /// marker in the partition (-1: none yet); a marker written with an
    /// older one is refused.
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction in the partition; -1 when
    /// none is open.
    pub current_txn_start_offset: i64,
}

/// One partition of a `DescribeProducers` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionProducers {
    /// The partition.
    pub partition: i32,
    /// Its error code (0: none).
    pub error_code: i16,
    /// Its active producers.
    pub producers: Vec<ActiveProducer>,
}

/// Decodes a `DescribeProducers` response body (version 0): every
/// partition of every topic in it.
pub fn decode_describe_producers(body: &[u8]) -> Result<Vec<PartitionProducers>, DecodeError> {
    let mut r = Reader {
        api: "DescribeProducers",
        bytes: body,
    };
    r.i32()?; // throttle_time_ms
    let mut out = Vec::new();
    for _ in 0..r.array_len(true)? {
        r.string(true)?; // the topic
        for _ in 0..r.array_len(true)? {
            let partition = r.i32()?;
            let error_code = r.i16()?;
            r.string(true)?; // the error message
            let mut producers = Vec::new();
            for _ in 0..r.array_len(true)? {
                let producer_id = r.i64()?;
                let producer_epoch = r.i32()?;
                r.i32()?; // last_sequence
                r.i64()?; // last_timestamp
                let coordinator_epoch = r.i32()?;
                let current_txn_start_offset = r.i64()?;
                r.skip_tags()?;
                producers.push(ActiveProducer {
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    current_txn_start_offset,
                });
            }
            r.skip_tags()?;
            out.push(PartitionProducers {
                partition,
                error_code,
                producers,
            });
        }
        r.skip_tags()?;
    }
    r.skip_tags()?;
    Ok(out)
}

/// One transaction's marker for some partitions of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnMarker {
    /// The transaction's producer id.
    pub producer_id: i64,
    /// The transaction's producer epoch.
    pub producer_epoch: i16,
    /// Commit (`true`) or abort.
    pub commit: bool,
    /// The partitions.
    pub partitions: Vec<i32>,
    /// The coordinator epoch the marker carries: at least the one the
    /// partition last saw for the producer.
    pub coordinator_epoch: i32,
}

/// The body of a `WriteTxnMarkers` request (version 1) writing `markers`
/// into partitions of `topic`.
pub fn write_txn_markers_request(topic: &str, markers: &[TxnMarker]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, markers.len() as u64 + 1);
    for m in markers {
        out.extend_from_slice(&m.producer_id.to_be_bytes());
        out.extend_from_slice(&m.producer_epoch.to_be_bytes());
        out.push(u8::from(m.commit));
        put_uvarint(&mut out, 2); // one topic
        put_string(&mut out, topic, true);
        put_uvarint(&mut out, m.partitions.len() as u64 + 1);
        for p in &m.partitions {
            out.extend_from_slice(&p.to_be_bytes());
        }
        put_uvarint(&mut out, 0); // the topic's tags
        out.extend_from_slice(&m.coordinator_epoch.to_be_bytes());
        put_uvarint(&mut out, 0); // the marker's tags
    }
    put_uvarint(&mut out, 0); // the request's tags
    out
}

/// One partition's answer to a written marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerWritten {
    /// The marker's producer id.
    pub producer_id: i64,
    /// The partition.
    pub partition: i32,
    /// Its error code (0: written).
    pub error_code: i16,
}

/// Decodes a `WriteTxnMarkers` response body (version 1): every
/// partition's answer.
pub fn decode_write_txn_markers(body: &[u8]) -> Result<Vec<MarkerWritten>, DecodeError> {
    let mut r = Reader {
        api: "WriteTxnMarkers",
        bytes: body,
    };
    let mut out = Vec::new();
    for _ in 0..r.array_len(true)? {
        let producer_id = r.i64()?;
        for _ in 0..r.array_len(true)? {
            r.string(true)?; // the topic
            for _ in 0..r.array_len(true)? {
                let partition = r.i32()?;
                let error_code = r.i16()?;
                r.skip_tags()?;
                out.push(MarkerWritten {
                    producer_id,
                    partition,
                    error_code,
                });
            }
            r.skip_tags()?;
        }
        r.skip_tags()?;
    }
    r.skip_tags()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_producers_request_and_response() {
        // Topics: compact array of one; name "t"; partition indexes [0, 2];
        // the topic's tags; the request's tags.
        assert_eq!(
            describe_producers_request("t", &[0, 2]),
            [2, 2, b't', 3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0]
        );
        let mut body = vec![0, 0, 0, 0]; // throttle_time_ms
        body.extend([2, 2, b't']); // one topic, "t"
        body.push(2); // one partition
        body.extend(1i32.to_be_bytes()); // partition_index
        body.extend(0i16.to_be_bytes()); // error_code
        body.push(0); // error_message: null
        body.push(2); // one active producer
        body.extend(7i64.to_be_bytes()); // producer_id
        body.extend(3i32.to_be_bytes()); // producer_epoch
        body.extend(41i32.to_be_bytes()); // last_sequence
        body.extend(1_000i64.to_be_bytes()); // last_timestamp
        body.extend(2i32.to_be_bytes()); // coordinator_epoch
        body.extend(4_683i64.to_be_bytes()); // current_txn_start_offset
        body.extend([0, 0, 0, 0]); // tags: producer, partition, topic, body
        assert_eq!(
            decode_describe_producers(&body),
            Ok(vec![PartitionProducers {
                partition: 1,
                error_code: 0,
                producers: vec![ActiveProducer {
                    producer_id: 7,
                    producer_epoch: 3,
                    coordinator_epoch: 2,
                    current_txn_start_offset: 4_683,
                }],
            }])
        );
        assert!(decode_describe_producers(&body[..body.len() - 1]).is_err());
    }

    #[test]
    fn write_txn_markers_request_and_response() {
        let marker = TxnMarker {
            producer_id: 7,
            producer_epoch: 3,
            commit: true,
            partitions: vec![0, 2],
            coordinator_epoch: 5,
        };
        let mut expected = vec![2]; // one marker
        expected.extend(7i64.to_be_bytes()); // producer_id
        expected.extend(3i16.to_be_bytes()); // producer_epoch
        expected.push(1); // transaction_result: commit
        expected.extend([2, 2, b't']); // one topic, "t"
        expected.push(3); // two partitions
        expected.extend(0i32.to_be_bytes());
        expected.extend(2i32.to_be_bytes());
        expected.push(0); // the topic's tags
        expected.extend(5i32.to_be_bytes()); // coordinator_epoch
        expected.extend([0, 0]); // tags: marker, body
        assert_eq!(write_txn_markers_request("t", &[marker]), expected);
        let mut body = vec![2]; // one marker
        body.extend(7i64.to_be_bytes()); // producer_id
        body.extend([2, 2, b't']); // one topic, "t"
        body.push(3); // two partitions
        body.extend(0i32.to_be_bytes());
        body.extend(0i16.to_be_bytes());
        body.push(0);
        body.extend(2i32.to_be_bytes());
        body.extend(6i16.to_be_bytes()); // NOT_LEADER_OR_FOLLOWER
        body.push(0);
        body.extend([0, 0, 0]); // tags: topic, marker, body
        assert_eq!(
            decode_write_txn_markers(&body),
            Ok(vec![
                MarkerWritten {
                    producer_id: 7,
                    partition: 0,
                    error_code: 0
                },
                MarkerWritten {
                    producer_id: 7,
                    partition: 2,
                    error_code: 6
                },
            ])
        );
        assert!(decode_write_txn_markers(&body[..body.len() - 1]).is_err());
    }
}
