//! The producer (and the consumer) against a broker in the same thread: requests and responses really encoded and
//! decoded, the node's handlers answering. Faults are values in the [`World`]: replies lost after
//! the broker acted on the request, InitProducerId errors.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use super::conn::ClientError;
use super::consumer::{Consumer, ConsumerConfig};
use super::producer::{Producer, ProducerConfig, SendError};
use super::{ClientConfig, Cluster};
use crate::broker::{Broker, BrokerConfig, TopicId};
use crate::disk::mem::MemDisk;
use crate::error_code::ErrorCode;
use crate::ids::{Offset, ProducerId};
use crate::node::handlers::{self, Advertised};
use crate::protocol::api::init_producer_id::InitProducerIdResponse;
use crate::protocol::api::metadata::MetadataBroker;
use crate::protocol::api::produce::{ProducePartitionResponse, ProduceRequest, ProduceResponse, ProduceTopicResponse};
use crate::protocol::{decode_request_bytes, encode_response, Limits, Request};
use crate::record::{build_batch, NewRecord, ProducerFields};
use crate::runtime::{Connection, Listener, NetError, Runtime};

pub(super) struct World {
    pub(super) broker: Broker,
    pub(super) disk: MemDisk,
    pub(super) now_ms: u64,
    /// Produce replies to lose after the broker handled the request.
    pub(super) lose_produce_replies: u32,
    pub(super) produce_requests: u32,
    /// Codes to answer the next InitProducerId requests with, instead of an id.
    pub(super) init_errors: VecDeque<ErrorCode>,
    /// Codes to answer the next Produce requests with (every partition), writing nothing.
    pub(super) produce_errors: VecDeque<ErrorCode>,
    /// Every Produce request handled: (time, partitions, record batch bytes).
    pub(super) produce_log: Vec<(u64, usize, usize)>,
    /// Every Fetch request handled: the partitions it asked for.
    pub(super) fetch_log: Vec<Vec<i32>>,
    /// Flip one bit in the last byte of each fetched partition's records (inside the last
    /// batch's checksummed bytes), as a frame damaged on its way would.
    pub(super) corrupt_fetched_tail: bool,
    /// Mark the last batch of each fetched partition's records compressed (gzip), its checksum
    /// made again: a batch as a Kafka producer with `compression.type` writes it, whose records
    /// this client cannot read.
    pub(super) compress_fetched_tail: bool,
    /// Partitions whose leader Metadata names as broker 1 at `silent:9092`: the same broker
    /// underneath, reached on a connection of its own that can be held silent.
    pub(super) silent_partitions: Vec<i32>,
    /// While set, `silent:9092` answers nothing and no sleep ends (no timeout fires): a leader
    /// cut off from the client, for as long as the test likes.
    pub(super) hold_silent: bool,
    /// Requests sent to `silent:9092`, answered or not.
    pub(super) silent_sent: u32,
}

impl World {
    pub(super) fn new(partitions: i32) -> World {
        let mut disk = MemDisk::new();
        let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
        broker
            .create_topic(&mut disk, "t", partitions, 1, &[], TopicId::from_random(1, 1), false)
            .expect("create");
        World {
            broker,
            disk,
            now_ms: 0,
            lose_produce_replies: 0,
            produce_requests: 0,
            init_errors: VecDeque::new(),
            produce_errors: VecDeque::new(),
            produce_log: Vec::new(),
            fetch_log: Vec::new(),
            corrupt_fetched_tail: false,
            compress_fetched_tail: false,
            silent_partitions: Vec::new(),
            hold_silent: false,
            silent_sent: 0,
        }
    }

