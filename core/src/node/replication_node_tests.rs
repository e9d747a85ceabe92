//! Replication between broker nodes over an in-process network: the real accept loops, request
//! handlers and replica fetchers, on a single-threaded executor with a virtual clock (1 ms per
//! round). The test plays the coordinator: it hands each broker the partition state.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use super::replica_fetcher::{run_replica_fetcher, ReplicaFetcherConfig};
use super::*;
use crate::broker::ClusterView;
use crate::client::conn::KafkaConn;
use crate::cluster::{BrokerRegistration, PartitionState, TopicRecord};
use crate::disk::mem::MemDisk;
use crate::ids::{BrokerId, LeaderEpoch, Offset};
use crate::protocol::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use crate::protocol::Response;
use crate::record::{build_batch, NewRecord, ProducerFields};
use crate::runtime::{Connection, Listener};

type Task = Pin<Box<dyn Future<Output = ()>>>;
type Queue = Rc<RefCell<VecDeque<Bytes>>>;
/// Address -> (connections opened to it, frames sent to it).
type Traffic = Rc<RefCell<BTreeMap<String, (u32, u32)>>>;

#[derive(Default)]
struct Net {
    now_ms: Cell<i64>,
    listeners: RefCell<BTreeMap<String, Rc<RefCell<VecDeque<Pipe>>>>>,
    spawned: RefCell<Vec<Task>>,
    traffic: Traffic,
}

#[derive(Clone)]
struct Rt {
    net: Rc<Net>,
    disk: Rc<RefCell<MemDisk>>,
}

struct Pipe {
    inbox: Queue,
    outbox: Queue,
    peer: String,
    /// On the connecting end: the net's traffic counts, to count the frames sent to `peer`.
    traffic: Option<Traffic>,
}

impl Connection for Pipe {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        if let Some(traffic) = &self.traffic {
            traffic.borrow_mut().entry(self.peer.clone()).or_default().1 += 1;
        }
        self.outbox.borrow_mut().push_back(frame);
        Ok(())
    }
    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        let inbox = self.inbox.clone();
        poll_fn(move |_| match inbox.borrow_mut().pop_front() {
            Some(frame) => Poll::Ready(Ok(Some(frame))),
            None => Poll::Pending,
        })
        .await
    }
    fn peer(&self) -> String {
        self.peer.clone()
    }
}

struct Accepting(Rc<RefCell<VecDeque<Pipe>>>);

impl Listener for Accepting {
    type Conn = Pipe;
    async fn accept(&mut self) -> Result<Pipe, NetError> {
        let queue = self.0.clone();
        poll_fn(move |_| match queue.borrow_mut().pop_front() {
            Some(conn) => Poll::Ready(Ok(conn)),
            None => Poll::Pending,
        })
        .await
    }
}

