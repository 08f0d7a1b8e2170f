//! A job's teardown: its arbiters stopped and joined, within a deadline,
//! off the supervisor's arbiter.
//!
//! The job's result is reported once every thread of the job has ended, so
//! that the files and databases its subtasks held are released by then.
//! But a subtask's teardown can block (a client library waiting for a
//! server that is gone), and `Arbiter::join` has no deadline: joined on the
//! supervisor's own arbiter, one stuck thread would freeze the job — no
//! failure, no restart, no error line. So the joins run on a thread of
//! their own, each arbiter joined by a helper thread, and the teardown
//! waits for them at most [`TEARDOWN_DEADLINE`]; past it, it says in one
//! line which threads are stuck and reports the job's result all the same
//! (the stuck threads are left behind).

use actix::{Arbiter, ArbiterHandle};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a job's threads get to stop once the job has ended.
pub const TEARDOWN_DEADLINE: Duration = Duration::from_secs(30);

/// What ends with a job: its threads, then the report of its result.
pub(super) struct Teardown {
    /// The job's name, for the log.
    pub job: String,
    /// The subtasks' arbiters, joined first.
    pub arbiters: Vec<Arbiter>,
    /// Joined after them (the checkpoint coordinator's).
    pub last: Option<Arbiter>,
    /// How long the joins may take, together.
    pub deadline: Duration,
    /// Reports the job's result; called once the threads ended or the
    /// deadline passed.
    pub report: Box<dyn FnOnce() + Send>,
    /// The supervisor's own arbiter, stopped after the report.
    pub own: Option<ArbiterHandle>,
}

impl Teardown {
    /// Runs the teardown on a thread of its own (inline when no thread can
    /// be had), so the caller's arbiter never waits for it.
    pub fn start(self) {
        let (tx, rx) = mpsc::channel::<Teardown>();
        let spawned = std::thread::Builder::new()
            .name("job-teardown".into())
            .spawn(move || {
                if let Ok(t) = rx.recv() {
                    t.run();
                }
            });
        match spawned {
            Ok(_) => {
                if let Err(mpsc::SendError(t)) = tx.send(self) {
                    t.run();
                }
            }
            Err(e) => {
                tracing::warn!(job = %self.job, error = %e, "no thread for the job's teardown: inline");
                self.run();
            }
        }
    }

    fn run(self) {
        let until = Instant::now() + self.deadline;
        for a in &self.arbiters {
            a.stop();
        }
        let total = self.arbiters.len() + usize::from(self.last.is_some());
        let mut stuck = join_until(self.arbiters, until);
        // The coordinator's thread after the subtasks' (their last snapshot
        // writes reach it first), unless some of theirs are stuck: it is
        // then stopped without waiting.
        if let Some(last) = self.last {
            last.stop();
            if stuck == 0 {
                stuck = join_until(vec![last], until);
            }
        }
        if stuck > 0 {
            tracing::warn!(
                target: "floe::recovery",
                job = %self.job,
                "job {}: {stuck} of its {total} threads did not stop within {} s of its end \
                 (a subtask's teardown is stuck); its result is reported without them",
                self.job,
                self.deadline.as_secs_f64()
            );
        }
        (self.report)();
        if let Some(own) = self.own {
            own.stop();
        }
    }
}

/// Joins `arbiters`, each on a helper thread, until `until`; how many had
/// not ended by then.
fn join_until(arbiters: Vec<Arbiter>, until: Instant) -> usize {
    let (joined_tx, joined) = mpsc::channel::<()>();
    let mut waiting = 0;
    for a in arbiters {
        let tx = joined_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("job-join".into())
            .spawn(move || {
                let _ = a.join();
                let _ = tx.send(());
            });
        match spawned {
            Ok(_) => waiting += 1,
            Err(e) => tracing::warn!(error = %e, "no thread to join an arbiter on: not joined"),
        }
    }
    while waiting > 0 {
        let left = until.saturating_duration_since(Instant::now());
        match joined.recv_timeout(left) {
            Ok(()) => waiting -= 1,
            Err(_) => break,
        }
    }
    waiting
}
