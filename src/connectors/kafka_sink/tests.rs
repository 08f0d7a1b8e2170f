//! The Kafka sink's own parts, without a broker: its checkpoint format,
//! its statistics, and a send whose queue stays full.

use super::*;
use floe_actors::element::Record;
use rdkafka::ClientContext;

/// With no broker to deliver to and a queue of one record, the second
/// record finds the queue full: the send retries, then fails after its
/// timeout with an error naming the topic, instead of looping.
#[test]
fn a_queue_that_stays_full_fails_the_send_after_its_timeout() {
    let sink = KafkaSink::<String>::lines("127.0.0.1:1", "t")
        .property("queue.buffering.max.messages", "1")
        .request_timeout(Duration::from_millis(200));
    let (producer, _) = sink.producer(None).expect("a producer needs no broker");
    let batch = vec![Record::new("a".to_string()), Record::new("b".to_string())];
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let err = KafkaSink::send(
        &producer,
        &sink.topic,
        (&sink.serialize, None, None),
        (&mut key, &mut value),
        batch,
        sink.timeout,
    )
    .expect_err("a full queue with no broker cannot take the second record");
    let text = err.to_string();
    assert!(
        text.contains("'t'") && text.contains("queue stayed full"),
        "{text}"
    );
}

#[test]
fn a_transaction_round_trips_with_its_producer() {
    let txn = KafkaTxn {
        transactional_id: "job-1-3".into(),
        producer: Some(ProducerIdentity {
            producer_id: 4711,
            epoch: 7,
        }),
    };
    // As the two-phase-commit operator writes it: (checkpoint, txn).
    let bytes = postcard::to_allocvec(&(12u64, &txn)).expect("encodes");
    let (checkpoint, back): (u64, KafkaTxn) = postcard::from_bytes(&bytes).expect("decodes");
    assert_eq!((checkpoint, back), (12, txn));
}

#[test]
fn a_checkpoint_of_format_0_restores_without_a_producer() {
    // Format 0 was a struct of one field, the id: postcard wrote the
    // checkpoint entry as the checkpoint id and the string.
    #[derive(serde::Serialize)]
    struct Format0 {
        transactional_id: String,
    }
    let old = Format0 {
        transactional_id: "job-0-5".into(),
    };
    let bytes = postcard::to_allocvec(&(3u64, old)).expect("encodes");
    // By hand too: varint 3, varint length 7, the id.
    assert_eq!(bytes, b"\x03\x07job-0-5");
    let (checkpoint, txn): (u64, KafkaTxn) = postcard::from_bytes(&bytes).expect("decodes");
    assert_eq!(checkpoint, 3);
    assert_eq!(
        txn,
        KafkaTxn {
            transactional_id: "job-0-5".into(),
            producer: None
        }
    );
}

#[test]
fn an_unknown_format_is_refused() {
    let bytes = b"\x03\x07job-0-5\x02\x00";
    let r: std::result::Result<(u64, KafkaTxn), _> = postcard::from_bytes(bytes);
    assert!(r.is_err());
}

#[test]
fn statistics_give_the_producer_id_and_epoch() {
    // Shaped as librdkafka's STATISTICS.md documents the `eos` object.
    let json = br#"{"name":"p","type":"producer","ts":1,"brokers":{},
        "eos":{"idemp_state":"Assigned","idemp_stateage":3,"txn_state":"InTransaction",
        "txn_stateage":1,"txn_may_enq":true,"producer_id":1001,"producer_epoch":4,
        "epoch_cnt":1}}"#;
    let d = Deliveries::default();
    d.stats_raw(json);
    let eos = d.eos.lock().expect("lock").clone().expect("eos read");
    assert_eq!(
        (eos.txn_state.as_str(), eos.producer_id, eos.producer_epoch),
        ("InTransaction", 1001, 4)
    );
}