    /// Handles one request frame as the broker would; the reply, or an error if it is lost.
    pub(super) fn answer(&mut self, frame: &Bytes) -> Result<Bytes, NetError> {
        let (header, request) = decode_request_bytes(frame, Limits::default()).expect("the client's frames decode");
        let v = header.api_version;
        let advertised = Advertised {
            host: "loopback".into(),
            port: 9092,
            cluster_id: "c".into(),
        };
        let mut lost = false;
        let body = match &request {
            Request::Metadata(r) => {
                let mut resp = handlers::metadata(&mut self.broker, &mut self.disk, r, &advertised, || {
                    TopicId::from_random(9, 9)
                });
                if !self.silent_partitions.is_empty() {
                    resp.brokers.push(MetadataBroker {
                        node_id: 1,
                        host: "silent".into(),
                        port: 9092,
                        rack: None,
                    });
                    for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                        if self.silent_partitions.contains(&p.partition_index) {
                            p.leader_id = 1;
                        }
                    }
                }
                resp.encode(v)
            }
            Request::Produce(r) => {
                self.produce_requests += 1;
                let partitions = r.topics.iter().map(|t| t.partitions.len()).sum();
                let bytes = r
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
                    .sum();
                self.produce_log.push((self.now_ms, partitions, bytes));
                if self.lose_produce_replies > 0 {
                    self.lose_produce_replies -= 1;
                    lost = true;
                }
                match self.produce_errors.pop_front() {
                    Some(code) => refuse_produce(r, code).encode(v),
                    None => handlers::produce(&mut self.broker, &mut self.disk, r, 0)
                        .expect("acks=-1 is answered")
                        .encode(v),
                }
            }
            Request::InitProducerId(r) => match self.init_errors.pop_front() {
                Some(code) => InitProducerIdResponse {
                    throttle_time_ms: 0,
                    error_code: code.code(),
                    producer_id: -1,
                    producer_epoch: -1,
                }
                .encode(v),
                None => handlers::init_producer_id(&mut self.broker, &mut self.disk, r).encode(v),
            },
            Request::Fetch(r) => {
                let asked = r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.partition));
                self.fetch_log.push(asked.collect());
                let (mut resp, _) = handlers::fetch(&self.broker, &self.disk, r, v);
                if self.corrupt_fetched_tail {
                    for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                        if let Some(records) = &p.records {
                            let mut damaged = records.to_vec();
                            if let Some(last) = damaged.last_mut() {
                                *last ^= 1;
                            }
                            p.records = Some(Bytes::from(damaged));
                        }
                    }
                }
                if self.compress_fetched_tail {
                    for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                        if let Some(records) = &p.records {
                            p.records = Some(Bytes::from(compress_last_batch(records)));
                        }
                    }
                }
                resp.encode(v)
            }
            other => panic!("the client sent {other:?}"),
        };
        if lost {
            Err(NetError::Closed)
        } else {
            Ok(encode_response(&header, &body))
        }
    }
}

/// `records` with its last whole batch marked gzip-compressed and its CRC made to match.
fn compress_last_batch(records: &[u8]) -> Vec<u8> {
    let mut out = records.to_vec();
    let mut at = 0;
    let mut last = None;
    while let Ok(h) = crate::record::BatchHeader::parse(&out[at..]) {
        last = Some((at, h.total_bytes()));
        at += h.total_bytes();
    }
    if let Some((start, len)) = last {
        let batch = &mut out[start..start + len];
        batch[22] |= 1; // attributes (big-endian i16 at 21..23): compression 1, gzip
        let crc = crate::crc::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    out
}

/// A Produce answer with `code` for every partition (nothing written).
fn refuse_produce(r: &ProduceRequest, code: ErrorCode) -> ProduceResponse {
    ProduceResponse {
        topics: r
            .topics
            .iter()
            .map(|t| ProduceTopicResponse {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| ProducePartitionResponse {
                        index: p.index,
                        error_code: code.code(),
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        record_errors: vec![],
                        error_message: None,
                    })
                    .collect(),
            })
            .collect(),
        throttle_time_ms: 0,
    }
}

#[derive(Clone)]
struct Loopback(Rc<RefCell<World>>);

