//! Jobs on a shared [`ArbiterPool`] start no threads of their own; without
//! one each job starts its arbiters, a coordinator thread, a supervisor
//! thread and (off an arbiter) an actix system thread.
//!
//! One test function: the thread counts read `/proc/self/task`, which
//! other tests of this binary running alongside would disturb.

mod gated;
use floe::runtime::ArbiterPool;
use floe::{JobHandle, JobStatus, StreamExecutionEnvironment};
use gated::wait_until;

#[cfg(target_os = "linux")]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// Waits until `job` is deployed and running (its threads started):
/// `execute_async` returns before that.
fn running(job: &JobHandle) {
    wait_until("the job running", || job.status() == JobStatus::Running);
}

/// A job that runs until it is canceled (a throttled endless source whose
/// records are dropped).
fn endless(env: &StreamExecutionEnvironment) {
    env.from_generator_rate_limited(u64::MAX, 100.0, |i| i)
        .filter(|_| false)
        .collect();
}

const ARBITERS: usize = 2;

#[cfg(target_os = "linux")]
#[test]
fn jobs_share_a_pool_of_arbiter_threads() {
    // Without a pool.
    let before = threads();
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_arbiters(ARBITERS);
    endless(&env);
    let own = env.execute_async().expect("the job starts");
    running(&own);
    let own_threads = threads() - before;
    own.cancel();
    let _ = futures::executor::block_on(own.wait());
    // The result is out before the job's teardown thread has joined its
    // arbiters: count from when they are gone.
    wait_until("the first job's threads to end", || threads() <= before);

    // Three jobs on one pool.
    let pool = ArbiterPool::new(ARBITERS).expect("a pool");
    let base = threads();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let env = StreamExecutionEnvironment::new();
            env.set_parallelism(2).set_arbiter_pool(&pool);
            endless(&env);
            env.execute_async().expect("the job starts")
        })
        .collect();
    handles.iter().for_each(running);
    let pooled_threads = threads() - base;
    eprintln!(
        "threads per job: {own_threads} of its own; {pooled_threads} for 3 jobs on a pool of \
         {} threads (+1 system thread)",
        pool.threads()
    );
    // Its arbiters, the coordinator's, the supervisor's, the job's system.
    assert_eq!(own_threads, ARBITERS + 3);
    assert_eq!(pooled_threads, 0);
    for h in &handles {
        h.cancel();
    }
    for h in handles {
        assert!(futures::executor::block_on(h.wait()).is_err(), "canceled");
    }

    // A bounded job on the pool computes what it computes alone.
    let run = |pool: Option<&ArbiterPool>| {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(2);
        if let Some(pool) = pool {
            env.set_arbiter_pool(pool);
        }
        let out = env
            .generate_sequence(1, 5000)
            .map(|x| (x % 7, x))
            .key_by_field(|t| &t.0)
            .sum(|t| &mut t.1)
            .collect();
        env.execute().expect("the job finishes");
        let mut finals = std::collections::BTreeMap::new();
        for (k, s) in out.take() {
            let e = finals.entry(k).or_insert(0);
            *e = s.max(*e);
        }
        finals
    };
    assert_eq!(run(Some(&pool)), run(None));
}
