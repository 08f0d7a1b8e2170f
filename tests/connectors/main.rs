//! The connectors against real servers: Kafka's source and sinks, group
//! mode (one job across processes, into Kafka and PostgreSQL), the
//! PostgreSQL two-phase-commit sink, checkpoints on S3 and S3 failing.
//! The servers come from `scripts/services.sh start`; a test whose server
//! is missing says so and passes.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone). `kafka_restart`, which stops the
//! broker every other test uses, stays a binary of its own.

#[path = "../cli_common/mod.rs"]
mod cli_common;
#[path = "../gated/mod.rs"]
mod gated;
#[path = "../kafka_support/mod.rs"]
mod kafka_support;
#[allow(clippy::duplicate_mod)]
#[path = "../s3_common/mod.rs"]
mod s3_common;
#[allow(clippy::duplicate_mod)]
#[path = "../services/mod.rs"]
mod services;

mod kafka_group;
mod kafka_group_postgres;
mod kafka_postgres;
mod kafka_sink;
mod kafka_source;
mod kafka_throughput;
mod kafka_window;
mod kafka_wordcount;
mod postgres_sink;
mod s3_checkpoints;
mod s3_failures;
