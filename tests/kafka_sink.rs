//! The Kafka sink against a real Kafka-protocol broker (`FLOE_TEST_KAFKA`):
//! the at-least-once sink flushes at a checkpoint, and the exactly-once
//! sink either runs its transactions or, on a broker without them, says so
//! before the job starts. With transactions (neither tansu 0.6 nor nisshi
//! 0.8.1 commits them: there these say on stderr that they are skipped):
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
//! is tested against every broker: its `EndTxn` on a broker without
//! transactions ends in one typed error, within its timeout.

#![cfg(feature = "kafka")]

mod gated;
mod kafka_support;

use floe::Record;
use floe::connectors::kafka::KafkaError;
use floe::connectors::kafka_sink::KafkaSink;
use floe::operators::sink::{SinkContext, SinkFunction};
use floe::operators::{SnapshotContext, StateCapture};
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

/// The previous attempt of subtask 0 wrote and pre-committed (flushed) a
/// transaction, then hung on (a zombie). The restarted subtask's `open`
/// initialises the same transactional ids: the zombie's transaction is
/// aborted and its commit fails as fenced; the new attempt's transaction
/// commits, and a `read_committed` reader sees only its records.
#[test]
fn a_restart_fences_the_previous_attempts_transactions() {
    use floe::connectors::two_phase::TwoPhaseCommitSink;
    let Some(b) = broker() else { return };
    if !transactions_or_skip(&b, "a_restart_fences_the_previous_attempts_transactions") {
        return;
    }
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
    TwoPhaseCommitSink::<String>::open(&mut zombie, &ctx()).expect("opens");
    let mut old = TwoPhaseCommitSink::<String>::begin(&mut zombie).expect("begins");
    TwoPhaseCommitSink::<String>::write(&mut zombie, &mut old, batch("old")).expect("writes");
    TwoPhaseCommitSink::<String>::pre_commit(&mut zombie, &mut old).expect("flushes");

    let mut restarted = sink.clone();
    TwoPhaseCommitSink::<String>::open(&mut restarted, &ctx()).expect("opens, fencing");
    let fenced = TwoPhaseCommitSink::<String>::commit(&mut zombie, old);
    assert!(fenced.is_err(), "the fenced attempt's commit must fail");

    let mut new = TwoPhaseCommitSink::<String>::begin(&mut restarted).expect("begins");
    TwoPhaseCommitSink::<String>::write(&mut restarted, &mut new, batch("new")).expect("writes");
    TwoPhaseCommitSink::<String>::pre_commit(&mut restarted, &mut new).expect("flushes");
    TwoPhaseCommitSink::<String>::commit(&mut restarted, new).expect("commits");

    let mut got = read_all(&b, &topic);
    got.sort();
    let mut expected: Vec<String> = batch("new").into_iter().map(|r| r.value).collect();
    expected.sort();
    assert_eq!(
        got, expected,
        "only the new attempt's records are committed"
    );
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
    if !transactions_or_skip(
        &b,
        "a_failure_between_pre_commit_and_commit_leaves_each_record_once",
    ) {
        return;
    }
    const RECORDS: u64 = 20_000;
    let topic = unique("sink-precommit");
    create_topic(&b, &topic, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let mut config = env.config();
    config.checkpoint = CheckpointConfig {
        interval: Some(Duration::from_millis(20)),
        dir: Some(dir.path().join("ck")),
        ..Default::default()
    };
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
    records
        .add_two_phase_sink(
            KafkaSink::<String>::lines(&b, &topic)
                .transactional_id_prefix(&unique("precommit"))
                .exactly_once(),
        )
        .name("Kafka Sink");
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
/// timeout — not a hang, not a retry loop — as the broker answers it:
/// - tansu 0.6 lists no `EndTxn`: one typed error line (the API is not
///   served) that no restart mends;
/// - nisshi 0.8.1 lists `EndTxn` and answers it with `NONE` for any
///   transaction (it has none: its `InitProducerId` refuses every
///   transactional id, so the sink never gets to recover there);
/// - noida-db 0.2.3 has transactions, yet answers `NONE` to an `EndTxn`
///   for a producer id it never handed out (lenient where Apache Kafka
///   answers 49; the recovery then logs nothing, as for a committed one);
/// - a broker with transactions: `INVALID_PRODUCER_ID_MAPPING` (49), one
///   typed error line that no restart mends.
#[test]
fn the_recovery_client_talks_to_the_broker() {
    use floe::connectors::kafka::txn_recovery::{
        CoordinatorClient, Ended, ProducerIdentity, RecoveryError,
    };
    let Some(b) = broker() else { return };
    let client = CoordinatorClient::new(&b, Duration::from_secs(10));
    let versions = client.api_versions().expect("ApiVersions answers");
    for (api, name) in [
        (0, "Produce"),
        (1, "Fetch"),
        (3, "Metadata"),
        (18, "ApiVersions"),
    ] {
        assert!(
            versions.apis.iter().any(|r| r.api == api && r.min <= r.max),
            "{name} listed: {versions:?}"
        );
    }
    let serves_end_txn = versions.apis.iter().any(|r| r.api == 26);
    let id = unique("recovery");
    let answer = client.commit(
        &id,
        ProducerIdentity {
            producer_id: 1,
            epoch: 0,
        },
    );
    match (broker_kind().as_deref(), answer) {
        (Some(kind @ ("nisshi" | "noida")), Ok(ended)) => {
            assert!(serves_end_txn);
            assert_eq!(ended, Ended::Committed, "{kind}'s answer to any EndTxn");
        }
        (kind, Err(err)) => {
            match &err {
                RecoveryError::Unsupported { api, .. } => {
                    assert!(!serves_end_txn, "{kind:?}: {err}");
                    assert_eq!(*api, "EndTxn");
                }
                RecoveryError::Broker { code, .. } => {
                    assert!(serves_end_txn && kind != Some("tansu"), "{err}");
                    assert_eq!(*code, 49, "INVALID_PRODUCER_ID_MAPPING: {err}");
                }
                other => panic!("{kind:?}: unexpected {other}"),
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
        (kind, Ok(ended)) => panic!("{kind:?} committed a transaction it never began: {ended:?}"),
    }
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
    if !transactions_or_skip(
        &b,
        "a_completed_checkpoints_transactions_are_committed_on_recovery",
    ) {
        return;
    }
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

/// On a broker that initialises transactional producers but serves no
/// `EndTxn` (tansu 0.6): pre-commit checkpoints the transaction with the
/// producer id and epoch librdkafka's statistics report, a second
/// attempt's transaction on the same id has another (producer id, epoch)
/// — so an `EndTxn` for the first can never end the second — and the
/// restore that must commit the first fails with one line naming the
/// missing `EndTxn`, not a hang and not a silent abort. Skipped where
/// `InitProducerId` is refused (nisshi 0.8.1), and where `EndTxn` is
/// served (the restore then commits: see the test above).
#[test]
fn a_restore_without_end_txn_on_the_broker_fails_in_one_line() {
    use floe::connectors::kafka_sink::KafkaTxn;
    use floe::connectors::two_phase::{TwoPhaseCommitSink, TwoPhaseCommitSinkOp};
    use floe::operators::{Operator, RestoredState};
    let test = "a_restore_without_end_txn_on_the_broker_fails_in_one_line";
    let Some(b) = broker() else { return };
    let topic = unique("sink-no-endtxn");
    create_topic(&b, &topic, 1);
    let prefix = unique("no-endtxn");
    let sink = KafkaSink::<String>::lines(&b, &topic)
        .transactional_id_prefix(&prefix)
        .request_timeout(Duration::from_secs(10))
        .exactly_once();
    let mut probe = sink.clone();
    if let Err(e) = TwoPhaseCommitSink::<String>::open(&mut probe, &ctx()) {
        eprintln!("{test} SKIPPED: the broker initialises no transactional producer ({e})");
        return;
    }
    let client =
        floe::connectors::kafka::txn_recovery::CoordinatorClient::new(&b, Duration::from_secs(10));
    if client
        .api_versions()
        .expect("ApiVersions answers")
        .apis
        .iter()
        .any(|r| r.api == 26)
    {
        eprintln!("{test} SKIPPED: the broker serves EndTxn");
        return;
    }
    let snapshot = |n| SnapshotContext {
        checkpoint: floe::CheckpointId(n),
        savepoint: false,
        max_parallelism: 128,
        key_groups: 0..128,
    };
    let txn_of = |union_list: &[Vec<u8>]| -> KafkaTxn {
        assert_eq!(union_list.len(), 1, "one pending transaction");
        let (_, txn): (u64, KafkaTxn) = postcard::from_bytes(&union_list[0]).expect("decodes");
        txn
    };
    let records: Vec<Record<String>> = (0..10).map(|i| Record::new(format!("r{i},{i}"))).collect();
    let mut first = TwoPhaseCommitSinkOp::new(sink.clone(), ctx());
    first.write_batch(records.clone()).expect("writes");
    let first_txn = txn_of(
        &first
            .snapshot_state(&snapshot(1))
            .expect("pre-commits")
            .union_list,
    );
    let p1 = first_txn.producer.expect("pre-commit knows the producer");
    assert!(p1.producer_id >= 0 && p1.epoch >= 0, "{p1:?}");
    drop(first);
    // A second attempt: its open re-initialises the ids, its first
    // transaction uses the first one's id again.
    let mut second = TwoPhaseCommitSinkOp::new(sink.clone(), ctx());
    second.write_batch(records).expect("writes");
    let state = second.snapshot_state(&snapshot(1)).expect("pre-commits");
    let second_txn = txn_of(&state.union_list);
    assert_eq!(second_txn.transactional_id, first_txn.transactional_id);
    let p2 = second_txn.producer.expect("pre-commit knows the producer");
    assert_ne!(
        p1, p2,
        "a re-initialised id has another producer id or epoch"
    );
    drop(second);

    let mut restored = TwoPhaseCommitSinkOp::new(sink.clone(), ctx());
    let err = restored
        .restore_state(RestoredState {
            union_list: state.union_list,
            ..Default::default()
        })
        .expect_err("EndTxn is not served");
    let line = err.to_string();
    eprintln!("{line}");
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.contains(&second_txn.transactional_id) && line.contains("EndTxn"),
        "{line}"
    );
    assert!(!err.is_retriable(), "no restart mends it: {line}");
}
