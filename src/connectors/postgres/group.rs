//! Group mode's PostgreSQL output (`docs/scale-out.md`): the positions of
//! the partitions a member's counting stage reads are kept in PostgreSQL,
//! in the table [`OFFSETS_TABLE`], and committed in the same prepared
//! transaction as the rows they produced; a generation per partition
//! fences a member that lost its partitions.
//!
//! - [`GroupFence::claim`], by a new owner before its job starts: ends the
//!   sessions and rolls back the prepared transactions of the group's
//!   former runs (older generations, and this member's own earlier runs),
//!   then raises the generation of its partitions' rows and reads their
//!   positions and marks, in one statement (bounded by a lock timeout: a
//!   transaction that still holds a row makes it fail with
//!   [`PostgresError::PositionsLocked`], to be tried again).
//! - [`PostgresSink::group_fence`]: the sink names its prepared
//!   transactions after the member run, and before each `PREPARE
//!   TRANSACTION` writes the positions its sources held at the checkpoint
//!   into the same transaction, only where the row's generation is not
//!   newer than its own: a fenced member's transaction updates fewer rows
//!   than it has positions and fails ([`PostgresError::Fenced`]).
//!
//! Rolling back a former run's prepared transaction is always safe, its
//! checkpoint completed or not: it holds rows and positions together, so
//! the table goes back to the previous commit, whose positions and mark
//! the claim then reads; the new owner restores the state that mark names
//! and replays what the transaction held.

use super::{PostgresError, PostgresRow, PostgresSink, server};
use crate::connectors::kafka::group::{GroupCommit, OffsetMark};
use crate::{Error, Result};
use floe_actors::ids::CheckpointId;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// The table of the positions group mode keeps in PostgreSQL: one row per
/// (group, topic, partition) with its next offset, the mark of the
/// checkpoint holding the matching state, and the generation of the
/// group that last claimed it.
pub const OFFSETS_TABLE: &str = "floe_group_offsets";

/// PostgreSQL's longest transaction id (`GIDSIZE` - 1).
const MAX_GID: usize = 199;

/// One member run's claim on the partitions of a topic whose positions a
/// PostgreSQL sink commits with its rows (see the module documentation).
#[derive(Debug)]
pub struct GroupFence {
    group: String,
    topic: String,
    generation: i32,
    member: String,
    commit: Arc<GroupCommit>,
}

/// A claimed partition: where its reading resumes and the checkpoint
/// holding its state (both `None` when nothing was committed for it yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The partition.
    pub partition: i32,
    /// The next offset to read.
    pub next_offset: Option<i64>,
    /// The checkpoint whose state matches `next_offset`.
    pub mark: Option<OffsetMark>,
}