impl Runtime for Rt {
    type Disk = MemDisk;
    type Conn = Pipe;
    type Listener = Accepting;
    fn now_ms(&self) -> i64 {
        self.net.now_ms.get()
    }
    fn monotonic_ms(&self) -> u64 {
        u64::try_from(self.net.now_ms.get()).expect("the clock starts at 0")
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        let net = self.net.clone();
        let until = net.now_ms.get() + i64::try_from(duration.as_millis()).expect("short");
        poll_fn(move |_| {
            if net.now_ms.get() >= until {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.net.spawned.borrow_mut().push(Box::pin(task));
    }
    async fn connect(&self, addr: &str) -> Result<Pipe, NetError> {
        let queue = self.net.listeners.borrow().get(addr).cloned();
        let queue = queue.ok_or_else(|| NetError::Refused(addr.to_string()))?;
        let (a, b): (Queue, Queue) = Default::default();
        queue.borrow_mut().push_back(Pipe {
            inbox: a.clone(),
            outbox: b.clone(),
            peer: "client".into(),
            traffic: None,
        });
        self.net.traffic.borrow_mut().entry(addr.to_string()).or_default().0 += 1;
        Ok(Pipe {
            inbox: b,
            outbox: a,
            peer: addr.to_string(),
            traffic: Some(self.net.traffic.clone()),
        })
    }
    async fn listen(&self, addr: &str) -> Result<Accepting, NetError> {
        let queue = Rc::new(RefCell::new(VecDeque::new()));
        self.net.listeners.borrow_mut().insert(addr.to_string(), queue.clone());
        Ok(Accepting(queue))
    }
    fn with_disk<T>(&self, f: impl FnOnce(&mut MemDisk) -> T) -> T {
        f(&mut self.disk.borrow_mut())
    }
    fn random_u64(&self) -> u64 {
        0x5eed
    }
}

/// Polls every task round-robin, 1 ms of virtual time per round, until `done` or `rounds_max`.
/// Returns the rounds it took.
fn run(net: &Rc<Net>, tasks: &mut Vec<Task>, rounds_max: u32, done: impl Fn() -> bool) -> u32 {
    let mut cx = Context::from_waker(Waker::noop());
    for round in 0..rounds_max {
        tasks.append(&mut net.spawned.borrow_mut());
        tasks.retain_mut(|t| t.as_mut().poll(&mut cx).is_pending());
        tasks.append(&mut net.spawned.borrow_mut());
        if done() {
            return round;
        }
        net.now_ms.set(net.now_ms.get() + 1);
    }
    panic!("not done within {rounds_max} rounds");
}

/// Runs `rounds` rounds with no end condition.
fn idle(net: &Rc<Net>, tasks: &mut Vec<Task>, rounds: u32) {
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..rounds {
        tasks.append(&mut net.spawned.borrow_mut());
        tasks.retain_mut(|t| t.as_mut().poll(&mut cx).is_pending());
        net.now_ms.set(net.now_ms.get() + 1);
    }
}

const T: &str = "orders";

fn addr(i: i32) -> String {
    format!("b{i}:9092")
}

fn rt_for(net: &Rc<Net>) -> Rt {
    Rt {
        net: net.clone(),
        disk: Rc::new(RefCell::new(MemDisk::new())),
    }
}

fn view(record: &TopicRecord, state: &PartitionState, live: &[i32]) -> ClusterView {
    ClusterView {
        brokers: live
            .iter()
            .map(|i| BrokerRegistration {
                id: BrokerId(*i),
                host: format!("b{i}"),
                port: 9092,
                rack: None,
                intact_since: None,
            })
            .collect(),
        controller: Some(BrokerId(0)),
        topics: [(T.to_string(), (record.clone(), [(0, state.clone())].into()))].into(),
    }
}

/// Starts broker `i` (its accept loop spawned), hands it the state; with `fetcher`, its
/// replica fetcher too.
fn start(rt: &Rt, i: i32, slot: &Rc<RefCell<BTreeMap<i32, SharedBroker>>>) {
    start_with(rt, i, slot, |_| {});
}

/// `count` runtimes on one network, with brokers 0 and 1 started on the first two and polled
/// until both run.
fn two_brokers_of(net: &Rc<Net>, count: usize, tasks: &mut Vec<Task>) -> (Vec<Rt>, Brokers) {
    let rts: Vec<Rt> = (0..count).map(|_| rt_for(net)).collect();
    let brokers: Brokers = Rc::default();
    start(&rts[0], 0, &brokers);
    start(&rts[1], 1, &brokers);
    run(net, tasks, 100, || brokers.borrow().len() == 2);
    (rts, brokers)
}

/// The started brokers by id.
type Brokers = Rc<RefCell<BTreeMap<i32, SharedBroker>>>;

/// As [`start`], with the node's config changed by `configure` first.
fn start_with(
    rt: &Rt,
    i: i32,
    slot: &Rc<RefCell<BTreeMap<i32, SharedBroker>>>,
    configure: impl FnOnce(&mut NodeConfig) + 'static,
) {
    let rt2 = rt.clone();
    let slot = slot.clone();
    rt.spawn(async move {
        let mut config = NodeConfig::single_node(&addr(i), &format!("b{i}"), 9092, "c");
        config.broker.broker_id = BrokerId(i);
        configure(&mut config);
        let (broker, accept) = start_broker(rt2.clone(), config).await.expect("start");
        rt2.spawn(accept);
        slot.borrow_mut().insert(i, broker);
    });
}

fn apply(rt: &Rt, broker: &SharedBroker, record: &TopicRecord, state: &PartitionState, live: &[i32]) {
    let now = rt.now_ms();
    rt.with_disk(|d| {
        broker
            .borrow_mut()
            .apply_partition_state(d, T, record, 0, state, 0, now)
            .expect("apply")
    });
    broker.borrow_mut().set_cluster_view(view(record, state, live));
}

/// Partition 0 on brokers 0 and 1, led by 0, both in the ISR (min.insync.replicas 1).
fn led_by_0_followed_by_1() -> (TopicRecord, PartitionState) {
    let record = TopicRecord {
        topic_id_hex: crate::broker::TopicId::from_random(3, 4).to_hex(),
        assignment: [(0, vec![BrokerId(0), BrokerId(1)])].into(),
        reassigning: BTreeMap::new(),
        configs: BTreeMap::new(),
    };
    let state = PartitionState {
        leader: Some(BrokerId(0)),
        leader_epoch: LeaderEpoch(1),
        isr: vec![BrokerId(0), BrokerId(1)],
        controller_epoch: 1,
        elr: Vec::new(),
    };
    (record, state)
}

/// Sends broker 0 an acks=1 produce of one record marked `marker`, from a task on `rt`; the flag
/// turns true when it is answered.
fn produce_acks_1_to_0(rt: &Rt, marker: u8) -> Rc<Cell<bool>> {
    let written = Rc::new(Cell::new(false));
    let (client_rt, written2) = (rt.clone(), written.clone());
    rt.spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
            .await
            .expect("connect");
        let _ = conn.call(&produce_sized(marker, 1, 4), 9).await.expect("answer");
        written2.set(true);
    });
    written
}

fn produce_request(marker: u8) -> Request {
    produce_sized(marker, -1, 4)
}

#[test]
fn acks_all_is_answered_after_the_follower_fetched_and_a_late_follower_catches_up() {
    let net = Rc::new(Net::default());
    let mut tasks = Vec::new();
    let (rts, brokers) = two_brokers_of(&net, 3, &mut tasks);
    let record = TopicRecord {
        topic_id_hex: crate::broker::TopicId::from_random(3, 4).to_hex(),
        assignment: [(0, vec![BrokerId(0), BrokerId(1), BrokerId(2)])].into(),
        reassigning: BTreeMap::new(),
        configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
    };
    // Led by 0 with 0 and 1 in the ISR; broker 2 is assigned but out of it.
    let (_, state) = led_by_0_followed_by_1();
    let b = |i: i32| brokers.borrow()[&i].clone();
    apply(&rts[0], &b(0), &record, &state, &[0, 1]);
    apply(&rts[1], &b(1), &record, &state, &[0, 1]);

    // A client sends acks=all to the leader; broker 1's fetcher is not running yet.
    let answer: Rc<RefCell<Option<Response>>> = Rc::default();
    let (client_rt, answer2) = (rts[0].clone(), answer.clone());
    rts[0].spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
            .await
            .expect("connect");
        let resp = conn.call(&produce_request(7), 9).await.expect("answer");
        *answer2.borrow_mut() = Some(resp);
    });
    run(&net, &mut tasks, 300, || {
        b(0).borrow().offsets(T, 0).map(|o| o.2) == Ok(Offset(1))
    });
    // Give it time: with no follower fetching, the answer must not come.
    let waited_from = net.now_ms.get();
    idle(&net, &mut tasks, 500);
    assert!(
        answer.borrow().is_none(),
        "acks=all answered with no follower having the record"
    );
    assert_eq!(b(1).borrow().offsets(T, 0).expect("hosted").2, Offset(0));
    println!(
        "no answer in {} ms without the follower",
        net.now_ms.get() - waited_from
    );

    // Broker 1 starts fetching: the answer comes once it has the record and reported it.
    rts[1].spawn(run_replica_fetcher(
        rts[1].clone(),
        b(1),
        ReplicaFetcherConfig::default(),
    ));
    let took = run(&net, &mut tasks, 2_000, || answer.borrow().is_some());
    let Some(Response::Produce(resp)) = answer.borrow().clone() else {
        panic!("not a produce answer")
    };
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0), "{p:?}");
    assert_eq!(
        b(1).borrow().offsets(T, 0).expect("hosted").2,
        Offset(1),
        "the follower has it"
    );
    assert_eq!(
        b(0).borrow().offsets(T, 0).expect("hosted").1,
        Offset(1),
        "leader HW passed it"
    );
    println!("answered {took} ms after the follower started");

    // Broker 2 starts late, out of the ISR, and catches up.
    start(&rts[2], 2, &brokers);
    run(&net, &mut tasks, 100, || brokers.borrow().len() == 3);
    for i in 0..3 {
        let live = [0, 1, 2];
        b(i).borrow_mut().set_cluster_view(view(&record, &state, &live));
    }
    apply(&rts[2], &b(2), &record, &state, &[0, 1, 2]);
    rts[2].spawn(run_replica_fetcher(
        rts[2].clone(),
        b(2),
        ReplicaFetcherConfig::default(),
    ));
    let leader_end = b(0).borrow().offsets(T, 0).expect("hosted");
    run(&net, &mut tasks, 2_000, || {
        b(2).borrow().offsets(T, 0).expect("hosted") == (Offset(0), leader_end.1, leader_end.2)
    });
    let now = net.now_ms.get();
    let proposals = b(0).borrow_mut().poll_isr_proposals(now);
    assert_eq!(proposals.len(), 1, "{proposals:?}");
    assert_eq!(proposals[0].new_state.isr, vec![BrokerId(0), BrokerId(1), BrokerId(2)]);

    // Leadership moves to broker 1 (epoch 2): broker 0 now follows, truncating by epoch over the
    // wire (OffsetForLeaderEpoch) before it fetches; an acks=all produce to the new leader is
    // answered once both followers have it.
    let state2 = PartitionState {
        leader: Some(BrokerId(1)),
        leader_epoch: LeaderEpoch(2),
        isr: vec![BrokerId(0), BrokerId(1), BrokerId(2)],
        controller_epoch: 1,
        elr: Vec::new(),
    };
    for i in 0..3 {
        let now = net.now_ms.get();
        rts[i as usize].with_disk(|d| {
            b(i).borrow_mut()
                .apply_partition_state(d, T, &record, 0, &state2, 5, now)
                .expect("apply")
        });
        b(i).borrow_mut().set_cluster_view(view(&record, &state2, &[0, 1, 2]));
    }
    let truncating = b(0).borrow().follower_tasks();
    assert!(
        matches!(
            truncating[0].action,
            crate::broker::FollowerAction::Truncate { epoch: LeaderEpoch(1) }
        ),
        "{truncating:?}"
    );
    rts[0].spawn(run_replica_fetcher(
        rts[0].clone(),
        b(0),
        ReplicaFetcherConfig::default(),
    ));
    let answer: Rc<RefCell<Option<Response>>> = Rc::default();
    let (client_rt, answer2) = (rts[1].clone(), answer.clone());
    rts[1].spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(1), "test", 20_000)
            .await
            .expect("connect");
        let resp = conn.call(&produce_request(8), 9).await.expect("answer");
        *answer2.borrow_mut() = Some(resp);
    });
    run(&net, &mut tasks, 2_000, || answer.borrow().is_some());
    let Some(Response::Produce(resp)) = answer.borrow().clone() else {
        panic!("not a produce answer")
    };
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.base_offset), (0, 1), "{p:?}");
    run(&net, &mut tasks, 2_000, || {
        (0..3).all(|i| b(i).borrow().offsets(T, 0).expect("hosted") == (Offset(0), Offset(2), Offset(2)))
    });
    let tasks_now = b(0).borrow().follower_tasks();
    assert!(
        matches!(
            tasks_now[0].action,
            crate::broker::FollowerAction::Fetch { offset: Offset(2) }
        ),
        "broker 0 truncated (nothing to cut) and fetched: {tasks_now:?}"
    );
}

