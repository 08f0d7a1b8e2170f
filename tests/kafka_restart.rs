//! The broker killed (`SIGKILL`, `scripts/services.sh kill kafka`) while
//! floe reads from it and writes to it:
//! - started again on the same port with the same storage, the job
//!   restarts from its last checkpoint — loudly, `restart attempt=` lines
//!   on stderr — reads its restored offsets and the input produced after
//!   the restart from the restarted broker, and its output equals the
//!   HashMap oracle exactly once: into PostgreSQL's two-phase-commit sink,
//!   and into Kafka's transactional sink, whose transactions pre-committed
//!   before the kill survive it and are committed after the recovery (a
//!   `read_committed` reader sees every update once);
//! - left down, the job gives up after its bounded restarts: non-zero exit,
//!   `restart` lines, then one `error:` line;
//! - a source reader whose broker is gone, dropped before it noticed,
//!   returns at once (its client closes on a thread of its own): a
//!   subtask's teardown never waits for a broker.
//!
//! The jobs give their Kafka clients a short request timeout (`timeout=`
//! in the URLs), so a lost broker fails a subtask within seconds, and an
//! explicit `--restart` strategy: the tests wait for the job's own events
//! (a checkpoint, a `restart` line, the broker back, the job's end), and
//! the timeouts only decide how soon those come.
//!
//! The tests stop the broker every other test uses, so they run one at a
//! time, in this binary of their own, and start it again when done.

#![cfg(feature = "kafka")]

mod gated;
mod kafka_support;

use gated::wait_until;
use kafka_support::*;
use std::io::BufRead;
use std::process::Child;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One test at a time: each stops the shared broker.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the broker again when the test ends, passed or failed.
struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        services(&["start", "kafka"]);
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

/// A running floe whose stderr lines arrive on a channel.
struct Job {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Job {
    fn start(args: &[String]) -> Job {
        let mut args = args.to_vec();
        args.extend(["--status-interval".into(), "20".into()]);
        let mut child = floe(&args).spawn().expect("floe runs");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Job {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line `matches` accepts; fails after the watchdog
    /// or when the job ends first.
    fn wait_line(&mut self, what: &str, matches: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = matches(&line);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    panic!("no {what} ({e:?}); stderr:\n{}", self.seen.join("\n"));
                }
            }
        }
    }

    /// Waits for the end (at most `limit`); its exit status and every
    /// stderr line.
    fn wait(mut self, limit: Duration) -> (std::process::ExitStatus, Vec<String>) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("floe status") {
                self.seen.extend(self.lines.iter());
                return (status, self.seen);
            }
            // Checked on every turn: a job that keeps printing status
            // lines must not hold the watchdog off.
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "floe still running after {limit:?}:\n{}",
                    self.seen.join("\n")
                );
            }
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(line);
            }
        }
    }
}

fn checkpoints_at_least(n: u64) -> impl Fn(&str) -> bool {
    move |line| {
        line.starts_with("status ")
            && field(line, "checkpoints")
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|c| c >= n)
    }
}

/// How long the jobs' Kafka clients wait for an answer (ms): how soon a
/// source or sink notices the broker gone (the defaults, 10 s and 30 s,
/// would make each failed attempt that long).
const CLIENT_TIMEOUT_MS: u64 = 2_000;

/// A bounded wordcount of a seeded corpus of `lines` lines in a
/// 4-partition topic into `output`,
/// checkpointed, throttled so the broker dies mid-input, restarting as
/// `restart` says; the oracle.
fn job(
    b: &str,
    name: &str,
    lines: usize,
    output: &str,
    restart: &str,
) -> (
    Vec<String>,
    std::collections::HashMap<String, u64>,
    tempfile::TempDir,
) {
    let input = unique(&format!("{name}-in"));
    create_topic(b, &input, 4);
    let lines = corpus(31, lines, 300);
    produce(b, &input, 4, &lines);
    let dir = tempfile::tempdir().expect("temp dir");
    let list = args(&[
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{input}?timeout={CLIENT_TIMEOUT_MS}"),
        "--bounded",
        "--output",
        output,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        dir.path().join("ckpt").to_str().expect("UTF-8 path"),
        "--sink-rate",
        "4000",
        // Small batches, so the job's buffers hold a few thousand words,
        // not the whole input: checkpoints complete while most of the
        // input is still ahead of the throttled sink.
        "--batch-size",
        "64",
        "--restart",
        restart,
    ]);
    (list, oracle(&lines), dir)
}

