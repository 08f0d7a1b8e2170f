//! The member loop of group mode: joins the group, runs the word count
//! over each assignment, stops it on revocation, plans it again after a
//! failure, and leaves on SIGINT or SIGTERM.

use super::super::WordcountArgs;
use floe::connectors::kafka::group::{
    GroupCommit, GroupEvent, Membership, MembershipConfig, OffsetMark, committed_marks,
    ensure_topic,
};
use floe::connectors::kafka::{KafkaSource, KafkaUrl, StartingOffsets};
use floe::connectors::kafka_sink::KafkaSink;
use floe::{JobEnd, JobHandle, StreamExecutionEnvironment};
use smol_str::SmolStr;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long metadata, offset and topic requests may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a job may take to stop when canceled.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// Consecutive failed runs of one assignment before the member gives up.
const MAX_FAILURES: u32 = 5;
/// A transaction a dead member left open is aborted by the broker after
/// this long: what holds its partitions' readers back (read_committed).
const TRANSACTION_TIMEOUT_MS: &str = "10000";
/// The names of the sources, for the summary.
const INPUT_SOURCE: &str = "Kafka Source";
const COUNTER: &str = "Keyed Sum";

/// What every job run of this member shares.
struct Group {
    name: String,
    brokers: String,
    input: String,
    output: String,
    repartition: String,
    /// Partitions of the repartition topic: the job's max parallelism.
    key_groups: i32,
    /// The shared checkpoint directory.
    dir: String,
    /// This process's name in run directories.
    member: String,
    /// `--output postgres://…`: the counts go there (`output` is unused).
    postgres: Option<Postgres>,
}

#[cfg(feature = "postgres")]
type Postgres = super::postgres::PostgresCounts;
#[cfg(not(feature = "postgres"))]
type Postgres = std::convert::Infallible;

/// The assignment a member holds.
struct Held {
    generation: i32,
    /// When the assignment came.
    assigned_at: Instant,
    partitions: Vec<(String, i32)>,
    /// For the transactions that commit this generation's offsets.
    metadata: Arc<rdkafka::consumer::ConsumerGroupMetadata>,
    /// The job runs planned for it so far.
    runs: u32,
}

/// A job running over one assignment.
struct Running {
    handle: JobHandle,
    ended: std::sync::mpsc::Receiver<JobEnd>,
    commit: Arc<GroupCommit>,
    /// The assignment's generation, and when it came.
    generation: i32,
    assigned_at: Instant,
    /// The first record was reported.
    reported: bool,
}

impl Running {
    /// Prints `first_record generation=N after_ms=T at_ms=U` once a source
    /// emitted its first record: T ms after the assignment came, at U ms
    /// since the epoch (what a rebalance costs, measured from a member's
    /// death to this line).
    fn report_first_record(&mut self) {
        if self.reported {
            return;
        }
        let Some(at) = self.commit.first_record() else {
            return;
        };
        self.reported = true;
        let wall = std::time::SystemTime::now() - at.elapsed();
        let epoch_ms = wall
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        eprintln!(
            "first_record generation={} after_ms={} at_ms={epoch_ms}",
            self.generation,
            at.saturating_duration_since(self.assigned_at).as_millis()
        );
    }
}

/// The totals the summary reports.
#[derive(Default)]
struct Totals {
    records: u64,
    words: u64,
    rebalances: u64,
}

impl Totals {
    fn add(&mut self, handle: &JobHandle) {
        for o in handle.operator_metrics() {
            if o.name == INPUT_SOURCE {
                self.records += o.records_out;
            } else if o.name == COUNTER {
                self.words += o.records_in;
            }
        }
    }
}

