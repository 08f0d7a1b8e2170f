//! Processing time: the clock keyed process functions read and their
//! processing-time timers follow.
//!
//! Operators never call the system clock directly for processing time; they
//! ask a [`Clock`]. Jobs use [`SystemClock`] (wall-clock milliseconds since the
//! Unix epoch); tests and simulations use a [`ManualClock`], whose time moves
//! only when the program sets or advances it, so processing-time behaviour is
//! reproducible.

use floe_actors::element::Timestamp;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of processing time, in milliseconds.
///
/// One clock is shared by every subtask of an operator, so it must be
/// `Send + Sync`.
pub trait Clock: Send + Sync {
    /// The current processing time in milliseconds.
    fn now_ms(&self) -> Timestamp;
}

/// Any shared clock is a clock.
impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ms(&self) -> Timestamp {
        (**self).now_ms()
    }
}

/// Wall-clock time: milliseconds since the Unix epoch.
///
/// # Examples
/// ```
/// use floe::time::{Clock, SystemClock};
/// assert!(SystemClock.now_ms() > 1_600_000_000_000); // after September 2020
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Timestamp {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            // A system clock set before 1970.
            Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
        }
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// Give one clone to the job (`KeyedStream::process_with_clock`) and keep
/// another to drive it.
///
/// # Examples
/// ```
/// use floe::time::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// let view = clock.clone();
/// clock.advance(500);
/// assert_eq!(view.now_ms(), 1_500);
/// clock.set(42);
/// assert_eq!(view.now_ms(), 42);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock showing `start_ms`.
    pub fn new(start_ms: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
        }
    }

    /// Sets the time to `ms` (it may go backwards; processing time normally
    /// does not).
    pub fn set(&self, ms: Timestamp) {
        self.now.store(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms` (saturating) and returns the new time.
    pub fn advance(&self, ms: i64) -> Timestamp {
        let mut now = self.now.load(Ordering::SeqCst);
        loop {
            let next = now.saturating_add(ms);
            match self
                .now
                .compare_exchange_weak(now, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(seen) => now = seen,
            }
        }
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Timestamp {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_and_saturates() {
        let c = ManualClock::new(i64::MAX - 1);
        let d = c.clone();
        assert_eq!(c.advance(10), i64::MAX);
        assert_eq!(d.now_ms(), i64::MAX);
        let shared: Arc<dyn Clock> = Arc::new(d);
        c.set(-5);
        assert_eq!(shared.now_ms(), -5);
    }

    #[test]
    fn system_clock_agrees_with_system_time() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let now = SystemClock.now_ms();
        assert!(now >= before, "{now} < {before}");
    }
}
