#!/usr/bin/env python3
"""Runs each statement file of the SQL corpus (tests/sql_corpus/NAME.sql) on
real Apache Flink and writes its output rows, sorted, as the expected file
NAME.flink.csv that tests/sql/sql_corpus.rs compares floe's rows with.

Needs PyFlink (the `apache-flink` package: a local MiniCluster in one JVM,
Java 17). Each file is a script of `SET`, `CREATE TABLE`, `CREATE TEMPORARY
VIEW` and one `INSERT INTO out`; `${INPUT}` is replaced by the input
directory and `${OUTPUT}` by a fresh directory the filesystem sink writes
its part files into. Flink runs in streaming mode at parallelism 1, in UTC.

    python scripts/sql_corpus_flink.py [NAME ...]   # default: every file

`postgres/NAME.sql` scripts insert into a `jdbc` table: their `-- postgres:`
line creates it in the PostgreSQL of `FLOE_TEST_POSTGRES_URL`
(`scripts/services.sh start` writes it to target/services.env), Flink writes
it through its JDBC connector (the jars in `FLINK_JDBC_JARS`: the
`flink-connector-jdbc-core` and `-postgres` 4.0.0-2.0 and the PostgreSQL
driver, from Maven Central), and the expected rows are the table's rows
at the end, each column as PostgreSQL's `::text` gives it, joined by commas.

    FLINK_JDBC_JARS=DIR python scripts/sql_corpus_flink.py postgres/NAME
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from pyflink.table import EnvironmentSettings, TableEnvironment
from pyflink.version import __version__ as FLINK_VERSION

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.normpath(os.path.join(HERE, "..", "tests", "sql_corpus"))


def statements(text):
    """The script's statements: `--` comments dropped, split on `;`."""
    text = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return [s.strip() for s in text.split(";") if s.strip()]


def postgres():
    """`(host, port, database)` of FLOE_TEST_POSTGRES_URL (user floe)."""
    url = os.environ["FLOE_TEST_POSTGRES_URL"]
    m = re.fullmatch(r"postgres://[^@]+@([^:/]+):(\d+)/(\w+)", url)
    if not m:
        sys.exit("FLOE_TEST_POSTGRES_URL: expected postgres://user:password@host:port/db")
    return m.groups()


def psql(sql):
    host, port, db = postgres()
    out = subprocess.run(
        ["psql", "-X", "-A", "-t", "-F", ",", "-v", "ON_ERROR_STOP=1",
         "-h", host, "-p", port, "-U", "floe", "-d", db, "-c", sql],
        env=dict(os.environ, PGPASSWORD="floe"), check=True, capture_output=True, text=True,
    )
    return [line for line in out.stdout.splitlines() if line]


def table_rows(table, columns):
    """The table's rows, each column as `::text`, NULL as an empty field."""
    select = ", ".join("%s::text" % c for c in columns)
    return psql("SELECT %s FROM %s" % (select, table))


def run(name, out_dir):
    with open(os.path.join(CORPUS, name + ".sql")) as f:
        text = f.read()
    text = text.replace("${INPUT}", os.path.join(CORPUS, "input")).replace("${OUTPUT}", out_dir)
    table = None
    create = re.search(r"^-- postgres: (.*)$", text, re.MULTILINE)
    if create:
        host, port, db = postgres()
        table = "corpus_flink_%d" % os.getpid()
        text = text.replace("${TABLE}", table).replace(
            "${JDBC_URL}", "jdbc:postgresql://%s:%s/%s" % (host, port, db)
        )
        psql("DROP TABLE IF EXISTS %s" % table)
        psql(create.group(1).replace("${TABLE}", table))
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    if table:
        jars = sorted(glob.glob(os.path.join(os.environ["FLINK_JDBC_JARS"], "*.jar")))
        config.set("pipeline.jars", ";".join("file://" + j for j in jars))
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    config.set("pipeline.auto-watermark-interval", "0 ms")
    for s in statements(text):
        m = re.fullmatch(r"SET\s+'([^']+)'\s*=\s*'([^']*)'", s, re.IGNORECASE)
        if m:
            config.set(m.group(1), m.group(2))
        elif s.upper().startswith("INSERT"):
            env.execute_sql(s).wait()
        else:
            env.execute_sql(s)
    if table:
        columns = psql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = '%s' "
            "ORDER BY ordinal_position" % table
        )
        rows = sorted(table_rows(table, columns))
        psql("DROP TABLE %s" % table)
        return rows
    rows = []
    # Part files, committed at the end of the bounded input.
    for path in sorted(glob.glob(os.path.join(out_dir, "**", "*"), recursive=True)):
        if os.path.isfile(path) and not os.path.basename(path).startswith("."):
            with open(path) as f:
                rows.extend(line.rstrip("\n") for line in f if line.strip())
    return sorted(rows)


def main():
    names = sys.argv[1:] or sorted(
        os.path.basename(p)[: -len(".sql")] for p in glob.glob(os.path.join(CORPUS, "*.sql"))
    )
    failed = []
    for name in names:
        out_dir = tempfile.mkdtemp(prefix="sql-corpus-")
        try:
            rows = run(name, out_dir)
        except Exception as e:  # noqa: BLE001 - one line per failed file, then go on
            failed.append(name)
            causes = [l.strip() for l in str(e).splitlines() if "Exception: " in l]
            print("%s: FAILED: %s" % (name, " / ".join(causes[-2:])[:2000]), flush=True)
            continue
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        with open(os.path.join(CORPUS, name + ".flink.csv"), "w") as f:
            f.write("# Apache Flink %s: %s.sql, rows sorted\n" % (FLINK_VERSION, name))
            f.writelines(row + "\n" for row in rows)
        print("%s: %d rows" % (name, len(rows)), flush=True)
    if failed:
        sys.exit("failed: " + " ".join(failed))


if __name__ == "__main__":
    main()
