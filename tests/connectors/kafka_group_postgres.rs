//! Group mode into PostgreSQL: the word count and the window job run by
//! several `floe` processes of one consumer group, their rows (counts
//! upserted, firings appended) written to a table in the transactions
//! that commit the second stage's positions (`docs/scale-out.md`).
//!
//! Members are killed with `kill -9`, join, are frozen past the session
//! timeout and come back while input arrives; the table must equal the
//! oracle exactly: a HashMap of word counts over the lines written, by
//! floe's own tokenizer, or a HashMap's tumbling-window sums over the
//! events written (and the rows one process writes). Every wait is for
//! an event (a `rebalance` line, the table reaching the oracle), bounded
//! by a watchdog.

#![cfg(all(feature = "kafka", feature = "postgres"))]

use crate::kafka_support;

use kafka_support::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The input topic's partitions, and the repartition topic's.
const PARTITIONS: i32 = 6;

/// A word count member of the test's group, into its table.
fn pg_member(t: &Setup, extra: &[&str]) -> Member {
    pg_job(t, "wordcount", extra)
}

/// A window job member: one-second tumbling sums, no out-of-orderness.
fn pg_window_member(t: &Setup, extra: &[&str]) -> Member {
    let args: Vec<&str> = WINDOW_ARGS.iter().chain(extra).copied().collect();
    pg_job(t, "window", &args)
}

fn pg_job(t: &Setup, job: &str, extra: &[&str]) -> Member {
    let input = format!("kafka://{}/{}", t.broker, t.input);
    let output = format!("{}?table={}", t.pg, t.table);
    let dir = t.dir.path().to_str().expect("utf-8 path");
    Member::of_group(job, &input, &output, &t.group, dir, PARTITIONS, extra)
}

/// A test's servers, topic, table, group and shared checkpoint directory.
struct Setup {
    broker: String,
    pg: String,
    input: String,
    table: String,
    group: String,
    dir: tempfile::TempDir,
}

impl Setup {
    /// New names under `prefix`, the input topic created; `None` when the
    /// services are skipped on purpose.
    fn new(prefix: &str) -> Option<Setup> {
        let (broker, pg) = (broker()?, postgres_url()?);
        let input = unique(&format!("{prefix}-in"));
        create_topic(&broker, &input, PARTITIONS);
        let group = unique(prefix);
        let table = format!("wc_{}", group.replace('-', "_"));
        Some(Setup {
            broker,
            pg,
            input,
            table,
            group,
            dir: tempfile::tempdir().expect("tempdir"),
        })
    }

    fn produce(&self, lines: &[String]) {
        produce(&self.broker, &self.input, PARTITIONS, lines);
    }

    /// The table's counts (empty while it does not exist).
    fn table(&self) -> HashMap<String, u64> {
        try_query(&self.pg, &format!("SELECT word, count FROM {}", self.table))
            .unwrap_or_default()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
            .collect()
    }

