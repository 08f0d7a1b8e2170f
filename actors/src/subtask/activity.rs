//! When a (re)deployed set of subtasks first got records flowing: the end
//! of a restart's recovery time.
//!
//! Every subtask of one deployment shares one [`FirstActivity`]. The data
//! path only asks "already set?" (one atomic load, as a `OnceLock` read)
//! per batch; the one subtask that sets it sends the instant on a oneshot
//! to whoever waits for it (the job manager or a region restart), so
//! nobody polls. A deployment that stops before any activity drops the
//! sender with its last subtask, which wakes the waiter with `Canceled`.

use futures::channel::oneshot;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The first time any subtask of a deployment processed (or, a source,
/// emitted) records.
#[derive(Debug, Default)]
pub struct FirstActivity {
    at: OnceLock<Instant>,
    /// Taken by the subtask that sets `at`: one send, ever.
    waiter: Mutex<Option<oneshot::Sender<Instant>>>,
}

impl FirstActivity {
    /// A marker with a waiter: the receiver resolves with the first
    /// activity, or with `Canceled` once the marker is dropped unset.
    pub fn with_waiter() -> (Self, oneshot::Receiver<Instant>) {
        let (tx, rx) = oneshot::channel();
        let activity = Self {
            at: OnceLock::new(),
            waiter: Mutex::new(Some(tx)),
        };
        (activity, rx)
    }

    /// Records activity now, if none was recorded yet. Cheap once set: the
    /// hot path calls it per batch.
    #[inline]
    pub fn mark(&self) {
        if self.at.get().is_none() {
            self.first();
        }
    }

    #[cold]
    fn first(&self) {
        let now = Instant::now();
        // Only the subtask that wins the race sends.
        if self.at.set(now).is_ok()
            && let Some(tx) = self.waiter.lock().ok().and_then(|mut w| w.take())
        {
            // The waiter may be gone (the job ended): nothing to tell.
            let _ = tx.send(now);
        }
    }

    /// When the first activity happened, if it did.
    pub fn get(&self) -> Option<Instant> {
        self.at.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_first_mark_is_sent_once_and_later_marks_change_nothing() {
        let (activity, rx) = FirstActivity::with_waiter();
        let before = Instant::now();
        activity.mark();
        let first = activity.get().expect("set by the first mark");
        activity.mark();
        assert_eq!(activity.get(), Some(first));
        let sent = futures::executor::block_on(rx).expect("sent");
        assert_eq!(sent, first);
        assert!(before <= sent && sent <= Instant::now());
    }

    #[test]
    fn racing_subtasks_send_exactly_the_instant_that_was_kept() {
        let (activity, rx) = FirstActivity::with_waiter();
        let activity = Arc::new(activity);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let a = activity.clone();
                std::thread::spawn(move || a.mark())
            })
            .collect();
        for t in threads {
            t.join().expect("marking thread");
        }
        let sent = futures::executor::block_on(rx).expect("sent");
        assert_eq!(Some(sent), activity.get());
    }

    #[test]
    fn a_deployment_dropped_without_activity_cancels_the_waiter() {
        let (activity, rx) = FirstActivity::with_waiter();
        drop(activity);
        assert!(futures::executor::block_on(rx).is_err());
    }
}
