//! Running one job as a member of a group: joins the group, plans the job
//! over each assignment, stops it on revocation, plans it again after a
//! failure (bounded), and leaves when told to stop.

use super::{
    GroupCommit, GroupEvent, Membership, MembershipConfig, OffsetMark, committed_marks,
    partition_count,
};
use crate::{JobEnd, JobHandle, StreamExecutionEnvironment};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// How a process takes part in a group's job (see `docs/scale-out.md`).
#[derive(Clone, Debug)]
pub struct GroupSetting {
    /// The group's name: every process run with it runs one job.
    pub name: String,
    /// Bootstrap servers, `host:port[,…]`.
    pub brokers: String,
    /// The topics whose partitions the group deals out: the inputs and the
    /// internal topics the job reads.
    pub topics: Vec<String>,
    /// Of those, the topics whose partition `p` is key group `p` of the
    /// state downstream of them (the job's max parallelism is their
    /// partition count): a new owner restores it from the checkpoint the
    /// partition's committed offset names.
    pub keyed_topics: Vec<String>,
    /// The checkpoint directory every member shares (a path or `s3://…`).
    pub checkpoint_dir: String,
    /// This process's name among the members (in run directories).
    pub member: String,
    /// How long the group waits for a member that stopped answering.
    pub session_timeout: Duration,
    /// How long a job may take to stop when its partitions are revoked.
    pub stop_deadline: Duration,
    /// Failed runs of one assignment in a row before the member gives up.
    pub max_failures: u32,
    /// How long offset requests may take.
    pub request_timeout: Duration,
    /// Where the group's marks are kept when not in the committed offsets
    /// of keyed topics (a sink that commits its input positions elsewhere,
    /// such as PostgreSQL): read to prune this member's former runs, told
    /// when the member stops.
    pub mark_store: Option<Arc<dyn MarkStore>>,
}

/// Where a group keeps the marks ([`OffsetMark`]) that name the
/// checkpoints its committed positions belong to, when that is not the
/// group's committed offsets: a sink that commits its input positions with
/// its own writes (`floe::connectors::postgres::group::PostgresMarks`).
pub trait MarkStore: Send + Sync + std::fmt::Debug {
    /// The runs (relative to the shared checkpoint directory) that some
    /// committed mark of the group names now: a member deletes its former
    /// runs that are not among them.
    fn named_runs(&self) -> crate::Result<std::collections::BTreeSet<String>>;

    /// The member `member` has stopped every run and leaves: finish what
    /// its runs left in flight (the PostgreSQL store rolls back their
    /// prepared transactions, which would otherwise hold their row locks
    /// until the partitions' next claim).
    fn member_stopped(&self, member: &str) -> crate::Result<()>;
}

impl GroupSetting {
    /// The group `name` at `brokers`, checkpointing to `checkpoint_dir`,
    /// with a member name made of the process id and the time, a 10 s
    /// session timeout, 30 s to stop, 5 failures in a row.
    pub fn new(name: &str, brokers: &str, checkpoint_dir: &str) -> Self {
        GroupSetting {
            name: name.to_string(),
            brokers: brokers.to_string(),
            topics: Vec::new(),
            keyed_topics: Vec::new(),
            checkpoint_dir: checkpoint_dir.to_string(),
            member: format!(
                "m{}-{:x}",
                std::process::id(),
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_micros() as u64 & 0xffff_ffff)
                    .unwrap_or(0)
            ),
            session_timeout: Duration::from_secs(10),
            stop_deadline: Duration::from_secs(30),
            max_failures: 5,
            request_timeout: Duration::from_secs(10),
            mark_store: None,
        }
    }

    /// Keeps the group's marks in `store` rather than in the committed
    /// offsets of keyed topics (see [`MarkStore`]).
    pub fn marks_in(mut self, store: Arc<dyn MarkStore>) -> Self {
        self.mark_store = Some(store);
        self
    }

    /// Deals out the partitions of `topics` (inputs and internal topics).
    pub fn topics(mut self, topics: &[&str]) -> Self {
        self.topics.extend(topics.iter().map(|t| t.to_string()));
        self
    }

    /// Deals out the partitions of `topics`, each partition a key group of
    /// the state they feed (see [`keyed_topics`](Self::keyed_topics)).
    pub fn keyed_topics(mut self, topics: &[&str]) -> Self {
        self.keyed_topics
            .extend(topics.iter().map(|t| t.to_string()));
        self.topics(topics)
    }

    /// How long the group waits for a member that stopped answering.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }
}

