//! Updating queries and the `json` format, end to end through `floe sql`,
//! each against an oracle computed here:
//!
//! - a non-windowed `GROUP BY` into `print` prints exactly the changelog
//!   Flink's `GroupAggFunction` emits (`+I`, then `-U`/`+U` per change of a
//!   key's result, nothing when it does not change), simulated row by row;
//!   at P=2 the changes, applied in order, leave the final result per key;
//! - `HAVING` on an updating aggregate: a `-U` that passes the filter
//!   takes a key away, so the final view holds exactly the groups whose
//!   final result satisfies it;
//! - JSON lines in (fields in any order, unknown and missing fields, escapes)
//!   and out: each written line equals the line built here.

use floe::text::mix64;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Output};

fn floe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .expect("floe runs")
}

/// Seeded `name,amount` rows.
fn rows(n: u64, names: u64) -> Vec<(String, i64)> {
    (0..n)
        .map(|i| {
            let h = mix64(i ^ 0xa11ce);
            (format!("u{}", h % names), ((h >> 20) % 50) as i64)
        })
        .collect()
}

fn write_csv(path: &Path, rows: &[(String, i64)]) {
    let text: String = rows.iter().map(|(k, v)| format!("{k},{v}\n")).collect();
    std::fs::write(path, text).expect("write the input");
}

/// `[name, COUNT(*), SUM, MIN, MAX, AVG, COUNT(DISTINCT amount)]` of a
/// group's rows, as Flink computes them (`AVG` of `INT` truncates).
#[derive(Default, Clone)]
struct Acc {
    count: i64,
    sum: i64,
    min: i64,
    max: i64,
    distinct: HashSet<i64>,
}

impl Acc {
    fn add(&mut self, v: i64) {
        if self.count == 0 {
            self.min = v;
            self.max = v;
        }
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.distinct.insert(v);
    }

    fn row(&self, key: &str) -> String {
        format!(
            "{key}, {}, {}, {}, {}, {}, {}",
            self.count,
            self.sum,
            self.min,
            self.max,
            self.sum / self.count,
            self.distinct.len()
        )
    }
}

const AGGREGATE: &str = "SELECT name, COUNT(*), SUM(amount), MIN(amount), MAX(amount), \
                         AVG(amount), COUNT(DISTINCT amount) FROM clicks GROUP BY name";

fn script(input: &Path, query: &str) -> String {
    format!(
        "CREATE TABLE clicks (name STRING, amount INT) WITH ('connector' = 'filesystem', \
         'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE out (name STRING, n BIGINT, total INT, lo INT, hi INT, mean INT, \
         kinds BIGINT) WITH ('connector' = 'print');\n\
         INSERT INTO out {query};",
        input.display()
    )
}

