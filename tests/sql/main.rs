//! `floe::sql` and `floe sql`: parsing and planning errors, queries and
//! expressions, windows, updating aggregates, SQL mixed with DataStreams,
//! the file source's splits, the connectors (Kafka, PostgreSQL), and the
//! corpus checked against Apache Flink's own output.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone).

#[path = "../kafka_support/mod.rs"]
mod kafka_support;

#[cfg(feature = "cli")]
mod sql_cli;
mod sql_connectors;
mod sql_corpus;
mod sql_errors;
mod sql_queries;
mod sql_split_source;
mod sql_streams;
mod sql_updates;
mod sql_upsert_kafka;
mod sql_upsert_kill;
mod sql_upsert_materialize;
mod sql_upsert_modes;
mod sql_window_aggregates;
mod sql_windows;
mod upsert_oracle;
