//! floe embedded in services: actix-web, concurrent jobs, execute, a job's
//! lifecycle, Send handles, the async bridges.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[path = "../gated/mod.rs"]
mod gated;

mod async_bridges;
mod embed_actix_web;
mod embed_concurrent;
mod embed_execute;
mod embed_lifecycle;
mod embed_send;
