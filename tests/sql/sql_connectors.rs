//! `floe sql` against the real servers of `scripts/services.sh` (Apache
//! Kafka, PostgreSQL), each result against an oracle computed here:
//!
//! - Kafka (json) → `TUMBLE` window aggregate → Kafka (csv, exactly once):
//!   the topic read back `read_committed` holds each window's row once;
//! - a Kafka table's watermark per partition: two partitions far apart in
//!   event time, read by one subtask, lose no row to lateness; an empty
//!   partition holds it back until `table.exec.source.idle-timeout`;
//! - a non-windowed `GROUP BY` (every aggregate, a decimal, a timestamp)
//!   into `jdbc` PostgreSQL by its primary key, through the two-phase
//!   commit: the table equals a HashMap oracle; with `HAVING`, the keys that
//!   stopped holding are deleted;
//! - a `GROUP BY` into `upsert-kafka`: the topic's compacted view (the last
//!   record per key, a tombstone removing it) equals the oracle;
//! - Kafka (csv) → `GROUP BY` → PostgreSQL, the `floe sql` process killed
//!   with `kill -9` three times after checkpoints completed and resumed
//!   with `--resume`: the table equals the oracle, no prepared transaction
//!   is left.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support;

use floe::text::mix64;
use kafka_support::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn run_ok(args: &[String]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "floe {args:?}:\n{stderr}");
    stderr
}