/// What a member holds, for a job to build its run on.
pub struct Assignment<'a> {
    /// The group's generation.
    pub generation: i32,
    /// Every partition held, as (topic, partition).
    pub partitions: &'a [(String, i32)],
    /// The run's positions and group metadata: sources record into it
    /// ([`KafkaSource::group_commit`](crate::connectors::kafka::KafkaSource::group_commit)),
    /// exactly-once Kafka sinks commit from it
    /// ([`KafkaSink::group_offsets`](crate::connectors::kafka_sink::KafkaSink::group_offsets)).
    pub commit: &'a Arc<GroupCommit>,
}

impl Assignment<'_> {
    /// The partitions of `topic` held.
    pub fn of(&self, topic: &str) -> Vec<(String, i32)> {
        self.partitions
            .iter()
            .filter(|(t, _)| t == topic)
            .cloned()
            .collect()
    }

    /// A transactional id prefix for the sink `what`, unique to this run.
    pub fn transactional_id(&self, what: &str) -> String {
        format!("floe-{}-{what}", self.commit.run().replace('/', "."))
    }
}

/// A job run by every member of a group: its operators over what a member
/// holds, built anew for each assignment.
pub trait GroupJob {
    /// Adds the job's operators reading `assignment`'s partitions to `env`.
    fn build(
        &self,
        env: &StreamExecutionEnvironment,
        assignment: &Assignment<'_>,
    ) -> crate::Result<()>;
}

/// What a member reports while it runs.
pub enum GroupReport<'a> {
    /// The group gave this member new partitions.
    Rebalance {
        /// The group's generation.
        generation: i32,
        /// Every partition held now, as (topic, partition).
        partitions: &'a [(String, i32)],
    },
    /// A run was planned and started.
    Started(&'a JobHandle),
    /// A run emitted its first record.
    FirstRecord {
        /// The generation of the assignment the run is for.
        generation: i32,
        /// How long after the assignment came.
        after: Duration,
        /// When.
        at: SystemTime,
    },
    /// A run failed (or could not be planned): the assignment is planned
    /// again.
    Restart {
        /// Failures in a row so far.
        attempt: u32,
        /// How long until it is planned again.
        delay: Duration,
        /// Why the run ended.
        reason: &'a str,
    },
    /// A run ended (stopped or failed): its handle, for its metrics.
    Ended(&'a JobHandle),
    /// Something went wrong that does not end the member.
    Warning(&'a str),
}

impl GroupReport<'_> {
    /// The report as the line `floe run … --group` prints on stderr
    /// (`docs/scale-out.md`); `None` for a run started or ended.
    pub fn line(&self) -> Option<String> {
        match self {
            GroupReport::Rebalance {
                generation,
                partitions,
            } => {
                let listed: Vec<String> =
                    partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
                Some(format!(
                    "rebalance generation={generation} partitions={}",
                    listed.join(",")
                ))
            }
            GroupReport::FirstRecord {
                generation,
                after,
                at,
            } => Some(format!(
                "first_record generation={generation} after_ms={} at_ms={}",
                after.as_millis(),
                at.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis())
            )),
            GroupReport::Restart {
                attempt,
                delay,
                reason,
            } => Some(format!(
                "restart attempt={attempt} delay_ms={} reason=\"{}\": planning the assignment again from the group's committed offsets",
                delay.as_millis(),
                reason.replace('"', "'")
            )),
            GroupReport::Warning(message) => Some(format!("warning: {message}")),
            GroupReport::Started(_) | GroupReport::Ended(_) => None,
        }
    }
}

impl std::fmt::Debug for GroupReport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self, self.line()) {
            (_, Some(line)) => f.write_str(&line),
            (GroupReport::Started(h), None) => write!(f, "started {}", h.job_name()),
            (_, None) => f.write_str("ended"),
        }
    }
}

/// The assignment a member holds.
struct Held {
    generation: i32,
    assigned_at: Instant,
    partitions: Vec<(String, i32)>,
    metadata: Arc<rdkafka::consumer::ConsumerGroupMetadata>,
    /// The job runs planned for it so far.
    runs: u32,
}

/// A job running over one assignment.
struct Running {
    handle: JobHandle,
    ended: std::sync::mpsc::Receiver<JobEnd>,
    commit: Arc<GroupCommit>,
    generation: i32,
    assigned_at: Instant,
    reported: bool,
}

