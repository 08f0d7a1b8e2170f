//! `floe run wordcount` from and to Apache Kafka (`FLOE_TEST_KAFKA`, see
//! `scripts/services.sh`), compared with a HashMap oracle of the produced
//! corpus: a plain bounded run, `kill -9` at five moments (each after a
//! completed checkpoint) resumed with `--from-checkpoint`, a rescale on
//! restore (2 → 3 subtasks over 4 partitions), and bad URLs / a broker
//! that is down (one error line). Through the transactional sink: a
//! bounded exactly-once run, and five `kill -9` at seeded moments with the
//! default buffers, whose `read_committed` output holds every update of
//! the oracle exactly once, with no transaction of a killed run left open.

#![cfg(feature = "kafka")]

use crate::kafka_support;

use kafka_support::*;
use std::path::Path;

fn s(p: &Path) -> String {
    p.to_str().expect("UTF-8 path").to_string()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

/// A topic of 4 partitions holding a seeded corpus, and its oracle.
fn input(
    broker: &str,
    name: &str,
    lines: usize,
) -> (String, std::collections::HashMap<String, u64>) {
    let topic = unique(name);
    create_topic(broker, &topic, 4);
    let corpus = corpus(7, lines, 300);
    produce(broker, &topic, 4, &corpus);
    (topic, oracle(&corpus))
}

#[test]
fn a_bounded_run_counts_every_record_once() {
    let Some(b) = broker() else { return };
    let (input, oracle) = input(&b, "wc-in", 2_000);
    let output = unique("wc-out");
    create_topic(&b, &output, 2);
    let out = run(&args(&[
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{input}"),
        "--bounded",
        "--output",
        &format!("kafka://{b}/{output}"),
        "--parallelism",
        "2",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // No failure: the changelog holds each update exactly once.
    check_changelog(&read_all(&b, &output), &oracle, true);
}

/// `kill -9` five times, each after a checkpoint completed in that run,
/// then a run to the end; the at-least-once Kafka sink (the broker here
/// has no transactions) loses nothing.
#[test]
fn kill_9_five_times_loses_nothing() {
    let Some(b) = broker() else { return };
    let (input, oracle) = input(&b, "wc-kill-in", 12_000);
    let output = unique("wc-kill-out");
    create_topic(&b, &output, 2);
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    let base = args(&[
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{input}"),
        "--bounded",
        "--output",
        &format!("kafka://{b}/{output}?delivery=at-least-once"),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        &s(&ckpt),
        // Throttled, so that the kills land mid-input however fast the
        // machine is.
        "--sink-rate",
        "4000",
    ]);
    let mut kills = 0;
    for _ in 0..5 {
        let mut run_args = base.clone();
        if kills > 0 {
            run_args.extend(["--from-checkpoint".into(), s(&ckpt)]);
        }
        if !kill_after_checkpoints(&run_args, 2) {
            break;
        }
        kills += 1;
    }
    assert_eq!(kills, 5, "the input ended before five kills");
    let mut last = base.clone();
    last.extend(["--from-checkpoint".into(), s(&ckpt)]);
    let out = run(&last);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_changelog(&read_all(&b, &output), &oracle, false);
}

/// Two source subtasks over four partitions checkpoint, die, and three
/// resume from their offsets: every record is counted, none twice beyond
/// what the at-least-once sink replays.
#[test]
fn a_restore_rescales_two_subtasks_to_three() {
    let Some(b) = broker() else { return };
    let (input, oracle) = input(&b, "wc-rescale-in", 8_000);
    let output = unique("wc-rescale-out");
    create_topic(&b, &output, 2);
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    let run_args = |p: &str| {
        args(&[
            "run",
            "wordcount",
            "--input",
            &format!("kafka://{b}/{input}"),
            "--bounded",
            "--output",
            &format!("kafka://{b}/{output}?delivery=at-least-once"),
            "--parallelism",
            p,
            "--checkpoint-interval",
            "50",
            "--checkpoint-dir",
            &s(&ckpt),
            "--sink-rate",
            "4000",
        ])
    };
    assert!(
        kill_after_checkpoints(&run_args("2"), 2),
        "the input ended before the kill"
    );
    let mut resume = run_args("3");
    resume.extend(["--from-checkpoint".into(), s(&ckpt)]);
    let out = run(&resume);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_changelog(&read_all(&b, &output), &oracle, false);
}

/// A failed start: non-zero exit and exactly one line on stderr.
fn one_error_line(list: &[&str]) -> String {
    let out = run(&args(list));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{list:?} succeeded:\n{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line:\n{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn bad_urls_and_a_broker_that_is_down_are_one_error_line() {
    // A port nothing listens on: the broker is down.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    // A short client timeout: the start fails after it, not after the
    // defaults (10 s each).
    let down = format!("kafka://127.0.0.1:{port}/words?timeout=1000");
    let e = one_error_line(&["run", "wordcount", "--input", &down, "--bounded"]);
    assert!(e.contains("cannot reach Kafka broker"), "{e}");
    let e = one_error_line(&["run", "wordcount", "--records", "10", "--output", &down]);
    assert!(e.contains("cannot reach Kafka broker"), "{e}");
    let e = one_error_line(&["run", "wordcount", "--input", "kafka://nohost/words"]);
    assert!(e.contains("invalid Kafka URL"), "{e}");
    let e = one_error_line(&[
        "run",
        "wordcount",
        "--input",
        "kafka://127.0.0.1:9/t?start=yesterday",
    ]);
    assert!(e.contains("start=yesterday"), "{e}");
    // The clients' request timeout, a positive number of ms.
    let e = one_error_line(&[
        "run",
        "wordcount",
        "--input",
        "kafka://127.0.0.1:9/t?timeout=0",
    ]);
    assert!(e.contains("timeout=0"), "{e}");
    let e = one_error_line(&[
        "run",
        "wordcount",
        "--records",
        "10",
        "--output",
        "kafka://127.0.0.1:9/t?timeout=soon",
    ]);
    assert!(e.contains("timeout=soon"), "{e}");
    let e = one_error_line(&["run", "wordcount", "--records", "10", "--bounded"]);
    assert!(e.contains("--bounded"), "{e}");
    if let Some(b) = broker() {
        let missing = unique("missing");
        let e = one_error_line(&[
            "run",
            "wordcount",
            "--input",
            &format!("kafka://{b}/{missing}"),
            "--bounded",
        ]);
        assert!(e.contains("does not exist"), "{e}");
    }
}

/// The exactly-once Kafka output (the default with checkpoints): a
/// bounded run commits each update once for a `read_committed` reader.
#[test]
fn exactly_once_output_commits_each_update_once() {
    let Some(b) = broker() else { return };
    let (input, oracle) = input(&b, "wc-eo-in", 20);
    let output = unique("wc-eo-out");
    create_topic(&b, &output, 1);
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(&args(&[
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{input}"),
        "--bounded",
        "--output",
        &format!("kafka://{b}/{output}"),
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        &s(dir.path()),
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_changelog(&read_all(&b, &output), &oracle, true);
}

/// Kafka → Kafka through the transactional sink, `kill -9` five times at
/// seeded moments (after 1 to 3 checkpoints completed in that run, so in
/// the middle of a transaction, between a pre-commit and its commit, or
/// right after one), each run resumed with `--from-checkpoint`, then a run
/// to the end: a `read_committed` reader of the output sees every update
/// of the HashMap oracle exactly once — nothing lost, nothing duplicated.
/// A kill lands right after a checkpoint's completion is reported, so
/// often before the sink committed that checkpoint's transactions: those
/// are committed by the next run's recovery (`EndTxn` with the
/// checkpointed producer id and epoch); were they aborted, as before the
/// recovery did that, the oracle's updates of that interval would be
/// missing ("lost"), since the source resumes after them. A kill also
/// leaves the transaction it was writing open (the output's last stable
/// offset stays behind its end): the next run's fencing aborts it, so
/// once the last run ended no transaction is left open — a
/// `read_committed` reader reads to the end of every partition, well
/// before the transaction timeout (60 s) would have aborted it.
#[test]
fn exactly_once_kill_9_five_times_neither_loses_nor_duplicates() {
    let Some(b) = broker() else { return };
    let (input, oracle) = input(&b, "wc-eo-kill-in", 200_000);
    let output = unique("wc-eo-kill-out");
    create_topic(&b, &output, 2);
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    let base = args(&[
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{input}"),
        "--bounded",
        "--output",
        &format!("kafka://{b}/{output}"),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        &s(&ckpt),
        // Throttled, so that the kills land mid-input: with the default
        // buffers (64 batches of 1,024 records per subtask) an aligned
        // checkpoint completes once the sink has taken what was queued
        // ahead of its barrier.
        "--sink-rate",
        "50000",
    ]);
    let mut rng = floe::text::SplitMix(0x9e37_79b9_7f4a_7c15);
    let (mut kills, mut left_open) = (0, 0);
    for _ in 0..5 {
        let mut run_args = base.clone();
        if kills > 0 {
            run_args.extend(["--from-checkpoint".into(), s(&ckpt)]);
        }
        if !kill_after_checkpoints(&run_args, 1 + rng.below(3)) {
            break;
        }
        kills += 1;
        if (0..2).any(|p| {
            let (stable, end) = stable_and_end(&b, &output, p);
            stable < end
        }) {
            left_open += 1;
        }
    }
    assert_eq!(kills, 5, "the input ended before five kills");
    assert!(left_open > 0, "no kill left a transaction open");
    let mut last = base.clone();
    last.extend(["--from-checkpoint".into(), s(&ckpt)]);
    let out = run(&last);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in 0..2 {
        let (stable, end) = settled(&b, &output, p, WATCHDOG);
        assert_eq!(stable, end, "a transaction left open in partition {p}");
    }
    check_changelog(&read_all(&b, &output), &oracle, true);
}
