//! Each kind of SQL error is one line naming the line and column of the
//! problem in the script, as a typed [`SqlError`]; nothing of a script
//! runs, or is added to the job, when any statement of it fails.

use floe::StreamExecutionEnvironment;
use floe::sql::{SqlError, SqlErrorKind, SqlSession};

/// Two tables over files that exist, then `rest` from line 3 on.
fn script(dir: &std::path::Path, rest: &str) -> String {
    let input = dir.join("in.csv");
    std::fs::write(&input, "a,1,2024-01-01 00:00:00\n").expect("write");
    format!(
        "CREATE TABLE clicks (name STRING, n INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE out (name STRING, n INT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         {rest}",
        input.display(),
        dir.join("out.csv").display()
    )
}

fn error(rest: &str) -> SqlError {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = StreamExecutionEnvironment::new();
    match SqlSession::new(&env).plan_sql(&script(dir.path(), rest)) {
        Err(floe::Error::Sql(e)) => {
            assert!(!e.to_string().contains('\n'), "one line: {e}");
            e
        }
        other => panic!("expected a SQL error, got {other:?}"),
    }
}

fn check(rest: &str, kind: SqlErrorKind, line: u64, column: u64, message: &str) {
    let e = error(rest);
    assert_eq!(
        (e.kind.clone(), e.line, e.column),
        (kind, line, column),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!("line {line}, column {column}: {message}")
    );
}

#[test]
fn an_unknown_column_names_its_table() {
    check(
        "INSERT INTO out SELECT x, n FROM clicks;",
        SqlErrorKind::UnknownColumn,
        3,
        24,
        "unknown column 'x' in table 'clicks'",
    );
}

#[test]
fn an_unknown_table_is_named_where_it_is_used() {
    check(
        "INSERT INTO out\nSELECT name, n FROM klicks;",
        SqlErrorKind::UnknownTable,
        4,
        21,
        "unknown table 'klicks'",
    );
    check(
        "INSERT INTO sink SELECT name, n FROM clicks;",
        SqlErrorKind::UnknownTable,
        3,
        13,
        "unknown table 'sink'",
    );
}

#[test]
fn a_type_mismatch_names_the_types() {
    check(
        "INSERT INTO out SELECT name, n FROM clicks WHERE name > 3;",
        SqlErrorKind::TypeMismatch,
        3,
        50,
        "cannot compare values of type STRING and INT",
    );
    let e = error("INSERT INTO out SELECT n, name FROM clicks;");
    assert_eq!(e.kind, SqlErrorKind::TypeMismatch, "{e}");
    assert_eq!((e.line, e.column), (3, 17), "{e}");
    assert!(
        e.message.starts_with(
            "column types of query result and sink for 'out' do not match: column 'n' \
             (position 1) is INT, the sink's 'name' is STRING"
        ),
        "{e}"
    );
}

#[test]
fn unsupported_constructs_say_so_in_one_line() {
    check(
        "INSERT INTO out SELECT name, SUM(n) FROM clicks GROUP BY name;",
        SqlErrorKind::Unsupported,
        3,
        17,
        "Table sink 'out' doesn't support consuming update changes which is produced by node \
         GroupAggregate(groupBy=[name])",
    );
    let e = error(
        "INSERT INTO out SELECT name, n FROM TABLE(SLIDE(TABLE clicks, DESCRIPTOR(ts), \
         INTERVAL '1' MINUTE));",
    );
    assert_eq!(e.kind, SqlErrorKind::Unsupported, "{e}");
    assert!(
        e.message.contains("table function SLIDE is not supported"),
        "{e}"
    );
    check(
        "SET 'table.exec.mini-batch.enabled' = 'true';",
        SqlErrorKind::Unsupported,
        3,
        1,
        "SET 'table.exec.mini-batch.enabled' is not supported (execution.runtime-mode, \
         parallelism.default, pipeline.name, table.exec.sink.upsert-materialize, \
         table.exec.source.idle-timeout and table.local-time-zone are)",
    );
    check(
        "SET 'table.exec.sink.upsert-materialize' = 'ALWAYS';",
        SqlErrorKind::InvalidOption,
        3,
        1,
        "'table.exec.sink.upsert-materialize' cannot be 'ALWAYS': write NONE, AUTO or FORCE",
    );
    // Flink reads the value in any case, and only the value.
    check(
        "INSERT INTO out SELECT name, n FROM clicks;
  SET 'table.exec.sink.upsert-materialize' = ' none';",
        SqlErrorKind::InvalidOption,
        4,
        3,
        "'table.exec.sink.upsert-materialize' cannot be ' none': write NONE, AUTO or FORCE",
    );
    check(
        "SET 'table.exec.source.idle-timeout' = '5 fortnights';",
        SqlErrorKind::InvalidOption,
        3,
        1,
        "'table.exec.source.idle-timeout' cannot be '5 fortnights': write a duration such as \
         '5 s' or '500 ms'",
    );
    let e = error("INSERT INTO out SELECT a.name, b.n FROM clicks a JOIN clicks b ON a.n = b.n;");
    assert_eq!(e.kind, SqlErrorKind::Unsupported, "{e}");
}

