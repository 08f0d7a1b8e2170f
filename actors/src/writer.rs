//! Record writers: the sending end of a chain's network edges.
//!
//! A record writer partitions records into one buffer per output channel, sends
//! a buffer as one `Deliver` when it is full (or when the buffer timeout flushes
//! it), and only while the channel holds credit. Without credit, batches wait in
//! a per-channel queue; once any queue holds `output_queue_capacity` batches the
//! subtask stops taking input, which is how backpressure reaches the sources.
//! Watermarks and end-of-input need no credit but keep their place behind the
//! records queued before them.
//!
//! The batch size a writer uses comes from its subtask's buffer budget
//! ([`RuntimeConfig::buffer_budget`](crate::RuntimeConfig::buffer_budget)):
//! with many channels, smaller batches keep the partly filled and queued
//! batches of all the subtask's writers, and the receivers' queues, within it.

use crate::chain::{ChainEvent, ChainInput, Control};
use crate::element::{BarrierKind, Batch, Record, StreamElement, Timestamp, WatermarkStatus};
use crate::error::Result;
use crate::ids::{ChannelId, CheckpointId};
use crate::messages::{ConnectChannel, Deliver, GrantCredit};
use crate::metrics::{OutputChannelMetrics, QueueMetrics};
use crate::partitioner::{Partitioner, Target};
use crate::snapshot::ElementCodec;
use actix::Recipient;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

/// The receiving end of one channel, as the sender sees it.
pub struct OutputTarget<T: Send + 'static> {
    /// Where data goes.
    pub data: Recipient<Deliver<T>>,
    /// Where the connect message goes (the same actor).
    pub connect: Recipient<ConnectChannel>,
    /// The channel's index at the receiver.
    pub channel: ChannelId,
    /// Input channels of the receiving subtask: its credits per channel and
    /// the largest batch it takes follow from them
    /// ([`RuntimeConfig::input_credits`](crate::RuntimeConfig::input_credits)).
    /// Zero when unknown: the receiver grants `credits`.
    pub receiver_inputs: usize,
}

impl<T: Send + 'static> Clone for OutputTarget<T> {
    fn clone(&self) -> Self {
        OutputTarget {
            data: self.data.clone(),
            connect: self.connect.clone(),
            channel: self.channel,
            receiver_inputs: self.receiver_inputs,
        }
    }
}

struct OutputChannel<T: Send + 'static> {
    target: OutputTarget<T>,
    credits: u32,
    queue: VecDeque<StreamElement<T>>,
    queued_batches: usize,
    buffer: Batch<T>,
    gauge: Arc<OutputChannelMetrics>,
}

impl<T: Send + 'static> OutputChannel<T> {
    #[inline]
    fn deliver(&self, element: StreamElement<T>) {
        self.target.data.do_send(Deliver {
            channel: self.target.channel,
            element,
        });
    }

    fn send_records(&mut self, batch: Batch<T>, metrics: &QueueMetrics) {
        if self.credits > 0 && self.queue.is_empty() {
            self.credits -= 1;
            metrics.release_records(batch.len());
            self.deliver(StreamElement::Records(batch));
        } else {
            self.queue.push_back(StreamElement::Records(batch));
            self.queued_batches += 1;
            self.gauge.queue.set(self.queued_batches);
            metrics.observe_output(self.queued_batches);
        }
    }

    fn flush_buffer(&mut self, batch_size: usize, metrics: &QueueMetrics) {
        if !self.buffer.is_empty() {
            let full = std::mem::replace(&mut self.buffer, Vec::with_capacity(batch_size));
            self.send_records(full, metrics);
        }
    }

    fn send_event(&mut self, element: StreamElement<T>, batch_size: usize, metrics: &QueueMetrics) {
        self.flush_buffer(batch_size, metrics);
        if self.queue.is_empty() {
            self.deliver(element);
        } else {
            self.queue.push_back(element);
        }
    }

    /// Where the barrier of checkpoint `id` waits in the queue, if it does.
    fn queued_barrier(&self, id: CheckpointId) -> Option<usize> {
        self.queue
            .iter()
            .position(|e| matches!(e, StreamElement::Barrier(b) if b.checkpoint_id == id))
    }

    fn grant(&mut self, credits: u32, metrics: &QueueMetrics) {
        self.credits += credits;
        let before = self.queued_batches;
        while let Some(front) = self.queue.front() {
            if let StreamElement::Records(batch) = front {
                if self.credits == 0 {
                    break;
                }
                self.credits -= 1;
                self.queued_batches -= 1;
                metrics.release_records(batch.len());
            }
            let element = self.queue.pop_front().expect("front exists");
            self.deliver(element);
        }
        if self.queued_batches != before {
            self.gauge.queue.set(self.queued_batches);
        }
    }
}

