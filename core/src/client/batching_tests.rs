//! The batching producer against the in-process broker of [`super::loopback_tests`], on a
//! small single-threaded executor with virtual time: tasks run until none can, then the clock
//! jumps to the next timer. Replies come back `reply_delay_ms` after the broker handled the
//! request, so several requests can be in flight; faults are values in the shared `World`.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;

use super::accumulator::Delivery;
use super::batching::{BatchingProducer, SendHandle};
use super::loopback_tests::World;
use super::partitioner::key_partition;
use super::producer::{ProducerConfig, SendError};
use super::{ClientConfig, Cluster};
use crate::disk::mem::MemDisk;
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::record::{records, validate_record_set, NewRecord};
use crate::runtime::{Connection, Listener, NetError, Runtime};

type Task = Pin<Box<dyn Future<Output = ()>>>;

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Exec {
    world: World,
    /// Replies reach the client this long after the broker handled the request.
    reply_delay_ms: u64,
    /// While true, Produce requests get no reply at all (the broker is stuck).
    hold_produce: bool,
    /// The most replies one connection waited for at once (requests in flight).
    max_in_flight: usize,
    spawned: Vec<Task>,
    timers: BTreeMap<(u64, u64), Waker>,
    next_timer: u64,
    /// Draws of `random_u64` so far: the draws are 4, 5, 6, ...
    draws: u64,
    /// Tasks spawned and not yet finished.
    live: usize,
}

#[derive(Clone)]
struct Timed(Rc<RefCell<Exec>>);

struct NoListener;

impl Listener for NoListener {
    type Conn = Conn;
    async fn accept(&mut self) -> Result<Conn, NetError> {
        Err(NetError::Io("no listener".into()))
    }
}

struct Conn {
    rt: Timed,
    /// (time the reply arrives, the reply; `None`: never)
    replies: VecDeque<(u64, Option<Result<Bytes, NetError>>)>,
}

impl Connection for Conn {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        let mut e = self.rt.0.borrow_mut();
        let is_produce = frame.get(..2) == Some(&[0, 0]);
        let reply = e.world.answer(&frame);
        let at = e.world.now_ms + e.reply_delay_ms;
        let held = is_produce && e.hold_produce;
        self.replies.push_back((at, (!held).then_some(reply)));
        e.max_in_flight = e.max_in_flight.max(self.replies.len());
        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        let Some(&(at, _)) = self.replies.front() else {
            return Ok(None);
        };
        self.rt.sleep_until(at).await;
        match self.replies.front() {
            Some((_, Some(_))) => {
                let (_, reply) = self.replies.pop_front().expect("peeked");
                reply.expect("checked").map(Some)
            }
            // Held: never answered (the caller's timeout ends the wait).
            _ => std::future::pending().await,
        }
    }

    fn peer(&self) -> String {
        "loopback".into()
    }
}

impl Timed {
    fn new(partitions: i32) -> Timed {
        Timed(Rc::new(RefCell::new(Exec {
            world: World::new(partitions),
            reply_delay_ms: 2,
            hold_produce: false,
            max_in_flight: 0,
            spawned: Vec::new(),
            timers: BTreeMap::new(),
            next_timer: 0,
            draws: 0,
            live: 0,
        })))
    }

    fn now(&self) -> u64 {
        self.0.borrow().world.now_ms
    }

    fn sleep_until(&self, at: u64) -> impl Future<Output = ()> {
        let rt = self.clone();
        let mut registered = false;
        std::future::poll_fn(move |cx| {
            let mut e = rt.0.borrow_mut();
            if e.world.now_ms >= at {
                return Poll::Ready(());
            }
            if !registered {
                registered = true;
                let n = e.next_timer;
                e.next_timer += 1;
                e.timers.insert((at, n), cx.waker().clone());
            }
            Poll::Pending
        })
    }

