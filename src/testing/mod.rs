//! Support for testing jobs and the runtime itself.
//!
//! [`chaos`] runs a job deterministically — every actor on one thread,
//! processing time and checkpoint triggers on a clock the harness drives —
//! under a fault plan drawn from a seed, and records what happened, so a
//! failing seed replays exactly.

pub mod chaos;
