//! Window table-valued functions (`TUMBLE`, `HOP`) with aggregates over
//! seeded, out-of-order CSV rows with late ones, at parallelism 1 and 2.
//!
//! The expected rows are computed here from the same generated rows, by a
//! plain simulation of Flink SQL's rules: the watermark after a row is the
//! largest `ts - delay` seen (`'on-event'`), a row is dropped from a window
//! whose `window_end - 1` is at or below the watermark when it arrives, and
//! every window fires at the end of the input.

use floe::StreamExecutionEnvironment;
use floe::sql::SqlSession;
use floe::text::mix64;
use std::collections::BTreeMap;
use std::path::Path;

/// One generated row: key, value (maybe `NULL`), event time (ms after
/// 2024-01-01 00:00:00).
struct Event {
    key: String,
    value: Option<i64>,
    ts: i64,
}

/// Rows moving forward in time with jitter; about 8% are late by 15-35 s.
fn events(seed: u64, n: u64) -> Vec<Event> {
    let mut t = 60_000i64;
    (0..n)
        .map(|i| {
            let h = mix64(seed ^ mix64(i));
            t += (h % 300) as i64;
            let ts = match (h >> 20) % 100 {
                0..=7 => t - 15_000 - ((h >> 30) % 20_000) as i64,
                8..=30 => t - ((h >> 30) % 3_000) as i64,
                _ => t,
            };
            Event {
                key: format!("k{}", (h >> 8) % 5),
                value: (!(h >> 40).is_multiple_of(10)).then(|| ((h >> 44) % 1000) as i64 - 200),
                ts,
            }
        })
        .collect()
}

