//! Streams connected with a broadcast stream: Flink's broadcast state pattern.
//!
//! `stream.broadcast_state()` marks a stream as the broadcast side;
//! `keyed.connect(&broadcast).process(f)` (or `stream.connect(..)` for a
//! plain stream) runs a [`KeyedBroadcastProcessFunction`] (or a
//! [`BroadcastProcessFunction`]). In the job graph each side is mapped into
//! [`BroadcastInput`] (chained with its producer when the parallelism
//! allows) and the two are unioned into one operator, the keyed side
//! partitioned by key groups, the broadcast side sent to every subtask.
//! Broadcast states need no declaration up front: each is registered when
//! its [`MapStateDescriptor`](crate::state::MapStateDescriptor) is first
//! used.

use super::datastream::DataStream;
use super::keyed::KeyedStream;
use crate::operators::broadcast::{
    BroadcastInput, BroadcastOp, BroadcastProcessFunction, KeyedBroadcastOp,
    KeyedBroadcastProcessFunction,
};
use crate::operators::keyed::KeyedProcessOp;
use crate::runtime::graph::partition;
use crate::state::{HeapStateBackend, StateKey};
use crate::time::{Clock, SystemClock};
use std::hash::Hash;
use std::sync::Arc;

/// Hashes a record's key (for the key-group partitioner).
type KeyHash<T> = Arc<dyn Fn(&T) -> u64 + Send + Sync>;

/// A stream whose elements every subtask of the operator it is connected to
/// receives; made by [`DataStream::broadcast_state`].
pub struct BroadcastStream<B> {
    stream: DataStream<B>,
}

impl<B> Clone for BroadcastStream<B> {
    fn clone(&self) -> Self {
        BroadcastStream {
            stream: self.stream.clone(),
        }
    }
}

impl<B: Clone + Send + 'static> BroadcastStream<B> {
    /// The broadcast side mapped into the operator's input, sent to every
    /// subtask.
    fn input<IN: Clone + Send + 'static>(&self) -> DataStream<BroadcastInput<IN, B>> {
        wrap(
            &self.stream,
            BroadcastInput::<IN, B>::Broadcast,
            "Broadcast Input",
        )
        .repartition(partition::broadcast::<BroadcastInput<IN, B>>())
    }
}

/// Maps `stream` into the connected operator's input type with an operator
/// named `name` that chains with the producer: it takes the producer's
/// parallelism when the user fixed that (a one-subtask collection source,
/// say), so no extra network hop is added and the map finishes with it.
fn wrap<T, U>(stream: &DataStream<T>, f: fn(T) -> U, name: &str) -> DataStream<U>
where
    T: Clone + Send + 'static,
    U: Clone + Send + 'static,
{
    let fixed = {
        let inner = stream.env.inner.borrow();
        let producers: Vec<_> = stream.refs.iter().map(|r| &inner.nodes[r.node]).collect();
        match producers.first() {
            Some(first)
                if producers
                    .iter()
                    .all(|n| n.fixed_parallelism && n.parallelism == first.parallelism) =>
            {
                Some(first.parallelism)
            }
            _ => None,
        }
    };
    let mapped = stream.map(f).name(name);
    match fixed {
        Some(p) => mapped.set_parallelism(p),
        None => mapped,
    }
}

impl<T: Clone + Send + 'static> DataStream<T> {
    /// This stream as the broadcast side of a connection: connected to a
    /// keyed or plain stream with `connect`, every element reaches every
    /// subtask of the connected operator, whose broadcast state it may
    /// update.
    pub fn broadcast_state(&self) -> BroadcastStream<T> {
        BroadcastStream {
            stream: self.clone(),
        }
    }

    /// Connects this stream with a broadcast stream; run a
    /// [`BroadcastProcessFunction`] on the pair with `process`.
    pub fn connect<B: Clone + Send + 'static>(
        &self,
        broadcast: &BroadcastStream<B>,
    ) -> BroadcastConnectedStream<T, B> {
        BroadcastConnectedStream {
            stream: self.clone(),
            broadcast: broadcast.clone(),
        }
    }
}

