//! `floe bench mailbox`: records per second through one actor hop.
//!
//! - `actix-unbatched`: raw actix, one `do_send` per record, credit window of
//!   1024 messages (the consumer returns credits every 512), producer and
//!   consumer on two arbiters.
//! - `floe-channel`: a floe job `generator → sink` with chaining off, so every
//!   record crosses one floe channel (batches of 1024, credit flow control).
//! - `floe-pipeline-2hop`: `generator → map → sink`, two channels.
//!
//! Both floe jobs place connected subtasks on different arbiters, so every hop
//! crosses threads as the actix baseline does. Each bench checks the sum of
//! the values it received.

use actix::prelude::*;
use clap::Args;
use floe::operators::sink::SinkFunction;
use floe::{Record, StreamExecutionEnvironment};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Options of `floe bench mailbox`.
#[derive(Args, Debug, Clone)]
pub struct MailboxArgs {
    /// Records per run.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Runs per bench; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Records per floe batch.
    #[arg(long, default_value_t = 1024)]
    pub batch_size: usize,
}

/// One run of a bench: its duration and the checksum of what it received.
type RunOnce<'a> = dyn Fn() -> floe::Result<(Duration, u64)> + 'a;

pub fn mailbox(args: &MailboxArgs) -> floe::Result<()> {
    if args.records == 0 || args.reps == 0 || args.batch_size == 0 {
        return Err(floe::Error::Config(
            "--records, --reps and --batch-size must be at least 1".into(),
        ));
    }
    let n = args.records;
    let expected = n * (n - 1) / 2;
    let benches: [(&str, &RunOnce); 3] = [
        ("actix-unbatched", &|| Ok(actix_unbatched(n))),
        ("floe-channel", &|| floe_hops(n, 1, args.batch_size)),
        ("floe-pipeline-2hop", &|| floe_hops(n, 2, args.batch_size)),
    ];
    let mut rows = Vec::new();
    for (name, run) in benches {
        let mut secs = Vec::new();
        for _ in 0..args.reps {
            let (d, sum) = run()?;
            if sum != expected {
                return Err(floe::Error::Internal(format!(
                    "{name}: checksum {sum} != expected {expected}"
                )));
            }
            secs.push(d.as_secs_f64());
        }
        secs.sort_by(f64::total_cmp);
        let median = secs[secs.len() / 2];
        let rate = n as f64 / median;
        println!("RESULT name={name} records={n} secs={median:.4} rate_per_s={rate:.0}");
        rows.push((name, median, rate));
    }
    let base = rows[0].2;
    println!();
    println!(
        "{:<20} {:>14} {:>10} {:>16} {:>12}",
        "bench", "records", "secs", "records/s", "vs actix"
    );
    for (name, secs, rate) in &rows {
        println!(
            "{:<20} {:>14} {:>10.4} {:>16.0} {:>11.1}x",
            name,
            n,
            secs,
            rate,
            rate / base
        );
    }
    Ok(())
}

#[derive(Clone)]
struct SumSink(Arc<AtomicU64>, u64);

impl SinkFunction<u64> for SumSink {
    async fn write(&mut self, batch: Vec<Record<u64>>) -> floe::Result<()> {
        self.1 = batch.iter().fold(self.1, |s, r| s.wrapping_add(r.value));
        Ok(())
    }
    async fn finish(&mut self) -> floe::Result<()> {
        self.0.fetch_add(self.1, Ordering::Relaxed);
        Ok(())
    }
}

fn floe_hops(n: u64, hops: usize, batch_size: usize) -> floe::Result<(Duration, u64)> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1)
        .set_arbiters(2)
        .set_batch_size(batch_size);
    let mut config = env.config();
    config.runtime.spread_vertices = true;
    env.set_config(config);
    let total = Arc::new(AtomicU64::new(0));
    let mut s = env.from_generator(n, |i| i).disable_chaining();
    for _ in 1..hops {
        s = s.map(|x| x).disable_chaining();
    }
    s.sink("SumSink", SumSink(total.clone(), 0))
        .disable_chaining();
    let r = env.execute()?;
    Ok((r.elapsed, total.load(Ordering::Relaxed)))
}

// ---- raw actix, one message per record ----

const WINDOW: u64 = 1024;

struct Item(u64);
impl Message for Item {
    type Result = ();
}

#[derive(Message)]
#[rtype(result = "()")]
struct Credit(u64);

#[derive(Message)]
#[rtype(result = "()")]
struct Begin(Addr<Consumer>);

struct Producer {
    consumer: Option<Addr<Consumer>>,
    next: u64,
    end: u64,
    credits: u64,
}

impl Actor for Producer {
    type Context = Context<Self>;
}

impl Producer {
    fn pump(&mut self) {
        if let Some(c) = &self.consumer {
            while self.credits > 0 && self.next < self.end {
                c.do_send(Item(self.next));
                self.next += 1;
                self.credits -= 1;
            }
        }
    }
}

impl Handler<Begin> for Producer {
    type Result = ();
    fn handle(&mut self, m: Begin, _: &mut Context<Self>) {
        self.consumer = Some(m.0);
        self.credits = WINDOW;
        self.pump();
    }
}

impl Handler<Credit> for Producer {
    type Result = ();
    fn handle(&mut self, m: Credit, _: &mut Context<Self>) {
        self.credits += m.0;
        self.pump();
    }
}

struct Consumer {
    producer: Addr<Producer>,
    seen: u64,
    expected: u64,
    sum: u64,
    since: u64,
    done: Option<futures::channel::oneshot::Sender<u64>>,
}

impl Actor for Consumer {
    type Context = Context<Self>;
}

impl Handler<Item> for Consumer {
    type Result = ();
    fn handle(&mut self, m: Item, _: &mut Context<Self>) {
        self.sum = self.sum.wrapping_add(m.0);
        self.seen += 1;
        self.since += 1;
        if self.since == WINDOW / 2 {
            self.producer.do_send(Credit(self.since));
            self.since = 0;
        }
        if self.seen == self.expected
            && let Some(tx) = self.done.take()
        {
            let _ = tx.send(self.sum);
        }
    }
}

fn actix_unbatched(n: u64) -> (Duration, u64) {
    System::new().block_on(async move {
        let a = Arbiter::new();
        let b = Arbiter::new();
        let (tx, rx) = futures::channel::oneshot::channel();
        let producer = Producer::start_in_arbiter(&a.handle(), move |_| Producer {
            consumer: None,
            next: 0,
            end: n,
            credits: 0,
        });
        let p2 = producer.clone();
        let consumer = Consumer::start_in_arbiter(&b.handle(), move |_| Consumer {
            producer: p2,
            seen: 0,
            expected: n,
            sum: 0,
            since: 0,
            done: Some(tx),
        });
        let start = Instant::now();
        producer.do_send(Begin(consumer));
        let sum = rx.await.unwrap_or(0);
        let elapsed = start.elapsed();
        a.stop();
        b.stop();
        (elapsed, sum)
    })
}
