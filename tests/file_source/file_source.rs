//! The parallel file source end to end: files cut into small splits, read by
//! several source subtasks, checked against oracles computed here (a
//! HashMap over the input), never against the job's own output.
//!
//! - `floe run wordcount --input F` and `floe run window --input F` (periodic
//!   watermarks) at parallelism 1..4 with splits of a few hundred bytes: the
//!   word counts and window sums equal the HashMap's, `records=` is the
//!   file's lines, and no record is late (the input is out of order within
//!   the bound, and a subtask's watermark is the minimum over its unfinished
//!   splits').
//! - Exactly-once across injected failures: the word count of a file,
//!   restarted five times from its checkpoints, commits the HashMap's counts.
//! - Rescale: a job whose source subtasks hold mid-file (a gate, no timing)
//!   checkpoints, is canceled, and is restored at another parallelism; a
//!   keyed count per line must end at exactly 1 for every line of the file.

use crate::cli_common;
use cli_common::{SplitMix, count_words, parse_counts, run_ok, summary_field};
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use floe::connectors::file_source::{FileSource, FileSourceReader, Utf8Lines};
use floe::connectors::{SourceFunction, SourcePoll};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Lines of 1..6 words from a small vocabulary, some CRLF-ended.
fn text(lines: usize, seed: u64) -> String {
    let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"];
    let mut rng = SplitMix(seed);
    let mut out = String::new();
    for i in 0..lines {
        for _ in 0..1 + rng.below(6) {
            out.push_str(words[rng.below(words.len() as u64) as usize]);
            out.push(' ');
        }
        out.push_str(if i % 5 == 0 { "\r\n" } else { "\n" });
    }
    out
}

#[test]
fn wordcount_over_small_splits_matches_a_hashmap() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let text = text(3_000, 7);
    std::fs::write(&input, &text).unwrap();
    let oracle = count_words(&text);
    for (parallelism, split) in [(1, "97"), (2, "301"), (3, "64"), (4, "1000")] {
        let out = dir.path().join(format!("out-{parallelism}.txt"));
        let stderr = run_ok(&[
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--parallelism",
            &parallelism.to_string(),
            "--split-size",
            split,
            "--output",
            s(&out),
        ]);
        let got = parse_counts(&std::fs::read_to_string(&out).unwrap());
        assert_eq!(got, oracle, "P={parallelism} split={split}");
        assert_eq!(summary_field(&stderr, "records"), 3_000, "{stderr}");
    }
}

/// `key,ts,value` lines 1 ms apart, each jittered back by up to `bound`.
fn events(lines: i64, bound: i64, seed: u64) -> (String, Vec<(String, i64, i64)>) {
    let mut rng = SplitMix(seed);
    let mut text = String::new();
    let mut events = Vec::new();
    for i in 0..lines {
        let key = format!("k{}", rng.below(13));
        let ts = i - rng.below(bound as u64 + 1) as i64;
        let value = rng.below(100) as i64;
        text.push_str(&format!("{key},{ts},{value}\n"));
        events.push((key, ts, value));
    }
    (text, events)
}

#[test]
fn window_over_small_splits_matches_a_hashmap() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("ev.csv");
    let (text, events) = events(5_000, 40, 11);
    std::fs::write(&input, &text).unwrap();
    let mut oracle: BTreeMap<(String, i64, i64), i64> = BTreeMap::new();
    for (key, ts, value) in &events {
        let start = ts.div_euclid(100) * 100;
        *oracle.entry((key.clone(), start, start + 100)).or_insert(0) += value;
    }
    for (parallelism, split) in [(2, "128"), (3, "700"), (4, "50")] {
        let out = dir.path().join(format!("w-{parallelism}.txt"));
        let stderr = run_ok(&[
            "run",
            "window",
            "--input",
            s(&input),
            "--window",
            "tumbling:100",
            "--agg",
            "sum",
            "--out-of-orderness",
            "40",
            "--parallelism",
            &parallelism.to_string(),
            "--split-size",
            split,
            "--output",
            s(&out),
        ]);
        let mut got = BTreeMap::new();
        for line in std::fs::read_to_string(&out).unwrap().lines() {
            let f: Vec<&str> = line.split(',').collect();
            let n = |i: usize| f[i].parse::<i64>().unwrap();
            let old = got.insert((f[0].to_string(), n(1), n(2)), n(3));
            assert!(old.is_none(), "{line} fired twice");
        }
        assert_eq!(got, oracle, "P={parallelism} split={split}: {stderr}");
        assert_eq!(summary_field(&stderr, "late"), 0, "{stderr}");
        assert_eq!(summary_field(&stderr, "records"), 5_000, "{stderr}");
    }
}

#[test]
fn wordcount_of_a_file_survives_failures_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let text = text(20_000, 3);
    std::fs::write(&input, &text).unwrap();
    let oracle = count_words(&text);
    for (parallelism, failover) in [(2, "all"), (3, "region")] {
        let out = dir.path().join(format!("out-{parallelism}.txt"));
        let stderr = run_ok(&[
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--parallelism",
            &parallelism.to_string(),
            "--split-size",
            "4000",
            "--batch-size",
            "64",
            "--checkpoint-interval",
            "10",
            "--inject-failures",
            "5",
            "--failover",
            failover,
            "--output",
            s(&out),
        ]);
        let got = parse_counts(&std::fs::read_to_string(&out).unwrap());
        assert_eq!(got, oracle, "P={parallelism} failover={failover}: {stderr}");
    }
}

/// Shared by the gated sources of one job and the test.
#[derive(Default)]
struct Hold {
    held: Mutex<usize>,
    arrived: Condvar,
}