    /// Runs `main` and every spawned task until `main` ends; panics past `limit_ms` of virtual
    /// time or when nothing can run and no timer is left.
    fn run<T>(&self, main: impl Future<Output = T>, limit_ms: u64) -> T {
        let mut main = std::pin::pin!(main);
        let main_flag = Arc::new(Flag(AtomicBool::new(true)));
        let mut tasks: Vec<(Task, Arc<Flag>)> = Vec::new();
        // Bounded by the virtual time limit and a step count.
        for _ in 0..10_000_000u64 {
            let mut ran = false;
            if main_flag.0.swap(false, Ordering::SeqCst) {
                ran = true;
                let waker = Waker::from(main_flag.clone());
                if let Poll::Ready(v) = main.as_mut().poll(&mut Context::from_waker(&waker)) {
                    return v;
                }
            }
            let spawned: Vec<Task> = std::mem::take(&mut self.0.borrow_mut().spawned);
            tasks.extend(spawned.into_iter().map(|t| (t, Arc::new(Flag(AtomicBool::new(true))))));
            let mut i = 0;
            while i < tasks.len() {
                if tasks[i].1 .0.swap(false, Ordering::SeqCst) {
                    ran = true;
                    let waker = Waker::from(tasks[i].1.clone());
                    if tasks[i].0.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                        drop(tasks.swap_remove(i));
                        self.0.borrow_mut().live -= 1;
                        continue;
                    }
                }
                i += 1;
            }
            if ran || !self.0.borrow().spawned.is_empty() {
                continue;
            }
            let next = self.0.borrow_mut().timers.pop_first();
            let Some(((at, _), waker)) = next else {
                panic!("nothing can run and no timer is set: a deadlock");
            };
            {
                let mut e = self.0.borrow_mut();
                e.world.now_ms = e.world.now_ms.max(at);
                assert!(e.world.now_ms <= limit_ms, "ran past {limit_ms} ms of virtual time");
            }
            waker.wake();
        }
        panic!("too many steps");
    }
}

impl Runtime for Timed {
    type Disk = MemDisk;
    type Conn = Conn;
    type Listener = NoListener;

    fn now_ms(&self) -> i64 {
        i64::try_from(self.now()).expect("small")
    }
    fn monotonic_ms(&self) -> u64 {
        self.now()
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        self.sleep_until(self.now() + u64::try_from(duration.as_millis()).expect("short"))
    }
    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        let mut e = self.0.borrow_mut();
        e.live += 1;
        e.spawned.push(Box::pin(task));
    }
    fn connect(&self, _addr: &str) -> impl Future<Output = Result<Conn, NetError>> {
        std::future::ready(Ok(Conn {
            rt: self.clone(),
            replies: VecDeque::new(),
        }))
    }
    fn listen(&self, _addr: &str) -> impl Future<Output = Result<NoListener, NetError>> {
        std::future::ready(Ok(NoListener))
    }
    fn with_disk<T>(&self, f: impl FnOnce(&mut MemDisk) -> T) -> T {
        f(&mut self.0.borrow_mut().world.disk)
    }
    fn random_u64(&self) -> u64 {
        let mut e = self.0.borrow_mut();
        e.draws += 1;
        3 + e.draws
    }
}

fn producer(rt: &Timed, config: ProducerConfig) -> BatchingProducer<Timed> {
    let cluster = Cluster::new(
        rt.clone(),
        vec!["loopback:9092".into()],
        ClientConfig {
            request_timeout_ms: 1_000,
            ..ClientConfig::default()
        },
    );
    BatchingProducer::start(cluster, config)
}

fn idempotent(linger_ms: u64, batch_bytes_max: usize) -> ProducerConfig {
    ProducerConfig {
        enable_idempotence: true,
        linger_ms,
        batch_bytes_max,
        ..ProducerConfig::default()
    }
}

fn rec(value: &str) -> NewRecord {
    NewRecord {
        timestamp: 1,
        key: None,
        value: Some(value.as_bytes().to_vec()),
    }
}

/// The values of partition `p`, in log order.
fn log(rt: &Timed, p: i32) -> Vec<String> {
    let e = rt.0.borrow();
    let (start, _, end) = e.world.broker.offsets("t", p).expect("partition");
    let mut out = Vec::new();
    let mut at = start;
    // Bounded: each round moves past at least one batch.
    for _ in 0..10_000 {
        if at >= end {
            return out;
        }
        let slice = e
            .world
            .broker
            .fetch(&e.world.disk, "t", p, -1, at, 1 << 20)
            .expect("fetch")
            .slice;
        let mut bytes = vec![0; usize::try_from(slice.len).expect("small")];
        e.world
            .disk
            .read_at(&slice.path, slice.position, &mut bytes)
            .expect("read");
        let headers = validate_record_set(&bytes, 1 << 20).expect("valid batches");
        let mut pos = 0;
        for h in headers {
            let batch = &bytes[pos..pos + h.total_bytes()];
            pos += h.total_bytes();
            for r in records(batch).expect("uncompressed") {
                if r.offset >= at {
                    out.push(String::from_utf8(r.value.expect("a value").to_vec()).expect("utf-8"));
                    at = r.offset.plus(1);
                }
            }
        }
    }
    panic!("the log did not end");
}