/// `"2024-01-01 HH:MM:SS[.fff]"` as Flink's CSV format writes it: the
/// fraction without trailing zeros, quoted (a timestamp is written as a
/// string, and its space makes the CSV writer quote it).
pub(crate) fn timestamp(ms: i64) -> String {
    let (s, frac) = (ms / 1000, ms % 1000);
    let mut out = format!(
        "2024-01-01 {:02}:{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
    if frac != 0 {
        let f = format!("{frac:03}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    format!("\"{out}\"")
}

fn write_input(path: &Path, events: &[Event]) {
    let mut text = String::new();
    for e in events {
        let v = e.value.map(|v| v.to_string()).unwrap_or_default();
        let (s, frac) = (e.ts / 1000, e.ts % 1000);
        text.push_str(&format!(
            "{},{v},2024-01-01 {:02}:{:02}:{:02}.{frac:03}\n",
            e.key,
            s / 3600,
            s / 60 % 60,
            s % 60
        ));
    }
    std::fs::write(path, text).expect("write the input");
}

/// Per (key, window start): rows, non-NULL values, sum, min, max.
#[derive(Default, Clone)]
struct Agg {
    rows: i64,
    values: i64,
    sum: i64,
    min: Option<i64>,
    max: Option<i64>,
}

/// The expected output lines: `window_start,window_end,key,count(*),
/// count(v),sum,min,max,avg` for windows of `size` every `slide`.
fn expected(events: &[Event], size: i64, slide: i64, delay: i64) -> Vec<String> {
    let mut windows: BTreeMap<(String, i64), Agg> = BTreeMap::new();
    let mut watermark = i64::MIN;
    for e in events {
        let last = e.ts - e.ts.rem_euclid(slide);
        let mut start = last;
        while start > e.ts - size {
            if start + size - 1 > watermark {
                let a = windows.entry((e.key.clone(), start)).or_default();
                a.rows += 1;
                if let Some(v) = e.value {
                    a.values += 1;
                    a.sum += v;
                    a.min = Some(a.min.map_or(v, |m| m.min(v)));
                    a.max = Some(a.max.map_or(v, |m| m.max(v)));
                }
            }
            start -= slide;
        }
        watermark = watermark.max(e.ts - delay);
    }
    let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut lines: Vec<String> = windows
        .into_iter()
        .map(|((key, start), a)| {
            let (sum, avg) = match a.values {
                0 => (None, None),
                n => (Some(a.sum), Some(a.sum / n)),
            };
            format!(
                "{},{},{key},{},{},{},{},{},{}",
                timestamp(start),
                timestamp(start + size),
                a.rows,
                a.values,
                opt(sum),
                opt(a.min),
                opt(a.max),
                opt(avg)
            )
        })
        .collect();
    lines.sort();
    lines
}

fn script(input: &Path, output: &Path, window: &str) -> String {
    format!(
        "CREATE TABLE events (
           k STRING,
           v BIGINT,
           ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
         ) WITH (
           'connector' = 'filesystem',
           'path' = '{}',
           'format' = 'csv',
           'scan.watermark.emit.strategy' = 'on-event'
         );
         CREATE TABLE sums (
           window_start TIMESTAMP(3), window_end TIMESTAMP(3), k STRING,
           cnt BIGINT, cnt_v BIGINT, total BIGINT, lo BIGINT, hi BIGINT, mean BIGINT
         ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO sums
         SELECT window_start, window_end, k, COUNT(*), COUNT(v), SUM(v), MIN(v), MAX(v), AVG(v)
         FROM TABLE({window})
         GROUP BY window_start, window_end, k;",
        input.display(),
        output.display()
    )
}

fn run(script: &str, parallelism: usize, output: &Path) -> Vec<String> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    let (planned, result) = SqlSession::new(&env)
        .execute_sql(script)
        .expect("the script runs");
    assert_eq!(planned.inserts, 1);
    assert!(result.is_some(), "the job ran");
    let text = std::fs::read_to_string(output).expect("the output file");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn check(window: &str, size: i64, slide: i64, seed: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let evs = events(seed, 3000);
    write_input(&input, &evs);
    let want = expected(&evs, size, slide, 2000);
    // Late rows were generated and some are dropped: the oracle differs
    // from the same windows without the watermark.
    let all = expected(&evs, size, slide, i64::MAX / 2);
    assert_ne!(want, all, "some rows are late");
    for parallelism in [1, 2] {
        let output = dir.path().join(format!("out-{parallelism}.csv"));
        let got = run(&script(&input, &output, window), parallelism, &output);
        assert_eq!(got.len(), want.len(), "parallelism {parallelism}");
        assert_eq!(got, want, "parallelism {parallelism}");
    }
}

#[test]
fn tumble_aggregates_drop_late_rows_as_flink_does() {
    check(
        "TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND)",
        5000,
        5000,
        7,
    );
}

#[test]
fn hop_aggregates_count_a_late_row_in_its_open_windows_only() {
    check(
        "HOP(TABLE events, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '6' SECOND)",
        6000,
        2000,
        11,
    );
}

#[test]
fn a_view_filters_before_the_window_and_having_filters_after() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let output = dir.path().join("out.csv");
    let evs = events(3, 2000);
    write_input(&input, &evs);
    // The oracle: rows with v > 0 only, windows holding more than 2 of them.
    // The watermark advances on every row read, kept or not.
    let mut windows: BTreeMap<(String, i64), i64> = BTreeMap::new();
    let mut watermark = i64::MIN;
    for e in &evs {
        let start = e.ts - e.ts.rem_euclid(10_000);
        if e.value.is_some_and(|v| v > 0) && start + 10_000 - 1 > watermark {
            *windows.entry((e.key.clone(), start)).or_default() += e.value.unwrap_or(0);
        }
        watermark = watermark.max(e.ts - 2000);
    }
    let mut rows: BTreeMap<(String, i64), i64> = BTreeMap::new();
    {
        let mut watermark = i64::MIN;
        for e in &evs {
            let start = e.ts - e.ts.rem_euclid(10_000);
            if e.value.is_some_and(|v| v > 0) && start + 10_000 - 1 > watermark {
                *rows.entry((e.key.clone(), start)).or_default() += 1;
            }
            watermark = watermark.max(e.ts - 2000);
        }
    }
    let mut want: Vec<String> = windows
        .iter()
        .filter(|(k, _)| rows[*k] > 2)
        .map(|((key, start), sum)| format!("{key},{},{}", timestamp(*start), sum * 10))
        .collect();
    want.sort();
    let script = format!(
        "CREATE TABLE events (k STRING, v BIGINT, ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv',
               'scan.watermark.emit.strategy' = 'on-event');
         CREATE TEMPORARY VIEW positive AS SELECT k, v, ts FROM events WHERE v > 0;
         CREATE TABLE out (k STRING, ws TIMESTAMP(3), s BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO out
         SELECT k, window_start, SUM(v) * 10
         FROM TABLE(TUMBLE(TABLE positive, DESCRIPTOR(ts), INTERVAL '10' SECONDS))
         GROUP BY window_start, window_end, k
         HAVING COUNT(*) > 2;",
        input.display(),
        output.display()
    );
    for parallelism in [1, 2] {
        assert_eq!(
            run(&script, parallelism, &output),
            want,
            "parallelism {parallelism}"
        );
    }
}

/// 2024-01-01 00:00:00 in milliseconds since the epoch.
const EPOCH_MS_2024: i64 = 1_704_067_200_000;

/// A decimal, `unscaled` at `scale` digits, as Flink's csv format writes
/// it: Java's `BigDecimal.stripTrailingZeros().toString()` (`12.5`,
/// `4596`, `1.2E+3`; none of these values is below 10^-6).
fn decimal(unscaled: i128, scale: u32) -> String {
    if unscaled == 0 {
        return "0".into();
    }
    let (mut unscaled, mut scale) = (unscaled, scale as i32);
    while unscaled % 10 == 0 {
        unscaled /= 10;
        scale -= 1;
    }
    let sign = if unscaled < 0 { "-" } else { "" };
    let digits = unscaled.abs().to_string();
    match scale {
        0 => format!("{sign}{digits}"),
        s if s > 0 => {
            let s = s as usize;
            let padded = format!("{digits:0>width$}", width = s + 1);
            let (int, frac) = padded.split_at(padded.len() - s);
            format!("{sign}{int}.{frac}")
        }
        s => {
            let (first, rest) = digits.split_at(1);
            let dot = if rest.is_empty() { "" } else { "." };
            format!("{sign}{first}{dot}{rest}E+{}", digits.len() as i32 - 1 - s)
        }
    }
}

#[test]
fn decimal_sums_averages_and_distinct_counts_over_all_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let output = dir.path().join("out.csv");
    let evs = events(21, 2500);
    // The value read as a DECIMAL(6, 2): `v.00`.
    write_input(&input, &evs);
    let mut windows: BTreeMap<i64, (i128, i128, std::collections::BTreeSet<String>)> =
        BTreeMap::new();
    let mut watermark = i64::MIN;
    for e in &evs {
        // Windows are aligned to the epoch, not to the day the rows start.
        let start = e.ts - (e.ts + EPOCH_MS_2024).rem_euclid(7_000);
        if start + 7_000 - 1 > watermark {
            let w = windows.entry(start).or_default();
            w.2.insert(e.key.clone());
            if let Some(v) = e.value {
                w.0 += i128::from(v);
                w.1 += 1;
            }
        }
        watermark = watermark.max(e.ts - 2000);
    }
    let mut want: Vec<String> = windows
        .into_iter()
        .map(|(start, (sum, n, keys))| {
            let (total, mean) = match n {
                0 => (String::new(), String::new()),
                n => {
                    // AVG of DECIMAL(6, 2) is DECIMAL(38, 6), rounded half up.
                    let scaled = sum * 1_000_000;
                    let (q, r) = (scaled / n, scaled % n);
                    let q = if r.abs() * 2 >= n {
                        q + scaled.signum()
                    } else {
                        q
                    };
                    (decimal(sum * 100, 2), decimal(q, 6))
                }
            };
            format!("{},{total},{mean},{}", timestamp(start), keys.len())
        })
        .collect();
    want.sort();
    let script = format!(
        "CREATE TABLE events (k STRING, price DECIMAL(6, 2), ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv',
               'scan.watermark.emit.strategy' = 'on-event');
         CREATE TABLE out (ws TIMESTAMP(3), total DECIMAL(38, 2), mean DECIMAL(38, 6), keys BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO out
         SELECT window_start, SUM(price), AVG(price), COUNT(DISTINCT k)
         FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '7' SECOND))
         GROUP BY window_start, window_end;",
        input.display(),
        output.display()
    );
    for parallelism in [1, 2] {
        assert_eq!(
            run(&script, parallelism, &output),
            want,
            "parallelism {parallelism}"
        );
    }
}

