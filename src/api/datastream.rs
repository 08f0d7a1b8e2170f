//! `DataStream<T>`: a stream of records of type `T` and its transformations.

use super::environment::StreamExecutionEnvironment;
use super::keyed::KeyedStream;
use crate::operators::basic::{FilterOp, MapOp, SuspendingFlatMap, TryMapOp};
use crate::operators::keyed::KeyFn;
use crate::operators::node::OperatorNode;
use crate::operators::process::{ProcessFunction, ProcessOp};
use crate::operators::{Operator, OutputTag};
use crate::runtime::graph::{
    BuildOperator, Edge, ErasedChain, Node, NodeCtx, NodeId, NodeKind, Partition, Port, ops,
    partition,
};
use crate::{Error, Result};
use floe_actors::chain::ChainInput;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

#[derive(Clone)]
pub(crate) struct StreamRef {
    pub node: NodeId,
    pub port: Port,
    pub partition: Partition,
}

/// A stream of records of type `T`.
///
/// Transformations add operators to the environment's graph and return new
/// streams; a stream can feed several operators (each gets every record).
pub struct DataStream<T> {
    pub(crate) env: StreamExecutionEnvironment,
    pub(crate) refs: Vec<StreamRef>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            env: self.env.clone(),
            refs: self.refs.clone(),
            _type: PhantomData,
        }
    }
}

