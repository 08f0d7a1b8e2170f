//! Backpressure share in the status snapshot.
//!
//! generator → map → slow sink, chaining disabled so each is its own subtask.
//! The sink busy-spins (on `Instant`, never sleeping) for every batch, so it is
//! the bottleneck: it is never backpressured itself (it has no outputs), while
//! the map, right upstream, spends most of its life unable to take input because
//! its output queue to the sink is full. The snapshot must show exactly that:
//! the map's backpressured share above one half, the sink's near zero, and the
//! records in and out matching the generated count. Each vertex runs on its
//! own arbiter, so the map's thread is free whenever the map could work.

use floe::operators::sink::SinkFunction;
use floe::{Record, StreamExecutionEnvironment};
use std::time::{Duration, Instant};

const RECORDS: u64 = 64 * 400;
const SPIN: Duration = Duration::from_millis(2);

#[derive(Clone)]
struct SlowSink;

impl SinkFunction<u64> for SlowSink {
    async fn write(&mut self, _batch: Vec<Record<u64>>) -> floe::Result<()> {
        let start = Instant::now();
        while start.elapsed() < SPIN {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

#[test]
fn map_upstream_of_a_slow_sink_is_backpressured() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1)
        .set_arbiters(3)
        .set_batch_size(64)
        .set_credits(2)
        .disable_operator_chaining();
    // One thread per vertex: a sink spinning on the map's thread would make
    // the map look idle (it could not run), not backpressured.
    let mut config = env.config();
    config.runtime.spread_vertices = true;
    env.set_config(config);
    env.from_generator(RECORDS, |i| i)
        .map(|x: u64| x + 1)
        .name("Map")
        .sink("Slow Sink", SlowSink);
    let handle = env.execute_async().expect("job starts");
    futures::executor::block_on(handle.wait()).expect("job finishes");
    let s = handle.status_snapshot();
    assert_eq!(s.state, "Finished");
    let map = s.operator("Map").expect("map in the snapshot");
    let sink = s.operator("Slow Sink").expect("sink in the snapshot");
    assert_eq!((map.records_in, map.records_out), (RECORDS, RECORDS));
    assert_eq!(sink.records_in, RECORDS);
    assert!(
        map.backpressured_share > 0.5,
        "map backpressured share {} (sink {})",
        map.backpressured_share,
        sink.backpressured_share
    );
    assert!(
        sink.backpressured_share < 0.05,
        "sink backpressured share {}",
        sink.backpressured_share
    );
    assert!(sink.idle_share < 0.5, "sink idle share {}", sink.idle_share);
    // Three vertices, each its own subtask, linked by network edges.
    assert_eq!(s.graph.vertices.len(), 3);
    assert!(s.graph.edges.iter().all(|e| !e.chained));
    assert!(s.failures.is_empty());
}
