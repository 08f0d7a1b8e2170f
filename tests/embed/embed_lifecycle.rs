//! The lifecycle of an embedded job through its `JobHandle`:
//! stop-with-savepoint and a restore from it, cancel-and-wait, cancel on
//! drop, `wait` telling canceled from failed, resume-latest-or-fresh, and
//! the observer and fault-injector hooks (typed injected faults).
//!
//! Every count is checked against a plain `HashMap` over the whole input;
//! every wait is for an event (sources holding at a gate, a completed
//! checkpoint, the job's end), never for time.

use crate::gated;
use floe::checkpoint::CheckpointConfig;
use floe::failover::{Fault, FaultInjection, FaultPoint, JobObserver, RestartStrategy};
use floe::{CheckpointId, Config, Error, JobEnd, JobStatus, StreamExecutionEnvironment};
use gated::{Gate, gated_generator, wait_for_new_checkpoints};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

const RECORDS: u64 = 40_000;
const WORDS: u64 = 29;
const P: usize = 2;

/// Turns a hang (a bug) into a failure; a slow machine only waits longer.
const LIMIT: Duration = Duration::from_secs(300);

fn word(i: u64) -> String {
    format!("w{}", floe::text::mix64(i) % WORDS)
}

fn oracle() -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for i in 0..RECORDS {
        *m.entry(word(i)).or_insert(0) += 1;
    }
    m
}

/// A keyed count of `word(0..RECORDS)`; with a `gate` its sources hold at
/// half of their input until it opens. `config` is the job's whole
/// configuration.
fn job(
    config: Config,
    gate: Option<&Arc<Gate>>,
) -> (
    StreamExecutionEnvironment,
    floe::connectors::collect::Collected<(String, u64)>,
) {
    let env = StreamExecutionEnvironment::with_config(config);
    env.set_batch_size(64);
    let words = match gate {
        Some(g) => gated_generator(&env, g, RECORDS, &[0.5], |i| (word(i), 1u64)),
        None => env.from_generator(RECORDS, |i| (word(i), 1u64)),
    }
    .uid("words");
    let counts = words
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .uid("sum")
        .collect();
    (env, counts)
}

fn checkpointing(dir: &Path) -> Config {
    let mut config = Config::default();
    config.parallelism = P;
    config.checkpoint = CheckpointConfig::every(Duration::from_millis(30)).with_dir(dir);
    config
}

fn last_per_key(updates: Vec<(String, u64)>) -> HashMap<String, u64> {
    updates.into_iter().collect()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Records what the job reports through the observer hook.
#[derive(Default)]
struct Recorder {
    completed: Mutex<Vec<u64>>,
    failures: Mutex<Vec<floe_actors::Error>>,
    restarts: Mutex<Vec<(u64, Option<u64>)>>,
    ended: Mutex<Option<mpsc::Sender<JobStatus>>>,
}

impl Recorder {
    fn with_end() -> (Arc<Self>, mpsc::Receiver<JobStatus>) {
        let (tx, rx) = mpsc::channel();
        let r = Recorder {
            ended: Mutex::new(Some(tx)),
            ..Default::default()
        };
        (Arc::new(r), rx)
    }
}

impl JobObserver for Recorder {
    fn checkpoint_completed(&self, id: CheckpointId) {
        self.completed.lock().unwrap().push(id.0);
    }

    fn failed(&self, error: &floe_actors::Error) {
        self.failures.lock().unwrap().push(error.clone());
    }

    fn restarted(&self, attempt: u64, restored: Option<CheckpointId>) {
        self.restarts
            .lock()
            .unwrap()
            .push((attempt, restored.map(|c| c.0)));
    }

    fn ended(&self, status: JobStatus) {
        if let Some(tx) = self.ended.lock().unwrap().as_ref() {
            let _ = tx.send(status);
        }
    }
}

#[test]
fn stop_with_savepoint_then_restore_continues_the_counts_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new();
    let (env, _) = job(checkpointing(&dir.path().join("ck")), Some(&gate));
    let handle = env.execute_async().expect("job starts");
    gate.wait_held(P);
    let savepoint = block(handle.stop_with_savepoint(dir.path().join("sp"))).expect("stops");
    // The job finished (not canceled, not failed) with the savepoint.
    assert_eq!(handle.status(), JobStatus::Finished);
    assert!(matches!(block(handle.outcome()), JobEnd::Finished(_)));
    assert!(
        savepoint.starts_with(dir.path().join("sp")),
        "{savepoint:?}"
    );
    let emitted = gate.emitted();
    assert!(emitted > 0 && emitted < RECORDS, "{emitted}");

    let mut config = checkpointing(&dir.path().join("ck2"));
    config.restore_from = Some(savepoint);
    let (env, counts) = job(config, None);
    let result = env.execute().expect("the restored job finishes");
    // It read on exactly from the savepoint: only what followed the gate,
    // and its keyed counts continue the stopped job's.
    assert_eq!(
        result.operator("Keyed Sum").unwrap().records_in,
        RECORDS - emitted
    );
    assert_eq!(last_per_key(counts.take()), oracle());
}

