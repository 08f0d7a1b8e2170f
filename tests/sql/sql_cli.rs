//! `floe sql` end to end: a script file run as a job (also with
//! checkpoints, through the two-phase-commit file sink), `EXPLAIN` on
//! stdout, and an error as one line with exit code 1.

use floe::text::mix64;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

fn floe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .expect("floe runs")
}

/// Seeded `key,value,ts` lines in event-time order, and the expected
/// `key,window_start,count,sum` lines of 1-minute windows (nothing is late:
/// the rows are in order).
fn data(path: &Path) -> Vec<String> {
    let mut text = String::new();
    let mut windows: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    let mut t = 0i64;
    for i in 0..1500u64 {
        let h = mix64(i ^ 0x5eed);
        t += (h % 500) as i64;
        let key = format!("user{}", h % 7);
        let value = ((h >> 16) % 100) as i64;
        let s = t / 1000;
        text.push_str(&format!(
            "{key},{value},2024-03-01 {:02}:{:02}:{:02}.{:03}\n",
            s / 3600,
            s / 60 % 60,
            s % 60,
            t % 1000
        ));
        let w = windows.entry((key, t - t % 60_000)).or_default();
        w.0 += 1;
        w.1 += value;
    }
    std::fs::write(path, text).expect("write the input");
    windows
        .into_iter()
        .map(|((key, start), (n, sum))| {
            let s = start / 1000;
            // A timestamp is quoted (its space), as Flink's CSV writer does.
            format!(
                "{key},\"2024-03-01 {:02}:{:02}:00\",{n},{sum}",
                s / 3600,
                s / 60 % 60
            )
        })
        .collect()
}

fn script(input: &Path, output: &Path) -> String {
    format!(
        "-- clicks per user and minute\n\
         CREATE TABLE clicks (\n\
           user_name STRING,\n\
           amount INT,\n\
           ts TIMESTAMP(3),\n\
           WATERMARK FOR ts AS ts - INTERVAL '5' SECOND\n\
         ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE per_minute (user_name STRING, minute TIMESTAMP(3), clicks BIGINT, total INT)\n\
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         INSERT INTO per_minute\n\
         SELECT user_name, window_start, COUNT(*), SUM(amount)\n\
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n\
         GROUP BY window_start, window_end, user_name;\n",
        input.display(),
        output.display()
    )
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .expect("the output")
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn sql_f_runs_a_script_as_a_job() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    let want = data(&input);
    let job = dir.path().join("job.sql");
    std::fs::write(&job, script(&input, &output)).expect("write the script");
    let out = floe(&[
        "sql",
        "-f",
        job.to_str().expect("utf-8"),
        "--parallelism",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("records=1500 ")),
        "{stderr}"
    );
    assert_eq!(sorted_lines(&output), want);
}

