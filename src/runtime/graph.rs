//! The stream graph: the typed API's operators, erased to what deployment needs.
//!
//! Each node keeps closures, created where its record types were known, that
//! build its operator for one subtask, fan out or write its output, and spawn a
//! subtask actor headed by it. Deployment (`deploy.rs`) then works on this graph
//! without knowing any record type; the plan (`crate::plan`) sees only each
//! node's [`NodeShape`].
//!
//! What stays erased and why: a chain element (`Box<dyn ChainInput<T>>`), a
//! partitioner and a subtask address travel through the deployment loop as
//! `Box<dyn Any>`, because one loop wires chains of many record types
//! together. The node's [`TypeOps`], made where `T` was known, is the only
//! place that opens them again; a mismatch is a bug in floe, reported as
//! [`Error::Internal`] naming the place, never a panic.

use super::instrumentation::Instrumentation;
use crate::config::Config;
use crate::connectors::SourceContext;
use crate::operators::node::{NodeInfo, SidePort, TypedSidePort};
use crate::plan::{EdgeShape, NodeShape};
pub(crate) use crate::plan::{NodeId, Port};
use crate::{Error, Result};
use actix::{Addr, ArbiterHandle, Recipient};
use floe_actors::chain::{ChainInput, Discard, Fanout};
use floe_actors::ids::{ChannelId, OperatorId, SubtaskIndex, VertexId};
use floe_actors::messages::CancelSubtask;
use floe_actors::metrics::{JobMetrics, QueueMetrics};
use floe_actors::partitioner::{PartitionKind, Partitioner};
use floe_actors::snapshot::{ElementCodec, SerdeCodec};
use floe_actors::source::SourceDriver;
use floe_actors::subtask::{ChainBuilder, Head, SubtaskActor, SubtaskSetup};
use floe_actors::writer::{OutputTarget, RecordWriter};
use std::any::Any;
use std::sync::Arc;

/// A chain element for records of some type: `Box<dyn ChainInput<T>>`, erased.
pub(crate) type ErasedChain = Box<dyn Any>;

/// How an edge distributes records; `make` builds a
/// `Box<dyn Partitioner<T>>` (boxed again as `Any`) for one sending subtask.
#[derive(Clone)]
pub(crate) struct Partition {
    pub kind: PartitionKind,
    pub make: MakePartitioner,
    /// Set by the user (rebalance, key_by, ...); a default edge may chain.
    pub explicit: bool,
    /// For default edges: the round-robin factory used when the two sides end up
    /// with different parallelism (as Flink does).
    pub fallback: Option<MakePartitioner>,
}

pub(crate) type MakePartitioner = Arc<dyn Fn(usize, u64) -> Box<dyn Any> + Send + Sync>;

/// An input edge of a node.
#[derive(Clone)]
pub(crate) struct Edge {
    pub from: NodeId,
    pub port: Port,
    pub partition: Partition,
}

/// What a node needs to build itself in one subtask.
pub(crate) struct NodeCtx {
    pub operator: OperatorId,
    pub name: String,
    /// The stable uid checkpoints match the operator's state by.
    pub uid: String,
    /// State restored for this operator's subtask, if the job starts from a
    /// checkpoint or savepoint.
    pub restored: Option<crate::operators::RestoredState>,
    /// The job's test instrumentation: faults, holds on the sources, the
    /// savepoint pause.
    pub instrumentation: Instrumentation,
    /// The vertex (chain) the operator runs in.
    pub vertex: VertexId,
    pub subtask: SubtaskIndex,
    pub parallelism: usize,
    pub config: Arc<Config>,
    pub metrics: Arc<JobMetrics>,
}