#[test]
fn session_windows_per_partition_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let output = dir.path().join("out.csv");
    // In event-time order (nothing late): each key's rows are 0.1-9 s
    // apart, so sessions with a 3 s gap end now and then.
    let mut t = 60_000i64;
    let evs: Vec<Event> = (0..1500u64)
        .map(|i| {
            let h = mix64(i ^ 0xfeed);
            t += 30 + (h % 1800) as i64;
            Event {
                key: format!("k{}", (h >> 8) % 4),
                value: Some(((h >> 16) % 50) as i64),
                ts: t,
            }
        })
        .collect();
    write_input(&input, &evs);
    // Per key: a row within the gap of the session's last row (touching
    // included) extends it; the session ends `gap` after its last row.
    let gap = 3000;
    let mut open: BTreeMap<String, (i64, i64, i64, i64)> = BTreeMap::new();
    let mut want = Vec::new();
    let line = |key: &str, (start, last, n, sum): (i64, i64, i64, i64)| {
        format!(
            "{key},{},{},{n},{sum}",
            timestamp(start),
            timestamp(last + gap)
        )
    };
    for e in &evs {
        let v = e.value.unwrap_or(0);
        match open.get_mut(&e.key) {
            Some(s) if e.ts <= s.1 + gap => {
                s.1 = e.ts;
                s.2 += 1;
                s.3 += v;
            }
            _ => {
                if let Some(done) = open.insert(e.key.clone(), (e.ts, e.ts, 1, v)) {
                    want.push(line(&e.key, done));
                }
            }
        }
    }
    for (key, s) in open {
        want.push(line(&key, s));
    }
    want.sort();
    assert!(want.len() > 50, "{}", want.len());
    let script = format!(
        "CREATE TABLE events (k STRING, v BIGINT, ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv',
               'scan.watermark.emit.strategy' = 'on-event');
         CREATE TABLE out (k STRING, ws TIMESTAMP(3), we TIMESTAMP(3), n BIGINT, s BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO out
         SELECT k, window_start, window_end, COUNT(*), SUM(v)
         FROM TABLE(SESSION(TABLE events PARTITION BY k, DESCRIPTOR(ts), INTERVAL '3' SECOND))
         GROUP BY window_start, window_end, k;",
        input.display(),
        output.display()
    );
    for parallelism in [1, 2] {
        assert_eq!(
            run(&script, parallelism, &output),
            want,
            "parallelism {parallelism}"
        );
    }
}

