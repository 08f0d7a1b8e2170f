//! Group mode against Apache Kafka: one word count run by several `floe`
//! processes of one consumer group (`docs/scale-out.md`).
//!
//! Members join, are killed with `kill -9`, and join again while input
//! arrives; the `read_committed` output must be the exact changelog of the
//! input's word counts: every word's counts 1..=n, each once (the oracle:
//! a HashMap over the same lines, by floe's own tokenizer). Every wait is
//! for an event (a `rebalance` line, the output reaching the oracle),
//! bounded by a watchdog. The window job in group mode gives the firings
//! of a HashMap over the same events, and those of one process.

#![cfg(feature = "kafka")]

use crate::kafka_support;

use kafka_support::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The input topic's partitions, and the repartition topic's.
const PARTITIONS: i32 = 6;

impl Member {
    fn start(broker: &str, input: &str, output: &str, group: &str, dir: &str) -> Member {
        Member::start_with(broker, input, output, group, dir, &[])
    }

    fn start_with(
        broker: &str,
        input: &str,
        output: &str,
        group: &str,
        dir: &str,
        extra: &[&str],
    ) -> Member {
        Member::spawn("wordcount", broker, input, output, group, dir, extra)
    }

    /// A member of the window job of group `group`: one-second tumbling
    /// sums, no out-of-orderness.
    fn window(broker: &str, input: &str, output: &str, group: &str, dir: &str) -> Member {
        Member::spawn("window", broker, input, output, group, dir, &WINDOW_ARGS)
    }

    fn spawn(
        job: &str,
        broker: &str,
        input: &str,
        output: &str,
        group: &str,
        dir: &str,
        extra: &[&str],
    ) -> Member {
        let (input, output) = (
            format!("kafka://{broker}/{input}"),
            format!("kafka://{broker}/{output}"),
        );
        Member::of_group(job, &input, &output, group, dir, PARTITIONS, extra)
    }
}