impl NodeCtx {
    pub fn info(&self) -> NodeInfo {
        let max = self.config.max_parallelism;
        NodeInfo {
            name: self.name.clone(),
            uid: self.uid.clone(),
            max_parallelism: max,
            key_groups: floe_actors::keygroup::key_group_range(
                self.subtask.0,
                max,
                self.parallelism as u32,
            ),
            subtask: self.subtask,
            metrics: self
                .metrics
                .operator(self.operator, &self.name, self.subtask),
            faults: self
                .instrumentation
                .faults(&self.config, &self.name, self.subtask),
        }
    }

    /// Sources: the records this subtask emits before pausing for the
    /// savepoint of `savepoint_at_records`, and how it asks for it.
    pub fn savepoint_pause(&self) -> Option<(u64, Arc<dyn Fn() + Send + Sync>)> {
        let n = self.config.checkpoint.savepoint_at_records?;
        let (start, end) = self.source_context().split(n);
        self.instrumentation
            .savepoint_pause(end - start, self.vertex, self.subtask)
    }

    pub fn source_context(&self) -> SourceContext {
        SourceContext {
            subtask: self.subtask,
            parallelism: self.parallelism,
            seed: self.config.seed,
        }
    }
}

pub(crate) type BuildSource =
    Arc<dyn Fn(&NodeCtx, ErasedChain) -> crate::Result<Box<dyn SourceDriver>> + Send + Sync>;
pub(crate) type BuildOperator = Arc<
    dyn Fn(&NodeCtx, ErasedChain, Vec<Box<dyn SidePort>>) -> crate::Result<ErasedChain>
        + Send
        + Sync,
>;

pub(crate) enum NodeKind {
    Source(BuildSource),
    Operator(BuildOperator),
}

pub(crate) struct Node {
    pub name: String,
    /// The uid the user set with `.uid(..)`.
    pub uid: Option<String>,
    /// A two-phase-commit sink: its output is committed at checkpoints.
    pub transactional: bool,
    /// Records per second the operator consumes at most (over all its
    /// subtasks): a throttled sink.
    pub input_rate: Option<f64>,
    pub parallelism: usize,
    /// False once `disable_chaining` was called on this operator.
    pub chainable: bool,
    /// An operator that may suspend in the middle of a record under
    /// backpressure (`flat_map`): it is never chained into a source's chain,
    /// whose position is taken between steps, so that it can suspend.
    pub suspends: bool,
    /// Set when the user fixed the parallelism (sources of one subtask, say).
    pub fixed_parallelism: bool,
    pub kind: NodeKind,
    pub inputs: Vec<Edge>,
    pub in_type: Arc<dyn TypeOps>,
    pub out_type: Arc<dyn TypeOps>,
    pub side_types: Vec<(u64, Arc<dyn TypeOps>)>,
}

impl Node {
    /// What the plan needs to know of this node.
    pub fn shape(&self) -> NodeShape {
        NodeShape {
            name: self.name.clone(),
            uid: self.uid.clone(),
            parallelism: self.parallelism,
            chainable: self.chainable,
            // A throttled operator heads a chain: its rate counts the
            // records it receives, not those of operators before it.
            head: self.input_rate.is_some(),
            suspends: self.suspends,
            source: matches!(self.kind, NodeKind::Source(_)),
            transactional: self.transactional,
            inputs: self
                .inputs
                .iter()
                .map(|e| EdgeShape {
                    from: e.from,
                    port: e.port,
                    kind: e.partition.kind,
                    explicit: e.partition.explicit,
                    can_rebalance: e.partition.fallback.is_some(),
                })
                .collect(),
        }
    }
}

/// A spawned subtask: its address (erased) and its cancel handle.
pub(crate) struct Spawned {
    pub addr: Arc<dyn Any + Send + Sync>,
    pub cancel: Recipient<CancelSubtask>,
    pub trigger: Recipient<floe_actors::snapshot::TriggerCheckpoint>,
    pub notify: Recipient<floe_actors::snapshot::NotifyCheckpoint>,
    pub fail: Recipient<floe_actors::messages::InjectFailure>,
}

pub(crate) enum ErasedHead {
    Source(Box<dyn SourceDriver>),
    Inputs(ErasedChain),
}

