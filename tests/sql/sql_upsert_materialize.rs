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
use crate::upsert_oracle::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[test]
fn a_group_moving_between_sink_keys_is_materialized_by_the_primary_key() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let data = clicks(600, 30, 3);
    std::fs::write(&input, csv(&data)).expect("write the input");
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
    let got = run_into_postgres(&pg, &input, dir.path(), sink, ("", query), "1");
    assert_eq!(got, want, "PRIMARY KEY (cnt), one subtask");

    // At two subtasks: the same sink keys, each holding a row alive in it
    // (a group whose final count is the key).
    let mut finals: HashMap<String, u64> = HashMap::new();
    for (name, _) in &data {
        *finals.entry(name.clone()).or_default() += 1;
    }
    let got = run_into_postgres(&pg, &input, dir.path(), sink, ("", query), "2");
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
    let got = run_into_postgres(&pg, &input, dir.path(), sink, ("", query), "1");
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
    let got = run_into_postgres(&pg, &input, dir.path(), sink, ("", query), "2");
    assert_eq!(got, want, "PRIMARY KEY (name, cnt)");
}