/// A produce of one batch of `value_bytes`-byte value with `acks`.
fn produce_sized(marker: u8, acks: i16, value_bytes: usize) -> Request {
    let batch = build_batch(
        &[NewRecord {
            timestamp: 1,
            key: None,
            value: Some(vec![marker; value_bytes]),
        }],
        ProducerFields::none(),
    );
    Request::Produce(ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: 10_000,
        topics: vec![ProduceTopic {
            name: T.into(),
            partitions: vec![ProducePartition {
                index: 0,
                records: Some(batch.into()),
            }],
        }],
    })
}

/// A follower's fetch of partition 0 from `offset`, as replica `replica` (-1: a consumer).
fn fetch_as(replica: i32, offset: i64) -> crate::protocol::api::fetch::FetchRequest {
    crate::protocol::api::fetch::FetchRequest::of_one(T, 0, replica, -1, offset)
}

/// Record bytes in a fetch answer's partition 0.
fn fetched_bytes(resp: &crate::protocol::api::fetch::FetchResponse) -> usize {
    resp.topics[0].partitions[0].records.as_ref().map_or(0, |r| r.len())
}

/// `leader.replication.throttled.rate` on the leader: broker 2 is being added to the partition
/// by a reassignment and is out of the ISR, so the leader serves its catch-up at most at the rate
/// (over quota: no records), while broker 1 (in the ISR) and consumers are served in full. The
/// catch-up still completes, and an acks=all produce on the same leader is answered while it runs.
#[test]
fn the_leader_throttles_an_added_replica_and_not_the_isr_nor_acks_all() {
    const RATE: u64 = 2_000;
    const BACKLOG: u8 = 20;
    const VALUE_BYTES: usize = 1_000;
    let net = Rc::new(Net::default());
    let rts: Vec<Rt> = (0..3).map(|_| rt_for(&net)).collect();
    let brokers: Rc<RefCell<BTreeMap<i32, SharedBroker>>> = Rc::default();
    let mut tasks = Vec::new();
    let leader_throttle = Some(Rc::new(RefCell::new(super::throttle::Throttle::new(RATE))));
    start_with(&rts[0], 0, &brokers, move |c| c.leader_throttle = leader_throttle);
    start(&rts[1], 1, &brokers);
    start(&rts[2], 2, &brokers);
    run(&net, &mut tasks, 100, || brokers.borrow().len() == 3);
    let record = TopicRecord {
        topic_id_hex: crate::broker::TopicId::from_random(3, 4).to_hex(),
        assignment: [(0, vec![BrokerId(0), BrokerId(1), BrokerId(2)])].into(),
        reassigning: [(
            0,
            crate::cluster::Reassignment {
                adding: vec![BrokerId(2)],
                removing: vec![],
            },
        )]
        .into(),
        configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
    };
    // Led by 0 with 0 and 1 in the ISR; broker 2, being added, is out of it.
    let (_, state) = led_by_0_followed_by_1();
    let b = |i: i32| brokers.borrow()[&i].clone();
    for i in 0..3 {
        apply(&rts[i as usize], &b(i), &record, &state, &[0, 1, 2]);
    }
    // A backlog on the leader (acks=1), then broker 1 (in the ISR) catches up unthrottled.
    let (client_rt, acked) = (rts[0].clone(), Rc::new(Cell::new(0u8)));
    let acked2 = acked.clone();
    rts[0].spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
            .await
            .expect("connect");
        for m in 0..BACKLOG {
            conn.call(&produce_sized(m, 1, VALUE_BYTES), 9).await.expect("answer");
            acked2.set(m + 1);
        }
    });
    run(&net, &mut tasks, 1_000, || acked.get() == BACKLOG);
    rts[1].spawn(run_replica_fetcher(
        rts[1].clone(),
        b(1),
        ReplicaFetcherConfig::default(),
    ));
    let end = Offset(i64::from(BACKLOG));
    run(&net, &mut tasks, 1_000, || {
        b(0).borrow().offsets(T, 0).expect("hosted").1 == end
    });
    let batch_bytes = match produce_sized(0, 1, VALUE_BYTES) {
        Request::Produce(p) => p.topics[0].partitions[0].records.as_ref().map_or(0, |r| r.len()),
        _ => 0,
    };
    let backlog_bytes = batch_bytes * usize::from(BACKLOG);

    // The quota on the leader, request by request, with a bucket in debt.
    let mut drained = super::throttle::Throttle::new(RATE);
    let now = rts[0].monotonic_ms();
    drained.fetched(now, 10_000);
    let answers: Vec<(i32, usize)> = [2, 1, -1]
        .into_iter()
        .map(|replica| {
            let (resp, _) = rts[0].with_disk(|d| {
                handlers::fetch_with(
                    &b(0).borrow(),
                    d,
                    &fetch_as(replica, 0),
                    9,
                    false,
                    Some((&mut drained, now)),
                )
            });
            (replica, fetched_bytes(&resp))
        })
        .collect();
    println!("over quota, bytes served to replica 2 (adding), 1 (ISR), -1 (consumer): {answers:?}");
    assert_eq!(answers[0], (2, 0), "the added replica is served nothing over quota");
    assert!(
        answers[1].1 >= backlog_bytes && answers[2].1 >= backlog_bytes,
        "{answers:?}"
    );
    // Within quota: at most what the bucket holds, rounded up to one whole batch (KIP-74).
    let mut fresh = super::throttle::Throttle::new(RATE);
    let (resp, _) = rts[0]
        .with_disk(|d| handlers::fetch_with(&b(0).borrow(), d, &fetch_as(2, 0), 9, false, Some((&mut fresh, now))));
    println!(
        "within quota: {} bytes served to replica 2 (burst {} B, one batch {batch_bytes} B)",
        fetched_bytes(&resp),
        RATE / 10
    );
    assert_eq!(fetched_bytes(&resp), batch_bytes);

    // Broker 2 catches up through the throttled leader; an acks=all produce meanwhile.
    let started_ms = net.now_ms.get();
    rts[2].spawn(run_replica_fetcher(
        rts[2].clone(),
        b(2),
        ReplicaFetcherConfig::default(),
    ));
    let answer: Rc<RefCell<Option<Response>>> = Rc::default();
    let (client_rt, answer2) = (rts[0].clone(), answer.clone());
    rts[0].spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
            .await
            .expect("connect");
        let resp = conn.call(&produce_request(99), 9).await.expect("answer");
        *answer2.borrow_mut() = Some(resp);
    });
    let answered_in = run(&net, &mut tasks, 2_000, || answer.borrow().is_some());
    let Some(Response::Produce(resp)) = answer.borrow().clone() else {
        panic!("not a produce answer")
    };
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{p:?}");
    let behind = b(2).borrow().offsets(T, 0).expect("hosted").2;
    println!(
        "acks=all answered after {answered_in} ms; broker 2 then at offset {} of {}",
        behind.0,
        BACKLOG + 1
    );
    assert!(
        behind.0 < i64::from(BACKLOG),
        "the catch-up was not throttled: broker 2 at {behind:?}"
    );
    let leader_end = b(0).borrow().offsets(T, 0).expect("hosted").2;
    run(&net, &mut tasks, 100_000, || {
        b(2).borrow().offsets(T, 0).expect("hosted").2 == leader_end
    });
    let took_ms = u64::try_from(net.now_ms.get() - started_ms).expect("forward");
    let allowed = RATE * took_ms / 1_000 + RATE / 10 + batch_bytes as u64;
    println!(
        "broker 2 caught up {} bytes in {took_ms} virtual ms through the leader's {RATE} B/s quota (at most {allowed} B in that time)",
        backlog_bytes + batch_bytes
    );
    assert!(
        (backlog_bytes as u64) <= allowed,
        "served faster than the quota: {backlog_bytes} > {allowed}"
    );
}

