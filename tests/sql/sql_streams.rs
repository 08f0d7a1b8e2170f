//! Tables and DataStreams mixed in one job: a `DataStream<Row>` registered
//! as a table (`SqlSession::register_stream`), a window query over it whose
//! rows come back as a DataStream (`SqlSession::query_to_stream`) and go on
//! through DataStream event-time windows, a query's stream registered
//! again as a table, and a stream whose own watermarks the table keeps
//! (`SOURCE_WATERMARK()`).
//!
//! The expected rows are computed here from the generated rows by a plain
//! simulation: the watermark after a row is the largest `ts - 2 s` seen, a
//! row is dropped from a window whose end - 1 is at or below it when the
//! row arrives, and every window fires at the end of the input. The SQL
//! window's rows carry `window_time` (end - 1) as event time, so the
//! DataStream window of 20 s sums the 5 s windows it covers.

use floe::sql::{SqlSession, SqlType, Value};
use floe::text::mix64;
use floe::window::WindowAssigner;
use floe::{Error, StreamExecutionEnvironment};
use std::collections::BTreeMap;

/// One generated row: user, amount (maybe `NULL`), event time (ms).
struct Click {
    user: String,
    amount: Option<i32>,
    ts: i64,
}

/// Rows moving forward with jitter; about 8% are late by 5-25 s.
fn clicks(seed: u64, n: u64) -> Vec<Click> {
    let mut t = 1_000_000i64;
    (0..n)
        .map(|i| {
            let h = mix64(seed ^ mix64(i));
            t += (h % 200) as i64;
            let ts = match (h >> 20) % 100 {
                0..=7 => t - 5_000 - ((h >> 30) % 20_000) as i64,
                8..=30 => t - ((h >> 30) % 1_500) as i64,
                _ => t,
            };
            Click {
                user: format!("u{}", (h >> 8) % 4),
                amount: (!(h >> 40).is_multiple_of(8)).then(|| ((h >> 44) % 100) as i32 - 20),
                ts,
            }
        })
        .collect()
}

fn row(c: &Click) -> Vec<Value> {
    vec![
        Value::Str(c.user.as_str().into()),
        c.amount.map_or(Value::Null, Value::Int),
        Value::Timestamp(c.ts),
    ]
}

const SCHEMA: &str = "user_id STRING, amount INT, ts TIMESTAMP(3),
    WATERMARK FOR ts AS ts - INTERVAL '2' SECOND";

/// Per (user, 5 s window start): rows and the sum of the non-NULL amounts
/// (`None` when there are none), late rows dropped.
fn five_second_windows(clicks: &[Click]) -> BTreeMap<(String, i64), (i64, Option<i64>)> {
    let mut windows: BTreeMap<(String, i64), (i64, Option<i64>)> = BTreeMap::new();
    let mut watermark = i64::MIN;
    for c in clicks {
        let start = c.ts - c.ts.rem_euclid(5_000);
        if start + 5_000 - 1 > watermark {
            let w = windows.entry((c.user.clone(), start)).or_default();
            w.0 += 1;
            if let Some(a) = c.amount {
                w.1 = Some(w.1.unwrap_or(0) + i64::from(a));
            }
        }
        watermark = watermark.max(c.ts - 2_000);
    }
    windows
}

