//! The Kafka sink against a real Kafka-protocol broker (`FLOE_TEST_KAFKA`):
//! the at-least-once sink flushes at a checkpoint, and the exactly-once
//! sink either runs its transactions or, on a broker without them, says so
//! before the job starts.

#![cfg(feature = "kafka")]

mod kafka_support;

use floe::Record;
use floe::connectors::kafka::KafkaError;
use floe::connectors::kafka_sink::KafkaSink;
use floe::operators::sink::{SinkContext, SinkFunction};
use floe::operators::{SnapshotContext, StateCapture};
use floe_actors::ids::SubtaskIndex;
use kafka_support::*;

fn ctx() -> SinkContext {
    SinkContext {
        subtask: SubtaskIndex(0),
        parallelism: 1,
    }
}

#[test]
fn the_at_least_once_sink_flushes_at_a_checkpoint() {
    let Some(b) = broker() else { return };
    let topic = unique("sink-flush");
    create_topic(&b, &topic, 2);
    // The producer would hold records for 60 s: only the checkpoint's
    // flush can make them visible now.
    let mut sink = KafkaSink::<String>::lines(&b, &topic).property("linger.ms", "60000");
    sink.open(&ctx()).expect("opens");
    let lines: Vec<String> = (0..100).map(|i| format!("w{},{i}", i % 7)).collect();
    sink.invoke_batch(lines.iter().cloned().map(Record::new).collect())
        .expect("sends");
    let capture: StateCapture = sink
        .snapshot_state(&SnapshotContext {
            checkpoint: floe::CheckpointId(1),
            savepoint: false,
            max_parallelism: 128,
            key_groups: 0..128,
        })
        .expect("flushes");
    assert!(capture.is_empty(), "the sink keeps no state");
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected = lines.clone();
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn the_exactly_once_sink_needs_transactions_and_says_so() {
    let Some(b) = broker() else { return };
    let topic = unique("sink-txn");
    create_topic(&b, &topic, 1);
    let sink = KafkaSink::<String>::lines(&b, &topic);
    match sink.check_transactions() {
        // The check says the broker has transactions: one with a record
        // then commits, and a read_committed reader sees the record.
        Ok(()) => {
            use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
            let producer: BaseProducer = rdkafka::config::ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("transactional.id", unique("txn-check"))
                .create()
                .expect("producer");
            let t = std::time::Duration::from_secs(10);
            producer.init_transactions(t).expect("init transactions");
            producer.begin_transaction().expect("begin");
            producer
                .send(BaseRecord::<(), str>::to(&topic).payload("committed"))
                .map_err(|(e, _)| e)
                .expect("queued");
            producer
                .commit_transaction(t)
                .expect("the check passed, so a transaction with a record commits");
            assert_eq!(read_all(&b, &topic), vec!["committed".to_string()]);
        }
        Err(floe::Error::Kafka(KafkaError::NoTransactions { reason, .. })) => {
            eprintln!("broker without transactions: {reason}");
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
}
