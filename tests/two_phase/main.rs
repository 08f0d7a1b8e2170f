//! Two-phase commit sinks: the file sink's restore, the final checkpoint,
//! and the sink protocol.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../gated/mod.rs"]
mod gated;

mod two_phase_file_restore;
mod two_phase_final_checkpoint;
mod two_phase_sink;
