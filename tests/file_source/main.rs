//! The file source: splits and long lines.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;

mod file_source;
mod file_source_long_lines;