#[test]
fn a_stream_table_feeds_a_window_query_whose_rows_feed_datastream_windows() {
    let clicks = clicks(34, 4000);
    let windows = five_second_windows(&clicks);
    let mut want_sql: Vec<String> = windows
        .iter()
        .map(|((user, start), (n, sum))| {
            let sum = sum.map(|s| s.to_string()).unwrap_or_default();
            format!("{user},{start},{n},{sum}")
        })
        .collect();
    want_sql.sort();
    let mut per_20s: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for ((user, start), (n, _)) in &windows {
        *per_20s
            .entry((user.clone(), start - start.rem_euclid(20_000)))
            .or_default() += n;
    }
    let mut want_20s: Vec<String> = per_20s
        .iter()
        .map(|((user, start), n)| format!("{user},{start},{n}"))
        .collect();
    want_20s.sort();
    // Some rows are late: the oracle is not the windows of every row.
    let all: i64 = windows.values().map(|w| w.0).sum();
    assert!(all < clicks.len() as i64 && all > clicks.len() as i64 * 8 / 10);

    for parallelism in [1, 2] {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(parallelism);
        let rows = env.from_collection(clicks.iter().map(row).collect());
        let mut session = SqlSession::new(&env);
        session
            .register_stream("clicks", &rows, SCHEMA)
            .expect("the stream registers");
        let windowed = session
            .query_to_stream(
                "SELECT user_id, window_start, COUNT(*) AS cnt, SUM(amount) AS total
                 FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' SECOND))
                 GROUP BY window_start, window_end, user_id",
            )
            .expect("the query plans");
        let columns: Vec<(&str, SqlType)> = windowed
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.ty))
            .collect();
        assert_eq!(
            columns,
            [
                ("user_id", SqlType::String),
                ("window_start", SqlType::Timestamp(3)),
                ("cnt", SqlType::BigInt),
                ("total", SqlType::Int),
            ]
        );
        let sql_rows = windowed
            .stream
            .map(|r: Vec<Value>| match r.as_slice() {
                [Value::Str(u), Value::Timestamp(s), Value::BigInt(n), total] => {
                    let total = match total {
                        Value::Int(t) => t.to_string(),
                        _ => String::new(),
                    };
                    format!("{u},{s},{n},{total}")
                }
                other => format!("unexpected row {other:?}"),
            })
            .collect();
        // DataStream windows over the SQL rows' event times (window_time).
        let rolled = windowed
            .stream
            .key_by(|r: &Vec<Value>| format!("{:?}", r[0]))
            .window(WindowAssigner::tumbling(20_000))
            .process(|_, window, rows: Vec<Vec<Value>>, out: &mut Vec<String>| {
                let user = match &rows[0][0] {
                    Value::Str(u) => u.to_string(),
                    other => format!("{other:?}"),
                };
                let n: i64 = rows
                    .iter()
                    .map(|r| match r[2] {
                        Value::BigInt(n) => n,
                        _ => 0,
                    })
                    .sum();
                out.push(format!("{user},{},{n}", window.start));
            })
            .collect();
        env.execute().expect("the job runs");
        let mut got_sql = sql_rows.take();
        got_sql.sort();
        assert_eq!(got_sql, want_sql, "parallelism {parallelism}");
        let mut got_20s = rolled.take();
        got_20s.sort();
        assert_eq!(got_20s, want_20s, "parallelism {parallelism}");
    }
}

#[test]
fn a_query_stream_registered_again_is_a_table_with_an_event_time() {
    let clicks = clicks(7, 3000);
    // The per-user 5 s windows, then per 15 s window (aligned to the
    // epoch) the users with more than 3 rows in a 5 s window.
    let mut want: BTreeMap<i64, i64> = BTreeMap::new();
    for ((_, start), (n, _)) in five_second_windows(&clicks) {
        if n > 3 {
            *want.entry(start - start.rem_euclid(15_000)).or_default() += 1;
        }
    }
    let mut want: Vec<String> = want.iter().map(|(s, n)| format!("{s},{n}")).collect();
    want.sort();

    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let rows = env.from_collection(clicks.iter().map(row).collect());
    let mut session = SqlSession::new(&env);
    session
        .register_stream("clicks", &rows, SCHEMA)
        .expect("registers");
    let busy = session
        .query_to_stream(
            "SELECT user_id, window_time AS wt, COUNT(*) AS cnt
             FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' SECOND))
             GROUP BY window_start, window_end, window_time, user_id
             HAVING COUNT(*) > 3",
        )
        .expect("plans");
    // Per subtask the window rows come in window_time order: none is late
    // for windows of 15 s over it with a watermark 1 s behind.
    session
        .register_stream(
            "busy",
            &busy.stream,
            "user_id STRING, wt TIMESTAMP(3), cnt BIGINT,
             WATERMARK FOR wt AS wt - INTERVAL '1' SECOND",
        )
        .expect("registers");
    let out = session
        .query_to_stream(
            "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE busy, DESCRIPTOR(wt), \
             INTERVAL '15' SECOND)) GROUP BY window_start, window_end",
        )
        .expect("plans");
    let got = out
        .stream
        .map(|r: Vec<Value>| match r.as_slice() {
            [Value::Timestamp(s), Value::BigInt(n)] => format!("{s},{n}"),
            other => format!("unexpected row {other:?}"),
        })
        .collect();
    env.execute().expect("runs");
    let mut got = got.take();
    got.sort();
    assert_eq!(got, want);
}

