//! The Kafka source against Apache Kafka (`FLOE_TEST_KAFKA`), driven
//! directly: partitions split by Flink's owner rule, offsets snapshotted
//! and restored at another parallelism (every record exactly once across
//! the cut), offsets committed to the group on checkpoint completion (as
//! Kafka's `kafka-consumer-groups --describe` shows them), bounded and latest starts, and a topic created
//! after the start found by periodic discovery, a timestamp start, and an
//! idle partition that stops holding the watermark back.

#![cfg(feature = "kafka")]

use crate::kafka_support;

use floe::CheckpointId;
use floe::connectors::kafka::{KafkaSource, KafkaSourceReader, StartingOffsets, partition_owner};
use floe::connectors::{SourceContext, SourceFunction, SourcePoll};
use floe_actors::ids::SubtaskIndex;
use kafka_support::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn ctx(subtask: usize, parallelism: usize) -> SourceContext {
    SourceContext {
        subtask: SubtaskIndex(subtask as _),
        parallelism,
        seed: 0,
    }
}

/// Polls until `want` more records came or the source finished.
fn read(reader: &mut KafkaSourceReader<String>, want: usize) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut batch = Vec::new();
        let poll = reader
            .poll_batch(want.saturating_sub(out.len()).clamp(1, 64), &mut batch)
            .expect("polls");
        out.extend(batch.into_iter().map(|r| r.value));
        match poll {
            SourcePoll::Finished => return (out, true),
            _ if out.len() >= want => return (out, false),
            SourcePoll::Wait(d) => std::thread::sleep(d),
            SourcePoll::Ready | SourcePoll::Parked => {}
        }
        assert!(Instant::now() < deadline, "no progress in 60 s");
    }
}

/// Records `p{partition}-{i}` in each of `partitions` partitions.
fn tagged(broker: &str, topic: &str, partitions: i32, per_partition: usize) -> Vec<String> {
    let lines: Vec<String> = (0..per_partition * partitions as usize)
        .map(|i| format!("p{}-{}", i as i32 % partitions, i / partitions as usize))
        .collect();
    produce(broker, topic, partitions, &lines);
    lines
}

#[test]
fn partitions_follow_the_owner_rule_and_offsets_restore_at_another_parallelism() {
    let Some(b) = broker() else { return };
    let topic = unique("src-rescale");
    create_topic(&b, &topic, 4);
    let all = tagged(&b, &topic, 4, 50);
    let source = KafkaSource::lines(&b, &[&topic]).bounded(true);

    // Two subtasks read part of their partitions, then checkpoint.
    let mut seen: Vec<String> = Vec::new();
    let mut split = Vec::new();
    let mut union = Vec::new();
    for subtask in 0..2 {
        let mut reader = source.reader(&ctx(subtask, 2)).expect("reader");
        let (records, _) = read(&mut reader, 30);
        for r in &records {
            let partition: i32 = r[1..r.find('-').expect("tag")].parse().expect("partition");
            assert_eq!(partition_owner(&topic, partition, 2), subtask, "{r}");
        }
        seen.extend(records);
        split.extend(reader.snapshot_state().expect("snapshot"));
        union.extend(
            reader
                .snapshot_union_state(CheckpointId(1))
                .expect("snapshot"),
        );
    }
    assert_eq!(split.len(), 4, "one position per partition");

    // Three subtasks get the positions dealt out and read to the end.
    for subtask in 0..3 {
        let mut reader = source.reader(&ctx(subtask, 3)).expect("reader");
        let share: Vec<Vec<u8>> = split.iter().skip(subtask).step_by(3).cloned().collect();
        reader.restore_union_state(union.clone()).expect("restore");
        reader.restore_state(share).expect("restore");
        let (records, finished) = read(&mut reader, usize::MAX);
        assert!(finished, "bounded: the subtask finishes");
        seen.extend(records);
    }
    let mut expected = all.clone();
    expected.sort();
    seen.sort();
    assert_eq!(seen, expected, "every record exactly once across the cut");
}