/// `SELECT sum(count)` of `table`, 0 before its first commit creates it.
#[cfg(feature = "postgres")]
fn committed_words(url: &str, table: &str) -> u64 {
    let sql = format!("SELECT coalesce(sum(count), 0)::BIGINT FROM {table}");
    match try_query(url, &sql) {
        Ok(rows) => rows[0].get::<_, i64>(0) as u64,
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => 0,
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// An unbounded job reads a topic Kafka → PostgreSQL; the broker is
/// killed (`kill -9`) once the job has checkpointed. The source fails
/// when its client has had no broker for its timeout, so the job
/// restarts (loudly, `restart attempt=` lines) until the broker is back;
/// each restart restores the source's offsets, which it must read again
/// from the restarted broker. More input is produced once the broker is
/// back, so the job must read from it. Once the table holds as many words
/// as the input (only checkpoints commit it), SIGTERM stops the job, and
/// the table must equal the HashMap oracle of both halves exactly.
#[test]
#[cfg(feature = "postgres")]
fn a_broker_restart_while_the_job_runs_is_retried_and_stays_exact() {
    let _one = one_at_a_time();
    let (Some(b), Some(pg)) = (broker(), postgres_url()) else {
        return;
    };
    let table = format!("wc_restart_{}", std::process::id());
    query(&pg, &format!("DROP TABLE IF EXISTS {table}"));
    let input = unique("restart-in");
    create_topic(&b, &input, 4);
    let (before, after) = (corpus(31, 10_000, 300), corpus(32, 10_000, 300));
    produce(&b, &input, 4, &before);
    let dir = tempfile::tempdir().expect("temp dir");
    // Restarts every 100 ms, as many as it takes: the job retries until
    // the broker is back, however long its start takes.
    let mut running = Job::start(&args(&[
        "run",
        "wordcount",
        "--input",
        &format!("kafka://{b}/{input}?timeout={CLIENT_TIMEOUT_MS}"),
        "--output",
        &format!("{pg}?table={table}"),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        dir.path().join("ckpt").to_str().expect("UTF-8 path"),
        "--restart",
        "fixed:1000000,100",
    ]));
    running.wait_line("a completed checkpoint", checkpoints_at_least(1));
    let restart = Restart;
    services(&["kill", "kafka"]);
    // Failures are loud: the job says it restarts.
    running.wait_line("restart line", |l| l.starts_with("restart attempt="));
    drop(restart);
    produce(&b, &input, 4, &after);
    let lines: Vec<String> = before.into_iter().chain(after).collect();
    let oracle = oracle(&lines);
    let words: u64 = oracle.values().sum();
    // Only completed checkpoints commit the table (a state with no event
    // to wait on): polled until it holds as many words as the input.
    wait_until("the table to hold the input's words", || {
        if let Ok(Some(status)) = running.child.try_wait() {
            panic!("the job ended ({status}) before its output was committed");
        }
        committed_words(&pg, &table) >= words
    });
    let pid = running.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "SIGTERM sent");
    let (status, stderr) = running.wait(WATCHDOG);
    assert_eq!(
        status.code(),
        Some(143),
        "SIGTERM stops the job cleanly:\n{}",
        stderr.join("\n")
    );
    let got: std::collections::HashMap<String, u64> =
        query(&pg, &format!("SELECT word, count FROM {table}"))
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
            .collect();
    assert_eq!(got, oracle, "the table equals the oracle, exactly once");
    let left: Vec<String> = query(&pg, "SELECT gid FROM pg_prepared_xacts")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|g| g.contains(&table))
        .collect();
    assert!(left.is_empty(), "prepared transactions left: {left:?}");
}

#[test]
fn a_broker_that_stays_down_fails_the_job_after_bounded_restarts() {
    let _one = one_at_a_time();
    let Some(b) = broker() else { return };
    let output = unique("down-out");
    create_topic(&b, &output, 2);
    // Three restarts, 100 ms apart, each failing within the clients'
    // timeout.
    let (list, _oracle, _dir) = job(
        &b,
        "down",
        8_000,
        &format!("kafka://{b}/{output}?delivery=at-least-once&timeout={CLIENT_TIMEOUT_MS}"),
        "fixed:3,100",
    );
    let mut running = Job::start(&list);
    running.wait_line("2 completed checkpoints", checkpoints_at_least(2));
    let _restart = Restart;
    services(&["kill", "kafka"]);
    // Bounded: the job ends by itself (the watchdog only catches a hang).
    let (status, stderr) = running.wait(WATCHDOG);
    let text = stderr.join("\n");
    assert!(!status.success(), "the job cannot succeed:\n{text}");
    assert_eq!(
        stderr
            .iter()
            .filter(|l| l.starts_with("restart attempt="))
            .count(),
        3,
        "each of the strategy's three restarts is on stderr:\n{text}"
    );
    let last = stderr.last().map(String::as_str).unwrap_or_default();
    assert!(last.starts_with("error: "), "one error line last:\n{text}");
    assert_eq!(
        stderr.iter().filter(|l| l.starts_with("error: ")).count(),
        1,
        "one error line:\n{text}"
    );
}