/// Waits until the committed output holds every update of `oracle`
/// (then checks it exactly), within the watchdog; the members' lines on
/// failure.
fn wait_for_oracle(
    broker: &str,
    output: &str,
    oracle: &HashMap<String, u64>,
    members: &mut [&mut Member],
) {
    let deadline = Instant::now() + WATCHDOG;
    let want: u64 = oracle.values().sum();
    loop {
        let records = read_all(broker, output);
        let seen = updates(&records);
        let complete = oracle
            .iter()
            .all(|(w, n)| seen.contains_key(&(w.clone(), *n)));
        if complete && records.len() as u64 >= want {
            return;
        }
        if Instant::now() >= deadline {
            let mut text = String::new();
            for m in members.iter_mut() {
                m.drain();
                text.push_str(&m.seen.join("\n"));
                text.push_str("\n---\n");
            }
            panic!(
                "output not complete within {WATCHDOG:?}: {} of {want} updates\n{text}",
                records.len()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The `info` object of the `/status` served at `addr`.
fn status_info(addr: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the status endpoint");
    write!(stream, "GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let body = response.split_once("\r\n\r\n").expect("a body").1;
    let status: serde_json::Value = serde_json::from_str(body).expect("status JSON");
    status["info"].clone()
}

/// A test's broker, its input (6 partitions) and output (3) topics, its
/// group's name and its shared checkpoint directory.
struct Topics {
    broker: String,
    input: String,
    output: String,
    group: String,
    dir: tempfile::TempDir,
}

impl Topics {
    /// New names under `prefix`, the topics created; `None` when the
    /// services are skipped on purpose.
    fn new(prefix: &str) -> Option<Topics> {
        let broker = broker()?;
        let (input, output) = (
            unique(&format!("{prefix}-in")),
            unique(&format!("{prefix}-out")),
        );
        create_topic(&broker, &input, PARTITIONS);
        create_topic(&broker, &output, 3);
        Some(Topics {
            broker,
            input,
            output,
            group: unique("g"),
            dir: tempfile::tempdir().expect("tempdir"),
        })
    }
}

/// Three members over a 6-partition topic; one is killed with `kill -9`
/// mid-run (its partitions move, their state is restored from the
/// checkpoints their committed offsets name); a fourth joins; more input
/// arrives meanwhile; all stop with SIGTERM. The committed changelog is
/// the oracle's, every update exactly once.
#[test]
fn members_that_die_and_join_keep_the_counts_exact() {
    let Some(Topics {
        broker,
        input,
        output,
        group,
        dir: _keep,
    }) = Topics::new("group")
    else {
        return;
    };
    let dir = _keep.path().to_str().expect("utf-8 path").to_string();
    let lines = corpus(30, 6000, 300);
    let (first, second) = lines.split_at(3000);
    produce(&broker, &input, PARTITIONS, first);

    let mut a = Member::start_with(
        &broker,
        &input,
        &output,
        &group,
        &dir,
        &["--metrics-addr", "127.0.0.1:0"],
    );
    a.wait_line("status address", |l| l.starts_with("metrics: http://"));
    let mut b = Member::start(&broker, &input, &output, &group, &dir);
    let mut c = Member::start(&broker, &input, &output, &group, &dir);
    for m in [&mut a, &mut b, &mut c] {
        m.wait_line("rebalance line", |l| l.starts_with("rebalance generation="));
    }
    // The first half counted by the three, then one dies mid-run while
    // the second half arrives.
    wait_for_oracle(
        &broker,
        &output,
        &oracle(first),
        &mut [&mut a, &mut b, &mut c],
    );
    b.kill9();
    produce(&broker, &input, PARTITIONS, &second[..1500]);
    let mut d = Member::start(&broker, &input, &output, &group, &dir);
    d.wait_line("rebalance line", |l| l.starts_with("rebalance generation="));
    produce(&broker, &input, PARTITIONS, &second[1500..]);
    let all = oracle(&lines);
    wait_for_oracle(&broker, &output, &all, &mut [&mut a, &mut c, &mut d]);
    assert!(
        a.rebalances() + c.rebalances() >= 3,
        "the kill and the join moved partitions: each member saw a new generation"
    );
    // A's /status names its member run's generation and partitions: those
    // of its last `rebalance` line.
    let last = a
        .seen
        .iter()
        .rev()
        .find(|l| l.starts_with("rebalance generation="))
        .expect("a rebalance line")
        .clone();
    let status = a
        .seen
        .iter()
        .find_map(|l| l.strip_prefix("metrics: http://"))
        .and_then(|l| l.split_whitespace().next())
        .expect("the status address")
        .trim_end_matches("/metrics")
        .to_string();
    let info = status_info(&status);
    assert_eq!(
        (info["generation"].as_str(), info["partitions"].as_str()),
        (field(&last, "generation"), field(&last, "partitions")),
        "{info}"
    );
    let pids: Vec<u32> = [&a, &c, &d].iter().map(|m| m.child.id()).collect();
    for m in [a, c, d] {
        let (status, seen) = m.terminate();
        let text = seen.join("\n");
        assert_eq!(status.code(), Some(143), "SIGTERM exits 143:\n{text}");
        let summary = seen
            .iter()
            .find(|l| l.starts_with("records="))
            .unwrap_or_else(|| panic!("a summary line:\n{text}"));
        assert!(field(summary, "rebalances").is_some(), "{summary}");
    }
    // After every member stopped: still exactly the oracle's changelog.
    let records = read_all(&broker, &output);
    check_changelog(&records, &all, true);
    // A member deletes the checkpoints of its runs that no committed
    // offset names (at each start, and when it stops): of each member
    // that stopped, only runs the marks name are left.
    let named = named_runs(&broker, &group);
    for pid in pids {
        for run in member_runs(_keep.path(), &group, pid) {
            assert!(named.contains(&run), "{run} is named by no mark: {named:?}");
        }
    }
}

/// The runs the group's committed offsets of its repartition topic name.
fn named_runs(broker: &str, group: &str) -> std::collections::BTreeSet<String> {
    let topic = format!("floe-{group}-wordcount-words");
    let partitions: Vec<(String, i32)> = (0..PARTITIONS).map(|p| (topic.clone(), p)).collect();
    floe::connectors::kafka::group::committed_marks(
        broker,
        group,
        &partitions,
        Duration::from_secs(30),
    )
    .expect("the group's committed offsets")
    .into_iter()
    .filter_map(|(_, _, mark)| mark.map(|m| m.run))
    .collect()
}

/// The run directories (`GROUP/MEMBER/gG-N`) of the member with process
/// id `pid`, oldest first.
fn member_runs(dir: &std::path::Path, group: &str, pid: u32) -> Vec<String> {
    let mut runs = Vec::new();
    for member in std::fs::read_dir(dir.join(group)).expect("the group's directory") {
        let member = member
            .expect("entry")
            .file_name()
            .into_string()
            .expect("UTF-8");
        if !member.starts_with(&format!("m{pid}-")) {
            continue;
        }
        for run in std::fs::read_dir(dir.join(group).join(&member)).expect("member directory") {
            let run = run
                .expect("entry")
                .file_name()
                .into_string()
                .expect("UTF-8");
            let number = |run: &str| -> (u64, u64) {
                let (g, n) = run.trim_start_matches('g').split_once('-').expect("gG-N");
                (g.parse().expect("G"), n.parse().expect("N"))
            };
            runs.push((number(&run), format!("{group}/{member}/{run}")));
        }
    }
    runs.sort();
    runs.into_iter().map(|(_, run)| run).collect()
}

/// A member frozen (SIGSTOP) past the session timeout loses its
/// partitions to the other; when it comes back (SIGCONT) its open
/// transactions and its commits are fenced (the broker aborted them, its
/// generation is gone), it rejoins, and the output stays exactly the
/// oracle's changelog: nothing the frozen member wrote is counted twice.
#[test]
fn a_member_that_comes_back_after_its_partitions_moved_is_fenced() {
    let Some(Topics {
        broker,
        input,
        output,
        group,
        dir: _keep,
    }) = Topics::new("fence")
    else {
        return;
    };
    let dir = _keep.path().to_str().expect("utf-8 path").to_string();
    let lines = corpus(31, 4500, 200);
    produce(&broker, &input, PARTITIONS, &lines[..1500]);
    let mut a = Member::start(&broker, &input, &output, &group, &dir);
    let mut b = Member::start(&broker, &input, &output, &group, &dir);
    for m in [&mut a, &mut b] {
        m.wait_line("rebalance line", |l| l.starts_with("rebalance generation="));
    }
    wait_for_oracle(
        &broker,
        &output,
        &oracle(&lines[..1500]),
        &mut [&mut a, &mut b],
    );
    // Frozen mid-stream: input arrives, the group gives the frozen
    // member's partitions to the other, which counts everything.
    b.signal("-STOP");
    produce(&broker, &input, PARTITIONS, &lines[1500..3000]);
    let before = a.rebalances();
    a.wait_line("rebalance after the freeze", |l| {
        l.starts_with("rebalance generation=")
    });
    assert!(a.rebalances() > before);
    wait_for_oracle(&broker, &output, &oracle(&lines[..3000]), &mut [&mut a]);
    // Back: fenced, then a member again.
    let rejoined_before = b.rebalances();
    b.signal("-CONT");
    b.wait_line("rebalance after coming back", |l| {
        l.starts_with("rebalance generation=")
    });
    assert!(b.rebalances() > rejoined_before);
    produce(&broker, &input, PARTITIONS, &lines[3000..]);
    let all = oracle(&lines);
    wait_for_oracle(&broker, &output, &all, &mut [&mut a, &mut b]);
    for m in [a, b] {
        let (status, seen) = m.terminate();
        assert_eq!(status.code(), Some(143), "{}", seen.join("\n"));
    }
    let records = read_all(&broker, &output);
    check_changelog(&records, &all, true);
}

/// What group mode cannot run is refused before anything starts, in one
/// `error:` line and exit code 1 (no broker is contacted for these).
#[test]
fn group_mode_refuses_what_it_cannot_run() {
    let input = "kafka://127.0.0.1:1/in";
    let output = "kafka://127.0.0.1:1/out";
    let base = |extra: &[&str]| -> Vec<String> {
        ["run", "wordcount", "--group", "g"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let cases: [(Vec<String>, &str); 6] = [
        (base(&["--output", output]), "kafka:// --input"),
        (base(&["--input", input]), "kafka:// --output"),
        (
            base(&["--input", input, "--output", output]),
            "--checkpoint-dir",
        ),
        (
            base(&[
                "--input",
                input,
                "--output",
                output,
                "--checkpoint-dir",
                "/tmp/x",
            ]),
            "--checkpoint-interval",
        ),
        (
            base(&[
                "--input",
                input,
                "--output",
                output,
                "--checkpoint-dir",
                "/tmp/x",
                "--checkpoint-interval",
                "100",
                "--unaligned",
            ]),
            "aligned checkpoints only",
        ),
        (
            base(&[
                "--input",
                input,
                "--output",
                output,
                "--checkpoint-dir",
                "/tmp/x",
                "--checkpoint-interval",
                "100",
                "--resume",
            ]),
            "committed offsets",
        ),
    ];
    let window: Vec<String> = [
        "run",
        "window",
        "--group",
        "g",
        "--input",
        input,
        "--output",
        output,
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--late-output",
        "/tmp/late.txt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cases = cases.into_iter().chain([(window, "--late-output")]);
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

/// The committed firings of `output`, sorted, without those of `skip`'s key.
fn firings(broker: &str, output: &str, skip: &str) -> Vec<String> {
    let mut lines: Vec<String> = read_all(broker, output)
        .into_iter()
        .filter(|l| l.split(',').next() != Some(skip))
        .collect();
    lines.sort();
    lines
}

/// Waits until the committed firings include every line of `want`.
fn wait_for_firings(
    broker: &str,
    output: &str,
    want: &[String],
    members: &mut [&mut Member],
) -> Vec<String> {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let got = firings(broker, output, "end");
        let have: std::collections::HashSet<&String> = got.iter().collect();
        let missing = want.iter().filter(|l| !have.contains(l)).count();
        if missing == 0 {
            return got;
        }
        if Instant::now() >= deadline {
            let mut text = String::new();
            for m in members.iter_mut() {
                m.drain();
                text.push_str(&m.seen.join("\n"));
                text.push_str("\n---\n");
            }
            panic!(
                "{missing} of {} firings not committed within {WATCHDOG:?} ({} committed)\n{text}",
                want.len(),
                got.len()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The window job in group mode: two members window a 6-partition topic;
/// one is killed with `kill -9` mid-run and another joins; watermarks
/// cross the repartition topic as records. The committed firings equal,
/// exactly and once each, a HashMap's sums over the same events and the
/// firings of one process reading the topic bounded.
#[test]
fn a_window_job_across_members_fires_what_one_process_fires() {
    let Some(Topics {
        broker,
        input,
        output,
        group,
        dir: _keep,
    }) = Topics::new("gwin")
    else {
        return;
    };
    let dir = _keep.path().to_str().expect("utf-8 path").to_string();
    // The windows the first third closes: those ending by its last
    // timestamp (every partition's watermark passes them).
    let WindowInput {
        events,
        lines,
        all,
        third,
        first,
    } = WindowInput::new(41, PARTITIONS);
    let mut a = Member::window(&broker, &input, &output, &group, &dir);
    let mut b = Member::window(&broker, &input, &output, &group, &dir);
    // The first third is read after both joined (see the same step of
    // kafka_group_postgres's window test).
    wait_one_generation(&mut [&mut a, &mut b]);
    produce(&broker, &input, PARTITIONS, &lines[..third]);
    wait_for_firings(&broker, &output, &first, &mut [&mut a, &mut b]);
    b.kill9();
    produce(&broker, &input, PARTITIONS, &lines[third..2 * third]);
    let mut c = Member::window(&broker, &input, &output, &group, &dir);
    c.wait_line("rebalance line", |l| l.starts_with("rebalance generation="));
    produce(&broker, &input, PARTITIONS, &lines[2 * third..]);
    // One event far ahead per partition moves every watermark past the
    // last window; its own window never closes.
    let last = events.last().expect("events").1;
    let end: Vec<String> = (0..PARTITIONS)
        .map(|_| format!("end,{},0", last + 10_000))
        .collect();
    produce(&broker, &input, PARTITIONS, &end);
    wait_for_firings(&broker, &output, &all, &mut [&mut a, &mut c]);
    for m in [a, c] {
        let (status, seen) = m.terminate();
        let text = seen.join("\n");
        assert_eq!(status.code(), Some(143), "SIGTERM exits 143:\n{text}");
        let summary = seen
            .iter()
            .find(|l| l.starts_with("records="))
            .unwrap_or_else(|| panic!("a summary line:\n{text}"));
        for name in ["late", "bad", "windows_fired", "rebalances"] {
            assert!(field(summary, name).is_some(), "{name}= in {summary}");
        }
    }
    // Exactly once: each window's firing committed once.
    assert_eq!(firings(&broker, &output, "end"), all);
    // One process over the same topic, bounded: the same firings.
    let single_out = _keep.path().join("single.txt");
    let single = run(&[
        "run".into(),
        "window".into(),
        "--input".into(),
        format!("kafka://{broker}/{input}"),
        "--bounded".into(),
        "--window".into(),
        "tumbling:1000".into(),
        "--agg".into(),
        "sum".into(),
        "--parallelism".into(),
        "2".into(),
        "--output".into(),
        single_out.display().to_string(),
    ]);
    assert!(
        single.status.success(),
        "{}",
        String::from_utf8_lossy(&single.stderr)
    );
    let mut one: Vec<String> = std::fs::read_to_string(&single_out)
        .expect("the single process's firings")
        .lines()
        .filter(|l| !l.starts_with("end,"))
        .map(str::to_owned)
        .collect();
    one.sort();
    assert_eq!(one, all, "one process fires the same windows");
}

/// The library's group mode as a user writes it: a word count run by two
/// members of one group through `StreamExecutionEnvironment::execute_group`,
/// each on a thread of its own. Its `keyBy` crosses the members through a
/// `Repartition` topic: stage one splits lines into words and sends each
/// to the partition of its key group, stage two counts the words of the
/// partitions it holds, exactly once into a topic. The second member joins
/// while the first runs (a rebalance moves partitions and their state).
/// Every `word,count` update of a HashMap's counts is in the output
/// exactly once, and both members stop when told to.
#[test]
fn a_library_job_repartitions_by_key_across_the_members_of_a_group() {
    use floe::StreamExecutionEnvironment;
    use floe::connectors::kafka::group::{
        Assignment, GroupJob, GroupReport, GroupSetting, Repartition,
    };
    use floe::connectors::kafka::{KafkaSource, StartingOffsets};
    use floe::connectors::kafka_sink::KafkaSink;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Count {
        broker: String,
        group: String,
        input: String,
        output: String,
        words: Repartition<String>,
    }

    impl GroupJob for Count {
        fn build(
            &self,
            env: &StreamExecutionEnvironment,
            held: &Assignment<'_>,
        ) -> floe::Result<()> {
            let lines = held.of(&self.input);
            if !lines.is_empty() {
                let source = KafkaSource::lines(&self.broker, &[self.input.as_str()])
                    .group_id(&self.group)
                    .starting_offsets(StartingOffsets::Committed)
                    .partitions(&lines)
                    .group_commit(held.commit.clone());
                let words = env
                    .add_source("Kafka Source", move |ctx| source.reader(ctx))
                    .flat_map(floe::tokenize);
                self.words.write(&words, held, &[self.input.as_str()]);
            }
            if let Some(words) = self.words.read(env, held) {
                let sink = KafkaSink::<String>::lines(&self.broker, &self.output)
                    .transactional_id_prefix(&held.transactional_id("output"))
                    .property("transaction.timeout.ms", "10000")
                    .group_offsets(held.commit.clone(), &[self.words.topic()]);
                words
                    .map(|w: String| (w, 1u64))
                    .key_by_field(|t: &(String, u64)| &t.0)
                    .sum(|t: &mut (String, u64)| &mut t.1)
                    .map(|(w, n): (String, u64)| format!("{w},{n}"))
                    .sink_exactly_once("Kafka Sink", sink.exactly_once())
                    .set_parallelism(1);
            }
            Ok(())
        }
    }

    let Some(Topics {
        broker,
        input,
        output,
        group,
        dir: _keep,
    }) = Topics::new("glib")
    else {
        return;
    };
    let dir = _keep.path().to_str().expect("utf-8 path").to_string();
    let (first, second) = (corpus(51, 1200, 100), corpus(52, 1200, 100));
    produce(&broker, &input, PARTITIONS, &first);
    let stop = Arc::new(AtomicBool::new(false));
    let (assigned, rebalances) = std::sync::mpsc::channel();
    let member = |i: usize| {
        let (stop, assigned) = (stop.clone(), assigned.clone());
        let setting = GroupSetting::new(&group, &broker, &dir)
            .topics(&[input.as_str()])
            .session_timeout(Duration::from_secs(6));
        let words = Repartition::new(
            &setting,
            "words",
            PARTITIONS,
            |w: &String| w,
            |w: &String, out: &mut Vec<u8>| out.extend_from_slice(w.as_bytes()),
            |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string()),
        )
        .expect("the repartition topic");
        let mut setting = setting.keyed_topics(&[words.topic()]);
        setting.member = format!("library-{i}");
        let job = Count {
            broker: broker.clone(),
            group: group.clone(),
            input: input.clone(),
            output: output.clone(),
            words,
        };
        std::thread::spawn(move || {
            let env = StreamExecutionEnvironment::new();
            env.set_parallelism(2);
            env.enable_checkpointing(Duration::from_millis(200));
            env.execute_group(&setting, &job, &stop, &mut |report| {
                if let GroupReport::Rebalance { .. } = report {
                    let _ = assigned.send(i);
                }
            })
        })
    };
    let lines: Vec<String> = first.iter().chain(&second).cloned().collect();
    let all_oracle = oracle(&lines);
    let complete = |records: &[String]| {
        let seen = updates(records);
        all_oracle
            .iter()
            .all(|(w, n)| seen.contains_key(&(w.clone(), *n)))
    };
    // The first member alone counts the first lines: the second one's
    // join then moves partitions whose state is committed.
    let mut members = vec![member(0)];
    let first_oracle = oracle(&first);
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let seen = updates(&read_all(&broker, &output));
        if first_oracle
            .iter()
            .all(|(w, n)| seen.contains_key(&(w.clone(), *n)))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first lines were never counted"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    members.push(member(1));
    let mut heard = std::collections::BTreeSet::new();
    while heard.len() < 2 {
        let i = rebalances
            .recv_timeout(WATCHDOG)
            .expect("each member is given partitions");
        heard.insert(i);
    }
    produce(&broker, &input, PARTITIONS, &second);
    let deadline = Instant::now() + WATCHDOG;
    while !complete(&read_all(&broker, &output)) {
        assert!(
            Instant::now() < deadline,
            "the output never held the oracle's counts"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Release);
    for m in members {
        let received = m.join().expect("member thread").expect("member ends well");
        assert!(received >= 1, "each member received an assignment");
    }
    check_changelog(&read_all(&broker, &output), &all_oracle, true);
}

/// `--transaction-timeout` is the timeout of the Kafka transactions a
/// member opens, as the broker's transaction coordinator holds it (Kafka's
/// `kafka-transactions describe`): the repartition stage's and the output
/// stage's (the default is 10000 ms).
#[test]
fn a_members_transactions_take_the_transaction_timeout_asked_for() {
    let Some(Topics {
        broker,
        input,
        output,
        group,
        dir: _keep,
    }) = Topics::new("txtimeout")
    else {
        return;
    };
    let dir = _keep.path().to_str().expect("utf-8 path").to_string();
    let lines = corpus(17, 600, 50);
    produce(&broker, &input, PARTITIONS, &lines);
    let mut m = Member::start_with(
        &broker,
        &input,
        &output,
        &group,
        &dir,
        &["--transaction-timeout", "45000"],
    );
    wait_for_oracle(&broker, &output, &oracle(&lines), &mut [&mut m]);
    // The transactional ids of the group's runs: floe-GROUP.MEMBER.gG-N-WHAT-…
    let tool = "org.apache.kafka.tools.TransactionsCommand";
    let prefix = format!("floe-{group}.");
    let listed = kafka_tool(tool, &["--bootstrap-server", &broker, "list"]);
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().find(|c| c.starts_with(&prefix)))
        .collect();
    // One of each stage (each tool run starts a JVM).
    let stages: Vec<&str> = ["-repartition-", "-output-"]
        .iter()
        .map(|what| {
            *ids.iter().find(|id| id.contains(what)).unwrap_or_else(|| {
                panic!("a transactional id of the {what} stage among:\n{listed}")
            })
        })
        .collect();
    for id in stages {
        let described = kafka_tool(
            tool,
            &[
                "--bootstrap-server",
                &broker,
                "describe",
                "--transactional-id",
                id,
            ],
        );
        let mut rows = described.lines().map(|l| l.split('\t').map(str::trim));
        let header: Vec<&str> = rows.next().expect("a header").collect();
        let values: Vec<&str> = rows.next().expect("a row").collect();
        let column = header
            .iter()
            .position(|h| *h == "TransactionTimeoutMs")
            .unwrap_or_else(|| panic!("a TransactionTimeoutMs column:\n{described}"));
        assert_eq!(values[column], "45000", "{id}:\n{described}");
    }
    let (status, seen) = m.terminate();
    assert_eq!(status.code(), Some(143), "{}", seen.join("\n"));
}