/// What the subtask asks of everything that holds its output: a record
/// writer, an async sink's queue.
pub trait OutputGate {
    /// True when the output is full: stop taking input (an async sink's
    /// queue asks for a wake-up when it has room again).
    fn backpressured(&self) -> bool;
    /// True when nothing is buffered or queued (an async sink's queue asks
    /// for a wake-up when it drains).
    fn drained(&self) -> bool;
}

/// What the subtask actor needs of a record writer, whatever its record
/// type, besides its [`OutputGate`].
pub trait WriterControl: OutputGate {
    /// Sends the connect message of every channel (once, before any data).
    fn connect(&mut self, writer: u32, credit_to: &Recipient<GrantCredit>);
    /// The receiver of channel `output` granted credits.
    fn grant(&mut self, output: u32, credits: u32);
    /// Sends partly filled batches (buffer timeout) to channels whose queue is
    /// not full.
    fn flush_partial(&mut self);
    /// Restore: queues the encoded output channel state of channel `output`
    /// ahead of any new data. False when this writer cannot decode it.
    fn restore_output(&mut self, output: u32, bytes: &[u8]) -> Result<bool>;
    /// Whether the barrier of checkpoint `id` still waits in some output
    /// queue (behind batches without credit) where it could be promoted
    /// (the writer has a codec).
    fn holds_barrier(&self, id: CheckpointId) -> bool;
    /// Alignment timeout in the output: the barrier of checkpoint `id`
    /// overtakes what is queued ahead of it, turned unaligned; the elements
    /// it overtook (still sent, after it) are appended to `out` as output
    /// channel state `(writer, output channel, element bytes)`. Without a
    /// codec the barrier keeps its place (returns false).
    fn promote_barrier(
        &mut self,
        id: CheckpointId,
        out: &mut Vec<(u32, u32, Vec<u8>)>,
    ) -> Result<bool>;
    /// Output channels of this writer (they share the subtask's budget).
    fn output_channels(&self) -> usize {
        0
    }
    /// The subtask's writers have `outputs` output channels in all: size
    /// batches so their partly filled and queued batches fit the writers'
    /// half of the budget. Called once, before any record.
    fn fit_budget(&mut self, _outputs: usize) {}
}

/// Partitions a stream of `T` over the channels of one network edge.
pub struct RecordWriter<T: Send + 'static> {
    channels: Vec<OutputChannel<T>>,
    partitioner: Box<dyn Partitioner<T>>,
    /// Records per batch: the configured size, less under the budget.
    batch_size: usize,
    /// The largest batch every receiver takes within its budget.
    receiver_limit: usize,
    config: crate::RuntimeConfig,
    queue_capacity: usize,
    metrics: Arc<QueueMetrics>,
    last_watermark: Timestamp,
    last_status: WatermarkStatus,
    /// Encodes queued elements as output channel state (unaligned checkpoints).
    codec: Option<Arc<dyn ElementCodec<T>>>,
    /// This writer's index in its subtask (set on connect).
    index: u32,
}

