//! The Kafka sink against Apache Kafka (`FLOE_TEST_KAFKA`): the
//! at-least-once sink flushes at a checkpoint; the exactly-once sink's
//! transactions:
//! - a restarted subtask fences the previous attempt's transactional ids:
//!   that attempt's open transaction is aborted and can no longer commit;
//! - a failure between pre-commit and commit (the sink's checkpoint 3
//!   fails after its transaction was flushed) restarts the job from
//!   checkpoint 2 and a `read_committed` reader sees every record exactly
//!   once;
//! - a transaction whose checkpoint completed but whose process died
//!   before committing it is committed by the recovery, also when the
//!   subtask that owns its id opens before subtask 0 recovers.
//!
//! The recovery's own client (`ApiVersions`, `FindCoordinator`, `EndTxn`)
//! is tested against the broker: an `EndTxn` for a transaction the broker
//! never began ends in one typed error, within its timeout.

#![cfg(feature = "kafka")]

use crate::gated;
use crate::kafka_support;

use floe::Record;
use floe::connectors::kafka::KafkaError;
use floe::connectors::kafka_sink::KafkaSink;
use floe::operators::SnapshotContext;
use floe::operators::sink::SinkContext;
use floe_actors::ids::SubtaskIndex;
use kafka_support::*;
use std::time::Duration;

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
    use floe::operators::sink::SinkFunction;
    use futures::executor::block_on;
    block_on(sink.open(&ctx())).expect("opens");
    let lines: Vec<String> = (0..100).map(|i| format!("w{},{i}", i % 7)).collect();
    block_on(sink.write(lines.iter().cloned().map(Record::new).collect())).expect("sends");
    // What the sink operator calls at a checkpoint barrier.
    block_on(SinkFunction::<String>::flush(&mut sink)).expect("flushes");
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected = lines.clone();
    expected.sort();
    assert_eq!(got, expected);
}

/// The exactly-once sink's check of the broker's transactions passes,
/// and a transaction with a record then commits: a `read_committed`
/// reader sees the record.
#[test]
fn the_exactly_once_sinks_transaction_check_passes() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let Some(b) = broker() else { return };
    let topic = unique("sink-txn");
    create_topic(&b, &topic, 1);
    KafkaSink::<String>::lines(&b, &topic)
        .check_transactions()
        .expect("Apache Kafka runs transactions");
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

/// The previous attempt of subtask 0 wrote and pre-committed (flushed) a
/// transaction, then hung on (a zombie). The restarted subtask's `open`
/// initialises the same transactional ids: the zombie's transaction is
/// aborted and its commit fails as fenced; the new attempt's transaction
/// commits, and a `read_committed` reader sees only its records.
#[test]
fn a_restart_fences_the_previous_attempts_transactions() {
    use floe::connectors::two_phase::{AFTER_END, TwoPhaseCommitSink};
    use futures::executor::block_on;
    let Some(b) = broker() else { return };
    let topic = unique("sink-fence");
    create_topic(&b, &topic, 1);
    let prefix = unique("fence");
    let sink = KafkaSink::<String>::lines(&b, &topic)
        .transactional_id_prefix(&prefix)
        .request_timeout(Duration::from_secs(10))
        .exactly_once();
    let batch = |tag: &str| -> Vec<Record<String>> {
        (0..50)
            .map(|i| Record::new(format!("{tag}{i},{i}")))
            .collect()
    };

    let mut zombie = sink.clone();
    block_on(TwoPhaseCommitSink::<String>::open(&mut zombie, &ctx())).expect("opens");
    let mut old = block_on(TwoPhaseCommitSink::<String>::begin(&mut zombie)).expect("begins");
    block_on(TwoPhaseCommitSink::<String>::write(
        &mut zombie,
        &mut old,
        batch("old"),
    ))
    .expect("writes");
    block_on(TwoPhaseCommitSink::<String>::pre_commit(
        &mut zombie,
        &mut old,
        None,
    ))
    .expect("flushes");

    let mut restarted = sink.clone();
    block_on(TwoPhaseCommitSink::<String>::open(&mut restarted, &ctx())).expect("opens, fencing");
    let fenced = block_on(TwoPhaseCommitSink::<String>::commit(
        &mut zombie,
        old,
        AFTER_END,
    ));
    assert!(fenced.is_err(), "the fenced attempt's commit must fail");

    let mut new = block_on(TwoPhaseCommitSink::<String>::begin(&mut restarted)).expect("begins");
    block_on(TwoPhaseCommitSink::<String>::write(
        &mut restarted,
        &mut new,
        batch("new"),
    ))
    .expect("writes");
    block_on(TwoPhaseCommitSink::<String>::pre_commit(
        &mut restarted,
        &mut new,
        None,
    ))
    .expect("flushes");
    block_on(TwoPhaseCommitSink::<String>::commit(
        &mut restarted,
        new,
        AFTER_END,
    ))
    .expect("commits");

    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected: Vec<String> = batch("new").into_iter().map(|r| r.value).collect();
    expected.sort();
    assert_eq!(
        got, expected,
        "only the new attempt's records are committed"
    );
}

