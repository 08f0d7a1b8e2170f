//! `SET 'table.exec.sink.upsert-materialize'` = `NONE`, `AUTO` or `FORCE`
//! (in any case), each statement planned under the `SET`s before it, as
//! Flink's planner decides:
//!
//! - `EXPLAIN` shows `upsertMaterialize=[true]` on the `Sink` and an
//!   operator `SinkMaterializer(pk=[..])` where the mode puts one: `AUTO`
//!   where the primary key does not hold the group key, `FORCE` for every
//!   sink with a primary key (an insert-only query gets the flag, no
//!   operator), `NONE` never; the mode holds for the session's later
//!   scripts;
//! - under `NONE`, an updating `GROUP BY name` into PostgreSQL keyed by
//!   the count: each `-U` deletes its sink key, even where another group's
//!   row is alive in it; the table equals the aggregate's changelog
//!   replayed straight onto a HashMap by the primary key (and differs from
//!   the materialized table of `AUTO`);
//! - under `FORCE`, a `print` table keyed by the group key prints what
//!   Flink's `SinkUpsertMaterializer` emits for the changelog (replayed
//!   here), `-D`/`+I` where `AUTO` prints the `-U`/`+U` rows.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support::*;
use crate::upsert_oracle::*;
use floe::StreamExecutionEnvironment;
use floe::sql::SqlSession;
use std::process::Stdio;

const SET: &str = "SET 'table.exec.sink.upsert-materialize'";

/// A `filesystem` table `clicks` and three sinks of `(name STRING, c
/// BIGINT)`: `by_name` (jdbc, keyed by the group key), `by_c` (upsert-kafka,
/// keyed by the count) and `printed` (print, keyed by the count); then
/// `rest`. Nothing is asked of the servers while a script plans.
fn tables(dir: &std::path::Path, rest: &str) -> String {
    let input = dir.join("clicks.csv");
    std::fs::write(&input, "a,1\n").expect("write");
    format!(
        "CREATE TABLE clicks (name STRING, n BIGINT) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE by_name (name STRING, c BIGINT, PRIMARY KEY (name) NOT ENFORCED) WITH (\n\
           'connector' = 'jdbc', 'url' = 'jdbc:postgresql://h:5432/db', 'table-name' = 't');\n\
         CREATE TABLE by_c (name STRING, c BIGINT, PRIMARY KEY (c) NOT ENFORCED) WITH (\n\
           'connector' = 'upsert-kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'h:1',\n\
           'key.format' = 'json', 'value.format' = 'json');\n\
         CREATE TABLE printed (name STRING, c BIGINT, PRIMARY KEY (c) NOT ENFORCED)\n\
           WITH ('connector' = 'print');\n\
         {rest}",
        input.display()
    )
}

const COUNTS: &str = "SELECT name, COUNT(*) FROM clicks GROUP BY name";

/// What an `EXPLAIN` shows of the materializer: the sink's flag, and the
/// operator's name in the job graph (if any).
fn shown(text: &str, sink: &str, connector: &str) -> (bool, Option<String>) {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("Sink(table=[{sink}], connector=[{connector}]")))
        .unwrap_or_else(|| panic!("no Sink line for {sink}:\n{text}"));
    let flag = match line.strip_suffix(", upsertMaterialize=[true])") {
        Some(_) => true,
        None => {
            assert!(line.ends_with("fields=[name, c])"), "{line}");
            false
        }
    };
    let operator = text
        .find("SinkMaterializer(")
        .map(|i| text[i..].split(')').next().unwrap_or_default().to_string() + ")");
    (flag, operator)
}