#[test]
fn completed_checkpoints_commit_offsets_to_the_group() {
    let Some(b) = broker() else { return };
    let topic = unique("src-commit");
    create_topic(&b, &topic, 2);
    tagged(&b, &topic, 2, 20);
    let group = unique("group");
    let source = KafkaSource::lines(&b, &[&topic])
        .group_id(&group)
        .bounded(true);
    let mut reader = source.reader(&ctx(0, 1)).expect("reader");
    read(&mut reader, 15);
    reader.snapshot_state().expect("snapshot");
    reader
        .snapshot_union_state(CheckpointId(7))
        .expect("snapshot");
    let positions: HashMap<i32, i64> = reader
        .positions()
        .into_iter()
        .map(|(_, p, o)| (p, o))
        .collect();
    // More records after the checkpoint: not committed.
    read(&mut reader, 10);
    reader
        .notify_checkpoint_complete(CheckpointId(7))
        .expect("commit");

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("group.id", &group)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition(&topic, 0);
    list.add_partition(&topic, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed = consumer
            .committed_offsets(list.clone(), Duration::from_secs(10))
            .expect("committed offsets");
        let got: HashMap<i32, i64> = committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect();
        if got == positions {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "committed {got:?}, checkpointed {positions:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Kafka's own tooling (`kafka-consumer-groups --describe`) sees them:
    // per partition the checkpointed offset, the log end (20 records
    // each) and the lag between.
    let described = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &["--bootstrap-server", &b, "--describe", "--group", &group],
    );
    let mut rows: HashMap<i32, (i64, i64, i64)> = HashMap::new();
    for line in described.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 6 && cols[0] == group && cols[1] == topic {
            let n = |i: usize| cols[i].parse::<i64>().expect("a number");
            rows.insert(cols[2].parse().expect("a partition"), (n(3), n(4), n(5)));
        }
    }
    let expected: HashMap<i32, (i64, i64, i64)> = positions
        .iter()
        .map(|(&p, &o)| (p, (o, 20, 20 - o)))
        .collect();
    assert_eq!(
        rows, expected,
        "current offset, log end, lag per partition:\n{described}"
    );

    // A new source starting from the committed offsets reads the rest.
    let mut from_group = KafkaSource::lines(&b, &[&topic])
        .group_id(&group)
        .starting_offsets(StartingOffsets::Committed)
        .bounded(true)
        .reader(&ctx(0, 1))
        .expect("reader");
    let (rest, finished) = read(&mut from_group, usize::MAX);
    assert!(finished);
    let checkpointed: i64 = positions.values().sum();
    assert_eq!(rest.len() as i64, 40 - checkpointed);
}

#[test]
fn latest_reads_only_what_comes_after_the_start() {
    let Some(b) = broker() else { return };
    let topic = unique("src-latest");
    create_topic(&b, &topic, 1);
    tagged(&b, &topic, 1, 10);
    let mut reader = KafkaSource::lines(&b, &[&topic])
        .starting_offsets(StartingOffsets::Latest)
        .reader(&ctx(0, 1))
        .expect("reader");
    // The first poll assigns the partition at its end.
    let mut none = Vec::new();
    reader.poll_batch(10, &mut none).expect("polls");
    produce(&b, &topic, 1, &["after".to_string()]);
    let (records, _) = read(&mut reader, 1);
    assert_eq!(records, ["after"]);
}

#[test]
fn periodic_discovery_finds_a_topic_created_later() {
    let Some(b) = broker() else { return };
    let first = unique("src-disc-a");
    let later = unique("src-disc-b");
    create_topic(&b, &first, 1);
    tagged(&b, &first, 1, 5);
    let mut reader = KafkaSource::lines(&b, &[&first, &later])
        .discovery_interval(Some(Duration::from_millis(20)))
        .reader(&ctx(0, 1))
        .expect("reader");
    let (records, _) = read(&mut reader, 5);
    assert_eq!(records.len(), 5);
    create_topic(&b, &later, 2);
    produce(&b, &later, 2, &["x".to_string(), "y".to_string()]);
    let (mut records, _) = read(&mut reader, 2);
    records.sort();
    assert_eq!(records, ["x", "y"]);
}

#[test]
fn the_watermark_is_the_minimum_over_the_partitions() {
    let Some(b) = broker() else { return };
    let topic = unique("src-wm");
    create_topic(&b, &topic, 3);
    produce_at(&b, &topic, 0, &[("a", 1_000), ("b", 1_500), ("c", 1_200)]);
    produce_at(&b, &topic, 1, &[("d", 9_000), ("e", 8_000)]);
    let source = KafkaSource::lines(&b, &[&topic]).per_partition_watermarks(100, None);
    let mut reader = source.reader(&ctx(0, 1)).expect("reader");
    let (records, _) = read(&mut reader, 5);
    assert_eq!(records.len(), 5);
    // Partition 2 has no record yet: it holds the watermark back.
    assert_eq!(reader.watermark(), None);

    let topic = unique("src-wm2");
    create_topic(&b, &topic, 2);
    produce_at(&b, &topic, 0, &[("a", 1_000), ("b", 1_500), ("c", 1_200)]);
    produce_at(&b, &topic, 1, &[("d", 9_000), ("e", 8_000)]);
    let mut reader = KafkaSource::lines(&b, &[&topic])
        .per_partition_watermarks(100, None)
        .reader(&ctx(0, 1))
        .expect("reader");
    read(&mut reader, 5);
    // min(1500, 9000) - 100 - 1, as Flink's bounded out-of-orderness.
    assert_eq!(reader.watermark(), Some(1_399));
}