/// A bounded Kafka → Kafka word count through the exactly-once Kafka sink;
/// the broker is killed (`kill -9`) once the job has completed two
/// checkpoints, and started again once the job says it restarts. The
/// transactions pre-committed before the kill survive it in the broker's
/// log; the restored sink commits those of its checkpoint and fences the
/// rest, the job reads the rest of its input from the restarted broker and
/// ends by itself, and a `read_committed` reader of the output sees every
/// update of the HashMap oracle exactly once.
#[test]
fn the_exactly_once_kafka_sink_survives_a_broker_restart() {
    let _one = one_at_a_time();
    let Some(b) = broker() else { return };
    let output = unique("eo-restart-out");
    create_topic(&b, &output, 2);
    let (list, oracle, _dir) = job(
        &b,
        "eo-restart",
        10_000,
        &format!("kafka://{b}/{output}?timeout={CLIENT_TIMEOUT_MS}"),
        "fixed:1000000,100",
    );
    let mut running = Job::start(&list);
    running.wait_line("2 completed checkpoints", checkpoints_at_least(2));
    let restart = Restart;
    services(&["kill", "kafka"]);
    running.wait_line("restart line", |l| l.starts_with("restart attempt="));
    drop(restart);
    let (status, stderr) = running.wait(WATCHDOG);
    assert!(
        status.success(),
        "the job ends by itself once the broker is back:\n{}",
        stderr.join("\n")
    );
    // A commit marker the restarted broker lost is written by the sink,
    // which says so (docs/kafka.md): shown when it happened.
    for line in stderr.iter().filter(|l| l.contains("commit marker")) {
        eprintln!("{line}");
    }
    check_changelog(&read_all(&b, &output), &oracle, true);
    for partition in 0..2 {
        let (stable, end) = settled(&b, &output, partition, WATCHDOG);
        assert_eq!(
            stable, end,
            "no transaction left open in partition {partition}"
        );
    }
}

/// A source reader whose broker was killed, dropped before it noticed (it
/// polled nothing since), with a checkpoint's offset commit issued after
/// the kill: its drop returns at once. librdkafka's close waits for that
/// commit's group coordinator without a deadline — inline, on the
/// subtask's thread, it froze the job's teardown, and with it the job's
/// restart and its error line (with the former inline close this test
/// hangs in the drop). The close now runs on a thread of its own.
#[test]
fn dropping_a_reader_whose_broker_is_gone_returns_at_once() {
    use floe::CheckpointId;
    use floe::connectors::kafka::KafkaSource;
    use floe::connectors::{SourceContext, SourceFunction, SourcePoll};
    let _one = one_at_a_time();
    let Some(b) = broker() else { return };
    let topic = unique("drop-gone");
    create_topic(&b, &topic, 2);
    let lines: Vec<String> = (0..100).map(|i| format!("r{i}")).collect();
    produce(&b, &topic, 2, &lines);
    let mut reader = KafkaSource::lines(&b, &[&topic])
        .group_id(&unique("drop-gone"))
        .request_timeout(Duration::from_millis(CLIENT_TIMEOUT_MS))
        .reader(&SourceContext {
            subtask: floe_actors::ids::SubtaskIndex(0),
            parallelism: 1,
            seed: 0,
        })
        .expect("reader");
    let mut read = 0;
    while read < lines.len() {
        let mut batch = Vec::new();
        match reader.poll_batch(64, &mut batch).expect("polls") {
            SourcePoll::Wait(d) => std::thread::sleep(d),
            _ => read += batch.len(),
        }
    }
    reader
        .snapshot_union_state(CheckpointId(1))
        .expect("snapshot");
    reader
        .notify_checkpoint_complete(CheckpointId(1))
        .expect("commits to the group");
    reader
        .snapshot_union_state(CheckpointId(2))
        .expect("snapshot");
    let _restart = Restart;
    services(&["kill", "kafka"]);
    // A checkpoint completes after the kill: its commit waits for a
    // coordinator that is gone.
    reader
        .notify_checkpoint_complete(CheckpointId(2))
        .expect("commits to the group");
    let (dropped_tx, dropped) = channel();
    std::thread::spawn(move || {
        drop(reader);
        let _ = dropped_tx.send(());
    });
    // The bound only turns a hang into a failure.
    dropped
        .recv_timeout(WATCHDOG)
        .expect("the reader's drop returned");
}
