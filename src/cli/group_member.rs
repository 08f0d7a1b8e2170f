//! The member loop of group mode: joins the group, runs the job over each
//! assignment, stops it on revocation, plans it again after a failure, and
//! leaves on SIGINT or SIGTERM. The jobs themselves (what each stage reads
//! and writes) are in `group_wordcount.rs` and `group_window.rs`.

use super::super::checkpointing::CheckpointArgs;
use super::super::observe::ObserveArgs;
use super::GroupArgs;
use floe::connectors::kafka::group::{
    GroupCommit, GroupEvent, Membership, MembershipConfig, OffsetMark, committed_marks,
    ensure_topic,
};
use floe::connectors::kafka::{KafkaSource, KafkaUrl};
use floe::connectors::kafka_sink::KafkaSink;
use floe::{JobEnd, JobHandle, StreamExecutionEnvironment};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long metadata, offset and topic requests may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a job may take to stop when canceled.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// Consecutive failed runs of one assignment before the member gives up.
const MAX_FAILURES: u32 = 5;
/// A transaction a dead member left open is aborted by the broker after
/// this long: what holds its partitions' readers back (read_committed).
pub(super) const TRANSACTION_TIMEOUT_MS: &str = "10000";
/// The name of the input's source: its records are the summary's.
pub(super) const INPUT_SOURCE: &str = "Kafka Source";

/// The flags every job of group mode shares.
pub(super) struct Common<'a> {
    /// `wordcount` or `window`: the repartition topic's and the job's name.
    pub job: &'static str,
    pub input: Option<&'a Path>,
    pub output: Option<&'a Path>,
    pub checkpoints: &'a CheckpointArgs,
    pub observe: &'a ObserveArgs,
    pub group: &'a GroupArgs,
    pub parallelism: usize,
    pub arbiters: Option<usize>,
    pub batch_size: Option<usize>,
    pub seed: u64,
}

/// What every job run of this member shares.
pub(super) struct Group {
    pub name: String,
    pub brokers: String,
    pub input: String,
    /// Partitions of the input topic.
    pub input_partitions: i32,
    pub output: String,
    pub repartition: String,
    /// Partitions of the repartition topic: the job's max parallelism.
    pub key_groups: i32,
    /// The shared checkpoint directory.
    pub dir: String,
    /// This process's name in run directories.
    pub member: String,
}

/// One run of a job over an assignment, as a job builds it.
pub(super) struct Stages<'a> {
    /// The input partitions held (stage one's), maybe none.
    pub inputs: &'a [(String, i32)],
    /// The repartition partitions held (stage two's), maybe none.
    pub counted: &'a [(String, i32)],
    /// The run's positions and group metadata, for sources and sinks.
    pub commit: &'a Arc<GroupCommit>,
    /// The run's name: transactional ids are made of it.
    pub run: &'a str,
}

impl Stages<'_> {
    /// A transactional id prefix of this run for the sink `what`.
    pub fn transactional_id(&self, what: &str) -> String {
        format!("floe-{}-{what}", self.run.replace('/', "."))
    }
}

/// A job group mode runs: its two stages over the partitions a member
/// holds, and what its summary reports.
pub(super) trait GroupJob {
    /// Adds the stages of `stages` to `env`.
    fn build(
        &self,
        env: &StreamExecutionEnvironment,
        group: &Group,
        stages: &Stages<'_>,
    ) -> floe::Result<()>;
    /// Adds a finished run's counts to the summary's.
    fn count(&self, handle: &JobHandle, totals: &mut Totals);
    /// The summary's fields after `records=… parallelism=P`.
    fn summary(&self, totals: &Totals) -> String;
}

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
pub(super) struct Totals {
    /// Input records (lines).
    pub records: u64,
    /// What the job counts: words counted, windows fired.
    pub counted: u64,
    /// Late records dropped.
    pub late: u64,
    pub rebalances: u64,
}

impl Totals {
    /// The summary's fields for the jobs of `common`.
    fn summary(&self, common: &Common<'_>, job: &dyn GroupJob, elapsed: Duration) -> String {
        format!(
            "{} {} rebalances={}",
            super::super::summary_head(self.records, elapsed, common.parallelism),
            job.summary(self),
            self.rebalances
        )
    }
}