#[test]
fn linger_holds_a_batch_for_linger_ms_then_sends_it() {
    let rt = Timed::new(1);
    let p = producer(&rt, idempotent(50, 16_384));
    let results = rt.run(
        async {
            let a = p.send("t", Some(0), rec("a")).await;
            let b = p.send("t", Some(0), rec("b")).await;
            (a.await, b.await)
        },
        10_000,
    );
    assert_eq!(results, (Ok(Some(0)), Ok(Some(1))));
    let produce = rt.0.borrow().world.produce_log.clone();
    println!("produce requests (ms, partitions, bytes): {produce:?}");
    assert_eq!(produce.len(), 1, "both records in one request");
    assert_eq!(produce[0].0, 50, "sent when linger.ms ended, not before");
}

/// A keyless record waits in send() for its topic's partition count; its batch's linger.ms
/// counts from when it entered the buffer, not from when send() was called.
#[test]
fn a_record_that_waited_for_metadata_lingers_from_when_it_was_buffered() {
    let rt = Timed::new(1);
    rt.0.borrow_mut().reply_delay_ms = 40;
    let config = ProducerConfig {
        enable_idempotence: false,
        linger_ms: 50,
        ..ProducerConfig::default()
    };
    let p = producer(&rt, config);
    let (buffered_at, result) = rt.run(
        async {
            let handle = p.send("t", None, rec("a")).await;
            let buffered_at = rt.now();
            (buffered_at, handle.await)
        },
        10_000,
    );
    assert_eq!(result, Ok(Some(0)));
    let produce = rt.0.borrow().world.produce_log.clone();
    println!("buffered at {buffered_at} ms; produce requests (ms, partitions, bytes): {produce:?}");
    assert!(buffered_at >= 40, "send() waited for the metadata answer");
    assert_eq!(produce.len(), 1);
    assert_eq!(produce[0].0, buffered_at + 50, "linger.ms counted from the append");
}

#[test]
fn batch_size_closes_a_batch_before_linger_ends() {
    let rt = Timed::new(1);
    // 10 records of 100 bytes take 10 x 136 + 61 bytes at most: batch.size 500 holds 3.
    let p = producer(&rt, idempotent(10_000, 500));
    let outcomes = rt.run(
        async {
            let mut handles = Vec::new();
            for i in 0..10 {
                handles.push(p.send("t", Some(0), rec(&format!("{i:0100}"))).await);
            }
            // Metadata and a producer id first (2 ms each), then the full batches.
            rt.sleep(Duration::from_millis(10)).await;
            let first_sent = rt.0.borrow().world.produce_log.first().map(|r| r.0);
            p.flush().await;
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await);
            }
            (first_sent, out)
        },
        60_000,
    );
    let (first_sent, outcomes) = outcomes;
    let produce = rt.0.borrow().world.produce_log.clone();
    println!("produce requests (ms, partitions, bytes): {produce:?}");
    assert!(first_sent.is_some(), "a full batch went out before the flush");
    assert!(produce.iter().all(|r| r.0 < 10_000), "nobody waited for linger.ms");
    assert!(produce.iter().all(|r| r.2 <= 500), "no batch above batch.size");
    assert!(produce.len() >= 4, "10 records, 3 a batch: {produce:?}");
    let offsets: Vec<Delivery> = (0..10).map(|i| Ok(Some(i))).collect();
    assert_eq!(outcomes, offsets);
}