impl<T: Send + Clone + 'static> RecordWriter<T> {
    /// A writer over `targets` (one per connected downstream subtask, in order).
    pub fn new(
        targets: Vec<OutputTarget<T>>,
        partitioner: Box<dyn Partitioner<T>>,
        config: &crate::RuntimeConfig,
        metrics: Arc<QueueMetrics>,
    ) -> Self {
        let mut receiver_limit = config.batch_size;
        let channels: Vec<_> = targets
            .into_iter()
            .map(|target| {
                // The receiver's gate grants exactly these credits (the same
                // rule, from the same count of its input channels).
                let credits = match target.receiver_inputs {
                    0 => config.credits,
                    n => {
                        receiver_limit = receiver_limit.min(config.input_batch_limit(n));
                        config.input_credits(n)
                    }
                };
                OutputChannel {
                    target,
                    credits,
                    queue: VecDeque::new(),
                    queued_batches: 0,
                    // Allocated at the first record: with many channels most
                    // stay small or empty.
                    buffer: Vec::new(),
                    gauge: metrics.output_channel(),
                }
            })
            .collect();
        let batch_size = receiver_limit.min(config.output_batch_size(channels.len()));
        RecordWriter {
            channels,
            partitioner,
            batch_size,
            receiver_limit,
            config: config.clone(),
            queue_capacity: config.output_queue_capacity,
            metrics,
            last_watermark: crate::element::MIN_WATERMARK,
            last_status: WatermarkStatus::Active,
            codec: None,
            index: 0,
        }
    }

    /// Lets unaligned barriers overtake queued output, encoding what they
    /// overtake with `codec`. Without a codec barriers keep their place.
    pub fn with_codec(mut self, codec: Option<Arc<dyn ElementCodec<T>>>) -> Self {
        self.codec = codec;
        self
    }

    /// Wraps the writer so a chain can push into it and the subtask can control it.
    pub fn shared(self) -> (WriterInput<T>, Rc<RefCell<dyn WriterControl>>) {
        let rc = Rc::new(RefCell::new(self));
        (WriterInput(rc.clone()), rc)
    }

    #[inline]
    fn push(&mut self, c: usize, record: Record<T>) {
        let ch = &mut self.channels[c];
        ch.buffer.push(record);
        if ch.buffer.len() >= self.batch_size {
            ch.flush_buffer(self.batch_size, &self.metrics);
        }
    }

    fn write_batch(&mut self, batch: Batch<T>) {
        let mut taken = batch.len();
        self.route(batch, &mut taken);
        // Settled after the sends: what went straight on was released already.
        self.metrics.hold_records(taken);
    }

    /// Partitions `batch` into the channels' buffers; `taken` counts the
    /// records buffered (a broadcast record once per channel).
    fn route(&mut self, batch: Batch<T>, taken: &mut usize) {
        if self.channels.len() == 1 {
            let bs = self.batch_size;
            let ch = &mut self.channels[0];
            if ch.buffer.is_empty() && batch.len() <= bs {
                // Move the whole batch: no per-record copy.
                ch.buffer = batch;
                if ch.buffer.len() >= bs {
                    ch.flush_buffer(bs, &self.metrics);
                }
            } else {
                for r in batch {
                    self.push(0, r);
                }
            }
            return;
        }
        let n = self.channels.len();
        for record in batch {
            match self.partitioner.select(&record.value, n) {
                Target::One(c) => self.push(c, record),
                Target::All => {
                    *taken += n - 1;
                    for c in 0..n - 1 {
                        self.push(c, record.clone());
                    }
                    self.push(n - 1, record);
                }
            }
        }
    }

    fn broadcast_event(&mut self, element: StreamElement<T>) {
        for ch in &mut self.channels {
            ch.send_event(element.clone(), self.batch_size, &self.metrics);
        }
    }
}

impl<T: Send + 'static> OutputGate for RecordWriter<T> {
    fn backpressured(&self) -> bool {
        self.channels
            .iter()
            .any(|c| c.queued_batches >= self.queue_capacity)
    }

    fn drained(&self) -> bool {
        self.channels
            .iter()
            .all(|c| c.queue.is_empty() && c.buffer.is_empty())
    }
}

