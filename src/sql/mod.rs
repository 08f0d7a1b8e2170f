//! Flink SQL on floe: the statements streaming users write most, with
//! Flink's semantics, planned onto floe's own operators, so a SQL job has
//! the checkpoints, failover and metrics of any other job.
//!
//! A script goes through four steps, and nothing runs until every
//! statement of it has passed the first three:
//!
//! 1. **Parse** ([`parse`]): `sqlparser` with [`FlinkDialect`], which adds
//!    Flink's `CREATE TABLE` (computed columns, `WATERMARK FOR`) and `TABLE
//!    name` arguments of window functions.
//! 2. **Catalog** ([`table`], [`connector`]): each `CREATE TABLE` checked
//!    (types, connector and format options, the watermark), each view kept
//!    as its query.
//! 3. **Plan** ([`planner`], [`bind`]): each `INSERT INTO` bound and typed
//!    into a tree of `Calc`, `WindowAggregate`, `GroupAggregate` and
//!    `Union` nodes, its updates checked against its sink; a problem is one
//!    [`SqlError`] naming its line and column.
//! 4. **Build** ([`exec`], [`sources`], [`sinks`]): the trees onto the
//!    environment's DataStream graph (file or Kafka source, chained calcs,
//!    timestamps and watermarks, keyed window operator, keyed group
//!    aggregate emitting [`Change`]s, sink), all inserts of a script in one
//!    job.
//!
//! See `docs/sql.md` for what is supported.
//!
//! # Examples
//! ```
//! use floe::sql::SqlSession;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let input = dir.path().join("clicks.csv");
//! std::fs::write(&input, "alice,3\nbob,5\nalice,4\n").unwrap();
//! let output = dir.path().join("out.csv");
//! let env = floe::StreamExecutionEnvironment::new();
//! env.set_parallelism(1);
//! let mut session = SqlSession::new(&env);
//! session
//!     .execute_sql(&format!(
//!         "CREATE TABLE clicks (name STRING, n INT) WITH (
//!            'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
//!          CREATE TABLE out (name STRING, twice INT) WITH (
//!            'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
//!          INSERT INTO out SELECT UPPER(name), n * 2 FROM clicks WHERE n > 3;",
//!         input.display(),
//!         output.display()
//!     ))
//!     .unwrap();
//! assert_eq!(std::fs::read_to_string(&output).unwrap(), "BOB,10\nALICE,8\n");
//! ```

pub mod aggregate;
pub mod bind;
pub mod changelog;
pub mod connector;
pub mod csv;
pub mod date_format;
pub mod dialect;
pub mod error;
pub mod exec;
pub mod explain;
pub mod expr;
mod grouping;
pub mod json;
pub mod parse;
pub mod planner;
pub mod select;
pub mod sinks;
pub mod sources;
pub mod stream;
pub mod table;
pub mod typing;
pub mod upsert;
pub mod value;
pub mod window_aggregate;
pub mod window_csv;

pub use changelog::{Change, RowKind};
pub use dialect::FlinkDialect;
pub use error::{SqlError, SqlErrorKind};
pub use stream::SqlStream;
pub use value::{Row, SqlType, Value};

use crate::{DataStream, JobResult, Result, StreamExecutionEnvironment};
use bind::assignable;
use error::{SqlResult, err};
use expr::Expr;
use parse::Statement;
use planner::{Catalog, Entry, Plan, Planner};
use sqlparser::ast::{ObjectName, Spanned};
use sqlparser::tokenizer::Span;
use std::collections::HashMap;
use std::sync::Arc;
use table::{Connector, Table};
use upsert::{SinkUpdates, UpsertMaterialize};

/// What a script planned: how many `INSERT INTO` statements it added to
/// the job, and the text of each `EXPLAIN`.
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct SqlScript {
    /// `INSERT INTO` statements added to the environment's job.
    pub inserts: usize,
    /// What each `EXPLAIN` printed, in order.
    pub explains: Vec<String>,
    /// The names of the source operators added (`Source: clicks`).
    pub sources: Vec<String>,
}