/// Checkpoints that fail in a row (tolerated) leave their pre-committed
/// transactions pending, each on a transactional id of the subtask's pool.
/// Once every id holds one, the next transaction cannot begin: its id's
/// initialisation would abort the pending transaction on it (and that
/// transaction's commit would then commit the new one). The sink fails
/// instead, and every pending transaction still commits.
#[test]
fn transactions_awaiting_their_checkpoints_never_share_an_id() {
    use floe::CheckpointId;
    use floe::connectors::two_phase::TwoPhaseCommitSink;
    use futures::executor::block_on;
    let Some(b) = broker() else { return };
    let topic = unique("sink-pool");
    create_topic(&b, &topic, 1);
    let mut sink = KafkaSink::<String>::lines(&b, &topic)
        .transactional_id_prefix(&unique("pool"))
        .request_timeout(Duration::from_secs(10))
        .exactly_once();
    let batch = |n: u64| -> Vec<Record<String>> {
        (0..20)
            .map(|i| Record::new(format!("t{n}-{i},{i}")))
            .collect()
    };
    block_on(TwoPhaseCommitSink::<String>::open(&mut sink, &ctx())).expect("opens");
    let mut pending = Vec::new();
    let mut n = 0;
    let refused = loop {
        let mut txn = match block_on(TwoPhaseCommitSink::<String>::begin(&mut sink)) {
            Ok(txn) => txn,
            Err(e) => break e,
        };
        assert!(n < 64, "begins without end while transactions are pending");
        block_on(TwoPhaseCommitSink::<String>::write(
            &mut sink,
            &mut txn,
            batch(n),
        ))
        .expect("writes");
        block_on(TwoPhaseCommitSink::<String>::pre_commit(
            &mut sink,
            &mut txn,
            Some(CheckpointId(n + 1)),
        ))
        .expect("pre-commits");
        pending.push((n, txn));
        n += 1;
    };
    assert!(
        refused
            .to_string()
            .contains("transactional ids hold transactions"),
        "{refused}"
    );
    assert!(refused.is_retriable(), "a restart mends it: {refused}");
    // The checkpoint of the last one completes: every pending transaction
    // commits, in order.
    for (n, txn) in pending {
        block_on(TwoPhaseCommitSink::<String>::commit(
            &mut sink,
            txn,
            CheckpointId(n + 1),
        ))
        .expect("commits");
    }
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected: Vec<String> = (0..n).flat_map(batch).map(|r| r.value).collect();
    expected.sort();
    assert_eq!(got, expected, "every pending transaction's records, once");
}

