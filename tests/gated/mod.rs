//! A generator source with a gate, for tests that cancel a running job
//! after some checkpoints: each source subtask emits its slice of
//! `0..count` up to a stop, then holds (running, not finished) until the
//! test lets it on. So the job is still running when the test cancels it, and its
//! checkpoints taken after every subtask reached a stop hold exactly the
//! records emitted before it, however fast or slow the machine: no rate
//! limit racing the checkpoint timer.
//!
//! Its state is the generator's (`from_generator`), so a job restored from
//! its checkpoints reads on with a plain generator of the same uid.

#![allow(dead_code)]

use floe::connectors::generator::GeneratorSource;
use floe::connectors::{SourceContext, SourceFunction, SourcePoll};
use floe::{Record, StreamExecutionEnvironment};
use floe_actors::wake::SubtaskWaker;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the sources of one job share with the test: the stop they may
/// read up to, and how far they got.
#[derive(Default)]
pub struct Gate {
    /// Index of the stop the sources may read up to (past the last: open).
    stop: AtomicUsize,
    /// Per stop: source subtasks holding there.
    held: Mutex<Vec<usize>>,
    /// Signalled when a subtask starts holding at a stop.
    arrived: Condvar,
    /// Records emitted so far, over all subtasks.
    emitted: AtomicU64,
    /// Wakers of the source subtasks parked at the current stop; a pass
    /// wakes them (no polling while they hold).
    parked: Mutex<Vec<Arc<SubtaskWaker>>>,
}

