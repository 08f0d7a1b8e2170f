//! `floe run wordcount` from a real Kafka-protocol broker into a real
//! PostgreSQL (`FLOE_TEST_KAFKA`, `FLOE_TEST_POSTGRES_URL`; see
//! `scripts/services.sh`) with checkpoints, `kill -9` at five moments (each
//! after a checkpoint completed in that run), resumed with
//! `--from-checkpoint`: the table equals the HashMap oracle of the corpus
//! and no prepared transaction is left behind.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support;

use kafka_support::*;
use std::collections::HashMap;

#[test]
fn kafka_to_postgres_survives_five_kill_9_exactly() {
    let (Some(b), Some(pg)) = (broker(), postgres_url()) else {
        return;
    };
    let topic = unique("wc-pg-in");
    create_topic(&b, &topic, 4);
    let corpus = corpus(23, 10_000, 300);
    produce(&b, &topic, 4, &corpus);
    let oracle = oracle(&corpus);
    let table = format!("wc_{}", std::process::id());
    query(&pg, &format!("DROP TABLE IF EXISTS {table}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt").to_str().expect("UTF-8").to_string();
    let base: Vec<String> = [
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{topic}"),
        "--bounded",
        "--output",
        &format!("{pg}?table={table}"),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        &ckpt,
        "--sink-rate",
        "4000",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let mut kills = 0;
    for _ in 0..5 {
        let mut args = base.clone();
        if kills > 0 {
            args.extend(["--from-checkpoint".into(), ckpt.clone()]);
        }
        if !kill_after_checkpoints(&args, 2) {
            break;
        }
        kills += 1;
    }
    assert_eq!(kills, 5, "the input ended before five kills");
    let mut last = base.clone();
    last.extend(["--from-checkpoint".into(), ckpt.clone()]);
    let out = run(&last);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: HashMap<String, u64> = query(&pg, &format!("SELECT word, count FROM {table}"))
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
        .collect();
    assert_eq!(got.len(), oracle.len(), "one row per word");
    for (word, n) in &oracle {
        assert_eq!(got.get(word), Some(n), "count of {word}");
    }
    let left: Vec<String> = query(&pg, "SELECT gid FROM pg_prepared_xacts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|g| g.contains(&table))
        .collect();
    assert!(left.is_empty(), "prepared transactions left: {left:?}");
}