/// An exactly-once sink (subtask 0 of 1) that wrote `n` records `kI,I`
/// into `topic` in one transaction and pre-committed it for checkpoint 1,
/// not committed: the sink, the transaction and the records.
fn pre_committed(
    b: &str,
    topic: &str,
    prefix: &str,
    n: usize,
) -> (
    floe::connectors::kafka_sink::KafkaTransactionalSink<String>,
    floe::connectors::kafka_sink::KafkaTxn,
    Vec<Record<String>>,
) {
    use floe::CheckpointId;
    use floe::connectors::two_phase::TwoPhaseCommitSink;
    use futures::executor::block_on;
    let mut sink = KafkaSink::<String>::lines(b, topic)
        .transactional_id_prefix(&unique(prefix))
        .request_timeout(Duration::from_secs(20))
        .exactly_once();
    let records: Vec<Record<String>> = (0..n).map(|i| Record::new(format!("k{i},{i}"))).collect();
    block_on(TwoPhaseCommitSink::<String>::open(&mut sink, &ctx())).expect("opens");
    let mut txn = block_on(TwoPhaseCommitSink::<String>::begin(&mut sink)).expect("begins");
    block_on(TwoPhaseCommitSink::<String>::write(
        &mut sink,
        &mut txn,
        records.clone(),
    ))
    .expect("writes");
    block_on(TwoPhaseCommitSink::<String>::pre_commit(
        &mut sink,
        &mut txn,
        Some(CheckpointId(1)),
    ))
    .expect("pre-commits");
    (sink, txn, records)
}

/// The pre-commit checks that its transaction holds only its own records:
/// it asks each partition's leader for the open transactions
/// (`DescribeProducers`). Against the broker: the answer names the sink's
/// producer, its open transaction starting at its first record (offset 0
/// of a new topic), which passes; had its first record been later, the
/// records before it would be another attempt's, which the check finds.
#[test]
fn the_brokers_view_of_an_open_transaction_starts_at_its_first_record() {
    use floe::CheckpointId;
    use floe::connectors::kafka::producers::{describe, stale};
    use floe::connectors::two_phase::TwoPhaseCommitSink;
    use futures::executor::block_on;
    use std::collections::HashMap;
    let Some(b) = broker() else { return };
    let topic = unique("sink-describe");
    create_topic(&b, &topic, 2);
    // Pre-commit's check passes.
    let (mut sink, txn, records) = pre_committed(&b, &topic, "describe", 40);
    let producer_id = txn
        .producer
        .expect("pre-commit reads its producer")
        .producer_id;
    let answer = describe(&b, &topic, &[0, 1], Duration::from_secs(10))
        .expect("the broker answers")
        .expect("the broker serves DescribeProducers");
    let starts: HashMap<i32, i64> = answer
        .iter()
        .flat_map(|p| {
            p.producers
                .iter()
                .filter(|a| a.producer_id == producer_id)
                .map(move |a| (p.partition, a.current_txn_start_offset))
        })
        .collect();
    assert_eq!(
        starts,
        HashMap::from([(0, 0), (1, 0)]),
        "the open transaction starts at the first offset of each partition: {answer:?}"
    );
    let first = HashMap::from([(0, 0), (1, 0)]);
    assert!(stale(&answer, producer_id, &first).is_empty());
    let later = HashMap::from([(0, 0), (1, 3)]);
    let found = stale(&answer, producer_id, &later);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].partition, found[0].start), (1, 0));
    block_on(TwoPhaseCommitSink::<String>::commit(
        &mut sink,
        txn,
        CheckpointId(1),
    ))
    .expect("commits");
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected: Vec<String> = records.into_iter().map(|r| r.value).collect();
    expected.sort();
    assert_eq!(got, expected);
}