impl Gate {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Lets every source read on to its next stop (past the last: to its
    /// end).
    pub fn pass(&self) {
        self.stop.fetch_add(1, Ordering::AcqRel);
        self.wake_parked();
    }

    /// Lets every source read on to its end.
    pub fn open(&self) {
        self.stop.store(usize::MAX / 2, Ordering::Release);
        self.wake_parked();
    }

    /// Wakes the subtasks parked at the stop just passed. The stop moved
    /// before this takes the lock, and a source parks only after reading
    /// the stop under it: none parks at a stop already passed.
    fn wake_parked(&self) {
        for w in self.parked.lock().unwrap().drain(..) {
            w.wake_subtask();
        }
    }

    /// Records emitted so far (final for a stop once every subtask holds
    /// there).
    pub fn emitted(&self) -> u64 {
        self.emitted.load(Ordering::Acquire)
    }

    /// Waits until `subtasks` source subtasks hold at the current stop
    /// (woken by each arrival, no polling). The long limit only turns a
    /// hang (a bug) into a failure.
    pub fn wait_held(&self, subtasks: usize) {
        let stop = self.stop.load(Ordering::Acquire);
        let held = self.held.lock().unwrap();
        let (held, timeout) = self
            .arrived
            .wait_timeout_while(held, Duration::from_secs(300), |held| {
                held.get(stop).is_none_or(|&n| n < subtasks)
            })
            .unwrap();
        drop(held);
        assert!(
            !timeout.timed_out(),
            "hung waiting for every source subtask at the gate"
        );
    }
}

/// Polls `done` until it holds, for state that sends no event (a table
/// of a server, an HTTP answer, a gauge): checkpoints and restarts have
/// their waits ([`wait_for_new_checkpoints`], [`wait_for_restarts`]). The
/// pause between two looks doubles from 1 ms to 20 ms, so a long wait does
/// not keep a core busy. The long limit only turns a hang (the event can
/// never come: a bug) into a failure; a slow machine just polls longer.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let hang = Instant::now() + Duration::from_secs(300);
    let mut pause = Duration::from_millis(1);
    while !done() {
        assert!(Instant::now() < hang, "hung waiting for {what}");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Waits until `handle`'s job restarted `n` times in all (woken by the
/// restart, no polling).
pub fn wait_for_restarts(handle: &floe::JobHandle, n: u64) {
    assert!(
        futures::executor::block_on(handle.wait_for_restarts(n)),
        "the job ended before its restart {n}"
    );
}

/// Waits until `handle`'s job completed `n` more checkpoints than it had
/// when called (woken by the completions). With one checkpoint in progress
/// at a time and `n >= 2`, the last of them was triggered after the call
/// (so, called once every source holds at a stop, it holds exactly the
/// records emitted before the stop).
pub fn wait_for_new_checkpoints(handle: &floe::JobHandle, n: u64) {
    let base = handle.checkpoint_stats().completed;
    assert!(
        futures::executor::block_on(handle.wait_for_checkpoints(base + n)),
        "the job ended before {n} more checkpoints completed"
    );
}

/// A source of `f(0..count)` whose subtasks hold at each of `stops`
/// (shares of their slice, rising, each in 0..1) until the test passes it.
pub fn gated_generator<T, F>(
    env: &StreamExecutionEnvironment,
    gate: &Arc<Gate>,
    count: u64,
    stops: &[f64],
    f: F,
) -> floe::DataStream<T>
where
    T: Clone + Send + 'static,
    F: Fn(u64) -> T + Send + Sync + 'static,
{
    let f: Arc<dyn Fn(u64) -> T + Send + Sync> = Arc::new(f);
    let gate = gate.clone();
    let stops = stops.to_vec();
    env.add_source("Gated Generator", move |ctx: &SourceContext| {
        let (start, end) = ctx.split(count);
        let waker = floe_actors::wake::current_waker()
            .ok_or_else(|| floe::Error::Config("a gated source is built by its subtask".into()))?;
        Ok(Gated {
            inner: GeneratorSource::new(f.clone(), count, None, ctx),
            waker,
            stops: stops
                .iter()
                .map(|s| ((end - start) as f64 * s) as u64)
                .collect(),
            emitted: 0,
            gate: gate.clone(),
            holding_at: None,
        })
    })
}

struct Gated<T> {
    inner: GeneratorSource<T>,
    /// Records of this subtask to hold after, per stop.
    stops: Vec<u64>,
    /// Records this subtask emitted.
    emitted: u64,
    gate: Arc<Gate>,
    /// The stop this subtask was counted as holding at.
    holding_at: Option<usize>,
    /// Wakes this subtask when the gate passes the stop it parked at.
    waker: Arc<SubtaskWaker>,
}

impl<T: Send + 'static> SourceFunction<T> for Gated<T> {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> floe::Result<SourcePoll> {
        let stop = self.gate.stop.load(Ordering::Acquire);
        let limit = self.stops.get(stop).copied();
        if let Some(limit) = limit
            && self.emitted >= limit
        {
            if self.holding_at != Some(stop) {
                self.holding_at = Some(stop);
                let mut held = self.gate.held.lock().unwrap();
                if held.len() <= stop {
                    held.resize(stop + 1, 0);
                }
                held[stop] += 1;
                self.gate.arrived.notify_all();
            }
            // Park, unless the gate passed the stop meanwhile (read again
            // under the lock its pass wakes the parked through).
            let mut parked = self.gate.parked.lock().unwrap();
            if self.gate.stop.load(Ordering::Acquire) != stop {
                return Ok(SourcePoll::Wait(Duration::ZERO));
            }
            self.waker.rearm();
            parked.push(self.waker.clone());
            return Ok(SourcePoll::Parked);
        }
        let max = limit.map_or(max, |l| max.min((l - self.emitted) as usize));
        let before = out.len();
        let poll = self.inner.poll_batch(max, out)?;
        let n = (out.len() - before) as u64;
        self.emitted += n;
        self.gate.emitted.fetch_add(n, Ordering::AcqRel);
        Ok(poll)
    }

    fn snapshot_state(&mut self) -> floe::Result<Vec<Vec<u8>>> {
        self.inner.snapshot_state()
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> floe::Result<()> {
        self.inner.restore_state(entries)
    }
}
