//! An updating `GROUP BY` into `jdbc` PostgreSQL (the server of
//! `scripts/services.sh`) whose `PRIMARY KEY` is not the group key, as
//! Flink plans it with `table.exec.sink.upsert-materialize` = `AUTO`:
//!
//! - a primary key that is neither the group key nor holds it
//!   (`PRIMARY KEY (cnt)` for `GROUP BY name`; `PRIMARY KEY (name)` for
//!   `GROUP BY name, region`): a `SinkUpsertMaterializer` keyed by it; at
//!   one subtask the table equals the replay, with a HashMap, of Flink's
//!   rule over the aggregate's changelog computed here; at two subtasks
//!   (the order in which groups meet in a sink key is then free) each sink
//!   key holds one of the rows alive in it at the end;
//! - a primary key holding the group key (`PRIMARY KEY (name, cnt)`): the
//!   `-U` rows delete the old sink keys; the table holds each group's final
//!   row.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support::*;
use floe::text::mix64;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Seeded `name,region` rows.
fn clicks(n: u64, names: u64, regions: u64) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let h = mix64(i ^ 0x5eed);
            (
                format!("u{}", h % names),
                format!("r{}", (h >> 20) % regions),
            )
        })
        .collect()
}

/// One change of the aggregate's changelog: kind (`+I`, `-U`, `+U`) and
/// row.
type Change = (&'static str, Vec<String>);

/// Flink's `GroupAggFunction` over `rows` for `SELECT key.., COUNT(*)
/// GROUP BY key..` (the key picked by `key`), with its `-U` rows.
fn count_changelog(
    rows: &[(String, String)],
    key: fn(&(String, String)) -> Vec<String>,
) -> Vec<Change> {
    let mut counts: HashMap<Vec<String>, u64> = HashMap::new();
    let mut out = Vec::new();
    let row = |k: &[String], n: u64| {
        let mut r = k.to_vec();
        r.push(n.to_string());
        r
    };
    for r in rows {
        let k = key(r);
        let n = counts.entry(k.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            out.push(("+I", row(&k, 1)));
        } else {
            out.push(("-U", row(&k, *n - 1)));
            out.push(("+U", row(&k, *n)));
        }
    }
    out
}

/// The sink table after Flink's `SinkUpsertMaterializer` (keyed by the
/// columns `pk`, rows told apart by the columns `upsert_key`) and an
/// upsert sink replay `changes`: sink key → row.
fn materialize(
    changes: &[Change],
    pk: &[usize],
    upsert_key: &[usize],
) -> BTreeMap<Vec<String>, Vec<String>> {
    let pick =
        |r: &[String], cols: &[usize]| cols.iter().map(|&c| r[c].clone()).collect::<Vec<_>>();
    let mut alive: HashMap<Vec<String>, Vec<Vec<String>>> = HashMap::new();
    let mut table = BTreeMap::new();
    for (kind, row) in changes {
        let k = pick(row, pk);
        let rows = alive.entry(k.clone()).or_default();
        let at = rows
            .iter()
            .position(|a| pick(a, upsert_key) == pick(row, upsert_key));
        if *kind == "-U" {
            let i = at.expect("a retracted row is alive");
            rows.remove(i);
            match rows.last() {
                None => {
                    table.remove(&k);
                }
                Some(newest) if i == rows.len() => {
                    table.insert(k, newest.clone());
                }
                Some(_) => {}
            }
        } else {
            match at {
                Some(i) => rows[i] = row.clone(),
                None => rows.push(row.clone()),
            }
            table.insert(k, row.clone());
        }
    }
    table
}

/// Runs `INSERT INTO sink <query>` into a fresh PostgreSQL table of
/// `columns` (`name type` pairs, all text or bigint) keyed by `pk`, with
/// checkpoints (two-phase commit); the table's rows as text, keyed by `pk`.
fn run_into_postgres(
    pg: &str,
    input: &std::path::Path,
    dir: &std::path::Path,
    (table, columns, pk): (&str, &[(&str, &str)], &[&str]),
    insert: &str,
    parallelism: &str,
) -> BTreeMap<Vec<String>, Vec<String>> {
    let (host_port, db) = pg
        .rsplit_once('@')
        .map(|(_, rest)| rest.split_once('/').expect("a database"))
        .expect("a URL with credentials");
    let table = format!("{table}_{parallelism}_{}", std::process::id());
    let pg_cols: Vec<String> = columns
        .iter()
        .map(|(n, t)| match *t {
            "BIGINT" => format!("{n} bigint"),
            _ => format!("{n} text"),
        })
        .collect();
    query(pg, &format!("DROP TABLE IF EXISTS {table}"));
    query(
        pg,
        &format!(
            "CREATE TABLE {table} ({}, PRIMARY KEY ({}))",
            pg_cols.join(", "),
            pk.join(", ")
        ),
    );
    let sql_cols: Vec<String> = columns.iter().map(|(n, t)| format!("{n} {t}")).collect();
    let script = format!(
        "CREATE TABLE clicks (name STRING, region STRING) WITH (\n\
           'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE sink ({}, PRIMARY KEY ({}) NOT ENFORCED) WITH (\n\
           'connector' = 'jdbc', 'url' = 'jdbc:postgresql://{host_port}/{db}',\n\
           'table-name' = '{table}', 'username' = 'floe', 'password' = 'floe');\n\
         INSERT INTO sink {insert};",
        input.display(),
        sql_cols.join(", "),
        pk.join(", ")
    );
    let ckpt = dir.join(format!("ckpt-{table}"));
    let args: Vec<String> = [
        "sql",
        "-e",
        &script,
        "--parallelism",
        parallelism,
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        ckpt.to_str().expect("UTF-8"),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let out = run(&args);
    assert!(
        out.status.success(),
        "floe sql:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let select: Vec<String> = columns.iter().map(|(n, _)| format!("{n}::text")).collect();
    let pk_at: Vec<usize> = pk
        .iter()
        .map(|k| {
            columns
                .iter()
                .position(|(n, _)| n == k)
                .expect("a key column")
        })
        .collect();
    let got = query(pg, &format!("SELECT {} FROM {table}", select.join(", ")))
        .iter()
        .map(|r| {
            let row: Vec<String> = (0..columns.len()).map(|i| r.get::<_, String>(i)).collect();
            (pk_at.iter().map(|&i| row[i].clone()).collect(), row)
        })
        .collect();
    query(pg, &format!("DROP TABLE {table}"));
    got
}

#[test]
fn a_group_moving_between_sink_keys_is_materialized_by_the_primary_key() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = clicks(600, 30, 3);
    let text: String = data.iter().map(|(n, r)| format!("{n},{r}\n")).collect();
    std::fs::write(&input, text).expect("write the input");
    let by_name = |r: &(String, String)| vec![r.0.clone()];
    let changes = count_changelog(&data, by_name);
    // The changelog's rows are [name, cnt]; the sink's columns are
    // (cnt, name), keyed by cnt.
    let want: BTreeMap<Vec<String>, Vec<String>> = materialize(&changes, &[1], &[0])
        .into_iter()
        .map(|(k, row)| (k, vec![row[1].clone(), row[0].clone()]))
        .collect();
    let query = "SELECT COUNT(*) AS cnt, name FROM clicks GROUP BY name";
    let sink = (
        "upsert_by_cnt",
        &[("cnt", "BIGINT"), ("name", "STRING")][..],
        &["cnt"][..],
    );
    let got = run_into_postgres(&pg, &input, dir.path(), sink, query, "1");
    assert_eq!(got, want, "PRIMARY KEY (cnt), one subtask");

    // At two subtasks: the same sink keys, each holding a row alive in it
    // (a group whose final count is the key).
    let mut finals: HashMap<String, u64> = HashMap::new();
    for (name, _) in &data {
        *finals.entry(name.clone()).or_default() += 1;
    }
    let got = run_into_postgres(&pg, &input, dir.path(), sink, query, "2");
    let keys: BTreeSet<Vec<String>> = finals.values().map(|n| vec![n.to_string()]).collect();
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), keys);
    for (k, row) in &got {
        assert_eq!(
            finals.get(&row[1]).map(u64::to_string).as_ref(),
            Some(&k[0]),
            "sink key {k:?} holds {row:?}, not alive in it"
        );
    }
    assert!(
        want.len() < changes.iter().filter(|(k, _)| *k != "-U").count(),
        "no group moved"
    );

    // Two grouped columns into a sink keyed by one.
    let by_both = |r: &(String, String)| vec![r.0.clone(), r.1.clone()];
    let changes = count_changelog(&data, by_both);
    let want = materialize(&changes, &[0], &[0, 1]);
    let query = "SELECT name, region, COUNT(*) AS cnt FROM clicks GROUP BY name, region";
    let sink = (
        "upsert_by_name",
        &[("name", "STRING"), ("region", "STRING"), ("cnt", "BIGINT")][..],
        &["name"][..],
    );
    let got = run_into_postgres(&pg, &input, dir.path(), sink, query, "1");
    assert_eq!(got, want, "PRIMARY KEY (name) for GROUP BY name, region");

    // A primary key holding the group key: no materializer, the `-U` rows
    // delete the old keys.
    let query = "SELECT name, COUNT(*) AS cnt FROM clicks GROUP BY name";
    let sink = (
        "upsert_by_name_cnt",
        &[("name", "STRING"), ("cnt", "BIGINT")][..],
        &["name", "cnt"][..],
    );
    let want: BTreeMap<Vec<String>, Vec<String>> = finals
        .iter()
        .map(|(name, n)| {
            let row = vec![name.clone(), n.to_string()];
            (row.clone(), row)
        })
        .collect();
    let got = run_into_postgres(&pg, &input, dir.path(), sink, query, "2");
    assert_eq!(got, want, "PRIMARY KEY (name, cnt)");
}
