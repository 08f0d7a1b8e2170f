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
//! on that thread; nothing waits for it).

use std::sync::mpsc;
use std::time::Duration;

/// How long a close may take before it is reported as stuck.
pub const CLOSE_DEADLINE: Duration = Duration::from_secs(30);

/// Drops `client` (a consumer or producer named `what`) on a thread of its
/// own and returns at once; warns once when the drop has not ended after
/// `deadline`.
pub fn close_in_background<C: Send + 'static>(what: &'static str, client: C, deadline: Duration) {
    let (closed_tx, closed) = mpsc::channel::<()>();
    let closing = std::thread::Builder::new()
        .name("kafka-close".into())
        .spawn(move || {
            drop(client);
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
}