/// The column (1-based) where `needle` starts in `line`.
fn column_of(line: &str, needle: &str) -> u64 {
    1 + line
        .find(needle)
        .unwrap_or_else(|| panic!("{needle} in {line}")) as u64
}

#[test]
fn connector_options_are_checked_as_flink_checks_them() {
    let kafka = "'connector' = 'kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'h:1'";
    let line =
        format!("CREATE TABLE k (a STRING) WITH ({kafka}, 'format' = 'json', 'scan.foo' = '1');");
    check(
        &line,
        SqlErrorKind::InvalidOption,
        3,
        column_of(&line, "'scan.foo'"),
        "unsupported options found for 'kafka': scan.foo",
    );
    let line = format!("CREATE TABLE k (a STRING) WITH ({kafka}, 'format' = 'avro');");
    check(
        &line,
        SqlErrorKind::Unsupported,
        3,
        column_of(&line, "'format'"),
        "format 'avro' is not supported (csv and json are, and raw for Kafka)",
    );
    let line = "CREATE TABLE k (a STRING) WITH ('connector' = 'kafka', 'topic' = 't');";
    check(
        line,
        SqlErrorKind::InvalidOption,
        3,
        column_of(line, "k ("),
        "table 'k' (kafka) has no 'properties.bootstrap.servers' option",
    );
    let line = format!(
        "CREATE TABLE k (a STRING) WITH ({kafka}, 'format' = 'csv', 'scan.startup.mode' = 'specific-offsets');"
    );
    check(
        &line,
        SqlErrorKind::Unsupported,
        3,
        column_of(&line, "'scan.startup.mode'"),
        "'scan.startup.mode' = 'specific-offsets' is not supported (earliest-offset, \
         latest-offset, group-offsets and timestamp are)",
    );
    let line = format!(
        "CREATE TABLE k (a STRING) WITH ({kafka}, 'format' = 'raw', 'sink.delivery-guarantee' = 'exactly-once');"
    );
    check(
        &line,
        SqlErrorKind::InvalidOption,
        3,
        column_of(&line, "'sink.delivery-guarantee'"),
        "'sink.transactional-id-prefix' must be specified when using \
         DeliveryGuarantee.EXACTLY_ONCE",
    );
    let line = format!("CREATE TABLE k (a STRING, b INT) WITH ({kafka}, 'format' = 'raw');");
    let e = error(&line);
    assert_eq!(
        (e.kind.clone(), e.line),
        (SqlErrorKind::Unsupported, 3),
        "{e}"
    );
    assert!(
        e.message
            .contains("the 'raw' format takes one STRING column"),
        "{e}"
    );
    let upsert =
        "'connector' = 'upsert-kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'h:1'";
    let line = format!(
        "CREATE TABLE u (a STRING, n BIGINT) WITH ({upsert}, 'key.format' = 'raw', 'value.format' = 'json');"
    );
    check(
        &line,
        SqlErrorKind::InvalidOption,
        3,
        column_of(&line, "'connector'"),
        "'upsert-kafka' tables require to define a PRIMARY KEY constraint (table 'u' has none): \
         the PRIMARY KEY names the columns written to the Kafka message key",
    );
    let line = "CREATE TABLE j (a STRING) WITH ('connector' = 'jdbc', 'url' = 'jdbc:mysql://h/db', 'table-name' = 't');";
    check(
        line,
        SqlErrorKind::Unsupported,
        3,
        column_of(line, "'url'"),
        "'url' is not a PostgreSQL JDBC URL: write 'jdbc:postgresql://host:port/database'",
    );
}

