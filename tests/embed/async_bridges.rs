//! The async bridges (a `futures::Stream` source, a bounded tokio channel
//! source and sink) in whole jobs, against oracles computed from the input:
//!
//! - a stream source → keyed count → channel sink delivers the final count
//!   of every key, equal to a `HashMap` count of the input;
//! - a slow reader of the channel sink holds the job back: at every record
//!   it takes, the records the job accepted and not yet delivered stay
//!   within the channel's capacity plus the sink's queue and batches (no
//!   unbounded buffering);
//! - a stream source (no position) with checkpoints and an injected failure
//!   delivers every record at least once (the set of records equals the
//!   input's);
//! - a channel source feeds a job as a service would, and the job's
//!   backpressure reaches the sender.

use crate::gated;
use floe::CheckpointId;
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use floe::connectors::async_sink::DEFAULT_CAPACITY;
use floe::failover::{Fault, FaultInjection, FaultPoint, RestartStrategy};
use gated::wait_until;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const END: u64 = u64::MAX;

/// Reads `rx` on a thread until the `END` sentinel; returns what it read.
fn reader<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
    is_end: fn(&T) -> bool,
    mut each: impl FnMut(&T) + Send + 'static,
) -> std::thread::JoinHandle<Vec<T>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while let Some(v) = rx.blocking_recv() {
            if is_end(&v) {
                break;
            }
            each(&v);
            out.push(v);
        }
        out
    })
}

fn key(i: u64) -> u64 {
    floe::text::mix64(i) % 97
}

#[test]
fn stream_source_keyed_count_channel_sink_equals_the_oracle() {
    const N: u64 = 30_000;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let (tx, rx) = tokio::sync::mpsc::channel::<(u64, u64)>(16);
    let read = reader(rx, |v| v.0 == END, |_| {});
    let counts = env
        .from_stream("numbers", || {
            futures::stream::iter((0..N).map(|i| (key(i), 1u64)))
        })
        .key_by(|t: &(u64, u64)| t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1);
    counts.to_channel("channel", tx.clone());
    env.execute().expect("the job finishes");
    tx.blocking_send((END, 0)).expect("the reader runs");
    let got = read.join().expect("reader");
    // Per key the counts arrive in order: the last one is the total.
    let mut last: HashMap<u64, u64> = HashMap::new();
    for (k, c) in &got {
        last.insert(*k, *c);
    }
    let mut oracle: HashMap<u64, u64> = HashMap::new();
    for i in 0..N {
        *oracle.entry(key(i)).or_insert(0) += 1;
    }
    assert_eq!(last, oracle);
    assert_eq!(got.len() as u64, N, "one update per record");
}

#[test]
fn a_slow_channel_reader_bounds_what_the_job_holds() {
    const N: u64 = 200_000;
    const CAP: usize = 8;
    const BATCH: usize = 64;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    env.set_batch_size(BATCH);
    let accepted = Arc::new(AtomicU64::new(0));
    let (tx, rx) = tokio::sync::mpsc::channel::<u64>(CAP);
    let probe = tx.clone();
    let seen = accepted.clone();
    // The job's records: the one being sent, the batches queued for the
    // sink, the batch the chain holds, and the channel's slots.
    let bound = (CAP + (DEFAULT_CAPACITY + 2) * BATCH) as u64;
    let mut received = 0u64;
    let mut worst = 0u64;
    let read = std::thread::spawn(move || {
        // Starts reading only once the channel is full: the job has run
        // into the slow reader.
        wait_until("a full channel", || probe.capacity() == 0);
        let mut rx = rx;
        while let Some(v) = rx.blocking_recv() {
            if v == END {
                break;
            }
            received += 1;
            let held = seen.load(Ordering::SeqCst) - received;
            worst = worst.max(held);
            assert!(
                held <= bound,
                "{held} records accepted and not delivered (bound {bound})"
            );
        }
        (received, worst)
    });
    let counter = accepted.clone();
    let stream = env
        .from_stream("numbers", || futures::stream::iter(0..N))
        .map(move |v| {
            counter.fetch_add(1, Ordering::SeqCst);
            v
        });
    stream.to_channel("channel", tx.clone());
    env.execute().expect("the job finishes");
    tx.blocking_send(END).expect("the reader runs");
    let (received, worst) = read.join().expect("the bound held");
    assert_eq!(received, N);
    assert!(worst > 0, "the reader saw the job ahead of it");
}

