//! The stream execution environment: configuration, sources, execution.

use super::datastream::DataStream;
use crate::config::Config;
use crate::connectors::collection::{CollectionSource, IteratorSource};
use crate::connectors::generator::GeneratorSource;
use crate::connectors::text_file::{ByteLineSource, TextFileSource};
use crate::connectors::{SourceContext, SourceFunction, SourceNode};
use crate::runtime::ArbiterPool;
use crate::runtime::graph::{ErasedChain, Node, NodeKind, Port, ops, partition};
use crate::runtime::job::{JobHandle, JobResult};
use crate::runtime::job_graph::Job;
use crate::runtime::manager::{launch, launch_on_pool};
use crate::{Error, Result};
use floe_actors::chain::ChainInput;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub(crate) struct EnvInner {
    pub config: Config,
    pub nodes: Vec<Node>,
    /// Problems found while the graph was built; `execute` reports the first.
    pub errors: Vec<Error>,
    /// Shared threads to run the job on (else it starts its own).
    pub pool: Option<ArbiterPool>,
}

/// The environment's graph under construction, shared by the environment
/// and its streams. A mutex (not a `RefCell`) so that the environment and
/// its streams are `Send`: an async handler can hold them across `.await`
/// and a job can be built on one thread and started on another. Builder
/// calls lock it briefly; nothing runs user code under it.
#[derive(Clone)]
pub(crate) struct EnvCell(Arc<Mutex<EnvInner>>);

impl EnvCell {
    /// The graph, to read.
    pub fn borrow(&self) -> MutexGuard<'_, EnvInner> {
        self.borrow_mut()
    }

    /// The graph, to change. A builder call that panicked half-way (a user
    /// closure never runs under the lock, so only floe itself could) leaves
    /// the graph as far as it got, as the `RefCell` before did.
    pub fn borrow_mut(&self) -> MutexGuard<'_, EnvInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where a job is assembled and from where it runs.
///
/// The environment is `Send` and `Sync` (and so are its streams): build a
/// job in an async handler, hold it across `.await`, start it anywhere.
///
/// # Examples
/// ```
/// use floe::StreamExecutionEnvironment;
///
/// let env = StreamExecutionEnvironment::new();
/// env.set_parallelism(2);
/// let out = env
///     .from_collection(vec![1i64, 2, 3, 4])
///     .map(|x| x * 10)
///     .filter(|x| *x > 10)
///     .collect();
/// env.execute().unwrap();
/// let mut got = out.take();
/// got.sort();
/// assert_eq!(got, vec![20, 30, 40]);
/// ```
#[derive(Clone)]
pub struct StreamExecutionEnvironment {
    pub(crate) inner: EnvCell,
}

impl Default for StreamExecutionEnvironment {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamExecutionEnvironment {
    /// An environment with the default configuration (parallelism = cores).
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    /// An environment with `config`.
    pub fn with_config(config: Config) -> Self {
        StreamExecutionEnvironment {
            inner: EnvCell(Arc::new(Mutex::new(EnvInner {
                config,
                nodes: Vec::new(),
                errors: Vec::new(),
                pool: None,
            }))),
        }
    }

    /// Whether `other` is this environment (a clone of it), not another.
    #[cfg(feature = "sql")]
    pub(crate) fn same_as(&self, other: &StreamExecutionEnvironment) -> bool {
        Arc::ptr_eq(&self.inner.0, &other.inner.0)
    }

    /// A copy of the current configuration.
    pub fn config(&self) -> Config {
        self.inner.borrow().config.clone()
    }

    /// Default parallelism of operators that do not set their own.
    pub fn set_parallelism(&self, parallelism: usize) -> &Self {
        self.inner.borrow_mut().config.parallelism = parallelism;
        self
    }

    /// Number of key groups (default 128).
    pub fn set_max_parallelism(&self, max_parallelism: u32) -> &Self {
        self.inner.borrow_mut().config.max_parallelism = max_parallelism;
        self
    }

    /// Records per batch (default 1024).
    pub fn set_batch_size(&self, batch_size: usize) -> &Self {
        self.inner.borrow_mut().config.runtime.batch_size = batch_size;
        self
    }

    /// How long a partly filled batch may wait (zero: flush after each step).
    pub fn set_buffer_timeout(&self, timeout: Duration) -> &Self {
        self.inner.borrow_mut().config.runtime.buffer_timeout = timeout;
        self
    }

