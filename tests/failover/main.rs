//! Failover: whole-job restarts, injected faults, loud failures, region
//! failover, deterministic chaos runs over seeds.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;
#[path = "../gated/mod.rs"]
mod gated;

mod chaos;
mod failover;
mod failover_faults;
mod failover_loud;
mod failover_region;