/// The sinks need their connectors' features (without them the `CREATE
/// TABLE` is refused first).
#[cfg(all(feature = "kafka", feature = "postgres"))]
#[test]
fn updates_go_only_into_sinks_that_take_them() {
    let jdbc = "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://h:5432/db', 'table-name' = 't'";
    let upsert = "'connector' = 'upsert-kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'h:1', \
                  'key.format' = 'json', 'value.format' = 'json'";
    let kafka = "'connector' = 'kafka', 'topic' = 't', 'properties.bootstrap.servers' = 'h:1', \
                 'format' = 'csv'";
    let query = "INSERT INTO s SELECT name, COUNT(*) FROM clicks GROUP BY name;";
    let select = column_of(query, "SELECT");
    check(
        &format!("CREATE TABLE s (name STRING, c BIGINT) WITH ({jdbc});\n{query}"),
        SqlErrorKind::Unsupported,
        4,
        select,
        "Table sink 's' (jdbc) has no PRIMARY KEY: please declare primary key for sink table \
         when query contains update/delete record (node GroupAggregate(groupBy=[name]))",
    );
    check(
        &format!("CREATE TABLE s (name STRING, c BIGINT) WITH ({kafka});\n{query}"),
        SqlErrorKind::Unsupported,
        4,
        select,
        "Table sink 's' doesn't support consuming update changes which is produced by node \
         GroupAggregate(groupBy=[name])",
    );
    // Another primary key: Flink's SinkUpsertMaterializer keyed by it.
    let dir = tempfile::tempdir().expect("temp dir");
    let env = StreamExecutionEnvironment::new();
    let explain = format!(
        "CREATE TABLE s (name STRING, c BIGINT, PRIMARY KEY (c) NOT ENFORCED) WITH ({upsert});\n\
         EXPLAIN {query}"
    );
    let planned = SqlSession::new(&env)
        .plan_sql(&script(dir.path(), &explain))
        .expect("plans");
    let text = &planned.explains[0];
    assert!(
        text.contains(
            "Sink(table=[s], connector=[upsert-kafka], fields=[name, c], upsertMaterialize=[true])"
        ) && text.contains("SinkMaterializer(pk=[c])"),
        "{text}"
    );
    // The key of the sink is the group key: no materializer (the servers
    // are not asked while planning fails nowhere else).
    let explain = format!(
        "CREATE TABLE s (name STRING, c BIGINT, PRIMARY KEY (name) NOT ENFORCED) WITH ({jdbc});\n\
         EXPLAIN {query}"
    );
    let planned = SqlSession::new(&env)
        .plan_sql(&script(dir.path(), &explain))
        .expect("plans");
    assert!(
        planned.explains[0].contains("GroupAggregate(groupBy=[name], select=[name, COUNT(*)])")
            && !planned.explains[0].contains("SinkMaterializer"),
        "{}",
        planned.explains[0]
    );
}

#[test]
fn a_window_needs_an_event_time_attribute_and_its_bounds_grouped() {
    let e = error(
        "CREATE TABLE plain (name STRING, ts TIMESTAMP(3)) WITH ('connector' = 'filesystem', \
         'path' = '/x', 'format' = 'csv');\n\
         INSERT INTO out SELECT name, CAST(COUNT(*) AS INT) FROM TABLE(\n\
         TUMBLE(TABLE plain, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY window_start, \
         window_end, name;",
    );
    assert_eq!(
        (e.kind.clone(), e.line, e.column),
        (SqlErrorKind::TypeMismatch, 5, 21),
        "{e}"
    );
    assert!(e.message.contains("event-time attribute"), "{e}");
    let e = error(
        "INSERT INTO out SELECT name, CAST(COUNT(*) AS INT) FROM TABLE(TUMBLE(TABLE clicks, \
         DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY window_start, name;",
    );
    assert!(
        e.message
            .contains("must GROUP BY both window_start and window_end"),
        "{e}"
    );
    let e = error(
        "INSERT INTO out SELECT name, n FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), \
         INTERVAL '1' MINUTE)) GROUP BY window_start, window_end, name;",
    );
    assert_eq!(e.kind, SqlErrorKind::Invalid, "{e}");
    assert!(e.message.contains("'n' is not being grouped"), "{e}");
}

#[test]
fn a_syntax_error_keeps_the_parsers_position() {
    check(
        "INSERT INTO out SELEC name, n FROM clicks;",
        SqlErrorKind::Syntax,
        3,
        17,
        "Expected: SELECT, VALUES, or a subquery in the query body, found: SELEC",
    );
}