/// Ready once the world no longer holds `silent:9092` silent. The tests poll by hand
/// ([`block_on`] polls once), so no waker is kept.
async fn until_spoken(world: &RefCell<World>) {
    std::future::poll_fn(|_| {
        if world.borrow().hold_silent {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

struct Conn {
    world: Rc<RefCell<World>>,
    replies: VecDeque<Result<Bytes, NetError>>,
    /// To `silent:9092`: requests are answered when received, and not while the world holds
    /// that leader silent.
    silent: bool,
    unanswered: VecDeque<Bytes>,
}

struct NoListener;

impl Listener for NoListener {
    type Conn = Conn;
    async fn accept(&mut self) -> Result<Conn, NetError> {
        Err(NetError::Io("the loopback has no listener".into()))
    }
}

impl Connection for Conn {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        if self.silent {
            self.world.borrow_mut().silent_sent += 1;
            self.unanswered.push_back(frame);
        } else {
            let reply = self.world.borrow_mut().answer(&frame);
            self.replies.push_back(reply);
        }
        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        if self.silent {
            until_spoken(&self.world).await;
            if let Some(frame) = self.unanswered.pop_front() {
                let reply = self.world.borrow_mut().answer(&frame);
                self.replies.push_back(reply);
            }
        }
        self.replies.pop_front().map_or(Ok(None), |r| r.map(Some))
    }

    fn peer(&self) -> String {
        "loopback".into()
    }
}

impl Runtime for Loopback {
    type Disk = MemDisk;
    type Conn = Conn;
    type Listener = NoListener;

    fn now_ms(&self) -> i64 {
        i64::try_from(self.0.borrow().now_ms).expect("test clock is small")
    }
    fn monotonic_ms(&self) -> u64 {
        self.0.borrow().now_ms
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        // Time passes when the sleep is awaited, not when it is created (with_timeout makes
        // one per call and never awaits it here).
        let world = self.0.clone();
        async move {
            until_spoken(&world).await;
            world.borrow_mut().now_ms += u64::try_from(duration.as_millis()).expect("short sleeps");
        }
    }
    fn spawn(&self, _task: impl Future<Output = ()> + 'static) {
        panic!("the producer spawns nothing");
    }
    fn connect(&self, addr: &str) -> impl Future<Output = Result<Conn, NetError>> {
        std::future::ready(Ok(Conn {
            world: self.0.clone(),
            replies: VecDeque::new(),
            silent: addr == "silent:9092",
            unanswered: VecDeque::new(),
        }))
    }
    fn listen(&self, _addr: &str) -> impl Future<Output = Result<NoListener, NetError>> {
        std::future::ready(Ok(NoListener))
    }
    fn with_disk<T>(&self, f: impl FnOnce(&mut MemDisk) -> T) -> T {
        f(&mut self.0.borrow_mut().disk)
    }
    fn random_u64(&self) -> u64 {
        4
    }
}

/// Runs a future that never waits (everything in the loopback is ready at once).
fn block_on<T>(f: impl Future<Output = T>) -> T {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a loopback future waited"),
    }
}

fn setup(enable_idempotence: bool) -> (Loopback, Producer<Loopback>) {
    let rt = Loopback(Rc::new(RefCell::new(World::new(1))));
    let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], ClientConfig::default());
    let config = ProducerConfig {
        enable_idempotence,
        ..ProducerConfig::default()
    };
    (rt, Producer::new(cluster, config))
}

fn recs(values: &[&str]) -> Vec<NewRecord> {
    values
        .iter()
        .map(|v| NewRecord {
            timestamp: 1,
            key: None,
            value: Some(v.as_bytes().to_vec()),
        })
        .collect()
}

/// A consumer of topic `t` on the loopback broker, with these partitions and positions.
fn consumer_of(rt: &Loopback, assignments: &[(i32, Option<i64>)]) -> Consumer<Loopback> {
    let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], ClientConfig::default());
    let mut c = Consumer::new(cluster, ConsumerConfig::default(), "t");
    for &(partition, position) in assignments {
        c.assign(partition, position);
    }
    c
}

/// The offsets of a poll's records, in order.
fn offsets(polled: &super::consumer::Polled) -> Vec<i64> {
    polled.records.iter().map(|r| r.offset).collect()
}

fn log_end(rt: &Loopback) -> Offset {
    rt.0.borrow().broker.offsets("t", 0).expect("partition").2
}

#[test]
fn a_retry_after_a_lost_reply_is_written_once_with_idempotence() {
    let (rt, mut p) = setup(true);
    rt.0.borrow_mut().lose_produce_replies = 1;
    assert_eq!(block_on(p.send("t", 0, &recs(&["a", "b"]))), Ok(Some(0)));
    assert_eq!(rt.0.borrow().produce_requests, 2, "the reply was lost, so it retried");
    assert_eq!(log_end(&rt), Offset(2), "the retry was a duplicate, not a second copy");
    assert_eq!(block_on(p.send("t", 0, &recs(&["c"]))), Ok(Some(2)));
    assert_eq!(log_end(&rt), Offset(3));
}

#[test]
fn without_idempotence_the_same_lost_reply_duplicates() {
    // The negative control of the test above: the fault does bite.
    let (rt, mut p) = setup(false);
    rt.0.borrow_mut().lose_produce_replies = 1;
    assert_eq!(block_on(p.send("t", 0, &recs(&["a", "b"]))), Ok(Some(2)));
    assert_eq!(log_end(&rt), Offset(4));
}

