//! Failover: restart strategies, failover strategies and fault injection.
//!
//! When a subtask fails, the job's manager asks the [`RestartStrategy`]
//! whether (and after which delay) to restart; the [`FailoverStrategy`] says
//! what restarts: every subtask, or only the pipelined region of the failed
//! one. Either way the restarted subtasks restore the latest completed
//! checkpoint (or start from the beginning when there is none).
//!
//! A [`FaultInjector`] (set with [`Config::with_fault_injector`](crate::Config::with_fault_injector);
//! [`FaultInjection`] is the plain one) fails chosen subtasks at chosen
//! points, with the typed [`floe_actors::Error::InjectedFault`]; a
//! [`JobObserver`] is told checkpoint, failure, restart and end events. For
//! runs that replay exactly (one thread, a logical clock, a seeded plan of
//! faults, a trace), see `floe::testing::chaos` (`testing` feature).
//!
//! See `docs/fault-tolerance.md`.

#[doc(hidden)]
pub mod deterministic;
mod hooks;

use floe_actors::ids::CheckpointId;
pub(crate) use hooks::{Count, Latch, Observers};
pub use hooks::{FaultInjector, JobHooks, JobObserver};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Whether and when a failed job restarts, as Flink's restart strategies.
#[derive(Clone, Debug, PartialEq)]
pub enum RestartStrategy {
    /// The first failure fails the job.
    None,
    /// Restart up to `attempts` times, waiting `delay` before each.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
    /// Restart with a delay that grows by `multiplier` per failure from
    /// `initial` up to `max`, back to `initial` after `reset_after` without
    /// failure; `jitter` (0..1) spreads each delay by up to that fraction.
    /// At most `attempts` restarts between two resets: one more failure
    /// fails the job (Flink's `attempts-before-reset-backoff`).
    ExponentialDelay {
        /// First delay.
        initial: Duration,
        /// Largest delay.
        max: Duration,
        /// Growth per failure (at least 1).
        multiplier: f64,
        /// A quiet period this long resets the delay to `initial`.
        reset_after: Duration,
        /// Fraction of random spread of each delay, in 0..=1.
        jitter: f64,
        /// Restarts allowed before the delay resets (`u32::MAX`: unbounded,
        /// as Flink's default).
        attempts: u32,
    },
    /// Restart after `delay` unless more than `max_failures` failures fell
    /// within the last `interval`.
    FailureRate {
        /// Failures tolerated per interval.
        max_failures: u32,
        /// The sliding interval.
        interval: Duration,
        /// Wait before each restart.
        delay: Duration,
    },
}

impl RestartStrategy {
    /// Restarts the default strategy grants between two resets of its
    /// delay.
    pub const DEFAULT_ATTEMPTS: u32 = 10;

    /// floe's exponential-delay defaults (the default strategy when
    /// checkpointing is on, as in Flink since 1.19; floe's delays are
    /// shorter because its restarts take milliseconds): 10 ms doubling up
    /// to 10 s, reset after 60 s quiet, 10 % jitter, and — unlike Flink,
    /// whose default retries forever — at most
    /// [`DEFAULT_ATTEMPTS`](Self::DEFAULT_ATTEMPTS) restarts before the
    /// reset: a failure that repeats on every attempt fails the job after
    /// about 10 s instead of keeping it restarting.
    pub fn exponential_default() -> Self {
        RestartStrategy::ExponentialDelay {
            initial: Duration::from_millis(10),
            max: Duration::from_secs(10),
            multiplier: 2.0,
            reset_after: Duration::from_secs(60),
            jitter: 0.1,
            attempts: Self::DEFAULT_ATTEMPTS,
        }
    }

    /// Parses the CLI form: `none`, `fixed:ATTEMPTS,DELAY_MS`,
    /// `exponential:INITIAL_MS,MAX_MS[,ATTEMPTS]` (attempts between resets,
    /// default [`DEFAULT_ATTEMPTS`](Self::DEFAULT_ATTEMPTS)) or
    /// `failure-rate:MAX,INTERVAL_MS,DELAY_MS`.
    pub fn parse(spec: &str) -> crate::Result<Self> {
        let bad = || {
            crate::Error::Config(format!(
                "invalid --restart '{spec}': expected none, fixed:ATTEMPTS,DELAY_MS, exponential:INITIAL_MS,MAX_MS[,ATTEMPTS] or failure-rate:MAX,INTERVAL_MS,DELAY_MS"
            ))
        };
        if spec == "none" {
            return Ok(RestartStrategy::None);
        }
        let (kind, args) = spec.split_once(':').ok_or_else(bad)?;
        let nums: Vec<u64> = args
            .split(',')
            .map(|n| n.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let ms = Duration::from_millis;
        match (kind, nums.as_slice()) {
            ("fixed", [attempts, delay]) => Ok(RestartStrategy::FixedDelay {
                attempts: u32::try_from(*attempts).map_err(|_| bad())?,
                delay: ms(*delay),
            }),
            ("exponential", [initial, max, rest @ ..])
                if initial <= max && *initial > 0 && rest.len() <= 1 =>
            {
                let attempts = match rest {
                    [a] => u32::try_from(*a).map_err(|_| bad())?,
                    _ => Self::DEFAULT_ATTEMPTS,
                };
                Ok(RestartStrategy::ExponentialDelay {
                    initial: ms(*initial),
                    max: ms(*max),
                    multiplier: 2.0,
                    reset_after: Duration::from_secs(60),
                    jitter: 0.1,
                    attempts,
                })
            }
            ("failure-rate", [max, interval, delay]) if *interval > 0 => {
                Ok(RestartStrategy::FailureRate {
                    max_failures: u32::try_from(*max).map_err(|_| bad())?,
                    interval: ms(*interval),
                    delay: ms(*delay),
                })
            }
            _ => Err(bad()),
        }
    }
}

/// What restarts when a subtask fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailoverStrategy {
    /// Cancel and restore every subtask.
    #[default]
    All,
    /// Restore only the pipelined region (connected component of the
    /// execution graph) of the failed subtask; the others keep running.
    Region,
}