/// A committed transaction whose commit marker a partition never got (a
/// broker restarted under load lost it; the coordinator reports the
/// transaction committed) blocks `read_committed` readers at its first
/// record, and the producer id's next initialisation would abort it. The
/// sink's commit writes the missing markers itself. Here the partitions
/// are left in that state on purpose: a transaction is written and
/// flushed, and its coordinator is never asked to commit it; no
/// `read_committed` reader sees a record. `finish_commit` writes the
/// commit markers into both partitions after its grace, and every record
/// is then read once; asked again, it finds nothing open.
#[test]
fn a_commit_marker_the_broker_lost_is_written_by_the_sink() {
    use floe::connectors::kafka::producers::{self, Leaders, describe, finish_commit};
    let Some(b) = broker() else { return };
    let topic = unique("sink-lost-marker");
    create_topic(&b, &topic, 2);
    let (_sink, txn, records) = pre_committed(&b, &topic, "lost-marker", 60);
    let producer = txn.producer.expect("pre-commit reads its producer");
    for p in 0..2 {
        let (stable, end) = stable_and_end(&b, &topic, p);
        assert!(
            stable == 0 && end > 0,
            "partition {p}: the open transaction holds readers at its first record \
             (stable {stable}, end {end})"
        );
    }
    let mut leaders =
        || -> Result<Leaders, String> { Ok(Leaders::from([(b.clone(), vec![0, 1])])) };
    let mut written = finish_commit(
        &mut leaders,
        &topic,
        &txn.transactional_id,
        producer,
        Duration::from_millis(200),
        Duration::from_secs(20),
    )
    .expect("the markers are written");
    written.sort();
    assert_eq!(written, [0, 1], "a commit marker in each partition");
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected: Vec<String> = records.into_iter().map(|r| r.value).collect();
    expected.sort();
    assert_eq!(got, expected, "every record of the transaction, once");
    let answer = describe(&b, &topic, &[0, 1], Duration::from_secs(10))
        .expect("the broker answers")
        .expect("the broker serves DescribeProducers");
    assert!(
        producers::still_open(&answer, producer).is_empty(),
        "{answer:?}"
    );
    let again = finish_commit(
        &mut leaders,
        &topic,
        &txn.transactional_id,
        producer,
        Duration::ZERO,
        Duration::from_secs(20),
    )
    .expect("nothing is open");
    assert!(again.is_empty(), "no marker written twice: {again:?}");
}

/// A job writing `r0..rN` through the transactional sink; the sink's
/// checkpoint 3 fails in its asynchronous part, after the synchronous part
/// pre-committed (flushed) the transaction: the checkpoint never completes,
/// the job restarts from checkpoint 2, and a `read_committed` reader sees
/// each record exactly once.
#[test]
fn a_failure_between_pre_commit_and_commit_leaves_each_record_once() {
    use floe::StreamExecutionEnvironment;
    use floe::checkpoint::CheckpointConfig;
    use floe::failover::{Fault, FaultInjection, FaultPoint, RestartStrategy};
    let Some(b) = broker() else { return };
    const RECORDS: u64 = 20_000;
    let topic = unique("sink-precommit");
    create_topic(&b, &topic, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let mut config = env.config();
    config.checkpoint =
        CheckpointConfig::every(Duration::from_millis(20)).with_dir(dir.path().join("ck"));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::ZERO,
    });
    let config = config.with_fault_injector(std::sync::Arc::new(FaultInjection {
        faults: vec![Fault {
            operator: "Kafka Sink".into(),
            subtask: 0,
            at: FaultPoint::AsyncWrite(floe::CheckpointId(3)),
        }],
        ..Default::default()
    }));
    env.set_config(config);
    let gate = gated::Gate::new();
    let records = gated::gated_generator(&env, &gate, RECORDS, &[0.05], |i| format!("r{i}"));
    records.sink_exactly_once(
        "Kafka Sink",
        KafkaSink::<String>::lines(&b, &topic)
            .transactional_id_prefix(&unique("precommit"))
            .exactly_once(),
    );
    let handle = env.execute_async().expect("starts");
    gated::wait_for_restarts(&handle, 1);
    gate.open();
    futures::executor::block_on(handle.wait()).expect("the job recovers and finishes");
    assert_eq!(handle.failover_stats().restarts, 1, "the fault fired");
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut oracle: Vec<String> = (0..RECORDS).map(|i| format!("r{i}")).collect();
    oracle.sort();
    assert_eq!(got.len(), oracle.len(), "nothing lost, nothing duplicated");
    assert_eq!(got, oracle);
}