/// `execute_async` returns before the job is deployed: here the restore
/// reads one blob of the savepoint from a FIFO that gets its bytes only
/// after `execute_async` returned. A deployment on the calling thread would
/// wait for them for ever (the watchdog turns that into a failure).
#[cfg(unix)]
#[test]
fn execute_async_returns_before_the_restore_is_loaded() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new();
    let (env, _) = job(checkpointing(&dir.path().join("ck")), Some(&gate));
    let handle = env.execute_async().expect("job starts");
    gate.wait_held(P);
    let savepoint = block(handle.stop_with_savepoint(dir.path().join("sp"))).expect("stops");
    let emitted = gate.emitted();
    // The largest blob of the savepoint becomes a FIFO; its bytes wait aside.
    let blob = walk(&savepoint)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "_metadata"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("the savepoint has a blob");
    let bytes = std::fs::read(&blob).unwrap();
    let aside = blob.with_extension("aside");
    std::fs::rename(&blob, &aside).unwrap();
    let c_path = std::ffi::CString::new(blob.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");

    let mut config = checkpointing(&dir.path().join("ck2"));
    config.restore_from = Some(savepoint);
    let (env, counts) = job(config, None);
    let (returned, watch) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(LIMIT) {
            eprintln!("execute_async waited for the restore to be loaded");
            std::process::abort();
        }
    });
    let handle = env.execute_async().expect("the job starts");
    returned.send(()).unwrap();
    watchdog.join().unwrap();
    // Opening the FIFO waits for the restore to read it; once open, later
    // readers (the subtasks) get the plain file back.
    let mut fifo = std::fs::OpenOptions::new().write(true).open(&blob).unwrap();
    std::fs::rename(&aside, &blob).unwrap();
    fifo.write_all(&bytes).unwrap();
    drop(fifo);
    let result = block(handle.wait()).expect("the restored job finishes");
    assert_eq!(
        result.operator("Keyed Sum").unwrap().records_in,
        RECORDS - emitted
    );
    assert_eq!(last_per_key(counts.take()), oracle());
}

/// Every file under `dir`.
#[cfg(unix)]
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A restore that cannot be loaded fails the job with the typed error,
/// from `wait` (the deployment runs after `execute_async` returned).
#[test]
fn a_restore_that_cannot_be_loaded_fails_the_job_with_its_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = checkpointing(&dir.path().join("ck"));
    config.restore_from = Some(dir.path().join("no-such-savepoint"));
    let (env, _) = job(config, None);
    let handle = env
        .execute_async()
        .expect("starting does not load the restore");
    let err = block(handle.wait()).expect_err("nothing to restore");
    assert!(matches!(err, Error::Checkpoint(_)), "{err:?}");
    assert_eq!(handle.status(), JobStatus::Failed);
    // A second waiter hears the same failure.
    assert!(block(handle.wait()).is_err());
}

#[test]
fn resume_latest_starts_fresh_on_an_empty_directory_then_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("service");
    // The configuration a service uses on every start.
    let service = || checkpointing(&ck).resume_latest(&ck);

    // First start: nothing to resume, so it starts fresh (a plain
    // `restore_from` fails here with "no checkpoint").
    let gate = Gate::new();
    let (env, _) = job(service(), Some(&gate));
    let handle = env
        .execute_async()
        .expect("first start without a checkpoint");
    gate.wait_held(P);
    wait_for_new_checkpoints(&handle, 2);
    let emitted = gate.emitted();
    assert!(matches!(
        block(handle.cancel_and_wait(LIMIT)).expect("cancel took effect"),
        JobEnd::Canceled
    ));

    // Second start: resumes the latest completed checkpoint.
    let (env, counts) = job(service(), None);
    let result = env.execute().expect("the resumed job finishes");
    assert_eq!(
        result.operator("Keyed Sum").unwrap().records_in,
        RECORDS - emitted
    );
    assert_eq!(last_per_key(counts.take()), oracle());
}

