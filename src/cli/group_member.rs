//! What every job of group mode shares: the flags' checks, the
//! repartition topic, the member run by the library's group runner
//! ([`floe::connectors::kafka::group::run_member`]) with its lines on
//! stderr, and the summary. The jobs themselves (what each stage reads and
//! writes) are in `group_wordcount.rs` and `group_window.rs`.

use super::super::checkpointing::CheckpointArgs;
use super::super::observe::ObserveArgs;
use super::GroupArgs;
use floe::connectors::kafka::group::{GroupJob, GroupReport, GroupSetting, ensure_topic};
use floe::connectors::kafka::{KafkaSource, KafkaUrl};
use floe::connectors::kafka_sink::KafkaSink;
use floe::{JobHandle, StreamExecutionEnvironment};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How long metadata, offset and topic requests may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A transaction a dead member left open is aborted by the broker after
/// this long (`--transaction-timeout`): what holds its partitions' readers
/// back (read_committed).
const TRANSACTION_TIMEOUT_MS: u64 = 10_000;
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

/// The topics of a group's job.
pub(super) struct Group {
    /// The group's name.
    pub name: String,
    pub brokers: String,
    pub input: String,
    /// Partitions of the input topic.
    pub input_partitions: i32,
    pub output: String,
    pub repartition: String,
    /// Partitions of the repartition topic: the job's max parallelism.
    pub key_groups: i32,
    /// The Kafka sinks' `transaction.timeout.ms`.
    pub transaction_timeout: String,
    /// The shared checkpoint directory (read by the PostgreSQL output).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub dir: String,
    /// `--output postgres://…`: stage two's rows go there, `output` is
    /// unused.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub postgres: Option<Postgres>,
}

#[cfg(feature = "postgres")]
pub(super) type Postgres = super::postgres::PostgresTable;
#[cfg(not(feature = "postgres"))]
pub(super) type Postgres = std::convert::Infallible;

#[cfg(feature = "postgres")]
pub(super) use super::postgres::Claim;

/// A claim of repartition partitions, which a build without the
/// `postgres` feature never makes.
#[cfg(not(feature = "postgres"))]
pub(super) enum Claim {}

#[cfg(not(feature = "postgres"))]
impl Claim {
    pub fn sink<R>(&self, _rows: &floe::DataStream<R>, _rate: Option<f64>) -> floe::Result<()> {
        match *self {}
    }
}

impl Group {
    /// Stage two's `source` over the repartition partitions `counted` of
    /// `held`: with a PostgreSQL output, the partitions are claimed first
    /// (the claim restores their key groups and starts the source at their
    /// positions, and its sink must write the stage's rows); otherwise it
    /// reads from the group's committed offsets, as given.
    pub fn stage_two_source<T: Send + 'static>(
        &self,
        env: &StreamExecutionEnvironment,
        held: &floe::connectors::kafka::group::Assignment<'_>,
        counted: &[(String, i32)],
        source: KafkaSource<T>,
    ) -> floe::Result<(KafkaSource<T>, Option<Claim>)> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = &self.postgres {
            let claim = pg.claim(&self.name, held, counted)?;
            let source = claim.start(env, &self.dir, source);
            return Ok((source, Some(claim)));
        }
        let _ = (env, held, counted);
        Ok((source, None))
    }
}