/// The sink's recovery client against the broker: `ApiVersions` answers
/// and lists what every Kafka broker serves (the other tests produce,
/// fetch and ask for metadata through librdkafka), and an `EndTxn` for a
/// transaction the broker never began is answered within the client's
/// timeout — not a hang, not a retry loop — with
/// `INVALID_PRODUCER_ID_MAPPING` (49): one typed error line that no
/// restart mends.
#[test]
fn the_recovery_client_talks_to_the_broker() {
    use floe::connectors::kafka::txn_recovery::{
        CoordinatorClient, ProducerIdentity, RecoveryError,
    };
    let Some(b) = broker() else { return };
    let client = CoordinatorClient::new(&b, Duration::from_secs(10));
    let versions = client.api_versions().expect("ApiVersions answers");
    for (api, name) in [
        (0, "Produce"),
        (1, "Fetch"),
        (3, "Metadata"),
        (18, "ApiVersions"),
        (26, "EndTxn"),
    ] {
        assert!(
            versions.apis.iter().any(|r| r.api == api && r.min <= r.max),
            "{name} listed: {versions:?}"
        );
    }
    let id = unique("recovery");
    let err = client
        .commit(
            &id,
            ProducerIdentity {
                producer_id: 1,
                epoch: 0,
            },
        )
        .expect_err("the broker never began that transaction");
    match &err {
        RecoveryError::Broker { code, .. } => {
            assert_eq!(*code, 49, "INVALID_PRODUCER_ID_MAPPING: {err}");
        }
        other => panic!("unexpected {other}"),
    }
    let sink_error = floe::Error::Kafka(KafkaError::Recovery {
        transactional_id: id.clone(),
        source: err,
    });
    let line = sink_error.to_string();
    eprintln!("{line}");
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(line.contains(&id), "names the transaction: {line}");
    assert!(!sink_error.is_retriable(), "no restart mends it: {line}");
}

fn ctx_of(subtask: u32, parallelism: usize) -> SinkContext {
    SinkContext {
        subtask: SubtaskIndex(subtask),
        parallelism,
    }
}

/// Two subtasks write into their transactions, checkpoint 1 snapshots
/// (pre-commits) them and completes, and the process dies before either
/// commits. Restored at the same parallelism, subtask 1 opens (fencing
/// its ids) before subtask 0 recovers: both transactions are committed
/// all the same, and a `read_committed` reader sees exactly the records
/// of checkpoint 1 — not those written after it. Before the recovery sent
/// `EndTxn` itself they were aborted: lost.
#[test]
fn a_completed_checkpoints_transactions_are_committed_on_recovery() {
    use floe::connectors::two_phase::TwoPhaseCommitSinkOp;
    use floe::operators::{Operator, RestoredState};
    let Some(b) = broker() else { return };
    let topic = unique("sink-recover");
    create_topic(&b, &topic, 2);
    let sink = KafkaSink::<String>::lines(&b, &topic)
        .transactional_id_prefix(&unique("recover"))
        .request_timeout(Duration::from_secs(10))
        .exactly_once();
    let batch = |tag: &str| -> Vec<Record<String>> {
        (0..40)
            .map(|i| Record::new(format!("{tag}{i},{i}")))
            .collect()
    };
    let snapshot = SnapshotContext {
        checkpoint: floe::CheckpointId(1),
        savepoint: false,
        max_parallelism: 128,
        key_groups: 0..128,
    };
    let mut union_list = Vec::new();
    let mut dead = Vec::new();
    for subtask in 0..2 {
        let mut op = TwoPhaseCommitSinkOp::new(sink.clone(), ctx_of(subtask, 2));
        op.write_batch(batch(&format!("s{subtask}-")))
            .expect("writes");
        union_list.extend(
            op.snapshot_state(&snapshot)
                .expect("pre-commits")
                .union_list,
        );
        op.write_batch(batch(&format!("late{subtask}-")))
            .expect("writes");
        dead.push(op);
    }
    // Checkpoint 1 completed; the process dies before the notification.
    drop(dead);
    let state = RestoredState {
        union_list,
        ..Default::default()
    };
    for subtask in [1, 0] {
        let mut op = TwoPhaseCommitSinkOp::new(sink.clone(), ctx_of(subtask, 2));
        op.restore_state(state.clone()).expect("recovers");
        op.write_batch(Vec::new()).expect("opens, fencing its ids");
    }
    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected: Vec<String> = ["s0-", "s1-"]
        .iter()
        .flat_map(|tag| batch(tag))
        .map(|r| r.value)
        .collect();
    expected.sort();
    assert_eq!(got, expected, "checkpoint 1's records, once; no late ones");
}