/// A restored subtask may checkpoint before its first poll (backpressured
/// from the start): that checkpoint carries the restored positions on, so a
/// restore from it reads each record once.
#[test]
fn a_checkpoint_before_the_first_poll_keeps_the_restored_positions() {
    let Some(b) = broker() else { return };
    let topic = unique("src-early-ckpt");
    create_topic(&b, &topic, 2);
    let all = tagged(&b, &topic, 2, 20);
    let source = KafkaSource::lines(&b, &[&topic]).bounded(true);

    let mut first = source.reader(&ctx(0, 1)).expect("reader");
    let (mut seen, _) = read(&mut first, 15);
    let split = first.snapshot_state().expect("snapshot");
    let union = first
        .snapshot_union_state(CheckpointId(1))
        .expect("snapshot");

    // Restored, then checkpointed at once: no poll in between.
    let mut early = source.reader(&ctx(0, 1)).expect("reader");
    early.restore_union_state(union).expect("restore");
    early.restore_state(split).expect("restore");
    let split = early.snapshot_state().expect("snapshot");
    let union = early
        .snapshot_union_state(CheckpointId(2))
        .expect("snapshot");
    assert_eq!(split.len(), 2, "one position per partition");

    let mut last = source.reader(&ctx(0, 1)).expect("reader");
    last.restore_union_state(union).expect("restore");
    last.restore_state(split).expect("restore");
    let (rest, finished) = read(&mut last, usize::MAX);
    assert!(finished, "bounded: the subtask finishes");
    seen.extend(rest);
    let mut expected = all;
    expected.sort();
    seen.sort();
    assert_eq!(
        seen, expected,
        "every record exactly once across both restores"
    );
}

/// A bounded subtask that finished is not in later checkpoints (it is
/// restored with empty state): its partitions, read to their end, are not
/// read again after a restore, whether another subtask was still running at
/// the checkpoint or every subtask had finished.
#[test]
fn a_finished_subtask_stays_finished_after_a_restore() {
    let Some(b) = broker() else { return };
    let topic = unique("src-finished");
    create_topic(&b, &topic, 4);
    let all = tagged(&b, &topic, 4, 20);
    let source = KafkaSource::lines(&b, &[&topic]).bounded(true);
    let owned = |subtask: usize| {
        (0..4)
            .filter(|p| partition_owner(&topic, *p, 2) == subtask)
            .count()
    };
    assert!(owned(0) > 0 && owned(1) > 0, "both subtasks read something");

    // Subtask 0 reads everything and finishes; subtask 1 reads part and
    // checkpoints (the finished subtask 0 is not snapshotted).
    let mut finished = source.reader(&ctx(0, 2)).expect("reader");
    let (mut seen, done) = read(&mut finished, usize::MAX);
    assert!(done, "bounded: the subtask finishes");
    let mut running = source.reader(&ctx(1, 2)).expect("reader");
    let (records, _) = read(&mut running, 5);
    seen.extend(records);
    let split = running.snapshot_state().expect("snapshot");
    let union = running
        .snapshot_union_state(CheckpointId(1))
        .expect("snapshot");

    // Restored: subtask 0 with empty split state, both with the union.
    let mut again = source.reader(&ctx(0, 2)).expect("reader");
    again.restore_union_state(union.clone()).expect("restore");
    again.restore_state(Vec::new()).expect("restore");
    let (records, done) = read(&mut again, usize::MAX);
    assert!(done, "bounded: the subtask finishes");
    assert_eq!(
        records,
        Vec::<String>::new(),
        "the finished subtask reads nothing again"
    );
    let mut rest = source.reader(&ctx(1, 2)).expect("reader");
    rest.restore_union_state(union).expect("restore");
    rest.restore_state(split).expect("restore");
    let (records, done) = read(&mut rest, usize::MAX);
    assert!(done, "bounded: the subtask finishes");
    seen.extend(records);
    let mut expected = all;
    expected.sort();
    seen.sort();
    assert_eq!(seen, expected, "every record exactly once");

    // Every subtask had finished: nothing at all in the checkpoint.
    for subtask in 0..2 {
        let mut again = source.reader(&ctx(subtask, 2)).expect("reader");
        again.restore_union_state(Vec::new()).expect("restore");
        again.restore_state(Vec::new()).expect("restore");
        let (records, done) = read(&mut again, usize::MAX);
        assert!(
            done && records.is_empty(),
            "subtask {subtask} read {records:?}"
        );
    }
}