/// A SQL session over an environment: its catalog of tables and views
/// lives across scripts; its inserts become operators of the environment.
pub struct SqlSession {
    env: StreamExecutionEnvironment,
    catalog: Catalog,
    sink_rate: Option<f64>,
    /// The split size of `filesystem` sources.
    split_size: u64,
    /// The rows of the tables registered from DataStreams.
    streams: HashMap<String, DataStream<Row>>,
    /// `SET 'table.exec.source.idle-timeout'`.
    idle_timeout: Option<std::time::Duration>,
    /// `SET 'table.exec.sink.upsert-materialize'`.
    upsert_materialize: UpsertMaterialize,
    /// Where keyed state goes (`None`: the operators' own maps).
    state_backend: Option<crate::state::StateBackendKind>,
}

impl SqlSession {
    /// A session adding its jobs to `env` (its parallelism, checkpoints
    /// and restore settings are the job's).
    pub fn new(env: &StreamExecutionEnvironment) -> Self {
        SqlSession {
            env: env.clone(),
            catalog: Catalog::default(),
            sink_rate: None,
            split_size: crate::connectors::file_source::DEFAULT_SPLIT_SIZE,
            streams: HashMap::new(),
            idle_timeout: None,
            upsert_materialize: UpsertMaterialize::Auto,
            state_backend: None,
        }
    }

    /// Keeps the keyed state of the operators the next scripts add (window
    /// aggregates' windows, `GROUP BY` accumulators, sink materializers) in
    /// `kind`: [`StateBackendKind::Redb`](crate::state::StateBackendKind::Redb)
    /// for state larger than memory. By default a window aggregate keeps
    /// its windows in its own maps, the others in the heap backend.
    pub fn set_state_backend(&mut self, kind: crate::state::StateBackendKind) {
        self.state_backend = Some(kind);
    }

    /// Limits every sink the next scripts add to `records_per_second`
    /// records per second (see [`DataStream::set_input_rate`](crate::DataStream::set_input_rate)).
    pub fn set_sink_rate(&mut self, records_per_second: Option<f64>) {
        self.sink_rate = records_per_second;
    }

    /// Cuts the files of the `filesystem` sources the next scripts add
    /// into splits of `bytes` (default
    /// [`DEFAULT_SPLIT_SIZE`](crate::connectors::file_source::DEFAULT_SPLIT_SIZE)),
    /// which the source's subtasks share; a table whose watermark is
    /// emitted per row reads each file as one split (docs/sql.md,
    /// "filesystem").
    pub fn set_file_split_size(&mut self, bytes: u64) {
        self.split_size = bytes.max(1);
    }