pub fn run_wordcount(args: &WordcountArgs, name: &str) -> floe::Result<()> {
    let bad = |m: String| Err(floe::Error::Config(m));
    let Some(input) = args.input.as_deref().and_then(|p| p.to_str()) else {
        return bad("--group needs a kafka:// --input".into());
    };
    let Some(input) = KafkaUrl::parse(input) else {
        return bad("--group needs a kafka:// --input".into());
    };
    let input = input?;
    let Some(output) = args.output.as_deref().and_then(|p| p.to_str()) else {
        return bad("--group needs a kafka:// --output".into());
    };
    #[cfg(feature = "postgres")]
    let postgres = super::postgres::postgres_counts(output, name).transpose()?;
    #[cfg(not(feature = "postgres"))]
    let postgres: Option<Postgres> = None;
    let output = match KafkaUrl::parse(output) {
        Some(output) => output?,
        None if postgres.is_some() => KafkaUrl {
            brokers: input.brokers.clone(),
            topic: String::new(),
            params: Vec::new(),
        },
        None => return bad("--group needs a kafka:// or postgres:// --output".into()),
    };
    let cp = &args.checkpoints;
    let Some(dir) = cp.checkpoint_dir.as_deref() else {
        return bad("--group needs --checkpoint-dir, shared by every member".into());
    };
    if cp.checkpoint_interval.is_none() {
        return bad("--group needs --checkpoint-interval: each checkpoint commits".into());
    }
    if cp.unaligned || cp.alignment_timeout.is_some() {
        return bad("--group takes aligned checkpoints only: a partition's state moves alone, without in-flight records".into());
    }
    if cp.from_checkpoint.is_some() || cp.resume || cp.restart.is_some() {
        return bad("--group resumes from the group's committed offsets: drop --from-checkpoint, --resume and --restart".into());
    }
    if args.state.backend()?.is_some() || args.bounded || args.count_rate.is_some() {
        return bad("--group runs the built-in keyed sum over an unbounded input: drop --state, --bounded and --count-rate".into());
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return bad(format!(
            "--group '{name}': use letters, digits, '.', '_' and '-'"
        ));
    }
    if output.brokers != input.brokers {
        return bad("--group: --input and --output must be on one Kafka cluster (one transaction covers both)".into());
    }
    super::super::check_parallelism(args.parallelism, args.arbiters)?;
    // The input topic must exist; the repartition topic is the group's.
    KafkaSource::lines(&input.brokers, &[input.topic.as_str()])
        .request_timeout(REQUEST_TIMEOUT)
        .check()?;
    if postgres.is_none() {
        let out = KafkaSink::<String>::lines(&output.brokers, &output.topic);
        out.check()?;
        out.check_transactions()?;
    }
    let input_partitions = ensure_topic(&input.brokers, &input.topic, 1, 1, REQUEST_TIMEOUT)?;
    let repartition = format!("floe-{name}-wordcount-words");
    let key_groups = ensure_topic(
        &input.brokers,
        &repartition,
        args.group.group_partitions.unwrap_or(input_partitions),
        1,
        REQUEST_TIMEOUT,
    )?;
    if (args.parallelism as i64) > key_groups as i64 {
        return bad(format!(
            "--parallelism {} exceeds the {key_groups} partitions of {repartition} (the job's max parallelism)",
            args.parallelism
        ));
    }
    let started = Instant::now();
    let group = Group {
        name: name.to_string(),
        brokers: input.brokers.clone(),
        input: input.topic.clone(),
        output: output.topic.clone(),
        repartition,
        key_groups,
        dir: dir.display().to_string(),
        member: format!(
            "m{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64 & 0xffff_ffff)
                .unwrap_or(0)
        ),
        postgres,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let _signals = super::super::signal::flag_on_signal(stop.clone())?;
    let mut config = MembershipConfig::new(
        &group.brokers,
        &group.name,
        &[group.input.clone(), group.repartition.clone()],
    );
    if let Some(ms) = args.group.session_timeout {
        config.session_timeout = Duration::from_millis(ms);
    }
    config.revoke_deadline = STOP_DEADLINE;
    // One endpoint for the member's life: each job run is registered in
    // turn (its /status `info` names the member, generation and partitions).
    let prometheus = args
        .observe
        .install(&StreamExecutionEnvironment::new(), "wordcount")?;
    let served = args.observe.serve_jobs(prometheus, None, None)?;
    let jobs = served.as_ref().map(|(_, jobs)| jobs);
    let (membership, events) = Membership::join(config)?;
    let result = member_loop(args, &group, &events, &stop, jobs);
    let totals = match result {
        Ok(totals) => totals,
        Err(e) => {
            membership.leave(STOP_DEADLINE);
            return Err(e);
        }
    };
    if !membership.leave(STOP_DEADLINE) {
        eprintln!(
            "warning: leaving the group took over {} s",
            STOP_DEADLINE.as_secs()
        );
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{} words={} rebalances={}",
        super::super::summary_head(totals.records, elapsed, args.parallelism),
        totals.words,
        totals.rebalances
    );
    Ok(())
}

/// Serves the group's events until a stop signal; the totals, or the
/// error that ended the member (with the totals so far).
fn member_loop(
    args: &WordcountArgs,
    group: &Group,
    events: &std::sync::mpsc::Receiver<GroupEvent>,
    stop: &AtomicBool,
    jobs: Option<&floe::http::Jobs>,
) -> floe::Result<Totals> {
    let mut totals = Totals::default();
    let mut running: Option<Running> = None;
    // The assignment held: generation, partitions, group metadata, runs.
    let mut held: Option<Held> = None;
    let mut failures = 0u32;
    // When to plan the held assignment (again).
    let mut retry_at: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        match events.recv_timeout(Duration::from_millis(100)) {
            Ok(GroupEvent::Assigned {
                generation,
                partitions,
                metadata,
                ..
            }) => {
                totals.rebalances += 1;
                let list: Vec<String> =
                    partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
                eprintln!(
                    "rebalance generation={generation} partitions={}",
                    list.join(",")
                );
                let metadata = Arc::new(metadata);
                failures = 0;
                // The eager protocol revoked everything first; a job of an
                // earlier assignment still running stops here.
                if let Some(r) = running.take() {
                    stop_job(r, &mut totals);
                }
                retry_at = Some(Instant::now());
                held = Some(Held {
                    generation,
                    assigned_at: Instant::now(),
                    partitions,
                    metadata,
                    runs: 0,
                });
            }
            Ok(GroupEvent::Revoked { done }) => {
                if let Some(r) = running.take() {
                    stop_job(r, &mut totals);
                }
                held = None;
                retry_at = None;
                let _ = done.send(());
            }
            Ok(GroupEvent::Failed(e)) => return Err(e.into()),
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(floe::Error::Config("the group membership ended".into()));
            }
        }
        if let Some(r) = running.as_mut() {
            r.report_first_record();
            // A run that completed a checkpoint ends a run of failures.
            if failures > 0 && r.handle.checkpoint_stats().completed > 0 {
                failures = 0;
            }
        }
        let ended = running.as_ref().and_then(|r| r.ended.try_recv().ok());
        if let Some(end) = ended {
            let r = running.take().expect("an ended job was running");
            totals.add(&r.handle);
            let error = match end {
                JobEnd::Failed(e) => e.to_string(),
                JobEnd::Canceled => "canceled".into(),
                _ => "its input ended".into(),
            };
            retry_at = Some(failed(&mut failures, &error)?);
        }
        if retry_at.is_some_and(|at| Instant::now() >= at) {
            retry_at = None;
            match start(args, group, held.as_mut(), jobs) {
                Ok(r) => running = r,
                Err(e) => retry_at = Some(failed(&mut failures, &e.to_string())?),
            }
        }
    }
    if let Some(r) = running.take() {
        stop_job(r, &mut totals);
    }
    Ok(totals)
}

