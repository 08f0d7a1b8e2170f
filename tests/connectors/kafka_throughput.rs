//! Kafka → Kafka throughput of `floe run wordcount` at parallelism 2 next to
//! the broker's own produce and consume rates, measured in the same run
//! against the same broker (`FLOE_TEST_KAFKA`, Apache Kafka). A
//! measurement, not a check: ignored by default; run it in release mode:
//!
//! ```text
//! cargo test --release --features kafka --test connectors kafka_throughput -- --ignored --nocapture
//! ```

#![cfg(feature = "kafka")]

use crate::kafka_support;

use kafka_support::*;
use std::process::Command;
use std::time::Instant;

#[test]
#[ignore = "a measurement; run with --ignored in release mode"]
fn kafka_to_kafka_against_the_brokers_own_rate() {
    let Some(b) = broker() else { return };
    let lines: usize = std::env::var("FLOE_KAFKA_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let input = unique("tp-in");
    let output = unique("tp-out");
    create_topic(&b, &input, 4);
    create_topic(&b, &output, 4);
    let corpus = corpus(11, lines, 10_000);
    let words: usize = corpus.iter().map(|l| l.split(' ').count()).sum();

    // The broker's own rate: floe's input, produced and read back.
    let t = Instant::now();
    produce(&b, &input, 4, &corpus);
    let produce_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let read = read_all(&b, &input);
    let consume_s = t.elapsed().as_secs_f64();
    assert_eq!(read.len(), lines);

    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "run",
            "wordcount",
            "--input",
            &format!("kafka://{b}/{input}"),
            "--bounded",
            "--output",
            &format!("kafka://{b}/{output}"),
            "--parallelism",
            "2",
        ])
        .output()
        .expect("floe runs");
    let floe_s = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = read_all(&b, &output).len();
    assert_eq!(written, words, "one update per word");
    println!(
        "lines={lines} words={words} broker_produce_lines_per_s={:.0} broker_consume_lines_per_s={:.0} \
         floe_p2_lines_per_s={:.0} floe_p2_updates_out_per_s={:.0} floe_s={floe_s:.2} summary: {}",
        lines as f64 / produce_s,
        lines as f64 / consume_s,
        lines as f64 / floe_s,
        words as f64 / floe_s,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}