    /// Plans `script` and adds its `INSERT INTO` statements to the
    /// environment's job, without running it (the caller runs it, with
    /// `execute` or `execute_async`). If any statement fails to parse or
    /// plan, nothing is added and the catalog is as before.
    pub fn plan_sql(&mut self, script: &str) -> Result<SqlScript> {
        let statements = parse::parse_script(script)?;
        let mut catalog = self.catalog.clone();
        let mut inserts: Vec<(Plan, Arc<Table>, SinkUpdates)> = Vec::new();
        let mut out = SqlScript::default();
        let mut settings = Vec::new();
        let mut idle_timeout = self.idle_timeout;
        // As in Flink, a statement is planned under the `SET`s before it.
        let mut materialize = self.upsert_materialize;
        for s in &statements {
            match s {
                Statement::Explain(inner, at) => {
                    out.explains
                        .push(self.explain(&catalog, inner, *at, materialize)?);
                }
                Statement::Set { key, value, span } if key == IDLE_TIMEOUT => {
                    idle_timeout = parse_duration(value, *span)?;
                }
                Statement::Set { key, value, span } if key == upsert::UPSERT_MATERIALIZE => {
                    materialize = UpsertMaterialize::parse(value, *span)?;
                }
                Statement::Set { key, value, span } => {
                    settings.push(setting(key, value, *span)?);
                }
                other => {
                    if let Some(insert) = plan_statement(&mut catalog, other, materialize)? {
                        inserts.push(insert);
                    }
                }
            }
        }
        let before = self.env.inner.borrow().nodes.len();
        let mut builder = exec::Builder::new(&self.env, true);
        builder.sink_rate = self.sink_rate;
        builder.split_size = self.split_size;
        builder.state_backend = self.state_backend.clone();
        builder.idle_timeout = idle_timeout;
        // The job's name (its transactions' ids name it): the
        // environment's, else the script's last `SET 'pipeline.name'`.
        builder.job_name = self.env.config().job_name.or_else(|| {
            statements.iter().rev().find_map(|s| match s {
                Statement::Set { key, value, .. } if key == "pipeline.name" => Some(value.clone()),
                _ => None,
            })
        });
        builder.streams = self.streams.clone();
        let built = inserts
            .iter()
            .try_for_each(|(plan, sink, updates)| builder.insert(plan, sink, updates));
        if let Err(e) = built {
            self.env.inner.borrow_mut().nodes.truncate(before);
            return Err(e);
        }
        // Operators take the environment's parallelism when the job starts,
        // so a `SET` applies to those just added too.
        for apply in settings {
            apply(&self.env);
        }
        self.catalog = catalog;
        self.idle_timeout = idle_timeout;
        self.upsert_materialize = materialize;
        out.inserts = inserts.len();
        out.sources = builder.sources;
        Ok(out)
    }

    /// Plans `script` and, if it inserts into any table, runs the job to
    /// its end ([`StreamExecutionEnvironment::execute`]); `EXPLAIN`s are
    /// returned, not printed.
    pub fn execute_sql(&mut self, script: &str) -> Result<(SqlScript, Option<JobResult>)> {
        let planned = self.plan_sql(script)?;
        if planned.inserts == 0 {
            return Ok((planned, None));
        }
        let result = self.env.execute()?;
        Ok((planned, Some(result)))
    }

