#!/usr/bin/env python3
"""Runs benches/sql_window/window.sql on Apache Flink (PyFlink, a local
MiniCluster) and prints `job_ms=N` (the job's net runtime, JobManager's view:
JVM and MiniCluster start left out).

    python flink_sql.py INPUT OUTPUT_DIR PARALLELISM
"""
import os
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    input_path, out_dir, parallelism = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(os.path.join(HERE, "window.sql")) as f:
        text = "\n".join(line.split("--", 1)[0] for line in f)
    text = text.replace("${INPUT}", input_path).replace("${OUTPUT}", out_dir)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", parallelism)
    env.get_config().set("table.local-time-zone", "UTC")
    for s in (s.strip() for s in text.split(";")):
        if not s:
            continue
        if s.upper().startswith("INSERT"):
            result = env.execute_sql(s)
            result.wait()
            job = result.get_job_client().get_job_execution_result().result()
            print("job_ms=%d" % job.get_net_runtime(), flush=True)
        else:
            env.execute_sql(s)


if __name__ == "__main__":
    main()
