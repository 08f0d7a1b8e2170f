//! Job events: what a job reports as it happens — each restart (its cause,
//! its number, the checkpoint it restored) and each restore that fell back
//! to an older checkpoint because newer ones were damaged.
//!
//! The library never prints. It logs these through `tracing` (warn) and
//! hands them to subscribers ([`JobHandle::events`](super::job::JobHandle::events)),
//! so that a program can show them its own way; the `floe` binary prints one
//! stderr line per event. A subscriber first receives every event of the job
//! so far (a restart can happen before anyone subscribed), then each new one;
//! its stream ends when the job ends.

use floe_actors::ids::CheckpointId;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// Something a job reports as it happens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum JobEvent {
    /// The job (restart-all) or a region of it restarted after a failure.
    Restarted(RestartEvent),
    /// A restore skipped newer checkpoints that failed verification and
    /// restored an older one.
    RestoreFellBack(FallbackEvent),
}

/// One restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartEvent {
    /// Which restart of the job this is, from 1.
    pub attempt: u64,
    /// The failure that caused it.
    pub cause: String,
    /// The checkpoint (or savepoint) restored; `None`: from the beginning.
    pub restored_checkpoint: Option<CheckpointId>,
    /// Subtasks restarted.
    pub subtasks: u64,
    /// The restart strategy's wait before the restart, ms.
    pub delay_ms: u64,
}

/// A restore that fell back to an older checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackEvent {
    /// The checkpoint restored.
    pub restored_checkpoint: CheckpointId,
    /// The newer checkpoints skipped, newest first.
    pub skipped: Vec<SkippedCheckpoint>,
}

/// A checkpoint a restore skipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedCheckpoint {
    /// Its id.
    pub checkpoint: CheckpointId,
    /// Why it was skipped (the verification error).
    pub reason: String,
}

/// The events of one job and their subscribers.
#[derive(Default)]
pub(crate) struct EventLog {
    inner: Mutex<Inner>,
    /// Told each restart.
    observer: Option<std::sync::Arc<dyn crate::failover::JobObserver>>,
}

#[derive(Default)]
struct Inner {
    events: Vec<JobEvent>,
    subscribers: Vec<UnboundedSender<JobEvent>>,
    closed: bool,
}

impl EventLog {
    /// A log that also tells `observer` each restart.
    pub fn with_observer(observer: std::sync::Arc<dyn crate::failover::JobObserver>) -> Self {
        EventLog {
            inner: Mutex::default(),
            observer: Some(observer),
        }
    }

    /// Records `event` and hands it to every live subscriber (and a
    /// restart to the observer).
    pub fn emit(&self, event: JobEvent) {
        if let Ok(mut inner) = self.inner.lock() {
            inner
                .subscribers
                .retain(|s| s.unbounded_send(event.clone()).is_ok());
            inner.events.push(event.clone());
        }
        // Outside the lock: an observer may subscribe.
        if let (Some(o), JobEvent::Restarted(r)) = (&self.observer, &event) {
            o.restarted(r.attempt, r.restored_checkpoint);
        }
    }

    /// Tells the subscribers that `loaded` was restored in place of newer,
    /// damaged checkpoints (`load_latest` logged each one already).
    pub fn report_fallback(&self, loaded: &crate::checkpoint::LoadedSnapshot) {
        if loaded.skipped.is_empty() {
            return;
        }
        self.emit(JobEvent::RestoreFellBack(FallbackEvent {
            restored_checkpoint: loaded.meta.id,
            skipped: loaded
                .skipped
                .iter()
                .map(|(id, e)| SkippedCheckpoint {
                    checkpoint: *id,
                    reason: e.to_string(),
                })
                .collect(),
        }));
    }

    /// A stream of every event so far, then of each new one until
    /// [`close`](Self::close).
    pub fn subscribe(&self) -> UnboundedReceiver<JobEvent> {
        let (tx, rx) = unbounded();
        if let Ok(mut inner) = self.inner.lock() {
            for e in &inner.events {
                let _ = tx.unbounded_send(e.clone());
            }
            if !inner.closed {
                inner.subscribers.push(tx);
            }
        }
        rx
    }

    /// The job ended: every subscriber's stream ends after what it has.
    pub fn close(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.closed = true;
            inner.subscribers.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn restart(attempt: u64) -> JobEvent {
        JobEvent::Restarted(RestartEvent {
            attempt,
            cause: "boom".into(),
            restored_checkpoint: Some(CheckpointId(attempt)),
            subtasks: 2,
            delay_ms: 0,
        })
    }

    #[test]
    fn a_late_subscriber_gets_the_past_events_and_its_stream_ends_with_the_job() {
        let log = EventLog::default();
        let early = log.subscribe();
        log.emit(restart(1));
        let late = log.subscribe();
        log.emit(restart(2));
        log.close();
        let after = log.subscribe();
        let all = vec![restart(1), restart(2)];
        for rx in [early, late, after] {
            assert_eq!(futures::executor::block_on(rx.collect::<Vec<_>>()), all);
        }
    }

    /// Typed checkpoint ids serialize as the bare number: the JSON of the
    /// events, of `/status` and of the checkpoint history keeps its shape
    /// (the oracle: the same JSON written with plain integers).
    #[test]
    fn typed_checkpoint_ids_are_plain_numbers_in_json() {
        let event = JobEvent::RestoreFellBack(FallbackEvent {
            restored_checkpoint: CheckpointId(4),
            skipped: vec![SkippedCheckpoint {
                checkpoint: CheckpointId(5),
                reason: "corrupt".into(),
            }],
        });
        assert_eq!(
            serde_json::to_value(&event).expect("serializes"),
            serde_json::json!({"RestoreFellBack": {
                "restored_checkpoint": 4,
                "skipped": [{"checkpoint": 5, "reason": "corrupt"}],
            }})
        );
        let JobEvent::Restarted(restart) = restart(7) else {
            unreachable!("restart() makes a restart")
        };
        let json = serde_json::to_value(&restart).expect("serializes");
        assert_eq!(json["restored_checkpoint"], serde_json::json!(7));
        let back: RestartEvent = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back, restart);

        let mut stats = crate::checkpoint::CheckpointStats {
            last_completed: Some(CheckpointId(9)),
            ..Default::default()
        };
        stats
            .history
            .push_back(floe_actors::checkpoint::CheckpointRecord {
                id: CheckpointId(9),
                savepoint: false,
                status: "completed".into(),
                trigger_ms: 0,
                duration_ms: 1,
                alignment_ms: 0,
                sync_ms: 0,
                async_ms: 0,
                state_bytes: 0,
                channel_state_bytes: 0,
                unaligned: false,
                failure: None,
            });
        let json = serde_json::to_value(&stats).expect("serializes");
        assert_eq!(json["last_completed"], serde_json::json!(9));
        assert_eq!(json["history"][0]["id"], serde_json::json!(9));
        // And postcard (checkpoint metadata, savepoints) reads the number.
        let bytes = postcard::to_allocvec(&CheckpointId(9)).expect("encodes");
        assert_eq!(bytes, postcard::to_allocvec(&9u64).expect("encodes"));
    }
}
