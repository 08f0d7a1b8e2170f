//! Exactly once through `kill -9` for a `floe sql` job whose updates go
//! through a `SinkUpsertMaterializer`: Kafka (one partition, csv) →
//! `SELECT COUNT(*) AS cnt, name .. GROUP BY name` → `jdbc` PostgreSQL
//! keyed by `cnt` (two-phase commit), at one subtask.
//!
//! The process is killed (SIGKILL) once its status line reports 1, then 2,
//! then 3 completed checkpoints of the run, each run after the first
//! resuming with `--from-checkpoint` from the checkpoint directory, and
//! the last one runs to the end. The table must then be what Flink's
//! materializer makes of the whole input's changelog (replayed here with a
//! HashMap): a record lost or read twice changes the counts, and a
//! materializer whose rows alive per sink key were not restored leaves
//! sink keys that no group holds; no prepared transaction is left.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support::*;
use crate::upsert_oracle::*;

#[test]
fn materialized_kafka_to_postgres_survives_kill_9_exactly() {
    let (Some(b), Some(pg)) = (broker(), postgres_url()) else {
        return;
    };
    let data = clicks(40_000, 40, 3);
    let topic = unique("sql-mat-kill");
    create_topic(&b, &topic, 1);
    let lines: Vec<String> = data.iter().map(|(n, r)| format!("{n},{r}")).collect();
    produce(&b, &topic, 1, &lines);
    // The changelog's rows are [name, cnt]; the sink's columns (cnt, name),
    // keyed by cnt.
    let changes: Vec<Change> = count_changelog(&data, |r| vec![r.0.clone()])
        .into_iter()
        .map(|(kind, row)| (kind, vec![row[1].clone(), row[0].clone()]))
        .collect();
    let want = materialize(&changes, &[0], &[1]);
    assert_ne!(
        want,
        upsert_table(&changes, &[0]),
        "the input needs the materializer"
    );

    let table = format!("sql_mat_kill_{}", std::process::id());
    let columns = [("cnt", "BIGINT"), ("name", "STRING")];
    create_pg_table(&pg, &table, &columns, &["cnt"]);
    let script = format!(
        "CREATE TABLE clicks (name STRING, region STRING) WITH ('connector' = 'kafka',\n\
           'topic' = '{topic}', 'properties.bootstrap.servers' = '{b}',\n\
           'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',\n\
           'format' = 'csv');\n\
         {}INSERT INTO sink SELECT COUNT(*) AS cnt, name FROM clicks GROUP BY name;",
        jdbc_sink_ddl(&pg, &table, &columns, &["cnt"])
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    let ckpt = ckpt.to_str().expect("UTF-8");
    let args: Vec<String> = [
        "sql",
        "-e",
        &script,
        "--parallelism",
        "1",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        ckpt,
        // Slow enough that three runs end before the input does, with
        // few batches in flight, so that an aligned checkpoint completes
        // long before the input ends.
        "--sink-rate",
        "20000",
        "--network-buffers",
        "4",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let mut resumed = args.clone();
    resumed.extend(["--from-checkpoint".to_string(), ckpt.to_string()]);

    for (run, checkpoints) in [1, 2, 3].into_iter().enumerate() {
        let args = if run == 0 { &args } else { &resumed };
        assert!(
            kill_after_checkpoints(args, checkpoints),
            "run {} ended before {checkpoints} checkpoints",
            run + 1
        );
    }
    let out = run(&resumed);
    assert!(
        out.status.success(),
        "the last run:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let got = pg_rows(&pg, &table, &columns, &["cnt"]);
    assert_eq!(got, want, "the table after three kills");
    let left: Vec<String> = query(&pg, "SELECT gid FROM pg_prepared_xacts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|g| g.contains(&table))
        .collect();
    assert!(left.is_empty(), "prepared transactions left: {left:?}");
    query(&pg, &format!("DROP TABLE {table}"));
}