/// One member: its setting, its job, the environment its runs copy, and
/// where it reports.
struct Member<'a> {
    setting: &'a GroupSetting,
    job: &'a dyn GroupJob,
    template: &'a StreamExecutionEnvironment,
    report: &'a mut dyn FnMut(GroupReport<'_>),
    /// This member's former runs whose checkpoints are still kept.
    past_runs: Vec<String>,
    /// The keyed topics' partition count: each run's max parallelism.
    key_groups: Option<u32>,
}

/// Runs `job` as a member of the group `setting` names until `stop` is
/// set, each run's environment a copy of `template`'s configuration (its
/// parallelism, checkpoint interval, …) with the run's checkpoint
/// directory, key-group restore and job info; the number of assignments
/// received, or the error that ended the member. See
/// [`StreamExecutionEnvironment::execute_group`].
pub fn run_member(
    template: &StreamExecutionEnvironment,
    setting: &GroupSetting,
    job: &dyn GroupJob,
    stop: &AtomicBool,
    report: &mut dyn FnMut(GroupReport<'_>),
) -> crate::Result<u64> {
    let config = template.config();
    if config.checkpoint.interval.is_none() {
        return Err(crate::Error::Config(
            "a group's job needs checkpointing: each checkpoint commits".into(),
        ));
    }
    let key_groups = key_groups(setting)?;
    let mut membership = MembershipConfig::new(&setting.brokers, &setting.name, &setting.topics);
    membership.session_timeout = setting.session_timeout;
    membership.revoke_deadline = setting.stop_deadline;
    let (joined, events) = Membership::join(membership)?;
    let mut member = Member {
        setting,
        job,
        template,
        report,
        past_runs: Vec::new(),
        key_groups,
    };
    let result = member.serve(&events, stop);
    if !joined.leave(setting.stop_deadline) {
        let warning = format!(
            "leaving the group took over {} s",
            setting.stop_deadline.as_secs()
        );
        (member.report)(GroupReport::Warning(&warning));
    }
    result
}

impl Member<'_> {
    /// Serves the group's events until `stop`; the assignments received.
    fn serve(
        &mut self,
        events: &std::sync::mpsc::Receiver<GroupEvent>,
        stop: &AtomicBool,
    ) -> crate::Result<u64> {
        let mut rebalances = 0u64;
        let mut running: Option<Running> = None;
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
                    rebalances += 1;
                    (self.report)(GroupReport::Rebalance {
                        generation,
                        partitions: &partitions,
                    });
                    failures = 0;
                    // The eager protocol revoked everything first; a job
                    // of an earlier assignment still running stops here.
                    if let Some(r) = running.take() {
                        self.stop_job(r);
                    }
                    retry_at = Some(Instant::now());
                    held = Some(Held {
                        generation,
                        assigned_at: Instant::now(),
                        partitions,
                        metadata: Arc::new(metadata),
                        runs: 0,
                    });
                }
                Ok(GroupEvent::Revoked { done }) => {
                    if let Some(r) = running.take() {
                        self.stop_job(r);
                    }
                    held = None;
                    retry_at = None;
                    let _ = done.send(());
                }
                Ok(GroupEvent::Failed(e)) => {
                    if let Some(r) = running.take() {
                        self.stop_job(r);
                    }
                    return Err(e.into());
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(crate::Error::Config("the group membership ended".into()));
                }
            }
            if let Some(r) = running.as_mut() {
                self.first_record(r);
                // A run that completed a checkpoint ends a run of failures.
                if failures > 0 && r.handle.checkpoint_stats().completed > 0 {
                    failures = 0;
                }
            }
            let ended = running.as_ref().and_then(|r| r.ended.try_recv().ok());
            if let Some(end) = ended {
                let r = running.take().expect("an ended job was running");
                (self.report)(GroupReport::Ended(&r.handle));
                let error = match end {
                    JobEnd::Failed(e) => e.to_string(),
                    JobEnd::Canceled => "canceled".into(),
                    _ => "its input ended".into(),
                };
                retry_at = Some(self.failed(&mut failures, &error)?);
            }
            if retry_at.is_some_and(|at| Instant::now() >= at) {
                retry_at = None;
                match self.start(held.as_mut()) {
                    Ok(r) => running = r,
                    Err(e) => retry_at = Some(self.failed(&mut failures, &e.to_string())?),
                }
            }
        }
        if let Some(r) = running.take() {
            self.stop_job(r);
        }
        // Every run has stopped: what they left in flight ends, then what
        // no mark names goes, the last run too.
        if let Some(store) = &self.setting.mark_store
            && let Err(e) = store.member_stopped(&self.setting.member)
        {
            let warning = format!("cannot end what this member's runs left in flight: {e}");
            (self.report)(GroupReport::Warning(&warning));
        }
        self.prune();
        Ok(rebalances)
    }

    /// Reports a run's first record, once.
    fn first_record(&mut self, r: &mut Running) {
        if r.reported {
            return;
        }
        let Some(at) = r.commit.first_record() else {
            return;
        };
        r.reported = true;
        (self.report)(GroupReport::FirstRecord {
            generation: r.generation,
            after: at.saturating_duration_since(r.assigned_at),
            at: SystemTime::now() - at.elapsed(),
        });
    }

    /// Counts a failed run of the held assignment and reports it; when to
    /// plan it again (a second more per failure in a row), or the error
    /// that ends the member after too many.
    fn failed(&mut self, failures: &mut u32, error: &str) -> crate::Result<Instant> {
        *failures += 1;
        if *failures > self.setting.max_failures {
            return Err(crate::Error::Config(format!(
                "the group's job failed {failures} times in a row; last: {error}"
            )));
        }
        let delay = Duration::from_secs(u64::from(*failures));
        (self.report)(GroupReport::Restart {
            attempt: *failures,
            delay,
            reason: error,
        });
        Ok(Instant::now() + delay)
    }

    /// Cancels a job (its open transactions are aborted by their fencing on
    /// the next start, or by the broker's transaction timeout) and waits
    /// for it, within the stop deadline.
    fn stop_job(&mut self, r: Running) {
        let deadline = self.setting.stop_deadline;
        if let Err(e) = futures::executor::block_on(r.handle.cancel_and_wait(deadline)) {
            let warning = format!("the group's job did not stop: {e}");
            (self.report)(GroupReport::Warning(&warning));
        }
        (self.report)(GroupReport::Ended(&r.handle));
    }

    /// Plans and starts the job over the assignment `held` (counting the
    /// run); `None` when the member holds nothing.
    fn start(&mut self, held: Option<&mut Held>) -> crate::Result<Option<Running>> {
        let Some(held) = held else {
            return Ok(None);
        };
        held.runs += 1;
        if held.partitions.is_empty() {
            return Ok(None);
        }
        let setting = self.setting;
        let run = format!(
            "{}/{}/g{}-{}",
            setting.name, setting.member, held.generation, held.runs
        );
        let mut config = self.template.config();
        config.checkpoint.dir =
            Some(format!("{}/{run}", setting.checkpoint_dir.trim_end_matches('/')).into());
        // The committed offsets name the newest committed transaction's
        // checkpoint, which completes before its commit: three are kept.
        config.checkpoint.retained = config.checkpoint.retained.max(3);
        // In-job restarts would restore sink transactions without their
        // offsets: a failed run is planned again from the committed ones.
        config.restart = Some(crate::failover::RestartStrategy::None);
        config.restore_from = None;
        if let Some(n) = self.key_groups {
            config.max_parallelism = n;
        }
        config.restore_key_groups = self.restore_sources(&held.partitions)?;
        let listed: Vec<String> = held
            .partitions
            .iter()
            .map(|(t, p)| format!("{t}-{p}"))
            .collect();
        for (key, value) in [
            ("group", setting.name.clone()),
            ("member", setting.member.clone()),
            ("generation", held.generation.to_string()),
            ("partitions", listed.join(",")),
        ] {
            config.job_info.insert(key.into(), value);
        }
        self.prune();
        let env = StreamExecutionEnvironment::with_config(config);
        let commit = GroupCommit::new(&run, held.metadata.clone());
        self.past_runs.push(run.clone());
        self.job.build(
            &env,
            &Assignment {
                generation: held.generation,
                partitions: &held.partitions,
                commit: &commit,
            },
        )?;
        let handle = env.execute_async()?;
        (self.report)(GroupReport::Started(&handle));
        let (tx, ended) = std::sync::mpsc::channel();
        let waiter = handle.clone();
        std::thread::Builder::new()
            .name("floe-group-job".into())
            .spawn(move || {
                let _ = tx.send(futures::executor::block_on(waiter.outcome()));
            })
            .map_err(|e| crate::Error::Config(format!("cannot start a thread: {e}")))?;
        Ok(Some(Running {
            handle,
            ended,
            commit,
            generation: held.generation,
            assigned_at: held.assigned_at,
            reported: false,
        }))
    }

    /// Deletes the checkpoints of this member's former runs that no
    /// committed mark names (the committed offsets of the keyed topics, or
    /// the setting's [`MarkStore`]): a mark only ever moves on to a newer
    /// run (an older generation is fenced), so nobody restores from such a
    /// run again. A failure is reported, not fatal: the run is tried again
    /// at the next start.
    fn prune(&mut self) {
        let setting = self.setting;
        if self.past_runs.is_empty() {
            return;
        }
        let named = match (&setting.mark_store, setting.keyed_topics.is_empty()) {
            (Some(store), _) => store.named_runs(),
            (None, false) => committed_runs(setting).map_err(crate::Error::from),
            (None, true) => return,
        };
        let named = match named {
            Ok(named) => named,
            Err(e) => {
                let warning = format!("cannot read the group's marks to prune checkpoints: {e}");
                (self.report)(GroupReport::Warning(&warning));
                return;
            }
        };
        let mut kept = Vec::new();
        for run in std::mem::take(&mut self.past_runs) {
            if named.contains(&run) {
                kept.push(run);
                continue;
            }
            let dir = format!("{}/{run}", setting.checkpoint_dir.trim_end_matches('/'));
            if let Err(e) = delete_run(std::path::Path::new(&dir)) {
                let warning = format!("cannot delete the checkpoints of {dir}: {e}");
                (self.report)(GroupReport::Warning(&warning));
                kept.push(run);
            }
        }
        self.past_runs = kept;
    }

    /// Where each held partition of a keyed topic takes its state from: the
    /// checkpoint its committed offset names, grouped by checkpoint.
    fn restore_sources(
        &self,
        partitions: &[(String, i32)],
    ) -> crate::Result<Vec<(std::path::PathBuf, Vec<u32>)>> {
        let setting = self.setting;
        let keyed: Vec<(String, i32)> = partitions
            .iter()
            .filter(|(t, _)| setting.keyed_topics.contains(t))
            .cloned()
            .collect();
        if keyed.is_empty() {
            return Ok(Vec::new());
        }
        let marks = committed_marks(
            &setting.brokers,
            &setting.name,
            &keyed,
            setting.request_timeout,
        )?;
        let mut by: BTreeMap<OffsetMark, Vec<u32>> = BTreeMap::new();
        for ((topic, partition), offset, mark) in marks {
            match (offset, mark) {
                (_, Some(mark)) => by.entry(mark).or_default().push(partition as u32),
                (None, None) => {}
                (Some(offset), None) => {
                    return Err(crate::Error::Config(format!(
                        "partition {topic}-{partition} of the group has a committed offset \
                         ({offset}) that names no floe checkpoint: its state cannot be restored"
                    )));
                }
            }
        }
        Ok(by
            .into_iter()
            .map(|(mark, groups)| (mark.path(&setting.checkpoint_dir), groups))
            .collect())
    }
}

