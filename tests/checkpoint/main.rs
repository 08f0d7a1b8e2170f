//! Checkpoints: holds, restores, a savepoint overlapping a checkpoint, the
//! store.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;
#[path = "../gated/mod.rs"]
mod gated;

mod checkpoint_hold;
mod checkpoint_restore;
mod checkpoint_savepoint_overlap;
mod checkpoint_store;
