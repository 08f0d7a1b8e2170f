//! The floe command line: bad input, checkpoints (and a checkpoint
//! directory deleted mid-run), outputs, FIFO inputs, record counts, resume,
//! signals, smoke runs, stop and resume, unaligned checkpoints and their
//! rescaling, the window sink; the metrics endpoint and `/status`.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../cli_common/mod.rs"]
mod cli_common;

mod cli_bad_input;
mod cli_checkpoint_dir_deleted;
mod cli_checkpoints;
mod cli_output;
mod cli_pipe_input;
mod cli_records;
mod cli_resume;
mod cli_signals;
mod cli_smoke;
mod cli_stop_resume;
mod cli_unaligned;
mod cli_unaligned_rescale;
mod cli_window_sink;
mod observe_prometheus;
mod observe_status;