#[test]
fn a_refused_sequence_ends_the_send_and_the_next_send_gets_a_new_id() {
    let (rt, mut p) = setup(true);
    assert_eq!(block_on(p.send("t", 0, &recs(&["a"]))), Ok(Some(0)));
    let (pid, epoch) = p.identity().expect("asked for an id");
    // Someone else writes sequences 1..=3 under this id: our next batch (sequence 1, one
    // record) no longer matches the broker's state.
    {
        let mut w = rt.0.borrow_mut();
        let w = &mut *w;
        let fields = ProducerFields {
            producer_id: pid.0,
            producer_epoch: epoch.0,
            base_sequence: 1,
        };
        let mut batch = build_batch(&recs(&["x", "y", "z"]), fields);
        w.broker
            .produce(&mut w.disk, "t", 0, &mut batch, -1, 0)
            .expect("in sequence");
    }
    let result = block_on(p.send("t", 0, &recs(&["b"])));
    assert!(
        matches!(&result, Err(SendError::Failed(why)) if why.contains("OutOfOrderSequenceNumber")),
        "{result:?}"
    );
    assert_eq!(p.identity(), None, "the id is dropped after a failed send");
    assert_eq!(block_on(p.send("t", 0, &recs(&["b"]))), Ok(Some(4)));
    let (new_pid, _) = p.identity().expect("a new id");
    assert_ne!(new_pid, pid);
    assert_eq!(rt.0.borrow().produce_requests, 3);
}

#[test]
fn init_producer_id_is_retried_on_retriable_errors_only() {
    let (rt, mut p) = setup(true);
    rt.0.borrow_mut()
        .init_errors
        .extend([ErrorCode::CoordinatorNotAvailable, ErrorCode::NotCoordinator]);
    assert_eq!(block_on(p.send("t", 0, &recs(&["a"]))), Ok(Some(0)));
    assert_eq!(p.identity().map(|(id, _)| id), Some(ProducerId(0)));

    let (rt, mut p) = setup(true);
    rt.0.borrow_mut().init_errors.push_back(ErrorCode::InvalidRequest);
    let result = block_on(p.send("t", 0, &recs(&["a"])));
    assert!(matches!(result, Err(SendError::Failed(_))), "{result:?}");
    assert_eq!(rt.0.borrow().produce_requests, 0, "nothing sent without an id");
}

#[test]
fn idempotence_needs_acks_all() {
    let (rt, mut p) = setup(true);
    p.config.acks = 1;
    let result = block_on(p.send("t", 0, &recs(&["a"])));
    assert!(matches!(result, Err(SendError::Failed(_))), "{result:?}");
    assert_eq!(rt.0.borrow().produce_requests, 0);
}

#[test]
fn records_before_a_batch_the_consumer_cannot_read_are_handed_over_once() {
    // A compressed batch (a Kafka producer's `compression.type`) behind a plain one: the plain
    // one's records reach the caller and the position passes them; the compressed one is
    // refused whole, the position stays before it. Before, the position stayed where the poll
    // began while the records were handed over, and every poll handed them over again.
    let (rt, mut p) = setup(false);
    assert_eq!(block_on(p.send("t", 0, &recs(&["a"]))), Ok(Some(0)));
    assert_eq!(block_on(p.send("t", 0, &recs(&["b", "c"]))), Ok(Some(1)));
    rt.0.borrow_mut().compress_fetched_tail = true;
    let mut c = consumer_of(&rt, &[(0, Some(0))]);
    let first = block_on(c.poll()).expect("the readable batch is handed over");
    println!(
        "first poll: offsets {:?}, position {:?}",
        offsets(&first),
        c.position(0)
    );
    assert_eq!(offsets(&first), vec![0], "none of the compressed batch's records");
    assert_eq!(
        c.position(0),
        Some(1),
        "past the readable batch, before the compressed one"
    );
    let again = block_on(c.poll());
    println!(
        "second poll: {:?}, position {:?}",
        again.as_ref().map(offsets),
        c.position(0)
    );
    match again {
        Err(ClientError::Protocol(e)) => assert!(e.contains("compressed or malformed batch in t-0 at offset 1"), "{e}"),
        other => panic!("only the compressed batch is left: the poll fails, got {other:?}"),
    }
    assert_eq!(c.position(0), Some(1));
    rt.0.borrow_mut().compress_fetched_tail = false;
    let later = block_on(c.poll()).expect("plain again");
    assert_eq!(offsets(&later), vec![1, 2], "every record once, in order");
}

