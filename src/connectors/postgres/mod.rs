//! PostgreSQL sink with exactly-once writes by two-phase commit (feature
//! `postgres`), on the async bridge: `tokio-postgres` futures run on the
//! subtask's arbiter, never blocking it.
//!
//! Each subtask holds two connections: a *data* connection that writes the
//! current transaction's rows and ends it with `PREPARE TRANSACTION gid` at
//! the checkpoint barrier (durable, invisible), and a *control* connection
//! that runs `COMMIT PREPARED` when the checkpoint completes (it cannot run
//! inside the data connection's open transaction) and the recovery.
//!
//! The gid names the job, the operator, the subtask and the checkpoint:
//! `floe:{job}:{operator}:{subtask}:{checkpoint}` (`…:end` for the
//! transaction pre-committed at the end of the input, before the final
//! checkpoint). On every start, before writing, subtask *i*:
//!
//! - commits (subtask 0, or every restored subtask after a region failover)
//!   the prepared transactions the restored checkpoint lists; one already
//!   committed is no longer prepared, so a repeated commit does nothing;
//! - rolls back every other prepared transaction of this job and operator
//!   left by a former subtask *i* (subtask 0 also those of former subtasks
//!   beyond the new parallelism): they belong to checkpoints that never
//!   completed. Only subtask *i* ever prepares gids of index *i*, and it
//!   does so only after its recovery, so no live transaction is touched.
//!
//! Rows go in with one prepared statement per batch
//! (`INSERT … SELECT … FROM unnest($1::text[], …)`); in upsert mode with
//! `ON CONFLICT (key) DO UPDATE` (the key: the first column, or the
//! columns [`PostgresSinkConfig::key`] names), keeping the last row of
//! each key in a batch; a record that [deletes](PostgresRow::is_delete)
//! its key is a `DELETE … USING unnest(…)` in the same transaction, after
//! an `INSERT … ON CONFLICT (key) DO NOTHING` of the same rows: a delete
//! does not wait for a row the previous checkpoint's transaction inserted
//! (prepared, not yet committed) and would miss it; the insert waits for
//! that transaction to end. Two jobs writing one table need different job
//! names.
//!
//! From a URL (the CLI's `--output postgres://USER:PASS@HOST:PORT/DB?table=T`):
//!
//! ```no_run
//! # fn job(counts: &floe::DataStream<(String, u64)>) -> floe::Result<()> {
//! use floe::connectors::postgres::{PostgresSink, PostgresSinkConfig, WriteMode};
//! let config = PostgresSinkConfig::from_url(
//!     "postgres://floe:floe@127.0.0.1:5432/floe?table=counts",
//!     &["word", "count"],
//!     WriteMode::Upsert, // `word TEXT PRIMARY KEY, count BIGINT`, created if missing
//! )?
//! .job("wordcount");
//! counts.sink_exactly_once("PostgreSQL counts", PostgresSink::new(config)?);
//! # Ok(())
//! # }
//! ```

use super::two_phase::{Recovery, TwoPhaseCommitSink};
use crate::operators::sink::SinkContext;
use crate::operators::sink::SinkFunction;
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::CheckpointId;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

mod columns;
mod error;
#[cfg(feature = "kafka")]
pub mod group;
mod statements;
use columns::last_per_key;
pub use columns::{Column, ColumnType, PostgresRow, PostgresValue};
pub use error::PostgresError;
use error::server;
use statements::{Sql, identifier, statements};

/// How often a `COMMIT`/`ROLLBACK PREPARED` of a transaction another
/// session is finishing is tried again, and how long apart.
const BUSY_RETRIES: u32 = 200;
const BUSY_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(50);
/// Recovery waits for a former attempt's writing sessions to end: polled
/// this often, terminated after this long, given up on after that.
const FORMER_WRITERS_POLL: std::time::Duration = std::time::Duration::from_millis(20);
const FORMER_WRITERS_TERMINATE: std::time::Duration = std::time::Duration::from_secs(5);
const FORMER_WRITERS_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(15);

/// How rows are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteMode {
    /// `INSERT`: every record is a new row.
    Append,
    /// `INSERT … ON CONFLICT (first column) DO UPDATE`: one row per key,
    /// holding its latest record (keyed results, e.g. counts).
    Upsert,
}