#[test]
fn sql_takes_the_checkpoint_flags_of_run_jobs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    let want = data(&input);
    let checkpoints = dir.path().join("checkpoints");
    let script = script(&input, &output);
    let out = floe(&[
        "sql",
        "-e",
        &script,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        checkpoints.to_str().expect("utf-8"),
        "--finish-after-checkpoints",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("records="))
        .unwrap_or_else(|| panic!("a summary line: {stderr}"));
    let completed: u64 = summary
        .split_whitespace()
        .find_map(|f| f.strip_prefix("checkpoints="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("checkpoints= in {summary}"));
    assert!(completed >= 2, "{summary}");
    assert_eq!(sorted_lines(&output), want);
}

#[test]
fn sql_keeps_keyed_state_in_redb_with_the_state_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    let want = data(&input);
    // The totals per user, from the input itself.
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for line in std::fs::read_to_string(&input).expect("the input").lines() {
        let mut fields = line.split(',');
        let (key, value) = (fields.next().expect("key"), fields.next().expect("value"));
        *totals.entry(key.to_string()).or_default() += value.parse::<i64>().expect("a value");
    }
    let state = dir.path().join("state");
    let script = format!(
        "{}CREATE TABLE totals (user_name STRING, total INT, PRIMARY KEY (user_name) NOT ENFORCED)\n\
         WITH ('connector' = 'print');\n\
         INSERT INTO totals SELECT user_name, SUM(amount) FROM clicks GROUP BY user_name;\n",
        script(&input, &output)
    );
    // Throttled sinks keep the job running while the state files are
    // looked for (each is deleted when its subtask ends).
    let child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "sql",
            "-e",
            &script,
            "--parallelism",
            "2",
            "--split-size",
            "4096",
            "--state",
            "redb",
            "--state-dir",
            state.to_str().expect("utf-8"),
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            dir.path().join("checkpoints").to_str().expect("utf-8"),
            "--sink-rate",
            "400",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("floe runs");
    // The window aggregate's and the group aggregate's databases, looked
    // for until both are there or the job has written its output.
    let files = loop {
        let files: Vec<String> = std::fs::read_dir(&state)
            .map(|d| {
                d.map(|e| {
                    e.expect("an entry")
                        .file_name()
                        .into_string()
                        .expect("utf-8")
                })
                .filter(|f| f.ends_with(".redb"))
                .collect()
            })
            .unwrap_or_default();
        let window = files.iter().any(|f| f.starts_with("Window"));
        let group = files.iter().any(|f| f.starts_with("Keyed_Process"));
        if (window && group) || std::fs::metadata(&output).is_ok() {
            break files;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("floe ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(sorted_lines(&output), want);
    // The last change printed per user is its total.
    let mut printed: BTreeMap<String, i64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let row = line.split_once("> ").map_or(line, |(_, r)| r);
        let (kind, rest) = row.split_at(2);
        let fields = rest.trim_start_matches('[').trim_end_matches(']');
        let (key, value) = fields.split_once(", ").expect("two fields");
        match kind {
            "+I" | "+U" => {
                printed.insert(key.to_string(), value.parse().expect("a total"));
            }
            _ => {}
        }
    }
    assert_eq!(printed, totals);
    // Both aggregates kept their state there while the job ran.
    assert!(files.iter().any(|f| f.starts_with("Window")), "{files:?}");
    assert!(
        files.iter().any(|f| f.starts_with("Keyed_Process")),
        "{files:?}"
    );
    let refused = floe(&[
        "sql",
        "-e",
        &script,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ]);
    assert!(!refused.status.success());
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim_end(),
        "error: invalid configuration: --state-dir needs --state redb"
    );
}

#[test]
fn explain_prints_the_plan_and_the_job_graph() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    data(&input);
    let script = script(&input, &output).replace("INSERT INTO", "EXPLAIN INSERT INTO");
    let out = floe(&["sql", "-e", &script, "--parallelism", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        "Sink(table=[per_minute]",
        "WindowAggregate(groupBy=[user_name], window=[TUMBLE(time_col=[ts], size=[60000 ms])]",
        "Exchange(distribution=[hash[user_name]])",
        "WatermarkAssigner(rowtime=[ts]",
        "TableSourceScan(table=[clicks], fields=[user_name, amount, ts])",
        "== Job Graph ==",
        "Source: clicks -> Calc -> WatermarkAssigner -> Calc (parallelism 2)",
        "<- [0] hash",
        "Sink: per_minute (parallelism 1)",
    ] {
        assert!(text.contains(part), "{part} in:\n{text}");
    }
    assert!(!output.exists(), "EXPLAIN runs nothing");
}

#[test]
fn an_error_is_one_line_with_its_position_and_exit_code_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    data(&input);
    let script = script(&input, &output).replace("COUNT(*), SUM(amount)", "COUNT(*), SUM(amt)");
    let job = dir.path().join("job.sql");
    std::fs::write(&job, script).expect("write the script");
    let out = floe(&["sql", "-f", job.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        "error: line 11, column 47: unknown column 'amt' in TUMBLE(TABLE clicks)\n"
    );
    assert!(!output.exists(), "nothing ran");
    let out = floe(&["sql"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn print_tables_print_rows_as_flink_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.csv");
    std::fs::write(
        &input,
        "a,1.50,2024-03-01 00:00:01.5\nb,,2024-03-01 00:00:02\nc,-0.25,2024-03-01 10:20:00\n",
    )
    .expect("write");
    let script = format!(
        "CREATE TABLE t (name STRING, price DECIMAL(5, 2), ts TIMESTAMP(3))
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE shown (name STRING, price DECIMAL(5, 2), ts TIMESTAMP(3), big BOOLEAN)
         WITH ('connector' = 'print', 'print-identifier' = 'rows');
         INSERT INTO shown SELECT name, price, ts, price > 1 FROM t;",
        input.display()
    );
    let out = floe(&["sql", "-e", &script, "--parallelism", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rows> +I[a, 1.50, 2024-03-01T00:00:01.500, true]\n\
         rows> +I[b, null, 2024-03-01T00:00:02, null]\n\
         rows> +I[c, -0.25, 2024-03-01T10:20, false]\n"
    );
}

#[test]
fn a_sql_job_recovers_from_injected_failures_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    let want = data(&input);
    let checkpoints = dir.path().join("checkpoints");
    let script = script(&input, &output).replace(
        "'format' = 'csv');\nCREATE TABLE per_minute",
        "'format' = 'csv', 'scan.watermark.emit.strategy' = 'on-event');\nCREATE TABLE per_minute",
    );
    assert!(script.contains("on-event"), "{script}");
    let out = floe(&[
        "sql",
        "-e",
        &script,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "10",
        "--checkpoint-dir",
        checkpoints.to_str().expect("utf-8"),
        "--finish-after-checkpoints",
        "6",
        "--inject-failures",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let restarts = stderr
        .lines()
        .filter(|l| l.starts_with("restart attempt="))
        .count();
    assert_eq!(restarts, 2, "{stderr}");
    assert_eq!(sorted_lines(&output), want);
}

#[test]
fn a_savepoint_of_a_sql_job_restores_at_another_parallelism() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("clicks.csv");
    let output = dir.path().join("per_minute.csv");
    let want = data(&input);
    let script = script(&input, &output).replace(
        "'format' = 'csv');\nCREATE TABLE per_minute",
        "'format' = 'csv', 'scan.watermark.emit.strategy' = 'on-event');\nCREATE TABLE per_minute",
    );
    let savepoints = dir.path().join("savepoints");
    let checkpoints = dir.path().join("checkpoints");
    let path = |p: &Path| p.to_str().expect("utf-8").to_string();
    let first = floe(&[
        "sql",
        "-e",
        &script,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "60000",
        "--checkpoint-dir",
        &path(&checkpoints),
        "--savepoint-at-records",
        "700",
        "--savepoint-dir",
        &path(&savepoints),
    ]);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    let savepoint = stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .unwrap_or_else(|| panic!("a savepoint line: {stderr}"))
        .to_string();
    assert_eq!(sorted_lines(&output), want, "the first run");
    // The same script from the savepoint, on one subtask: the output is
    // cut back to the savepoint's commit and written on from there.
    let second = floe(&[
        "sql",
        "-e",
        &script,
        "--parallelism",
        "1",
        "--checkpoint-interval",
        "60000",
        "--checkpoint-dir",
        &path(&dir.path().join("checkpoints-2")),
        "--from-checkpoint",
        &savepoint,
    ]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    let records: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("records="))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a summary line: {stderr}"));
    assert!(
        records < 1500,
        "the second run read from the savepoint on: {stderr}"
    );
    assert_eq!(sorted_lines(&output), want, "after the restore");
}
