//! Keyed and operator state: the heap and redb backends, broadcast state,
//! end of input, and redb's cache, failover, key-group filter, incremental
//! checkpoints and retention.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;
#[path = "../gated/mod.rs"]
mod gated;
#[allow(clippy::duplicate_mod)]
#[path = "../common/rng.rs"]
mod rng;
#[path = "../state_oracle/mod.rs"]
mod state_oracle;

mod state_backend;
mod state_broadcast;
mod state_end_of_input;
mod state_keyed;
mod state_operator;
mod state_redb_cache;
mod state_redb_failover;
mod state_redb_filter;
mod state_redb_incremental;
mod state_redb_retention;