#[test]
fn a_full_buffer_blocks_send_then_fails_it_after_max_block_ms() {
    let rt = Timed::new(1);
    rt.0.borrow_mut().hold_produce = true;
    let config = ProducerConfig {
        linger_ms: 0,
        buffer_bytes_max: 1_000,
        block_ms_max: 300,
        ..idempotent(0, 16_384)
    };
    let p = producer(&rt, config);
    let (fitted, blocked_ms, blocked) = rt.run(
        async {
            let mut fitted = Vec::new();
            // 7 records of 100 bytes (136 counted each) fill 952 of 1,000 bytes.
            for i in 0..7 {
                fitted.push(p.send("t", Some(0), rec(&format!("{i:0100}"))).await);
            }
            let started = rt.now();
            let blocked = p.send("t", Some(0), rec(&format!("{:0100}", 7))).await;
            let blocked_ms = rt.now() - started;
            (fitted, blocked_ms, blocked.await)
        },
        60_000,
    );
    println!("blocked for {blocked_ms} ms: {blocked:?}");
    assert_eq!(blocked_ms, 300, "send() waited max.block.ms for room");
    assert!(
        matches!(&blocked, Err(SendError::Failed(why)) if why.contains("buffer.memory")),
        "{blocked:?}"
    );
    assert!(
        fitted.iter().all(|h| h.result().is_none()),
        "the buffered ones are still pending"
    );
}

#[test]
fn an_oversized_record_fails_alone() {
    let rt = Timed::new(1);
    let config = ProducerConfig {
        request_bytes_max: 2_000,
        ..idempotent(5, 16_384)
    };
    let p = producer(&rt, config);
    let big = "x".repeat(5_000);
    let outcomes = rt.run(
        async {
            let a = p.send("t", Some(0), rec("a")).await;
            let big = p.send("t", Some(0), rec(&big)).await;
            let b = p.send("t", Some(0), rec("b")).await;
            (a.await, big.await, b.await)
        },
        10_000,
    );
    println!("{outcomes:?}");
    assert_eq!(outcomes.0, Ok(Some(0)));
    assert!(
        matches!(&outcomes.1, Err(SendError::Failed(why)) if why.contains("RECORD_TOO_LARGE")),
        "{:?}",
        outcomes.1
    );
    assert_eq!(outcomes.2, Ok(Some(1)), "the record after it went on");
}

/// Kafka's `send(record, callback)`: each callback runs once, with the partition and the outcome,
/// when the producer learns the outcome: at once for a send that fails before it is buffered,
/// else when its batch is answered (before `flush` returns), with no task awaiting anything.
#[test]
fn send_callbacks_run_once_each_with_partition_and_outcome() {
    type Seen = Rc<RefCell<Vec<(&'static str, Option<i32>, Delivery, u64)>>>;
    let rt = Timed::new(3);
    let config = ProducerConfig {
        request_bytes_max: 2_000,
        ..idempotent(5, 16_384)
    };
    let p = producer(&rt, config);
    let seen: Seen = Rc::default();
    let callback = |label: &'static str| {
        let (seen, rt) = (seen.clone(), rt.clone());
        move |partition: Option<i32>, delivery: Delivery| seen.borrow_mut().push((label, partition, delivery, rt.now()))
    };
    let big = "x".repeat(5_000);
    let (returned, seen_after_big, sent_at, flushed_at) = rt.run(
        async {
            let sent_at = rt.now();
            let a = p.send_with_callback("t", Some(1), rec("a"), callback("a")).await;
            let big = p.send_with_callback("t", Some(1), rec(&big), callback("big")).await;
            let seen_after_big = seen.borrow().len();
            let c = p.send_with_callback("t", None, rec("c"), callback("c")).await;
            p.flush().await;
            ([a, big, c], seen_after_big, sent_at, rt.now())
        },
        10_000,
    );
    let seen = seen.borrow().clone();
    println!("returned partitions {returned:?}; callbacks (label, partition, outcome, ms): {seen:?}");
    assert_eq!(
        seen_after_big, 1,
        "the oversized send's callback ran before send returned"
    );
    assert_eq!(seen.len(), 3, "one call per send");
    let by_label = |label| seen.iter().find(|s| s.0 == label).expect("called").clone();
    let big_seen = by_label("big");
    assert!(
        matches!(&big_seen.2, Err(SendError::Failed(why)) if why.contains("RECORD_TOO_LARGE")),
        "{big_seen:?}"
    );
    assert_eq!(big_seen.3, sent_at, "at once");
    let a = by_label("a");
    assert_eq!((a.1, &a.2), (Some(1), &Ok(Some(0))), "acked at offset 0 of partition 1");
    assert!(
        a.3 >= sent_at + 5 && a.3 <= flushed_at,
        "after linger.ms, by the flush: {a:?}"
    );
    let c = by_label("c");
    assert_eq!(c.1, returned[2], "the partitioner's choice, as send returned it");
    assert!(matches!(c.2, Ok(Some(_))), "{c:?}");
    assert_eq!(returned[0], Some(1));
}