/// `poll_with` hands over what `poll` returns, record for record, and nothing of a batch the
/// client cannot read; both move the position alike.
#[test]
fn poll_with_hands_over_the_records_poll_returns() {
    let rt = Loopback(Rc::new(RefCell::new(World::new(2))));
    let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], ClientConfig::default());
    let mut p = Producer::new(cluster, ProducerConfig::default());
    for (partition, values) in [
        (0, vec!["a", "b"]),
        (1, vec!["c"]),
        (0, vec!["d", "e", "f"]),
        (1, vec!["g"]),
    ] {
        assert!(block_on(p.send("t", partition, &recs(&values))).is_ok());
    }
    let consumer = || consumer_of(&rt, &[(0, Some(1)), (1, Some(0))]);
    let (mut returned, mut handed) = (consumer(), consumer());
    // Each partition's last batch marked compressed in the first two polls: the first hands
    // over what lies before it, the second has nothing it can read (every partition fails),
    // the third reads the rest.
    for (round, compress) in [true, true, false].into_iter().enumerate() {
        rt.0.borrow_mut().compress_fetched_tail = compress;
        let polled = block_on(returned.poll()).map(|p| {
            let records: Vec<(i32, i64, Vec<u8>)> = p
                .records
                .iter()
                .map(|r| (r.partition, r.offset, r.value.as_deref().unwrap_or_default().to_vec()))
                .collect();
            (records, p.resets)
        });
        let mut records = Vec::new();
        let summary = block_on(handed.poll_with(|partition, r| {
            records.push((partition, r.offset.0, r.value.unwrap_or_default().to_vec()));
        }));
        let with = summary.map(|s| {
            assert_eq!(s.records, records.len(), "the summary counts what was handed over");
            (records, s.resets)
        });
        println!("compressed tail {compress}: poll {polled:?}, poll_with {with:?}");
        match (&polled, &with) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("one failed and the other did not"),
        }
        assert_eq!(
            (returned.position(0), returned.position(1)),
            (handed.position(0), handed.position(1))
        );
        if round == 0 {
            let first: Vec<(i32, i64)> = with
                .iter()
                .flat_map(|(r, _)| r.iter().map(|(p, o, _)| (*p, *o)))
                .collect();
            assert_eq!(first, vec![(0, 1), (1, 0)], "what lies before each compressed batch");
        }
    }
    assert_eq!(handed.position(0), Some(5), "every record read once in the end");
}

#[test]
fn records_read_before_a_corrupt_batch_reach_the_caller_when_every_partition_failed() {
    // A campaign seed (bridge + swizzle + corrupted frames, 1551565026088346315): one response
    // held a good batch and then a damaged one; the only partition failed, so poll() returned the
    // error and dropped the good record while the position had moved past it: skipped for good.
    let (rt, mut p) = setup(false);
    assert_eq!(block_on(p.send("t", 0, &recs(&["a"]))), Ok(Some(0)));
    assert_eq!(block_on(p.send("t", 0, &recs(&["b"]))), Ok(Some(1)));
    rt.0.borrow_mut().corrupt_fetched_tail = true;
    let mut c = consumer_of(&rt, &[(0, Some(0))]);
    let first = block_on(c.poll()).expect("the good batch is handed over with the poll, not lost with the error");
    println!(
        "first poll: offsets {:?}, position {:?}",
        offsets(&first),
        c.position(0)
    );
    assert_eq!(offsets(&first), vec![0]);
    assert_eq!(c.position(0), Some(1), "the position stays before the damaged batch");
    // Only a damaged batch now: nothing read, so the poll fails (and reads it again next time).
    assert!(
        block_on(c.poll()).is_err(),
        "a poll that read nothing reports the corrupt batch"
    );
    assert_eq!(c.position(0), Some(1));
    rt.0.borrow_mut().corrupt_fetched_tail = false;
    let second = block_on(c.poll()).expect("undamaged");
    assert_eq!(offsets(&second), vec![1], "every record once, in order");
}

