//! Helpers of the tests against Apache Kafka: its address
//! (`FLOE_TEST_KAFKA`, written by `scripts/services.sh start`), topics,
//! a seeded corpus and seeded events, a reader of a whole topic, the word
//! count and window oracles, and Kafka's own command-line tools from the
//! classpath the script installed.

#![allow(dead_code)]

#[path = "../services/mod.rs"]
mod services;
// Not every test binary queries PostgreSQL (as `dead_code` above).
#[cfg(feature = "postgres")]
#[allow(unused_imports)]
pub use services::{query, try_query};

mod member;
#[allow(unused_imports)]
pub use member::{Member, WINDOW_ARGS, wait_one_generation};
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The broker's `host:port`, or `None` when the services are skipped on
/// purpose (`FLOE_SKIP_SERVICES=1`); fails the test when it is simply not
/// set, so a run without the servers never passes silently.
pub fn broker() -> Option<String> {
    service("FLOE_TEST_KAFKA")
}

/// The PostgreSQL URL (`FLOE_TEST_POSTGRES_URL`), as [`broker`].
pub fn postgres_url() -> Option<String> {
    service("FLOE_TEST_POSTGRES_URL")
}

/// A variable from the environment, else from the env file
/// `scripts/services.sh start` writes (`target/services.env`).
fn lookup(var: &str) -> Option<String> {
    let from_file = || {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/services.env");
        let text = std::fs::read_to_string(file).ok()?;
        let prefix = format!("export {var}=");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::to_owned)
    };
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(from_file)
}

/// A service's address (see [`lookup`]).
fn service(var: &str) -> Option<String> {
    match lookup(var) {
        Some(b) => Some(b),
        None if std::env::var("FLOE_SKIP_SERVICES").as_deref() == Ok("1") => {
            eprintln!("{var} not set and FLOE_SKIP_SERVICES=1: test skipped");
            None
        }
        None => panic!(
            "{var} is not set: run `scripts/services.sh start` and load the env \
             file it writes (or set FLOE_SKIP_SERVICES=1 to skip the tests that need servers)"
        ),
    }
}