/// Where and how the sink writes; shared by its subtasks.
#[derive(Clone, Debug)]
pub struct PostgresSinkConfig {
    /// `tokio-postgres` connection string (URL or key=value form).
    pub connection: String,
    /// The table (`name` or `schema.name`).
    pub table: String,
    /// Its columns, in the order of the record's fields.
    pub columns: Vec<String>,
    /// Upsert mode: the key's columns (empty: the first column).
    pub key: Vec<String>,
    /// Append or upsert.
    pub mode: WriteMode,
    /// Creates the table if it does not exist (the first column is the
    /// primary key in upsert mode).
    pub create_table: bool,
    /// The job's name in transaction ids (default `floe`).
    pub job: String,
    /// The operator's name in transaction ids (default: the table).
    pub operator: String,
}

impl PostgresSinkConfig {
    /// A config for `connection` and `table`.
    pub fn new(
        connection: impl Into<String>,
        table: impl Into<String>,
        columns: &[&str],
        mode: WriteMode,
    ) -> Self {
        let table = table.into();
        PostgresSinkConfig {
            connection: connection.into(),
            operator: table.replace('.', "_"),
            table,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            key: Vec::new(),
            mode,
            create_table: true,
            job: "floe".into(),
        }
    }

    /// Parses `postgres://USER:PASS@HOST:PORT/DB?table=T` (the CLI's
    /// `--output`): the `table` parameter names the table, the rest is the
    /// connection URL.
    pub fn from_url(url: &str, columns: &[&str], mode: WriteMode) -> Result<Self> {
        let shown = hide_password(url);
        let bad = |reason: &str| PostgresError::BadUrl {
            url: shown.clone(),
            reason: reason.into(),
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("it must start with postgres://").into());
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut table = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("table", t)) if !t.is_empty() => table = Some(t.to_string()),
                _ => rest.push(pair),
            }
        }
        let table = table.ok_or_else(|| bad("missing ?table=NAME"))?;
        let connection = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        connection
            .parse::<tokio_postgres::Config>()
            .map_err(|e| bad(&e.to_string()))?;
        Ok(PostgresSinkConfig::new(connection, table, columns, mode))
    }

    /// Sets the job name used in transaction ids.
    pub fn job(mut self, job: impl Into<String>) -> Self {
        self.job = job.into();
        self
    }

    /// Sets the operator name used in transaction ids.
    pub fn operator(mut self, operator: impl Into<String>) -> Self {
        self.operator = operator.into();
        self
    }

    /// Upsert mode: the columns of the key (each one of the columns), the
    /// conflict target of the upsert (default: the first column).
    pub fn key(mut self, key: &[&str]) -> Self {
        self.key = key.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Whether to create the table when it is missing.
    pub fn create_table(mut self, yes: bool) -> Self {
        self.create_table = yes;
        self
    }

    fn gid_prefix(&self) -> String {
        format!("floe:{}:{}:", self.job, self.operator)
    }

    /// A stable tag of the job and operator (an `application_name` is
    /// limited to 63 bytes; the names are not).
    fn tag(&self) -> u64 {
        self.gid_prefix()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
    }

    /// The `application_name` (in `pg_stat_activity`) of the session
    /// through which subtask `subtask` writes and prepares. Its other
    /// sessions are named `floe TAG control` and `floe TAG committer`.
    /// Recovery waits for a former attempt's writing session of the same
    /// subtask to end before it resolves the prepared transactions.
    pub fn writer_session(&self, subtask: u32) -> String {
        format!("{}{subtask}", self.writer_prefix())
    }

    fn writer_prefix(&self) -> String {
        format!("floe {:016x} writer ", self.tag())
    }
}

/// Whether a failed `CREATE TABLE IF NOT EXISTS` lost a race with another
/// session creating the same table (fine: it exists). Concurrent creators
/// collide on the table's name, or on the row type PostgreSQL creates
/// with it (`type "T" already exists`).
pub(crate) fn created_by_another(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code().is_some_and(|c| {
        *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::DUPLICATE_TABLE
            || *c == SqlState::DUPLICATE_OBJECT
    })
}

fn hide_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// A prepared (pre-committed) transaction: its gid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgTxn {
    /// The gid it was prepared with; empty while it is open.
    pub gid: String,
}

