//! `execute` and `execute_async` do not depend on what the calling thread
//! ran before or runs now.
//!
//! The bug: `floe bench mailbox` ran a raw actix `System` on the main thread,
//! then `env.execute()` on the same thread panicked with "`spawn_local`
//! called from outside of a `task::LocalSet`". The system's thread-locals
//! outlive it, so `System::try_current()` still named the ended system and
//! the job tried to join it. And `execute()` inside a running system's
//! `block_on` joined that system, then blocked its only arbiter waiting for
//! the job it had just spawned there: a deadlock.
//!
//! Each case runs on a thread of its own, so a hang fails the test after
//! [`LIMIT`] instead of stalling the suite; every result is compared with a
//! sum computed without floe.

use floe::StreamExecutionEnvironment;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Generous bound for a job of a few thousand records: reaching it means
/// the job hung, not that the machine is slow.
const LIMIT: Duration = Duration::from_secs(120);

const N: i64 = 5_000;

/// The oracle: the sum of `x * 2` over `1..=N`.
fn oracle() -> i64 {
    (1..=N).map(|x| x * 2).sum()
}

/// A small job; returns the environment and its collected output.
fn job() -> (
    StreamExecutionEnvironment,
    floe::connectors::collect::Collected<i64>,
) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let out = env.generate_sequence(1, N).map(|x| x * 2).collect();
    (env, out)
}

/// Runs `case` on a new thread; fails if it does not return within [`LIMIT`].
fn on_own_thread<R: Send + 'static>(what: &str, case: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(case());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(sum) => sum,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no result within {LIMIT:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the case panicked"),
    }
}

/// Runs and ends an actix system on the calling thread, as a program that
/// used actix before floe does.
fn run_a_system_first() {
    actix::System::new().block_on(async {
        let arbiter = actix::Arbiter::new();
        arbiter.stop();
    });
}

#[test]
fn execute_after_a_system_ended_on_the_same_thread() {
    let sum = on_own_thread("execute", || {
        run_a_system_first();
        let (env, out) = job();
        env.execute().expect("the job runs");
        out.take().iter().sum::<i64>()
    });
    assert_eq!(sum, oracle());
}

#[test]
fn execute_async_after_a_system_ended_on_the_same_thread() {
    let sum = on_own_thread("execute_async", || {
        run_a_system_first();
        let (env, out) = job();
        let handle = env.execute_async().expect("the job starts");
        futures::executor::block_on(handle.wait()).expect("the job runs");
        out.take().iter().sum::<i64>()
    });
    assert_eq!(sum, oracle());
}

#[test]
fn execute_async_in_a_tokio_runtime_after_a_system_ended() {
    let sum = on_own_thread("execute_async in tokio", || {
        run_a_system_first();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let (env, out) = job();
            let handle = env.execute_async().expect("the job starts");
            handle.wait().await.expect("the job runs");
            out.take().iter().sum::<i64>()
        })
    });
    assert_eq!(sum, oracle());
}

#[test]
fn execute_inside_a_running_system_does_not_deadlock() {
    let sum = on_own_thread("execute in block_on", || {
        actix::System::new().block_on(async {
            let (env, out) = job();
            env.execute().expect("the job runs");
            out.take().iter().sum::<i64>()
        })
    });
    assert_eq!(sum, oracle());
}

#[test]
fn execute_async_inside_a_running_system_joins_it() {
    let (sum, system, threads) = on_own_thread("execute_async in block_on", || {
        actix::System::new().block_on(async {
            let system = actix::System::current().id();
            let env = StreamExecutionEnvironment::new();
            env.set_parallelism(2);
            // Where the map runs: arbiter threads are named after their system.
            let threads = Arc::new(Mutex::new(HashSet::new()));
            let seen = threads.clone();
            let out = env
                .generate_sequence(1, N)
                .map(move |x| {
                    let name = std::thread::current().name().unwrap_or("").to_string();
                    seen.lock().unwrap().insert(name);
                    x * 2
                })
                .collect();
            let handle = env.execute_async().expect("the job starts");
            handle.wait().await.expect("the job runs");
            let threads = threads.lock().unwrap().clone();
            (out.take().iter().sum::<i64>(), system, threads)
        })
    });
    assert_eq!(sum, oracle());
    let mark = format!("system:{system}|");
    assert!(
        !threads.is_empty() && threads.iter().all(|t| t.contains(&mark)),
        "the job should run on arbiters of the caller's system {system}: {threads:?}"
    );
}