/// Runs `scripts/services.sh ARGS` (e.g. `kill kafka`, `start kafka`).
pub fn services(args: &[&str]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/services.sh");
    let out = Command::new(script)
        .args(args)
        .stdout(Stdio::null())
        .output()
        .expect("scripts/services.sh runs");
    assert!(
        out.status.success(),
        "scripts/services.sh {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A topic name no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates `topic` with `partitions` partitions.
pub fn create_topic(broker: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()
        .expect("admin client");
    let results = futures::executor::block_on(admin.create_topics(
        // Kept whatever their timestamps: tests stamp records in 1970
        // (1 000 ms and up), which time-based retention (seven days by
        // default) would delete at the broker's next sweep.
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1")],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("create topics");
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
    // The creation is answered once the controller has it; the broker's
    // metadata, which a client asks, follows a moment later. Waits until
    // a client sees every partition (a loaded machine made a member
    // started at once find no such topic).
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()
        .expect("metadata client");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen = client
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .ok()
            .and_then(|m| {
                m.topics()
                    .first()
                    .filter(|t| t.error().is_none())
                    .map(|t| t.partitions().len() as i32)
            });
        if seen == Some(partitions) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "topic {topic} created but not in the broker's metadata after 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `lines` lines of words from a vocabulary of `vocabulary`, derived from
/// `seed` alone.
pub fn corpus(seed: u64, lines: usize, vocabulary: u64) -> Vec<String> {
    let mut rng = floe::text::SplitMix(seed);
    (0..lines)
        .map(|_| {
            let n = 1 + rng.below(8);
            (0..n)
                .map(|_| format!("w{}", rng.below(vocabulary)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `key,ts,value` events whose timestamps never decrease in line order,
/// so each partition's events are in order whichever partition each line
/// goes to ([`produce`]): no event is late, in one process or across many.
pub fn events(seed: u64, lines: usize, keys: u64) -> Vec<(String, i64, i64)> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut ts = 1_000_000i64;
    (0..lines)
        .map(|_| {
            ts += (next() % 9) as i64;
            let value = (next() % 2001) as i64 - 1000;
            (format!("k{}", next() % keys), ts, value)
        })
        .collect()
}

/// The firings `key,start,end,sum` of one-second tumbling windows over
/// `events`: the oracle, a plain HashMap.
pub fn tumbling_sums(events: &[(String, i64, i64)]) -> Vec<String> {
    let mut sums: HashMap<(String, i64), i64> = HashMap::new();
    for (key, ts, value) in events {
        *sums
            .entry((key.clone(), ts - ts.rem_euclid(1000)))
            .or_default() += value;
    }
    let mut lines: Vec<String> = sums
        .into_iter()
        .map(|((key, start), sum)| format!("{key},{start},{},{sum}", start + 1000))
        .collect();
    lines.sort();
    lines
}

/// The input of the window tests of group mode: 6000 events of 12 keys
/// from `seed`, as lines; the oracle's firings over all of them; the
/// first third's lines, and the firings every partition's watermark has
/// passed once the first third is in (`partitions` partitions, line `i`
/// in partition `i % partitions`).
pub struct WindowInput {
    pub events: Vec<(String, i64, i64)>,
    pub lines: Vec<String>,
    pub all: Vec<String>,
    pub third: usize,
    pub first: Vec<String>,
}

impl WindowInput {
    pub fn new(seed: u64, partitions: i32) -> WindowInput {
        let events = events(seed, 6000, 12);
        let lines: Vec<String> = events
            .iter()
            .map(|(k, ts, v)| format!("{k},{ts},{v}"))
            .collect();
        let third = 2000;
        // The windows ending by the last timestamp of every partition.
        let closed_by = events[third - partitions as usize].1;
        let first: Vec<String> = tumbling_sums(&events[..third])
            .into_iter()
            .filter(|l| l.split(',').nth(2).and_then(|e| e.parse::<i64>().ok()) <= Some(closed_by))
            .collect();
        assert!(first.len() > 50, "the first third closes windows");
        WindowInput {
            all: tumbling_sums(&events),
            events,
            lines,
            third,
            first,
        }
    }
}

/// Writes `lines` to `topic`, line `i` to partition `i % partitions`.
pub fn produce(broker: &str, topic: &str, partitions: i32, lines: &[String]) {
    let producer: Checked = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("linger.ms", "5")
        .create_with_context(Deliveries::default())
        .expect("producer");
    for (i, line) in lines.iter().enumerate() {
        let mut record = BaseRecord::<(), str>::to(topic)
            .payload(line.as_str())
            .partition(i as i32 % partitions);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
            }
        }
    }
    // Waits while the deliveries progress: a slow machine takes longer,
    // a broker that stops acknowledging fails the test.
    let mut left = producer.in_flight_count();
    while let Err(e) = producer.flush(Duration::from_secs(30)) {
        let now = producer.in_flight_count();
        assert!(now < left, "no line delivered for 30 s ({now} left): {e}");
        left = now;
    }
    producer.context().assert_delivered(topic);
}

/// A producer whose failed deliveries the test sees.
type Checked = BaseProducer<Deliveries>;

/// Counts the records the broker refused (a plain producer's flush
/// succeeds even when a delivery failed, so a test would read a topic
/// short of what it produced and blame the source).
#[derive(Default)]
pub struct Deliveries {
    failed: std::sync::Mutex<Vec<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, message)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            failed.push(format!("partition {}: {e}", message.partition()));
        }
    }
}

impl Deliveries {
    /// Fails the test with the broker's answers when any record of
    /// `topic` was not delivered.
    fn assert_delivered(&self, topic: &str) {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            failed.is_empty(),
            "{} records to {topic} not delivered, the first: {}",
            failed.len(),
            failed[0]
        );
    }
}

/// Every record value of `topic` up to the end offsets it has now.
pub fn read_all(broker: &str, topic: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", "floe-tests")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len() as i32;
    // A transaction's commit returns before its markers are in the
    // partitions: until they are, a read_committed reader's end (the last
    // stable offset) stays before its records. Each partition's end is
    // taken once the transactions open at the call have ended (bounded:
    // a transaction a killed writer left open ends only when fenced).
    let settle_by = std::time::Instant::now() + SETTLE;
    for p in 0..partitions {
        let left = settle_by.saturating_duration_since(std::time::Instant::now());
        settled(broker, topic, p, left);
    }
    let mut ends = HashMap::new();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        if high > low {
            ends.insert(p, high);
            list.add_partition_offset(topic, p, Offset::Offset(low))
                .expect("partition");
        }
    }
    consumer.assign(&list).expect("assign");
    let mut out = Vec::new();
    // The next offset not yet handed out, per partition: the client can
    // hand out a record again after a fetch is retried (seen under load,
    // with the broker just restarted: one offset delivered twice while the
    // partition's log holds it once). The topic's content is what is
    // checked, so an offset already read is skipped, and said.
    let mut next: HashMap<i32, i64> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ends.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "topic {topic} not read to its end in 60 s"
        );
        let polled = consumer.poll(Duration::from_millis(100));
        let idle = polled.is_none();
        if let Some(m) = polled {
            let m = m.expect("record");
            let from = next.entry(m.partition()).or_insert(0);
            if m.offset() < *from {
                eprintln!(
                    "read_all: {topic} partition {} offset {} handed out again; skipped",
                    m.partition(),
                    m.offset()
                );
                continue;
            }
            *from = m.offset() + 1;
            if ends
                .get(&m.partition())
                .is_some_and(|end| m.offset() < *end)
            {
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
        }
        // Done with a partition once the reader's position passed its end:
        // the last offsets may be transaction markers or aborted records,
        // which a read_committed reader skips without handing them out
        // (checked when a poll finds nothing, not per record).
        if !idle {
            continue;
        }
        let positions = consumer.position().expect("positions");
        for e in positions.elements() {
            if let (Offset::Offset(next), Some(end)) = (e.offset(), ends.get(&e.partition()))
                && next >= *end
            {
                ends.remove(&e.partition());
            }
        }
    }
    out
}

/// The word counts of `lines`, by floe's own tokenizer.
pub fn oracle(lines: &[String]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for line in lines {
        for word in floe::tokenize(line.clone()) {
            *counts.entry(word).or_insert(0) += 1;
        }
    }
    counts
}

/// How often each `word,count` update appears in a changelog.
pub fn updates(records: &[String]) -> HashMap<(String, u64), u64> {
    let mut seen = HashMap::new();
    for r in records {
        let (word, count) = r.rsplit_once(',').expect("word,count");
        *seen
            .entry((word.to_string(), count.parse::<u64>().expect("a count")))
            .or_insert(0) += 1;
    }
    seen
}

/// Checks a word count changelog against the oracle: every word's counts
/// 1..=n are there (nothing lost) and nothing else is; with `exactly_once`
/// each exactly once.
pub fn check_changelog(records: &[String], oracle: &HashMap<String, u64>, exactly_once: bool) {
    let seen = updates(records);
    let expected: u64 = oracle.values().sum();
    for (word, &n) in oracle {
        for c in 1..=n {
            let times = seen.get(&(word.clone(), c)).copied().unwrap_or(0);
            assert!(times >= 1, "update {word},{c} lost");
            if exactly_once {
                assert_eq!(times, 1, "update {word},{c} duplicated");
            }
        }
    }
    for (word, c) in seen.keys() {
        assert!(
            oracle.get(word).is_some_and(|n| c <= n),
            "update {word},{c} is not in the oracle"
        );
    }
    if exactly_once {
        assert_eq!(records.len() as u64, expected, "one update per word");
    }
}

/// Writes `(value, timestamp_ms)` records to one partition of `topic`.
pub fn produce_at(broker: &str, topic: &str, partition: i32, records: &[(&str, i64)]) {
    let producer: Checked = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create_with_context(Deliveries::default())
        .expect("producer");
    for (value, ts) in records {
        producer
            .send(
                BaseRecord::<(), str>::to(topic)
                    .payload(*value)
                    .partition(partition)
                    .timestamp(*ts),
            )
            .map_err(|(e, _)| e)
            .expect("queued");
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every record delivered");
    producer.context().assert_delivered(topic);
}

/// Runs of the `floe` binary.
use std::io::BufRead;
use std::process::{Command, Output, Stdio};

pub const WATCHDOG: Duration = Duration::from_secs(300);

pub fn floe(args: &[String]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
    command
        .args(args)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Runs floe to its end (killed and failed after the watchdog).
pub fn run(args: &[String]) -> Output {
    let child = floe(args).spawn().expect("floe runs");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(out) => out.expect("floe output"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("floe {args:?} still running after {WATCHDOG:?}");
        }
    }
}

pub fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Runs floe until a status line reports `checkpoints` completed
/// checkpoints, then kills it with SIGKILL. `false`: the run ended first.
pub fn kill_after_checkpoints(args: &[String], checkpoints: u64) -> bool {
    let mut args = args.to_vec();
    args.extend(["--status-interval".into(), "20".into()]);
    let mut child = floe(&args).spawn().expect("floe runs");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut reached = false;
    let mut seen = String::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        let done = field(&line, "checkpoints").and_then(|v| v.parse::<u64>().ok());
        if line.starts_with("status ") && done.is_some_and(|n| n >= checkpoints) {
            reached = true;
            break;
        }
    }
    let _ = Command::new("kill")
        .arg("-9")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().expect("floe exits");
    if !reached {
        assert!(status.success(), "floe {args:?} failed:\n{seen}");
    }
    reached
}

/// The last stable offset of `partition` (what a `read_committed` reader
/// can read up to: the first offset of the oldest open transaction, else
/// the end) and its high watermark (the end).
pub fn stable_and_end(broker: &str, topic: &str, partition: i32) -> (i64, i64) {
    let ends = ["read_committed", "read_uncommitted"].map(|isolation| {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", broker)
            .set("isolation.level", isolation)
            .create()
            .expect("consumer");
        consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .expect("watermarks")
            .1
    });
    (ends[0], ends[1])
}

/// How long [`read_all`] waits for the transactions open at its call to
/// end.
const SETTLE: Duration = Duration::from_secs(10);

/// Waits, at most `within`, until the transactions open in `partition` at
/// the call have ended (their markers written: the last stable offset has
/// reached the end seen at the call); the last stable offset and the end
/// then. A writer that finished leaves none open once its last commit's
/// markers are in, a few milliseconds after its commit returned.
pub fn settled(broker: &str, topic: &str, partition: i32, within: Duration) -> (i64, i64) {
    let deadline = std::time::Instant::now() + within;
    let (mut stable, end) = stable_and_end(broker, topic, partition);
    let mut pause = Duration::from_millis(1);
    while stable < end && std::time::Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
        stable = stable_and_end(broker, topic, partition).0;
    }
    (stable, stable_and_end(broker, topic, partition).1)
}

/// Runs one of Apache Kafka's command-line tools (`class`, e.g.
/// `org.apache.kafka.tools.consumer.group.ConsumerGroupCommand`) from the
/// classpath `scripts/services.sh` installed (`FLOE_TEST_KAFKA_CLASSPATH`);
/// its standard output. Fails the test when the tool fails.
pub fn kafka_tool(class: &str, args: &[&str]) -> String {
    let classpath = lookup("FLOE_TEST_KAFKA_CLASSPATH")
        .expect("FLOE_TEST_KAFKA_CLASSPATH is set by scripts/services.sh start");
    let out = Command::new("java")
        .args(["-Xmx256m", "-cp", classpath.trim_matches('\'')])
        .arg(class)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("java runs");
    assert!(
        out.status.success(),
        "{class} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