#[test]
fn a_fresh_start_under_resume_latest_counts_the_whole_input() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("never-used");
    let (env, counts) = job(checkpointing(&ck).resume_latest(&ck), None);
    env.execute().expect("starts fresh");
    assert_eq!(last_per_key(counts.take()), oracle());
}

#[test]
fn wait_tells_canceled_from_failed() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new();
    let (env, _) = job(checkpointing(dir.path()), Some(&gate));
    let handle = env.execute_async().unwrap();
    gate.wait_held(P);
    handle.cancel();
    assert!(matches!(block(handle.wait()), Err(Error::Canceled)));
    assert!(matches!(block(handle.outcome()), JobEnd::Canceled));

    // A job whose operator fails for good.
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    env.from_generator(100, |i| i)
        .map(|i: u64| {
            assert!(i < 50, "boom at {i}");
            i
        })
        .collect();
    let handle = env.execute_async().unwrap();
    match block(handle.outcome()) {
        JobEnd::Failed(e) => assert!(e.to_string().contains("boom at 50"), "{e}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn cancel_on_drop_cancels_with_the_last_handle_and_is_off_by_default() {
    for cancel_on_drop in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let gate = Gate::new();
        let (recorder, ended) = Recorder::with_end();
        let (env, counts) = job(
            checkpointing(dir.path()).with_observer(recorder),
            Some(&gate),
        );
        let handle = env.execute_async().unwrap().cancel_on_drop(cancel_on_drop);
        let clone = handle.clone();
        gate.wait_held(P);
        drop(handle);
        // A clone is still there: the job runs on.
        assert_eq!(clone.status(), JobStatus::Running);
        drop(clone);
        if cancel_on_drop {
            // The sources still hold: only the cancel can end the job.
            let status = ended.recv_timeout(LIMIT).expect("the job ended");
            assert_eq!(status, JobStatus::Canceled);
        } else {
            // Let the sources run to their end: a job still running
            // finishes, with every record counted.
            gate.open();
            let status = ended.recv_timeout(LIMIT).expect("the job ended");
            assert_eq!(status, JobStatus::Finished);
            assert_eq!(last_per_key(counts.take()), oracle());
        }
    }
}

#[test]
fn cancel_and_wait_reports_a_job_that_ended_before_the_cancel() {
    let (env, counts) = job(
        {
            let mut config = Config::default();
            config.parallelism = P;
            config
        },
        None,
    );
    let handle = env.execute_async().unwrap();
    block(handle.wait()).expect("finishes");
    assert!(matches!(
        block(handle.cancel_and_wait(LIMIT)),
        Ok(JobEnd::Finished(_))
    ));
    assert_eq!(last_per_key(counts.take()), oracle());
}

#[test]
fn observers_see_typed_injected_faults_checkpoints_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let fault = Fault {
        operator: "Keyed Sum".into(),
        subtask: 1,
        at: FaultPoint::Records(3_000),
    };
    let (recorder, ended) = Recorder::with_end();
    let mut config = checkpointing(dir.path())
        .with_observer(recorder.clone())
        .with_fault_injector(Arc::new(FaultInjection {
            faults: vec![fault.clone()],
            ..Default::default()
        }));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 2,
        delay: Duration::ZERO,
    });
    let (env, counts) = job(config, None);
    let handle = env.execute_async().unwrap();
    block(handle.wait()).expect("recovers and finishes");
    assert_eq!(ended.recv_timeout(LIMIT), Ok(JobStatus::Finished));
    // The failure arrives typed: the planned fault is read from the error,
    // not from its text.
    let failures = recorder.failures.lock().unwrap().clone();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(Fault::from_error(&failures[0]), Some(fault));
    assert!(matches!(
        failures[0],
        floe_actors::Error::InjectedFault {
            point: Some(FaultPoint::Records(3_000)),
            ..
        }
    ));
    // One restart, reported as the handle counts it.
    let restarts = recorder.restarts.lock().unwrap().clone();
    assert_eq!(restarts.len() as u64, handle.failover_stats().restarts);
    assert_eq!(restarts.len(), 1);
    // Every completed checkpoint was reported, in order.
    let completed = recorder.completed.lock().unwrap().clone();
    assert_eq!(completed.len() as u64, handle.checkpoint_stats().completed);
    assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");
    assert_eq!(last_per_key(counts.take()), oracle());
}

/// Requests a savepoint from inside the job's first failure: after the
/// failed attempt ended, before the next one is deployed.
struct SavepointOnFailure {
    handle: Mutex<Option<mpsc::Receiver<floe::JobHandle>>>,
    dir: std::path::PathBuf,
    result: Mutex<Option<mpsc::Sender<floe::Result<std::path::PathBuf>>>>,
}