impl Hold {
    /// Waits (woken by each arrival) until `n` subtasks hold. The long
    /// limit only turns a hang (a bug) into a failure.
    fn wait_held(&self, n: usize) {
        let held = self.held.lock().unwrap();
        let (_held, timeout) = self
            .arrived
            .wait_timeout_while(held, Duration::from_secs(300), |h| *h < n)
            .unwrap();
        assert!(!timeout.timed_out(), "hung waiting for the sources to hold");
    }
}

/// A file source subtask that, with a `hold`, holds after `limit` lines
/// for good: the test cancels the job there.
struct Gated {
    inner: FileSourceReader<Utf8Lines>,
    limit: usize,
    emitted: usize,
    hold: Option<Arc<Hold>>,
    holding: bool,
}

impl SourceFunction<String> for Gated {
    fn poll_batch(
        &mut self,
        max: usize,
        out: &mut Vec<floe::Record<String>>,
    ) -> floe::Result<SourcePoll> {
        let Some(hold) = &self.hold else {
            return self.inner.poll_batch(max, out);
        };
        if self.emitted >= self.limit {
            if !self.holding {
                self.holding = true;
                *hold.held.lock().unwrap() += 1;
                hold.arrived.notify_all();
            }
            return Ok(SourcePoll::Wait(Duration::from_millis(1)));
        }
        let before = out.len();
        let poll = self
            .inner
            .poll_batch(max.min(self.limit - self.emitted), out)?;
        self.emitted += out.len() - before;
        Ok(poll)
    }

    fn snapshot_state(&mut self) -> floe::Result<Vec<Vec<u8>>> {
        self.inner.snapshot_state()
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> floe::Result<()> {
        self.inner.restore_state(entries)
    }
}

const LINES: usize = 4_000;
const LIMIT: usize = 300;

/// Counts each line of `input` in a keyed sum, reading with `parallelism`
/// subtasks (gated by `hold`), checkpointing into `dir`.
fn count_lines(
    input: &Path,
    dir: &Path,
    parallelism: usize,
    hold: Option<&Arc<Hold>>,
    restore: bool,
) -> (
    StreamExecutionEnvironment,
    floe::connectors::collect::Collected<(String, u64)>,
) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    env.set_batch_size(32);
    env.set_checkpoint_config(CheckpointConfig::every(Duration::from_millis(30)).with_dir(dir));
    if restore {
        env.restore_from(dir);
    }
    let source = FileSource::new(input, Utf8Lines).unwrap().split_size(512);
    let hold = hold.cloned();
    let lines = env
        .add_source("File Source", move |ctx| {
            Ok(Gated {
                inner: source.reader(ctx),
                limit: LIMIT,
                emitted: 0,
                hold: hold.clone(),
                holding: false,
            })
        })
        .uid("file-source");
    let counts = lines
        .map(|l: String| (l, 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .uid("sum")
        .collect();
    (env, counts)
}

#[test]
fn a_restore_at_another_parallelism_reads_every_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("lines.txt");
    let text: String = (0..LINES).map(|i| format!("line-{i}\n")).collect();
    std::fs::write(&input, &text).unwrap();
    for (before, after) in [(2, 3), (3, 1), (2, 2)] {
        let ck = dir.path().join(format!("ck-{before}-{after}"));
        let hold = Arc::new(Hold::default());
        let (env, _) = count_lines(&input, &ck, before, Some(&hold), false);
        let handle = env.execute_async().expect("job starts");
        hold.wait_held(before);
        // Two more checkpoints: the last was triggered once every source
        // held, so it holds exactly the lines read before the gate.
        let base = handle.checkpoint_stats().completed;
        assert!(futures::executor::block_on(
            handle.wait_for_checkpoints(base + 2)
        ));
        handle.cancel();
        let _ = futures::executor::block_on(handle.wait());

        let (env, counts) = count_lines(&input, &ck, after, None, true);
        let result = env.execute().expect("restored job finishes");
        let replayed = result.operator("Keyed Sum").unwrap().records_in;
        assert_eq!(
            replayed as usize,
            LINES - before * LIMIT,
            "{before} -> {after}: the restored job reads what the gate held back"
        );
        let got: HashMap<String, u64> = counts.take().into_iter().collect();
        let oracle: HashMap<String, u64> = text.lines().map(|l| (l.to_string(), 1)).collect();
        // Lines read before the checkpoint are in the restored sums; a line
        // read twice would count 2, a lost line would be missing.
        let mut wrong: Vec<_> = oracle
            .keys()
            .filter(|l| got.get(*l).is_some_and(|&c| c != 1))
            .collect();
        wrong.sort();
        assert!(
            wrong.is_empty(),
            "{before} -> {after}: counted twice {wrong:?}"
        );
        let read_after: usize = got.len();
        assert_eq!(
            read_after,
            LINES - before * LIMIT,
            "{before} -> {after}: the restored job emits a sum for each line it reads"
        );
    }
}

/// A file that shrinks after the job cut it into splits, in a first run,
/// fails naming the file and saying it shrank; it used to say "cannot
/// restore input file", though nothing was restored.
#[test]
fn a_file_that_shrinks_in_a_first_run_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("lines.txt");
    let text: String = (0..1000).map(|i| format!("line-{i}\n")).collect();
    std::fs::write(&input, &text).unwrap();
    let source = FileSource::new(&input, Utf8Lines).unwrap().split_size(100);
    // Shorter than the first split: every split was cut past its end.
    std::fs::write(&input, "line-0\n").unwrap();
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let _lines = env
        .add_source("File Source", move |ctx| Ok(source.reader(ctx)))
        .collect();
    let e = env.execute().expect_err("a shrunk input fails").to_string();
    assert!(
        e.contains(s(&input)) && e.contains("shrank") && !e.contains("restore"),
        "{e}"
    );
}