/// A cluster broker that has not read the cluster state yet (just restarted) holds a Metadata
/// request until its first scan, then answers with the topic's partitions. Before, it answered at
/// once: LEADER_NOT_AVAILABLE and no partitions, which a confluent-kafka producer took for an
/// empty topic.
#[test]
fn metadata_before_the_first_cluster_scan_waits_for_it() {
    use crate::protocol::api::metadata::{MetadataRequest, MetadataRequestTopic};
    let net = Rc::new(Net::default());
    let rt = rt_for(&net);
    let brokers: Rc<RefCell<BTreeMap<i32, SharedBroker>>> = Rc::default();
    let mut tasks = Vec::new();
    let watch = watch::PartitionWatch::default();
    let w = watch.clone();
    start_with(&rt, 0, &brokers, move |c| {
        c.admin = Some(cluster::AdminQueue::default());
        c.watch = w;
    });
    run(&net, &mut tasks, 100, || brokers.borrow().len() == 1);
    let answer: Rc<RefCell<Option<Response>>> = Rc::default();
    let (client_rt, answer2) = (rt.clone(), answer.clone());
    rt.spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
            .await
            .expect("connect");
        let req = Request::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                topic_id: Default::default(),
                name: Some(T.into()),
            }]),
            allow_auto_topic_creation: false,
            include_cluster_authorized_operations: false,
            include_topic_authorized_operations: false,
        });
        let resp = conn.call(&req, 9).await.expect("answer");
        *answer2.borrow_mut() = Some(resp);
    });
    idle(&net, &mut tasks, 1_000);
    println!("before the first scan: answered = {}", answer.borrow().is_some());
    assert!(
        answer.borrow().is_none(),
        "answered before the first scan: {:?}",
        answer.borrow()
    );
    // The cluster task's first scan: the view, then every waiter poked.
    let record = TopicRecord {
        topic_id_hex: crate::broker::TopicId::from_random(3, 4).to_hex(),
        assignment: [(0, vec![BrokerId(0)])].into(),
        reassigning: BTreeMap::new(),
        configs: BTreeMap::new(),
    };
    let state = PartitionState {
        leader: Some(BrokerId(0)),
        leader_epoch: LeaderEpoch(1),
        isr: vec![BrokerId(0)],
        controller_epoch: 1,
        elr: Vec::new(),
    };
    let b0 = brokers.borrow()[&0].clone();
    b0.borrow_mut().set_cluster_view(view(&record, &state, &[0]));
    watch.poke_all();
    let took = run(&net, &mut tasks, 50, || answer.borrow().is_some());
    let Some(Response::Metadata(resp)) = answer.borrow().clone() else {
        panic!("not a metadata answer")
    };
    let t = &resp.topics[0];
    println!(
        "answered {took} ms after the scan: error {}, {} partition(s)",
        t.error_code,
        t.partitions.len()
    );
    assert_eq!((t.error_code, t.partitions.len()), (0, 1), "{t:?}");
    assert_eq!(t.partitions[0].leader_id, 0);
    // Bounded: with no scan at all, the answer comes at the bound, retriable.
    let b1 = rt_for(&net);
    start_with(&b1, 1, &brokers, |c| c.admin = Some(cluster::AdminQueue::default()));
    run(&net, &mut tasks, 100, || brokers.borrow().len() == 2);
    let late: Rc<RefCell<Option<Response>>> = Rc::default();
    let (client_rt, late2) = (b1.clone(), late.clone());
    b1.spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(1), "test", 60_000)
            .await
            .expect("connect");
        let req = Request::Metadata(MetadataRequest {
            topics: None,
            allow_auto_topic_creation: false,
            include_cluster_authorized_operations: false,
            include_topic_authorized_operations: false,
        });
        *late2.borrow_mut() = Some(conn.call(&req, 9).await.expect("answer"));
    });
    let waited = run(&net, &mut tasks, 20_000, || late.borrow().is_some());
    println!("with no scan, answered after {waited} ms (bound {FIRST_SCAN_WAIT_MS_MAX} ms)");
    assert!(u64::from(waited) >= FIRST_SCAN_WAIT_MS_MAX, "{waited}");
}

