//! Projections, filters and expressions of `INSERT INTO .. SELECT .. FROM
//! .. WHERE` over seeded CSV rows with `NULL`s, at parallelism 1 and 2.
//! Every expected line is computed here from the generated values, with
//! SQL's three-valued logic written out by hand.

use floe::StreamExecutionEnvironment;
use floe::sql::SqlSession;
use floe::text::mix64;
use std::path::Path;

/// One generated row.
struct Item {
    id: i32,
    name: String,
    qty: Option<i32>,
    /// Price in cents.
    price: Option<i64>,
    flag: Option<bool>,
}

fn items(seed: u64, n: u64) -> Vec<Item> {
    (0..n)
        .map(|i| {
            let h = mix64(seed ^ mix64(i));
            let names = [
                "apple",
                "Pear",
                "",
                "plum tree",
                "fig,dried",
                "kiwi \"gold\"",
            ];
            Item {
                id: i as i32,
                name: names[(h % names.len() as u64) as usize].to_string(),
                qty: (!(h >> 8).is_multiple_of(5)).then(|| ((h >> 12) % 40) as i32 - 5),
                price: (!(h >> 20).is_multiple_of(7))
                    .then(|| ((h >> 24) % 100_000) as i64 - 20_000),
                flag: match (h >> 40) % 3 {
                    0 => None,
                    1 => Some(true),
                    _ => Some(false),
                },
            }
        })
        .collect()
}