    /// The rows of the window job's table `table`, as sorted
    /// `key,window_start,window_end,value` lines, without those of `skip`'s
    /// key (empty while it does not exist).
    fn firings(&self, table: &str, skip: &str) -> Vec<String> {
        let sql = format!("SELECT key, window_start, window_end, value FROM {table}");
        let mut lines: Vec<String> = try_query(&self.pg, &sql)
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let (key, start, end, value): (String, i64, i64, i64) =
                    (r.get(0), r.get(1), r.get(2), r.get(3));
                format!("{key},{start},{end},{value}")
            })
            .filter(|l| l.split(',').next() != Some(skip))
            .collect();
        lines.sort();
        lines
    }

    /// Waits until the table equals `oracle`, within the watchdog; the
    /// members' lines and the differences on failure.
    fn wait_for(&self, oracle: &HashMap<String, u64>, members: &mut [&mut Member]) {
        self.wait_until(members, || {
            let got = self.table();
            match &got == oracle {
                true => Ok(()),
                false => Err(differences(&got, oracle)),
            }
        });
    }

    /// Waits until `done` says the table is as it should be (else why
    /// not), within the watchdog; the members' lines on failure.
    fn wait_until(
        &self,
        members: &mut [&mut Member],
        mut done: impl FnMut() -> Result<(), String>,
    ) {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let why = match done() {
                Ok(()) => return,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                let mut text = String::new();
                for m in members.iter_mut() {
                    m.drain();
                    text.push_str(&m.seen.join("\n"));
                    text.push_str("\n---\n");
                }
                panic!(
                    "table {} not the oracle within {WATCHDOG:?}: {why}\n{text}",
                    self.table
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// After every member stopped: no prepared transaction of the group is
    /// left (each member rolled back its own when it stopped, a killed
    /// member's were rolled back by the next claims), the members that
    /// stopped (all but the processes `killed`) kept only the runs a
    /// committed mark of the group names, and every run a mark names is
    /// there to restore from.
    fn assert_left_nothing(&self, killed: &[u32]) {
        let gids: Vec<String> = query(
            &self.pg,
            &format!(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'floe:{}/%'",
                self.group
            ),
        )
        .iter()
        .map(|r| r.get(0))
        .collect();
        assert!(gids.is_empty(), "prepared transactions left: {gids:?}");
        let named: std::collections::BTreeSet<String> = query(
            &self.pg,
            &format!(
                "SELECT DISTINCT mark FROM floe_group_offsets WHERE grp = '{}' AND mark IS NOT NULL",
                self.group
            ),
        )
        .iter()
        .map(|r| {
            let mark: String = r.get(0);
            floe::connectors::kafka::group::OffsetMark::parse(&mark)
                .unwrap_or_else(|| panic!("a floe mark: {mark}"))
                .run
        })
        .collect();
        assert!(!named.is_empty(), "the group committed marks");
        let missing: Vec<&String> = named
            .iter()
            .filter(|run| !self.dir.path().join(run).is_dir())
            .collect();
        assert!(
            missing.is_empty(),
            "runs a mark names were deleted: {missing:?}"
        );
        let mut unnamed = Vec::new();
        let members = std::fs::read_dir(self.dir.path().join(&self.group)).expect("member dirs");
        for member in members {
            let member = member.expect("a member dir");
            let name = member.file_name().to_string_lossy().to_string();
            if killed
                .iter()
                .any(|pid| name.starts_with(&format!("m{pid}-")))
            {
                continue;
            }
            for run in std::fs::read_dir(member.path()).expect("run dirs") {
                let run = run.expect("a run dir").file_name();
                let run = format!("{}/{name}/{}", self.group, run.to_string_lossy());
                if !named.contains(&run) {
                    unnamed.push(run);
                }
            }
        }
        assert!(
            unnamed.is_empty(),
            "runs no mark names were kept: {unnamed:?}; named: {named:?}"
        );
    }

    /// Rolls back the prepared transactions the group's last runs left
    /// (the next claim would), so that the server's slots stay free.
    fn cleanup(&self) {
        let gids = query(
            &self.pg,
            &format!(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'floe:{}/%'",
                self.group
            ),
        );
        for r in gids {
            let gid: String = r.get(0);
            let _ = try_query(&self.pg, &format!("ROLLBACK PREPARED '{gid}'"));
        }
    }
}

/// The words whose counts differ, a few of them.
fn differences(got: &HashMap<String, u64>, oracle: &HashMap<String, u64>) -> String {
    let mut words: Vec<&String> = got.keys().chain(oracle.keys()).collect();
    words.sort();
    words.dedup();
    let wrong: Vec<String> = words
        .into_iter()
        .filter(|w| got.get(*w) != oracle.get(*w))
        .map(|w| format!("{w}: {:?} want {:?}", got.get(w), oracle.get(w)))
        .collect();
    format!(
        "{} of {} words differ: {}",
        wrong.len(),
        oracle.len(),
        wrong.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
    )
}

/// Three members over a 6-partition topic; one is killed with `kill -9`
/// mid-stream (its prepared and open transactions are resolved by the
/// partitions' new owners, whose state comes from the checkpoints the
/// table's positions name); a fourth joins; more input arrives; all stop
/// with SIGTERM. The table is the oracle's, every word and its count; no
/// prepared transaction is left, and the stopped members kept only the
/// checkpoints a committed mark names.
#[test]
fn members_that_die_and_join_keep_the_table_exact() {
    let Some(t) = Setup::new("pgroup") else {
        return;
    };
    let lines = corpus(40, 4000, 300);
    let mut a = pg_member(&t, &[]);
    let mut b = pg_member(&t, &[]);
    let mut c = pg_member(&t, &[]);
    // The first input once the three share a generation: produced before,
    // a member alone in an earlier generation could read and commit B's
    // later partitions to their end, and B would wait for its first
    // record until the input the test produces after it.
    wait_one_generation(&mut [&mut a, &mut b, &mut c]);
    t.produce(&lines[..2000]);
    // B dies with its first records counted and more arriving.
    b.wait_line("a first record", |l| l.starts_with("first_record"));
    t.produce(&lines[2000..3000]);
    let killed = b.child.id();
    b.kill9();
    let mut d = pg_member(&t, &[]);
    d.wait_rebalance("a rebalance line");
    t.produce(&lines[3000..]);
    t.wait_for(&oracle(&lines), &mut [&mut a, &mut c, &mut d]);
    for m in [a, c, d] {
        let (status, seen) = m.terminate();
        let text = seen.join("\n");
        assert_eq!(status.code(), Some(143), "SIGTERM exits 143:\n{text}");
        assert!(seen.iter().any(|l| l.starts_with("records=")), "{text}");
    }
    // After every member stopped: still exactly the oracle.
    let got = t.table();
    assert!(
        got == oracle(&lines),
        "{}",
        differences(&got, &oracle(&lines))
    );
    t.assert_left_nothing(&[killed]);
    t.cleanup();
}

/// A member frozen (SIGSTOP) mid-stream, past the session timeout, with a
/// transaction open on its rows, loses its partitions to the other: the
/// new owner ends the frozen member's sessions (their open transactions
/// roll back, their row locks go) and prepared transactions, takes the
/// partitions' rows into its generation, and counts on while the member
/// stays frozen. Back (SIGCONT), the member's commits are fenced, it
/// rejoins, and the table stays the oracle's.
#[test]
fn a_member_that_comes_back_after_its_partitions_moved_is_fenced() {
    let Some(t) = Setup::new("pgfence") else {
        return;
    };
    let before = corpus(41, 300, 150);
    let during = corpus(42, 3000, 150);
    let after = corpus(43, 300, 150);
    t.produce(&before);
    let mut a = pg_member(&t, &[]);
    // Throttled, in small batches: it is still counting `during` when it
    // is frozen, a transaction open on its rows.
    let mut b = pg_member(&t, &["--sink-rate", "1000", "--batch-size", "32"]);
    for m in [&mut a, &mut b] {
        m.wait_rebalance("a rebalance line");
    }
    t.wait_for(&oracle(&before), &mut [&mut a, &mut b]);
    t.produce(&during);
    let mut so_far = before.clone();
    so_far.extend(during.iter().cloned());
    let all_during = oracle(&so_far);
    // Frozen once its share of `during` is partly counted.
    let deadline = Instant::now() + WATCHDOG;
    while t.table() == oracle(&before) {
        assert!(Instant::now() < deadline, "no count of the second part");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        t.table() != all_during,
        "the throttled member was still counting"
    );
    b.signal("-STOP");
    a.wait_rebalance("the rebalance after the freeze");
    t.wait_for(&all_during, &mut [&mut a]);
    b.signal("-CONT");
    b.wait_rebalance("the rebalance after coming back");
    t.produce(&after);
    so_far.extend(after.iter().cloned());
    t.wait_for(&oracle(&so_far), &mut [&mut a, &mut b]);
    for m in [a, b] {
        let (status, seen) = m.terminate();
        assert_eq!(status.code(), Some(143), "{}", seen.join("\n"));
    }
    let got = t.table();
    assert!(
        got == oracle(&so_far),
        "{}",
        differences(&got, &oracle(&so_far))
    );
    t.cleanup();
}

/// What `got` (sorted lines) lacks of `want` (sorted lines), and what it
/// has beyond, a few of each; `None` when `got` holds every line of `want`
/// (and, when `exact`, nothing else).
fn missing(got: &[String], want: &[String], exact: bool) -> Option<String> {
    let (mut lacks, mut extra) = (Vec::new(), Vec::new());
    let (mut g, mut w) = (got.iter().peekable(), want.iter().peekable());
    loop {
        match (g.peek(), w.peek()) {
            (Some(a), Some(b)) if a == b => {
                g.next();
                w.next();
            }
            (Some(a), Some(b)) if a < b => extra.push(g.next().expect("peeked")),
            (_, Some(_)) => lacks.push(w.next().expect("peeked")),
            (Some(_), None) => extra.push(g.next().expect("peeked")),
            (None, None) => break,
        }
    }
    if lacks.is_empty() && (extra.is_empty() || !exact) {
        return None;
    }
    let few = |v: &[&String]| {
        v.iter()
            .take(5)
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    Some(format!(
        "{} of {} rows missing ({}), {} rows beyond ({})",
        lacks.len(),
        want.len(),
        few(&lacks),
        extra.len(),
        few(&extra)
    ))
}

/// The window job into PostgreSQL: two members window a 6-partition
/// topic, one is killed with `kill -9` mid-run (its prepared transactions
/// are rolled back by the claims of its partitions' new owners, which
/// restore the windows, timers included, from the checkpoints the table's
/// positions name), another joins while input arrives, all stop with
/// SIGTERM. The table holds a HashMap's one-second tumbling sums over the
/// events, one row per window, none twice, and the rows one process
/// writes when it reads the topic bounded.
#[test]
fn a_window_job_across_members_appends_each_firing_once() {
    let Some(t) = Setup::new("pgwin") else {
        return;
    };
    // The windows the first third closes: those ending by its last
    // timestamp (every partition's watermark passes them).
    let WindowInput {
        events,
        lines,
        all,
        third,
        first,
    } = WindowInput::new(44, PARTITIONS);
    let mut a = pg_window_member(&t, &[]);
    let mut b = pg_window_member(&t, &[]);
    // The first third is read after both joined: an input partition whose
    // events a member alone read and committed before the other joined
    // would report no watermark to the new runs until it gets another
    // event (docs/scale-out.md), and its first windows would wait for it.
    wait_one_generation(&mut [&mut a, &mut b]);
    t.produce(&lines[..third]);
    t.wait_until(&mut [&mut a, &mut b], || {
        missing(&t.firings(&t.table, "end"), &first, false).map_or(Ok(()), Err)
    });
    // B dies with more input arriving; C joins.
    t.produce(&lines[third..2 * third]);
    let killed = b.child.id();
    b.kill9();
    let mut c = pg_window_member(&t, &[]);
    c.wait_rebalance("a rebalance line");
    t.produce(&lines[2 * third..]);
    // One event far ahead per partition moves every watermark past the
    // last window; its own window never closes.
    let last = events.last().expect("events").1;
    let end: Vec<String> = (0..PARTITIONS)
        .map(|_| format!("end,{},0", last + 10_000))
        .collect();
    t.produce(&end);
    t.wait_until(&mut [&mut a, &mut c], || {
        missing(&t.firings(&t.table, "end"), &all, true).map_or(Ok(()), Err)
    });
    for m in [a, c] {
        let (status, seen) = m.terminate();
        let text = seen.join("\n");
        assert_eq!(status.code(), Some(143), "SIGTERM exits 143:\n{text}");
        let summary = seen
            .iter()
            .find(|l| l.starts_with("records="))
            .unwrap_or_else(|| panic!("a summary line:\n{text}"));
        assert_eq!(field(summary, "late"), Some("0"), "{summary}");
    }
    // After every member stopped: still exactly the oracle.
    let got = t.firings(&t.table, "end");
    assert!(
        got == all,
        "{}",
        missing(&got, &all, true).unwrap_or_default()
    );
    t.assert_left_nothing(&[killed]);
    // One process over the same topic, bounded, into a table of its own:
    // the same rows.
    let one = format!("{}_one", t.table);
    let single = run(&[
        "run".into(),
        "window".into(),
        "--input".into(),
        format!("kafka://{}/{}", t.broker, t.input),
        "--bounded".into(),
        "--window".into(),
        "tumbling:1000".into(),
        "--agg".into(),
        "sum".into(),
        "--parallelism".into(),
        "2".into(),
        "--output".into(),
        format!("{}?table={one}", t.pg),
    ]);
    assert!(
        single.status.success(),
        "{}",
        String::from_utf8_lossy(&single.stderr)
    );
    assert_eq!(
        t.firings(&one, "end"),
        got,
        "one process writes the same rows"
    );
    t.cleanup();
}

/// What group mode with a PostgreSQL output cannot run is refused before
/// anything starts, in one `error:` line and exit code 1, for either job.
#[test]
fn group_mode_into_postgres_refuses_what_it_cannot_run() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let long = "g".repeat(120);
    let jobs: [&[&str]; 2] = [
        &["wordcount"],
        &["window", "--window", "tumbling:1000", "--agg", "sum"],
    ];
    for job in jobs {
        let base = |group: &str, output: &str| -> Vec<String> {
            ["run"]
                .iter()
                .chain(job)
                .chain(&[
                    "--group",
                    group,
                    "--input",
                    "kafka://127.0.0.1:1/in",
                    "--output",
                    output,
                    "--checkpoint-dir",
                    "/tmp/x",
                    "--checkpoint-interval",
                    "100",
                ])
                .map(|s| s.to_string())
                .collect()
        };
        let cases: [(Vec<String>, &str); 3] = [
            (base("g", &pg), "missing ?table="),
            (
                base("g", "postgres://floe:floe@127.0.0.1:1/floe?table=t"),
                "cannot reach PostgreSQL",
            ),
            (base(&long, &format!("{pg}?table=t")), "too long"),
        ];
        for (args, says) in cases {
            let out = run(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(
                lines.len() == 1 && lines[0].starts_with("error: ") && lines[0].contains(says),
                "{args:?}: one error line saying {says:?}, got:\n{stderr}"
            );
        }
    }
}

/// The fence itself, step by step against PostgreSQL, as the sink and the
/// claims use it: a generation's positions commit in a prepared
/// transaction; a newer generation's claim reads them and fences the
/// older one, whose next transaction and claim fail; a transaction
/// prepared and never committed (a member killed between `PREPARE` and
/// `COMMIT PREPARED`) is rolled back by the next claim, which resumes
/// from the positions and checkpoint committed before it.
#[test]
fn a_newer_generation_fences_the_older_and_rolls_back_its_prepared_transaction() {
    use floe::CheckpointId;
    use floe::connectors::kafka::group::{GroupCommit, OffsetMark};
    use floe::connectors::postgres::PostgresError;
    use floe::connectors::postgres::group::GroupFence;
    use rdkafka::consumer::Consumer;
    use std::sync::Arc;

    let Some(pg) = postgres_url() else {
        return;
    };
    let group = unique("fence");
    // Never connects: only its group's metadata is used.
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("group.id", &group)
        .set("bootstrap.servers", "127.0.0.1:1")
        .create()
        .expect("a consumer");
    let metadata = Arc::new(consumer.group_metadata().expect("the group's metadata"));
    let run = |generation: i32, member: &str| {
        let commit = GroupCommit::new(
            &format!("{group}/{member}/g{generation}-1"),
            metadata.clone(),
        );
        let fence = GroupFence::new(&group, "words", generation, member, "t", commit.clone())
            .expect("a fence");
        (commit, fence)
    };
    let claim = |fence: &GroupFence| {
        fence.claim_blocking(
            &pg,
            &[0, 1],
            Duration::from_secs(2),
            Duration::from_secs(10),
        )
    };
    let positions = |fence: &GroupFence| -> Vec<(i32, Option<i64>, Option<OffsetMark>)> {
        claim(fence)
            .expect("a claim")
            .into_iter()
            .map(|c| (c.partition, c.next_offset, c.mark))
            .collect()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // As the sink does: positions of `checkpoint` in a transaction,
    // prepared, committed when `commit`.
    let transaction = |fence: &GroupFence, checkpoint: u64, gid: &str, commit: bool| {
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
                .await
                .expect("connect");
            let driver = tokio::spawn(connection);
            client.batch_execute("BEGIN").await.expect("begin");
            let written = fence
                .commit_positions(&client, CheckpointId(checkpoint))
                .await;
            if written.is_ok() {
                client
                    .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
                    .await
                    .expect("prepare");
                if commit {
                    client
                        .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
                        .await
                        .expect("commit prepared");
                }
            } else {
                client.batch_execute("ROLLBACK").await.expect("rollback");
            }
            drop(client);
            let _ = driver.await;
            written
        })
    };
    let mark = |member: &str, generation: i32, checkpoint: u64| OffsetMark {
        run: format!("{group}/{member}/g{generation}-1"),
        checkpoint,
    };

    // Generation 1: nothing committed yet; checkpoint 3 commits (10, 20).
    let (commit1, one) = run(1, "ma");
    assert_eq!(positions(&one), vec![(0, None, None), (1, None, None)]);
    commit1.record(
        CheckpointId(3),
        &[("words".into(), 0, 10), ("words".into(), 1, 20)],
    );
    transaction(&one, 3, &format!("floe:{group}/ma/g1-1:t:0:3"), true).expect("committed");
    // Generation 2 takes the partitions over, from checkpoint 3.
    let (commit2, two) = run(2, "mb");
    let at3 = vec![
        (0, Some(10), Some(mark("ma", 1, 3))),
        (1, Some(20), Some(mark("ma", 1, 3))),
    ];
    assert_eq!(positions(&two), at3);
    // Generation 1 comes back: fenced, in a transaction and in a claim.
    commit1.record(
        CheckpointId(4),
        &[("words".into(), 0, 15), ("words".into(), 1, 25)],
    );
    let fenced =
        |r: floe::Result<_>| matches!(r, Err(floe::Error::Postgres(PostgresError::Fenced { .. })));
    assert!(fenced(transaction(&one, 4, "unused", false)));
    assert!(fenced(claim(&one).map(|_| ())));
    // Generation 2 prepares checkpoint 5 and dies before its commit:
    // generation 3 rolls it back and resumes from checkpoint 3.
    commit2.record(
        CheckpointId(5),
        &[("words".into(), 0, 30), ("words".into(), 1, 40)],
    );
    let gid = format!("floe:{group}/mb/g2-1:t:0:5");
    transaction(&two, 5, &gid, false).expect("prepared");
    let (_, three) = run(3, "mc");
    assert_eq!(positions(&three), at3);
    let left = query(
        &pg,
        &format!("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'floe:{group}/%'"),
    );
    assert!(left.is_empty(), "the prepared transaction was rolled back");
}

/// The marks a member prunes by and what it finishes when it stops, in
/// PostgreSQL: `named_runs` lists the runs of the group's committed marks
/// (nothing before the positions table holds the group), and
/// `member_stopped` rolls back that member's prepared transactions and no
/// other's (not those of a member whose name it starts, nor another
/// group's).
#[test]
fn the_postgres_mark_store_names_committed_runs_and_ends_a_stopped_members_transactions() {
    use floe::connectors::kafka::group::MarkStore;
    use floe::connectors::postgres::group::PostgresMarks;

    let Some(pg) = postgres_url() else {
        return;
    };
    let group = unique("marks");
    let other = unique("marks-other");
    let marks = PostgresMarks::new(&pg, &group);
    assert_eq!(
        marks.named_runs().expect("no marks yet"),
        Default::default()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let prepare = |gid: String| {
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
                .await
                .expect("connect");
            let driver = tokio::spawn(connection);
            client
                .batch_execute(&format!("BEGIN; PREPARE TRANSACTION '{gid}'"))
                .await
                .expect("prepare");
            drop(client);
            let _ = driver.await;
        })
    };
    let gids = [
        format!("floe:{group}/ma/g1-1:t:0:5"),
        format!("floe:{group}/ma/g2-3:t:1:9"),
        format!("floe:{group}/ma2/g2-1:t:0:4"),
        format!("floe:{group}/mb/g2-1:t:0:6"),
        format!("floe:{other}/ma/g1-1:t:0:5"),
    ];
    for gid in &gids {
        prepare(gid.clone());
    }
    marks.member_stopped("ma").expect("rolled back");
    let left = |prefix: &str| -> Vec<String> {
        let mut gids: Vec<String> = query(
            &pg,
            &format!("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'floe:{prefix}/%'"),
        )
        .iter()
        .map(|r| r.get(0))
        .collect();
        gids.sort();
        gids
    };
    assert_eq!(left(&group), gids[2..4].to_vec(), "only member ma's went");
    assert_eq!(left(&other), gids[4..].to_vec(), "another group's stay");
    for gid in left(&group).into_iter().chain(left(&other)) {
        query(&pg, &format!("ROLLBACK PREPARED '{gid}'"));
    }
    // Committed marks, as claims and sinks write them.
    query(
        &pg,
        "CREATE TABLE IF NOT EXISTS floe_group_offsets (grp TEXT NOT NULL, topic TEXT NOT NULL, \
         part INT NOT NULL, next_offset BIGINT, mark TEXT, generation INT NOT NULL, \
         PRIMARY KEY (grp, topic, part))",
    );
    query(
        &pg,
        &format!(
            "INSERT INTO floe_group_offsets VALUES \
             ('{group}', 'words', 0, 10, 'floe:{group}/ma/g1-1/chk-3', 2), \
             ('{group}', 'words', 1, 20, 'floe:{group}/mb/g2-1/chk-7', 2), \
             ('{group}', 'words', 2, 30, 'floe:{group}/mb/g2-1/chk-8', 2), \
             ('{group}', 'words', 3, NULL, NULL, 2), \
             ('{other}', 'words', 0, 10, 'floe:{other}/mc/g1-1/chk-3', 1)"
        ),
    );
    let want: std::collections::BTreeSet<String> =
        [format!("{group}/ma/g1-1"), format!("{group}/mb/g2-1")].into();
    assert_eq!(marks.named_runs().expect("the marks"), want);
}
