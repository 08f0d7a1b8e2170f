//! `floe run window --input kafka://…` against a real Kafka-protocol broker
//! (`FLOE_TEST_KAFKA`): the firings of a bounded run over a topic equal
//! those of the same lines read from a file (the oracle).

#![cfg(feature = "kafka")]

use crate::kafka_support;

use kafka_support::*;
use std::process::Command;

fn firings(input: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "run",
            "window",
            "--input",
            input,
            "--window",
            "tumbling:1000",
            "--agg",
            "sum",
            "--out-of-orderness",
            "500",
            "--parallelism",
            "1",
        ])
        .args(if input.starts_with("kafka://") {
            &["--bounded"][..]
        } else {
            &[][..]
        })
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("floe runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_topic_gives_the_firings_of_the_same_lines_in_a_file() {
    let Some(b) = broker() else { return };
    let lines: Vec<String> = (0..2_000u64)
        .map(|i| format!("k{},{},{}", i % 5, i * 7 + (i % 3) * 100, i % 11))
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("events.csv");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write input");
    let topic = unique("window-in");
    create_topic(&b, &topic, 1);
    produce(&b, &topic, 1, &lines);
    let expected = firings(file.to_str().expect("UTF-8 path"));
    assert!(!expected.is_empty());
    assert_eq!(firings(&format!("kafka://{b}/{topic}")), expected);
}
