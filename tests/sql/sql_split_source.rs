//! The `filesystem` source cut into splits (`SqlSession::set_file_split_size`,
//! small here so a small file makes many): every source subtask reads its
//! share of a file, each split in file order, and a window aggregate over
//! it gives the rows computed here with a `HashMap`. Late rows: a table
//! whose watermark is emitted per row (`'on-event'`) keeps its file one
//! split, so its late rows are exactly those of a plain simulation of one
//! reader (Flink's); with a periodic watermark and splits, each window
//! keeps at least the rows that simulation keeps and at most all of its
//! rows, whatever the timing.

use floe::operators::{Operator, Output};
use floe::sql::{SqlSession, Value};
use floe::text::mix64;
use floe::{Record, StreamExecutionEnvironment};
use std::collections::HashMap;
use std::path::Path;

/// Rows per test file: about 20 kB per 1,000.
const ROWS: i64 = 20_000;
/// Window size and watermark delay, ms.
const WINDOW: i64 = 1_000;
const DELAY: i64 = 1_000;

/// One input line: key, event time (ms since the epoch), value.
struct Event {
    key: String,
    ts: i64,
    v: i64,
}

/// Row `i` at `i` ms, pulled back by up to 900 ms (inside the delay); with
/// `late`, about 5% are pulled back by 2-5 s instead (late past the delay).
fn events(seed: u64, late: bool) -> Vec<Event> {
    (0..ROWS)
        .map(|i| {
            let h = mix64(seed ^ mix64(i as u64));
            let back = if late && h.is_multiple_of(20) {
                2_000 + ((h >> 8) % 3_000) as i64
            } else {
                ((h >> 8) % 900) as i64
            };
            Event {
                key: format!("k{}", (h >> 24) % 7),
                ts: (5_000 + i - back).max(0),
                v: ((h >> 32) % 100) as i64,
            }
        })
        .collect()
}

fn write_input(path: &Path, events: &[Event]) {
    let text: String = events
        .iter()
        .map(|e| format!("{},{},{}\n", e.key, e.ts, e.v))
        .collect();
    std::fs::write(path, text).expect("write the input");
}

/// `(key, window start) -> (COUNT(*), SUM(v))` of the rows one reader
/// emitting its watermark per row keeps (`late`: drop a row whose window's
/// `end - 1` is at or below the largest `ts - delay` before it), or of all
/// rows.
fn oracle(events: &[Event], drop_late: bool) -> HashMap<(String, i64), (i64, i64)> {
    let mut windows = HashMap::new();
    let mut watermark = i64::MIN;
    for e in events {
        let start = e.ts - e.ts.rem_euclid(WINDOW);
        if !drop_late || start + WINDOW - 1 > watermark {
            let w = windows.entry((e.key.clone(), start)).or_insert((0, 0));
            w.0 += 1;
            w.1 += e.v;
        }
        watermark = watermark.max(e.ts - DELAY);
    }
    windows
}

/// The script of the window aggregate over `input` into `output`;
/// `emit`: the `'scan.watermark.emit.strategy'`, if given.
fn script(input: &Path, output: &Path, emit: Option<&str>) -> String {
    let emit = emit
        .map(|e| format!(",\n  'scan.watermark.emit.strategy' = '{e}'"))
        .unwrap_or_default();
    format!(
        "CREATE TABLE events (
           k STRING,
           ts_ms BIGINT,
           v INT,
           ts AS TO_TIMESTAMP_LTZ(ts_ms, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
         ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'{emit});
         CREATE TABLE sums (k STRING, window_start TIMESTAMP(3), total INT, cnt BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO sums
         SELECT k, window_start, SUM(v), COUNT(*)
         FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' SECOND))
         GROUP BY window_start, window_end, k;",
        input.display(),
        output.display()
    )
}

/// Runs `script` at `parallelism` with files cut into splits of
/// `split_size` bytes; the output rows as `(key, window start) -> (count,
/// sum)`.
fn run(
    input: &Path,
    parallelism: usize,
    split_size: u64,
    emit: Option<&str>,
) -> HashMap<(String, i64), (i64, i64)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = dir.path().join("sums.csv");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    let mut session = SqlSession::new(&env);
    session.set_file_split_size(split_size);
    session
        .execute_sql(&script(input, &output, emit))
        .expect("the job runs");
    let text = std::fs::read_to_string(&output).expect("the output");
    let mut rows = HashMap::new();
    for line in text.lines() {
        // k,"1970-01-01 00:00:SS",total,cnt (the windows lie in the first
        // minute).
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 4, "{line}");
        let secs: i64 = f[1]
            .trim_matches('"')
            .strip_prefix("1970-01-01 00:00:")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a window start in the first minute: {line}"));
        let (total, cnt) = (f[2].parse().expect("sum"), f[3].parse().expect("count"));
        let old = rows.insert((f[0].to_string(), secs * 1000), (cnt, total));
        assert!(old.is_none(), "one row per key and window: {line}");
    }
    rows
}

/// A split size cutting `input` in two.
fn half(input: &Path) -> u64 {
    std::fs::metadata(input).expect("the input").len() / 2 + 1
}

#[test]
fn split_windows_equal_all_rows_without_late_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let events = events(11, false);
    write_input(&input, &events);
    let want = oracle(&events, false);
    // 2 kB splits over both subtasks; the whole file as one split by one.
    assert_eq!(run(&input, 2, 2048, None), want);
    assert_eq!(run(&input, 1, u64::MAX, None), want);
}

