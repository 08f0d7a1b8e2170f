//! Closing Kafka clients off the subtask's thread, within a deadline.
//!
//! librdkafka's close of a consumer (`rd_kafka_consumer_close`) waits for
//! its group coordinator without a deadline, and a producer's destroy
//! waits for its broker threads: run on a subtask's arbiter, either blocks
//! that thread — and the job's failure, its restart and its error line —
//! for as long as a broker stays away. So a connector never drops a client
//! itself; it hands it to [`close_in_background`], which drops it on a
//! thread of its own and says, in one warning, when the close did not end
//! within [`CLOSE_DEADLINE`] (the client is then left to finish, or not,
//! on that thread). A process about to exit waits for the closes under way,
//! within a deadline of its own ([`wait_for_closes`]): a consumer's close
//! sends its last offset commit, which an exit would otherwise cut short.

use std::sync::{Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How many closes are under way, and a signal when one ends.
static PENDING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// One close under way: counted from its creation to its drop.
struct Pending;

impl Pending {
    fn new() -> Self {
        *PENDING.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Pending
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut n = PENDING.0.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        PENDING.1.notify_all();
    }
}

/// Waits until every close begun so far has ended, at most `deadline`;
/// how many are still under way then.
pub fn wait_for_closes(deadline: Duration) -> usize {
    let until = Instant::now() + deadline;
    let mut n = PENDING.0.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        n = PENDING
            .1
            .wait_timeout(n, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    *n
}

/// How long a close may take before it is reported as stuck.
pub const CLOSE_DEADLINE: Duration = Duration::from_secs(30);

/// Drops `client` (a consumer or producer named `what`) on a thread of its
/// own and returns at once; warns once when the drop has not ended after
/// `deadline`.
pub fn close_in_background<C: Send + 'static>(what: &'static str, client: C, deadline: Duration) {
    let (closed_tx, closed) = mpsc::channel::<()>();
    let pending = Pending::new();
    let closing = std::thread::Builder::new()
        .name("kafka-close".into())
        .spawn(move || {
            drop(client);
            drop(pending);
            let _ = closed_tx.send(());
        });
    if let Err(e) = closing {
        // The closure, and the client with it, was dropped inline.
        tracing::warn!(error = %e, "Kafka: no thread to close a {what} on: closed inline");
        return;
    }
    // A watcher: the closing thread itself cannot say that it is stuck.
    let watching = std::thread::Builder::new()
        .name("kafka-close-watch".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = closed.recv_timeout(deadline) {
                tracing::warn!(
                    target: crate::RECOVERY_LOG_TARGET,
                    "Kafka: closing a {what} did not end within {} s (its broker is away?): \
                     left to finish in the background",
                    deadline.as_secs_f64()
                );
            }
        });
    if let Err(e) = watching {
        tracing::warn!(error = %e, "Kafka: no thread to watch the close of a {what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// A client whose drop blocks until the test lets it go.
    struct Stuck(Arc<Barrier>);

    impl Drop for Stuck {
        fn drop(&mut self) {
            self.0.wait();
        }
    }

    /// A close that never ends does not hold its caller: the call returns
    /// while the drop is still blocked (the barrier proves it ran on
    /// another thread, which would otherwise deadlock here).
    #[test]
    fn a_stuck_close_returns_at_once() {
        let release = Arc::new(Barrier::new(2));
        close_in_background("test client", Stuck(release.clone()), Duration::ZERO);
        // The drop is waiting on the other side of the barrier.
        release.wait();
    }

    /// The wait at exit ends when the closes under way have: a close
    /// held until the test lets it go keeps it waiting (no deadline
    /// passes: it is an hour), and its end releases it.
    #[test]
    fn the_wait_for_closes_ends_with_the_last_close() {
        let release = Arc::new(Barrier::new(2));
        close_in_background("test client", Stuck(release.clone()), CLOSE_DEADLINE);
        let waiting = std::thread::spawn(|| wait_for_closes(Duration::from_secs(3600)));
        release.wait();
        assert_eq!(waiting.join().expect("the wait returns"), 0);
    }
}
