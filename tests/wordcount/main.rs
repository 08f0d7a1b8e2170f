//! The word count: final counts, the oracle, and its state.
//!
//! One test binary for the family: its modules were binaries of their own
//! (each compiled and linked alone, which made most of the suite's build).

#[allow(clippy::duplicate_mod)]
#[path = "../common/rng.rs"]
mod rng;

mod wordcount_final_counts;
mod wordcount_oracle;
mod wordcount_state;