/// A CSV field as Flink's format writes a string: quoted when longer than
/// 24 UTF-16 units or holding a character below `-` (the comma, the quote
/// and the line feed are all below it), quotes doubled.
fn csv_string(s: &str) -> String {
    if s.encode_utf16().count() > 24 || s.chars().any(|c| c < '-') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Cents as a decimal of scale 2.
fn cents(c: i64) -> String {
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

/// Cents as Flink's csv format writes a decimal: Java's
/// `BigDecimal.stripTrailingZeros().toString()` (`12.5`, `4596`, `2.35E+4`).
fn written_cents(c: i64) -> String {
    if c == 0 {
        return "0".into();
    }
    let (mut unscaled, mut scale) = (c, 2i32);
    while unscaled % 10 == 0 {
        unscaled /= 10;
        scale -= 1;
    }
    match scale {
        1.. => cents(unscaled * 10i64.pow((2 - scale) as u32))
            .trim_end_matches('0')
            .to_string(),
        0 => unscaled.to_string(),
        _ => {
            let digits = unscaled.abs().to_string();
            let sign = if unscaled < 0 { "-" } else { "" };
            let (first, rest) = digits.split_at(1);
            let dot = if rest.is_empty() { "" } else { "." };
            format!(
                "{sign}{first}{dot}{rest}E+{}",
                digits.len() as i32 - 1 - scale
            )
        }
    }
}

fn write_input(path: &Path, items: &[Item]) {
    let mut text = String::new();
    for it in items {
        let opt = |v: Option<String>| v.unwrap_or_default();
        text.push_str(&format!(
            "{},{},{},{},{}\n",
            it.id,
            csv_string(&it.name),
            opt(it.qty.map(|q| q.to_string())),
            opt(it.price.map(cents)),
            opt(it.flag.map(|b| b.to_string())),
        ));
    }
    std::fs::write(path, text).expect("write the input");
}

/// `qty IS NULL OR qty > 10 AND flag`, three-valued.
fn keep(it: &Item) -> bool {
    let gt = it.qty.map(|q| q > 10);
    let and = match (gt, it.flag) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    };
    it.qty.is_none() || and == Some(true)
}

fn expected(items: &[Item]) -> Vec<String> {
    let mut lines: Vec<String> = items
        .iter()
        .filter(|it| keep(it))
        .map(|it| {
            let opt = |v: Option<String>| v.unwrap_or_default();
            let label = match it.flag {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            };
            format!(
                "{},{},{},{},{},{},{},{}",
                it.id,
                csv_string(&it.name.to_uppercase()),
                opt(it.qty.map(|q| (q * 2 + 1).to_string())),
                opt(it
                    .price
                    .zip(it.qty)
                    .map(|(p, q)| written_cents(p * i64::from(q)))),
                it.qty.unwrap_or(-1),
                label,
                it.name.chars().count(),
                csv_string(&format!("{}#{}", it.name.trim(), it.id)),
            )
        })
        .collect();
    lines.sort();
    lines
}

fn run(script: &str, parallelism: usize, output: &Path) -> Vec<String> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    SqlSession::new(&env)
        .execute_sql(script)
        .expect("the script runs");
    let text = std::fs::read_to_string(output).expect("the output file");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn projections_filters_and_expressions_follow_sql_null_semantics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("items.csv");
    let output = dir.path().join("out.csv");
    let rows = items(5, 2000);
    write_input(&input, &rows);
    let want = expected(&rows);
    assert!(want.len() > 200 && want.len() < 1800, "{}", want.len());
    let script = format!(
        "CREATE TABLE items (
           id INT, name STRING, qty INT, price DECIMAL(8, 2), flag BOOLEAN
         ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE out (
           id INT, uname STRING, q2 INT, cost DECIMAL(19, 2), q BIGINT, label STRING,
           len INT, tag STRING
         ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO out
         SELECT id, UPPER(name), qty * 2 + 1, price * qty, COALESCE(qty, -1),
                CASE WHEN flag THEN 'yes' WHEN NOT flag THEN 'no' ELSE 'unknown' END,
                CHAR_LENGTH(name), CONCAT(TRIM(name), '#', CAST(id AS STRING))
         FROM items
         WHERE qty IS NULL OR qty > 10 AND flag;",
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
fn union_all_of_two_filters_and_a_subquery() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("items.csv");
    let output = dir.path().join("out.csv");
    let rows = items(9, 500);
    write_input(&input, &rows);
    let mut want: Vec<String> = Vec::new();
    for it in &rows {
        if it.qty.is_some_and(|q| q < 0) {
            want.push(format!("{},low", it.id));
        }
        if it.qty.is_some_and(|q| q >= 30) && it.name.len() >= 4 {
            want.push(format!(
                "{},{}",
                it.id,
                csv_string(&it.name[..4].to_lowercase())
            ));
        }
    }
    want.sort();
    let script = format!(
        "CREATE TABLE items (id INT, name STRING, qty INT, price DECIMAL(8, 2), flag BOOLEAN)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE out (id BIGINT, what STRING)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         SET 'execution.runtime-mode' = 'streaming';
         SET 'pipeline.name' = 'union';
         INSERT INTO out
         SELECT id, 'low' FROM items WHERE qty < 0
         UNION ALL
         SELECT id, LOWER(SUBSTRING(name FROM 1 FOR 4))
         FROM (SELECT id, name, qty FROM items WHERE CHAR_LENGTH(name) >= 4) AS t
         WHERE t.qty >= 30;",
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
fn a_bad_row_fails_the_job_naming_its_line_unless_errors_are_ignored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.csv");
    let output = dir.path().join("out.csv");
    std::fs::write(&input, "1,a\n2,b\nthree,c\n4,d\n").expect("write");
    let script = |lenient: bool| {
        format!(
            "CREATE TABLE t (n INT, s STRING) WITH ('connector' = 'filesystem', 'path' = '{}',
               'format' = 'csv', 'csv.ignore-parse-errors' = '{lenient}');
             CREATE TABLE o (n INT, s STRING) WITH ('connector' = 'filesystem', 'path' = '{}',
               'format' = 'csv');
             INSERT INTO o SELECT n, s FROM t;",
            input.display(),
            output.display()
        )
    };
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let e = SqlSession::new(&env)
        .execute_sql(&script(false))
        .expect_err("'three' is not an INT");
    let text = e.to_string();
    assert!(text.contains("line 3"), "{text}");
    assert!(text.contains("'three' is not a valid INT"), "{text}");
    assert_eq!(
        run(&script(true), 1, &output),
        vec![",c", "1,a", "2,b", "4,d"]
    );
}

#[test]
fn a_computed_event_time_from_epoch_millis_feeds_a_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.csv");
    let output = dir.path().join("out.csv");
    // Epoch milliseconds in order; 10-second windows in UTC.
    let mut text = String::new();
    let mut want: std::collections::BTreeMap<(i64, String), i64> = Default::default();
    for i in 0..600u64 {
        let h = mix64(i ^ 77);
        let ms = 1_700_000_000_000 + i as i64 * 137;
        let key = ["x", "y", "z"][(h % 3) as usize];
        text.push_str(&format!("{key},{ms}\n"));
        *want.entry((ms - ms % 10_000, key.to_string())).or_default() += 1;
    }
    std::fs::write(&input, text).expect("write");
    // 1_700_000_000_000 ms is 2023-11-14 22:13:20 UTC, a multiple of 10 s:
    // every window's last millisecond (`window_time`) ends in .999.
    let base = 1_700_000_000_000i64;
    let window_time = |start: i64| {
        let s = 22 * 3600 + 13 * 60 + 20 + (start + 9_999 - base) / 1000;
        format!(
            "\"2023-11-14 {:02}:{:02}:{:02}.999Z\"",
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    };
    let mut want: Vec<String> = want
        .into_iter()
        .map(|((start, key), n)| format!("{key},{},{n}", window_time(start)))
        .collect();
    want.sort();
    let script = format!(
        "CREATE TABLE e (k STRING, epoch BIGINT,
           ts AS TO_TIMESTAMP_LTZ(epoch, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE o (k STRING, wt TIMESTAMP_LTZ(3), n BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO o SELECT k, window_time, COUNT(*)
         FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '10' SECOND))
         WHERE k IN ('x', 'y', 'z') AND epoch BETWEEN 0 AND 9999999999999 AND k LIKE '_'
         GROUP BY window_start, window_end, window_time, k;",
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
fn two_scripts_of_a_session_share_tables_and_run_as_one_job() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("items.csv");
    let rows = items(13, 300);
    write_input(&input, &rows);
    let (first, second) = (dir.path().join("first.csv"), dir.path().join("second.csv"));
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let mut session = SqlSession::new(&env);
    session
        .plan_sql(&format!(
            "CREATE TABLE items (id INT, name STRING, qty INT, price DECIMAL(8, 2), flag BOOLEAN)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
             CREATE TABLE a (id INT) WITH ('connector' = 'filesystem', 'path' = '{}',
               'format' = 'csv');
             INSERT INTO a SELECT id FROM items WHERE flag;",
            input.display(),
            first.display()
        ))
        .expect("the first script plans");
    let planned = session
        .plan_sql(&format!(
            "CREATE TABLE b (id INT) WITH ('connector' = 'filesystem', 'path' = '{}',
               'format' = 'csv');
             SET 'parallelism.default' = '1';
             INSERT INTO b SELECT id FROM items WHERE NOT flag;",
            second.display()
        ))
        .expect("the second script sees the first one's table");
    assert_eq!(planned.inserts, 1);
    assert_eq!(env.config().parallelism, 1);
    env.execute().expect("one job runs both");
    let ids = |path: &Path| {
        let mut v: Vec<i32> = std::fs::read_to_string(path)
            .expect("output")
            .lines()
            .map(|l| l.parse().expect("an id"))
            .collect();
        v.sort_unstable();
        v
    };
    let want = |flag: bool| -> Vec<i32> {
        rows.iter()
            .filter(|it| it.flag == Some(flag))
            .map(|it| it.id)
            .collect()
    };
    assert_eq!(ids(&first), want(true));
    assert_eq!(ids(&second), want(false));
}