#[test]
fn a_stream_source_with_a_failure_is_at_least_once() {
    const N: u64 = 20_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let mut config = env.config();
    config.checkpoint =
        CheckpointConfig::every(Duration::from_millis(10)).with_dir(dir.path().join("ck"));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    // Each subtask stops half-way until checkpoint 2 completed, so the
    // restored positions are in the middle of the input, and ends only
    // after the restart, so checkpoint 3 (and its fault) comes before the
    // end: however fast or slow the machine.
    let gates = Arc::new(Gates {
        middle_after: CheckpointId(2),
        middle: Gate::default(),
        end: Gate::default(),
    });
    let config = config.with_observer(gates.clone());
    let config = config.with_fault_injector(std::sync::Arc::new(FaultInjection {
        faults: vec![Fault {
            operator: "tag".into(),
            subtask: 1,
            at: FaultPoint::Records(N / 4),
        }],
        ..Default::default()
    }));
    env.set_config(config);
    let (tx, rx) = tokio::sync::mpsc::channel::<u64>(64);
    let read = reader(rx, |v| *v == END, |_| {});
    let tagged = env
        .from_stream("numbers", || futures::stream::iter(0..N))
        .rebalance()
        .map(|v| v)
        .name("tag");
    tagged.to_channel("channel", tx.clone());
    let handle = env.execute_async().expect("starts");
    futures::executor::block_on(handle.wait()).expect("the job recovers and finishes");
    assert_eq!(handle.failover_stats().restarts, 1, "the fault fired once");
    tx.blocking_send(END).expect("the reader runs");
    let got = read.join().expect("reader");
    let set: BTreeSet<u64> = got.iter().copied().collect();
    assert_eq!(
        set,
        (0..N).collect::<BTreeSet<u64>>(),
        "every record at least once"
    );
}

#[test]
fn a_channel_source_feeds_a_job_and_backpressures_its_sender() {
    const N: u64 = 50_000;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let (in_tx, in_rx) = tokio::sync::mpsc::channel::<u64>(4);
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<u64>(4);
    let read = reader(out_rx, |v| *v == END, |_| {});
    let doubled = env
        .from_channel("requests", in_rx)
        .rebalance()
        .map(|v: u64| v * 2);
    doubled.to_channel("responses", out_tx.clone());
    let handle = env.execute_async().expect("starts");
    for i in 0..N {
        // Waits while the job is behind.
        in_tx.blocking_send(i).expect("the job reads");
    }
    drop(in_tx);
    futures::executor::block_on(handle.wait()).expect("finishes when the senders are gone");
    out_tx.blocking_send(END).expect("the reader runs");
    let mut got = read.join().expect("reader");
    got.sort_unstable();
    assert_eq!(got, (0..N).map(|i| i * 2).collect::<Vec<_>>());
}

/// Counts through its slice of `0..count`, awaiting between batches (the
/// subtask is woken, not polled); its position `(next, end)` goes into the
/// checkpoint.
struct Counter {
    next: u64,
    end: u64,
    /// When set, the counter stops at the first position and waits for the
    /// first gate, and does not finish before the second opens: a test that
    /// needs checkpoints in the middle of the input waits for them instead
    /// of hoping the input lasts long enough.
    gates: Option<(u64, Arc<Gates>)>,
}

/// Opened once (by a job observer); a source awaiting it is parked, not
/// polling.
#[derive(Default)]
struct Gate {
    open: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Gate {
    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Cancel-safe: the `Notified` future, made before the flag is read,
    /// catches an `open` that comes after the read.
    async fn opened(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_open() {
                return;
            }
            notified.await;
        }
    }
}

/// The gates of a gated [`Counter`]: `middle` opens when checkpoint
/// `middle_after` completed, `end` when the job restarts.
struct Gates {
    middle_after: CheckpointId,
    middle: Gate,
    end: Gate,
}

impl floe::failover::JobObserver for Gates {
    fn checkpoint_completed(&self, id: CheckpointId) {
        if id >= self.middle_after {
            self.middle.open();
        }
    }

    fn restarted(&self, _attempt: u64, _restored: Option<CheckpointId>) {
        self.end.open();
    }
}

