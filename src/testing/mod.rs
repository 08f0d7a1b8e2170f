//! Support for testing jobs and the runtime itself.
//!
//! [`chaos`] runs a job deterministically — every actor on one thread,
//! processing time and checkpoint triggers on a clock the harness drives —
//! under a fault plan drawn from a seed, and records what happened, so a
//! failing seed replays exactly.
//!
//! Behind the `testing` cargo feature (`floe = { features = ["testing"] }`
//! in `[dev-dependencies]`): production builds carry none of it. The hooks
//! it uses, [`FaultInjector`](crate::failover::FaultInjector) and
//! [`JobObserver`](crate::failover::JobObserver), are part of the library.

pub mod chaos;