pub(crate) type BuildHead =
    Box<dyn FnOnce(&mut ChainBuilder) -> floe_actors::Result<ErasedHead> + Send>;

/// Type-specific operations on streams of one record type.
pub(crate) trait TypeOps: Send + Sync {
    /// Combines the consumers of an output into one chain input.
    fn fanout(&self, outs: Vec<ErasedChain>) -> Result<ErasedChain>;
    /// Wraps a chain input as a side port for `tag`.
    fn side_port(&self, tag: u64, next: ErasedChain) -> Result<Box<dyn SidePort>>;
    /// The output targets for `(subtask address, channel, the subtask's
    /// input channel count)` triples.
    fn targets(
        &self,
        to: &[(&Arc<dyn Any + Send + Sync>, ChannelId, usize)],
    ) -> Result<Box<dyn Any + Send>>;
    /// A record writer over `targets`, registered with `builder`.
    fn writer(
        &self,
        targets: Box<dyn Any + Send>,
        partitioner: Box<dyn Any>,
        config: &Config,
        metrics: Arc<QueueMetrics>,
        builder: &mut ChainBuilder,
    ) -> Result<ErasedChain>;
    /// Spawns a subtask actor whose chain takes records of this type.
    fn spawn(&self, arbiter: &ArbiterHandle, setup: SubtaskSetup, build: BuildHead) -> Spawned;
    /// Whether elements of this type can be encoded (unaligned channel state).
    fn has_codec(&self) -> bool;
}

pub(crate) struct Ops<T> {
    /// Encodes elements for unaligned channel state, for serde types.
    codec: Option<Arc<dyn ElementCodec<T>>>,
}

pub(crate) fn ops<T: Clone + Send + 'static>() -> Arc<dyn TypeOps> {
    Arc::new(Ops::<T> { codec: None })
}

/// Type operations for a serde type: its channels can hold unaligned
/// checkpoint state.
pub(crate) fn serde_ops<T>() -> Arc<dyn TypeOps>
where
    T: Clone + Send + serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    Arc::new(Ops::<T> {
        codec: Some(Arc::new(SerdeCodec)),
    })
}

/// Gives every operator whose input type has no channel-state codec the
/// codec of a producer that has one (`DataStream::with_channel_state`), so
/// its subtask can record input channel state. An edge connects equal
/// record types (connected streams map their inputs into one type first),
/// so the producer's type operations fit the consumer's input.
pub(crate) fn share_channel_codecs(nodes: &mut [Node]) {
    for i in 0..nodes.len() {
        if nodes[i].in_type.has_codec() {
            continue;
        }
        let found = nodes[i].inputs.iter().find_map(|e| {
            let from = &nodes[e.from];
            let ops = match e.port {
                Port::Main => Some(&from.out_type),
                Port::Side(tag) => from
                    .side_types
                    .iter()
                    .find(|(t, _)| *t == tag)
                    .map(|s| &s.1),
            };
            ops.filter(|o| o.has_codec()).cloned()
        });
        if let Some(ops) = found {
            nodes[i].in_type = ops;
        }
    }
}

/// Opens an erased value that must hold an `X`; anything else is a broken
/// invariant of the stream graph (see the module doc), reported as
/// [`Error::Internal`].
pub(crate) fn downcast<X: 'static>(b: Box<dyn Any>, what: &str) -> Result<X> {
    b.downcast::<X>()
        .map(|x| *x)
        .map_err(|_| mismatch::<X>(what))
}

/// The error of a value of the wrong type at `what`.
pub(crate) fn mismatch<X>(what: &str) -> Error {
    Error::Internal(format!(
        "stream graph type mismatch in {what}: expected {}",
        std::any::type_name::<X>()
    ))
}

