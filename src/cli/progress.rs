//! A progress bar on stderr for long runs, shown only when stderr is a terminal.

use floe::JobHandle;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Polls a job's source counters and draws them until dropped.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing progress of `handle`: records out of operator `source`,
    /// out of `total` when known.
    pub fn start(handle: &JobHandle, source: &'static str, total: Option<u64>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        if !std::io::stderr().is_terminal() {
            return Progress { stop, thread: None };
        }
        let (h, s) = (handle.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let bar = match total {
                Some(t) => ProgressBar::new(t).with_style(
                    ProgressStyle::with_template("{bar:40} {pos}/{len} records ({per_sec})")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
                None => ProgressBar::new_spinner(),
            };
            while !s.load(Ordering::Relaxed) {
                let done: u64 = h
                    .operator_metrics()
                    .iter()
                    .filter(|o| o.name == source)
                    .map(|o| o.records_out)
                    .sum();
                bar.set_position(done);
                std::thread::sleep(Duration::from_millis(200));
            }
            bar.finish_and_clear();
        });
        Progress {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