fn run(script: &str, parallelism: &str) -> Vec<String> {
    let out = floe(&["sql", "-e", script, "--parallelism", parallelism]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The final view of a printed changelog: `+I`/`+U` set a key's row,
/// `-U`/`-D` remove it (lines may start with `N> `).
fn materialize(lines: &[String]) -> BTreeMap<String, String> {
    let mut view = BTreeMap::new();
    for l in lines {
        let l = l.split_once("> ").map_or(l.as_str(), |(_, rest)| rest);
        let (kind, rest) = l.split_at(2);
        let row = rest
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or_else(|| panic!("a print line: {l}"));
        let key = row.split(", ").next().expect("a key").to_string();
        match kind {
            "+I" | "+U" => {
                view.insert(key, row.to_string());
            }
            "-U" | "-D" => {
                assert_eq!(view.remove(&key).as_deref(), Some(row), "retracted {l}");
            }
            other => panic!("kind {other} in {l}"),
        }
    }
    view
}

#[test]
fn group_by_into_print_emits_flinks_changelog() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = rows(600, 9);
    write_csv(&input, &data);
    // Flink's GroupAggFunction, row by row.
    let mut accs: HashMap<String, Acc> = HashMap::new();
    let mut want = Vec::new();
    for (k, v) in &data {
        let acc = accs.entry(k.clone()).or_default();
        let before = (acc.count > 0).then(|| acc.row(k));
        acc.add(*v);
        let after = acc.row(k);
        match before {
            None => want.push(format!("+I[{after}]")),
            Some(b) if b == after => {}
            Some(b) => {
                want.push(format!("-U[{b}]"));
                want.push(format!("+U[{after}]"));
            }
        }
    }
    let got = run(&script(&input, AGGREGATE), "1");
    assert_eq!(got, want);
    // At P=2 the lines of a key come from one subtask, in order.
    let got = materialize(&run(&script(&input, AGGREGATE), "2"));
    let want: BTreeMap<String, String> = accs.iter().map(|(k, a)| (k.clone(), a.row(k))).collect();
    assert_eq!(got, want);
}

#[test]
fn having_on_updates_takes_a_key_away_when_it_stops_holding() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = rows(800, 200);
    write_csv(&input, &data);
    // MIN falls below 3 for some keys after it held: their -U passes the
    // filter and the +U does not.
    let query = format!("{AGGREGATE} HAVING MIN(amount) >= 3");
    let got = materialize(&run(&script(&input, &query), "2"));
    let mut accs: HashMap<String, Acc> = HashMap::new();
    let mut dropped = 0;
    for (k, v) in &data {
        let acc = accs.entry(k.clone()).or_default();
        let held = acc.count > 0 && acc.min >= 3;
        acc.add(*v);
        dropped += usize::from(held && acc.min < 3);
    }
    assert!(
        dropped > 0,
        "no key stopped holding: the test checks nothing"
    );
    let want: BTreeMap<String, String> = accs
        .iter()
        .filter(|(_, a)| a.min >= 3)
        .map(|(k, a)| (k.clone(), a.row(k)))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

/// A decimal with two places, as Java's `BigDecimal.toString` writes it.
fn cents(c: i64) -> String {
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

/// A timestamp as Flink's JSON format writes it: the fraction's trailing
/// zeros dropped.
fn timestamp(ms: i64) -> String {
    let s = ms / 1000;
    let mut text = format!(
        "2024-03-01 {:02}:{:02}:{:02}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    );
    if ms % 1000 != 0 {
        let frac = format!("{:03}", ms % 1000);
        text.push('.');
        text.push_str(frac.trim_end_matches('0'));
    }
    text
}

#[test]
fn json_lines_round_trip_through_a_query() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.json");
    let output = dir.path().join("out.json");
    let mut text = String::new();
    let mut want = Vec::new();
    for i in 0..400u64 {
        let h = mix64(i ^ 0x15);
        let name = match h % 4 {
            0 => format!("plain{i}"),
            1 => format!("quote\"{i}\\"),
            2 => format!("ünï {i}"),
            _ => format!("tab\t{i}"),
        };
        let cents_in = (h >> 8) % 10_000;
        let ms = ((h >> 24) % 86_400_000) as i64;
        let note = (h >> 40) % 3;
        // Fields in varying order, an unknown one, the note missing or null.
        let name_json = serde_json::to_string(&name).expect("json");
        let amount = format!("{}.{:02}", cents_in / 100, cents_in % 100);
        let ts = timestamp(ms);
        let line = match note {
            0 => format!(
                r#"{{"extra":[1,{{"x":2}}],"amount":{amount},"ts":"{ts}","name":{name_json}}}"#
            ),
            1 => format!(r#"{{"name":{name_json},"note":null,"amount":"{amount}","ts":"{ts}"}}"#),
            _ => format!(r#"{{"ts":"{ts}","note":"n{i}","name":{name_json},"amount":{amount}}}"#),
        };
        text.push_str(&line);
        text.push('\n');
        if cents_in > 2_000 {
            let note_out = match note {
                2 => format!("\"n{i}\""),
                _ => "null".to_string(),
            };
            want.push(format!(
                r#"{{"name":{name_json},"doubled":{},"ts":"{ts}","note":{note_out}}}"#,
                cents(2 * cents_in as i64)
            ));
        }
    }
    std::fs::write(&input, text).expect("write the input");
    let script = format!(
        "CREATE TABLE src (name STRING, amount DECIMAL(6, 2), ts TIMESTAMP(3), note STRING) \
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         CREATE TABLE out (name STRING, doubled DECIMAL(7, 2), ts TIMESTAMP(3), note STRING) \
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         INSERT INTO out SELECT name, amount * 2, ts, note FROM src WHERE amount > 20;",
        input.display(),
        output.display()
    );
    let out = floe(&["sql", "-e", &script, "--parallelism", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = std::fs::read_to_string(&output)
        .expect("the output")
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn json_parse_errors_fail_the_job_or_are_skipped_as_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.json");
    let output = dir.path().join("out.csv");
    std::fs::write(&input, "{\"a\":1}\n{\"a\":\"x\"}\nnot json\n{\"a\":3}\n").expect("write");
    let script = |options: &str| {
        format!(
            "CREATE TABLE src (a INT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'json'{options});\n\
             CREATE TABLE out (a INT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv');\n\
             INSERT INTO out SELECT a FROM src;",
            input.display(),
            output.display()
        )
    };
    let out = floe(&["sql", "-e", &script(""), "--parallelism", "1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    let out = floe(&[
        "sql",
        "-e",
        &script(", 'json.ignore-parse-errors' = 'true'"),
        "--parallelism",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The bad field is NULL, the bad line skipped.
    assert_eq!(
        std::fs::read_to_string(&output).expect("the output"),
        "1\n\n3\n"
    );
}