/// Sends `n` records to partition 0 in batches of ~3 with up to 5 in flight, with `fault`
/// applied once two requests are out; returns the outcomes and the log.
fn several_in_flight(
    enable_idempotence: bool,
    in_flight_max: usize,
    fault: impl FnOnce(&mut World),
) -> (Vec<Delivery>, Vec<String>, usize) {
    let rt = Timed::new(1);
    rt.0.borrow_mut().reply_delay_ms = 20;
    let config = ProducerConfig {
        enable_idempotence,
        linger_ms: 0,
        batch_bytes_max: 500,
        in_flight_max,
        ..ProducerConfig::default()
    };
    let p = producer(&rt, config);
    let mut fault = Some(fault);
    let outcomes = rt.run(
        async {
            let mut handles: Vec<SendHandle> = Vec::new();
            for i in 0..30 {
                handles.push(p.send("t", Some(0), rec(&format!("{i:0100}"))).await);
                if i % 3 == 2 {
                    // Requests pile up behind the 20 ms replies.
                    rt.sleep(Duration::from_millis(5)).await;
                }
                if rt.0.borrow().world.produce_requests >= 2 {
                    if let Some(f) = fault.take() {
                        f(&mut rt.0.borrow_mut().world);
                    }
                }
            }
            p.flush().await;
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await);
            }
            out
        },
        120_000,
    );
    let values = log(&rt, 0);
    let e = rt.0.borrow();
    println!(
        "{} Produce requests {:?}, at most {} in flight; {} records in the log",
        e.world.produce_requests,
        e.world.produce_log,
        e.max_in_flight,
        values.len()
    );
    (outcomes, values, e.max_in_flight)
}

fn expected_values() -> Vec<String> {
    (0..30).map(|i| format!("{i:0100}")).collect()
}

#[test]
fn several_in_flight_with_refusals_keep_partition_order() {
    // NOT_LEADER for the next two requests: the batch refused and the ones behind it are
    // retried in order.
    let (outcomes, values, in_flight) = several_in_flight(true, 5, |w| {
        w.produce_errors
            .extend([ErrorCode::NotLeaderOrFollower, ErrorCode::NotLeaderOrFollower]);
    });
    println!("max requests in flight ~{in_flight}; outcomes {outcomes:?}");
    assert!(in_flight >= 2, "several requests were in flight");
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    let offsets: Vec<i64> = outcomes
        .iter()
        .map(|o| o.clone().ok().flatten().expect("acked"))
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "acked in send order: {offsets:?}"
    );
    assert_eq!(values, expected_values(), "the log holds each record once, in order");
}

#[test]
fn one_in_flight_keeps_order_across_refusals_without_idempotence() {
    // No sequence numbers to save it: the order is the accumulator's alone (a retry goes back
    // in front of its partition's later batches).
    let (outcomes, values, in_flight) = several_in_flight(false, 1, |w| {
        w.produce_errors
            .extend([ErrorCode::NotLeaderOrFollower, ErrorCode::NotLeaderOrFollower]);
    });
    assert_eq!(in_flight, 1);
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    assert_eq!(values, expected_values(), "the log holds each record once, in order");
}

#[test]
fn several_in_flight_with_a_lost_connection_duplicate_nothing_with_idempotence() {
    let (outcomes, values, _) = several_in_flight(true, 5, |w| w.lose_produce_replies = 1);
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    let offsets: Vec<i64> = outcomes
        .iter()
        .map(|o| o.clone().ok().flatten().expect("acked"))
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "acked in send order: {offsets:?}"
    );
    assert_eq!(values, expected_values(), "written once each, in order");
}

#[test]
fn without_idempotence_a_lost_connection_duplicates() {
    // The negative control of the test above: the fault bites when nothing dedupes.
    let (outcomes, values, _) = several_in_flight(false, 5, |w| w.lose_produce_replies = 1);
    println!("{} records in the log for 30 sends", values.len());
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    assert!(values.len() > 30, "the retried batches were written twice");
}