impl GroupFence {
    /// The fence of the member run `commit` describes (its run must be
    /// `GROUP/MEMBER/gGENERATION-N`, as the CLI names them), reading
    /// `topic` in the group's `generation`; `table` is the sink's, to
    /// check the length of its transaction ids.
    pub fn new(
        group: &str,
        topic: &str,
        generation: i32,
        member: &str,
        table: &str,
        commit: Arc<GroupCommit>,
    ) -> Result<Self> {
        let bad = |m: String| Err(Error::Config(m));
        let plain = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        };
        if !plain(group) || !plain(member) {
            return bad(format!(
                "group '{group}' and member '{member}': use letters, digits, '.', '_' and '-'"
            ));
        }
        let prefix = format!("{group}/{member}/g{generation}-");
        if !commit.run().starts_with(&prefix) {
            return bad(format!(
                "the member run '{}' is not of group '{group}', member '{member}', generation {generation}",
                commit.run()
            ));
        }
        // floe:RUN:TABLE:SUBTASK:CHECKPOINT
        if commit.run().len() + table.len() + 32 > MAX_GID {
            return bad(format!(
                "group '{group}' and table '{table}': names too long for PostgreSQL's transaction ids ({MAX_GID} bytes)"
            ));
        }
        Ok(GroupFence {
            group: group.to_string(),
            topic: topic.to_string(),
            generation,
            member: member.to_string(),
            commit,
        })
    }

    /// The `application_name` prefix of every session of the group.
    fn sessions_prefix(&self) -> String {
        let tag = self.group.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("floe-g {tag:016x} ")
    }

    /// The `application_name` of this run's session in `role` (within
    /// PostgreSQL's 63 bytes): the group, the generation, the member.
    pub(super) fn session(&self, role: &str) -> String {
        format!(
            "{}g{} {} {role}",
            self.sessions_prefix(),
            self.generation,
            self.member
        )
    }

    /// Whether a former run, of `generation` and `member`, is stale for
    /// this one: of an older generation, or this member's own.
    fn stale(&self, generation: i32, member: &str) -> bool {
        generation < self.generation || member == self.member
    }

    /// Claims `partitions` of the topic for this run (see the module
    /// documentation): their positions and marks, once every row is this
    /// generation's; [`PostgresError::Fenced`] when a newer generation
    /// holds one, [`PostgresError::PositionsLocked`] when a row stayed
    /// locked for `lock_timeout` (try again: each try ends the former
    /// runs' sessions and prepared transactions anew).
    pub async fn claim(
        &self,
        connection: &str,
        partitions: &[i32],
        lock_timeout: Duration,
    ) -> Result<Vec<Claimed>> {
        let mut config: tokio_postgres::Config = connection
            .parse()
            .map_err(server("parse the connection URL"))?;
        config.application_name(self.session("claim"));
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(server("connect to claim the group's positions"))?;
        let driver = tokio::spawn(connection);
        let result = self.claim_on(&client, partitions, lock_timeout).await;
        drop(client);
        let _ = driver.await;
        result
    }

    async fn claim_on(
        &self,
        client: &Client,
        partitions: &[i32],
        lock_timeout: Duration,
    ) -> Result<Vec<Claimed>> {
        create_table(client).await?;
        self.end_former_sessions(client).await?;
        self.roll_back_former_transactions(client).await?;
        client
            .batch_execute(&format!(
                "SET lock_timeout = '{}ms'",
                lock_timeout.as_millis().max(1)
            ))
            .await
            .map_err(server("set lock_timeout"))?;
        let rows = client
            .query(
                &format!(
                    "INSERT INTO {OFFSETS_TABLE} AS o (grp, topic, part, generation) \
                     SELECT $1, $2, p, $3 FROM unnest($4::int4[]) AS p \
                     ON CONFLICT (grp, topic, part) DO UPDATE SET generation = EXCLUDED.generation \
                     WHERE o.generation <= EXCLUDED.generation \
                     RETURNING part, next_offset, mark"
                ),
                &[&self.group, &self.topic, &self.generation, &partitions],
            )
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                return Err(PostgresError::PositionsLocked {
                    group: self.group.clone(),
                    topic: self.topic.clone(),
                    waited_ms: lock_timeout.as_millis() as u64,
                }
                .into());
            }
            Err(e) => return Err(server("claim the group's positions")(e)),
        };
        if rows.len() < partitions.len() {
            return Err(self.fenced());
        }
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let mark: Option<String> = row.get(2);
            let mark = match mark {
                None => None,
                Some(text) => Some(OffsetMark::parse(&text).ok_or_else(|| {
                    Error::Config(format!(
                        "{OFFSETS_TABLE}: group '{}' has a mark '{text}' that names no floe checkpoint",
                        self.group
                    ))
                })?),
            };
            claimed.push(Claimed {
                partition: row.get(0),
                next_offset: row.get(1),
                mark,
            });
        }
        claimed.sort_by_key(|c| c.partition);
        Ok(claimed)
    }

    /// [`claim`](Self::claim) from a thread that is not in an async
    /// runtime (the CLI's member loop), the connection bounded by
    /// `connect_timeout`.
    pub fn claim_blocking(
        &self,
        connection: &str,
        partitions: &[i32],
        lock_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Vec<Claimed>> {
        blocking(
            connect_timeout + lock_timeout * 2,
            "PostgreSQL to claim the group's positions",
            self.claim(connection, partitions, lock_timeout),
        )
    }

    /// Ends the sessions of the group's stale runs: a former owner's open
    /// transaction would hold its rows' locks for as long as it lives (a
    /// frozen process keeps its connection). Prepared transactions outlive
    /// their session: [`roll_back_former_transactions`] ends those.
    async fn end_former_sessions(&self, client: &Client) -> Result<()> {
        let prefix = self.sessions_prefix();
        let rows = client
            .query(
                "SELECT pid, application_name FROM pg_stat_activity \
                 WHERE left(application_name, length($1)) = $1 AND pid <> pg_backend_pid()",
                &[&prefix],
            )
            .await
            .map_err(server("list the group's sessions"))?;
        for row in rows {
            let pid: i32 = row.get(0);
            let name: &str = row.get(1);
            let mut words = name[prefix.len()..].split(' ');
            let generation = words
                .next()
                .and_then(|g| g.strip_prefix('g'))
                .and_then(|g| g.parse::<i32>().ok());
            let (Some(generation), Some(member)) = (generation, words.next()) else {
                continue;
            };
            if self.stale(generation, member) {
                tracing::info!(
                    target: crate::RECOVERY_LOG_TARGET,
                    pid,
                    session = name,
                    "ending a former run's PostgreSQL session"
                );
                // Without the right to, the lock timeout tells.
                let _ = client
                    .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                    .await;
            }
        }
        Ok(())
    }

    /// Rolls back the prepared transactions of the group's stale runs
    /// (their gids name the run: `floe:GROUP/MEMBER/gGEN-N:…`).
    async fn roll_back_former_transactions(&self, client: &Client) -> Result<()> {
        let group = format!("{}/", self.group);
        roll_back_prepared(client, &group, |run| {
            let run = run.strip_prefix(&group).unwrap_or_default();
            let Some((member, rest)) = run.split_once('/') else {
                return false;
            };
            let generation = rest
                .strip_prefix('g')
                .and_then(|g| g.split('-').next())
                .and_then(|g| g.parse::<i32>().ok());
            generation.is_some_and(|g| self.stale(g, member))
        })
        .await
    }

    /// Writes the positions the sources held at `checkpoint` into the
    /// transaction open on `data`, with the checkpoint's mark, where the
    /// rows are not of a newer generation; [`PostgresError::Fenced`] when
    /// some are. The sink calls it before each `PREPARE TRANSACTION`.
    pub async fn commit_positions(&self, data: &Client, checkpoint: CheckpointId) -> Result<()> {
        let positions = self
            .commit
            .positions(std::slice::from_ref(&self.topic), checkpoint);
        if positions.is_empty() {
            // No source has a partition yet: nothing was read, no row
            // written.
            return Ok(());
        }
        let parts: Vec<i32> = positions.iter().map(|p| p.1).collect();
        let offsets: Vec<i64> = positions.iter().map(|p| p.2).collect();
        let mark = self.commit.mark(checkpoint).to_string();
        let updated = data
            .execute(
                &format!(
                    "UPDATE {OFFSETS_TABLE} AS o SET next_offset = v.o, mark = $4, generation = $3 \
                     FROM unnest($5::int4[], $6::int8[]) AS v(p, o) \
                     WHERE o.grp = $1 AND o.topic = $2 AND o.part = v.p AND o.generation <= $3"
                ),
                &[
                    &self.group,
                    &self.topic,
                    &self.generation,
                    &mark,
                    &parts,
                    &offsets,
                ],
            )
            .await
            .map_err(server("write the group's positions"))?;
        if updated < parts.len() as u64 {
            return Err(self.fenced());
        }
        Ok(())
    }

    fn fenced(&self) -> Error {
        PostgresError::Fenced {
            group: self.group.clone(),
            topic: self.topic.clone(),
            generation: self.generation,
        }
        .into()
    }
}