    /// Registers `stream`, a stream of this session's environment, as the
    /// table `name` that queries read. `schema` is the column list of a
    /// `CREATE TABLE` (`"user_id STRING, amount INT, ts TIMESTAMP(3),
    /// WATERMARK FOR ts AS ts - INTERVAL '1' SECOND"`): physical columns,
    /// which each row of the stream holds in order (a `Value` of the
    /// column's type, or `NULL`; a decimal is brought to the column's scale),
    /// computed columns, a `rowtime TIMESTAMP_LTZ(3) METADATA` column (the
    /// record's timestamp) and a watermark: `WATERMARK FOR c AS
    /// SOURCE_WATERMARK()` keeps the stream's own watermarks (as Flink's
    /// `fromDataStream` does with that schema), `c - INTERVAL ..` makes new
    /// ones, emitted after every row that advances them. The rows are read at the stream's parallelism when it
    /// was fixed (a source of one subtask), so each subtask's rows keep
    /// their order. A row that does not fit fails the job, without
    /// restarts, naming the table and the column. The table cannot be
    /// written.
    ///
    /// # Examples
    /// ```
    /// use floe::sql::{SqlSession, Value};
    ///
    /// let env = floe::StreamExecutionEnvironment::new();
    /// env.set_parallelism(1);
    /// let clicks = env.from_collection(vec![
    ///     vec![Value::Str("alice".into()), Value::Int(3)],
    ///     vec![Value::Str("bob".into()), Value::Int(5)],
    /// ]);
    /// let mut session = SqlSession::new(&env);
    /// session.register_stream("clicks", &clicks, "name STRING, n INT")?;
    /// let big = session.query_to_stream("SELECT UPPER(name), n * 10 FROM clicks WHERE n > 4")?;
    /// let rows = big.stream.collect();
    /// env.execute()?;
    /// let rows: Vec<String> = rows.take().iter().map(|r| format!("{r:?}")).collect();
    /// assert_eq!(rows, [r#"[Str("BOB"), Int(50)]"#]);
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn register_stream(
        &mut self,
        name: &str,
        stream: &DataStream<Row>,
        schema: &str,
    ) -> Result<()> {
        let refuse = |message: String| Err(err!(Invalid, Span::empty(), "{message}").into());
        if !stream.env.same_as(&self.env) {
            return refuse(format!(
                "the stream registered as '{name}' belongs to another environment"
            ));
        }
        if name.is_empty() || name.contains('`') {
            return refuse(format!("'{name}' is not a table name"));
        }
        if self.catalog.entries.contains_key(name) {
            return refuse(format!("table or view '{name}' already exists"));
        }
        // The schema is read as the body of a `CREATE TABLE`, from line 2.
        let ddl = format!("CREATE TABLE `{name}` (\n{schema}\n) WITH ('connector' = 'blackhole')");
        let one_line_up = |e: crate::Error| match e {
            crate::Error::Sql(mut e) if e.line > 1 => {
                e.line -= 1;
                crate::Error::Sql(e)
            }
            other => other,
        };
        let statements = parse::parse_script(&ddl).map_err(|e| one_line_up(e.into()))?;
        let [Statement::CreateTable(def)] = statements.as_slice() else {
            return refuse(format!(
                "the schema of '{name}' is not a list of columns and a watermark"
            ));
        };
        if def.options.len() != 1 {
            return refuse(format!(
                "the schema of '{name}' is not a list of columns and a watermark"
            ));
        }
        let mut table = Table::from_stream_schema(def).map_err(|e| one_line_up(e.into()))?;
        if let Some(w) = &mut table.watermark {
            w.emit = table::WatermarkEmit::OnEvent;
        }
        self.catalog
            .entries
            .insert(name.to_string(), Entry::Table(Arc::new(table)));
        self.catalog.streams.insert(name.to_string());
        self.streams.insert(name.to_string(), stream.clone());
        Ok(())
    }

    /// The rows of `query` (a `SELECT`, a window aggregate, a `UNION ALL`
    /// over the session's tables and views) as a stream of this session's
    /// environment, for DataStream operators and sinks; the caller runs the
    /// job. Nothing is added if the query does not plan.
    pub fn query_to_stream(&mut self, query: &str) -> Result<SqlStream> {
        let statements = parse::parse_script(query)?;
        let [Statement::Query(q, _)] = statements.as_slice() else {
            let at = match statements.first() {
                Some(Statement::Query(_, at) | Statement::Explain(_, at)) => *at,
                _ => Span::empty(),
            };
            return Err(err!(Invalid, at, "query_to_stream takes one query").into());
        };
        let at = match &statements[0] {
            Statement::Query(_, at) => *at,
            _ => Span::empty(),
        };
        let plan = Planner::new(&self.catalog).query(q)?;
        let before = self.env.inner.borrow().nodes.len();
        let mut builder = exec::Builder::new(&self.env, true);
        builder.split_size = self.split_size;
        builder.state_backend = self.state_backend.clone();
        builder.idle_timeout = self.idle_timeout;
        builder.streams = self.streams.clone();
        match builder.stream(&plan, false) {
            Ok(exec::Rows::Append(stream)) => Ok(SqlStream {
                stream,
                columns: plan.columns().to_vec(),
            }),
            Ok(exec::Rows::Changes(_)) => {
                self.env.inner.borrow_mut().nodes.truncate(before);
                Err(err!(
                    Unsupported,
                    at,
                    "query_to_stream takes a query whose rows are only inserted; \
                     a GROUP BY without a window produces updates"
                )
                .into())
            }
            Err(e) => {
                self.env.inner.borrow_mut().nodes.truncate(before);
                Err(e)
            }
        }
    }

