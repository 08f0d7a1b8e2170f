//! The calls of a window aggregate, each on the path the job takes for it:
//! `COUNT`, `SUM` of `INT`, `BIGINT` and `DOUBLE`, `MIN` and `MAX` of
//! integers and timestamps (kept in words), and `MIN`, `MAX`, `COUNT` of
//! strings (kept as values), over seeded rows with `NULL`s and sums that
//! overflow, in tumbling and hopping windows, with the selected columns in
//! another order than the grouping's, at parallelism 1 and 2.
//!
//! The expected rows are computed here from the generated rows with plain
//! maps: an `INT` sum wraps as Java's `int`, a `BIGINT` sum as its `long`
//! (what Flink's sums give), `NULL`s are skipped, and a call over no
//! values is `NULL` (an empty field), `COUNT` 0.

use crate::sql_windows::timestamp;
use floe::StreamExecutionEnvironment;
use floe::sql::SqlSession;
use floe::text::mix64;
use std::collections::BTreeMap;
use std::path::Path;

/// One generated row: key, an `INT`, a `BIGINT`, a `DOUBLE`, a `STRING`
/// (each maybe `NULL`), and its event time (ms after 2024-01-01).
struct Event {
    key: String,
    v: Option<i32>,
    b: Option<i64>,
    d: Option<f64>,
    s: Option<String>,
    ts: i64,
}

/// Rows in event-time order (none late), a third of the `INT`s and
/// `BIGINT`s near the top or bottom of their ranges.
fn events(seed: u64, n: u64) -> Vec<Event> {
    let mut ts = 60_000i64;
    (0..n)
        .map(|i| {
            let h = mix64(seed ^ mix64(i));
            ts += (h % 40) as i64;
            let some = |bit: u32| !(h >> bit).is_multiple_of(7);
            let x = ((h >> 24) % 2000) as i64 - 1000;
            let big = (h >> 40).is_multiple_of(3);
            Event {
                key: format!("k{}", (h >> 8) % 4),
                v: some(50).then(|| {
                    if big {
                        i32::MAX - x.abs() as i32
                    } else {
                        x as i32
                    }
                }),
                b: some(53).then(|| if big { i64::MIN + x.abs() } else { x * 1000 }),
                d: some(56).then_some(x as f64 / 4.0),
                s: some(59).then(|| format!("s{}", (h >> 12) % 97)),
                ts,
            }
        })
        .collect()
}

/// A double as Java's `Double.toString` writes these (quarters below 10^7).
fn double(v: f64) -> String {
    let s = format!("{v}");
    if s.contains('.') { s } else { format!("{s}.0") }
}

fn write_input(path: &Path, events: &[Event]) {
    let opt = |v: Option<String>| v.unwrap_or_default();
    let text: String = events
        .iter()
        .map(|e| {
            format!(
                "{},{},{},{},{},{}\n",
                e.key,
                opt(e.v.map(|v| v.to_string())),
                opt(e.b.map(|v| v.to_string())),
                opt(e.d.map(|v| v.to_string())),
                opt(e.s.clone()),
                timestamp(e.ts).trim_matches('"')
            )
        })
        .collect();
    std::fs::write(path, text).expect("write the input");
}

/// What one key's window saw.
#[derive(Default)]
struct Calls {
    rows: i64,
    v: Vec<i32>,
    b: Vec<i64>,
    d: Vec<f64>,
    s: Vec<String>,
    ts: Vec<i64>,
}