impl<T: Clone + Send + 'static> TypeOps for Ops<T> {
    fn fanout(&self, mut outs: Vec<ErasedChain>) -> Result<ErasedChain> {
        let chain: Box<dyn ChainInput<T>> = match outs.pop() {
            None => Box::new(Discard),
            Some(one) if outs.is_empty() => downcast(one, "fanout")?,
            Some(last) => {
                outs.push(last);
                Box::new(Fanout::new(
                    outs.into_iter()
                        .map(|o| downcast::<Box<dyn ChainInput<T>>>(o, "fanout"))
                        .collect::<Result<Vec<_>>>()?,
                ))
            }
        };
        Ok(Box::new(chain))
    }

    fn side_port(&self, tag: u64, next: ErasedChain) -> Result<Box<dyn SidePort>> {
        Ok(Box::new(TypedSidePort::<T> {
            tag,
            buffer: Vec::new(),
            next: downcast(next, "side output")?,
        }))
    }

    fn targets(
        &self,
        to: &[(&Arc<dyn Any + Send + Sync>, ChannelId, usize)],
    ) -> Result<Box<dyn Any + Send>> {
        let targets = to
            .iter()
            .map(|(addr, channel, inputs)| {
                let addr = addr
                    .downcast_ref::<Addr<SubtaskActor<T>>>()
                    .ok_or_else(|| mismatch::<Addr<SubtaskActor<T>>>("output targets"))?;
                let mut target = SubtaskActor::target(addr, *channel);
                target.receiver_inputs = *inputs;
                Ok(target)
            })
            .collect::<Result<Vec<OutputTarget<T>>>>()?;
        Ok(Box::new(targets))
    }

    fn writer(
        &self,
        targets: Box<dyn Any + Send>,
        partitioner: Box<dyn Any>,
        config: &Config,
        metrics: Arc<QueueMetrics>,
        builder: &mut ChainBuilder,
    ) -> Result<ErasedChain> {
        let targets = *targets
            .downcast::<Vec<OutputTarget<T>>>()
            .map_err(|_| mismatch::<Vec<OutputTarget<T>>>("record writer"))?;
        let partitioner: Box<dyn Partitioner<T>> = downcast(partitioner, "partitioner")?;
        let (input, control) = RecordWriter::new(targets, partitioner, &config.runtime, metrics)
            .with_codec(self.codec.clone())
            .shared();
        builder.add_writer(control);
        let chain: Box<dyn ChainInput<T>> = Box::new(input);
        Ok(Box::new(chain))
    }

    fn has_codec(&self) -> bool {
        self.codec.is_some()
    }

    fn spawn(&self, arbiter: &ArbiterHandle, setup: SubtaskSetup, build: BuildHead) -> Spawned {
        let addr = SubtaskActor::<T>::spawn(arbiter, setup, self.codec.clone(), move |builder| {
            Ok(match build(builder)? {
                ErasedHead::Source(s) => Head::Source(s),
                ErasedHead::Inputs(c) => Head::Inputs(
                    downcast(c, "chain head")
                        .map_err(|e| floe_actors::Error::Runtime(e.to_string()).non_retriable())?,
                ),
            })
        });
        Spawned {
            cancel: addr.clone().recipient(),
            trigger: addr.clone().recipient(),
            notify: addr.clone().recipient(),
            fail: addr.clone().recipient(),
            addr: Arc::new(addr),
        }
    }
}

/// Partition helpers, each built where `T` is known.
pub(crate) mod partition {
    use super::*;
    use floe_actors::partitioner::{Broadcast, Custom, Forward, KeyGroups, RoundRobin, Shuffle};

    fn make<T: 'static, P: Partitioner<T> + 'static>(p: P) -> Box<dyn Any> {
        let b: Box<dyn Partitioner<T>> = Box::new(p);
        Box::new(b)
    }