/// As Kafka's consumer, one Fetch per leader for all the partitions it leads: a partition with
/// nothing new does not hold up the others for a fetch.max.wait.ms of its own.
#[test]
fn one_fetch_asks_the_leader_for_every_partition_it_leads() {
    let rt = Loopback(Rc::new(RefCell::new(World::new(4))));
    let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], ClientConfig::default());
    let mut p = Producer::new(cluster, ProducerConfig::default());
    for (partition, value) in [(1, "a"), (3, "b"), (3, "c")] {
        assert!(block_on(p.send("t", partition, &recs(&[value]))).is_ok());
    }
    let mut c = consumer_of(&rt, &[(0, Some(0)), (1, Some(0)), (2, Some(0)), (3, Some(0))]);
    let polled = block_on(c.poll()).expect("poll");
    let read: Vec<(i32, i64)> = polled.records.iter().map(|r| (r.partition, r.offset)).collect();
    let fetches = rt.0.borrow().fetch_log.clone();
    println!("fetches {fetches:?}, read {read:?}");
    assert_eq!(fetches, vec![vec![0, 1, 2, 3]], "one request for the four partitions");
    assert_eq!(
        read,
        vec![(1, 0), (3, 0), (3, 1)],
        "every partition's records, in partition order"
    );
    assert_eq!(
        (c.position(0), c.position(1), c.position(3)),
        (Some(0), Some(1), Some(2))
    );
}

/// A leader that does not answer holds up only its own partitions: the poll returns the other
/// leader's records while its Fetch stays out, that Fetch is not sent again while it is out, and
/// its answer is taken by a later poll, unless the application moved the partition meanwhile; a
/// Fetch whose partitions were all unassigned is not waited for.
/// Awaiting every leader's answer in each poll (as before) stalled every partition for as long
/// as one leader was cut off: here that poll would never end (`block_on` panics).
#[test]
fn a_silent_leader_holds_up_only_its_own_partitions() {
    let rt = Loopback(Rc::new(RefCell::new(World::new(3))));
    let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], ClientConfig::default());
    let mut p = Producer::new(cluster, ProducerConfig::default());
    for (partition, value) in [(0, "a"), (1, "b"), (2, "c"), (2, "d")] {
        assert!(block_on(p.send("t", partition, &recs(&[value]))).is_ok());
    }
    {
        let mut world = rt.0.borrow_mut();
        world.silent_partitions = vec![1, 2];
        world.hold_silent = true;
    }
    let mut c = consumer_of(&rt, &[(0, Some(0)), (1, Some(0)), (2, Some(0))]);
    let read = |polled: &super::consumer::Polled| -> Vec<(i32, i64)> {
        polled.records.iter().map(|r| (r.partition, r.offset)).collect()
    };
    let first = block_on(c.poll()).expect("poll");
    println!("first poll read {:?}", read(&first));
    assert_eq!(
        read(&first),
        vec![(0, 0)],
        "the answering leader's records, not held up"
    );
    let second = block_on(c.poll()).expect("poll");
    assert_eq!(
        read(&second),
        vec![],
        "nothing new on partition 0, the silent leader still out"
    );
    let (fetches, silent_sent) = (rt.0.borrow().fetch_log.clone(), rt.0.borrow().silent_sent);
    println!("fetches answered while the leader was silent: {fetches:?}; sent to it: {silent_sent}");
    assert_eq!(
        fetches,
        vec![vec![0], vec![0]],
        "partition 0's leader asked once a poll"
    );
    assert_eq!(silent_sent, 1, "the silent leader's Fetch was not sent again while out");
    // The application moves partition 2 while its Fetch is out: that part of the answer is stale.
    c.assign(2, Some(1));
    rt.0.borrow_mut().hold_silent = false;
    let third = block_on(c.poll()).expect("poll");
    println!("after the leader spoke: {:?}", read(&third));
    assert_eq!(
        read(&third),
        vec![(1, 0)],
        "partition 1's answer; partition 2's dropped"
    );
    assert_eq!((c.position(1), c.position(2)), (Some(1), Some(1)));
    let fourth = block_on(c.poll()).expect("poll");
    assert_eq!(
        read(&fourth),
        vec![(2, 1)],
        "partition 2 asked again from where it was moved to"
    );
    // Silent again, with a Fetch out to it; then every partition is unassigned (a rebalance took
    // them): the poll does not wait for an answer it could not use.
    rt.0.borrow_mut().hold_silent = true;
    block_on(c.poll()).expect("poll");
    assert_eq!(rt.0.borrow().silent_sent, 3, "a second Fetch out to the silent leader");
    for partition in 0..3 {
        c.unassign(partition);
    }
    let fifth = block_on(c.poll()).expect("an empty poll, at once");
    assert_eq!(read(&fifth), vec![]);
}