/// A registered stream keeps its own timestamps and watermarks with
/// `WATERMARK FOR c AS SOURCE_WATERMARK()`, as Flink's `fromDataStream`
/// with that schema does: the event time of each row is set in Rust (a
/// `rowtime` `METADATA` column, or a column of the row), the watermark
/// after each row is `max - 2 s` (a punctuated strategy in Rust), and the
/// SQL window over the table fires by it and drops the rows behind it, as
/// [`five_second_windows`] simulates.
#[test]
fn a_stream_table_keeps_the_streams_watermarks_with_source_watermark() {
    use floe::time::WatermarkStrategy;
    let clicks = clicks(91, 3000);
    let mut want: Vec<String> = five_second_windows(&clicks)
        .iter()
        .map(|((user, start), (n, sum))| {
            let sum = sum.map(|s| s.to_string()).unwrap_or_default();
            format!("{user},{start},{n},{sum}")
        })
        .collect();
    want.sort();
    let all: usize = five_second_windows(&clicks)
        .values()
        .map(|w| w.0 as usize)
        .sum();
    assert!(all < clicks.len(), "some rows are late");
    let schemas = [
        // Flink's `columnByMetadata("rowtime", "TIMESTAMP_LTZ(3)")
        // .watermark("rowtime", "SOURCE_WATERMARK()")`: the rows hold no
        // time, the records' timestamps are the event times.
        (
            "user_id STRING, amount INT, rowtime TIMESTAMP_LTZ(3) METADATA,
             WATERMARK FOR rowtime AS SOURCE_WATERMARK()",
            "rowtime",
            false,
        ),
        // The event-time column is one of the row's.
        (
            "user_id STRING, amount INT, ts TIMESTAMP(3),
             WATERMARK FOR ts AS SOURCE_WATERMARK()",
            "ts",
            true,
        ),
    ];
    for (schema, time, with_ts) in schemas {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(2);
        let tuples: Vec<(String, Option<i32>, i64)> = clicks
            .iter()
            .map(|c| (c.user.clone(), c.amount, c.ts))
            .collect();
        let rows = env
            .from_collection(tuples)
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::punctuated(|c: &(String, Option<i32>, i64), _| {
                    Some(c.2 - 2_000)
                })
                .with_timestamp_assigner(|c, _| c.2),
            )
            .set_parallelism(1)
            .map(move |(user, amount, ts): (String, Option<i32>, i64)| {
                let mut row = vec![
                    Value::Str(user.as_str().into()),
                    amount.map_or(Value::Null, Value::Int),
                ];
                if with_ts {
                    row.push(Value::Timestamp(ts));
                }
                row
            })
            .set_parallelism(1);
        let mut session = SqlSession::new(&env);
        session
            .register_stream("clicks", &rows, schema)
            .expect("the stream registers");
        let query = format!(
            "SELECT user_id, window_start, COUNT(*), SUM(amount)
             FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR({time}), INTERVAL '5' SECOND))
             GROUP BY window_start, window_end, user_id"
        );
        let explained = session
            .plan_sql(&format!("EXPLAIN {query}"))
            .expect("explains");
        let plan = &explained.explains[0];
        assert!(
            plan.contains("watermark=[SOURCE_WATERMARK()]]") && !plan.contains("WatermarkAssigner"),
            "{plan}"
        );
        let out = session.query_to_stream(&query).expect("the query plans");
        let got = out
            .stream
            .map(|r: Vec<Value>| match r.as_slice() {
                [Value::Str(u), Value::Timestamp(s), Value::BigInt(n), total] => {
                    let total = match total {
                        Value::Int(t) => t.to_string(),
                        _ => String::new(),
                    };
                    format!("{u},{s},{n},{total}")
                }
                other => format!("unexpected row {other:?}"),
            })
            .collect();
        env.execute().expect("the job runs");
        let mut got = got.take();
        got.sort();
        assert_eq!(got, want, "{schema}");
    }
}

#[test]
fn a_row_that_does_not_fit_the_schema_fails_the_job_with_a_typed_error() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let rows = env.from_collection(vec![
        vec![Value::Str("a".into()), Value::Int(1)],
        vec![Value::Str("b".into()), Value::BigInt(2)],
    ]);
    let mut session = SqlSession::new(&env);
    session
        .register_stream("t", &rows, "name STRING, n INT")
        .expect("registers");
    let out = session
        .query_to_stream("SELECT n + 1 FROM t")
        .expect("plans");
    let _ = out.stream.collect();
    // An expression that fails fails the job without restarts.
    let e = env.execute().expect_err("the job fails");
    assert!(
        e.to_string()
            .contains("DataStream table 't': column 'n' is INT, a row holds BigInt(2)"),
        "{e}"
    );
}