/// Runs `job` as a member of the group `name` until SIGINT or SIGTERM:
/// checks what every group job needs, creates the repartition topic, joins.
pub(super) fn run(common: &Common<'_>, name: &str, job: &dyn GroupJob) -> floe::Result<()> {
    let bad = |m: String| Err(floe::Error::Config(m));
    let Some(input) = common.input.and_then(|p| p.to_str()) else {
        return bad("--group needs a kafka:// --input".into());
    };
    let Some(input) = KafkaUrl::parse(input) else {
        return bad("--group needs a kafka:// --input".into());
    };
    let input = input?;
    let Some(output) = common.output.and_then(|p| p.to_str()) else {
        return bad("--group needs a kafka:// --output".into());
    };
    let Some(output) = KafkaUrl::parse(output) else {
        return bad(
            "--group needs a kafka:// --output (PostgreSQL is not yet supported in group mode)"
                .into(),
        );
    };
    let output = output?;
    let cp = common.checkpoints;
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
    super::super::check_parallelism(common.parallelism, common.arbiters)?;
    // The input topic must exist; the repartition topic is the group's.
    KafkaSource::lines(&input.brokers, &[input.topic.as_str()])
        .request_timeout(REQUEST_TIMEOUT)
        .check()?;
    let out = KafkaSink::<String>::lines(&output.brokers, &output.topic);
    out.check()?;
    out.check_transactions()?;
    let input_partitions = ensure_topic(&input.brokers, &input.topic, 1, 1, REQUEST_TIMEOUT)?;
    let repartition = format!("floe-{name}-{}-{}", common.job, job_repartition(common.job));
    let key_groups = ensure_topic(
        &input.brokers,
        &repartition,
        common.group.group_partitions.unwrap_or(input_partitions),
        1,
        REQUEST_TIMEOUT,
    )?;
    if (common.parallelism as i64) > key_groups as i64 {
        return bad(format!(
            "--parallelism {} exceeds the {key_groups} partitions of {repartition} (the job's max parallelism)",
            common.parallelism
        ));
    }
    let started = Instant::now();
    let group = Group {
        name: name.to_string(),
        brokers: input.brokers.clone(),
        input: input.topic.clone(),
        input_partitions,
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
    };
    let stop = Arc::new(AtomicBool::new(false));
    let _signals = super::super::signal::flag_on_signal(stop.clone())?;
    let mut config = MembershipConfig::new(
        &group.brokers,
        &group.name,
        &[group.input.clone(), group.repartition.clone()],
    );
    if let Some(ms) = common.group.session_timeout {
        config.session_timeout = Duration::from_millis(ms);
    }
    config.revoke_deadline = STOP_DEADLINE;
    // One endpoint for the member's life: each job run is registered in
    // turn (its /status `info` names the member, generation and partitions).
    let prometheus = common
        .observe
        .install(&StreamExecutionEnvironment::new(), common.job)?;
    let served = common.observe.serve_jobs(prometheus, None, None)?;
    let jobs = served.as_ref().map(|(_, jobs)| jobs);
    let (membership, events) = Membership::join(config)?;
    let result = member_loop(common, job, &group, &events, &stop, jobs);
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
    eprintln!("{}", totals.summary(common, job, started.elapsed()));
    Ok(())
}

/// What a job's repartition topic carries: `floe-NAME-JOB-WHAT`.
fn job_repartition(job: &str) -> &'static str {
    match job {
        "wordcount" => "words",
        _ => "events",
    }
}

/// Serves the group's events until a stop signal; the totals, or the
/// error that ended the member (with the totals so far).
fn member_loop(
    common: &Common<'_>,
    job: &dyn GroupJob,
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
                    stop_job(r, job, &mut totals);
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
                    stop_job(r, job, &mut totals);
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
            job.count(&r.handle, &mut totals);
            let error = match end {
                JobEnd::Failed(e) => e.to_string(),
                JobEnd::Canceled => "canceled".into(),
                _ => "its input ended".into(),
            };
            retry_at = Some(failed(&mut failures, &error)?);
        }
        if retry_at.is_some_and(|at| Instant::now() >= at) {
            retry_at = None;
            match start(common, job, group, held.as_mut(), jobs) {
                Ok(r) => running = r,
                Err(e) => retry_at = Some(failed(&mut failures, &e.to_string())?),
            }
        }
    }
    if let Some(r) = running.take() {
        stop_job(r, job, &mut totals);
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
fn stop_job(r: Running, job: &dyn GroupJob, totals: &mut Totals) {
    match futures::executor::block_on(r.handle.cancel_and_wait(STOP_DEADLINE)) {
        Ok(_) => {}
        Err(e) => eprintln!("warning: the group's job did not stop: {e}"),
    }
    job.count(&r.handle, totals);
}

/// Plans and starts the job over the assignment `held` (counting the run);
/// `None` when the member holds nothing.
fn start(
    common: &Common<'_>,
    job: &dyn GroupJob,
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
    env.set_parallelism(common.parallelism);
    env.set_max_parallelism(group.key_groups as u32);
    if let Some(size) = common.batch_size {
        env.set_batch_size(size);
    }
    env.set_job_name(common.observe.job_name.as_deref().unwrap_or(common.job));
    let listed: Vec<String> = partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    env.set_job_info("group", &group.name)
        .set_job_info("member", &group.member)
        .set_job_info("generation", &generation.to_string())
        .set_job_info("partitions", &listed.join(","));
    if let Some(a) = common.arbiters {
        env.set_arbiters(a);
    }
    common.checkpoints.apply(&env, common.seed)?;
    let mut config = env.config();
    config.checkpoint.dir = Some(format!("{}/{run}", group.dir.trim_end_matches('/')).into());
    // The committed offsets name the newest committed transaction's
    // checkpoint, which completes before its commit: three are kept.
    config.checkpoint.retained = config.checkpoint.retained.max(3);
    config.restart = Some(floe::failover::RestartStrategy::None);
    config.restore_key_groups = restore_sources(group, &counted)?;
    env.set_config(config);
    let commit = GroupCommit::new(&run, metadata.clone());
    job.build(
        &env,
        group,
        &Stages {
            inputs: &inputs,
            counted: &counted,
            commit: &commit,
            run: &run,
        },
    )?;
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
