//! Input throttling: a subtask that consumes at most `rate` records per second.
//!
//! A throttled sink backpressures its inputs without blocking its arbiter:
//! when it is ahead of its rate the step ends and a timer resumes it, so
//! control messages (credits, checkpoints) still interleave.

use std::time::{Duration, Instant};

/// Paces input consumption: records consumed vs. the rate times the time
/// since the first record.
pub(crate) struct Throttle {
    per_second: f64,
    started: Option<Instant>,
    consumed: u64,
}

impl Throttle {
    /// At most `per_second` records per second.
    pub(crate) fn new(per_second: f64) -> Self {
        Throttle {
            per_second,
            started: None,
            consumed: 0,
        }
    }

    /// A batch of `records` is next: `None` admits it (and counts it), or
    /// how long to wait before consuming more.
    pub(crate) fn admit(&mut self, records: usize) -> Option<Duration> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let allowed = started.elapsed().as_secs_f64() * self.per_second;
        let ahead = self.consumed as f64 - allowed;
        if ahead > 0.0 {
            return Some(Duration::from_secs_f64(ahead / self.per_second));
        }
        self.consumed += records as u64;
        None
    }
}
