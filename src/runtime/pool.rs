//! A pool of arbiter threads that several jobs share.
//!
//! Without a pool each job starts threads of its own: an actix system thread
//! (when started off an arbiter), `RuntimeConfig::arbiters` subtask threads,
//! one for its checkpoint coordinator and one for its supervisor, all
//! stopped when it ends. A service that runs many small jobs creates one
//! [`ArbiterPool`] instead and passes it to each job
//! ([`StreamExecutionEnvironment::set_arbiter_pool`]
//! (crate::StreamExecutionEnvironment::set_arbiter_pool)): the jobs' managers,
//! coordinators and supervisors run on the pool's system thread, their
//! subtasks on its arbiters, and a job starts no thread at all.

use crate::{Error, Result};
use actix::{Arbiter, ArbiterHandle, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Arbiter threads shared by every job started with it. Cloning is cheap
/// (every clone is the same pool).
///
/// The pool runs until its last clone is dropped; each job started on it
/// holds a clone until it ends. A job on a pool reports its result when its
/// subtasks stopped; the threads they ran on live on for the next job.
///
/// # Examples
/// ```
/// use floe::StreamExecutionEnvironment;
/// use floe::runtime::ArbiterPool;
///
/// let pool = ArbiterPool::new(2).unwrap();
/// for n in 1..=3i64 {
///     let env = StreamExecutionEnvironment::new();
///     env.set_parallelism(2).set_arbiter_pool(&pool);
///     let out = env.generate_sequence(1, n * 100).collect();
///     env.execute().unwrap();
///     assert_eq!(out.take().len() as i64, n * 100);
/// }
/// ```
#[derive(Clone)]
pub struct ArbiterPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    system: System,
    /// The system thread's arbiter: the jobs' managers, coordinators and
    /// supervisors.
    home: ArbiterHandle,
    /// The subtasks' arbiters.
    workers: Vec<Arbiter>,
    /// Where the next job's subtask 0 goes, so that jobs of parallelism 1
    /// do not all share the first thread.
    next: AtomicUsize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for ArbiterPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArbiterPool")
            .field("threads", &self.threads())
            .finish()
    }
}

impl ArbiterPool {
    /// A pool of `threads` subtask arbiters (at least one) plus one thread
    /// for its actix system.
    pub fn new(threads: usize) -> Result<Self> {
        if threads == 0 {
            return Err(Error::Config(
                "an arbiter pool needs at least one thread".into(),
            ));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("floe-pool".into())
            .spawn(move || {
                let runner = System::new();
                runner.block_on(async move {
                    let workers: Vec<Arbiter> = (0..threads).map(|_| Arbiter::new()).collect();
                    let _ = tx.send((System::current(), Arbiter::current(), workers));
                });
                // Until the pool is dropped: `System::stop`.
                let _ = runner.run();
            })
            .map_err(|e| Error::Runtime(floe_actors::Error::Runtime(e.to_string())))?;
        let (system, home, workers) = rx.recv().map_err(|_| {
            Error::Runtime(floe_actors::Error::Runtime(
                "the arbiter pool's thread died".into(),
            ))
        })?;
        Ok(ArbiterPool {
            inner: Arc::new(PoolInner {
                system,
                home,
                workers,
                next: AtomicUsize::new(0),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// Number of subtask arbiters.
    pub fn threads(&self) -> usize {
        self.inner.workers.len()
    }

    /// The arbiter of the pool's actix system: job managers, coordinators,
    /// supervisors.
    pub(crate) fn home(&self) -> ArbiterHandle {
        self.inner.home.clone()
    }

    /// The subtask arbiters for one attempt, starting at a different one for
    /// each attempt.
    pub(crate) fn workers(&self) -> Vec<ArbiterHandle> {
        let n = self.inner.workers.len();
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| self.inner.workers[(start + i) % n].handle())
            .collect()
    }

    /// Whether the calling thread is the pool's system thread.
    pub(crate) fn on_home(&self) -> bool {
        System::try_current().is_some_and(|s| s.id() == self.inner.system.id())
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        for a in &self.workers {
            a.stop();
        }
        self.system.stop();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        // Dropped on its own thread (the last clone held by a job's future):
        // stopping is enough, the thread ends after this.
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}