struct Connected {
    data: Client,
    /// The data connection's backend (its `application_name` is
    /// [`PostgresSink::writer_name`]).
    data_pid: i32,
    control: Client,
    insert: Statement,
    /// Upsert mode: inserts the rows about to be deleted where their keys
    /// are free (waiting for a transaction that inserted one to end), then
    /// deletes the rows of their keys (see [`statements::Sql::claim`]).
    delete: Option<(Statement, Statement)>,
    columns: Vec<Column>,
    /// Per record of the batch: whether it deletes its key.
    deletes: Vec<bool>,
}

/// Group mode's fence and positions, committed with the rows.
#[cfg(feature = "kafka")]
type GroupSlot = Option<Arc<group::GroupFence>>;
#[cfg(not(feature = "kafka"))]
type GroupSlot = ();

/// The PostgreSQL sink: a [`TwoPhaseCommitSink`] (exactly-once; add
/// it with [`DataStream::sink_exactly_once`](crate::DataStream::sink_exactly_once))
/// and a [`SinkFunction`] writing each batch in
/// its own transaction (at-least-once, without checkpoints).
pub struct PostgresSink<R> {
    config: Arc<PostgresSinkConfig>,
    /// The columns' types.
    types: Arc<[ColumnType]>,
    /// Upsert mode: the key's column indices.
    key: Arc<[usize]>,
    subtask: u32,
    /// Whether this instance writes (opened or recovered by its subtask);
    /// the committer, a clone, only finishes prepared transactions.
    writes: bool,
    conn: Option<Connected>,
    /// Group mode: the positions committed with the rows, fenced.
    group: GroupSlot,
    _row: PhantomData<fn(R)>,
}

impl<R> Clone for PostgresSink<R> {
    fn clone(&self) -> Self {
        PostgresSink {
            config: self.config.clone(),
            types: self.types.clone(),
            key: self.key.clone(),
            subtask: self.subtask,
            writes: false,
            conn: None,
            group: self.group.clone(),
            _row: PhantomData,
        }
    }
}

impl<R: PostgresRow> PostgresSink<R> {
    /// A sink for `config`; checks its names and column count now.
    pub fn new(config: PostgresSinkConfig) -> Result<Self> {
        Self::with_types(config, R::types())
    }

    /// A sink for `config` whose columns have the types `types` (records
    /// whose columns are known only at run time).
    pub fn with_types(config: PostgresSinkConfig, types: Vec<ColumnType>) -> Result<Self> {
        identifier(&config.table)?;
        for c in &config.columns {
            identifier(c)?;
        }
        if config.columns.len() != types.len() || types.is_empty() {
            return Err(Error::Config(format!(
                "the PostgreSQL sink has {} columns but its records have {} fields",
                config.columns.len(),
                types.len()
            )));
        }
        let key: Vec<usize> = match config.key.as_slice() {
            [] => vec![0],
            names => names
                .iter()
                .map(|k| {
                    config.columns.iter().position(|c| c == k).ok_or_else(|| {
                        Error::Config(format!(
                            "the PostgreSQL sink's key column '{k}' is not one of its columns"
                        ))
                    })
                })
                .collect::<Result<_>>()?,
        };
        if config.job.contains(':') || config.operator.contains(':') {
            return Err(Error::Config(
                "job and operator names of the PostgreSQL sink must not contain ':'".into(),
            ));
        }
        Ok(PostgresSink {
            config: Arc::new(config),
            types: types.into(),
            key: key.into(),
            subtask: 0,
            writes: false,
            conn: None,
            group: Default::default(),
            _row: PhantomData,
        })
    }

    /// The sink's operator name: `PostgreSQL <table>`.
    pub fn operator_name(&self) -> String {
        format!("PostgreSQL {}", self.config.table)
    }

    fn sql(&self) -> Result<Sql> {
        statements(&self.config, &self.types, &self.key)
    }