impl<T, K> KeyedStream<T, K>
where
    T: Clone + Send + 'static,
    K: Hash + Eq + Clone + Send + 'static,
{
    /// Connects this keyed stream with a broadcast stream; run a
    /// [`KeyedBroadcastProcessFunction`] on the pair with `process`.
    ///
    /// # Examples
    /// ```
    /// use floe::operators::broadcast::{
    ///     BroadcastContext, KeyedBroadcastProcessFunction, ReadOnlyContext,
    /// };
    /// use floe::state::MapStateDescriptor;
    ///
    /// /// Scales each (key, value) by the factor the rules set for its key.
    /// #[derive(Clone)]
    /// struct Scale(MapStateDescriptor<String, i64>);
    ///
    /// impl KeyedBroadcastProcessFunction<String, (String, i64), (String, i64), (String, i64)>
    ///     for Scale
    /// {
    ///     fn process_element(
    ///         &mut self,
    ///         (k, v): (String, i64),
    ///         ctx: &mut ReadOnlyContext<'_, '_, (String, i64), String>,
    ///     ) -> floe::Result<()> {
    ///         let factor = ctx.broadcast_state(&self.0)?.get(&k).copied().unwrap_or(1);
    ///         ctx.collect((k, v * factor));
    ///         Ok(())
    ///     }
    ///
    ///     fn process_broadcast_element(
    ///         &mut self,
    ///         (k, factor): (String, i64),
    ///         ctx: &mut BroadcastContext<'_, '_, (String, i64), String>,
    ///     ) -> floe::Result<()> {
    ///         ctx.broadcast_state(&self.0)?.put(k, factor);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let values = env.from_collection(vec![("a".to_string(), 2i64), ("b".into(), 3)]);
    /// let rules = env.from_collection(Vec::<(String, i64)>::new()).broadcast_state();
    /// let out = values
    ///     .key_by(|t: &(String, i64)| t.0.clone())
    ///     .connect(&rules)
    ///     .process(Scale(MapStateDescriptor::new("factors")))
    ///     .collect();
    /// env.execute().unwrap();
    /// let mut got = out.take();
    /// got.sort();
    /// assert_eq!(got, vec![("a".to_string(), 2), ("b".to_string(), 3)]);
    /// ```
    pub fn connect<B: Clone + Send + 'static>(
        &self,
        broadcast: &BroadcastStream<B>,
    ) -> KeyedBroadcastConnectedStream<T, K, B> {
        KeyedBroadcastConnectedStream {
            keyed: self.clone(),
            broadcast: broadcast.clone(),
        }
    }
}

/// A keyed stream connected with a broadcast stream.
pub struct KeyedBroadcastConnectedStream<T, K, B> {
    keyed: KeyedStream<T, K>,
    broadcast: BroadcastStream<B>,
}

impl<T, K, B> KeyedBroadcastConnectedStream<T, K, B>
where
    T: Clone + Send + 'static,
    K: Hash + Eq + Clone + Send + 'static,
    B: Clone + Send + 'static,
{
    /// Runs `function`: keyed elements in `process_element` (at the subtask
    /// owning their key), broadcast elements in `process_broadcast_element`
    /// (at every subtask). Keyed state lives in a heap backend; processing
    /// time is the system clock.
    pub fn process<U, F>(&self, function: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        F: KeyedBroadcastProcessFunction<K, T, B, U> + Clone + Sync,
        K: Sync + StateKey,
    {
        let stream = &self.keyed.stream;
        let max_parallelism = stream.env.inner.borrow().config.max_parallelism;
        let key = self.keyed.key.clone();
        let hash: KeyHash<BroadcastInput<T, B>> = Arc::new(move |v| match v {
            BroadcastInput::Element(x) => {
                key.with_key(x, |k| floe_actors::keygroup::stable_hash(k))
            }
            // Never asked: the broadcast side has its own partitioner.
            BroadcastInput::Broadcast(_) => 0,
        });
        let elements = wrap(
            &stream.repartition(partition::forward::<T>(false)),
            BroadcastInput::<T, B>::Element,
            "Keyed Input",
        )
        .repartition(partition::key_groups::<BroadcastInput<T, B>>(
            hash,
            max_parallelism,
        ));
        let rules = self.broadcast.input::<T>();
        let key = self.keyed.key.clone();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        elements
            .union(&[&rules])
            .transform("Keyed Broadcast Process", move |view| {
                let operator = format!("Keyed Broadcast Process[{}]", view.subtask);
                let backend = HeapStateBackend::for_subtask(
                    operator.clone(),
                    view.max_parallelism,
                    view.subtask as u32,
                    view.parallelism as u32,
                )
                .with_clock(clock.clone());
                let (key, clock) = (key.clone(), clock.clone());
                KeyedBroadcastOp::new(
                    function.clone(),
                    operator,
                    view.subtask as u32,
                    move |adapter| {
                        KeyedProcessOp::with_clock(key, adapter, clock).with_state_backend(backend)
                    },
                )
            })
    }
}

/// A plain stream connected with a broadcast stream.
pub struct BroadcastConnectedStream<T, B> {
    stream: DataStream<T>,
    broadcast: BroadcastStream<B>,
}

impl<T, B> BroadcastConnectedStream<T, B>
where
    T: Clone + Send + 'static,
    B: Clone + Send + 'static,
{
    /// Runs `function`: elements of the plain stream in `process_element`
    /// (where the stream's partitioning sends them), broadcast elements in
    /// `process_broadcast_element` (at every subtask).
    pub fn process<U, F>(&self, function: F) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        F: BroadcastProcessFunction<T, B, U> + Clone + Sync,
    {
        let elements = wrap(&self.stream, BroadcastInput::<T, B>::Element, "Input");
        let rules = self.broadcast.input::<T>();
        elements
            .union(&[&rules])
            .transform("Broadcast Process", move |view| {
                BroadcastOp::new(
                    function.clone(),
                    format!("Broadcast Process[{}]", view.subtask),
                    view.subtask as u32,
                )
            })
    }
}