/// One fetcher (and one connection) per leader for all the partitions this broker follows there
/// (Kafka's fetcher thread per source broker): broker 1 follows partitions 0 and 1 of broker 0.
/// Partition 1's state on broker 1 names an epoch the leader does not know yet, so the leader
/// answers it UNKNOWN_LEADER_EPOCH; that partition sits out the backoff while partition 0 keeps
/// replicating (an acks=all produce is answered), and the requests stay few instead of spinning
/// on the error (a leader answers at once when any partition has one). Once the leader holds
/// the epoch, partition 1 truncates, fetches and replicates too, on the same connection.
#[test]
fn one_fetcher_per_leader_serves_every_partition_and_an_erroring_one_sits_out() {
    let net = Rc::new(Net::default());
    let mut tasks = Vec::new();
    let (rts, brokers) = two_brokers_of(&net, 2, &mut tasks);
    let b = |i: i32| brokers.borrow()[&i].clone();
    let replicas = vec![BrokerId(0), BrokerId(1)];
    let record = TopicRecord {
        topic_id_hex: crate::broker::TopicId::from_random(3, 5).to_hex(),
        assignment: [(0, replicas.clone()), (1, replicas.clone())].into(),
        reassigning: BTreeMap::new(),
        configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
    };
    let state = |epoch: i32| PartitionState {
        leader: Some(BrokerId(0)),
        leader_epoch: LeaderEpoch(epoch),
        isr: replicas.clone(),
        controller_epoch: 1,
        elr: Vec::new(),
    };
    let set = |i: i32, partition: i32, s: &PartitionState| {
        let now = rts[i as usize].now_ms();
        rts[i as usize].with_disk(|d| {
            b(i).borrow_mut()
                .apply_partition_state(d, T, &record, partition, s, 0, now)
                .expect("apply")
        });
    };
    let view_of = |states: [&PartitionState; 2]| ClusterView {
        brokers: view(&record, states[0], &[0, 1]).brokers,
        controller: Some(BrokerId(0)),
        topics: [(
            T.to_string(),
            (record.clone(), [(0, states[0].clone()), (1, states[1].clone())].into()),
        )]
        .into(),
    };
    set(0, 0, &state(1));
    set(0, 1, &state(1));
    set(1, 0, &state(1));
    set(1, 1, &state(2));
    b(0).borrow_mut().set_cluster_view(view_of([&state(1), &state(1)]));
    b(1).borrow_mut().set_cluster_view(view_of([&state(1), &state(2)]));
    // The 100 ms long poll this test was written for (the default is Kafka's 500 ms): an
    // erring partition rides the next request after its 50 ms sit-out, so it bounds the count.
    rts[1].spawn(run_replica_fetcher(
        rts[1].clone(),
        b(1),
        ReplicaFetcherConfig {
            fetch_wait_max_ms: 100,
            ..ReplicaFetcherConfig::default()
        },
    ));

    let produce = |partition: i32, marker: u8| {
        let mut req = produce_sized(marker, -1, 4);
        if let Request::Produce(p) = &mut req {
            p.topics[0].partitions[0].index = partition;
        }
        let answer: Rc<RefCell<Option<Response>>> = Rc::default();
        let (client_rt, answer2) = (rts[0].clone(), answer.clone());
        rts[0].spawn(async move {
            let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
                .await
                .expect("connect");
            *answer2.borrow_mut() = Some(conn.call(&req, 9).await.expect("answer"));
        });
        answer
    };
    let error_of = |answer: &Rc<RefCell<Option<Response>>>| match answer.borrow().clone() {
        Some(Response::Produce(resp)) => resp.topics[0].partitions[0].error_code,
        other => panic!("not a produce answer: {other:?}"),
    };

    let answer = produce(0, 1);
    run(&net, &mut tasks, 2_000, || answer.borrow().is_some());
    assert_eq!(error_of(&answer), 0);
    assert_eq!(
        b(1).borrow().offsets(T, 0).expect("hosted").2,
        Offset(1),
        "partition 0 replicated"
    );
    let before = net.traffic.borrow()[&addr(0)].1;
    idle(&net, &mut tasks, 1_000);
    let requests = net.traffic.borrow()[&addr(0)].1 - before;
    println!("{requests} requests to the leader in 1,000 ms while partition 1 errs");
    // About two a 100 ms: the fetch's long poll, and the erring partition's retry after 50 ms.
    assert!(
        (5..=40).contains(&requests),
        "{requests} requests in 1,000 ms: spinning on the erring partition, or not fetching"
    );
    assert_eq!(b(1).borrow().offsets(T, 1).expect("hosted").2, Offset(0));

    set(0, 1, &state(2));
    b(0).borrow_mut().set_cluster_view(view_of([&state(1), &state(2)]));
    let answer = produce(1, 2);
    run(&net, &mut tasks, 2_000, || answer.borrow().is_some());
    assert_eq!(error_of(&answer), 0);
    assert_eq!(
        b(1).borrow().offsets(T, 1).expect("hosted").2,
        Offset(1),
        "partition 1 replicated"
    );
    // The two produces' connections and the fetcher's one.
    let connections = net.traffic.borrow()[&addr(0)].0;
    assert_eq!(connections, 3, "one connection for the follower's two partitions");
}

