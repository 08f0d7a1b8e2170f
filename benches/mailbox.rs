//! Isolates the cost of one hop between subtasks: raw actix with one message
//! per record versus floe's batched, credit-controlled channel (a
//! `generator → sink` job with chaining off), at two batch sizes.
//!
//! Run: `cargo bench --bench mailbox`

use actix::prelude::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floe::StreamExecutionEnvironment;
use floe::operators::sink::SinkFunction;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const RECORDS: u64 = 1_000_000;

#[derive(Clone)]
struct Count(Arc<AtomicU64>);

impl SinkFunction<u64> for Count {
    async fn write(&mut self, batch: Vec<floe::Record<u64>>) -> floe::Result<()> {
        let odd = batch.iter().filter(|r| r.value & 1 == 1).count() as u64;
        self.0.fetch_add(odd, Ordering::Relaxed);
        Ok(())
    }
}

fn floe_channel(batch_size: usize) -> u64 {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1)
        .set_arbiters(2)
        .set_batch_size(batch_size);
    let mut c = env.config();
    c.runtime.spread_vertices = true;
    env.set_config(c);
    let n = Arc::new(AtomicU64::new(0));
    env.from_generator(RECORDS, |i| i)
        .disable_chaining()
        .sink("Count", Count(n.clone()));
    env.execute().expect("bench job runs");
    n.load(Ordering::Relaxed)
}

struct Item(u64);
impl Message for Item {
    type Result = ();
}

struct Sink {
    seen: u64,
    done: Option<futures::channel::oneshot::Sender<u64>>,
}
impl Actor for Sink {
    type Context = Context<Self>;
}
impl Handler<Item> for Sink {
    type Result = ();
    fn handle(&mut self, m: Item, _: &mut Context<Self>) {
        self.seen += m.0 & 1;
        if m.0 == RECORDS - 1
            && let Some(tx) = self.done.take()
        {
            let _ = tx.send(self.seen);
        }
    }
}

/// Unbounded `do_send` per record from this thread to an actor on another arbiter.
fn actix_unbatched() -> u64 {
    System::new().block_on(async {
        let arb = Arbiter::new();
        let (tx, rx) = futures::channel::oneshot::channel();
        let sink = Sink::start_in_arbiter(&arb.handle(), move |_| Sink {
            seen: 0,
            done: Some(tx),
        });
        for i in 0..RECORDS {
            sink.do_send(Item(i));
        }
        let r = rx.await.unwrap_or(0);
        arb.stop();
        r
    })
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("mailbox");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS));
    g.bench_function("actix-unbatched", |b| {
        b.iter(|| black_box(actix_unbatched()))
    });
    g.bench_function("floe-channel-batch-1024", |b| {
        b.iter(|| black_box(floe_channel(1024)))
    });
    g.bench_function("floe-channel-batch-64", |b| {
        b.iter(|| black_box(floe_channel(64)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
