//! `floe bench window`: keyed event-time window sums over generated events.
//!
//! The workload mirrors the Flink peer's: record `i` is `(key, ts, value)` with
//! `key = mix(i) % keys`, `value = i % 100 + 1`, and event time advancing at
//! `events_per_second` over all source subtasks (each subtask counts its own
//! records and interleaves with the others), pulled back by a jitter below the
//! out-of-orderness bound so no record is late. Watermarks are periodic
//! (bounded out-of-orderness); windows sum the value per key.

use super::progress::Progress;
use clap::Args;
use floe::connectors::{SourceContext, SourceFunction, SourcePoll};
use floe::operators::sink::SinkFunction;
use floe::time::WatermarkStrategy;
use floe::window::{TimeWindow, WindowAssigner};
use floe::{Record, StreamExecutionEnvironment};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Options of `floe bench window`.
#[derive(Args, Debug, Clone)]
pub struct WindowBenchArgs {
    /// Records per run.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Event-time rate over all subtasks.
    #[arg(long, default_value_t = 100_000)]
    pub events_per_second: u64,
    /// Jitter bound and watermark out-of-orderness (ms).
    #[arg(long, default_value_t = 200)]
    pub out_of_orderness: i64,
    /// Parallelism.
    #[arg(long, default_value_t = 2)]
    pub parallelism: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 2048)]
    pub batch_size: usize,
    /// Which windows: tumbling (1 s) and/or sliding (10 s every 1 s).
    #[arg(long, value_delimiter = ',', default_value = "tumbling,sliding")]
    pub windows: Vec<String>,
}

const BASE_TS: i64 = 1_700_000_000_000;

fn mix(i: u64) -> u64 {
    floe::text::mix64(i.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// The event generator of one source subtask.
struct Events {
    next: u64,
    end: u64,
    local: u64,
    subtask: u64,
    parallelism: u64,
    keys: u64,
    eps: u64,
    ooo: u64,
}

impl SourceFunction<(u64, i64, i64)> for Events {
    fn poll_batch(
        &mut self,
        max: usize,
        out: &mut Vec<Record<(u64, i64, i64)>>,
    ) -> floe::Result<SourcePoll> {
        let n = (self.end - self.next).min(max as u64);
        out.reserve(n as usize);
        for i in self.next..self.next + n {
            let h = mix(i);
            let logical = self.local * self.parallelism + self.subtask;
            self.local += 1;
            let jitter = if self.ooo > 0 {
                (mix(h) % self.ooo) as i64
            } else {
                0
            };
            let ts = BASE_TS + (logical * 1000 / self.eps) as i64 - jitter;
            out.push(Record::new((h % self.keys, ts, (i % 100 + 1) as i64)));
        }
        self.next += n;
        Ok(if self.next >= self.end {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }
}

#[derive(Clone)]
struct Checksum(Arc<AtomicU64>, u64);

impl SinkFunction<(u64, i64, i64)> for Checksum {
    async fn write(&mut self, batch: Vec<Record<(u64, i64, i64)>>) -> floe::Result<()> {
        self.1 = batch
            .iter()
            .fold(self.1, |s, r| s.wrapping_add(r.value.2 as u64));
        Ok(())
    }
    async fn finish(&mut self) -> floe::Result<()> {
        self.0.fetch_add(self.1, Ordering::Relaxed);
        Ok(())
    }
}

fn run_once(args: &WindowBenchArgs, sliding: bool) -> floe::Result<(f64, u64, u64)> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism)
        .set_batch_size(args.batch_size);
    let (records, keys, eps, ooo) = (
        args.records,
        args.keys.max(1),
        args.events_per_second.max(1),
        args.out_of_orderness.max(0),
    );
    let source = env.add_source("Events", move |ctx: &SourceContext| {
        let (next, end) = ctx.split(records);
        Ok(Events {
            next,
            end,
            local: 0,
            subtask: ctx.subtask.0 as u64,
            parallelism: ctx.parallelism as u64,
            keys,
            eps,
            ooo: ooo as u64,
        })
    });
    let assigner = if sliding {
        WindowAssigner::sliding(10_000, 1_000)
    } else {
        WindowAssigner::tumbling(1_000)
    };
    let total = Arc::new(AtomicU64::new(0));
    source
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::bounded_out_of_orderness(ooo)
                .with_timestamp_assigner(|e: &(u64, i64, i64), _| e.1),
        )
        .key_by_field(|e: &(u64, i64, i64)| &e.0)
        .window(assigner)
        .aggregate_with(
            SumValues,
            |k: &u64, w: &TimeWindow, sum: i64, out: &mut Vec<(u64, i64, i64)>| {
                out.push((*k, w.end, sum))
            },
        )
        .sink("Checksum", Checksum(total.clone(), 0));
    let handle = env.execute_async()?;
    let result = {
        let _p = Progress::start(&handle, "Events", Some(records));
        futures::executor::block_on(handle.wait())?
    };
    let fired = result
        .operator("Window")
        .map(|o| o.records_out)
        .unwrap_or(0);
    Ok((
        result.elapsed.as_secs_f64(),
        fired,
        total.load(Ordering::Relaxed),
    ))
}

/// Sums the value field.
struct SumValues;

impl floe::window::AggregateFunction<(u64, i64, i64), i64, i64> for SumValues {
    fn create_accumulator(&self) -> i64 {
        0
    }
    fn add(&self, v: &(u64, i64, i64), acc: &mut i64) {
        *acc += v.2;
    }
    fn get_result(&self, acc: &i64) -> i64 {
        *acc
    }
    fn merge(&self, a: i64, b: i64) -> i64 {
        a + b
    }
}

pub fn window(args: &WindowBenchArgs) -> floe::Result<()> {
    super::check_parallelism(args.parallelism, None)?;
    if args.records == 0 || args.batch_size == 0 {
        return Err(floe::Error::Config(
            "--records and --batch-size must be at least 1".into(),
        ));
    }
    let expected: u64 = (0..args.records).map(|i| i % 100 + 1).sum();
    let mut rows = Vec::new();
    for w in &args.windows {
        let sliding = match w.as_str() {
            "tumbling" => false,
            "sliding" => true,
            other => {
                return Err(floe::Error::Config(format!(
                    "unknown --windows entry '{other}' (tumbling, sliding)"
                )));
            }
        };
        let (secs, fired, sum) = run_once(args, sliding)?;
        let factor = if sliding { 10 } else { 1 };
        if sum != expected * factor {
            return Err(floe::Error::Internal(format!(
                "{w}: checksum {sum} != expected {}",
                expected * factor
            )));
        }
        let rate = args.records as f64 / secs;
        let name = format!("floe-window-{w}");
        println!(
            "RESULT name={name} records={} secs={secs:.4} rate_per_s={rate:.0} windows_fired={fired} parallelism={}",
            args.records, args.parallelism
        );
        rows.push((name, secs, rate));
    }
    if rows.len() == 2 {
        println!("sliding/tumbling time ratio: {:.2}x", rows[1].1 / rows[0].1);
    }
    Ok(())
}
