//! Watermark introspection: which input channel holds a window back.
//!
//! Two sources feed one keyed event-time window. Source A emits events up to
//! t = 10 000, source B only up to t = 1 000; both then stay open. With
//! per-record watermarks of bounded out-of-orderness 0, A's channel reaches
//! 9 999 and B's 999 (the oracle: max timestamp − 1), so every window subtask's
//! watermark is 999 and B's channel is the one holding it back. The status
//! snapshot and its textual explanation must say exactly that while the job
//! runs; once the sources finish, every channel has ended.

use floe::connectors::{SourceFunction, SourcePoll};
use floe::operators::sink::SinkFunction;
use floe::time::WatermarkStrategy;
use floe::window::WindowAssigner;
use floe::{Record, StreamExecutionEnvironment};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

type Ev = (u32, i64, i64);

/// Emits `events` once, then waits (open, silent) until released.
struct HeldSource {
    events: Vec<Ev>,
    sent: bool,
    release: Arc<AtomicBool>,
}

impl SourceFunction<Ev> for HeldSource {
    fn poll_batch(&mut self, _max: usize, out: &mut Vec<Record<Ev>>) -> floe::Result<SourcePoll> {
        if !self.sent {
            self.sent = true;
            out.extend(self.events.drain(..).map(Record::new));
            return Ok(SourcePoll::Ready);
        }
        if self.release.load(Ordering::SeqCst) {
            Ok(SourcePoll::Finished)
        } else {
            Ok(SourcePoll::Wait(Duration::from_millis(1)))
        }
    }
}

/// Drops what it receives.
#[derive(Clone)]
struct Discard;

impl SinkFunction<Ev> for Discard {
    async fn write(&mut self, _: floe::Batch<Ev>) -> floe::Result<()> {
        Ok(())
    }
}

fn events(max_ts: i64) -> Vec<Ev> {
    (0..=max_ts / 10)
        .map(|i| ((i % 3) as u32, i * 10, i))
        .collect()
}

#[test]
fn lagging_input_is_named_as_holding_the_watermark_back() {
    const A_MAX: i64 = 10_000;
    const B_MAX: i64 = 1_000;
    let release = Arc::new(AtomicBool::new(false));
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let strategy = || {
        WatermarkStrategy::<Ev>::bounded_out_of_orderness(0)
            .with_timestamp_assigner(|e, _| e.1)
            .per_record()
    };
    let source = |name: &str, max_ts: i64| {
        let r = release.clone();
        env.add_source(name, move |_| {
            Ok(HeldSource {
                events: events(max_ts),
                sent: false,
                release: r.clone(),
            })
        })
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(strategy())
        .set_parallelism(1)
    };
    let a = source("A", A_MAX);
    let b = source("B", B_MAX);
    a.union(&[&b])
        .key_by(|e: &Ev| e.0)
        .window(WindowAssigner::tumbling(100))
        .reduce(|x: Ev, y: Ev| (x.0, x.1.max(y.1), x.2 + y.2))
        .sink("Discard", Discard);
    let handle = env.execute_async().expect("job starts");

    // Oracle: a channel's watermark is its source's max timestamp - 0 - 1.
    let (wm_a, wm_b) = (A_MAX - 1, B_MAX - 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let snapshot = loop {
        let s = handle.status_snapshot();
        let subtasks = s.subtasks_of("Window");
        let settled = subtasks.len() == 2
            && subtasks.iter().all(|st| {
                let mut wms: Vec<Option<i64>> = st.inputs.iter().map(|c| c.watermark).collect();
                wms.sort();
                wms == vec![Some(wm_b), Some(wm_a)]
            });
        if settled {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "watermarks never settled: {:#?}",
            s.subtasks
        );
        std::thread::yield_now();
    };
    for st in snapshot.subtasks_of("Window") {
        assert_eq!(st.watermark, Some(wm_b), "subtask {}", st.subtask);
        let back = st
            .holding_back
            .expect("a live channel holds the watermark back");
        assert_eq!(st.inputs[back].watermark, Some(wm_b));
        assert!(st.inputs.iter().all(|c| !c.idle && !c.ended));
    }
    let text = snapshot.explain_watermarks("Window");
    assert_eq!(
        text.matches("holds the watermark back").count(),
        2,
        "{text}"
    );
    assert!(
        text.contains(&format!("watermark {wm_b} (holds the watermark back)")),
        "{text}"
    );
    assert!(text.contains(&format!("watermark {wm_a}\n")), "{text}");

    release.store(true, Ordering::SeqCst);
    futures::executor::block_on(handle.wait()).expect("job finishes");
    let done = handle.status_snapshot();
    assert_eq!(done.state, "Finished");
    for st in done.subtasks_of("Window") {
        assert!(st.inputs.iter().all(|c| c.ended), "{st:?}");
        assert_eq!(st.holding_back, None);
    }
}

#[test]
fn cli_explains_window_watermarks_when_the_job_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "a,100,1\nb,250,2\na,420,3\n").expect("write input");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["run", "window", "--window", "tumbling:100", "--agg", "sum"])
        .args(["--parallelism", "2", "--explain-watermarks", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(dir.path().join("out.csv"))
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("floe runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Both window subtasks, each with its one (ended) input channel.
    for subtask in 0..2 {
        assert!(
            stderr.contains(&format!("] subtask {subtask}: watermark end")),
            "{stderr}"
        );
    }
    assert_eq!(
        stderr.matches("channel 0: watermark end (ended)").count(),
        2,
        "{stderr}"
    );
}
