//! `--output postgres://…` in group mode: stage two's rows (the word
//! count's counts, the window job's firings) and the positions of the
//! repartition partitions it reads commit together in PostgreSQL, fenced
//! by the group's generation (`floe::connectors::postgres::group`;
//! `docs/scale-out.md`).
//!
//! Before a member's job starts over its repartition partitions, it
//! claims them: the former owners' sessions and prepared transactions
//! end, the partitions' rows take this generation, and their positions
//! and marks say where reading resumes and which checkpoint holds each
//! key group's state. The Kafka group's committed offsets of the
//! repartition topic are not used. Both jobs claim, restore and commit
//! through [`Claim`]; only their rows differ, and those are the rows one
//! process writes (`PostgresOutput::counts_config`,
//! `PostgresOutput::window_config`).

use floe::connectors::kafka::KafkaSource;
use floe::connectors::kafka::group::{Assignment, OffsetMark};
use floe::connectors::postgres::group::{GroupFence, OFFSETS_TABLE};
use floe::connectors::postgres::{PostgresError, PostgresRow, PostgresSink, PostgresSinkConfig};
use floe::{DataStream, Error, StreamExecutionEnvironment};
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

/// The PostgreSQL output of a group's job: its table, as one process of
/// the job writes it.
pub struct PostgresTable {
    config: PostgresSinkConfig,
}

/// `--output` as a PostgreSQL URL (`None`: not one) for the rows of `job`
/// (`wordcount`: the counts upserted; `window`: the firings appended), the
/// server reached once.
pub fn postgres_table(output: &str, group: &str, job: &str) -> Option<floe::Result<PostgresTable>> {
    let pg = super::super::connectors::postgres_output(std::path::Path::new(output))?;
    Some((|| {
        let pg = pg?;
        let config = match job {
            "wordcount" => pg.counts_config()?,
            _ => pg.window_config()?,
        };
        // floe:GROUP/MEMBER/gGENERATION-N:TABLE:SUBTASK:CHECKPOINT
        if group.len() + config.table.len() > 120 {
            return Err(Error::Config(format!(
                "--group '{group}' with table '{}': the names are too long for PostgreSQL's transaction ids (at most 120 bytes together)",
                config.table
            )));
        }
        Ok(PostgresTable { config })
    })())
}

/// A member run's claim on its repartition partitions: its fence, where
/// each partition resumes, and which checkpoint holds each key group.
pub struct Claim {
    config: PostgresSinkConfig,
    fence: Arc<GroupFence>,
    offsets: Vec<((String, i32), i64)>,
    marks: Vec<(OffsetMark, u32)>,
}

impl PostgresTable {
    /// Where the group's marks are: the positions table, in this server.
    pub fn marks(&self, group: &str) -> Arc<dyn floe::connectors::kafka::group::MarkStore> {
        Arc::new(floe::connectors::postgres::group::PostgresMarks::new(
            &self.config.connection,
            group,
        ))
    }

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
            config: self.config.clone(),
            fence,
            offsets,
            marks,
        })
    }
}

impl Claim {
    /// Sets up the run of `env` for the claimed partitions: each key group
    /// restored from the checkpoint its mark names, under the shared
    /// directory `dir`, and `source` (over the claimed partitions) started
    /// at their positions (a partition without one: at its log's start).
    ///
    /// As with the Kafka output, the repartition topic's watermark records
    /// before those positions are not read again: the restored windows
    /// keep their timers, and fire once the watermark records after the
    /// positions have come from every upstream partition.
    pub fn start<T: Send + 'static>(
        &self,
        env: &StreamExecutionEnvironment,
        dir: &str,
        source: KafkaSource<T>,
    ) -> KafkaSource<T> {
        let mut config = env.config();
        config.restore_key_groups = self.restore_sources(dir);
        env.set_config(config);
        source
            .starting_offsets(floe::connectors::kafka::StartingOffsets::Earliest)
            .start_at(&self.offsets)
    }

    /// Where each claimed key group's state comes from: the checkpoint its
    /// mark names, grouped by checkpoint, under the shared directory `dir`.
    fn restore_sources(&self, dir: &str) -> Vec<(PathBuf, Vec<u32>)> {
        let mut by: BTreeMap<&OffsetMark, Vec<u32>> = BTreeMap::new();
        for (mark, group) in &self.marks {
            by.entry(mark).or_default().push(*group);
        }
        by.into_iter()
            .map(|(mark, groups)| (mark.path(dir), groups))
            .collect()
    }

    /// Writes `rows` into the table with the positions, exactly once, in
    /// one sink subtask (one prepared transaction per checkpoint); `rate`
    /// throttles the sink (`--sink-rate`).
    pub fn sink<R>(&self, rows: &DataStream<R>, rate: Option<f64>) -> floe::Result<()>
    where
        R: PostgresRow + Clone,
    {
        let sink = PostgresSink::<R>::new(self.config.clone())?.group_fence(self.fence.clone());
        let sink = rows
            .sink_exactly_once(&sink.operator_name(), sink)
            .uid("postgres-sink")
            .set_parallelism(1);
        if let Some(rate) = rate {
            sink.set_input_rate(rate);
        }
        Ok(())
    }
}
