//! The `floe` command line: demo jobs and benchmarks.
//!
//! `floe run wordcount` runs the word count on a file or on generated words;
//! `floe bench mailbox` measures one actor hop. Errors print one line on stderr
//! and exit non-zero.

mod cli;

use mimalloc::MiMalloc;

// The binary picks a faster allocator; the library never sets one. Built
// without transparent huge pages (Cargo.toml): resident memory grows by the
// page, not by 2 MiB at a time.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    std::process::exit(cli::main());
}