#[test]
fn nothing_is_added_to_the_job_when_a_later_statement_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = StreamExecutionEnvironment::new();
    let mut session = SqlSession::new(&env);
    let bad = script(
        dir.path(),
        "INSERT INTO out SELECT name, n FROM clicks;\nINSERT INTO out SELECT nope FROM clicks;",
    );
    let e = session.plan_sql(&bad).expect_err("the second insert fails");
    assert!(e.to_string().starts_with("line 4, column 24: "), "{e}");
    // The failed script defined nothing: its tables are unknown.
    let e = session
        .plan_sql("INSERT INTO out SELECT name, n FROM clicks;")
        .expect_err("no table 'out'");
    assert!(e.to_string().contains("unknown table 'out'"), "{e}");
    // And the environment holds no operator of it.
    assert!(env.job_graph().is_err(), "an empty job");
    assert!(!dir.path().join("out.csv").exists());
}

mod bad_input {
    use floe::StreamExecutionEnvironment;
    use floe::sql::SqlSession;
    use proptest::prelude::*;

    /// A valid script to cut up: every statement kind, expressions and a
    /// window function.
    const SCRIPT: &str = "CREATE TABLE t (a STRING, b INT, c DECIMAL(5, 2), d AS b * 2, \
        ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = \
        'filesystem', 'path' = '/nonexistent/in.csv', 'format' = 'csv');\n\
        CREATE TABLE o (a STRING, n BIGINT, s INT) WITH ('connector' = 'blackhole');\n\
        CREATE VIEW v AS SELECT a, b, ts FROM t WHERE b > 0 AND a LIKE 'x%';\n\
        EXPLAIN INSERT INTO o SELECT UPPER(a), COUNT(*), CAST(SUM(b) AS INT) FROM \
        TABLE(HOP(TABLE v, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)) \
        GROUP BY window_start, window_end, a HAVING MAX(b) IS NOT NULL;\n\
        INSERT INTO o SELECT CASE WHEN b IN (1, 2) THEN 'x' ELSE COALESCE(a, '') END, \
        CAST(b AS BIGINT), CHAR_LENGTH(SUBSTRING(a FROM 2 FOR 3)) FROM t;";

    fn plan(script: &str) {
        let env = StreamExecutionEnvironment::new();
        // Ok or a typed error; a panic fails the test.
        let _ = SqlSession::new(&env).plan_sql(script);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn a_cut_or_changed_script_never_panics(
            cut in 0usize..SCRIPT.len(),
            at in 0usize..SCRIPT.len(),
            with in prop::sample::select(vec!["", "(", ")", ",", "'", "`", "-", "*", "9", "NULL",
                "SELECT", "TABLE", "9999999999999999999999", "1.5E400", ";", "/", "%"]),
        ) {
            plan(&SCRIPT[..cut]);
            let mut changed = SCRIPT.as_bytes().to_vec();
            let end = (at + 1 + cut % 7).min(changed.len());
            changed.splice(at..end, with.bytes());
            if let Ok(text) = String::from_utf8(changed) {
                plan(&text);
            }
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            plan(&text);
        }
    }
}

#[test]
fn a_sink_may_not_write_the_file_its_query_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "a,1\n").expect("write");
    let script = format!(
        "CREATE TABLE t (a STRING, n INT) WITH ('connector' = 'filesystem', 'path' = '{p}', \
         'format' = 'csv');\nCREATE TABLE o (a STRING, n INT) WITH ('connector' = \
         'filesystem', 'path' = '{p}', 'format' = 'csv');\nINSERT INTO o SELECT a, n FROM t;",
        p = input.display()
    );
    let env = StreamExecutionEnvironment::new();
    let e = SqlSession::new(&env)
        .plan_sql(&script)
        .expect_err("the input would be truncated");
    assert!(
        e.to_string()
            .starts_with("line 3, column 1: table 'o' writes the file"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&input).expect("read"), "a,1\n");
}

#[test]
fn a_date_format_pattern_is_checked_where_it_is_written() {
    check(
        "INSERT INTO out SELECT DATE_FORMAT(ts, 'yyyy-MM-ddTHH'), n FROM clicks;",
        SqlErrorKind::Invalid,
        3,
        40,
        "DATE_FORMAT pattern 'yyyy-MM-ddTHH': unknown pattern letter: T",
    );
    check(
        "INSERT INTO out SELECT DATE_FORMAT(name, 'YYYY'), n FROM clicks;",
        SqlErrorKind::Invalid,
        3,
        42,
        "DATE_FORMAT pattern 'YYYY': pattern letter 'Y' (locale or week based) is not supported",
    );
    check(
        "INSERT INTO out SELECT DATE_FORMAT(n, 'yyyy'), n FROM clicks;",
        SqlErrorKind::TypeMismatch,
        3,
        36,
        "DATE_FORMAT needs a TIMESTAMP or a STRING, not INT",
    );
}