#[test]
fn keys_go_to_kafkas_murmur2_partition_and_null_keys_stick() {
    let rt = Timed::new(4);
    let p = producer(&rt, idempotent(5, 16_384));
    let keys = ["21", "foobar", "abc", "a-little-bit-long-string", "k5", "k6"];
    let outcomes = rt.run(
        async {
            // The first keyless send waits for the topic's partition count.
            let mut handles = Vec::new();
            for k in keys {
                let r = NewRecord {
                    timestamp: 1,
                    key: Some(k.as_bytes().to_vec()),
                    value: Some(k.as_bytes().to_vec()),
                };
                handles.push(p.send("t", None, r).await);
            }
            for _ in 0..5 {
                handles.push(p.send("t", None, rec("keyless")).await);
            }
            let mut out = Vec::new();
            for h in handles {
                let partition = h.partition();
                out.push((partition, h.await));
            }
            out
        },
        10_000,
    );
    assert!(outcomes.iter().all(|(_, o)| o.is_ok()), "{outcomes:?}");
    let mut compared = 0;
    for (k, (told, _)) in keys.iter().zip(&outcomes) {
        let want = key_partition(k.as_bytes(), 4).expect("4 partitions");
        assert!(log(&rt, want).contains(&k.to_string()), "{k} is in partition {want}");
        // The handle tells the application where the record went (RecordMetadata.partition()).
        assert_eq!(*told, Some(want), "{k}'s handle names its partition");
        compared += 1;
    }
    let keyless: Vec<usize> = (0..4)
        .map(|p| log(&rt, p).iter().filter(|v| *v == "keyless").count())
        .collect();
    println!("compared {compared} keys; keyless per partition {keyless:?}");
    assert_eq!(
        keyless.iter().filter(|&&n| n > 0).count(),
        1,
        "null keys stick to one partition"
    );
    let sticky = keyless.iter().position(|&n| n > 0).and_then(|p| i32::try_from(p).ok());
    for (told, _) in &outcomes[keys.len()..] {
        assert_eq!(*told, sticky, "a keyless record's handle names the sticky partition");
    }
}

/// KIP-794: keyless records stay on one partition until `batch.size` bytes went there with its
/// batch full, or twice `batch.size` when batches leave by `linger.ms` before they fill; then
/// they move to a partition drawn at random. Before, a partition only moved on when a batch
/// filled, so a producer whose batches never fill wrote every keyless record to one partition.
#[test]
fn keyless_records_move_on_after_batch_size_bytes() {
    let rt = Timed::new(4);
    // Records of 136 bytes (a 100-byte value), batch.size 300: twice batch.size is five records.
    let p = producer(&rt, idempotent(5, 300));
    let value = "v".repeat(98);
    let told = rt.run(
        async {
            let mut told = Vec::new();
            // Each send waits for the last one's answer: every batch leaves by linger.ms, open.
            for i in 0..12 {
                let h = p.send("t", None, rec(&format!("{i:02}{value}"))).await;
                let partition = h.partition();
                assert!(h.await.is_ok());
                told.push(partition.expect("chosen"));
            }
            told
        },
        10_000,
    );
    let per_partition: Vec<usize> = (0..4).map(|q| log(&rt, q).len()).collect();
    println!("partitions told {told:?}; records per partition {per_partition:?}");
    assert_eq!(per_partition.iter().sum::<usize>(), 12, "every record written once");
    // Draws 4, 5, 6 over 4 partitions: 0, then 1 after five records, then 2 after five more.
    assert_eq!(told, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2], "moved after each 600 bytes");
    for (i, q) in told.iter().enumerate() {
        let mine = format!("{i:02}{value}");
        assert!(log(&rt, *q).contains(&mine), "record {i} is where its handle says");
    }
}

/// close() ends every task of the producer: the sender and each connection, also one with
/// nothing to send (it waits for a request of its own, not for every change of the producer's
/// state, so the close itself must wake it).
#[test]
fn close_ends_every_task_of_the_producer_idle_connections_too() {
    let rt = Timed::new(4);
    let p = producer(&rt, idempotent(5, 16_384));
    let (before, after) = rt.run(
        async {
            for q in 0..4 {
                assert!(p.send("t", Some(q), rec("x")).await.await.is_ok());
            }
            // Every record answered: the connection is idle.
            let before = rt.0.borrow().live;
            p.close().await;
            rt.sleep(Duration::from_millis(50)).await;
            (before, rt.0.borrow().live)
        },
        10_000,
    );
    println!("tasks of the producer before close {before}, 50 ms after {after}");
    assert!(before >= 2, "a sender and a connection ran: {before}");
    assert_eq!(after, 0, "every task ended");
}