/// The replica fetcher's manager starts a leader's fetcher when the cluster task pokes after
/// applying partition state, not at its next recheck (a second later): the follower has the
/// leader's record within a few ms of the poke. Without the poke it starts only at the recheck.
#[test]
fn the_fetcher_manager_starts_a_fetcher_at_the_poke_after_new_state() {
    for poke in [true, false] {
        let net = Rc::new(Net::default());
        let mut tasks = Vec::new();
        let (rts, brokers) = two_brokers_of(&net, 2, &mut tasks);
        let b = |i: i32| brokers.borrow()[&i].clone();
        let (record, state) = led_by_0_followed_by_1();
        apply(&rts[0], &b(0), &record, &state, &[0, 1]);
        let written = produce_acks_1_to_0(&rts[0], 7);
        run(&net, &mut tasks, 300, || written.get());
        // Broker 1's manager runs before broker 1 follows anything: it finds no leader.
        let watch = watch::PartitionWatch::default();
        let config = ReplicaFetcherConfig {
            watch: watch.clone(),
            ..ReplicaFetcherConfig::default()
        };
        rts[1].spawn(run_replica_fetcher(rts[1].clone(), b(1), config));
        idle(&net, &mut tasks, 100);
        // The cluster task's apply, then its poke of every waiter.
        apply(&rts[1], &b(1), &record, &state, &[0, 1]);
        if poke {
            watch.poke_all();
        }
        let took = run(&net, &mut tasks, 3_000, || {
            b(1).borrow().offsets(T, 0).map(|o| o.2) == Ok(Offset(1))
        });
        println!("poke {poke}: the follower had the record {took} ms after its new state");
        if poke {
            assert!(took < 50, "the fetcher started at the poke: {took} ms");
        } else {
            assert!(took >= 800, "without a poke, only the recheck starts it: {took} ms");
        }
    }
}