    /// Number of arbiters (threads) to spread subtasks over.
    pub fn set_arbiters(&self, arbiters: usize) -> &Self {
        self.inner.borrow_mut().config.runtime.arbiters = arbiters;
        self
    }

    /// Credits (batches) each receiver grants a channel.
    pub fn set_credits(&self, credits: u32) -> &Self {
        self.inner.borrow_mut().config.runtime.credits = credits;
        self
    }

    /// The budget of each subtask's network channels, in batches of
    /// `batch_size` records (default 64): half for its input gate, half for
    /// its record writers. With many channels the credits per channel and
    /// the batch size shrink to fit it (at least one credit per channel).
    pub fn set_network_buffers(&self, buffers: usize) -> &Self {
        self.inner.borrow_mut().config.runtime.network_buffers = buffers;
        self
    }

    /// The job's name: the `job` label of its metrics (default `job-N`).
    pub fn set_job_name(&self, name: impl Into<String>) -> &Self {
        self.inner.borrow_mut().config.job_name = Some(name.into());
        self
    }

    /// The seed of seeded choices (shuffle partitioning).
    pub fn set_seed(&self, seed: u64) -> &Self {
        self.inner.borrow_mut().config.seed = seed;
        self
    }

    /// Replaces the whole configuration (before operators are added).
    pub fn set_config(&self, config: Config) -> &Self {
        self.inner.borrow_mut().config = config;
        self
    }

    /// Takes a checkpoint every `interval` (exactly-once, aligned barriers,
    /// into a temporary directory unless [`set_checkpoint_config`]
    /// (Self::set_checkpoint_config) names one).
    pub fn enable_checkpointing(&self, interval: Duration) -> &Self {
        self.inner.borrow_mut().config.checkpoint.interval = Some(interval);
        self
    }

    /// Replaces the checkpoint settings.
    pub fn set_checkpoint_config(&self, checkpoint: crate::checkpoint::CheckpointConfig) -> &Self {
        self.inner.borrow_mut().config.checkpoint = checkpoint;
        self
    }

    /// Starts the job from a checkpoint directory (its newest intact
    /// checkpoint), one checkpoint's directory or a savepoint. Operators are
    /// matched by uid; the parallelism may differ from the snapshot's.
    pub fn restore_from(&self, path: impl Into<std::path::PathBuf>) -> &Self {
        self.inner.borrow_mut().config.restore_from = Some(path.into());
        self
    }

    /// Restores keyed state key group by key group, each from a checkpoint
    /// of its own (`(checkpoint, key groups)`), when no
    /// [`restore_from`](Self::restore_from) is set: how a group member
    /// takes over partitions whose state other members checkpointed
    /// (`docs/scale-out.md`). Only keyed state is restored.
    pub fn restore_key_groups(&self, sources: Vec<(std::path::PathBuf, Vec<u32>)>) -> &Self {
        self.inner.borrow_mut().config.restore_key_groups = sources;
        self
    }

