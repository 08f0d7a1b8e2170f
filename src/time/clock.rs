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

/// Wall-clock time: milliseconds since the Unix epoch (on the thread of a
/// deterministic job, the job's clock: see `floe::testing::chaos`).
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
        // Deterministic execution replaces the wall clock of the job's
        // thread (`testing::chaos`).
        if let Some(t) = floe_actors::element::thread_clock_ms() {
            return t;
        }
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
    /// Futures of [`sleep_until`](Self::sleep_until) waiting for a time.
    sleepers: Arc<std::sync::Mutex<Vec<(Timestamp, std::task::Waker)>>>,
}

impl ManualClock {
    /// A clock showing `start_ms`.
    pub fn new(start_ms: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
            sleepers: Arc::default(),
        }
    }

    /// A future that completes once the clock shows `at_ms` or later: a
    /// timer on this clock, woken by [`set`](Self::set) or
    /// [`advance`](Self::advance) on whichever thread moves the time.
    ///
    /// # Examples
    /// ```
    /// use floe::time::ManualClock;
    /// let clock = ManualClock::new(0);
    /// let sleep = clock.sleep_until(10);
    /// clock.advance(10);
    /// futures::executor::block_on(sleep); // ready: the clock shows 10
    /// ```
    pub fn sleep_until(&self, at_ms: Timestamp) -> ManualSleep {
        ManualSleep {
            clock: self.clone(),
            at: at_ms,
        }
    }

    /// Whether `other` is a clone of this clock (they show the same time).
    pub fn shares_time_with(&self, other: &ManualClock) -> bool {
        Arc::ptr_eq(&self.now, &other.now)
    }

    /// Wakes the sleepers due at `now` (outside the lock: a waker may run
    /// code that reads the clock).
    fn wake_due(&self, now: Timestamp) {
        let due: Vec<std::task::Waker> = match self.sleepers.lock() {
            Ok(mut s) if !s.is_empty() => {
                let (due, rest) = std::mem::take(&mut *s)
                    .into_iter()
                    .partition(|(at, _)| *at <= now);
                *s = rest;
                due.into_iter().map(|(_, w)| w).collect()
            }
            _ => Vec::new(),
        };
        for w in due {
            w.wake();
        }
    }

    /// Sets the time to `ms` (it may go backwards; processing time normally
    /// does not).
    pub fn set(&self, ms: Timestamp) {
        self.now.store(ms, Ordering::SeqCst);
        self.wake_due(ms);
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
                Ok(_) => {
                    self.wake_due(next);
                    return next;
                }
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

/// A timer on a [`ManualClock`]: see [`ManualClock::sleep_until`].
#[derive(Debug)]
#[must_use = "a sleep does nothing unless awaited"]
pub struct ManualSleep {
    clock: ManualClock,
    at: Timestamp,
}

impl std::future::Future for ManualSleep {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.clock.now_ms() >= self.at {
            return std::task::Poll::Ready(());
        }
        if let Ok(mut s) = self.clock.sleepers.lock() {
            s.push((self.at, cx.waker().clone()));
        }
        // The time may have moved between the check and the registration.
        if self.clock.now_ms() >= self.at {
            return std::task::Poll::Ready(());
        }
        std::task::Poll::Pending
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
    fn a_sleep_completes_once_the_time_is_reached_and_not_before() {
        use std::future::Future;
        let clock = ManualClock::new(0);
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        struct Count(Arc<std::sync::atomic::AtomicUsize>);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let waker = std::task::Waker::from(Arc::new(Count(woken.clone())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut sleep = std::pin::pin!(clock.sleep_until(5));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(4);
        assert_eq!(woken.load(Ordering::SeqCst), 0);
        clock.advance(1);
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert!(sleep.as_mut().poll(&mut cx).is_ready());
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
