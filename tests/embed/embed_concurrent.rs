//! Embedding floe: jobs started with `execute_async`, inside an actix system
//! and from plain threads.
//!
//! - Two jobs run concurrently in one `actix::System` (the first cannot finish
//!   unless the second runs at the same time) and both results match oracles.
//! - `cancel()` on a long rate-limited job (after its first record arrived, and
//!   right after the start) makes `wait()` return the cancellation error and
//!   `status()` become `JobStatus::Canceled`, inside a system and from a plain
//!   thread.
//! - `execute_async` from plain threads (each job gets its own system),
//!   waited on with `futures::executor::block_on`, several at once; a handle
//!   can be waited on twice and from clones on other threads, and canceling a
//!   finished job changes nothing.

use floe::operators::sink::SinkFunction;
use floe::{JobHandle, JobStatus, Record, StreamExecutionEnvironment};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

const JOB_LIMIT: Duration = Duration::from_secs(60);

/// Cancels the given jobs if they are still running after [`JOB_LIMIT`]
/// (so a hang fails the test), and aborts if that does not end them.
struct Watchdog {
    done: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn new(handles: Vec<JobHandle>) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(JOB_LIMIT) {
                eprintln!("jobs did not end within {JOB_LIMIT:?}; canceling them");
                for h in &handles {
                    h.cancel();
                }
                if let Err(mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_secs(10))
                {
                    std::process::abort();
                }
            }
        });
        Watchdog {
            done: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A canceled job's `wait` error: its own variant, not a failure.
fn is_canceled(e: &floe::Error) -> bool {
    matches!(e, floe::Error::Canceled)
}

/// A one-shot flag a job can wait on (with a limit) and another can raise.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_all();
    }

    /// True if the gate opened within `limit`.
    fn wait(&self, limit: Duration) -> bool {
        let guard = self.0.0.lock().unwrap();
        let (guard, _) = self
            .0
            .1
            .wait_timeout_while(guard, limit, |open| !*open)
            .unwrap();
        *guard
    }
}

/// Opens a gate when its first batch arrives and counts what it receives.
#[derive(Clone)]
struct SignalSink {
    first: Gate,
    async_first: futures::channel::mpsc::UnboundedSender<()>,
    received: Arc<Mutex<u64>>,
}

impl SignalSink {
    fn new() -> (SignalSink, futures::channel::mpsc::UnboundedReceiver<()>) {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        (
            SignalSink {
                first: Gate::default(),
                async_first: tx,
                received: Arc::new(Mutex::new(0)),
            },
            rx,
        )
    }
}

impl SinkFunction<u64> for SignalSink {
    async fn write(&mut self, batch: Vec<Record<u64>>) -> floe::Result<()> {
        *self.received.lock().unwrap() += batch.len() as u64;
        self.first.open();
        let _ = self.async_first.unbounded_send(());
        Ok(())
    }
}

/// Job A: word-like keys counted with a keyed sum. Returns the final counts.
fn word_count_job(
    env: &StreamExecutionEnvironment,
    n: u64,
    gate: Option<Gate>,
) -> floe::connectors::collect::Collected<(u64, u64)> {
    let mut passed = false;
    env.from_generator(n, |i| (i * 2_654_435_761) % 97)
        .map(move |k| {
            if let Some(g) = &gate
                && !passed
            {
                assert!(
                    g.wait(Duration::from_secs(30)),
                    "the other job never delivered a record: jobs did not run concurrently"
                );
                passed = true;
            }
            (k, 1u64)
        })
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .collect()
}

fn word_count_oracle(n: u64) -> HashMap<u64, u64> {
    let mut m = HashMap::new();
    for i in 0..n {
        *m.entry((i * 2_654_435_761) % 97).or_insert(0) += 1;
    }
    m
}

fn finals(pairs: Vec<(u64, u64)>) -> HashMap<u64, u64> {
    let mut m = HashMap::new();
    for (k, c) in pairs {
        m.insert(k, c); // the last update per key is its final count
    }
    m
}

#[test]
fn two_jobs_run_concurrently_in_one_actix_system() {
    const N: u64 = 50_000;
    actix::System::new().block_on(async {
        let gate_b = Gate::default();

        // Job A cannot get past its first record until job B delivers one.
        let env_a = StreamExecutionEnvironment::new();
        env_a.set_parallelism(2).set_arbiters(2);
        let counts = word_count_job(&env_a, N, Some(gate_b.clone()));

        let env_b = StreamExecutionEnvironment::new();
        env_b.set_parallelism(3).set_arbiters(2);
        let (sink, _) = SignalSink::new();
        let gate_sink = SignalSink {
            first: gate_b,
            ..sink
        };
        let b_out = env_b
            .from_collection((0..N).collect::<Vec<u64>>())
            .filter(|x| x % 3 == 0)
            .map(|x| x * x)
            .collect();
        env_b
            .generate_sequence(0, 999)
            .map(|x| x as u64)
            .sink("SignalSink", gate_sink.clone());

        let h_a = env_a.execute_async().expect("job A starts");
        let h_b = env_b.execute_async().expect("job B starts");
        let _watchdog = Watchdog::new(vec![h_a.clone(), h_b.clone()]);
        let (r_a, r_b) = futures::future::join(h_a.wait(), h_b.wait()).await;
        r_a.unwrap_or_else(|e| panic!("job A failed: {e}"));
        r_b.unwrap_or_else(|e| panic!("job B failed: {e}"));
        assert_eq!(h_a.status(), JobStatus::Finished);
        assert_eq!(h_b.status(), JobStatus::Finished);

        assert_eq!(finals(counts.take()), word_count_oracle(N));
        let mut got = b_out.take();
        got.sort_unstable();
        let want: Vec<u64> = (0..N).filter(|x| x % 3 == 0).map(|x| x * x).collect();
        assert_eq!(got, want);
        assert_eq!(*gate_sink.received.lock().unwrap(), 1000);
    });
}

