//! `floe sql -f job.sql` / `floe sql -e "…"`: a Flink SQL script run as a
//! floe job, with the flags of every `run` job (parallelism, checkpoints,
//! savepoints, `--from-checkpoint`, `--state`, metrics and dashboard).
//!
//! The whole script is parsed and planned before anything runs; an error
//! is one line on stderr (`error: line 3, column 12: …`) and exit code 1.
//! `EXPLAIN` statements print their plan on stdout. The `INSERT INTO`
//! statements of the script run as one job; its summary line goes to
//! stderr when it ends.

use super::SqlArgs;
use floe::StreamExecutionEnvironment;
use floe::sql::SqlSession;

pub fn run(args: &SqlArgs) -> floe::Result<()> {
    let script = match (&args.file, &args.execute) {
        (Some(path), None) => std::fs::read_to_string(path)
            .map_err(|e| floe::Error::io("cannot read SQL script", path, e))?,
        (None, Some(text)) => text.clone(),
        _ => {
            return Err(floe::Error::Config(
                "give the script with -f FILE or -e SQL (one of them)".into(),
            ));
        }
    };
    super::check_parallelism(args.parallelism, args.arbiters)?;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    args.checkpoints.apply(&env, args.seed)?;
    if let Some(name) = &args.observe.job_name {
        env.set_job_name(name.clone());
    }
    let mut session = SqlSession::new(&env);
    session.set_sink_rate(args.checkpoints.sink_rate);
    session.set_file_split_size(args.split_size);
    if let Some(kind) = args.state.backend()? {
        session.set_state_backend(kind);
    }
    let planned = session.plan_sql(&script)?;
    for text in &planned.explains {
        println!("{text}");
    }
    if planned.inserts == 0 {
        return Ok(());
    }
    // `--job-name`, else the script's `SET 'pipeline.name'`, else `sql`.
    let name = env.config().job_name.unwrap_or_else(|| "sql".to_string());
    let prometheus = args.observe.install(&env, &name)?;
    let handle = env.execute_async()?;
    args.checkpoints.schedule_savepoint(&handle);
    let _signals = super::signal::stop_on_signal(&handle, args.checkpoints.stop_savepoint_dir())?;
    let endpoint = args
        .observe
        .serve(prometheus, &handle, args.checkpoints.savepoint_target())?;
    // The progress bar or status line counts the first source's rows; the
    // name lives as long as the process (one per run).
    let source: &'static str = Box::leak(
        planned
            .sources
            .first()
            .cloned()
            .unwrap_or_default()
            .into_boxed_str(),
    );
    let (result, endpoint) = super::progress::wait_for_job(
        &handle,
        source,
        None,
        args.observe.status_interval(),
        endpoint,
    )?;
    args.checkpoints
        .report_savepoint(&handle.checkpoint_stats())?;
    let records: u64 = result
        .operators
        .iter()
        .filter(|o| o.name.starts_with("Source: "))
        .map(|o| o.records_out)
        .sum();
    eprintln!(
        "{}{}",
        super::summary_head(records, result.elapsed, env.config().parallelism),
        super::checkpointing::summary(&args.checkpoints, &handle)
    );
    if let Some(e) = endpoint {
        e.linger();
    }
    Ok(())
}
