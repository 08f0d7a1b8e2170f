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
"""
import glob
import os
import re
import shutil
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


def run(name, out_dir):
    with open(os.path.join(CORPUS, name + ".sql")) as f:
        text = f.read()
    text = text.replace("${INPUT}", os.path.join(CORPUS, "input")).replace("${OUTPUT}", out_dir)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
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