/// A leader whose registration moves (another host, or the same host on another port) is
/// fetched from at its new address: the follower's fetcher drops its connection and opens one
/// there, and replication goes on. The fetcher compares the registration with the address it
/// connected to; a fetcher that kept its connection would go on fetching from the old one.
#[test]
fn the_fetcher_follows_a_leader_whose_registration_moved() {
    let net = Rc::new(Net::default());
    let mut tasks = Vec::new();
    let (rts, brokers) = two_brokers_of(&net, 2, &mut tasks);
    let b = |i: i32| brokers.borrow()[&i].clone();
    let (record, state) = led_by_0_followed_by_1();
    apply(&rts[0], &b(0), &record, &state, &[0, 1]);
    apply(&rts[1], &b(1), &record, &state, &[0, 1]);
    rts[1].spawn(run_replica_fetcher(
        rts[1].clone(),
        b(1),
        ReplicaFetcherConfig::default(),
    ));
    let followed = |end: i64| b(1).borrow().offsets(T, 0).map(|o| o.2) == Ok(Offset(end));
    let traffic = |at: &str| net.traffic.borrow().get(at).copied().unwrap_or_default();
    let written = produce_acks_1_to_0(&rts[0], 1);
    run(&net, &mut tasks, 2_000, || written.get() && followed(1));
    let mut end = 1;
    // Broker 0 answers at two more addresses: its accept queue under other names.
    let queue = net.listeners.borrow()[&addr(0)].clone();
    let mut compared = 0;
    for (host, port) in [("b0-moved", 9092), ("b0-moved", 9093)] {
        let moved = format!("{host}:{port}");
        net.listeners.borrow_mut().insert(moved.clone(), queue.clone());
        let mut registered = view(&record, &state, &[0, 1]);
        registered.brokers[0].host = host.to_string();
        registered.brokers[0].port = port;
        b(1).borrow_mut().set_cluster_view(registered);
        end += 1;
        let written = produce_acks_1_to_0(&rts[0], end as u8);
        run(&net, &mut tasks, 2_000, || written.get() && followed(end));
        let (connections, frames) = traffic(&moved);
        println!("{moved}: {connections} connection(s), {frames} frames");
        assert_eq!(connections, 1, "the fetcher connected to {moved}");
        assert!(frames > 0, "and fetched from there");
        // Nothing more goes to the addresses it left (no produce in this while).
        let left: Vec<(String, u32)> = net
            .traffic
            .borrow()
            .iter()
            .filter(|(at, _)| **at != moved)
            .map(|(at, &(_, frames))| (at.clone(), frames))
            .collect();
        idle(&net, &mut tasks, 1_500);
        for (at, frames) in &left {
            let now = traffic(at).1;
            assert_eq!(now, *frames, "{at} still gets frames after the leader moved to {moved}");
            compared += 1;
        }
        assert!(traffic(&moved).1 > frames, "the fetcher goes on fetching from {moved}");
    }
    assert!(compared >= 3, "compared the old addresses' traffic {compared} times");
}