/// Counts a failed run of the held assignment and says so in one line;
/// when to plan it again (a second more per failure in a row), or the
/// error that ends the member after too many.
fn failed(failures: &mut u32, error: &str) -> floe::Result<Instant> {
    *failures += 1;
    if *failures > MAX_FAILURES {
        return Err(floe::Error::Config(format!(
            "the group's job failed {failures} times in a row; last: {error}"
        )));
    }
    let delay = Duration::from_secs(u64::from(*failures));
    eprintln!(
        "restart attempt={failures} delay_ms={} reason=\"{}\": planning the assignment again from the group's committed offsets",
        delay.as_millis(),
        error.replace('"', "'")
    );
    Ok(Instant::now() + delay)
}

/// Cancels a job (its open transactions are aborted by their fencing on
/// the next start, or by the broker's transaction timeout) and waits for
/// it, within a deadline.
fn stop_job(r: Running, totals: &mut Totals) {
    match futures::executor::block_on(r.handle.cancel_and_wait(STOP_DEADLINE)) {
        Ok(_) => {}
        Err(e) => eprintln!("warning: the group's job did not stop: {e}"),
    }
    totals.add(&r.handle);
}

/// Plans and starts the job over the assignment `held` (counting the run);
/// `None` when the member holds nothing.
fn start(
    args: &WordcountArgs,
    group: &Group,
    held: Option<&mut Held>,
    jobs: Option<&floe::http::Jobs>,
) -> floe::Result<Option<Running>> {
    let Some(Held {
        generation,
        assigned_at,
        partitions,
        metadata,
        runs,
    }) = held
    else {
        return Ok(None);
    };
    *runs += 1;
    let of = |topic: &str| -> Vec<(String, i32)> {
        partitions
            .iter()
            .filter(|(t, _)| t == topic)
            .cloned()
            .collect()
    };
    let (inputs, counted) = (of(&group.input), of(&group.repartition));
    if inputs.is_empty() && counted.is_empty() {
        return Ok(None);
    }
    let run = format!("{}/{}/g{generation}-{runs}", group.name, group.member);
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    env.set_max_parallelism(group.key_groups as u32);
    env.set_batch_size(args.batch_size);
    env.set_job_name(args.observe.job_name.as_deref().unwrap_or("wordcount"));
    let listed: Vec<String> = partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    env.set_job_info("group", &group.name)
        .set_job_info("member", &group.member)
        .set_job_info("generation", &generation.to_string())
        .set_job_info("partitions", &listed.join(","));
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    args.checkpoints.apply(&env, args.seed)?;
    let mut config = env.config();
    config.checkpoint.dir = Some(format!("{}/{run}", group.dir.trim_end_matches('/')).into());
    // The committed offsets name the newest committed transaction's
    // checkpoint, which completes before its commit: three are kept.
    config.checkpoint.retained = config.checkpoint.retained.max(3);
    config.restart = Some(floe::failover::RestartStrategy::None);
    let commit = GroupCommit::new(&run, metadata.clone());
    // PostgreSQL output: the counted partitions' positions and marks are
    // claimed from PostgreSQL, not read from the group's offsets.
    #[cfg(feature = "postgres")]
    let claim = match &group.postgres {
        Some(pg) if !counted.is_empty() => Some(pg.claim(
            &group.name,
            &group.member,
            *generation,
            commit.clone(),
            &counted,
        )?),
        _ => None,
    };
    #[cfg(not(feature = "postgres"))]
    let claim: Option<std::convert::Infallible> = None;
    config.restore_key_groups = match &claim {
        #[cfg(feature = "postgres")]
        Some(claim) => claim.restore_sources(&group.dir),
        _ => restore_sources(group, &counted)?,
    };
    env.set_config(config);
    if !inputs.is_empty() {
        let source = KafkaSource::lines(&group.brokers, &[group.input.as_str()])
            .group_id(&group.name)
            .starting_offsets(StartingOffsets::Committed)
            .partitions(&inputs)
            .group_commit(commit.clone());
        let key_groups = group.key_groups as u32;
        let sink = KafkaSink::<SmolStr>::new(
            &group.brokers,
            &group.repartition,
            Arc::new(|w: &SmolStr, key: &mut Vec<u8>, value: &mut Vec<u8>| {
                key.extend_from_slice(w.as_bytes());
                value.extend_from_slice(w.as_bytes());
            }),
        )
        .partitioner(Arc::new(move |w: &SmolStr| {
            floe_actors::keygroup::key_group(w, key_groups) as i32
        }))
        .transactional_id_prefix(&format!("floe-{}-repartition", run.replace('/', ".")))
        .property("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
        .group_offsets(commit.clone(), &[group.input.as_str()]);
        env.add_source(INPUT_SOURCE, move |ctx| source.reader(ctx))
            .uid("kafka-source")
            .flat_map(|line: String| floe::tokenize(line).map(SmolStr::from))
            .name("Tokenize")
            .uid("tokenize")
            .sink_exactly_once("Repartition Sink", sink.exactly_once())
            .uid("repartition-sink")
            .set_parallelism(1);
    }
    if !counted.is_empty() {
        let source = KafkaSource::new(
            &group.brokers,
            &[group.repartition.as_str()],
            Arc::new(|bytes: &[u8]| {
                std::str::from_utf8(bytes)
                    .map(|w| (SmolStr::from(w), 1u64))
                    .map_err(|e| format!("value is not valid UTF-8: {e}"))
            }),
        )
        .group_id(&group.name)
        .starting_offsets(StartingOffsets::Committed)
        .partitions(&counted)
        .group_commit(commit.clone());
        let source = match &claim {
            #[cfg(feature = "postgres")]
            Some(claim) => claim.source(source),
            _ => source,
        };
        let counts = env
            .add_source("Repartition Source", move |ctx| source.reader(ctx))
            .uid("repartition-source")
            .key_by_field(|t: &(SmolStr, u64)| &t.0)
            .sum(|t: &mut (SmolStr, u64)| &mut t.1)
            .uid("count");
        match (&claim, &group.postgres) {
            #[cfg(feature = "postgres")]
            (Some(claim), Some(pg)) => claim.sink(pg, &counts, args.checkpoints.sink_rate)?,
            _ => {
                let sink = KafkaSink::<String>::lines(&group.brokers, &group.output)
                    .transactional_id_prefix(&format!("floe-{}-output", run.replace('/', ".")))
                    .property("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
                    .group_offsets(commit.clone(), &[group.repartition.as_str()]);
                counts
                    .map(|(word, count): (SmolStr, u64)| format!("{word},{count}"))
                    .name("Format")
                    .uid("format")
                    .sink_exactly_once("Kafka Sink", sink.exactly_once())
                    .uid("kafka-sink")
                    .set_parallelism(1);
            }
        }
    }
    let handle = env.execute_async()?;
    if let Some(jobs) = jobs {
        // The previous run has ended: its name is free.
        let _ = jobs.insert(handle.clone());
    }
    let (tx, ended) = std::sync::mpsc::channel();
    let waiter = handle.clone();
    std::thread::Builder::new()
        .name("floe-group-job".into())
        .spawn(move || {
            let _ = tx.send(futures::executor::block_on(waiter.outcome()));
        })
        .map_err(|e| floe::Error::Config(format!("cannot start a thread: {e}")))?;
    Ok(Some(Running {
        handle,
        ended,
        commit,
        generation: *generation,
        assigned_at: *assigned_at,
        reported: false,
    }))
}

/// Where each counted partition's state comes from: the checkpoint its
/// committed offset names, grouped by checkpoint.
fn restore_sources(
    group: &Group,
    counted: &[(String, i32)],
) -> floe::Result<Vec<(std::path::PathBuf, Vec<u32>)>> {
    if counted.is_empty() {
        return Ok(Vec::new());
    }
    let marks = committed_marks(&group.brokers, &group.name, counted, REQUEST_TIMEOUT)?;
    let mut by: BTreeMap<OffsetMark, Vec<u32>> = BTreeMap::new();
    for ((_, partition), offset, mark) in marks {
        match (offset, mark) {
            (_, Some(mark)) => by.entry(mark).or_default().push(partition as u32),
            (None, None) => {}
            (Some(offset), None) => {
                return Err(floe::Error::Config(format!(
                    "partition {}-{partition} of the group has a committed offset ({offset}) \
                     that names no floe checkpoint: its state cannot be restored",
                    group.repartition
                )));
            }
        }
    }
    Ok(by
        .into_iter()
        .map(|(mark, groups)| (mark.path(&group.dir), groups))
        .collect())
}