/// Rolls back the prepared transactions of this database whose gid is
/// `floe:` + `prefix` + …, of the runs `stale` picks (the run is the gid's
/// part after `floe:` up to the next `:`, `GROUP/MEMBER/gGEN-N`).
async fn roll_back_prepared(
    client: &Client,
    prefix: &str,
    stale: impl Fn(&str) -> bool,
) -> Result<()> {
    let prefix = format!("floe:{prefix}");
    let rows = client
        .query(
            "SELECT gid FROM pg_prepared_xacts \
             WHERE left(gid, length($1)) = $1 AND database = current_database()",
            &[&prefix],
        )
        .await
        .map_err(server("list the group's prepared transactions"))?;
    for row in rows {
        let gid: &str = row.get(0);
        let run = gid["floe:".len()..].split(':').next().unwrap_or_default();
        if !stale(run) {
            continue;
        }
        let sql = format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''"));
        match client.batch_execute(&sql).await {
            Ok(()) => tracing::info!(
                target: crate::RECOVERY_LOG_TARGET,
                gid,
                "rolled back a former run's prepared transaction"
            ),
            // Finished meanwhile, or being finished by another session
            // (its row locks then make a claim try again).
            Err(e)
                if e.code() == Some(&SqlState::UNDEFINED_OBJECT)
                    || e.code() == Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) => {}
            Err(e) => return Err(server(format!("ROLLBACK PREPARED '{gid}'"))(e)),
        }
    }
    Ok(())
}

