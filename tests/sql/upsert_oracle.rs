//! The oracles of the tests of updates into upsert sinks, computed here
//! from the input alone: the changelog of Flink's `GroupAggFunction` for a
//! `COUNT(*)`, the rows Flink's `SinkUpsertMaterializer` emits for it
//! (replayed with a HashMap of the rows alive per sink key), and the table
//! an upsert sink holds after a changelog (each `+I`/`+U` writes its key,
//! each `-U`/`-D` deletes it); and a run of `floe sql` into a fresh
//! PostgreSQL table.

#![cfg(all(feature = "kafka", feature = "postgres"))]
#![allow(dead_code)]

use crate::kafka_support::*;
use floe::text::mix64;
use std::collections::{BTreeMap, HashMap};

/// Seeded `name,region` rows.
pub fn clicks(n: u64, names: u64, regions: u64) -> Vec<(String, String)> {
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

/// The rows as CSV lines.
pub fn csv(rows: &[(String, String)]) -> String {
    rows.iter().map(|(n, r)| format!("{n},{r}\n")).collect()
}

/// One change of a changelog: kind (`+I`, `-U`, `+U`, `-D`) and row.
pub type Change = (&'static str, Vec<String>);

/// Flink's `GroupAggFunction` over `rows` for `SELECT key.., COUNT(*)
/// GROUP BY key..` (the key picked by `key`), with its `-U` rows.
pub fn count_changelog(
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

fn pick(r: &[String], cols: &[usize]) -> Vec<String> {
    cols.iter().map(|&c| r[c].clone()).collect()
}

/// What Flink's `SinkUpsertMaterializer` keyed by the columns `pk` (rows
/// told apart by the columns `upsert_key`) emits for `changes`: a row
/// added is emitted as `+I` into an empty key, else `+U`; a row taken
/// away empties its key (`-D` of it) or, if it was the newest, makes the
/// newest left the key's row (`+U`).
pub fn materializer(changes: &[Change], pk: &[usize], upsert_key: &[usize]) -> Vec<Change> {
    let mut alive: HashMap<Vec<String>, Vec<Vec<String>>> = HashMap::new();
    let mut out = Vec::new();
    for (kind, row) in changes {
        let rows = alive.entry(pick(row, pk)).or_default();
        let at = rows
            .iter()
            .position(|a| pick(a, upsert_key) == pick(row, upsert_key));
        if matches!(*kind, "-U" | "-D") {
            let i = at.expect("a retracted row is alive");
            rows.remove(i);
            match rows.last() {
                None => out.push(("-D", row.clone())),
                Some(newest) if i == rows.len() => out.push(("+U", newest.clone())),
                Some(_) => {}
            }
        } else {
            out.push((if rows.is_empty() { "+I" } else { "+U" }, row.clone()));
            match at {
                Some(i) => rows[i] = row.clone(),
                None => rows.push(row.clone()),
            }
        }
    }
    out
}

/// The table an upsert sink keyed by the columns `pk` holds after
/// `changes`: sink key → row.
pub fn upsert_table(changes: &[Change], pk: &[usize]) -> BTreeMap<Vec<String>, Vec<String>> {
    let mut table = BTreeMap::new();
    for (kind, row) in changes {
        match *kind {
            "-U" | "-D" => table.remove(&pick(row, pk)),
            _ => table.insert(pick(row, pk), row.clone()),
        };
    }
    table
}

/// The sink table after Flink's `SinkUpsertMaterializer` (keyed by `pk`,
/// rows told apart by `upsert_key`) and an upsert sink replay `changes`.
pub fn materialize(
    changes: &[Change],
    pk: &[usize],
    upsert_key: &[usize],
) -> BTreeMap<Vec<String>, Vec<String>> {
    upsert_table(&materializer(changes, pk, upsert_key), pk)
}

/// `host:port` and database of a PostgreSQL URL.
pub fn host_port_db(pg: &str) -> (&str, &str) {
    pg.rsplit_once('@')
        .map(|(_, rest)| rest.split_once('/').expect("a database"))
        .expect("a URL with credentials")
}

/// A fresh PostgreSQL table `name` of `columns` (`name type` pairs, all
/// `STRING` or `BIGINT`) keyed by `pk`.
pub fn create_pg_table(pg: &str, name: &str, columns: &[(&str, &str)], pk: &[&str]) {
    let pg_cols: Vec<String> = columns
        .iter()
        .map(|(n, t)| match *t {
            "BIGINT" => format!("{n} bigint"),
            _ => format!("{n} text"),
        })
        .collect();
    query(pg, &format!("DROP TABLE IF EXISTS {name}"));
    query(
        pg,
        &format!(
            "CREATE TABLE {name} ({}, PRIMARY KEY ({}))",
            pg_cols.join(", "),
            pk.join(", ")
        ),
    );
}

/// The `CREATE TABLE sink` of a `jdbc` table over the PostgreSQL table
/// `name`.
pub fn jdbc_sink_ddl(pg: &str, name: &str, columns: &[(&str, &str)], pk: &[&str]) -> String {
    let (host_port, db) = host_port_db(pg);
    let sql_cols: Vec<String> = columns.iter().map(|(n, t)| format!("{n} {t}")).collect();
    format!(
        "CREATE TABLE sink ({}, PRIMARY KEY ({}) NOT ENFORCED) WITH (\n\
           'connector' = 'jdbc', 'url' = 'jdbc:postgresql://{host_port}/{db}',\n\
           'table-name' = '{name}', 'username' = 'floe', 'password' = 'floe');\n",
        sql_cols.join(", "),
        pk.join(", ")
    )
}

/// The rows of the PostgreSQL table `name` as text, keyed by `pk`.
pub fn pg_rows(
    pg: &str,
    name: &str,
    columns: &[(&str, &str)],
    pk: &[&str],
) -> BTreeMap<Vec<String>, Vec<String>> {
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
    query(pg, &format!("SELECT {} FROM {name}", select.join(", ")))
        .iter()
        .map(|r| {
            let row: Vec<String> = (0..columns.len()).map(|i| r.get::<_, String>(i)).collect();
            (pk_at.iter().map(|&i| row[i].clone()).collect(), row)
        })
        .collect()
}

/// Runs `{settings}INSERT INTO sink <query>` from the CSV `input` into a
/// fresh PostgreSQL table of `columns` keyed by `pk`, with checkpoints
/// (two-phase commit); the table's rows as text, keyed by `pk`.
pub fn run_into_postgres(
    pg: &str,
    input: &std::path::Path,
    dir: &std::path::Path,
    (table, columns, pk): (&str, &[(&str, &str)], &[&str]),
    (settings, insert): (&str, &str),
    parallelism: &str,
) -> BTreeMap<Vec<String>, Vec<String>> {
    let table = format!("{table}_{parallelism}_{}", std::process::id());
    create_pg_table(pg, &table, columns, pk);
    let script = format!(
        "{settings}CREATE TABLE clicks (name STRING, region STRING) WITH (\n\
           'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         {}INSERT INTO sink {insert};",
        input.display(),
        jdbc_sink_ddl(pg, &table, columns, pk),
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
    let got = pg_rows(pg, &table, columns, pk);
    query(pg, &format!("DROP TABLE {table}"));
    got
}
