//! `upsert-kafka` (the Apache Kafka of `scripts/services.sh`) as the sink
//! of `SELECT COUNT(*) AS cnt, name .. GROUP BY name` keyed by `cnt`, so
//! through a `SinkUpsertMaterializer`. The topic is read as Flink's
//! `upsert-kafka` source reads it: records folded by key in offset order,
//! the last value winning and a tombstone deleting its key (transactional
//! output read `read_committed`, so only committed transactions count):
//!
//! - at one subtask, exactly once (transactions with the checkpoints) and
//!   at least once (no checkpoints): the fold equals what Flink's
//!   materializer makes of the aggregate's changelog (replayed here with a
//!   HashMap);
//! - under `NONE`: the fold equals the changelog folded straight by the
//!   primary key (a `-U` is a tombstone of its sink key), which differs;
//! - at two subtasks, exactly once (the order in which groups meet in a
//!   sink key is then free): the fold's keys are the final counts, each
//!   holding a group whose final count it is.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support::*;
use crate::upsert_oracle::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The upsert view of `topic`: each record folded by key in offset order
/// (per partition), a tombstone deleting its key; read `read_committed`
/// once the transactions open at the call have ended.
fn upsert_view(broker: &str, topic: &str) -> BTreeMap<String, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "floe-tests")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let partitions = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata")
        .topics()[0]
        .partitions()
        .len() as i32;
    let mut ends = HashMap::new();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, end) = settled(broker, topic, p, Duration::from_secs(10));
        if end > 0 {
            ends.insert(p, end);
            list.add_partition_offset(topic, p, Offset::Beginning)
                .expect("partition");
        }
    }
    consumer.assign(&list).expect("assign");
    let mut view = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ends.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{topic} not read in 60 s"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(m) => {
                let m = m.expect("record");
                let key = String::from_utf8_lossy(m.key().expect("a key")).into_owned();
                match m.payload() {
                    Some(v) => view.insert(key, String::from_utf8_lossy(v).into_owned()),
                    None => view.remove(&key),
                };
            }
            // The last offsets may be transaction markers, which a
            // read_committed reader passes without handing them out.
            None => {
                for e in consumer.position().expect("positions").elements() {
                    if let (Offset::Offset(next), Some(end)) =
                        (e.offset(), ends.get(&e.partition()))
                        && next >= *end
                    {
                        ends.remove(&e.partition());
                    }
                }
            }
        }
    }
    view
}

/// `(cnt, name)` rows keyed by `cnt` as the json key and value records of
/// the sink.
fn as_json(table: &BTreeMap<Vec<String>, Vec<String>>) -> BTreeMap<String, String> {
    table
        .values()
        .map(|r| {
            (
                format!(r#"{{"cnt":{}}}"#, r[0]),
                format!(r#"{{"cnt":{},"name":"{}"}}"#, r[0], r[1]),
            )
        })
        .collect()
}

/// Runs `{settings}INSERT INTO counts ..` from the CSV `input` into a new
/// topic of one partition, with `extra` arguments and sink options; the
/// topic's upsert view.
fn run_into_topic(
    b: &str,
    input: &std::path::Path,
    (settings, sink_options): (&str, &str),
    extra: &[String],
) -> BTreeMap<String, String> {
    let topic = unique("sql-mat-upsert");
    create_topic(b, &topic, 1);
    let sink_options = sink_options.replace("{topic}", &topic);
    let script = format!(
        "{settings}CREATE TABLE clicks (name STRING, region STRING) WITH (\n\
           'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE counts (cnt BIGINT, name STRING, PRIMARY KEY (cnt) NOT ENFORCED) WITH (\n\
           'connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{b}',\n\
           'key.format' = 'json', 'value.format' = 'json'{sink_options});\n\
         INSERT INTO counts SELECT COUNT(*) AS cnt, name FROM clicks GROUP BY name;",
        input.display()
    );
    let mut args: Vec<String> = vec!["sql".into(), "-e".into(), script];
    args.extend(extra.iter().cloned());
    let out = run(&args);
    assert!(
        out.status.success(),
        "floe {extra:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    upsert_view(b, &topic)
}

const EXACTLY_ONCE: &str = ", 'sink.delivery-guarantee' = 'exactly-once', \
                            'sink.transactional-id-prefix' = '{topic}'";

#[test]
fn materialized_counts_into_upsert_kafka_fold_to_the_oracle() {
    let Some(b) = broker() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = clicks(800, 30, 3);
    std::fs::write(&input, csv(&data)).expect("write the input");
    // The changelog's rows are [name, cnt]; the sink's columns (cnt, name),
    // keyed by cnt.
    let changes: Vec<Change> = count_changelog(&data, |r| vec![r.0.clone()])
        .into_iter()
        .map(|(kind, row)| (kind, vec![row[1].clone(), row[0].clone()]))
        .collect();
    let want = as_json(&materialize(&changes, &[0], &[1]));
    let unmaterialized = as_json(&upsert_table(&changes, &[0]));
    assert_ne!(want, unmaterialized, "the input needs the materializer");
    let checkpoints = |name: &str| {
        let ckpt = dir.path().join(name);
        [
            "--checkpoint-interval".to_string(),
            "20".to_string(),
            "--checkpoint-dir".to_string(),
            ckpt.to_str().expect("UTF-8").to_string(),
        ]
    };
    let one = ["--parallelism", "1"];
    let with = |a: &[&str], b: &[String]| -> Vec<String> {
        a.iter()
            .map(|s| s.to_string())
            .chain(b.iter().cloned())
            .collect()
    };

    let args = with(&one, &checkpoints("ckpt-1"));
    let got = run_into_topic(&b, &input, ("", EXACTLY_ONCE), &args);
    assert_eq!(got, want, "exactly once, one subtask");
    let got = run_into_topic(&b, &input, ("", ""), &with(&one, &[]));
    assert_eq!(got, want, "at least once, one subtask");
    let none = "SET 'table.exec.sink.upsert-materialize' = 'NONE';\n";
    let got = run_into_topic(&b, &input, (none, ""), &with(&one, &[]));
    assert_eq!(got, unmaterialized, "NONE");

    // Two subtasks: each sink key holds a group whose final count it is.
    let mut finals: HashMap<String, u64> = HashMap::new();
    for (name, _) in &data {
        *finals.entry(name.clone()).or_default() += 1;
    }
    let two = ["--parallelism", "2"];
    let args = with(&two, &checkpoints("ckpt-2"));
    let got = run_into_topic(&b, &input, ("", EXACTLY_ONCE), &args);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "two subtasks: the final counts"
    );
    for (key, value) in &got {
        let holds = finals.iter().any(|(name, n)| {
            *key == format!(r#"{{"cnt":{n}}}"#)
                && *value == format!(r#"{{"cnt":{n},"name":"{name}"}}"#)
        });
        assert!(holds, "{key} holds {value}, no group's final count");
    }
}