/// Applies a [`RestartStrategy`] to a sequence of failures.
pub struct RestartTracker {
    strategy: RestartStrategy,
    restarts: u32,
    recent: VecDeque<Instant>,
    backoff: Option<Duration>,
    /// Restarts since the exponential delay last reset.
    since_reset: u32,
    last_failure: Option<Instant>,
    rng: u64,
}

impl RestartTracker {
    /// A tracker for `strategy`; `seed` drives the jitter.
    pub fn new(strategy: RestartStrategy, seed: u64) -> Self {
        RestartTracker {
            strategy,
            restarts: 0,
            recent: VecDeque::new(),
            backoff: None,
            since_reset: 0,
            last_failure: None,
            rng: seed | 1,
        }
    }

    /// Restarts granted so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    fn next_random(&mut self) -> f64 {
        self.rng = crate::text::mix64(self.rng);
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A failure happened at `now`: the delay before restarting, or `None`
    /// when the strategy is exhausted and the job must fail.
    pub fn on_failure(&mut self, now: Instant) -> Option<Duration> {
        let quiet = self.last_failure.map(|t| now.saturating_duration_since(t));
        self.last_failure = Some(now);
        let delay = match self.strategy.clone() {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                (self.restarts < attempts).then_some(delay)
            }
            RestartStrategy::ExponentialDelay {
                initial,
                max,
                multiplier,
                reset_after,
                jitter,
                attempts,
            } => {
                let next = match (self.backoff, quiet) {
                    (Some(_), Some(q)) if q >= reset_after => {
                        self.since_reset = 0;
                        initial
                    }
                    (Some(b), _) => b.mul_f64(multiplier.max(1.0)).min(max),
                    (None, _) => initial,
                };
                if self.since_reset >= attempts {
                    None
                } else {
                    self.since_reset += 1;
                    self.backoff = Some(next);
                    let spread = jitter.clamp(0.0, 1.0) * (2.0 * self.next_random() - 1.0);
                    Some(next.mul_f64((1.0 + spread).max(0.0)).min(max))
                }
            }
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                delay,
            } => {
                self.recent.push_back(now);
                while let Some(&t) = self.recent.front() {
                    if now.saturating_duration_since(t) > interval {
                        self.recent.pop_front();
                    } else {
                        break;
                    }
                }
                (self.recent.len() as u32 <= max_failures).then_some(delay)
            }
        };
        if delay.is_some() {
            self.restarts += 1;
        }
        delay
    }
}

/// Failures to inject (tests and demos).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultInjection {
    /// Kill this many subtasks, chosen by `seed`, one after each new
    /// completed checkpoint (sources do not finish while kills are pending).
    pub random_failures: u32,
    /// Seed of the choices.
    pub seed: u64,
    /// Failures at given points.
    pub faults: Vec<Fault>,
}

/// One failure at a given point of a given subtask (fires once per job).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The operator (by name) whose subtask fails.
    pub operator: String,
    /// The subtask.
    pub subtask: usize,
    /// When.
    pub at: FaultPoint,
}

impl Fault {
    /// The planned fault behind `error`, if it is an injected one (a random
    /// kill has none).
    pub fn from_error(error: &floe_actors::Error) -> Option<Fault> {
        match error.injected()? {
            floe_actors::Error::InjectedFault {
                operator,
                subtask,
                point: Some(at),
            } => Some(Fault {
                operator: operator.clone(),
                subtask: subtask.0 as usize,
                at: *at,
            }),
            _ => None,
        }
    }
}

/// When a [`Fault`] fires (defined with the runtime's typed
/// [`floe_actors::Error::InjectedFault`], which names it).
pub use floe_actors::error::FaultPoint;

