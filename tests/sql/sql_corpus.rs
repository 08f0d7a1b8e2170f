//! The SQL corpus checked against real Apache Flink: every statement file
//! `tests/sql_corpus/NAME.sql` runs through floe, and its output rows,
//! sorted, must equal `NAME.flink.csv`, the rows Apache Flink's own SQL
//! wrote for the same text over the same input files
//! (`scripts/sql_corpus_flink.py` regenerates them; the version is on each
//! file's first line). The inputs (`tests/sql_corpus/input/`, from
//! `scripts/sql_corpus_input.py`) have out-of-order and late rows, and every
//! source emits its watermark per row (`'on-event'`), so which rows are late
//! does not depend on timing, in Flink or in floe.
//!
//! `tests/sql_corpus/postgres/NAME.sql` insert updating aggregates into a
//! `jdbc` table of the PostgreSQL `scripts/services.sh` starts: their
//! expected rows are the rows Flink's JDBC connector left in the table, and
//! floe's run must leave the same rows (each column as PostgreSQL's `::text`
//! gives it).

use floe::StreamExecutionEnvironment;
use floe::sql::SqlSession;
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql_corpus")
}

/// The statement files, by name.
fn names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus())
        .expect("the corpus directory")
        .map(|e| {
            e.expect("a corpus entry")
                .file_name()
                .into_string()
                .expect("UTF-8")
        })
        .filter_map(|f| f.strip_suffix(".sql").map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Flink's rows: the expected file without its `#` header.
fn expected(name: &str) -> Vec<String> {
    let path = corpus().join(format!("{name}.flink.csv"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/sql_corpus_flink.py)", path.display()));
    assert!(
        text.starts_with("# Apache Flink "),
        "{}: no version header",
        path.display()
    );
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// floe's rows for `name` at `parallelism`, sorted, or the error.
fn run(name: &str, parallelism: usize) -> Result<Vec<String>, floe::Error> {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = dir.path().join("out.csv");
    let script = std::fs::read_to_string(corpus().join(format!("{name}.sql")))
        .expect("the statement file")
        .replace("${INPUT}", &corpus().join("input").display().to_string())
        .replace("${OUTPUT}", &output.display().to_string());
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    let (planned, result) = SqlSession::new(&env).execute_sql(&script)?;
    assert_eq!(planned.inserts, 1, "{name}.sql inserts once");
    assert!(result.is_some(), "{name}.sql ran");
    let text = std::fs::read_to_string(&output).expect("the output file");
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
    rows.sort();
    Ok(rows)
}

/// The first difference of two sorted row lists, for the failure message.
fn first_difference(got: &[String], want: &[String]) -> String {
    let extra = got.iter().find(|r| want.binary_search(r).is_err());
    let missing = want.iter().find(|r| got.binary_search(r).is_err());
    format!(
        "{} rows from floe, {} from Flink; first row only floe wrote: {extra:?}; first row \
         only Flink wrote: {missing:?}",
        got.len(),
        want.len()
    )
}

#[test]
fn every_statement_gives_the_rows_apache_flink_gave() {
    let names = names();
    assert!(names.len() >= 15, "the corpus has its statements");
    let mut failures = Vec::new();
    for name in &names {
        let want = expected(name);
        assert!(!want.is_empty(), "{name}: Flink wrote rows");
        for parallelism in [1, 2] {
            match run(name, parallelism) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!(
                    "{name}.sql at parallelism {parallelism}: {}",
                    first_difference(&got, &want)
                )),
                Err(e) => failures.push(format!("{name}.sql at parallelism {parallelism}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_expected_file_has_its_statement() {
    let names = names();
    for entry in std::fs::read_dir(corpus()).expect("the corpus directory") {
        let file = entry
            .expect("an entry")
            .file_name()
            .into_string()
            .expect("UTF-8");
        if let Some(name) = file.strip_suffix(".flink.csv") {
            assert!(names.iter().any(|n| n == name), "{file} has no {name}.sql");
        }
    }
}

/// The updating statements, `postgres/NAME`.
#[cfg(feature = "postgres")]
fn postgres_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus().join("postgres"))
        .expect("the corpus's postgres directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .into_string()
                .expect("UTF-8")
        })
        .filter_map(|f| f.strip_suffix(".sql").map(|n| format!("postgres/{n}")))
        .collect();
    names.sort();
    names
}

/// The rows floe's run of `postgres/NAME` at `parallelism` leaves in a
/// fresh PostgreSQL table (with checkpoints: the sink's two-phase commit),
/// sorted, each `col::text,..` (NULL empty), or the error.
#[cfg(feature = "postgres")]
fn run_into_postgres(pg: &str, name: &str, parallelism: usize) -> Result<Vec<String>, floe::Error> {
    use crate::kafka_support::query;
    use crate::upsert_oracle::host_port_db;
    let text = std::fs::read_to_string(corpus().join(format!("{name}.sql"))).expect("the script");
    let create = text
        .lines()
        .find_map(|l| l.strip_prefix("-- postgres: "))
        .unwrap_or_else(|| panic!("{name}.sql: no '-- postgres:' line"));
    let table = format!(
        "corpus_{}_{parallelism}_{}",
        name.trim_start_matches("postgres/"),
        std::process::id()
    );
    let (host_port, db) = host_port_db(pg);
    query(pg, &format!("DROP TABLE IF EXISTS {table}"));
    query(pg, &create.replace("${TABLE}", &table));
    let script = text
        .replace("${INPUT}", &corpus().join("input").display().to_string())
        .replace(
            "${JDBC_URL}",
            &format!("jdbc:postgresql://{host_port}/{db}"),
        )
        .replace("${TABLE}", &table);
    let dir = tempfile::tempdir().expect("temp dir");
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    if parallelism > 1 {
        env.enable_checkpointing(std::time::Duration::from_millis(20));
        let mut config = env.config().checkpoint;
        config.dir = Some(dir.path().join("ckpt"));
        env.set_checkpoint_config(config);
    }
    let ran = SqlSession::new(&env).execute_sql(&script);
    let columns: Vec<String> = query(
        pg,
        &format!(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_name = '{table}' ORDER BY ordinal_position"
        ),
    )
    .iter()
    .map(|r| r.get::<_, String>(0))
    .collect();
    let select: Vec<String> = columns.iter().map(|c| format!("{c}::text")).collect();
    let mut rows: Vec<String> = query(pg, &format!("SELECT {} FROM {table}", select.join(", ")))
        .iter()
        .map(|r| {
            (0..columns.len())
                .map(|i| r.get::<_, Option<String>>(i).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    rows.sort();
    query(pg, &format!("DROP TABLE {table}"));
    ran?;
    Ok(rows)
}

#[cfg(feature = "postgres")]
#[test]
fn every_updating_statement_leaves_the_table_apache_flink_left() {
    let Some(pg) = crate::kafka_support::postgres_url() else {
        return;
    };
    let names = postgres_names();
    assert!(names.len() >= 2, "the corpus has its updating statements");
    let mut failures = Vec::new();
    for name in &names {
        let want = expected(name);
        assert!(!want.is_empty(), "{name}: Flink left rows");
        for parallelism in [1, 2] {
            match run_into_postgres(&pg, name, parallelism) {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!(
                    "{name}.sql at parallelism {parallelism}: {}",
                    first_difference(&got, &want)
                )),
                Err(e) => failures.push(format!("{name}.sql at parallelism {parallelism}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