    /// The text of `EXPLAIN statement`: the plan, and the job graph built in
    /// an environment of its own with this one's configuration.
    fn explain(
        &self,
        catalog: &Catalog,
        s: &Statement,
        at: Span,
        materialize: UpsertMaterialize,
    ) -> Result<String> {
        let mut scratch = catalog.clone();
        let (plan, sink, updates) = match s {
            Statement::Insert { .. } => match plan_statement(&mut scratch, s, materialize)? {
                Some((plan, sink, updates)) => (plan, Some(sink), updates),
                None => return Err(err!(Unsupported, at, "nothing to explain").into()),
            },
            Statement::Query(q, _) => {
                let plan = Planner::new(catalog).query(q)?;
                let updates = SinkUpdates {
                    retract: true,
                    upsert_materialize: false,
                    materializer: None,
                };
                (plan, None, updates)
            }
            _ => {
                return Err(err!(
                    Unsupported,
                    at,
                    "EXPLAIN takes a query or an INSERT INTO statement"
                )
                .into());
            }
        };
        let env = StreamExecutionEnvironment::with_config(self.env.config());
        let mut builder = exec::Builder::new(&env, false);
        builder.split_size = self.split_size;
        builder.state_backend = self.state_backend.clone();
        builder.idle_timeout = self.idle_timeout;
        // A DataStream table shows as a source of its own.
        builder.streams = self
            .streams
            .keys()
            .map(|name| {
                let rows = env.from_collection(Vec::<Row>::new());
                (name.clone(), rows.name(&format!("DataStream: {name}")))
            })
            .collect();
        match &sink {
            Some(t) => builder.insert(&plan, t, &updates)?,
            None => {
                let rows = builder.stream(&plan, updates.retract)?;
                let blackhole = Table {
                    name: "collect".into(),
                    columns: plan.columns().to_vec(),
                    physical: (0..plan.columns().len()).collect(),
                    computed: Vec::new(),
                    watermark: None,
                    connector: Connector::Blackhole,
                    sink_parallelism: None,
                    primary_key: Vec::new(),
                    rowtime_metadata: None,
                };
                builder.sink(&rows, &blackhole, &updates)?;
            }
        }
        let graph = env.job_graph()?;
        Ok(format!(
            "{}\n{}",
            explain::plan_text(&plan, sink.as_deref(), &updates),
            explain::graph_text(&graph)
        ))
    }
}

/// Applies a DDL statement to `catalog`, or plans an `INSERT INTO` (its
/// updates into the sink under `materialize`).
fn plan_statement(
    catalog: &mut Catalog,
    s: &Statement,
    materialize: UpsertMaterialize,
) -> SqlResult<Option<(Plan, Arc<Table>, SinkUpdates)>> {
    match s {
        Statement::CreateTable(def) => {
            let name = def.name.value.clone();
            if catalog.entries.contains_key(&name) {
                if def.if_not_exists {
                    return Ok(None);
                }
                return Err(err!(
                    Invalid,
                    def.name.span,
                    "table '{name}' already exists"
                ));
            }
            let table = Table::from_ddl(def)?;
            catalog.entries.insert(name, Entry::Table(Arc::new(table)));
            Ok(None)
        }
        Statement::CreateView { name, query } => {
            if catalog.entries.contains_key(&name.value) {
                return Err(err!(
                    Invalid,
                    name.span,
                    "table or view '{}' already exists",
                    name.value
                ));
            }
            // Planned once here so that its errors show where it is defined.
            Planner::new(catalog).query(query)?;
            catalog
                .entries
                .insert(name.value.clone(), Entry::View(query.clone()));
            Ok(None)
        }
        Statement::Insert {
            table,
            columns,
            query,
            span,
        } => {
            let sink = sink_table(catalog, table, *span)?;
            let plan = Planner::new(catalog).query(query)?;
            let plan = fit_to_sink(plan, &sink, columns, query.span())?;
            let updates = upsert::sink_updates(&plan, &sink, materialize)?;
            if let Connector::FileSystem { path, .. } = &sink.connector
                && reads(&plan, path)
            {
                return Err(err!(
                    Invalid,
                    *span,
                    "table '{}' writes the file '{}' that the query reads",
                    sink.name,
                    path.display()
                ));
            }
            Ok(Some((plan, sink, updates)))
        }
        Statement::Query(_, at) => Err(err!(
            Unsupported,
            *at,
            "a SELECT on its own has nowhere to go: write INSERT INTO a table (a 'print' table \
             prints)"
        )),
        Statement::Explain(_, at) => Err(err!(Unsupported, *at, "a nested EXPLAIN")),
        Statement::Set { .. } => Ok(None),
    }
}

