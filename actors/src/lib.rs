//! floe-actors: the runtime of floe.
//!
//! It runs a graph of operator chains, one actix actor per subtask, and knows
//! nothing of windows or of the builder API. The pieces:
//!
//! - [`element`]: what a channel carries (batches of records, watermarks,
//!   barriers, end-of-input), in order.
//! - [`writer`] and [`subtask`]: the two ends of a channel, with credit-based
//!   flow control; [`partitioner`] picks a record's channel.
//! - [`chain`]: the push interface operators are fused through.
//! - [`supervisor`]: the job lifecycle and failure handling.
//! - [`checkpoint`]: the checkpoint protocol (tracker, coordinator,
//!   messages, storage).
//! - [`keygroup`]: the stable key → key group → subtask mapping.
//! - [`metrics`]: counters read by job handles.
//! - [`wake`]: how async sources and sinks wake their subtask.
#![warn(missing_docs)]

pub mod chain;
pub mod checkpoint;
pub mod config;
pub mod element;
pub mod error;
pub mod ids;
pub mod keygroup;
pub mod messages;
pub mod metrics;
pub mod partitioner;
pub mod snapshot;
pub mod source;
pub mod subtask;
pub mod supervisor;
pub mod wake;
pub mod writer;

pub use config::RuntimeConfig;
pub use error::{Error, Result};