#[test]
fn explain_shows_the_materializer_of_each_mode() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = tables(
        dir.path(),
        &format!(
            "EXPLAIN INSERT INTO by_name {COUNTS};\n\
             EXPLAIN INSERT INTO by_c {COUNTS};\n\
             EXPLAIN INSERT INTO printed {COUNTS};\n\
             {SET} = 'force';\n\
             EXPLAIN INSERT INTO by_name {COUNTS};\n\
             EXPLAIN INSERT INTO by_name SELECT name, n FROM clicks;\n\
             EXPLAIN INSERT INTO printed SELECT name, n FROM clicks;\n\
             {SET} = 'None';\n\
             EXPLAIN INSERT INTO by_c {COUNTS};\n\
             EXPLAIN INSERT INTO printed {COUNTS};\n\
             {SET} = 'AUTO';\n\
             EXPLAIN INSERT INTO by_name {COUNTS};"
        ),
    );
    let env = StreamExecutionEnvironment::new();
    let mut session = SqlSession::new(&env);
    let planned = session.plan_sql(&script).expect("plans");
    let e = &planned.explains;
    let name = |t: &str| (true, Some(format!("SinkMaterializer(pk=[{t}])")));
    let none = (false, None);
    // AUTO: the group key is the primary key; the count is not.
    assert_eq!(shown(&e[0], "by_name", "jdbc"), none, "{}", e[0]);
    assert_eq!(shown(&e[1], "by_c", "upsert-kafka"), name("c"), "{}", e[1]);
    assert_eq!(shown(&e[2], "printed", "print"), name("c"), "{}", e[2]);
    // FORCE: every primary key; an insert-only query gets the flag alone.
    assert_eq!(shown(&e[3], "by_name", "jdbc"), name("name"), "{}", e[3]);
    assert_eq!(shown(&e[4], "by_name", "jdbc"), (true, None), "{}", e[4]);
    assert_eq!(shown(&e[5], "printed", "print"), (true, None), "{}", e[5]);
    // NONE: never.
    assert_eq!(shown(&e[6], "by_c", "upsert-kafka"), none, "{}", e[6]);
    assert_eq!(shown(&e[7], "printed", "print"), none, "{}", e[7]);
    assert_eq!(shown(&e[8], "by_name", "jdbc"), none, "{}", e[8]);

    // The mode holds for the session's next scripts.
    session
        .plan_sql(&format!("{SET} = 'FORCE';"))
        .expect("a SET alone");
    let next = session
        .plan_sql(&format!("EXPLAIN INSERT INTO by_name {COUNTS};"))
        .expect("plans");
    assert_eq!(
        shown(&next.explains[0], "by_name", "jdbc"),
        name("name"),
        "{}",
        next.explains[0]
    );
}

#[test]
fn none_deletes_the_sink_key_of_each_retracted_row() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = clicks(600, 30, 3);
    std::fs::write(&input, csv(&data)).expect("write the input");
    // The changelog's rows are [name, cnt]; the sink's columns (cnt, name),
    // keyed by cnt.
    let changes: Vec<Change> = count_changelog(&data, |r| vec![r.0.clone()])
        .into_iter()
        .map(|(kind, row)| (kind, vec![row[1].clone(), row[0].clone()]))
        .collect();
    let want = upsert_table(&changes, &[0]);
    assert_ne!(
        want,
        materialize(&changes, &[0], &[1]),
        "the input makes NONE and AUTO differ"
    );
    let sink = (
        "upsert_none",
        &[("cnt", "BIGINT"), ("name", "STRING")][..],
        &["cnt"][..],
    );
    let settings = format!("{SET} = 'NONE';\n");
    let query = "SELECT COUNT(*) AS cnt, name FROM clicks GROUP BY name";
    let got = run_into_postgres(&pg, &input, dir.path(), sink, (&settings, query), "1");
    assert_eq!(got, want, "PRIMARY KEY (cnt) under NONE");
}

/// What `floe sql` prints for `script` at one subtask.
fn printed(script: &str) -> Vec<String> {
    let args: Vec<String> = ["sql", "-e", script, "--parallelism", "1"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let out = floe(&args)
        .stdout(Stdio::piped())
        .output()
        .expect("floe runs");
    assert!(
        out.status.success(),
        "floe sql:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Fails with the first line where `got` and `want` differ.
fn same_lines(got: &[String], want: &[String], what: &str) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        panic!(
            "{what}: line {} is {:?}, expected {:?} ({} lines, {} expected)",
            i + 1,
            got.get(i),
            want.get(i),
            got.len(),
            want.len()
        );
    }
}

#[test]
fn force_materializes_a_sink_keyed_by_the_group_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = clicks(300, 12, 3);
    std::fs::write(&input, csv(&data)).expect("write the input");
    let script = |mode: &str| {
        format!(
            "{SET} = '{mode}';\n\
             CREATE TABLE clicks (name STRING, region STRING) WITH (\n\
               'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             CREATE TABLE counts (name STRING, cnt BIGINT, PRIMARY KEY (name) NOT ENFORCED)\n\
               WITH ('connector' = 'print');\n\
             INSERT INTO counts SELECT name, COUNT(*) FROM clicks GROUP BY name;",
            input.display()
        )
    };
    let lines = |changes: &[Change]| -> Vec<String> {
        changes
            .iter()
            .map(|(kind, row)| format!("{kind}[{}]", row.join(", ")))
            .collect()
    };
    let changes = count_changelog(&data, |r| vec![r.0.clone()]);
    let want = lines(&materializer(&changes, &[0], &[0]));
    assert!(
        want.iter().any(|l| l.starts_with("-D[")),
        "no group updated"
    );
    same_lines(&printed(&script("force")), &want, "FORCE");
    // AUTO: the sink takes the changelog itself.
    same_lines(&printed(&script("auto")), &lines(&changes), "AUTO");
}