/// A follower's fetch waiting at the leader's log end is answered at the leader's next append,
/// whatever the produce's acks, as Kafka completes delayed fetches after every leader append.
/// Before, an acks=0 produce woke nobody: the follower had the record only when its fetch's wait
/// (`replica.fetch.wait.max.ms`, 500 ms) ran out.
#[test]
fn a_follower_waiting_at_the_log_end_gets_an_acks_0_record_at_once() {
    let net = Rc::new(Net::default());
    let mut tasks = Vec::new();
    let (rts, brokers) = two_brokers_of(&net, 2, &mut tasks);
    let (record, state) = led_by_0_followed_by_1();
    let b = |i: i32| brokers.borrow()[&i].clone();
    apply(&rts[0], &b(0), &record, &state, &[0, 1]);
    apply(&rts[1], &b(1), &record, &state, &[0, 1]);
    rts[1].spawn(run_replica_fetcher(
        rts[1].clone(),
        b(1),
        ReplicaFetcherConfig::default(),
    ));
    let sent = Rc::new(Cell::new(0i64));
    let (client_rt, sent2) = (rts[0].clone(), sent.clone());
    rts[0].spawn(async move {
        let mut conn = KafkaConn::connect(&client_rt, &addr(0), "test", 20_000)
            .await
            .expect("connect");
        // acks=1 first: the follower's fetcher is then running and its next fetch waits.
        conn.call(&produce_sized(1, 1, 4), 9).await.expect("answer");
        sent2.set(1);
        // Well inside the follower's fetch wait (500 ms), then acks=0 (no answer comes).
        client_rt.sleep(Duration::from_millis(50)).await;
        conn.send_only(&produce_sized(2, 0, 4), 9).await.expect("send");
        sent2.set(2);
    });
    let follower_end = || b(1).borrow().offsets(T, 0).expect("hosted").2;
    run(&net, &mut tasks, 2_000, || follower_end() == Offset(1));
    run(&net, &mut tasks, 2_000, || sent.get() == 2);
    assert_eq!(
        b(0).borrow().offsets(T, 0).expect("hosted").2,
        Offset(2),
        "the leader appended the acks=0 record"
    );
    let took = run(&net, &mut tasks, 2_000, || follower_end() == Offset(2));
    println!("the follower had the acks=0 record {took} ms after it was sent (its fetch waits up to 500 ms)");
    assert!(
        took < 50,
        "the follower's waiting fetch was not woken by the append: {took} ms"
    );
}
