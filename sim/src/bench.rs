//! Benchmarks that run in virtual time, so a figure is a pure function of its settings and seed:
//! [`producer`], the batching producer against one simulated broker.
//!
//! What virtual time measures: network latency (madsim's 1-10 ms per message) and the protocol's
//! round trips, not CPU or bandwidth (a bigger request costs no more simulated time than a small
//! one). Records per simulated second therefore show how batching and requests in flight hide
//! latency; bytes per request show how full the requests are.

use std::time::Duration;

use gregor_core::client::batching::BatchingProducer;
use gregor_core::client::producer::ProducerConfig;
use gregor_core::record::NewRecord;
use gregor_core::runtime::Runtime;

use crate::run::{broker_main, client};
use crate::runtime::SimRuntime;
use crate::world::{run_seed_with, WorldConfig};

#[derive(Clone, Debug)]
pub struct ProducerBench {
    pub seed: u64,
    pub records: u64,
    pub record_bytes: usize,
    pub partitions: i32,
    pub linger_ms: u64,
    pub batch_bytes_max: usize,
    /// Records offered per simulated ms; 0: as fast as `send()` takes them (buffer.memory bounds).
    pub rate_per_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProducerBenchResult {
    pub acked: u64,
    pub failed: u64,
    /// Simulated ms from the first send to the last outcome.
    pub elapsed_ms: u64,
    pub requests: u64,
    pub request_batch_bytes: u64,
}

impl ProducerBenchResult {
    pub fn records_per_s(&self) -> f64 {
        self.acked as f64 * 1_000.0 / self.elapsed_ms.max(1) as f64
    }
    pub fn bytes_per_request(&self) -> f64 {
        self.request_batch_bytes as f64 / self.requests.max(1) as f64
    }
}

/// Runs one broker and one idempotent acks=all batching producer sending `records` records.
pub fn producer(b: &ProducerBench) -> ProducerBenchResult {
    let b = b.clone();
    let config = WorldConfig {
        time_limit: Duration::from_secs(3_600),
        ..WorldConfig::default()
    };
    run_seed_with(b.seed, config, move |world| async move {
        world.add_node("broker-0", |rt| broker_main(rt, 0));
        let admin = world.add_node("bench", |_rt| std::future::pending::<()>());
        world
            .spawn_on(admin, move |rt| run_producer(rt, b))
            .await
            .expect("the bench node is never killed")
    })
}

async fn run_producer(rt: SimRuntime, b: ProducerBench) -> ProducerBenchResult {
    let mut admin = client(&rt, "bench-admin".into(), 1);
    // Bounded: the broker starts within a few simulated seconds.
    for _ in 0..600 {
        if admin.create_topic("bench", b.partitions, 1, &[]).await.is_ok() {
            break;
        }
        rt.sleep(Duration::from_millis(100)).await;
    }
    let config = ProducerConfig {
        enable_idempotence: true,
        acks: -1,
        linger_ms: b.linger_ms,
        batch_bytes_max: b.batch_bytes_max,
        ..ProducerConfig::default()
    };
    let producer = BatchingProducer::start(client(&rt, "bench-producer".into(), 1), config);
    // Metadata and a producer id before the clock starts.
    let warm = producer.send("bench", Some(0), record(&rt, b.record_bytes)).await.await;
    assert!(warm.is_ok(), "the warm-up record was not acknowledged: {warm:?}");
    let before = producer.stats();
    let started = rt.monotonic_ms();
    let mut handles = Vec::new();
    let partitions = u64::try_from(b.partitions.max(1)).expect("positive");
    for i in 0..b.records {
        let partition = i32::try_from(i % partitions).expect("small");
        handles.push(
            producer
                .send("bench", Some(partition), record(&rt, b.record_bytes))
                .await,
        );
        if b.rate_per_ms > 0 && (i + 1) % b.rate_per_ms == 0 {
            rt.sleep(Duration::from_millis(1)).await;
        } else if b.rate_per_ms == 0 {
            yield_now().await;
        }
    }
    producer.flush().await;
    let elapsed_ms = rt.monotonic_ms() - started;
    let mut result = ProducerBenchResult {
        elapsed_ms,
        ..ProducerBenchResult::default()
    };
    for h in handles {
        match h.result() {
            Some(Ok(_)) => result.acked += 1,
            _ => result.failed += 1,
        }
    }
    let after = producer.stats();
    result.requests = after.requests - before.requests;
    result.request_batch_bytes = after.request_batch_bytes - before.request_batch_bytes;
    result
}

fn record(rt: &SimRuntime, bytes: usize) -> NewRecord {
    NewRecord {
        timestamp: rt.now_ms(),
        key: None,
        value: Some(vec![b'x'; bytes]),
    }
}

/// Lets the other tasks of the node run once.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}