fn sink_table(catalog: &Catalog, name: &ObjectName, at: Span) -> SqlResult<Arc<Table>> {
    let key = name.to_string().replace('`', "");
    let at = match name.span() {
        s if s.start.line > 0 => s,
        _ => at,
    };
    match catalog.entries.get(&key) {
        Some(Entry::Table(_)) if catalog.streams.contains(&key) => Err(err!(
            Invalid,
            at,
            "'{key}' is a DataStream registered as a table; it cannot be written"
        )),
        Some(Entry::Table(t)) => Ok(t.clone()),
        Some(Entry::View(_)) => Err(err!(Invalid, at, "'{key}' is a view; INSERT INTO a table")),
        None => Err(err!(UnknownTable, at, "unknown table '{key}'")),
    }
}

/// The plan's rows in the sink's physical columns: each query column
/// checked against its sink column (a wider number is cast to it).
fn fit_to_sink(
    plan: Plan,
    sink: &Table,
    columns: &[sqlparser::ast::Ident],
    at: Span,
) -> SqlResult<Plan> {
    if !sink.computed.is_empty() {
        return Err(err!(
            Unsupported,
            at,
            "table '{}' has computed columns and cannot be written",
            sink.name
        ));
    }
    // The sink columns written, in query order.
    let targets: Vec<usize> = if columns.is_empty() {
        sink.physical.clone()
    } else {
        let mut t = Vec::new();
        for c in columns {
            let i = sink
                .columns
                .iter()
                .position(|x| x.name == c.value)
                .ok_or_else(|| {
                    err!(
                        UnknownColumn,
                        c.span,
                        "unknown column '{}' in table '{}'",
                        c.value,
                        sink.name
                    )
                })?;
            t.push(i);
        }
        t
    };
    let produced = plan.columns().to_vec();
    let describe = |cols: Vec<String>| format!("[{}]", cols.join(", "));
    let query_schema = describe(
        produced
            .iter()
            .map(|c| format!("{}: {}", c.name, c.ty))
            .collect(),
    );
    let sink_schema = describe(
        targets
            .iter()
            .map(|&i| format!("{}: {}", sink.columns[i].name, sink.columns[i].ty))
            .collect(),
    );
    if produced.len() != targets.len() {
        return Err(err!(
            TypeMismatch,
            at,
            "column types of query result and sink for '{}' do not match: the query has {} \
             columns, the sink {}. Query schema: {query_schema} Sink schema: {sink_schema}",
            sink.name,
            produced.len(),
            targets.len()
        ));
    }
    let mut project = vec![Expr::Literal(Value::Null); sink.columns.len()];
    let mut cast = false;
    for (k, (c, &t)) in produced.iter().zip(&targets).enumerate() {
        let want = sink.columns[t].ty;
        if !assignable(c.ty, want) {
            return Err(err!(
                TypeMismatch,
                at,
                "column types of query result and sink for '{}' do not match: column '{}' \
                 (position {}) is {}, the sink's '{}' is {want}. Query schema: {query_schema} \
                 Sink schema: {sink_schema}",
                sink.name,
                c.name,
                k + 1,
                c.ty,
                sink.columns[t].name
            ));
        }
        project[t] = match c.ty == want {
            true => Expr::Column(k),
            false => {
                cast = true;
                Expr::Cast(Box::new(Expr::Column(k)), want, false)
            }
        };
    }
    if !cast
        && targets.iter().enumerate().all(|(k, &t)| k == t)
        && targets.len() == sink.columns.len()
    {
        return Ok(plan);
    }
    Ok(Plan::Calc {
        input: Box::new(plan),
        filter: None,
        project,
        columns: sink.columns.clone(),
        text: "select=[sink columns]".into(),
    })
}

