//! The runtime: backpressure (and its metrics), the buffer budget,
//! failures, a flat map under backpressure, a throttled sink; the
//! DataStream API's operators.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;

mod api_operators;
mod observe_backpressure;
mod runtime_backpressure;
mod runtime_buffer_budget;
mod runtime_failures;
mod runtime_flat_map_backpressure;
mod runtime_throttled_sink;