    /// Runs `job` as a member of the group `setting` names (group mode,
    /// `docs/scale-out.md`; feature `kafka`) until `stop` is set: every
    /// process run with the same group name runs one job, Kafka's consumer
    /// group dealing the partitions of `setting.topics` out. The job is
    /// built anew over each assignment, in an environment with this one's
    /// configuration (parallelism, checkpointing, which it needs: each
    /// checkpoint commits) and the run's own checkpoint directory under
    /// `setting.checkpoint_dir`. `report` hears each rebalance, run, first
    /// record and restart. Returns the number of assignments received.
    ///
    /// ```no_run
    /// # fn main() -> floe::Result<()> {
    /// use floe::StreamExecutionEnvironment;
    /// use floe::connectors::kafka::group::{Assignment, GroupJob, GroupSetting};
    /// use floe::connectors::kafka::{KafkaSource, StartingOffsets};
    /// use floe::connectors::kafka_sink::KafkaSink;
    ///
    /// /// Upper-cases the lines of `lines` into `upper`, exactly once.
    /// struct Upper;
    ///
    /// impl GroupJob for Upper {
    ///     fn build(&self, env: &StreamExecutionEnvironment, a: &Assignment<'_>) -> floe::Result<()> {
    ///         let source = KafkaSource::lines("broker:9092", &["lines"])
    ///             .group_id("upper")
    ///             .starting_offsets(StartingOffsets::Committed)
    ///             .partitions(&a.of("lines"))
    ///             .group_commit(a.commit.clone());
    ///         let sink = KafkaSink::<String>::lines("broker:9092", "upper")
    ///             .transactional_id_prefix(&a.transactional_id("output"))
    ///             .group_offsets(a.commit.clone(), &["lines"]);
    ///         env.add_source("Kafka Source", move |ctx| source.reader(ctx))
    ///             .map(|line: String| line.to_uppercase())
    ///             .sink_exactly_once("Kafka Sink", sink.exactly_once());
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let env = StreamExecutionEnvironment::new();
    /// env.enable_checkpointing(std::time::Duration::from_secs(1));
    /// let setting = GroupSetting::new("upper", "broker:9092", "/shared/checkpoints")
    ///     .topics(&["lines"]);
    /// let stop = std::sync::atomic::AtomicBool::new(false);
    /// env.execute_group(&setting, &Upper, &stop, &mut |report| eprintln!("{report:?}"))?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "kafka")]
    pub fn execute_group(
        &self,
        setting: &crate::connectors::kafka::group::GroupSetting,
        job: &dyn crate::connectors::kafka::group::GroupJob,
        stop: &std::sync::atomic::AtomicBool,
        report: &mut dyn FnMut(crate::connectors::kafka::group::GroupReport<'_>),
    ) -> Result<u64> {
        crate::connectors::kafka::group::run_member(self, setting, job, stop, report)
    }

    /// A fact about the job that `/status` and the dashboard show, under
    /// `info` (e.g. which group member runs it).
    pub fn set_job_info(&self, key: &str, value: &str) -> &Self {
        self.inner
            .borrow_mut()
            .config
            .job_info
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Runs the job on `pool`'s threads instead of threads of its own
    /// (which are `RuntimeConfig::arbiters` subtask threads, one for the
    /// checkpoint coordinator, one for the supervisor and, off an actix
    /// arbiter, one for the job's actix system). Jobs of many environments
    /// can share one pool.
    pub fn set_arbiter_pool(&self, pool: &ArbiterPool) -> &Self {
        self.inner.borrow_mut().pool = Some(pool.clone());
        self
    }

    /// Never fuse operators into chains.
    pub fn disable_operator_chaining(&self) -> &Self {
        self.inner.borrow_mut().config.chaining = false;
        self
    }

    pub(crate) fn add_node(&self, node: Node) -> usize {
        let mut inner = self.inner.borrow_mut();
        inner.nodes.push(node);
        inner.nodes.len() - 1
    }

    /// A stream from a custom source; `create` makes one source per subtask.
    pub fn add_source<T, S, F>(&self, name: &str, create: F) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        S: SourceFunction<T>,
        F: Fn(&SourceContext) -> Result<S> + Send + Sync + 'static,
    {
        self.source_node(name, None, move |ctx| {
            create(ctx).map(|s| Box::new(s) as Box<dyn SourceFunction<T>>)
        })
    }

    fn source_node<T, F>(&self, name: &str, parallelism: Option<usize>, create: F) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        F: Fn(&SourceContext) -> Result<Box<dyn SourceFunction<T>>> + Send + Sync + 'static,
    {
        let build = Arc::new(
            move |ctx: &crate::runtime::graph::NodeCtx, main: ErasedChain| {
                let next: Box<dyn ChainInput<T>> =
                    crate::runtime::graph::downcast(main, "source output")?;
                let mut source = create(&ctx.source_context())?;
                if let Some(state) = ctx.restored.clone() {
                    source
                        .restore_union_state(state.union_list)
                        .and_then(|()| source.restore_state(state.split_list))
                        .map_err(|e| super::datastream::restore_error(&ctx.name, ctx.subtask, e))?;
                }
                let mut driver =
                    SourceNode::new(source, next, ctx.info(), ctx.config.runtime.batch_size);
                if let Some((records, request)) = ctx.savepoint_pause() {
                    driver = driver.with_savepoint_pause(records, request)?;
                }
                if let Some(hold) = ctx.instrumentation.source_hold() {
                    driver = driver.with_hold(hold);
                }
                Ok(Box::new(driver) as Box<dyn floe_actors::source::SourceDriver>)
            },
        );
        let id = self.add_node(Node {
            name: name.to_string(),
            uid: None,
            transactional: false,
            input_rate: None,
            parallelism: parallelism.unwrap_or(0),
            chainable: true,
            suspends: false,
            fixed_parallelism: parallelism.is_some(),
            kind: NodeKind::Source(build),
            inputs: Vec::new(),
            in_type: ops::<()>(),
            out_type: ops::<T>(),
            side_types: Vec::new(),
        });
        DataStream::from_node(self.clone(), id, Port::Main, partition::forward::<T>(false))
    }

    /// The elements of a vector, in order, from one source subtask.
    pub fn from_collection<T>(&self, data: Vec<T>) -> DataStream<T>
    where
        T: Clone + Send + Sync + 'static,
    {
        let data = Arc::new(data);
        self.source_node("Collection Source", Some(1), move |_| {
            Ok(Box::new(CollectionSource::new(data.clone())) as Box<dyn SourceFunction<T>>)
        })
    }

    /// The items of an iterator, from one source subtask. The job can run once.
    pub fn from_iter<I>(&self, iter: I) -> DataStream<I::Item>
    where
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: Clone + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Some(iter.into_iter())));
        self.source_node("Iterator Source", Some(1), move |_| {
            Ok(Box::new(IteratorSource::new(slot.clone())) as Box<dyn SourceFunction<I::Item>>)
        })
    }