/// Whether `plan` reads the file `path` (writing it would destroy the
/// input).
fn reads(plan: &Plan, path: &std::path::Path) -> bool {
    let same = |p: &std::path::Path| {
        p == path
            || matches!(
                (std::fs::canonicalize(p), std::fs::canonicalize(path)),
                (Ok(a), Ok(b)) if a == b
            )
    };
    match plan {
        Plan::Scan(t) => matches!(&t.connector, Connector::FileSystem { path: p, .. } if same(p)),
        Plan::Calc { input, .. } => reads(input, path),
        Plan::WindowAgg(w) => reads(&w.input, path),
        Plan::GroupAgg(g) => reads(&g.input, path),
        Plan::Union(inputs) => inputs.iter().any(|p| reads(p, path)),
    }
}

/// A change a `SET` makes to the environment.
type Setting = Box<dyn FnOnce(&StreamExecutionEnvironment)>;

/// What `SET 'key' = 'value'` does: the options of Flink's that floe
/// has; any other is refused.
fn setting(key: &str, value: &str, at: Span) -> SqlResult<Setting> {
    let bad = || err!(InvalidOption, at, "'{key}' cannot be '{value}'");
    Ok(match key {
        "execution.runtime-mode" if value.eq_ignore_ascii_case("streaming") => Box::new(|_| {}),
        "table.local-time-zone" if value.eq_ignore_ascii_case("UTC") => Box::new(|_| {}),
        "execution.runtime-mode" | "table.local-time-zone" => {
            return Err(err!(
                Unsupported,
                at,
                "'{key}' = '{value}' is not supported (floe runs streaming jobs in UTC)"
            ));
        }
        "parallelism.default" => {
            let p: usize = value.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
            Box::new(move |env| {
                env.set_parallelism(p);
            })
        }
        "pipeline.name" => {
            let name = value.to_string();
            Box::new(move |env| {
                env.set_job_name(name);
            })
        }
        _ => {
            return Err(err!(
                Unsupported,
                at,
                "SET '{key}' is not supported (execution.runtime-mode, parallelism.default, \
                 pipeline.name, {}, {IDLE_TIMEOUT} and table.local-time-zone are)",
                upsert::UPSERT_MATERIALIZE
            ));
        }
    })
}

/// Flink's option for the idleness of source partitions.
const IDLE_TIMEOUT: &str = "table.exec.source.idle-timeout";

/// A Flink duration (`'5 s'`, `'500ms'`, `'1 min'`; a bare number is
/// milliseconds) as `table.exec.source.idle-timeout` takes it: zero turns
/// idleness off (`None`).
fn parse_duration(value: &str, at: Span) -> SqlResult<Option<std::time::Duration>> {
    let text = value.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let unit_ms: Option<u64> = match text[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => Some(1),
        "s" | "sec" | "secs" | "second" | "seconds" => Some(1_000),
        "min" | "minute" | "minutes" => Some(60_000),
        "h" | "hour" | "hours" => Some(3_600_000),
        "d" | "day" | "days" => Some(86_400_000),
        _ => None,
    };
    let ms = text[..digits]
        .parse::<u64>()
        .ok()
        .zip(unit_ms)
        .and_then(|(n, unit)| n.checked_mul(unit))
        .ok_or_else(|| {
            err!(
                InvalidOption,
                at,
                "'{IDLE_TIMEOUT}' cannot be '{value}': write a duration such as '5 s' or '500 ms'"
            )
        })?;
    Ok((ms > 0).then(|| std::time::Duration::from_millis(ms)))
}