    pub fn forward<T: 'static>(explicit: bool) -> Partition {
        Partition {
            kind: PartitionKind::Forward,
            make: Arc::new(|_, _| make::<T, _>(Forward)),
            explicit,
            fallback: Some(rebalance::<T>().make),
        }
    }

    pub fn rebalance<T: 'static>() -> Partition {
        Partition {
            make: Arc::new(|i, _| make::<T, _>(RoundRobin::starting_at(i))),
            kind: PartitionKind::Rebalance,
            explicit: true,
            fallback: None,
        }
    }

    pub fn rescale<T: 'static>() -> Partition {
        Partition {
            make: Arc::new(|_, _| make::<T, _>(RoundRobin::default())),
            kind: PartitionKind::Rescale,
            explicit: true,
            fallback: None,
        }
    }

    pub fn shuffle<T: 'static>() -> Partition {
        Partition {
            make: Arc::new(|i, seed| {
                make::<T, _>(Shuffle::new(
                    seed ^ floe_actors::keygroup::fmix64(i as u64 + 1),
                ))
            }),
            kind: PartitionKind::Shuffle,
            explicit: true,
            fallback: None,
        }
    }

    pub fn broadcast<T: 'static>() -> Partition {
        Partition {
            make: Arc::new(|_, _| make::<T, _>(Broadcast)),
            kind: PartitionKind::Broadcast,
            explicit: true,
            fallback: None,
        }
    }

    pub fn key_groups<T: 'static>(
        hash: Arc<dyn Fn(&T) -> u64 + Send + Sync>,
        max_parallelism: u32,
    ) -> Partition {
        Partition {
            make: Arc::new(move |_, _| make::<T, _>(KeyGroups::new(hash.clone(), max_parallelism))),
            kind: PartitionKind::Hash,
            explicit: true,
            fallback: None,
        }
    }

    pub fn custom<T: 'static>(f: floe_actors::partitioner::ChooseChannel<T>) -> Partition {
        Partition {
            make: Arc::new(move |_, _| make::<T, _>(Custom::new(f.clone()))),
            kind: PartitionKind::Custom,
            explicit: true,
            fallback: None,
        }
    }
}

/// The uid of node `id`: the user's, or one derived from its position and
/// name (stable as long as the job graph is built the same way).
pub(crate) fn node_uid(id: NodeId, node: &Node) -> String {
    crate::plan::operator_uid(id, node.uid.as_deref(), &node.name)
}

pub(crate) fn node_ctx(
    id: NodeId,
    node: &Node,
    vertex: usize,
    subtask: usize,
    config: &Arc<Config>,
    metrics: &Arc<JobMetrics>,
) -> NodeCtx {
    NodeCtx {
        operator: OperatorId(id as u32),
        name: node.name.clone(),
        uid: node_uid(id, node),
        restored: None,
        instrumentation: Instrumentation::default(),
        vertex: VertexId(vertex as u32),
        subtask: SubtaskIndex(subtask as u32),
        parallelism: node.parallelism,
        config: config.clone(),
        metrics: metrics.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain input of one record type handed where another is expected
    /// is an internal error naming the place, not a panic.
    #[test]
    fn a_type_mismatch_is_an_internal_error() {
        let strings: Box<dyn ChainInput<String>> = Box::new(Discard);
        let erased: ErasedChain = Box::new(strings);
        let Err(e) = ops::<u64>().fanout(vec![erased]) else {
            panic!("a chain of strings cannot take u64 records");
        };
        assert!(matches!(e, Error::Internal(_)), "{e:?}");
        assert!(e.to_string().contains("fanout"), "{e}");

        let strings: Box<dyn ChainInput<String>> = Box::new(Discard);
        let Err(e) = ops::<u64>().side_port(7, Box::new(strings)) else {
            panic!("a side port of u64 cannot feed a chain of strings");
        };
        assert!(e.to_string().contains("side output"), "{e}");

        // The matching type passes.
        let numbers: Box<dyn ChainInput<u64>> = Box::new(Discard);
        assert!(ops::<u64>().fanout(vec![Box::new(numbers)]).is_ok());
    }
}