/// `StartingOffsets::Timestamp(t)` starts each partition at its first
/// record stamped `t` or later (Kafka's offsets-for-times, as Flink's
/// `OffsetsInitializer.timestamp`); a partition with no such record starts
/// at its end.
#[test]
fn a_timestamp_start_reads_from_the_first_record_at_or_after_it() {
    let Some(b) = broker() else { return };
    let topic = unique("src-ts");
    create_topic(&b, &topic, 3);
    let stamped: Vec<Vec<(String, i64)>> = vec![
        (0..10)
            .map(|i| (format!("p0-{i}"), 1_000 + 100 * i))
            .collect(),
        (0..10)
            .map(|i| (format!("p1-{i}"), 1_450 + 10 * i))
            .collect(),
        (0..4).map(|i| (format!("p2-{i}"), 500 + i)).collect(),
    ];
    for (partition, records) in stamped.iter().enumerate() {
        let refs: Vec<(&str, i64)> = records.iter().map(|(v, t)| (v.as_str(), *t)).collect();
        produce_at(&b, &topic, partition as i32, &refs);
    }
    let start = 1_500;
    // The oracle: per partition, everything from the first record stamped
    // `start` or later.
    let mut expected: Vec<String> = stamped
        .iter()
        .flat_map(|records| {
            let first = records
                .iter()
                .position(|(_, t)| *t >= start)
                .unwrap_or(records.len());
            records[first..].iter().map(|(v, _)| v.clone())
        })
        .collect();
    expected.sort();

    let mut reader = KafkaSource::lines(&b, &[&topic])
        .starting_offsets(StartingOffsets::Timestamp(start))
        .bounded(true)
        .reader(&ctx(0, 1))
        .expect("reader");
    let (mut records, finished) = read(&mut reader, usize::MAX);
    assert!(finished, "bounded: the subtask finishes");
    records.sort();
    assert_eq!(records, expected);
}

/// An idle partition (no record for the idleness timeout) stops holding
/// the subtask's watermark back, as Flink's `withIdleness`: the watermark
/// becomes the active partition's.
#[test]
fn an_idle_partition_stops_holding_the_watermark_back() {
    let Some(b) = broker() else { return };
    let topic = unique("src-idle");
    create_topic(&b, &topic, 2);
    let out_of_orderness = 100;
    let idleness = Duration::from_millis(300);
    produce_at(&b, &topic, 1, &[("slow", 1_000)]);
    produce_at(&b, &topic, 0, &[("a", 5_000)]);
    let mut reader = KafkaSource::lines(&b, &[&topic])
        .per_partition_watermarks(out_of_orderness, Some(idleness))
        .reader(&ctx(0, 1))
        .expect("reader");
    read(&mut reader, 2);
    // Partition 0 gets a record each round, so it stays active; partition
    // 1 gets none and turns idle once the timeout has passed. Each check
    // follows a record read from partition 0 at once.
    let active_max = 6_000;
    let expected = active_max - out_of_orderness - 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rounds = 0;
    loop {
        produce_at(&b, &topic, 0, &[("b", active_max)]);
        read(&mut reader, 1);
        rounds += 1;
        if reader.watermark() == Some(expected) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle partition still holds the watermark at {:?} after {rounds} rounds",
            reader.watermark()
        );
        std::thread::sleep(idleness / 4);
    }
    // The idle partition's next record makes it active again: it holds the
    // watermark back once more (whether partition 0 is idle by then or not,
    // partition 1's is the smaller).
    produce_at(&b, &topic, 1, &[("late", 2_000)]);
    read(&mut reader, 1);
    assert_eq!(reader.watermark(), Some(2_000 - out_of_orderness - 1));
}

/// Partitions added to a topic the source already reads are found by the
/// periodic discovery (Flink's partition discovery) and read from their
/// start, the earlier partitions not read twice.
#[test]
fn periodic_discovery_finds_partitions_added_to_a_topic() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use rdkafka::client::DefaultClientContext;
    let Some(b) = broker() else { return };
    let topic = unique("src-disc-parts");
    create_topic(&b, &topic, 1);
    let before = tagged(&b, &topic, 1, 5);
    let mut reader = KafkaSource::lines(&b, &[&topic])
        .discovery_interval(Some(Duration::from_millis(20)))
        .reader(&ctx(0, 1))
        .expect("reader");
    let (mut records, _) = read(&mut reader, before.len());
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .create()
        .expect("admin client");
    let added = futures::executor::block_on(admin.create_partitions(
        &[NewPartitions::new(&topic, 3)],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ));
    assert!(
        matches!(added.as_deref(), Ok([Ok(_)])),
        "adding partitions failed: {added:?}"
    );
    let added = ["q1".to_string(), "q2".to_string()];
    produce_at(&b, &topic, 1, &[("q1", 1)]);
    produce_at(&b, &topic, 2, &[("q2", 2)]);
    let (more, _) = read(&mut reader, added.len());
    records.extend(more);
    let mut expected: Vec<String> = before.into_iter().chain(added).collect();
    expected.sort();
    records.sort();
    assert_eq!(
        records, expected,
        "every record once, the new partitions too"
    );
}
