//! Committed output is never taken back.
//!
//! The bug: a two-phase-commit sink subtask that reached its end of input
//! committed its last transaction at once, before any checkpoint covered
//! it. When another part of the job failed afterwards, the restart restored
//! a checkpoint taken while that sink still ran (or started from the
//! beginning): its recovery removed the committed tail (the file sink
//! truncates it) and the replay wrote it again. A reader of the committed
//! output saw it shrink. Now, as in Flink since 1.14 (FLIP-147), a subtask
//! that ended waits for a checkpoint taken after its end, and the sink
//! commits its last transaction only when that checkpoint completes; the
//! job ends with that final checkpoint.
//!
//! The job: two independent pipelines into two transactional sinks, one
//! short (it ends early) and one long; a fault in the long one after the
//! short one ended. Deterministic (the chaos harness: one thread, logical
//! clock), over checkpoint intervals from "none before the end" to short.
//! Each sink counts the committed records a recovery or reset removed again
//! ([`ExactlyOnceCollector::taken_back`]); it must stay 0, and the committed
//! output must equal the input (the oracle: a sort of what was generated).

use floe::Config;
use floe::failover::{FailoverStrategy, Fault, FaultPoint};
use floe::testing::chaos::{self, ExactlyOnceCollector, FaultPlan, TraceEvent};
use std::time::Duration;

const SHORT: u64 = 40;
const LONG: u64 = 4_000;
const BATCH: usize = 10;

fn short(i: u64) -> u64 {
    i * 2
}

fn long(i: u64) -> u64 {
    i * 2 + 1
}

#[test]
fn a_sink_that_ended_early_never_takes_back_committed_output() {
    let mut expected: Vec<u64> = (0..SHORT).map(short).chain((0..LONG).map(long)).collect();
    expected.sort_unstable();
    let mut restarts = 0;
    for interval_ms in [1_000_000_000, 400, 97, 23] {
        for before_end in [1, 300, 1_500] {
            let plan = FaultPlan {
                seed: 0,
                parallelism: 1,
                failover: FailoverStrategy::All,
                interval_ms,
                faults: vec![Fault {
                    operator: "Long".into(),
                    subtask: 0,
                    at: FaultPoint::Records(LONG - before_end),
                }],
            };
            let mut base = Config::default();
            base.runtime.batch_size = BATCH;
            base.chaining = false;
            let (early, late) = (ExactlyOnceCollector::new(), ExactlyOnceCollector::new());
            let run = {
                let (early, late) = (early.clone(), late.clone());
                chaos::run(plan.config(base), Duration::from_secs(60), move |env| {
                    env.from_generator(SHORT, short)
                        .name("Short Numbers")
                        .sink_exactly_once("Short Committed", early);
                    env.from_generator(LONG, |i| i)
                        .name("Long Numbers")
                        .map(long)
                        .name("Long")
                        .sink_exactly_once("Long Committed", late.clone());
                    late
                })
            };
            let what = format!("interval {interval_ms}, fault {before_end} records before the end");
            assert_eq!(run.result, Ok(()), "{what}: {:?}", run.trace);
            assert_eq!(run.fired().len(), 1, "{what}: the fault fired");
            restarts += run
                .trace
                .iter()
                .filter(|t| matches!(t.event, TraceEvent::Restarted { .. }))
                .count();
            assert_eq!(
                early.taken_back(),
                0,
                "{what}: the sink that ended early saw committed records taken back; trace {:?}",
                run.trace
            );
            assert_eq!(
                late.taken_back(),
                0,
                "{what}: the long pipeline's sink saw committed records taken back"
            );
            let mut got = early.committed();
            got.extend(run.output);
            got.sort_unstable();
            assert!(
                got == expected,
                "{what}: {} records committed, {} expected",
                got.len(),
                expected.len()
            );
        }
    }
    assert!(restarts >= 12, "every run restarted: {restarts}");
}