#[test]
fn on_event_watermarks_keep_one_split_and_drop_the_late_rows_one_reader_drops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let events = events(12, true);
    write_input(&input, &events);
    let want = oracle(&events, true);
    assert_ne!(want, oracle(&events, false), "the input has late rows");
    // Split in halves, the second half's late rows would meet the first
    // subtask's watermark, far behind.
    assert_eq!(run(&input, 2, half(&input), Some("on-event")), want);
}

#[test]
fn periodic_watermarks_over_splits_drop_no_row_one_reader_keeps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let events = events(13, true);
    write_input(&input, &events);
    let (kept, all) = (oracle(&events, true), oracle(&events, false));
    let got = run(&input, 2, half(&input), None);
    for (window, &(cnt, _)) in &got {
        assert!(all.contains_key(window), "{window:?} has rows");
        assert!(
            cnt <= all[window].0,
            "{window:?}: {cnt} rows of {:?}",
            all[window]
        );
    }
    for (window, &(cnt, sum)) in &all {
        let (c, s) = got.get(window).copied().unwrap_or((0, 0));
        let least = kept.get(window).map_or(0, |k| k.0);
        assert!(
            (least..=cnt).contains(&c),
            "{window:?}: {c} rows, one reader keeps {least} of {cnt}"
        );
        if c == cnt {
            assert_eq!(s, sum, "{window:?}: every row, so their sum");
        }
    }
}

/// Tags every row with the index of the subtask that sees it.
#[derive(Clone)]
struct Tag {
    subtask: usize,
}

impl Operator<Vec<Value>, (usize, i64)> for Tag {
    fn process_batch(
        &mut self,
        batch: Vec<Record<Vec<Value>>>,
        out: &mut Output<'_, (usize, i64)>,
    ) -> floe::Result<()> {
        for r in batch {
            let Some(Value::BigInt(id)) = r.value.first() else {
                return Err(floe::Error::Internal(format!("not an id: {:?}", r.value)));
            };
            out.collect((self.subtask, *id));
        }
        Ok(())
    }
}

/// The rows of a table without a watermark, cut into many splits: each
/// once, from both subtasks, each subtask's in file order; with
/// `'on-event'` watermarks, all from one subtask.
#[test]
fn every_subtask_reads_its_splits_in_file_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("ids.csv");
    let text: String = (0..ROWS).map(|i| format!("{i},{i}\n")).collect();
    std::fs::write(&input, text).expect("write the input");
    let read = |watermark: &str, options: &str| {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(2);
        let mut session = SqlSession::new(&env);
        session.set_file_split_size(1000);
        session
            .execute_sql(&format!(
                "CREATE TABLE ids (id BIGINT, ms BIGINT, ts AS TO_TIMESTAMP_LTZ(ms, 3){watermark})
                 WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'{options});",
                input.display()
            ))
            .expect("the table");
        let rows = session
            .query_to_stream("SELECT id FROM ids")
            .expect("the query")
            .stream
            .transform("Tag", |ctx| Tag {
                subtask: ctx.subtask,
            })
            .collect();
        env.execute().expect("the job runs");
        let mut by_subtask: HashMap<usize, Vec<i64>> = HashMap::new();
        for (subtask, id) in rows.take() {
            by_subtask.entry(subtask).or_default().push(id);
        }
        by_subtask
    };
    let split = read("", "");
    assert_eq!(split.len(), 2, "both subtasks read");
    let mut all: Vec<i64> = split.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..ROWS).collect::<Vec<_>>());
    for ids in split.values() {
        assert!(ids.is_sorted(), "a subtask's rows in file order");
    }
    let one = read(
        ", WATERMARK FOR ts AS ts - INTERVAL '1' SECOND",
        ", 'scan.watermark.emit.strategy' = 'on-event'",
    );
    // One subtask reads the one split (the job graph shows it:
    // `on_event_watermarks_are_made_by_one_source_subtask`); the rows it
    // hands on keep the file's order on each channel.
    let mut all: Vec<i64> = one.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..ROWS).collect::<Vec<_>>());
    for ids in one.values() {
        assert!(ids.is_sorted(), "the one reader's rows in file order");
    }
}

/// With a per-row watermark the file is read, and its watermarks made, by
/// one subtask: the job graph `EXPLAIN` prints runs the source's chain at
/// parallelism 1 (a second source subtask without a split would hold the
/// window's watermark back until it ended, at a time no test controls),
/// and the window at the job's parallelism. With a periodic watermark the
/// source runs at the job's.
#[test]
fn on_event_watermarks_are_made_by_one_source_subtask() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (input, output) = (dir.path().join("events.csv"), dir.path().join("out.csv"));
    write_input(&input, &events(14, false));
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let graph = |emit: Option<&str>| -> Vec<String> {
        let explain = script(&input, &output, emit).replace("INSERT INTO", "EXPLAIN INSERT INTO");
        let planned = SqlSession::new(&env).plan_sql(&explain).expect("plans");
        planned.explains[0]
            .lines()
            .filter(|l| l.contains("(parallelism "))
            .map(str::to_string)
            .collect()
    };
    let chain = |lines: &[String], op: &str| -> String {
        lines
            .iter()
            .find(|l| l.contains(op))
            .unwrap_or_else(|| panic!("a chain with {op}: {lines:#?}"))
            .clone()
    };
    let on_event = graph(Some("on-event"));
    for op in ["Source: events", "WatermarkAssigner"] {
        assert!(
            chain(&on_event, op).contains("(parallelism 1)"),
            "{op}: {on_event:#?}"
        );
    }
    assert!(
        chain(&on_event, "Window").contains("(parallelism 2)"),
        "{on_event:#?}"
    );
    let periodic = graph(None);
    assert!(
        chain(&periodic, "Source: events").contains("(parallelism 2)"),
        "{periodic:#?}"
    );
}