/// `2024-03-01 HH:mm:ss[.fff]` at `ms` after midnight, the fraction's
/// trailing zeros dropped (Flink's SQL timestamp text).
fn timestamp(ms: i64) -> String {
    let s = ms / 1000;
    let mut text = format!(
        "2024-03-01 {:02}:{:02}:{:02}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    );
    if ms % 1000 != 0 {
        text.push('.');
        text.push_str(format!("{:03}", ms % 1000).trim_end_matches('0'));
    }
    text
}

#[test]
fn kafka_json_window_into_kafka_exactly_once() {
    let Some(b) = broker() else {
        return;
    };
    let (input, output) = (unique("sql-clicks"), unique("sql-per-minute"));
    create_topic(&b, &input, 2);
    create_topic(&b, &output, 1);
    // Rows over ten minutes, out of order by up to 5 s; nothing is late for
    // a watermark an hour behind, so every window counts every row.
    let mut lines = Vec::new();
    let mut windows: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for i in 0..3000u64 {
        let h = mix64(i ^ 0x77);
        let ms = (i as i64 * 200 + (h % 5000) as i64).max(0);
        let user = format!("u{}", h % 5);
        let amount = ((h >> 16) % 100) as i64;
        lines.push(format!(
            r#"{{"user_id":"{user}","amount":{amount},"ts":"{}"}}"#,
            timestamp(ms)
        ));
        let w = windows.entry((user, ms - ms % 60_000)).or_default();
        w.0 += 1;
        w.1 += amount;
    }
    produce(&b, &input, 2, &lines);
    let want: Vec<String> = windows
        .iter()
        .map(|((user, start), (n, sum))| format!("{user},\"{}\",{n},{sum}", timestamp(*start)))
        .collect();
    let script = format!(
        "CREATE TABLE clicks (user_id STRING, amount INT, ts TIMESTAMP(3),\n\
           WATERMARK FOR ts AS ts - INTERVAL '1' HOUR)\n\
         WITH ('connector' = 'kafka', 'topic' = '{input}', 'properties.bootstrap.servers' = '{b}',\n\
           'properties.group.id' = 'sql-test', 'scan.startup.mode' = 'earliest-offset',\n\
           'scan.bounded.mode' = 'latest-offset', 'format' = 'json');\n\
         CREATE TABLE per_minute (user_id STRING, minute TIMESTAMP(3), clicks BIGINT, total INT)\n\
         WITH ('connector' = 'kafka', 'topic' = '{output}', 'properties.bootstrap.servers' = '{b}',\n\
           'format' = 'csv', 'sink.delivery-guarantee' = 'exactly-once',\n\
           'sink.transactional-id-prefix' = '{output}');\n\
         INSERT INTO per_minute SELECT user_id, window_start, COUNT(*), SUM(amount)\n\
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n\
         GROUP BY window_start, window_end, user_id;"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    run_ok(&strings(&[
        "sql",
        "-e",
        &script,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        ckpt.to_str().expect("UTF-8"),
    ]));
    let mut got = read_all(&b, &output);
    got.sort();
    assert_eq!(got, want);
}

/// A `kafka` table's watermark is made per partition, as Flink's
/// `KafkaSource` makes it (the table's watermark pushed into the source):
/// two partitions read by one subtask, each in event-time order, one an
/// hour ahead of the other. The slow partition's rows are behind the fast
/// one's by far more than the delay, yet none is late: the subtask's
/// watermark is the least of its partitions'. A watermark made over the
/// subtask's rows together would follow the fast partition and drop the
/// slow one's rows read after it (the small fetches interleave the two).
#[test]
fn a_kafka_tables_watermark_is_per_partition() {
    use floe::StreamExecutionEnvironment;
    use floe::sql::{SqlSession, Value};
    let Some(b) = broker() else {
        return;
    };
    let topic = unique("sql-partition-watermarks");
    create_topic(&b, &topic, 2);
    // Line i goes to partition i % 2: even lines slow, odd lines fast.
    let mut lines = Vec::new();
    let mut want: HashMap<(String, i64), i64> = HashMap::new();
    for i in 0..6000u64 {
        let h = mix64(i ^ 0x5ca1);
        let ts = (i / 2) as i64 * 100 + if i % 2 == 1 { 3_600_000 } else { 0 };
        let (name, amount) = (format!("n{}", h % 3), ((h >> 8) % 100) as i64);
        lines.push(format!("{name},{amount},{}", timestamp(ts)));
        *want.entry((name, ts - ts % 10_000)).or_default() += amount;
    }
    // Written a few hundred lines at a time, each partition's records are
    // many small batches, and the fetches of at most 2 kB a partition
    // return the two partitions' batches in turn.
    for chunk in lines.chunks(400) {
        produce(&b, &topic, 2, chunk);
    }
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let mut session = SqlSession::new(&env);
    session
        .plan_sql(&format!(
            "CREATE TABLE events (name STRING, amount INT, ts TIMESTAMP(3),\n\
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)\n\
             WITH ('connector' = 'kafka', 'topic' = '{topic}',\n\
               'properties.bootstrap.servers' = '{b}', 'scan.startup.mode' = 'earliest-offset',\n\
               'scan.bounded.mode' = 'latest-offset', 'format' = 'csv',\n\
               'scan.watermark.emit.strategy' = 'on-event',\n\
               'properties.max.partition.fetch.bytes' = '2048');"
        ))
        .expect("the table is created");
    let query = "SELECT name, window_start, SUM(amount) FROM TABLE(TUMBLE(TABLE events, \
                 DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, name";
    // The plan shows the watermark in the source, as Flink's does.
    let explained = session
        .plan_sql(&format!("EXPLAIN {query}"))
        .expect("explains");
    let plan = &explained.explains[0];
    assert!(
        plan.contains("TableSourceScan(table=[events, watermark=[ts - INTERVAL '1' SECOND]]")
            && !plan.contains("WatermarkAssigner"),
        "{plan}"
    );
    let windows = session.query_to_stream(query).expect("the query plans");
    let rows = windows.stream.collect();
    env.execute().expect("the job runs");
    let got: HashMap<(String, i64), i64> = rows
        .take()
        .into_iter()
        .map(|r| match r.as_slice() {
            [Value::Str(name), Value::Timestamp(start), Value::Int(sum)] => (
                (name.to_string(), start.rem_euclid(86_400_000)),
                i64::from(*sum),
            ),
            other => panic!("unexpected row {other:?}"),
        })
        .collect();
    assert_eq!(got.len(), want.len(), "windows");
    assert_eq!(got, want);
}

/// A partition without rows holds a `kafka` table's watermark back, as in
/// Flink, until `table.exec.source.idle-timeout` makes it idle: one of two
/// partitions gets every row, the other none, and the source reads on
/// (unbounded). The windows of the first 100 s fire once rows past them
/// arrive (more are written until they fire) and equal the windows of
/// those rows computed here; without the idle timeout none would fire.
#[test]
fn an_empty_kafka_partition_stops_holding_the_watermark_when_idle() {
    use floe::StreamExecutionEnvironment;
    use floe::sql::{SqlSession, Value};
    let Some(b) = broker() else {
        return;
    };
    let topic = unique("sql-idle-partition");
    create_topic(&b, &topic, 2);
    let line = |i: i64| {
        let h = mix64(i as u64 ^ 0x1d1e);
        let amount = (h % 100) as i64;
        (format!("n,{amount},{}", timestamp(i * 100)), amount)
    };
    // Rows every 100 ms from 0 s on, all into partition 0.
    let mut want: HashMap<i64, (i64, i64)> = HashMap::new();
    let first: Vec<String> = (0..1000)
        .map(|i| {
            let (text, amount) = line(i);
            let w = want.entry(i * 100 - i * 100 % 10_000).or_default();
            w.0 += 1;
            w.1 += amount;
            text
        })
        .collect();
    produce(&b, &topic, 1, &first);
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let mut session = SqlSession::new(&env);
    session
        .plan_sql(&format!(
            "SET 'table.exec.source.idle-timeout' = '100 ms';\n\
             CREATE TABLE events (name STRING, amount INT, ts TIMESTAMP(3),\n\
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)\n\
             WITH ('connector' = 'kafka', 'topic' = '{topic}',\n\
               'properties.bootstrap.servers' = '{b}', 'scan.startup.mode' = 'earliest-offset',\n\
               'format' = 'csv');"
        ))
        .expect("the table is created");
    let windows = session
        .query_to_stream(
            "SELECT window_start, COUNT(*), SUM(amount) FROM TABLE(TUMBLE(TABLE events, \
             DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
        )
        .expect("the query plans");
    let rows = windows.stream.collect();
    let job = env.execute_async().expect("the job starts");
    // Rows past the first 100 s, 10 s of them at a time, until the first
    // ten windows fired.
    let mut next = 1000;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while rows.len() < want.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} windows fired in 60 s",
            rows.len(),
            want.len()
        );
        let more: Vec<String> = (next..next + 100).map(|i| line(i).0).collect();
        produce(&b, &topic, 1, &more);
        next += 100;
        let waited = std::time::Instant::now() + Duration::from_millis(500);
        while rows.len() < want.len() && std::time::Instant::now() < waited {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = futures::executor::block_on(job.cancel_and_wait(Duration::from_secs(30)));
    let got: HashMap<i64, (i64, i64)> = rows
        .take()
        .into_iter()
        .filter_map(|r| match r.as_slice() {
            [Value::Timestamp(start), Value::BigInt(n), Value::Int(sum)] => {
                let start = start.rem_euclid(86_400_000);
                (start < 100_000).then_some((start, (*n, i64::from(*sum))))
            }
            other => panic!("unexpected row {other:?}"),
        })
        .collect();
    assert_eq!(got, want);
}

/// Seeded `name,amount,ts` rows: amounts in cents, times in ms.
fn rows(n: u64, names: u64, seed: u64) -> Vec<(String, i64, i64)> {
    (0..n)
        .map(|i| {
            let h = mix64(i ^ seed);
            (
                format!("u{}", h % names),
                ((h >> 12) % 10_000) as i64,
                ((h >> 32) % 86_400_000) as i64,
            )
        })
        .collect()
}

/// A group's aggregates, as Flink computes them.
#[derive(Default)]
struct Acc {
    count: i64,
    cents: i64,
    min: i64,
    max_ts: i64,
    distinct: HashSet<i64>,
}

impl Acc {
    fn add(&mut self, cents: i64, ts: i64) {
        self.min = if self.count == 0 {
            cents
        } else {
            self.min.min(cents)
        };
        self.max_ts = if self.count == 0 {
            ts
        } else {
            self.max_ts.max(ts)
        };
        self.count += 1;
        self.cents += cents;
        self.distinct.insert(cents / 100);
    }
}

fn aggregate(rows: &[(String, i64, i64)]) -> HashMap<String, Acc> {
    let mut accs: HashMap<String, Acc> = HashMap::new();
    for (k, c, ts) in rows {
        accs.entry(k.clone()).or_default().add(*c, *ts);
    }
    accs
}

fn write_rows(path: &std::path::Path, rows: &[(String, i64, i64)]) {
    let text: String = rows
        .iter()
        .map(|(k, c, ts)| format!("{k},{}.{:02},{}\n", c / 100, c % 100, timestamp(*ts)))
        .collect();
    std::fs::write(path, text).expect("write the input");
}

fn csv_source(path: &std::path::Path) -> String {
    format!(
        "CREATE TABLE clicks (name STRING, amount DECIMAL(6, 2), ts TIMESTAMP(3)) WITH (\n\
           'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n",
        path.display()
    )
}

#[test]
fn group_by_into_jdbc_upserts_by_the_primary_key() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = rows(3000, 40, 0xdb);
    write_rows(&input, &data);
    let (host_port, db) = pg
        .rsplit_once('@')
        .map(|(_, rest)| rest.split_once('/').expect("a database"))
        .expect("a URL with credentials");
    for (table, having) in [("sql_all", ""), ("sql_having", " HAVING MIN(amount) >= 1")] {
        let table = format!("{table}_{}", std::process::id());
        query(&pg, &format!("DROP TABLE IF EXISTS {table}"));
        query(
            &pg,
            &format!(
                "CREATE TABLE {table} (name text PRIMARY KEY, n bigint, total numeric(20, 2), \
                 lo numeric(6, 2), last_ts timestamp, kinds bigint)"
            ),
        );
        let script = format!(
            "{}CREATE TABLE counts (name STRING, n BIGINT, total DECIMAL(38, 2), lo DECIMAL(6, 2),\n\
               last_ts TIMESTAMP(3), kinds BIGINT, PRIMARY KEY (name) NOT ENFORCED) WITH (\n\
               'connector' = 'jdbc', 'url' = 'jdbc:postgresql://{host_port}/{db}',\n\
               'table-name' = '{table}', 'username' = 'floe', 'password' = 'floe');\n\
             INSERT INTO counts SELECT name, COUNT(*), SUM(amount), MIN(amount), MAX(ts),\n\
               COUNT(DISTINCT CAST(amount AS INT)) FROM clicks GROUP BY name{having};",
            csv_source(&input)
        );
        let ckpt = dir.path().join(format!("ckpt-{table}"));
        run_ok(&strings(&[
            "sql",
            "-e",
            &script,
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            ckpt.to_str().expect("UTF-8"),
        ]));
        let got: BTreeMap<String, String> = query(
            &pg,
            &format!(
                "SELECT name, n::text || '|' || total::text || '|' || lo::text || '|' || \
                 to_char(last_ts, 'YYYY-MM-DD HH24:MI:SS.MS') || '|' || kinds::text FROM {table}"
            ),
        )
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect();
        let cents = |c: i64| format!("{}.{:02}", c / 100, c % 100);
        let want: BTreeMap<String, String> = aggregate(&data)
            .into_iter()
            .filter(|(_, a)| having.is_empty() || a.min >= 100)
            .map(|(k, a)| {
                let ms = a.max_ts;
                let ts = format!(
                    "2024-03-01 {:02}:{:02}:{:02}.{:03}",
                    ms / 3_600_000,
                    ms / 60_000 % 60,
                    ms / 1000 % 60,
                    ms % 1000
                );
                (
                    k,
                    format!(
                        "{}|{}|{}|{ts}|{}",
                        a.count,
                        cents(a.cents),
                        cents(a.min),
                        a.distinct.len()
                    ),
                )
            })
            .collect();
        if !having.is_empty() {
            assert!(want.len() < aggregate(&data).len(), "HAVING removes no key");
        }
        assert_eq!(got, want, "table {table}");
        query(&pg, &format!("DROP TABLE {table}"));
    }
}