impl JobObserver for SavepointOnFailure {
    fn failed(&self, _: &floe_actors::Error) {
        use std::future::Future;
        use std::task::{Context, Poll};
        let Some(handles) = self.handle.lock().unwrap().take() else {
            return;
        };
        let tx = self.result.lock().unwrap().take().expect("one failure");
        let handle = handles.recv_timeout(LIMIT).expect("the job's handle");
        let dir = self.dir.clone();
        let mut request = Box::pin(async move { handle.trigger_savepoint(dir).await });
        // Polled once here, so the request goes out now, while no attempt
        // runs; it then completes on another thread.
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        match request.as_mut().poll(&mut cx) {
            Poll::Ready(result) => tx.send(result).unwrap(),
            Poll::Pending => {
                std::thread::spawn(move || tx.send(block(request)));
            }
        }
    }
}

#[test]
fn a_savepoint_requested_during_a_restart_is_taken_by_the_next_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new();
    let (handle_tx, handle_rx) = mpsc::channel();
    let (result_tx, result_rx) = mpsc::channel();
    let requester = Arc::new(SavepointOnFailure {
        handle: Mutex::new(Some(handle_rx)),
        dir: dir.path().join("sp"),
        result: Mutex::new(Some(result_tx)),
    });
    let mut config = checkpointing(&dir.path().join("ck"))
        .with_observer(requester)
        .with_fault_injector(Arc::new(FaultInjection {
            faults: vec![Fault {
                operator: "Keyed Sum".into(),
                subtask: 1,
                at: FaultPoint::Records(1_000),
            }],
            ..Default::default()
        }));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 2,
        delay: Duration::ZERO,
    });
    // The sources hold at half of their input until the savepoint is
    // taken: the job cannot end before it.
    let (env, counts) = job(config, Some(&gate));
    let handle = env.execute_async().expect("job starts");
    handle_tx.send(handle.clone()).unwrap();
    let savepoint = result_rx
        .recv_timeout(LIMIT)
        .expect("the savepoint's result")
        .expect("the savepoint is taken by the next attempt");
    assert!(savepoint.join("_metadata").is_file(), "{savepoint:?}");
    assert_eq!(handle.failover_stats().restarts, 1);
    gate.open();
    block(handle.wait()).expect("the job finishes");
    assert_eq!(last_per_key(counts.take()), oracle());

    // The savepoint is the restarted job's state: restored, the counts
    // end exactly.
    let mut config = checkpointing(&dir.path().join("ck2"));
    config.restore_from = Some(savepoint);
    let (env, counts) = job(config, None);
    env.execute().expect("the restored job finishes");
    assert_eq!(last_per_key(counts.take()), oracle());
}

/// The checkpoint directory deleted while the job runs: the restart that
/// follows a failure cannot restore the checkpoint the job completed
/// there, and the job's error says the directory went away, not only
/// that nothing is there.
#[test]
fn a_restart_after_the_checkpoint_directory_was_deleted_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let gate = Gate::new();
    // Each source subtask emits RECORDS / P records and holds at half of
    // them; its chained tap fails once it has taken one record more, so
    // after the gate opened.
    let mut config = checkpointing(&ck).with_fault_injector(Arc::new(FaultInjection {
        faults: vec![Fault {
            operator: "Tap".into(),
            subtask: 0,
            at: FaultPoint::Records(RECORDS / P as u64 / 2 + 1),
        }],
        ..Default::default()
    }));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 2,
        delay: Duration::ZERO,
    });
    let env = StreamExecutionEnvironment::with_config(config);
    env.set_batch_size(64);
    gated_generator(&env, &gate, RECORDS, &[0.5], |i| (word(i), 1u64))
        .uid("words")
        .map(|t: (String, u64)| t)
        .name("Tap")
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .uid("sum")
        .collect();
    let handle = env.execute_async().expect("job starts");
    gate.wait_held(P);
    wait_for_new_checkpoints(&handle, 1);
    // Moved away in one step (checkpoints go on writing into it while the
    // sources hold): for the job, the directory is gone.
    std::fs::rename(&ck, dir.path().join("moved")).unwrap();
    gate.open();
    let error = block(handle.wait()).expect_err("nothing to restore after the failure");
    let text = error.to_string();
    assert!(
        text.contains("was deleted or replaced while the job ran")
            && text.contains(&ck.display().to_string()),
        "{text}"
    );
}