impl<T: Send + 'static> WriterControl for RecordWriter<T> {
    fn connect(&mut self, writer: u32, credit_to: &Recipient<GrantCredit>) {
        self.index = writer;
        for (i, ch) in self.channels.iter().enumerate() {
            ch.target.connect.do_send(ConnectChannel {
                channel: ch.target.channel,
                writer,
                output: i as u32,
                credit_to: credit_to.clone(),
            });
        }
    }

    fn grant(&mut self, output: u32, credits: u32) {
        if let Some(ch) = self.channels.get_mut(output as usize) {
            ch.grant(credits, &self.metrics);
        }
    }

    fn output_channels(&self) -> usize {
        self.channels.len()
    }

    fn fit_budget(&mut self, outputs: usize) {
        self.batch_size = self.receiver_limit.min(
            self.config
                .output_batch_size(outputs.max(self.channels.len())),
        );
    }

    fn flush_partial(&mut self) {
        for ch in &mut self.channels {
            // A full queue keeps its partial batch until credit drains it, so
            // timed flushes never push a queue past its capacity.
            if ch.queued_batches < self.queue_capacity {
                ch.flush_buffer(self.batch_size, &self.metrics);
            }
        }
    }

    fn holds_barrier(&self, id: CheckpointId) -> bool {
        self.codec.is_some() && self.channels.iter().any(|c| c.queued_barrier(id).is_some())
    }

    fn promote_barrier(
        &mut self,
        id: CheckpointId,
        out: &mut Vec<(u32, u32, Vec<u8>)>,
    ) -> Result<bool> {
        let Some(codec) = &self.codec else {
            return Ok(false);
        };
        let mut promoted = false;
        for (i, ch) in self.channels.iter_mut().enumerate() {
            let Some(pos) = ch.queued_barrier(id) else {
                continue;
            };
            for element in ch.queue.iter().take(pos) {
                out.push((self.index, i as u32, codec.encode(element)?));
            }
            if let Some(StreamElement::Barrier(mut b)) = ch.queue.remove(pos) {
                b.kind = BarrierKind::Unaligned;
                ch.deliver(StreamElement::Barrier(b));
                promoted = true;
            }
        }
        Ok(promoted)
    }

    fn restore_output(&mut self, output: u32, bytes: &[u8]) -> Result<bool> {
        let Some(codec) = &self.codec else {
            return Ok(false);
        };
        let element = codec.decode(bytes)?;
        let Some(ch) = self.channels.get_mut(output as usize) else {
            return Ok(false);
        };
        if let StreamElement::Records(batch) = &element {
            ch.queued_batches += 1;
            ch.gauge.queue.set(ch.queued_batches);
            self.metrics.hold_records(batch.len());
        }
        ch.queue.push_back(element);
        Ok(true)
    }
}

/// The chain-side handle of a record writer.
pub struct WriterInput<T: Send + 'static>(Rc<RefCell<RecordWriter<T>>>);

impl<T: Send + Clone + 'static> ChainInput<T> for WriterInput<T> {
    #[inline]
    fn handle(&mut self, event: ChainEvent<'_, T>) -> Result<()> {
        let mut w = self.0.borrow_mut();
        let w = &mut *w;
        let c = match event {
            ChainEvent::Records(batch) => {
                w.write_batch(batch);
                return Ok(());
            }
            ChainEvent::Control(c) => c,
        };
        match c {
            Control::Watermark(watermark) => {
                if watermark > w.last_watermark {
                    w.last_watermark = watermark;
                    w.broadcast_event(StreamElement::Watermark(watermark));
                }
            }
            Control::Status(status) => {
                if w.last_status != status {
                    w.last_status = status;
                    w.broadcast_event(StreamElement::WatermarkStatus(status));
                }
            }
            Control::EndOfInput => w.broadcast_event(StreamElement::EndOfInput),
            Control::Barrier {
                barrier,
                unaligned,
                snapshot,
            } => match (&w.codec, unaligned) {
                (Some(codec), true) => {
                    // The barrier overtakes everything queued; what it overtook is
                    // output channel state (it is still sent, after the barrier).
                    for (i, ch) in w.channels.iter_mut().enumerate() {
                        if !ch.buffer.is_empty() {
                            let full =
                                std::mem::replace(&mut ch.buffer, Vec::with_capacity(w.batch_size));
                            ch.queue.push_back(StreamElement::Records(full));
                            ch.queued_batches += 1;
                            ch.gauge.queue.set(ch.queued_batches);
                        }
                        for element in &ch.queue {
                            snapshot.output_channel_state.push((
                                w.index,
                                i as u32,
                                codec.encode(element)?,
                            ));
                        }
                        ch.deliver(StreamElement::Barrier(barrier));
                    }
                    // A queue may now hold a batch that credit can send at once.
                    for ch in &mut w.channels {
                        ch.grant(0, &w.metrics);
                    }
                }
                _ => w.broadcast_event(StreamElement::Barrier(barrier)),
            },
            // The writer ends the chain: the receiving subtasks hear of
            // completed checkpoints from the coordinator and restore their
            // own watermarks, and processing time is the subtask's own.
            Control::Tick(_) | Control::Notify { .. } | Control::RestoreWatermark(_) => {}
        }
        Ok(())
    }
}