    /// The numbers `from..=to`, split over the source's subtasks.
    pub fn generate_sequence(&self, from: i64, to: i64) -> DataStream<i64> {
        let count = if to >= from {
            (to - from) as u64 + 1
        } else {
            0
        };
        self.from_generator(count, move |i| from + i as i64)
            .name("Sequence Source")
    }

    /// Records `f(0) .. f(count - 1)`, split over the source's subtasks.
    pub fn from_generator<T, F>(&self, count: u64, f: F) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        F: Fn(u64) -> T + Send + Sync + 'static,
    {
        self.generator(count, None, f)
    }

    /// Like [`from_generator`](Self::from_generator), at most `per_second`
    /// records per second over all subtasks.
    pub fn from_generator_rate_limited<T, F>(
        &self,
        count: u64,
        per_second: f64,
        f: F,
    ) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        F: Fn(u64) -> T + Send + Sync + 'static,
    {
        self.generator(count, Some(per_second), f)
    }

    fn generator<T, F>(&self, count: u64, rate: Option<f64>, f: F) -> DataStream<T>
    where
        T: Clone + Send + 'static,
        F: Fn(u64) -> T + Send + Sync + 'static,
    {
        let f: Arc<dyn Fn(u64) -> T + Send + Sync> = Arc::new(f);
        self.source_node("Generator Source", None, move |ctx| {
            Ok(Box::new(GeneratorSource::new(f.clone(), count, rate, ctx))
                as Box<dyn SourceFunction<T>>)
        })
    }

    /// The lines of a text file, read by one source subtask. The lines can
    /// be recorded as channel state, so unaligned checkpoints overtake them.
    pub fn read_text_file(&self, path: impl Into<PathBuf>) -> DataStream<String> {
        let path: PathBuf = path.into();
        self.source_node("Text File Source", Some(1), move |_| {
            Ok(Box::new(TextFileSource::open(&path)?) as Box<dyn SourceFunction<String>>)
        })
        .with_channel_state()
    }

    /// The lines of a file as bytes, undecoded, read by one source subtask:
    /// for a job that decides itself what a line that is not valid UTF-8
    /// means (skip it, count it) rather than failing as
    /// [`read_text_file`](Self::read_text_file) does. Its source position
    /// is the same as `read_text_file`'s.
    pub fn read_text_file_bytes(&self, path: impl Into<PathBuf>) -> DataStream<Vec<u8>> {
        let path: PathBuf = path.into();
        self.source_node("Text File Source", Some(1), move |_| {
            Ok(Box::new(ByteLineSource::open(&path)?) as Box<dyn SourceFunction<Vec<u8>>>)
        })
    }