/// Runs `work` to its end from a thread that is not in an async runtime,
/// bounded by `deadline`.
fn blocking<T>(
    deadline: Duration,
    waiting_for: &'static str,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start a runtime: {e}")))?;
    runtime.block_on(async {
        match tokio::time::timeout(deadline, work).await {
            Ok(result) => result,
            Err(_) => Err(Error::TimedOut {
                after: deadline,
                waiting_for,
            }),
        }
    })
}

/// A group's marks kept in PostgreSQL, in [`OFFSETS_TABLE`] (the
/// [`MarkStore`](crate::connectors::kafka::group::MarkStore) of a group
/// whose positions commit with a PostgreSQL sink's rows): a member prunes
/// its former runs by them, and rolls back its runs' prepared
/// transactions when it stops (the table keeps what was committed; the
/// partitions' next owner replays the rest).
#[derive(Debug)]
pub struct PostgresMarks {
    connection: String,
    group: String,
    timeout: Duration,
}

impl PostgresMarks {
    /// The marks of `group` in the database `connection` names, each
    /// request bounded by 10 s.
    pub fn new(connection: &str, group: &str) -> Self {
        PostgresMarks {
            connection: connection.to_string(),
            group: group.to_string(),
            timeout: Duration::from_secs(10),
        }
    }

    async fn connect(&self, role: &str) -> Result<Client> {
        let mut config: tokio_postgres::Config = self
            .connection
            .parse()
            .map_err(server("parse the connection URL"))?;
        config.application_name(format!("floe-marks {role}"));
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(server("connect to read the group's marks"))?;
        tokio::spawn(connection);
        Ok(client)
    }
}