#[test]
fn cumulate_windows_grow_by_step_and_drop_late_rows_per_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("events.csv");
    let output = dir.path().join("out.csv");
    let evs = events(29, 3000);
    write_input(&input, &evs);
    // Windows [s, s + k * 2 s) for k = 1..=4, s a multiple of 8 s (2024-01-01
    // is one too); a row belongs to each that ends after it, unless fired.
    let (step, size, delay) = (2000i64, 8000i64, 2000i64);
    let mut windows: BTreeMap<(String, i64, i64), (i64, i64)> = BTreeMap::new();
    let mut watermark = i64::MIN;
    for e in &evs {
        let start = e.ts - e.ts.rem_euclid(size);
        let mut end = start + (e.ts - start) / step * step + step;
        while end <= start + size {
            if end - 1 > watermark {
                let w = windows.entry((e.key.clone(), start, end)).or_default();
                w.0 += 1;
                w.1 += e.value.unwrap_or(0);
            }
            end += step;
        }
        watermark = watermark.max(e.ts - delay);
    }
    let mut want: Vec<String> = windows
        .into_iter()
        .map(|((key, start, end), (n, sum))| {
            format!("{key},{},{},{n},{sum}", timestamp(start), timestamp(end))
        })
        .collect();
    want.sort();
    let script = format!(
        "CREATE TABLE events (k STRING, v BIGINT, ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv',
               'scan.watermark.emit.strategy' = 'on-event');
         CREATE TABLE out (k STRING, ws TIMESTAMP(3), we TIMESTAMP(3), n BIGINT, s BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO out
         SELECT k, window_start, window_end, COUNT(*), COALESCE(SUM(v), 0)
         FROM TABLE(CUMULATE(TABLE events, DESCRIPTOR(ts), INTERVAL '2' SECOND,
                             INTERVAL '8' SECOND))
         GROUP BY window_start, window_end, k;",
        input.display(),
        output.display()
    );
    for parallelism in [1, 2] {
        assert_eq!(
            run(&script, parallelism, &output),
            want,
            "parallelism {parallelism}"
        );
    }
}
