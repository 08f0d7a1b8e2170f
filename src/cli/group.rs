//! `floe run wordcount --group NAME`: one word count run by every process
//! started with the same group name, on Kafka's consumer groups
//! (`docs/scale-out.md`).
//!
//! The job has two stages joined by a repartition topic the group creates,
//! `floe-NAME-wordcount-words`, with R partitions (`--group-partitions`,
//! default: the input topic's count): the words of the input's partitions
//! are sent to the partition of their key group (the job's max parallelism
//! is R, so a partition's state is one key group), and counted by whoever
//! holds that partition. The group deals both topics' partitions out; each
//! member runs the job over what it holds, planned anew at each
//! assignment:
//! - sources read exactly the assigned partitions from the group's
//!   committed offsets;
//! - the counts' state of each repartition partition is restored from the
//!   checkpoint its committed offset names;
//! - each stage's exactly-once Kafka sink commits, with each checkpoint,
//!   its records and the offsets of the partitions that produced them, in
//!   one transaction with the group's metadata.
//!
//! A rebalance cancels the job (its open transactions are aborted), then
//! the member plans the new assignment; a failed job is planned again from
//! the committed offsets. Each assignment prints
//! `rebalance generation=N partitions=TOPIC-P,…`.

/// The clap flags of group mode.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct GroupArgs {
    /// Run the job together with every process started with this group
    /// name (a Kafka consumer group): needs a `kafka://` input, a
    /// `kafka://` or `postgres://` output and a shared `--checkpoint-dir`.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Partitions of the group's repartition topic when it is created
    /// (default: the input topic's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=32768))]
    pub group_partitions: Option<i32>,
    /// How long the group waits for a member that stopped answering
    /// before its partitions move (ms; default 10000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1000..=3_600_000))]
    pub session_timeout: Option<u64>,
    /// How long a member's Kafka transaction may stay open before the
    /// broker aborts it (ms; default 10000): a dead member's open
    /// transaction holds the repartition topic's readers back this long,
    /// and a checkpoint must commit within it (a longer one is aborted and
    /// its run starts again from the last commit).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1000..=900_000))]
    pub transaction_timeout: Option<u64>,
}

#[cfg(not(feature = "kafka"))]
pub fn run_wordcount(_args: &super::WordcountArgs, _group: &str) -> floe::Result<()> {
    Err(no_kafka())
}

#[cfg(not(feature = "kafka"))]
pub fn run_window(_args: &super::WindowArgs, _group: &str) -> floe::Result<()> {
    Err(no_kafka())
}

#[cfg(not(feature = "kafka"))]
fn no_kafka() -> floe::Error {
    floe::Error::Config("--group needs the `kafka` feature: rebuild with `--features kafka`".into())
}

#[cfg(feature = "kafka")]
pub use window::run_window;
#[cfg(feature = "kafka")]
pub use wordcount::run_wordcount;

#[cfg(feature = "kafka")]
#[path = "group_member.rs"]
mod member;
#[cfg(feature = "kafka")]
#[path = "group_window.rs"]
mod window;
#[cfg(feature = "kafka")]
#[path = "group_wordcount.rs"]
mod wordcount;

#[cfg(all(feature = "kafka", feature = "postgres"))]
#[path = "group_postgres.rs"]
mod postgres;