impl floe::connectors::async_source::AsyncSource<u64> for Counter {
    async fn next_batch(
        &mut self,
        max: usize,
        out: &mut Vec<floe::Record<u64>>,
    ) -> floe::Result<floe::connectors::SourcePoll> {
        // Pending once: the wake-up, not a timer, brings the subtask back.
        tokio::task::yield_now().await;
        // A gate is awaited before anything is taken, so a future dropped
        // for a checkpoint loses nothing.
        let mut limit = self.end;
        if let Some((middle, gates)) = &self.gates {
            if self.next == *middle {
                gates.middle.opened().await;
            } else if self.next < *middle && !gates.middle.is_open() {
                limit = *middle;
            }
            if self.next == self.end {
                gates.end.opened().await;
            }
        }
        while out.len() < max && self.next < limit {
            out.push(floe::Record::new(self.next));
            self.next += 1;
        }
        let gated = self.gates.as_ref().is_some_and(|(_, g)| !g.end.is_open());
        Ok(if self.next == self.end && !gated {
            floe::connectors::SourcePoll::Finished
        } else {
            floe::connectors::SourcePoll::Ready
        })
    }

    fn snapshot_position(&mut self) -> floe::Result<Vec<Vec<u8>>> {
        Ok(vec![
            postcard::to_allocvec(&(self.next, self.end)).expect("encode"),
        ])
    }

    fn restore_position(&mut self, entries: Vec<Vec<u8>>) -> floe::Result<()> {
        (self.next, self.end) = match entries.first() {
            Some(e) => postcard::from_bytes(e).expect("decode"),
            None => (0, 0),
        };
        Ok(())
    }
}

#[test]
fn an_async_source_with_a_position_is_exactly_once_across_a_failure() {
    const N: u64 = 20_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let mut config = env.config();
    config.checkpoint =
        CheckpointConfig::every(Duration::from_millis(10)).with_dir(dir.path().join("ck"));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::ZERO,
    });
    // Each subtask stops half-way until checkpoint 2 completed, so the
    // restored positions are in the middle of the input, and ends only
    // after the restart, so checkpoint 3 (and its fault) comes before the
    // end: however fast or slow the machine.
    let gates = Arc::new(Gates {
        middle_after: CheckpointId(2),
        middle: Gate::default(),
        end: Gate::default(),
    });
    let config = config.with_observer(gates.clone());
    let config = config.with_fault_injector(std::sync::Arc::new(FaultInjection {
        // After checkpoints 1 and 2 completed (one at a time): the job
        // restores checkpoint 2, whose positions skip what it committed.
        faults: vec![Fault {
            operator: "tag".into(),
            subtask: 0,
            at: FaultPoint::Checkpoint(CheckpointId(3)),
        }],
        ..Default::default()
    }));
    env.set_config(config);
    let out = dir.path().join("out.txt");
    env.add_async_source("counter", move |ctx| {
        let (next, end) = ctx.split(N);
        Ok(Counter {
            next,
            end,
            gates: Some((next + (end - next) / 2, gates.clone())),
        })
    })
    .rebalance()
    .map(|v: u64| v.to_string())
    .name("tag")
    .sink_exactly_once(
        "TransactionalFileSink",
        floe::connectors::transactional_file::TransactionalFileSink::new(&out).expect("sink"),
    );
    let handle = env.execute_async().expect("starts");
    futures::executor::block_on(handle.wait()).expect("the job recovers and finishes");
    assert_eq!(handle.failover_stats().restarts, 1, "the fault fired once");
    let mut got: Vec<u64> = std::fs::read_to_string(&out)
        .expect("output")
        .lines()
        .map(|l| l.parse().expect("a number"))
        .collect();
    got.sort_unstable();
    let mut seen = BTreeSet::new();
    let duplicated: Vec<u64> = got.iter().copied().filter(|v| !seen.insert(*v)).collect();
    let missing: Vec<u64> = (0..N).filter(|v| !seen.contains(v)).collect();
    assert!(
        duplicated.is_empty() && missing.is_empty(),
        "every record exactly once: {} records, {} duplicated (first {:?}), {} missing (first {:?})",
        got.len(),
        duplicated.len(),
        duplicated.first(),
        missing.len(),
        missing.first()
    );
}