#[test]
fn registering_and_querying_refuse_what_cannot_work() {
    let env = StreamExecutionEnvironment::new();
    let rows = env.from_collection(vec![vec![Value::Int(1)]]);
    let mut session = SqlSession::new(&env);
    // The schema's error points into the schema (line 2, column 5).
    match session.register_stream("t", &rows, "n INT,\n  m FLOAT8X") {
        Err(Error::Sql(e)) => assert_eq!((e.line, e.column), (2, 5), "{e}"),
        other => panic!("expected a SQL error, got {other:?}"),
    }
    let other_env = StreamExecutionEnvironment::new();
    let foreign = other_env.from_collection(vec![vec![Value::Int(1)]]);
    let e = session
        .register_stream("t", &foreign, "n INT")
        .expect_err("a stream of another environment");
    assert!(e.to_string().contains("another environment"), "{e}");
    session
        .register_stream("t", &rows, "n INT")
        .expect("registers");
    let e = session
        .register_stream("t", &rows, "n INT")
        .expect_err("the name is taken");
    assert!(e.to_string().contains("already exists"), "{e}");
    let e = session
        .plan_sql(
            "CREATE TABLE p (n INT) WITH ('connector' = 'print');
             INSERT INTO t SELECT n FROM t;",
        )
        .expect_err("a stream table is read-only");
    assert!(e.to_string().contains("cannot be written"), "{e}");
    let e = session
        .query_to_stream("SELECT x FROM t")
        .expect_err("unknown column");
    assert!(e.to_string().contains("unknown column 'x'"), "{e}");
    let e = session
        .query_to_stream("SELECT n FROM t; SELECT n FROM t")
        .expect_err("two queries");
    assert!(e.to_string().contains("one query"), "{e}");
    // A metadata column other than the record's timestamp, and
    // `SOURCE_WATERMARK()` or `METADATA` outside a registered stream's
    // schema, are refused in one line.
    let e = session
        .register_stream(
            "u",
            &rows,
            "n INT, t TIMESTAMP_LTZ(3) METADATA FROM 'offset'",
        )
        .expect_err("an unknown metadata key");
    assert!(
        e.to_string().contains("invalid metadata key 'offset'"),
        "{e}"
    );
    let e = session
        .register_stream("u", &rows, "n INT, t BIGINT METADATA FROM 'rowtime'")
        .expect_err("rowtime is a timestamp");
    assert!(e.to_string().contains("must be TIMESTAMP_LTZ(3)"), "{e}");
    let e = session
        .plan_sql(
            "CREATE TABLE f (n INT, ts TIMESTAMP(3), WATERMARK FOR ts AS SOURCE_WATERMARK())
             WITH ('connector' = 'filesystem', 'path' = '/x.csv', 'format' = 'csv');",
        )
        .expect_err("a file has no watermarks of its own");
    assert!(
        e.to_string()
            .contains("SOURCE_WATERMARK() is supported only in the schema of a registered"),
        "{e}"
    );
    let e = session
        .plan_sql(
            "CREATE TABLE f (n INT, ts TIMESTAMP_LTZ(3) METADATA FROM 'rowtime')
             WITH ('connector' = 'filesystem', 'path' = '/x.csv', 'format' = 'csv');",
        )
        .expect_err("a file has no metadata columns");
    assert!(
        e.to_string()
            .contains("METADATA columns are supported only in the schema of a registered"),
        "{e}"
    );
    // EXPLAIN shows the stream as a source of its own.
    let explained = session
        .plan_sql("EXPLAIN SELECT n + 1 FROM t")
        .expect("plans");
    assert!(
        explained.explains[0].contains("DataStream: t"),
        "{}",
        explained.explains[0]
    );
    // A query that reads the stream table through a script works.
    let planned = session
        .plan_sql(
            "CREATE TABLE q (n INT) WITH ('connector' = 'blackhole');
             INSERT INTO q SELECT n * 2 FROM t;",
        )
        .expect("plans");
    assert_eq!(planned.inserts, 1);
}