    /// Connects; `name` is the connection's `application_name`.
    async fn connect(&self, name: &str) -> Result<Client> {
        let mut config: tokio_postgres::Config =
            self.config.connection.parse().map_err(server(format!(
                "parse the connection URL {}",
                hide_password(&self.config.connection)
            )))?;
        config.application_name(name);
        let (client, connection) = config.connect(NoTls).await.map_err(server(format!(
            "connect to {}",
            hide_password(&self.config.connection)
        )))?;
        // Runs on the subtask's arbiter; ends when the client is dropped.
        actix::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection closed");
            }
        });
        Ok(client)
    }

    /// The `application_name`s of the data and the control session; in
    /// group mode named after the group, generation and member, so that a
    /// new owner can end a former owner's.
    fn session_names(&self) -> (String, String) {
        #[cfg(feature = "kafka")]
        if let Some(fence) = &self.group {
            let data = fence.session(if self.writes { "w" } else { "k" });
            return (data, fence.session("c"));
        }
        let data = match self.writes {
            true => self.config.writer_session(self.subtask),
            false => format!("floe {:016x} committer", self.config.tag()),
        };
        (data, format!("floe {:016x} control", self.config.tag()))
    }

    async fn ensure_connected(&mut self) -> Result<&mut Connected> {
        if self.conn.is_none() {
            let Sql {
                insert: insert_sql,
                create,
                delete,
                claim,
            } = self.sql()?;
            let (name, control) = self.session_names();
            let data = self.connect(&name).await?;
            let control = self.connect(&control).await?;
            let data_pid: i32 = data
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .map_err(server("read the backend's pid"))?
                .get(0);
            // A prepared transaction left by a failed attempt holds its
            // rows' locks until recovery resolves it: a write waiting on
            // one fails (and the restart recovers) instead of hanging.
            data.batch_execute("SET lock_timeout = '10s'")
                .await
                .map_err(server("set lock_timeout"))?;
            if let Some(create) = create
                && let Err(e) = data.batch_execute(&create).await
                && !created_by_another(&e)
            {
                return Err(server(format!("create table {}", self.config.table))(e));
            }
            let insert = data.prepare(&insert_sql).await.map_err(server(format!(
                "prepare the insert into {}",
                self.config.table
            )))?;
            let delete = match delete.zip(claim) {
                Some((delete, claim)) => {
                    let what = |s| server(format!("prepare the {s} {}", self.config.table));
                    let claim = data.prepare(&claim).await.map_err(what("claim of"))?;
                    let delete = data.prepare(&delete).await.map_err(what("delete from"))?;
                    Some((claim, delete))
                }
                None => None,
            };
            let columns = self.types.iter().map(|t| t.empty()).collect();
            self.conn = Some(Connected {
                data,
                data_pid,
                control,
                insert,
                delete,
                columns,
                deletes: Vec::new(),
            });
        }
        Ok(self.conn.as_mut().expect("connected just now"))
    }

    /// Writes `batch` on the data connection (in its open transaction, if
    /// any): upsert mode keeps the last record of each key, and deletes the
    /// keys whose last record is a delete.
    async fn insert(&mut self, batch: Batch<R>) -> Result<()> {
        let upsert = self.config.mode == WriteMode::Upsert;
        let table = self.config.table.clone();
        let key = self.key.clone();
        let conn = self.ensure_connected().await?;
        for c in conn.columns.iter_mut() {
            c.clear();
        }
        conn.deletes.clear();
        for r in &batch {
            r.value.push(&mut conn.columns);
            conn.deletes.push(upsert && r.value.is_delete());
        }
        if upsert {
            let last = last_per_key(&conn.columns, &key);
            if conn.deletes.iter().zip(&last).any(|(d, l)| *d && *l) {
                let deleted: Vec<bool> = conn
                    .deletes
                    .iter()
                    .zip(&last)
                    .map(|(d, l)| *d && *l)
                    .collect();
                let rows: Vec<Column> = conn
                    .columns
                    .iter()
                    .map(|c| {
                        let mut c = c.clone();
                        c.retain(&deleted);
                        c
                    })
                    .collect();
                if let Some((claim, delete)) = &conn.delete {
                    let params: Vec<&(dyn ToSql + Sync)> = rows.iter().map(Column::param).collect();
                    conn.data
                        .execute(claim, &params)
                        .await
                        .map_err(server(format!("claim the deleted keys of {table}")))?;
                    let params: Vec<&(dyn ToSql + Sync)> =
                        key.iter().map(|&k| rows[k].param()).collect();
                    conn.data
                        .execute(delete, &params)
                        .await
                        .map_err(server(format!("delete from {table}")))?;
                }
            }
            let written: Vec<bool> = conn
                .deletes
                .iter()
                .zip(&last)
                .map(|(d, l)| !*d && *l)
                .collect();
            if written.iter().any(|w| !*w) {
                for c in conn.columns.iter_mut() {
                    c.retain(&written);
                }
            }
            if written.iter().all(|w| !*w) {
                return Ok(());
            }
        }
        let params: Vec<&(dyn ToSql + Sync)> = conn.columns.iter().map(Column::param).collect();
        conn.data
            .execute(&conn.insert, &params)
            .await
            .map_err(server(format!("insert into {table}")))?;
        Ok(())
    }

    fn gid(&self, checkpoint: Option<CheckpointId>) -> String {
        let at = checkpoint.map_or_else(|| "end".to_string(), |c| c.0.to_string());
        format!("{}{}:{at}", self.config.gid_prefix(), self.subtask)
    }

    /// Runs `COMMIT PREPARED` or `ROLLBACK PREPARED` of `gid` on the control
    /// connection; a gid that is no longer prepared was done before.
    async fn finish_prepared(&mut self, gid: &str, commit: bool) -> Result<()> {
        let verb = if commit { "COMMIT" } else { "ROLLBACK" };
        let conn = self.ensure_connected().await?;
        let sql = format!("{verb} PREPARED '{}'", gid.replace('\'', "''"));
        let mut tries = 0;
        loop {
            match conn.control.batch_execute(&sql).await {
                Ok(()) => return Ok(()),
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_OBJECT) => {
                    return Ok(());
                }
                // Another backend is finishing it right now (a former
                // attempt's commit still running on the server): wait for
                // it, then it is done or still to do.
                Err(e)
                    if e.code()
                        == Some(
                            &tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                        )
                        && tries < BUSY_RETRIES =>
                {
                    tries += 1;
                    tracing::warn!(
                        target: crate::RECOVERY_LOG_TARGET,
                        gid,
                        attempt = tries,
                        "{verb} PREPARED: the transaction is busy in another session; retrying"
                    );
                    actix_rt::time::sleep(BUSY_RETRY_DELAY).await;
                }
                Err(e) => return Err(server(format!("{verb} PREPARED '{gid}'"))(e)),
            }
        }
    }

    /// Waits until no data connection of a former attempt of the subtasks
    /// this one recovers (itself; subtask 0 also those beyond the
    /// parallelism) is left on the server. Such a backend may still be
    /// running a statement its client sent before it stopped (the server
    /// finishes a `PREPARE TRANSACTION` after the client is gone): scanning
    /// the prepared transactions before it ends would miss one, whose
    /// locks then stall this attempt's writes. Bounded: after a while the
    /// former backends are terminated; if they still stay, recovery fails.
    async fn wait_for_former_writers(&mut self, ctx: &SinkContext) -> Result<()> {
        let prefix = self.config.writer_prefix();
        let conn = self.ensure_connected().await?;
        let started = std::time::Instant::now();
        let mut warned = false;
        loop {
            let rows = conn
                .control
                .query(
                    "SELECT pid, application_name FROM pg_stat_activity \
                     WHERE left(application_name, length($1)) = $1 AND pid <> $2",
                    &[&prefix, &conn.data_pid],
                )
                .await
                .map_err(server("list the former attempts' connections"))?;
            let former: Vec<i32> = rows
                .iter()
                .filter(|r| {
                    let name: &str = r.get(1);
                    let owner: Option<usize> = name[prefix.len()..].parse().ok();
                    owner.is_some_and(|i| {
                        i == ctx.subtask.0 as usize || (ctx.subtask.0 == 0 && i >= ctx.parallelism)
                    })
                })
                .map(|r| r.get(0))
                .collect();
            if former.is_empty() {
                return Ok(());
            }
            let waited = started.elapsed();
            if waited >= FORMER_WRITERS_GIVE_UP {
                return Err(PostgresError::FormerWriters {
                    pids: former,
                    waited_ms: waited.as_millis() as u64,
                }
                .into());
            }
            if waited >= FORMER_WRITERS_TERMINATE && !warned {
                warned = true;
                tracing::warn!(
                    target: crate::RECOVERY_LOG_TARGET,
                    subtask = ctx.subtask.0,
                    pids = ?former,
                    "a former attempt's PostgreSQL sessions are still open; terminating them"
                );
                for pid in &former {
                    // Fails without the right to; then the wait runs out.
                    let _ = conn
                        .control
                        .query_one("SELECT pg_terminate_backend($1)", &[pid])
                        .await;
                }
            }
            actix_rt::time::sleep(FORMER_WRITERS_POLL).await;
        }
    }
}