    fn take_plan(&self) -> Result<(Job, Config, Option<ArbiterPool>)> {
        let mut inner = self.inner.borrow_mut();
        let pool = inner.pool.clone();
        let config = inner.config.clone();
        config.validate()?;
        if !inner.errors.is_empty() {
            let e = inner.errors.swap_remove(0);
            inner.nodes.clear();
            inner.errors.clear();
            return Err(e);
        }
        let mut nodes = std::mem::take(&mut inner.nodes);
        for n in &mut nodes {
            if !n.fixed_parallelism {
                n.parallelism = config.parallelism;
            }
        }
        crate::runtime::graph::share_channel_codecs(&mut nodes);
        Ok((Job::new(nodes, &config)?, config, pool))
    }

    /// The graph [`execute`](Self::execute) would deploy (its chains,
    /// parallelism and the partitioning of every edge), without running
    /// it. Like `execute`, this takes the operators out of the
    /// environment.
    pub fn job_graph(&self) -> Result<crate::runtime::status::JobGraphInfo> {
        let (plan, _, _) = self.take_plan()?;
        Ok(plan.describe())
    }

    /// Starts the job and returns at once with its handle.
    ///
    /// Called on a running arbiter of an actix system (inside
    /// `System::block_on`, an actor or a future spawned on one), the job's
    /// arbiters join that system. Anywhere else (a plain thread, a tokio
    /// runtime, a thread where an actix system ran earlier and ended) the job
    /// gets an actix system of its own on a background thread. The job's
    /// operators are taken out of the environment.
    ///
    /// With an [`ArbiterPool`](Self::set_arbiter_pool) the job starts on the
    /// pool's threads wherever it is called from. Either way the caller
    /// does not wait for the job's deployment (spawning its subtasks,
    /// loading and verifying what it restores): that runs on the job's
    /// system afterwards. A configuration error is returned here; a restore
    /// that cannot be loaded fails the job, and
    /// [`JobHandle::wait`](crate::JobHandle::wait) returns its typed error.
    pub fn execute_async(&self) -> Result<JobHandle> {
        let (plan, config, pool) = self.take_plan()?;
        if let Some(pool) = pool {
            return launch_on_pool(&pool, plan, config);
        }
        if on_running_arbiter() {
            return launch(plan, config, None);
        }
        launch_on_own_thread(plan, config)
    }

    /// Runs the job to its end and returns its result.
    ///
    /// The job always runs on a thread and actix system of its own, whatever
    /// the calling thread runs, and the caller blocks until it ends. Called
    /// inside an actix system this parks the caller's arbiter for that long
    /// (the job itself does not need it); use
    /// [`execute_async`](Self::execute_async) there to keep the arbiter free.
    pub fn execute(&self) -> Result<JobResult> {
        let (plan, config, pool) = self.take_plan()?;
        let handle = match pool {
            Some(pool) => launch_on_pool(&pool, plan, config)?,
            None => launch_on_own_thread(plan, config)?,
        };
        futures::executor::block_on(handle.wait())
    }
}

/// Whether the calling thread is a running arbiter of a live actix system,
/// so that a job can spawn its manager there.
///
/// `System::try_current` and `Arbiter::try_current` alone do not tell: their
/// thread-locals outlive the system that set them, so a thread that ran
/// `System::new().block_on(..)` earlier still names that system and its
/// arbiter after they ended, and spawning there panics ("`spawn_local`
/// called from outside of a `task::LocalSet`"). A running arbiter is inside
/// a tokio runtime context and still accepts work.
fn on_running_arbiter() -> bool {
    actix::System::try_current().is_some()
        && tokio::runtime::Handle::try_current().is_ok()
        && actix_rt::Arbiter::try_current().is_some_and(|arbiter| arbiter.spawn(async {}))
}

/// Starts the job in an actix system of its own on a new thread, which
/// lives until the job ends.
fn launch_on_own_thread(plan: Job, config: Config) -> Result<JobHandle> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("floe-job".into())
        .spawn(move || {
            actix::System::new().block_on(async move {
                match launch(plan, config, None) {
                    Ok(handle) => {
                        // Not a clone of the handle: the caller's last
                        // clone must be the last (cancel on drop).
                        let ended = handle.finished();
                        let _ = tx.send(Ok(handle));
                        let _ = ended.await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        })
        .map_err(|e| Error::Runtime(floe_actors::Error::Runtime(e.to_string())))?;
    rx.recv()
        .map_err(|_| Error::Runtime(floe_actors::Error::Runtime("job thread died".into())))?
}