/// The partition count of the setting's keyed topics, which must agree:
/// partition `p` of each is key group `p` of the state it feeds, so it is
/// every run's max parallelism.
fn key_groups(setting: &GroupSetting) -> crate::Result<Option<u32>> {
    let mut counts = setting.keyed_topics.iter().map(|topic| {
        partition_count(&setting.brokers, topic, setting.request_timeout)
            .map(|n| (topic, n))
            .map_err(crate::Error::from)
    });
    let Some(first) = counts.next().transpose()? else {
        return Ok(None);
    };
    for other in counts {
        let other = other?;
        if other.1 != first.1 {
            return Err(crate::Error::Config(format!(
                "keyed topics '{}' ({} partitions) and '{}' ({}) must have as many partitions: each partition is a key group",
                first.0, first.1, other.0, other.1
            )));
        }
    }
    Ok(Some(first.1 as u32))
}

/// The runs that a committed offset of the setting's keyed topics names.
fn committed_runs(
    setting: &GroupSetting,
) -> Result<std::collections::BTreeSet<String>, super::KafkaError> {
    let mut all = Vec::new();
    for topic in &setting.keyed_topics {
        let n = partition_count(&setting.brokers, topic, setting.request_timeout)?;
        all.extend((0..n).map(|p| (topic.clone(), p)));
    }
    let marks = committed_marks(
        &setting.brokers,
        &setting.name,
        &all,
        setting.request_timeout,
    )?;
    Ok(marks
        .into_iter()
        .filter_map(|(_, _, mark)| mark.map(|m| m.run))
        .collect())
}

/// Deletes a former run's checkpoints: its directory, or its objects.
fn delete_run(dir: &std::path::Path) -> crate::Result<()> {
    if crate::checkpoint::is_object_url(dir) {
        crate::checkpoint::open_existing_storage(dir)?.clear()?;
        return Ok(());
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(crate::Error::Config(format!("{}: {e}", dir.display())))
        }
        _ => Ok(()),
    }
}