/// Every record of `topic` (key, value; `None`: a tombstone), in order per
/// partition.
fn read_keyed(broker: &str, topic: &str) -> Vec<(String, Option<String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "floe-tests")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Offset(low))
        .expect("partition");
    consumer.assign(&list).expect("assign");
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut next = low;
    while next < high {
        assert!(
            std::time::Instant::now() < deadline,
            "{topic} not read in 60 s"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("record");
            next = m.offset() + 1;
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
            out.push((
                key,
                m.payload().map(|p| String::from_utf8_lossy(p).into_owned()),
            ));
        }
    }
    out
}

#[test]
fn group_by_into_upsert_kafka_compacts_to_the_oracle() {
    let Some(b) = broker() else {
        return;
    };
    let topic = unique("sql-upsert");
    create_topic(&b, &topic, 1);
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = rows(2000, 30, 0x0b5);
    write_rows(&input, &data);
    let script = format!(
        "{}CREATE TABLE counts (name STRING, n BIGINT, lo DECIMAL(6, 2),\n\
           PRIMARY KEY (name) NOT ENFORCED) WITH ('connector' = 'upsert-kafka',\n\
           'topic' = '{topic}', 'properties.bootstrap.servers' = '{b}',\n\
           'key.format' = 'json', 'value.format' = 'json');\n\
         INSERT INTO counts SELECT name, COUNT(*), MIN(amount) FROM clicks GROUP BY name\n\
           HAVING MIN(amount) >= 1;",
        csv_source(&input)
    );
    run_ok(&strings(&["sql", "-e", &script, "--parallelism", "2"]));
    let records = read_keyed(&b, &topic);
    assert!(
        records.iter().any(|(_, v)| v.is_none()),
        "no tombstone: the HAVING removed no key"
    );
    let mut view: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in records {
        match v {
            Some(v) => view.insert(k, v),
            None => view.remove(&k),
        };
    }
    let want: BTreeMap<String, String> = aggregate(&data)
        .into_iter()
        .filter(|(_, a)| a.min >= 100)
        .map(|(k, a)| {
            (
                format!(r#"{{"name":"{k}"}}"#),
                format!(
                    r#"{{"name":"{k}","n":{},"lo":{}.{:02}}}"#,
                    a.count,
                    a.min / 100,
                    a.min % 100
                ),
            )
        })
        .collect();
    assert_eq!(view, want);
}

#[test]
fn kafka_to_postgres_sql_survives_kill_9_exactly() {
    let (Some(b), Some(pg)) = (broker(), postgres_url()) else {
        return;
    };
    let topic = unique("sql-pg-in");
    create_topic(&b, &topic, 4);
    let mut lines = Vec::new();
    let mut oracle: HashMap<String, (i64, i64)> = HashMap::new();
    for i in 0..20_000u64 {
        let h = mix64(i ^ 0xc4a5);
        let (name, amount) = (format!("k{}", h % 500), ((h >> 20) % 1000) as i64);
        lines.push(format!("{name},{amount}"));
        let e = oracle.entry(name).or_default();
        e.0 += 1;
        e.1 += amount;
    }
    produce(&b, &topic, 4, &lines);
    let table = format!("sql_kill_{}", std::process::id());
    query(&pg, &format!("DROP TABLE IF EXISTS {table}"));
    query(
        &pg,
        &format!("CREATE TABLE {table} (name text PRIMARY KEY, n bigint, total bigint)"),
    );
    let (host_port, db) = pg
        .rsplit_once('@')
        .map(|(_, rest)| rest.split_once('/').expect("a database"))
        .expect("a URL with credentials");
    let script = format!(
        "CREATE TABLE events (name STRING, amount BIGINT) WITH ('connector' = 'kafka',\n\
           'topic' = '{topic}', 'properties.bootstrap.servers' = '{b}',\n\
           'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',\n\
           'format' = 'csv');\n\
         CREATE TABLE totals (name STRING, n BIGINT, total BIGINT, PRIMARY KEY (name) NOT ENFORCED)\n\
         WITH ('connector' = 'jdbc', 'url' = 'jdbc:postgresql://{host_port}/{db}',\n\
           'table-name' = '{table}', 'username' = 'floe', 'password' = 'floe');\n\
         INSERT INTO totals SELECT name, COUNT(*), SUM(amount) FROM events GROUP BY name;"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    let args = strings(&[
        "sql",
        "-e",
        &script,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        ckpt.to_str().expect("UTF-8"),
        "--resume",
        "--sink-rate",
        "4000",
    ]);
    let mut kills = 0;
    for _ in 0..3 {
        if !kill_after_checkpoints(&args, 2) {
            break;
        }
        kills += 1;
    }
    assert_eq!(kills, 3, "the input ended before three kills");
    let stderr = run_ok(&args);
    assert!(
        stderr.contains("resume: from the newest intact checkpoint"),
        "{stderr}"
    );
    let got: HashMap<String, (i64, i64)> =
        query(&pg, &format!("SELECT name, n, total FROM {table}"))
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    (r.get::<_, i64>(1), r.get::<_, i64>(2)),
                )
            })
            .collect();
    assert_eq!(got, oracle);
    let left: Vec<String> = query(&pg, "SELECT gid FROM pg_prepared_xacts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|g| g.contains(&table))
        .collect();
    assert!(left.is_empty(), "prepared transactions left: {left:?}");
    query(&pg, &format!("DROP TABLE {table}"));
}
