//! The sink interface and the operator that runs a sink in a chain on the
//! subtask's thread.

use super::{Operator, Output, SnapshotContext, StateCapture};
use crate::{Error, Result};
use floe_actors::element::Batch;
use floe_actors::ids::SubtaskIndex;
use futures::FutureExt;
use std::future::Future;

/// What a sink learns when it opens.
#[derive(Clone, Copy, Debug)]
pub struct SinkContext {
    /// This sink subtask.
    pub subtask: SubtaskIndex,
    /// Number of sink subtasks.
    pub parallelism: usize,
}

/// The end of a stream: writes records somewhere (at-least-once; see
/// [`TwoPhaseCommitSink`](crate::connectors::two_phase::TwoPhaseCommitSink)
/// for exactly-once). One instance per subtask is cloned from the instance
/// given to [`DataStream::sink`](crate::DataStream::sink).
///
/// The calls, in order, each finished before the next: [`open`](Self::open),
/// then [`write`](Self::write) per batch with [`flush`](Self::flush) at
/// every checkpoint barrier (the checkpoint completes only after the flush
/// returned), and at the end of the input `flush` then
/// [`finish`](Self::finish). A failure restarts the job from the last
/// checkpoint, so batches after it are written again.
///
/// The methods are `async fn`s. A sink whose calls finish before they
/// return (memory, a file, a blocking client) runs on the subtask's thread
/// and never `.await`s. A sink that waits on I/O sets
/// [`AWAITS`](Self::AWAITS): it then runs as a task on the subtask's
/// arbiter with a bounded queue, and a full queue slows the job down (see
/// [`async_sink`](crate::connectors::async_sink)).
///
/// # Example
///
/// ```
/// use floe::operators::sink::SinkFunction;
/// use floe_actors::element::Batch;
/// use std::sync::{Arc, Mutex};
///
/// #[derive(Clone, Default)]
/// struct Sum(Arc<Mutex<u64>>);
///
/// impl SinkFunction<u64> for Sum {
///     async fn write(&mut self, batch: Batch<u64>) -> floe::Result<()> {
///         *self.0.lock().unwrap() += batch.iter().map(|r| r.value).sum::<u64>();
///         Ok(())
///     }
/// }
///
/// #[derive(Clone)]
/// struct Forward(tokio::sync::mpsc::Sender<u64>);
///
/// impl SinkFunction<u64> for Forward {
///     const AWAITS: bool = true;
///     async fn write(&mut self, batch: Batch<u64>) -> floe::Result<()> {
///         for r in batch {
///             // Waits while the channel is full: the job slows down.
///             self.0.send(r.value).await.map_err(|_| floe::Error::User("closed".into()))?;
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait SinkFunction<T>: Send + 'static {
    /// `true`: the sink's futures wait on I/O, so it runs as a task on the
    /// subtask's arbiter; `false` (the default): its calls finish before
    /// they return and it runs on the subtask's thread (a future that
    /// waits is then an error).
    const AWAITS: bool = false;

    /// Called once before any record.
    fn open(&mut self, _ctx: &SinkContext) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Writes a batch of records.
    fn write(&mut self, batch: Batch<T>) -> impl Future<Output = Result<()>> + Send;

    /// At a checkpoint barrier and at the end of the input: makes what was
    /// written durable (the checkpoint completes after it).
    fn flush(&mut self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// The input is complete (after a last `flush`): close.
    fn finish(&mut self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
}

/// The result of a sink's call on the subtask's thread: its future must be
/// ready when polled once, since nothing there waits.
pub(crate) fn ready_now<R>(call: &str, f: impl Future<Output = Result<R>>) -> Result<R> {
    f.now_or_never().unwrap_or_else(|| {
        Err(Error::Config(format!(
            "a sink run on its subtask's thread returned a future that waits (in {call}): \
             set `const AWAITS: bool = true` in its trait impl"
        )))
    })
}

/// Runs a [`SinkFunction`] as the last operator of a chain, on the
/// subtask's thread; opens it before its first batch, so a failing `open`
/// fails the job naming the sink.
pub struct SinkOp<S> {
    sink: S,
    ctx: SinkContext,
    opened: bool,
}

impl<S> SinkOp<S> {
    /// Wraps `sink` for the subtask described by `ctx`.
    pub fn new(sink: S, ctx: SinkContext) -> Self {
        SinkOp {
            sink,
            ctx,
            opened: false,
        }
    }

    fn ensure_open<T>(&mut self) -> Result<()>
    where
        S: SinkFunction<T>,
    {
        if !self.opened {
            self.opened = true;
            ready_now("open", self.sink.open(&self.ctx))?;
        }
        Ok(())
    }
}

impl<T, S> Operator<T, ()> for SinkOp<S>
where
    S: SinkFunction<T>,
{
    fn process_batch(&mut self, batch: Batch<T>, _: &mut Output<'_, ()>) -> Result<()> {
        self.ensure_open()?;
        ready_now("write", self.sink.write(batch))
    }

    fn on_end_of_input(&mut self, _: &mut Output<'_, ()>) -> Result<()> {
        self.ensure_open()?;
        ready_now("flush", self.sink.flush())?;
        ready_now("finish", self.sink.finish())
    }

    fn snapshot_state(&mut self, _ctx: &SnapshotContext) -> Result<StateCapture> {
        if self.opened {
            ready_now("flush", self.sink.flush())?;
        }
        Ok(StateCapture::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Waits;

    impl SinkFunction<u32> for Waits {
        async fn open(&mut self, _: &SinkContext) -> Result<()> {
            futures::future::pending::<()>().await;
            Ok(())
        }
        async fn write(&mut self, _: Batch<u32>) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_sink_that_waits_on_the_subtasks_thread_is_refused_with_what_to_do() {
        let mut op = SinkOp::new(
            Waits,
            SinkContext {
                subtask: SubtaskIndex(0),
                parallelism: 1,
            },
        );
        let e = op.ensure_open::<u32>().expect_err("waits");
        assert!(e.to_string().contains("AWAITS"), "{e}");
    }

    /// Records the calls the operator makes.
    #[derive(Clone, Default)]
    struct Calls(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl SinkFunction<u32> for Calls {
        async fn open(&mut self, _: &SinkContext) -> Result<()> {
            self.0.lock().unwrap().push("open".into());
            Ok(())
        }
        async fn write(&mut self, batch: Batch<u32>) -> Result<()> {
            self.0
                .lock()
                .unwrap()
                .push(format!("write {}", batch.len()));
            Ok(())
        }
        async fn flush(&mut self) -> Result<()> {
            self.0.lock().unwrap().push("flush".into());
            Ok(())
        }
        async fn finish(&mut self) -> Result<()> {
            self.0.lock().unwrap().push("finish".into());
            Ok(())
        }
    }

    #[test]
    fn a_barrier_flushes_and_the_end_flushes_then_finishes() {
        let calls = Calls::default();
        let mut op = SinkOp::new(
            calls.clone(),
            SinkContext {
                subtask: SubtaskIndex(0),
                parallelism: 1,
            },
        );
        let (mut records, mut watermarks) = (Vec::new(), Vec::new());
        let mut out = Output {
            records: &mut records,
            sides: &mut [],
            watermarks: &mut watermarks,
        };
        let snapshot = SnapshotContext {
            checkpoint: floe_actors::ids::CheckpointId(1),
            savepoint: false,
            max_parallelism: 128,
            key_groups: 0..128,
        };
        Operator::<u32, ()>::process_batch(
            &mut op,
            vec![floe_actors::element::Record::new(1)],
            &mut out,
        )
        .unwrap();
        Operator::<u32, ()>::snapshot_state(&mut op, &snapshot).unwrap();
        Operator::<u32, ()>::on_end_of_input(&mut op, &mut out).unwrap();
        assert_eq!(
            *calls.0.lock().unwrap(),
            ["open", "write 1", "flush", "flush", "finish"]
        );
    }
}
