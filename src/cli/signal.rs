//! SIGINT and SIGTERM stop a running job cleanly. Only the binary installs
//! signal handlers; the library never does.
//!
//! The first signal asks the job to stop with a final checkpoint — a
//! savepoint into `--savepoint-dir` when one is given, or into
//! `$TMPDIR/floe-savepoints` when checkpoints have no `--checkpoint-dir`
//! (they are temporary, removed when the job ends)
//! ([`floe::JobHandle::stop_with_checkpoint`]): the checkpoint completes,
//! two-phase-commit sinks commit up to it, every subtask finishes, and the
//! run command prints its summary as for a job that finished. The process
//! then exits with 128 + the signal's number (130 for SIGINT, 143 for
//! SIGTERM) and `--from-checkpoint` resumes exactly from there. A second
//! signal exits at once with the same code. When the final checkpoint
//! fails, the job is canceled (its checkpoints are kept).

use floe::JobHandle;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The first stop signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The exit code a stop signal asks for: 128 + the first signal's number.
pub fn exit_code() -> Option<i32> {
    let signal = RECEIVED.load(Ordering::Acquire);
    (signal != 0).then_some(128 + signal)
}

/// Handles SIGINT and SIGTERM while it lives (the job's run): dropping it
/// restores the default behaviour.
pub struct StopOnSignal {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for StopOnSignal {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Stops `job` on SIGINT or SIGTERM as the module says.
pub fn stop_on_signal(
    job: &JobHandle,
    savepoint_dir: Option<PathBuf>,
) -> floe::Result<StopOnSignal> {
    let job = job.clone();
    on_signal(move |name| {
        eprintln!("stopping: {name} received; taking a final checkpoint (again to abort)");
        let (job, dir) = (job.clone(), savepoint_dir.clone());
        // The stop waits for the checkpoint; the signal thread goes on
        // listening for a second signal meanwhile.
        std::thread::spawn(move || {
            match futures::executor::block_on(job.stop_with_checkpoint(dir)) {
                Ok(Some(path)) => eprintln!("savepoint={}", path.display()),
                Ok(None) => {}
                Err(e) => {
                    eprintln!("warning: cannot stop with a final checkpoint ({e}); canceling");
                    job.cancel();
                }
            }
        });
    })
}

/// Sets `flag` on the first SIGINT or SIGTERM (a second exits at once).
pub fn flag_on_signal(flag: Arc<AtomicBool>) -> floe::Result<StopOnSignal> {
    on_signal(move |name| {
        eprintln!("stopping: {name} received (again to abort)");
        flag.store(true, Ordering::Release);
    })
}

/// Calls `first` with the signal's name on the first SIGINT or SIGTERM;
/// a second exits at once.
fn on_signal(first: impl Fn(&'static str) + Send + 'static) -> floe::Result<StopOnSignal> {
    let mut signals = Signals::new([SIGINT, SIGTERM]).map_err(|e| {
        floe::Error::Config(format!("cannot install the SIGINT/SIGTERM handlers: {e}"))
    })?;
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("floe-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let is_first = RECEIVED
                    .compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
                if !is_first {
                    // The second signal: abort at once.
                    std::process::exit(exit_code().unwrap_or(128 + signal));
                }
                first(if signal == SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                });
            }
        })
        .map_err(|e| floe::Error::Config(format!("cannot start the signal thread: {e}")))?;
    Ok(StopOnSignal {
        handle,
        thread: Some(thread),
    })
}