impl<R: PostgresRow> TwoPhaseCommitSink<R> for PostgresSink<R> {
    type Txn = PgTxn;
    const AWAITS: bool = true;

    async fn recover(&mut self, ctx: &SinkContext, recovery: Recovery<PgTxn>) -> Result<()> {
        self.subtask = ctx.subtask.0;
        self.writes = true;
        let prefix = self.config.gid_prefix();
        self.wait_for_former_writers(ctx).await?;
        let conn = self.ensure_connected().await?;
        let rows = conn
            .control
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE left(gid, length($1)) = $1 AND database = current_database()",
                &[&prefix],
            )
            .await
            .map_err(server("list prepared transactions"))?;
        let prepared: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let listed: HashSet<&str> = recovery
            .pending
            .iter()
            .map(|(_, t)| t.gid.as_str())
            .collect();
        if recovery.commit_pending {
            for (_, t) in &recovery.pending {
                self.finish_prepared(&t.gid, true).await?;
            }
        }
        for gid in &prepared {
            if listed.contains(gid.as_str()) {
                continue;
            }
            let owner: Option<u32> = gid[prefix.len()..]
                .split(':')
                .next()
                .and_then(|s| s.parse().ok());
            let ours = match owner {
                Some(i) => {
                    i == ctx.subtask.0 || (ctx.subtask.0 == 0 && i as usize >= ctx.parallelism)
                }
                None => ctx.subtask.0 == 0,
            };
            if ours {
                self.finish_prepared(gid, false).await?;
            }
        }
        Ok(())
    }

    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.subtask = ctx.subtask.0;
        self.writes = true;
        self.ensure_connected().await.map(|_| ())
    }

    async fn begin(&mut self) -> Result<PgTxn> {
        let conn = self.ensure_connected().await?;
        conn.data
            .batch_execute("BEGIN")
            .await
            .map_err(server("begin"))?;
        Ok(PgTxn { gid: String::new() })
    }

    async fn write(&mut self, _txn: &mut PgTxn, batch: Batch<R>) -> Result<()> {
        self.insert(batch).await
    }

    async fn pre_commit(
        &mut self,
        txn: &mut PgTxn,
        checkpoint: Option<CheckpointId>,
    ) -> Result<()> {
        txn.gid = self.gid(checkpoint);
        let sql = format!("PREPARE TRANSACTION '{}'", txn.gid.replace('\'', "''"));
        #[cfg(feature = "kafka")]
        let group = self.group.clone();
        let conn = self.ensure_connected().await?;
        #[cfg(feature = "kafka")]
        if let (Some(fence), Some(checkpoint)) = (group, checkpoint) {
            fence.commit_positions(&conn.data, checkpoint).await?;
        }
        conn.data
            .batch_execute(&sql)
            .await
            .map_err(server(format!("prepare transaction '{}'", txn.gid)))
    }

    async fn commit(&mut self, txn: PgTxn, _checkpoint: CheckpointId) -> Result<()> {
        self.finish_prepared(&txn.gid, true).await
    }

    async fn abort(&mut self, txn: PgTxn) -> Result<()> {
        if txn.gid.is_empty() {
            // Never prepared: the open transaction ends with its connection.
            let conn = self.ensure_connected().await?;
            return conn
                .data
                .batch_execute("ROLLBACK")
                .await
                .map_err(server("rollback"));
        }
        self.finish_prepared(&txn.gid, false).await
    }
}

/// Without transactions: each batch is its own statement (autocommit),
/// at-least-once.
impl<R: PostgresRow> SinkFunction<R> for PostgresSink<R> {
    const AWAITS: bool = true;

    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.subtask = ctx.subtask.0;
        self.writes = true;
        self.ensure_connected().await.map(|_| ())
    }

    async fn write(&mut self, batch: Batch<R>) -> Result<()> {
        self.insert(batch).await
    }
}