/// Each key's windows of `size` every `slide`: `(key, start) -> calls`.
fn windows(events: &[Event], size: i64, slide: i64) -> BTreeMap<(String, i64), Calls> {
    let mut out: BTreeMap<(String, i64), Calls> = BTreeMap::new();
    for e in events {
        let mut start = e.ts - e.ts.rem_euclid(slide);
        while start > e.ts - size {
            let c = out.entry((e.key.clone(), start)).or_default();
            c.rows += 1;
            c.v.extend(e.v);
            c.b.extend(e.b);
            c.d.extend(e.d);
            c.s.extend(e.s.clone());
            c.ts.push(e.ts);
            start -= slide;
        }
    }
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The `INT` sum as Java's `int` wraps it.
fn sum_int(v: &[i32]) -> Option<i32> {
    (!v.is_empty()).then(|| v.iter().fold(0i32, |a, x| a.wrapping_add(*x)))
}

/// The `BIGINT` sum as Java's `long` wraps it.
fn sum_bigint(v: &[i64]) -> Option<i64> {
    (!v.is_empty()).then(|| v.iter().fold(0i64, |a, x| a.wrapping_add(*x)))
}

/// The expected lines of each sink of [`script`], sorted.
fn expected(events: &[Event]) -> [Vec<String>; 5] {
    let tumble = windows(events, 5000, 5000);
    let hop = windows(events, 6000, 2000);
    let lines = |w: &BTreeMap<(String, i64), Calls>, f: &dyn Fn(&str, i64, &Calls) -> String| {
        let mut lines: Vec<String> = w.iter().map(|((k, s), c)| f(k, *s, c)).collect();
        lines.sort();
        lines
    };
    [
        lines(&tumble, &|k, s, c| {
            format!(
                "{k},{},{},{},{},{}",
                timestamp(s),
                timestamp(s + 5000),
                c.rows,
                c.v.len(),
                opt(sum_int(&c.v))
            )
        }),
        lines(&tumble, &|k, s, c| {
            format!(
                "{},{k},{},{},{}",
                timestamp(s),
                opt(sum_bigint(&c.b)),
                opt(c.v.iter().min()),
                opt(c.b.iter().max())
            )
        }),
        lines(&tumble, &|k, s, c| {
            let sum = (!c.d.is_empty()).then(|| double(c.d.iter().sum()));
            format!(
                "{},{},{k},{},{},{},{}",
                timestamp(s),
                timestamp(s + 5000),
                opt(sum),
                opt(c.s.iter().min()),
                opt(c.s.iter().max()),
                c.s.len()
            )
        }),
        lines(&hop, &|k, s, c| {
            format!(
                "{k},{},{},{},{}",
                timestamp(s + 6000),
                c.v.len(),
                opt(sum_int(&c.v)),
                opt(sum_bigint(&c.b))
            )
        }),
        lines(&tumble, &|k, s, c| {
            format!(
                "{},{k},{},{}",
                timestamp(s),
                opt(c.ts.iter().min().map(|t| timestamp(*t))),
                opt(c.ts.iter().max().map(|t| timestamp(*t)))
            )
        }),
    ]
}

/// One job of five inserts, the `i`th into `out-i.csv` in `dir`; the
/// strings' calls (the third) read the table whose empty fields are
/// `NULL`.
fn script(input: &Path, dir: &Path) -> String {
    let tumble = "TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))";
    let hop = "TABLE(HOP(TABLE events, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '6' SECOND))";
    let group = "GROUP BY window_start, window_end, k";
    let sinks = [
        "k STRING, ws TIMESTAMP(3), we TIMESTAMP(3), n BIGINT, nv BIGINT, sv INT",
        "ws TIMESTAMP(3), k STRING, sb BIGINT, lo INT, hi BIGINT",
        "ws TIMESTAMP(3), we TIMESTAMP(3), k STRING, sd DOUBLE, lo STRING, hi STRING, ns BIGINT",
        "k STRING, we TIMESTAMP(3), nv BIGINT, sv INT, sb BIGINT",
        "ws TIMESTAMP(3), k STRING, first_ts TIMESTAMP(3), last_ts TIMESTAMP(3)",
    ];
    let selects = [
        format!("k, window_start, window_end, COUNT(*), COUNT(v), SUM(v) FROM {tumble}"),
        format!("window_start, k, SUM(b), MIN(v), MAX(b) FROM {tumble}"),
        format!(
            "window_start, window_end, k, SUM(d), MIN(s), MAX(s), COUNT(s) FROM {}",
            tumble.replace("TABLE events", "TABLE events_n")
        ),
        format!("k, window_end, COUNT(v), SUM(v), SUM(b) FROM {hop}"),
        format!("window_start, k, MIN(ts), MAX(ts) FROM {tumble}"),
    ];
    // `events_n` reads an empty field as `NULL`, a string's too (`events`
    // reads it as the empty string).
    let mut text = String::new();
    for (table, null) in [("events", ""), ("events_n", ", 'csv.null-literal' = ''")] {
        text.push_str(&format!(
            "CREATE TABLE {table} (k STRING, v INT, b BIGINT, d DOUBLE, s STRING, ts TIMESTAMP(3),
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'{null});",
            input.display()
        ));
    }
    for (i, (columns, select)) in sinks.iter().zip(&selects).enumerate() {
        text.push_str(&format!(
            "CREATE TABLE out{i} ({columns}) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'csv');
             INSERT INTO out{i} SELECT {select} {group};",
            dir.join(format!("out-{i}.csv")).display()
        ));
    }
    text
}

#[test]
fn window_calls_give_flinks_results_with_nulls_and_overflow() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let evs = events(23, 4000);
    write_input(&input, &evs);
    let want = expected(&evs);
    // The sums overflow: the wrapped sums differ from the exact ones.
    let exact: i64 = evs.iter().filter_map(|e| e.v).map(i64::from).sum();
    let wrapped = evs
        .iter()
        .filter_map(|e| e.v)
        .fold(0i32, |a, x| a.wrapping_add(x));
    assert_ne!(exact, i64::from(wrapped), "INT sums overflow");
    for parallelism in [1, 2] {
        let out = dir.path().join(format!("p{parallelism}"));
        std::fs::create_dir_all(&out).expect("output dir");
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(parallelism);
        let (planned, result) = SqlSession::new(&env)
            .execute_sql(&script(&input, &out))
            .expect("the script runs");
        assert_eq!(planned.inserts, 5);
        assert!(result.is_some(), "the job ran");
        for (i, want) in want.iter().enumerate() {
            let text = std::fs::read_to_string(out.join(format!("out-{i}.csv"))).expect("output");
            let mut got: Vec<String> = text.lines().map(str::to_string).collect();
            got.sort();
            assert_eq!(got.len(), want.len(), "sink {i}, parallelism {parallelism}");
            assert_eq!(&got, want, "sink {i}, parallelism {parallelism}");
        }
    }
}