/// Where a subtask is when it checks for a due fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultMoment {
    /// After processing; `total` records taken in (or emitted, a source).
    Records(u64),
    /// The synchronous part of a checkpoint.
    Snapshot(CheckpointId),
    /// The asynchronous part of a checkpoint.
    AsyncWrite(CheckpointId),
    /// Restoring.
    Restore,
}

impl FaultMoment {
    /// Whether a fault at `point` is due at this moment.
    pub(crate) fn reached(self, point: FaultPoint) -> bool {
        match (point, self) {
            (FaultPoint::Records(n), FaultMoment::Records(total)) => total >= n,
            (FaultPoint::Checkpoint(a), FaultMoment::Snapshot(b))
            | (FaultPoint::AsyncWrite(a), FaultMoment::AsyncWrite(b)) => a == b,
            (FaultPoint::Restore, FaultMoment::Restore) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_delay_grants_exactly_its_attempts() {
        let mut t = RestartTracker::new(
            RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(5),
            },
            1,
        );
        let now = Instant::now();
        let granted: Vec<_> = (0..5).map(|_| t.on_failure(now)).collect();
        assert_eq!(granted.iter().filter(|d| d.is_some()).count(), 3);
        assert_eq!(granted[3], None);
    }

    #[test]
    fn exponential_delay_grows_to_its_max_and_resets_after_quiet() {
        let mut t = RestartTracker::new(
            RestartStrategy::ExponentialDelay {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(50),
                multiplier: 2.0,
                reset_after: Duration::from_secs(1),
                jitter: 0.0,
                attempts: u32::MAX,
            },
            1,
        );
        let t0 = Instant::now();
        let d: Vec<u128> = (0..4)
            .map(|i| {
                t.on_failure(t0 + Duration::from_millis(i))
                    .unwrap()
                    .as_millis()
            })
            .collect();
        assert_eq!(d, vec![10, 20, 40, 50]);
        let later = t0 + Duration::from_secs(5);
        assert_eq!(t.on_failure(later).unwrap().as_millis(), 10);
    }

    #[test]
    fn exponential_delay_grants_its_attempts_until_a_quiet_period_resets_them() {
        let mut t = RestartTracker::new(
            RestartStrategy::ExponentialDelay {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(4),
                multiplier: 2.0,
                reset_after: Duration::from_secs(1),
                jitter: 0.1,
                attempts: 3,
            },
            7,
        );
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let granted: Vec<bool> = (0..5).map(|i| t.on_failure(at(i)).is_some()).collect();
        assert_eq!(granted, [true, true, true, false, false]);
        assert!(t.on_failure(at(10_000)).is_some());
        assert_eq!(t.restarts(), 4);
    }

    #[test]
    fn the_default_strategy_is_bounded() {
        let mut t = RestartTracker::new(RestartStrategy::exponential_default(), 1);
        let t0 = Instant::now();
        // Failures in a row, each right after its restart: the job fails
        // after DEFAULT_ATTEMPTS restarts instead of restarting forever.
        let granted = (0..1000u64)
            .map(|i| t.on_failure(t0 + Duration::from_millis(i)))
            .take_while(Option::is_some)
            .count();
        assert_eq!(granted as u32, RestartStrategy::DEFAULT_ATTEMPTS);
    }

    #[test]
    fn failure_rate_fails_beyond_its_rate() {
        let mut t = RestartTracker::new(
            RestartStrategy::FailureRate {
                max_failures: 2,
                interval: Duration::from_secs(10),
                delay: Duration::ZERO,
            },
            1,
        );
        let t0 = Instant::now();
        assert!(t.on_failure(t0).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(1)).is_some());
        assert!(t.on_failure(t0 + Duration::from_secs(2)).is_none());
        // Once the old failures left the interval, restarts resume.
        assert!(t.on_failure(t0 + Duration::from_secs(30)).is_some());
    }

    #[test]
    fn parse_accepts_the_cli_forms_and_names_bad_ones() {
        assert_eq!(
            RestartStrategy::parse("none").unwrap(),
            RestartStrategy::None
        );
        assert!(matches!(
            RestartStrategy::parse("fixed:3,100").unwrap(),
            RestartStrategy::FixedDelay { attempts: 3, .. }
        ));
        assert!(matches!(
            RestartStrategy::parse("exponential:10,1000").unwrap(),
            RestartStrategy::ExponentialDelay { attempts, .. } if attempts == RestartStrategy::DEFAULT_ATTEMPTS
        ));
        assert!(matches!(
            RestartStrategy::parse("exponential:10,1000,3").unwrap(),
            RestartStrategy::ExponentialDelay { attempts: 3, .. }
        ));
        assert!(RestartStrategy::parse("failure-rate:3,1000,5").is_ok());
        for bad in [
            "",
            "fixed",
            "fixed:1",
            "exponential:0,5",
            "exponential:9,5",
            "exponential:1,5,2,3",
            "x:1,2",
        ] {
            assert!(RestartStrategy::parse(bad).is_err(), "{bad}");
        }
    }
}
