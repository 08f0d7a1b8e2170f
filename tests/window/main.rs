//! Windows: the API, edge cases, the oracle against a simulation, panes and
//! triggers; idle sources and the watermarks' gauges.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;
#[path = "../common/mod.rs"]
mod common;
#[allow(clippy::duplicate_mod)]
#[path = "../common/rng.rs"]
mod rng;

mod observe_watermarks;
mod time_idleness;
mod window_api;
mod window_edges;
mod window_oracle;
mod window_panes;
mod window_triggers;