fn endless_env() -> (
    StreamExecutionEnvironment,
    SignalSink,
    futures::channel::mpsc::UnboundedReceiver<()>,
) {
    // Ten million records at 1000 per second: hours, unless canceled.
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_arbiters(2);
    let (sink, rx) = SignalSink::new();
    env.from_generator_rate_limited(10_000_000, 1_000.0, |i| i)
        .rebalance()
        .sink("Sink", sink.clone());
    (env, sink, rx)
}

#[test]
fn cancel_inside_actix_system_after_first_record() {
    actix::System::new().block_on(async {
        let (env, sink, mut first) = endless_env();
        let handle = env.execute_async().expect("job starts");
        let _watchdog = Watchdog::new(vec![handle.clone()]);
        first.next().await.expect("the sink saw a first batch");
        assert!(
            !handle.status().is_terminal(),
            "running job: {:?}",
            handle.status()
        );
        handle.cancel();
        let err = handle
            .wait()
            .await
            .expect_err("a canceled job has no result");
        assert!(
            is_canceled(&err),
            "expected the cancellation error, got {err}"
        );
        assert_eq!(handle.status(), JobStatus::Canceled);
        assert!(*sink.received.lock().unwrap() < 10_000_000);
    });
}

#[test]
fn cancel_right_after_start() {
    actix::System::new().block_on(async {
        let (env, _sink, _first) = endless_env();
        let handle = env.execute_async().expect("job starts");
        let _watchdog = Watchdog::new(vec![handle.clone()]);
        handle.cancel();
        let err = handle
            .wait()
            .await
            .expect_err("a canceled job has no result");
        assert!(
            is_canceled(&err),
            "expected the cancellation error, got {err}"
        );
        assert_eq!(handle.status(), JobStatus::Canceled);
    });
}

#[test]
fn cancel_from_a_plain_thread() {
    let (env, sink, _first) = endless_env();
    let handle = env.execute_async().expect("job starts");
    let _watchdog = Watchdog::new(vec![handle.clone()]);
    assert!(
        sink.first.wait(Duration::from_secs(30)),
        "no record reached the sink"
    );
    handle.cancel();
    let err = futures::executor::block_on(handle.wait()).expect_err("canceled");
    assert!(
        is_canceled(&err),
        "expected the cancellation error, got {err}"
    );
    assert_eq!(handle.status(), JobStatus::Canceled);
}

#[test]
fn execute_async_from_plain_threads() {
    const N: u64 = 30_000;
    let want = word_count_oracle(N);
    std::thread::scope(|scope| {
        let jobs: Vec<_> = (1..=3usize)
            .map(|p| {
                scope.spawn(move || {
                    let env = StreamExecutionEnvironment::new();
                    env.set_parallelism(p).set_arbiters(2);
                    let counts = word_count_job(&env, N, None);
                    let handle = env.execute_async().expect("job starts");
                    let _watchdog = Watchdog::new(vec![handle.clone()]);
                    let result = futures::executor::block_on(handle.wait())
                        .unwrap_or_else(|e| panic!("p={p}: {e}"));
                    (p, finals(counts.take()), result)
                })
            })
            .collect();
        for j in jobs {
            let (p, got, result) = j.join().expect("job thread");
            assert_eq!(got, want, "p={p}");
            let sum = result.operator("Keyed Sum").expect("a keyed sum");
            assert_eq!(sum.records_in, N, "p={p}");
        }
    });
}

#[test]
fn a_handle_can_be_waited_on_twice_and_from_clones() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_arbiters(2);
    let out = env.generate_sequence(1, 10_000).map(|x| x * 2).collect();
    let handle = env.execute_async().expect("job starts");
    let _watchdog = Watchdog::new(vec![handle.clone()]);
    let clone = handle.clone();
    let other = std::thread::spawn(move || futures::executor::block_on(clone.wait()));
    let first = futures::executor::block_on(handle.wait()).expect("job finishes");
    let second = futures::executor::block_on(handle.wait()).expect("same result again");
    let from_clone = other.join().expect("waiter thread").expect("same result");
    assert_eq!(first, second);
    assert_eq!(first, from_clone);
    assert_eq!(handle.status(), JobStatus::Finished);
    // Counters read through the handle agree with the result.
    assert_eq!(handle.operator_metrics(), first.operators);

    // Canceling a finished job changes nothing.
    handle.cancel();
    assert_eq!(
        futures::executor::block_on(handle.wait()).expect("still ok"),
        first
    );
    assert_eq!(handle.status(), JobStatus::Finished);

    let mut got = out.take();
    got.sort_unstable();
    assert_eq!(got, (1..=10_000).map(|x| x * 2).collect::<Vec<i64>>());
}