/// A job of the CLI's group mode: the library's [`GroupJob`] and what its
/// summary reports.
pub(super) trait CliJob: GroupJob {
    /// Adds a finished run's counts to the summary's.
    fn count(&self, handle: &JobHandle, totals: &mut Totals);
    /// The summary's fields after `records=… parallelism=P`.
    fn summary(&self, totals: &Totals) -> String;
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
    /// The summary line of `job`.
    fn summary(&self, common: &Common<'_>, job: &dyn CliJob, elapsed: Duration) -> String {
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
pub(super) fn run<J: CliJob>(
    common: &Common<'_>,
    name: &str,
    make: impl FnOnce(Group) -> J,
) -> floe::Result<()> {
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
    // `postgres://…`: stage two's rows go to a table.
    #[cfg(feature = "postgres")]
    let postgres = super::postgres::postgres_table(output, name, common.job).transpose()?;
    #[cfg(not(feature = "postgres"))]
    let postgres: Option<Postgres> = None;
    let output = match KafkaUrl::parse(output) {
        Some(output) => output?,
        None if postgres.is_some() => KafkaUrl {
            brokers: input.brokers.clone(),
            topic: String::new(),
            params: Vec::new(),
        },
        None => {
            return bad(match cfg!(feature = "postgres") {
                true => "--group needs a kafka:// or postgres:// --output".into(),
                false => {
                    "--group needs a kafka:// --output (postgres:// needs the `postgres` feature)"
                        .into()
                }
            });
        }
    };
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
    if postgres.is_none() {
        let out = KafkaSink::<String>::lines(&output.brokers, &output.topic);
        out.check()?;
        out.check_transactions()?;
    }
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
        repartition: repartition.clone(),
        key_groups,
        transaction_timeout: common
            .group
            .transaction_timeout
            .unwrap_or(TRANSACTION_TIMEOUT_MS)
            .to_string(),
        dir: dir.display().to_string(),
        postgres,
    };
    // PostgreSQL keeps the repartition partitions' positions and marks:
    // the job restores their key groups from those, not from the group's
    // committed offsets; the member prunes its runs by them.
    #[cfg(feature = "postgres")]
    let marks = group.postgres.as_ref().map(|pg| pg.marks(name));
    #[cfg(not(feature = "postgres"))]
    let marks: Option<std::sync::Arc<dyn floe::connectors::kafka::group::MarkStore>> = None;
    let job = make(group);
    let stop = Arc::new(AtomicBool::new(false));
    let _signals = super::super::signal::flag_on_signal(stop.clone())?;
    let mut setting = GroupSetting::new(name, &input.brokers, &dir.display().to_string())
        .topics(&[input.topic.as_str()]);
    setting = match marks {
        Some(marks) => setting.topics(&[repartition.as_str()]).marks_in(marks),
        None => setting.keyed_topics(&[repartition.as_str()]),
    };
    if let Some(ms) = common.group.session_timeout {
        setting = setting.session_timeout(Duration::from_millis(ms));
    }
    // Each run's environment copies this one's configuration.
    let template = StreamExecutionEnvironment::new();
    template.set_parallelism(common.parallelism);
    template.set_max_parallelism(key_groups as u32);
    if let Some(size) = common.batch_size {
        template.set_batch_size(size);
    }
    if let Some(a) = common.arbiters {
        template.set_arbiters(a);
    }
    common.checkpoints.apply(&template, common.seed)?;
    // The job's name and metrics switch; one endpoint for the member's life: each job run is registered in
    // turn (its /status `info` names the member, generation and partitions).
    let prometheus = common.observe.install(&template, common.job)?;
    let served = common.observe.serve_jobs(prometheus, None, None)?;
    let jobs = served.as_ref().map(|(_, jobs)| jobs);
    let mut totals = Totals::default();
    let rebalances = template.execute_group(&setting, &job, &stop, &mut |report| {
        match &report {
            GroupReport::Started(handle) => {
                if let Some(jobs) = jobs {
                    // The previous run has ended: its name is free.
                    let _ = jobs.insert((*handle).clone());
                }
            }
            GroupReport::Ended(handle) => job.count(handle, &mut totals),
            _ => {}
        }
        if let Some(line) = report.line() {
            eprintln!("{line}");
        }
    })?;
    totals.rebalances = rebalances;
    eprintln!("{}", totals.summary(common, &job, started.elapsed()));
    Ok(())
}

/// What a job's repartition topic carries: `floe-NAME-JOB-WHAT`.
fn job_repartition(job: &str) -> &'static str {
    match job {
        "wordcount" => "words",
        _ => "events",
    }
}
