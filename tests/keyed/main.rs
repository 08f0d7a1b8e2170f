//! Keyed streams: field accumulators, sum overflow, timers.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[allow(clippy::duplicate_mod)]
#[path = "../common/rng.rs"]
mod rng;

mod keyed_field_accumulators;
mod keyed_sum_overflow;
mod keyed_timers;