impl<T: Clone + Send + 'static> DataStream<T> {
    pub(crate) fn from_node(
        env: StreamExecutionEnvironment,
        node: NodeId,
        port: Port,
        partition: Partition,
    ) -> Self {
        DataStream {
            env,
            refs: vec![StreamRef {
                node,
                port,
                partition,
            }],
            _type: PhantomData,
        }
    }

    /// The environment this stream belongs to.
    pub fn env(&self) -> &StreamExecutionEnvironment {
        &self.env
    }

    /// Adds an operator consuming this stream; `make` creates it per subtask.
    pub fn transform<U, O, F>(&self, name: &str, make: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        O: Operator<T, U>,
        F: Fn(&NodeCtxView) -> O + Send + Sync + 'static,
    {
        let build: BuildOperator = Arc::new(move |ctx: &NodeCtx, main: ErasedChain, sides| {
            let next: Box<dyn ChainInput<U>> =
                crate::runtime::graph::downcast(main, "operator output")?;
            let view = NodeCtxView {
                subtask: ctx.subtask.0 as usize,
                parallelism: ctx.parallelism,
                max_parallelism: ctx.config.max_parallelism,
                final_checkpoint: ctx.config.checkpoint.interval.is_some(),
            };
            let mut op = make(&view);
            let info = ctx.info();
            if let Some(state) = ctx.restored.clone() {
                info.injected_fault(crate::failover::FaultMoment::Restore)?;
                op.restore_state(state)
                    .map_err(|e| restore_error(&ctx.name, ctx.subtask, e))?;
            }
            let node = OperatorNode::new(op, next, sides, info);
            let chain: Box<dyn ChainInput<T>> = Box::new(node);
            Ok(Box::new(chain) as ErasedChain)
        });
        let id = self.env.add_node(Node {
            name: name.to_string(),
            uid: None,
            transactional: false,
            input_rate: None,
            parallelism: 0,
            chainable: true,
            suspends: false,
            fixed_parallelism: false,
            kind: NodeKind::Operator(build),
            inputs: self
                .refs
                .iter()
                .map(|r| Edge {
                    from: r.node,
                    port: r.port,
                    partition: r.partition.clone(),
                })
                .collect(),
            in_type: ops::<T>(),
            out_type: ops::<U>(),
            side_types: Vec::new(),
        });
        DataStream::from_node(
            self.env.clone(),
            id,
            Port::Main,
            partition::forward::<U>(false),
        )
    }

    /// Applies `f` to every record.
    pub fn map<U, F>(&self, f: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        F: FnMut(T) -> U + Clone + Send + Sync + 'static,
    {
        self.transform("Map", move |_| MapOp(f.clone()))
    }

    /// Applies a fallible `f`; an error fails the job and names this operator.
    pub fn try_map<U, F>(&self, f: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        F: FnMut(T) -> Result<U> + Clone + Send + Sync + 'static,
    {
        self.transform("Map", move |_| TryMapOp(f.clone()))
    }

    /// Keeps the records `f` accepts.
    pub fn filter<F>(&self, f: F) -> DataStream<T>
    where
        F: FnMut(&T) -> bool + Clone + Send + Sync + 'static,
    {
        self.transform("Filter", move |_| FilterOp(f.clone()))
    }

    /// Replaces every record with the items `f` returns for it. The items
    /// are taken from the iterator as the outputs have room: a record that
    /// produces very many (a huge line split into words) is emitted batch by
    /// batch under backpressure, not collected first, when `f` returns a
    /// lazy iterator (such as [`tokenize`](crate::tokenize)'s).
    pub fn flat_map<U, I, F>(&self, f: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        I: IntoIterator<Item = U> + 'static,
        I::IntoIter: Send,
        F: FnMut(T) -> I + Clone + Send + Sync + 'static,
    {
        self.transform("Flat Map", move |_| SuspendingFlatMap::new(f.clone()))
            .with_node(|n| n.suspends = true)
    }

    /// Runs a process function (records with context and side outputs).
    /// Its operator list state (`ctx.operator_list_state`,
    /// `ctx.union_list_state`) is checkpointed and redistributed on restore.
    pub fn process<U, P>(&self, function: P) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        P: ProcessFunction<T, U> + Clone + Sync,
    {
        self.transform("Process", move |view| {
            ProcessOp::for_subtask(
                function.clone(),
                format!("Process[{}]", view.subtask),
                view.subtask,
                view.parallelism,
            )
        })
    }

    /// Assigns event timestamps and generates watermarks (chained after this stream).
    pub fn assign_timestamps_and_watermarks(
        &self,
        strategy: crate::time::WatermarkStrategy<T>,
    ) -> DataStream<T>
    where
        T: Sync,
    {
        let strategy = std::sync::Mutex::new(strategy);
        self.transform("Timestamps/Watermarks", move |_| {
            crate::operators::timestamps::TimestampsOp::new(
                strategy.lock().expect("strategy lock poisoned").clone(),
            )
        })
    }

    /// Partitions by a computed key.
    pub fn key_by<K, F>(&self, key: F) -> KeyedStream<T, K>
    where
        K: Hash + Eq + Clone + Send + 'static,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        self.keyed(KeyFn::Owned(Arc::new(key)))
    }

    /// Partitions by a key that is a field of the record; no key copy per record.
    ///
    /// # Examples
    /// ```
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let words = env.from_collection(vec![("a".to_string(), 1u64), ("b".into(), 1), ("a".into(), 1)]);
    /// let counts = words.key_by_field(|t| &t.0).sum(|t| &mut t.1).collect();
    /// env.execute().unwrap();
    /// let last_a = counts.take().into_iter().filter(|t| t.0 == "a").map(|t| t.1).max();
    /// assert_eq!(last_a, Some(2));
    /// ```
    pub fn key_by_field<K>(&self, key: for<'a> fn(&'a T) -> &'a K) -> KeyedStream<T, K>
    where
        K: Hash + Eq + Clone + Send + 'static,
    {
        self.keyed(KeyFn::Borrowed(key))
    }

    /// Treats this stream as keyed by `key` without repartitioning it
    /// (Flink's `reinterpretAsKeyedStream`): the records must already be
    /// where [`key_by`](Self::key_by) would send them — every record at the
    /// subtask owning its key's key group. Keyed state and timers then work
    /// over forward edges, without a shuffle; a record whose key group the
    /// subtask does not own fails the job with
    /// [`StateError::KeyGroupOutOfRange`](crate::state::StateError::KeyGroupOutOfRange) when it
    /// touches keyed state.
    pub fn reinterpret_as_keyed_stream<K, F>(&self, key: F) -> KeyedStream<T, K>
    where
        K: Hash + Eq + Clone + Send + 'static,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        KeyedStream::new(self.clone(), KeyFn::Owned(Arc::new(key)))
    }

    fn keyed<K>(&self, key: KeyFn<T, K>) -> KeyedStream<T, K>
    where
        K: Hash + Eq + Clone + Send + 'static,
    {
        let max_parallelism = self.env.inner.borrow().config.max_parallelism;
        let k2 = key.clone();
        let hash: Arc<dyn Fn(&T) -> u64 + Send + Sync> =
            Arc::new(move |v| k2.with_key(v, |k| floe_actors::keygroup::stable_hash(k)));
        let part = partition::key_groups::<T>(hash, max_parallelism);
        KeyedStream::new(self.repartition(part), key)
    }

    pub(crate) fn repartition(&self, partition: Partition) -> DataStream<T> {
        let mut s = self.clone();
        for r in &mut s.refs {
            r.partition = partition.clone();
        }
        s
    }

    /// Round robin over every downstream subtask.
    pub fn rebalance(&self) -> DataStream<T> {
        self.repartition(partition::rebalance::<T>())
    }

    /// Round robin over a local subset of downstream subtasks.
    pub fn rescale(&self) -> DataStream<T> {
        self.repartition(partition::rescale::<T>())
    }

    /// A seeded random downstream subtask per record.
    pub fn shuffle(&self) -> DataStream<T> {
        self.repartition(partition::shuffle::<T>())
    }

    /// Every record to every downstream subtask.
    pub fn broadcast(&self) -> DataStream<T> {
        self.repartition(partition::broadcast::<T>())
    }

    /// Subtask i to subtask i (requires equal parallelism).
    pub fn forward(&self) -> DataStream<T> {
        self.repartition(partition::forward::<T>(true))
    }

    /// `f(record, n)` picks the downstream subtask (taken modulo n).
    pub fn partition_custom<F>(&self, f: F) -> DataStream<T>
    where
        F: Fn(&T, usize) -> usize + Send + Sync + 'static,
    {
        self.repartition(partition::custom::<T>(Arc::new(f)))
    }

    /// This stream together with `others` (same record type).
    pub fn union(&self, others: &[&DataStream<T>]) -> DataStream<T> {
        let mut s = self.clone();
        for o in others {
            s.refs.extend(o.refs.iter().cloned());
        }
        s
    }

    /// The side output `tag` of the operator that produced this stream.
    pub fn get_side_output<X: Clone + Send + 'static>(&self, tag: &OutputTag<X>) -> DataStream<X> {
        let node = self.refs[0].node;
        {
            let mut inner = self.env.inner.borrow_mut();
            let n = &mut inner.nodes[node];
            if !n.side_types.iter().any(|(t, _)| *t == tag.id()) {
                n.side_types.push((tag.id(), ops::<X>()));
            }
        }
        DataStream::from_node(
            self.env.clone(),
            node,
            Port::Side(tag.id()),
            partition::forward::<X>(false),
        )
    }

    /// Marks the producing operator's input type as serde-encodable, so
    /// unaligned checkpoints can hold its in-flight records.
    pub(crate) fn with_serde_input<I>(self) -> Self
    where
        I: Clone + Send + serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        self.with_node(|n| n.in_type = crate::runtime::graph::serde_ops::<I>())
    }

    /// Lets unaligned checkpoints record this stream's in-flight records as
    /// channel state: the records are encoded with serde (postcard) when a
    /// barrier overtakes them in an output or input queue, and re-injected
    /// on restore. Without it, a channel whose record type the runtime
    /// cannot encode keeps its barriers in place (handled as aligned).
    /// Keyed and window inputs and the text file source have it already.
    ///
    /// # Examples
    /// ```
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let doubled = env
    ///     .from_collection(vec![1u64, 2, 3])
    ///     .map(|x| x * 2)
    ///     .with_channel_state()
    ///     .rebalance()
    ///     .collect();
    /// env.execute().unwrap();
    /// let mut out = doubled.take();
    /// out.sort();
    /// assert_eq!(out, vec![2, 4, 6]);
    /// ```
    pub fn with_channel_state(self) -> Self
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        {
            let mut inner = self.env.inner.borrow_mut();
            for r in &self.refs {
                let node = &mut inner.nodes[r.node];
                match r.port {
                    Port::Main => node.out_type = crate::runtime::graph::serde_ops::<T>(),
                    Port::Side(tag) => {
                        if let Some(side) = node.side_types.iter_mut().find(|(t, _)| *t == tag) {
                            side.1 = crate::runtime::graph::serde_ops::<T>();
                        }
                    }
                }
            }
        }
        self
    }

    fn with_node(self, f: impl FnOnce(&mut Node)) -> Self {
        if let Some(r) = self.refs.first() {
            f(&mut self.env.inner.borrow_mut().nodes[r.node]);
        }
        self
    }

    /// Marks the operator that produced this stream as a transactional
    /// sink (a restart from scratch is announced to it).
    pub(crate) fn transactional(self) -> Self {
        self.with_node(|n| n.transactional = true)
    }

    /// Names the operator that produced this stream.
    pub fn name(self, name: &str) -> Self {
        self.with_node(|n| n.name = name.to_string())
    }

    /// Sets the stable id of the operator that produced this stream:
    /// checkpoints and savepoints match its state by this id, so a job
    /// restored after its graph changed finds it again (as Flink's `uid`).
    pub fn uid(self, uid: &str) -> Self {
        self.with_node(|n| n.uid = Some(uid.to_string()))
    }

    /// Limits the operator that produced this stream to consuming
    /// `records_per_second` records per second over all its subtasks: a
    /// throttled sink. The operator is not chained to its input, so the
    /// rate counts the records it receives. It waits on timers, never
    /// blocking a thread, and its inputs feel the backpressure.
    pub fn set_input_rate(self, records_per_second: f64) -> Self {
        self.with_node(|n| n.input_rate = Some(records_per_second))
    }

    /// Sets the parallelism of the operator that produced this stream.
    pub fn set_parallelism(self, parallelism: usize) -> Self {
        self.with_node(|n| {
            n.parallelism = parallelism;
            n.fixed_parallelism = true;
        })
    }

    /// Keeps the operator that produced this stream out of any chain.
    pub fn disable_chaining(self) -> Self {
        self.with_node(|n| n.chainable = false)
    }
}

/// What an operator factory learns about its subtask.
#[derive(Clone, Copy, Debug)]
pub struct NodeCtxView {
    /// This subtask's index.
    pub subtask: usize,
    /// The operator's parallelism.
    pub parallelism: usize,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Whether the job ends with a final checkpoint (periodic checkpoints
    /// on): an operator that commits on checkpoint completion commits its
    /// last output then, not at its end of input.
    pub final_checkpoint: bool,
}

/// A restore failure, naming the operator and subtask.
pub(crate) fn restore_error(
    operator: &str,
    subtask: floe_actors::ids::SubtaskIndex,
    e: Error,
) -> Error {
    match e {
        Error::State(_) | Error::Checkpoint(_) => e,
        other => {
            Error::Runtime(other.into_operator_failure(operator, subtask, "cannot restore state: "))
        }
    }
}
