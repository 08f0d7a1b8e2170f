//! `--output postgres://…` in group mode: the counting stage's rows and
//! the positions of the repartition partitions it reads commit together
//! in PostgreSQL, fenced by the group's generation
//! (`floe::connectors::postgres::group`; `docs/scale-out.md`).
//!
//! Before a member's job starts over its repartition partitions, it
//! claims them: the former owners' sessions and prepared transactions
//! end, the partitions' rows take this generation, and their positions
//! and marks say where reading resumes and which checkpoint holds each
//! key group's state. The Kafka group's committed offsets of the
//! repartition topic are not used.

use floe::connectors::kafka::KafkaSource;
use floe::connectors::kafka::group::{Assignment, OffsetMark};
use floe::connectors::postgres::group::{GroupFence, OFFSETS_TABLE};
use floe::connectors::postgres::{PostgresError, PostgresSink, PostgresSinkConfig, WriteMode};
use floe::{DataStream, Error};
use smol_str::SmolStr;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a claim waits for a row another transaction holds, per try.
const LOCK_TIMEOUT: Duration = Duration::from_secs(2);
/// Tries of a claim whose rows stay locked before the run fails (and the
/// member plans it again, as after any failure).
const CLAIM_TRIES: u32 = 8;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL output of group mode: `word TEXT PRIMARY KEY, count
/// BIGINT`, upserted.
pub struct PostgresCounts {
    config: PostgresSinkConfig,
}

/// `--output` as a PostgreSQL URL (`None`: not one), the server reached
/// once, and able to prepare transactions.
pub fn postgres_counts(output: &str, group: &str) -> Option<floe::Result<PostgresCounts>> {
    let pg = super::super::connectors::postgres_output(std::path::Path::new(output))?;
    Some((|| {
        let config = pg?.config(&["word", "count"], WriteMode::Upsert)?;
        // floe:GROUP/MEMBER/gGENERATION-N:TABLE:SUBTASK:CHECKPOINT
        if group.len() + config.table.len() > 120 {
            return Err(Error::Config(format!(
                "--group '{group}' with table '{}': the names are too long for PostgreSQL's transaction ids (at most 120 bytes together)",
                config.table
            )));
        }
        Ok(PostgresCounts { config })
    })())
}

/// A member run's claim on its repartition partitions: its fence, where
/// each partition resumes, and which checkpoint holds each key group.
pub struct Claim {
    fence: Arc<GroupFence>,
    offsets: Vec<((String, i32), i64)>,
    marks: Vec<(OffsetMark, u32)>,
}

impl PostgresCounts {
    /// Claims `counted` (repartition partitions of `held`) for the member
    /// run `held` is planned for: tried again while a former owner's
    /// transaction holds the rows, one line each time.
    pub fn claim(
        &self,
        group: &str,
        held: &Assignment<'_>,
        counted: &[(String, i32)],
    ) -> floe::Result<Claim> {
        let Some((topic, _)) = counted.first() else {
            return Err(Error::Internal("a claim of no partition".into()));
        };
        let (commit, generation) = (held.commit.clone(), held.generation);
        // The run is GROUP/MEMBER/gGENERATION-N.
        let member = commit
            .run()
            .split('/')
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let fence = Arc::new(GroupFence::new(
            group,
            topic,
            generation,
            &member,
            &self.config.table,
            commit,
        )?);
        let partitions: Vec<i32> = counted.iter().map(|(_, p)| *p).collect();
        let mut tries = 0;
        let claimed = loop {
            tries += 1;
            match fence.claim_blocking(
                &self.config.connection,
                &partitions,
                LOCK_TIMEOUT,
                CONNECT_TIMEOUT,
            ) {
                Err(Error::Postgres(PostgresError::PositionsLocked { .. }))
                    if tries < CLAIM_TRIES =>
                {
                    eprintln!(
                        "claim attempt={tries} generation={generation}: the rows of {OFFSETS_TABLE} stayed locked for {} ms by a former owner's transaction; trying again",
                        LOCK_TIMEOUT.as_millis()
                    );
                }
                result => break result?,
            }
        };
        let mut offsets = Vec::new();
        let mut marks = Vec::new();
        for c in claimed {
            match (c.next_offset, c.mark) {
                (Some(next), Some(mark)) => {
                    offsets.push(((topic.clone(), c.partition), next));
                    marks.push((mark, c.partition as u32));
                }
                (None, None) => {}
                _ => {
                    return Err(Error::Config(format!(
                        "{OFFSETS_TABLE}: partition {topic}-{} of group '{group}' has a position without a mark, or a mark without a position",
                        c.partition
                    )));
                }
            }
        }
        Ok(Claim {
            fence,
            offsets,
            marks,
        })
    }
}

impl Claim {
    /// Where each claimed key group's state comes from: the checkpoint its
    /// mark names, grouped by checkpoint, under the shared directory `dir`.
    pub fn restore_sources(&self, dir: &str) -> Vec<(PathBuf, Vec<u32>)> {
        let mut by: BTreeMap<&OffsetMark, Vec<u32>> = BTreeMap::new();
        for (mark, group) in &self.marks {
            by.entry(mark).or_default().push(*group);
        }
        by.into_iter()
            .map(|(mark, groups)| (mark.path(dir), groups))
            .collect()
    }

    /// The repartition source, starting at the claimed positions (a
    /// partition without one: at its log's start).
    pub fn source<T: Send + 'static>(&self, source: KafkaSource<T>) -> KafkaSource<T> {
        source
            .starting_offsets(floe::connectors::kafka::StartingOffsets::Earliest)
            .start_at(&self.offsets)
    }

    /// Upserts `counts` into the table, with the positions, exactly once;
    /// `rate` throttles the sink (`--sink-rate`).
    pub fn sink(
        &self,
        output: &PostgresCounts,
        counts: &DataStream<(SmolStr, u64)>,
        rate: Option<f64>,
    ) -> floe::Result<()> {
        let sink = PostgresSink::<(String, i64)>::new(output.config.clone())?
            .group_fence(self.fence.clone());
        let sink = counts
            .map(|(word, count): (SmolStr, u64)| (String::from(word), count as i64))
            .name("Rows")
            .uid("rows")
            .sink_exactly_once(&sink.operator_name(), sink)
            .uid("postgres-sink")
            .set_parallelism(1);
        if let Some(rate) = rate {
            sink.set_input_rate(rate);
        }
        Ok(())
    }
}
