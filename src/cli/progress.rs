//! What a run shows on stderr while it runs: a progress bar when stderr is a
//! terminal, or, with `--status-interval MS`, one status line every MS
//! milliseconds (and a last one when the job ends), for logs and long runs:
//!
//! ```text
//! status elapsed_ms=2000 records=1843200 records_per_s=921600 backpressured=0.41 checkpoints=3 failed_checkpoints=0 restarts=1 last_checkpoint=3 last_checkpoint_ms=12
//! ```
//!
//! `records` counts the source's records out, `records_per_s` their rate
//! since the previous line, `backpressured` the share of time the job's
//! subtasks spent backpressured (averaged over subtasks, since the start),
//! `failed_checkpoints` and `restarts` count since the start, and the
//! checkpoint fields the last completed checkpoint (omitted before the
//! first).
//!
//! Whatever the mode, each job event gets one line as it happens, so that a
//! failure repeating on every attempt is never silent:
//!
//! ```text
//! restart attempt=2 cause="operator 'Committed Counts' subtask #0 failed: ..." restored_checkpoint=7
//! restore fallback restored_checkpoint=4 skipped_checkpoint=5 reason="checkpoint 5 is corrupt: ..."
//! ```
//!
//! (`restored_checkpoint=none`: the restart started from the beginning.)

use floe::JobHandle;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Polls a job's source counters and draws them until dropped.
pub struct Progress {
    /// Dropped to stop the drawing thread: its wait ends at once (no
    /// polling of a flag).
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Prints the job's events; its stream ends when the job does.
    events: Option<JoinHandle<()>>,
}

/// The stderr lines of one job event.
pub fn event_lines(event: &floe::JobEvent) -> Vec<String> {
    match event {
        floe::JobEvent::Restarted(r) => vec![format!(
            "restart attempt={} cause={:?} restored_checkpoint={}",
            r.attempt,
            r.cause,
            r.restored_checkpoint
                .map_or_else(|| "none".to_string(), |id| id.0.to_string())
        )],
        floe::JobEvent::RestoreFellBack(f) => f
            .skipped
            .iter()
            .map(|s| {
                format!(
                    "restore fallback restored_checkpoint={} skipped_checkpoint={} reason={:?}",
                    f.restored_checkpoint.0, s.checkpoint.0, s.reason
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Prints every event of the job on stderr until the job ends.
fn print_events(handle: &JobHandle) -> JoinHandle<()> {
    let events = handle.events();
    std::thread::spawn(move || {
        for event in futures::executor::block_on_stream(events) {
            for line in event_lines(&event) {
                eprintln!("{line}");
            }
        }
    })
}

/// The records the operator named `source` emitted so far.
fn source_records(handle: &JobHandle, source: &str) -> u64 {
    handle
        .operator_metrics()
        .iter()
        .filter(|o| o.name == source)
        .map(|o| o.records_out)
        .sum()
}

/// One status line: counters of `handle` now; the rate is over the records
/// since `last` (records, when).
pub fn status_line(handle: &JobHandle, source: &str, last: &mut (u64, Instant)) -> String {
    let records = source_records(handle, source);
    let now = Instant::now();
    let secs = now.duration_since(last.1).as_secs_f64();
    let rate = if secs > 0.0 {
        records.saturating_sub(last.0) as f64 / secs
    } else {
        0.0
    };
    *last = (records, now);
    let status = handle.status_snapshot();
    let n = status.subtasks.len().max(1) as f64;
    let backpressured = status
        .subtasks
        .iter()
        .map(|s| s.backpressured_share)
        .sum::<f64>()
        / n;
    let mut line = format!(
        "status elapsed_ms={} records={records} records_per_s={rate:.0} backpressured={backpressured:.2} checkpoints={} failed_checkpoints={} restarts={}",
        status.elapsed_ms,
        status.checkpoints.completed,
        status.checkpoints.failed,
        status.failover.restarts
    );
    let last_checkpoint = status
        .checkpoints
        .history
        .iter()
        .rev()
        .find(|c| !c.savepoint && c.status == "completed");
    if let Some(c) = last_checkpoint {
        line.push_str(&format!(
            " last_checkpoint={} last_checkpoint_ms={}",
            c.id.0, c.duration_ms
        ));
    }
    line
}

impl Progress {
    /// Starts drawing progress of `handle`: records out of operator `source`,
    /// out of `total` when known; a bar on a terminal only.
    pub fn start(handle: &JobHandle, source: &'static str, total: Option<u64>) -> Progress {
        Self::start_with(handle, source, total, None)
    }

    /// As [`start`](Self::start); with `status_interval`, prints a status
    /// line every interval instead of the bar (terminal or not), and a last
    /// one when dropped.
    pub fn start_with(
        handle: &JobHandle,
        source: &'static str,
        total: Option<u64>,
        status_interval: Option<Duration>,
    ) -> Progress {
        let (tx, stopped) = mpsc::channel::<()>();
        let stop = Some(tx);
        let events = Some(print_events(handle));
        let h = handle.clone();
        if let Some(every) = status_interval {
            let thread = std::thread::spawn(move || {
                let mut last = (0, Instant::now());
                let mut next = Instant::now() + every;
                // Wakes at each line's time, or at once when stopped.
                while let Err(RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(next.saturating_duration_since(Instant::now()))
                {
                    eprintln!("{}", status_line(&h, source, &mut last));
                    next += every;
                }
                eprintln!("{}", status_line(&h, source, &mut last));
            });
            return Progress {
                stop,
                thread: Some(thread),
                events,
            };
        }
        if !std::io::stderr().is_terminal() {
            return Progress {
                stop,
                thread: None,
                events,
            };
        }
        let thread = std::thread::spawn(move || {
            let bar = match total {
                Some(t) => ProgressBar::new(t).with_style(
                    ProgressStyle::with_template("{bar:40} {pos}/{len} records ({per_sec})")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
                None => ProgressBar::new_spinner(),
            };
            bar.set_position(source_records(&h, source));
            while let Err(RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(200))
            {
                bar.set_position(source_records(&h, source));
            }
            bar.finish_and_clear();
        });
        Progress {
            stop,
            thread: Some(thread),
            events,
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // Disconnects the channel the thread waits on.
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Dropped once the job ended (its result is out): the stream has
        // ended, and joining prints every event before the summary.
        if let Some(t) = self.events.take() {
            let _ = t.join();
        }
    }
}

/// Waits for the job's end with its progress on stderr (a [`Progress`]
/// over `source`). A failed job's metrics endpoint lingers here, before
/// the error goes up; after a success the endpoint is handed back, to
/// linger once the job's summary is printed.
pub fn wait_for_job(
    handle: &JobHandle,
    source: &'static str,
    total: Option<u64>,
    status_interval: Option<Duration>,
    endpoint: Option<super::observe::Endpoint>,
) -> floe::Result<(floe::JobResult, Option<super::observe::Endpoint>)> {
    let waited = {
        let _progress = Progress::start_with(handle, source, total, status_interval);
        futures::executor::block_on(handle.wait())
    };
    match waited {
        Ok(result) => Ok((result, endpoint)),
        Err(e) => {
            if let Some(ep) = endpoint {
                ep.linger();
            }
            Err(e)
        }
    }
}