impl crate::connectors::kafka::group::MarkStore for PostgresMarks {
    fn named_runs(&self) -> Result<std::collections::BTreeSet<String>> {
        blocking(
            self.timeout,
            "PostgreSQL to list the group's marks",
            async {
                let client = self.connect("list").await?;
                let rows = client
                .query(
                    &format!(
                        "SELECT DISTINCT mark FROM {OFFSETS_TABLE} WHERE grp = $1 AND mark IS NOT NULL"
                    ),
                    &[&self.group],
                )
                .await;
                let rows = match rows {
                    Ok(rows) => rows,
                    // No member has claimed anything yet.
                    Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Vec::new(),
                    Err(e) => return Err(server("list the group's marks")(e)),
                };
                Ok(rows
                    .iter()
                    .filter_map(|row| OffsetMark::parse(row.get(0)).map(|m| m.run))
                    .collect())
            },
        )
    }

    fn member_stopped(&self, member: &str) -> Result<()> {
        blocking(
            self.timeout,
            "PostgreSQL to roll back the member's prepared transactions",
            async {
                let client = self.connect("stop").await?;
                roll_back_prepared(&client, &format!("{}/{member}/", self.group), |_| true).await
            },
        )
    }
}

/// Creates [`OFFSETS_TABLE`] when it is missing (members may race).
async fn create_table(client: &Client) -> Result<()> {
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {OFFSETS_TABLE} (grp TEXT NOT NULL, topic TEXT NOT NULL, \
         part INT NOT NULL, next_offset BIGINT, mark TEXT, generation INT NOT NULL, \
         PRIMARY KEY (grp, topic, part))"
    );
    match client.batch_execute(&create).await {
        Ok(()) => Ok(()),
        Err(e) if super::created_by_another(&e) => Ok(()),
        Err(e) => Err(server(format!("create table {OFFSETS_TABLE}"))(e)),
    }
}

impl<R: PostgresRow> PostgresSink<R> {
    /// Group mode: commits `fence`'s positions with the rows, fenced by
    /// its generation (see the module documentation); its prepared
    /// transactions are named after the member run, so that the claims of
    /// later runs find them.
    pub fn group_fence(mut self, fence: Arc<GroupFence>) -> Self {
        Arc::make_mut(&mut self.config).job = fence.commit.run().to_string();
        self.group = Some(fence);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(group: &str, generation: i32, member: &str, run: &str) -> Result<GroupFence> {
        use rdkafka::consumer::Consumer;
        // Never connects: only its group's metadata is used.
        let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("group.id", group)
            .set("bootstrap.servers", "127.0.0.1:1")
            .create()
            .expect("a consumer");
        let metadata = Arc::new(consumer.group_metadata().expect("a group's metadata"));
        GroupFence::new(
            group,
            "words",
            generation,
            member,
            "counts",
            GroupCommit::new(run, metadata),
        )
    }

    #[test]
    fn sessions_name_group_generation_and_member_within_63_bytes() {
        let f = fence(
            "wc",
            2_000_000_000,
            "m1234567-89abcdef",
            "wc/m1234567-89abcdef/g2000000000-7",
        )
        .expect("a fence");
        let name = f.session("claim");
        assert!(name.len() <= 63, "{name}");
        assert!(name.starts_with(&f.sessions_prefix()));
        assert!(
            name.ends_with(" g2000000000 m1234567-89abcdef claim"),
            "{name}"
        );
    }

    #[test]
    fn former_runs_are_stale_when_older_or_of_this_member() {
        let f = fence("wc", 5, "ma", "wc/ma/g5-1").expect("a fence");
        assert!(f.stale(4, "mb"));
        assert!(f.stale(5, "ma"));
        assert!(!f.stale(5, "mb"));
        assert!(!f.stale(6, "mb"));
    }

    #[test]
    fn a_run_of_another_group_or_generation_is_refused() {
        assert!(fence("wc", 5, "ma", "other/ma/g5-1").is_err());
        assert!(fence("wc", 5, "ma", "wc/ma/g4-1").is_err());
        assert!(fence("w:c", 5, "ma", "w:c/ma/g5-1").is_err());
        let long = "g".repeat(180);
        assert!(fence(&long, 5, "ma", &format!("{long}/ma/g5-1")).is_err());
    }
}
