//! Group consumers against the real node driver in the same thread: every request is encoded,
//! answered by `node::handle_frame` (parked JoinGroup/SyncGroup really wait) and decoded. A tiny
//! executor polls the members in turn and, when all of them wait, moves virtual time to the
//! earliest timer, so a rebalance among several members runs in milliseconds of real time.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::broker::{Broker, BrokerConfig, TopicId};
use crate::client::ClientConfig;
use crate::disk::mem::MemDisk;
use crate::node::{handle_frame, NodeConfig, Outcome, SharedBroker};
use crate::record::{build_batch, NewRecord, ProducerFields};
use crate::runtime::{Connection, Listener, NetError};

struct World {
    now_ms: Cell<u64>,
    timers: RefCell<BTreeSet<u64>>,
    disk: RefCell<MemDisk>,
    broker: SharedBroker,
    node: NodeConfig,
    /// Tasks the consumers spawned (heartbeats); they end when their consumer is dropped.
    spawned: RefCell<Vec<Task<'static>>>,
}

#[derive(Clone)]
struct Rt(Rc<World>);

struct Conn {
    rt: Rt,
    frames: VecDeque<Bytes>,
}

impl Connection for Conn {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        self.frames.push_back(frame);
        Ok(())
    }
    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        let Some(frame) = self.frames.pop_front() else {
            return Ok(None);
        };
        let world = self.rt.0.clone();
        match handle_frame(&self.rt, &world.broker, &world.node, &frame).await {
            Outcome::Reply(bytes) => Ok(Some(bytes)),
            Outcome::ReplyParts(parts) => self
                .rt
                .with_disk(|disk| crate::runtime::flatten_parts(disk, parts))
                .map(Some)
                .map_err(|e| NetError::Io(e.to_string())),
            Outcome::NoReply => Ok(None),
            Outcome::Close(why) | Outcome::ReplyThenClose(_, why) => Err(NetError::Io(why)),
        }
    }
    fn peer(&self) -> String {
        "loopback".into()
    }
}

struct NoAccept;

impl Listener for NoAccept {
    type Conn = Conn;
    async fn accept(&mut self) -> Result<Conn, NetError> {
        Err(NetError::Io("the loopback has no listener".into()))
    }
}

/// Ready once virtual time reaches its deadline; until then it registers the deadline.
struct Sleep {
    deadline: u64,
    world: Rc<World>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.world.now_ms.get() >= self.deadline {
            Poll::Ready(())
        } else {
            self.world.timers.borrow_mut().insert(self.deadline);
            Poll::Pending
        }
    }
}

impl Runtime for Rt {
    type Disk = MemDisk;
    type Conn = Conn;
    type Listener = NoAccept;
    fn now_ms(&self) -> i64 {
        i64::try_from(self.0.now_ms.get()).expect("test clock is small")
    }
    fn monotonic_ms(&self) -> u64 {
        self.0.now_ms.get()
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        Sleep {
            deadline: self.0.now_ms.get() + u64::try_from(duration.as_millis()).expect("short sleeps"),
            world: self.0.clone(),
        }
    }
    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.0.spawned.borrow_mut().push(Box::pin(task));
    }
    async fn connect(&self, _addr: &str) -> Result<Conn, NetError> {
        Ok(Conn {
            rt: self.clone(),
            frames: VecDeque::new(),
        })
    }
    async fn listen(&self, _addr: &str) -> Result<NoAccept, NetError> {
        Ok(NoAccept)
    }
    fn with_disk<T>(&self, f: impl FnOnce(&mut MemDisk) -> T) -> T {
        f(&mut self.0.disk.borrow_mut())
    }
    fn random_u64(&self) -> u64 {
        7
    }
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Polls every task in turn (and the spawned ones); when all wait, runs the broker's timers and moves time to the
/// earliest sleep. Bounded by rounds; a round where nothing waits on a timer is a deadlock.
fn run(rt: &Rt, mut tasks: Vec<Task<'_>>) {
    let mut done = vec![false; tasks.len()];
    for _round in 0..2_000_000 {
        for (task, done) in tasks.iter_mut().zip(done.iter_mut()) {
            if !*done && task.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready() {
                *done = true;
            }
        }
        if done.iter().all(|d| *d) {
            return;
        }
        // Spawned tasks may spawn or finish: take them out while polling.
        let mut spawned = std::mem::take(&mut *rt.0.spawned.borrow_mut());
        spawned.retain_mut(|t| t.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        rt.0.spawned.borrow_mut().extend(spawned);
        let next =
            rt.0.timers
                .borrow_mut()
                .pop_first()
                .expect("a waiting task waits on a timer");
        rt.0.timers.borrow_mut().clear();
        rt.0.now_ms.set(rt.0.now_ms.get().max(next));
        let now = rt.now_ms();
        rt.with_disk(|disk| rt.0.broker.borrow_mut().handle_timeout(disk, now));
    }
    panic!("the tasks did not finish");
}

const PARTITIONS: i32 = 4;

/// A batch of one record whose value is `value`, from no producer id.
fn one_record(value: u8) -> Vec<u8> {
    let records = [NewRecord {
        timestamp: 1,
        key: None,
        value: Some(vec![value]),
    }];
    let fields = ProducerFields {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
    build_batch(&records, fields)
}

/// Appends [`one_record`] to `topic`'s `partition`, and wakes the Fetches waiting on it.
fn append(rt: &Rt, topic: &str, partition: i32, value: u8) {
    let mut disk = rt.0.disk.borrow_mut();
    let mut broker = rt.0.broker.borrow_mut();
    broker
        .produce(&mut *disk, topic, partition, &mut one_record(value), -1, 0)
        .expect("append");
    rt.0.node.watch.poke(&broker, topic, partition);
}

fn setup() -> Rt {
    setup_with_fetch_wait(50)
}

/// [`setup`] with the broker's longest Fetch wait (`fetch.max.wait.ms` is capped at it).
fn setup_with_fetch_wait(fetch_wait_ms_max: u64) -> Rt {
    let mut disk = MemDisk::new();
    let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
    broker
        .create_topic(&mut disk, "t", PARTITIONS, 1, &[], TopicId::from_random(1, 1), false)
        .expect("create");
    // Five records in partition 0, so positions from committed offsets show in what is read.
    for i in 0..5u8 {
        broker
            .produce(&mut disk, "t", 0, &mut one_record(i), -1, 0)
            .expect("append");
    }
    let mut node = NodeConfig::single_node("loopback:9092", "loopback", 9092, "c");
    node.fetch_wait_ms_max = fetch_wait_ms_max;
    Rt(Rc::new(World {
        now_ms: Cell::new(1_000),
        timers: RefCell::new(BTreeSet::new()),
        disk: RefCell::new(disk),
        broker: Rc::new(RefCell::new(broker)),
        node,
        spawned: RefCell::new(Vec::new()),
    }))
}

fn member(rt: &Rt, name: &str, assignor: Assignor) -> GroupConsumer<Rt> {
    let client = ClientConfig {
        client_id: name.into(),
        request_timeout_ms: 5_000,
        retry_backoff_ms: 100,
        sasl: None,
    };
    let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], client);
    let mut config = GroupConfig::new("g");
    config.consumer.fetch_max_wait_ms = 50;
    config.session_timeout_ms = 10_000;
    config.heartbeat_interval_ms = 500;
    config.max_poll_interval_ms = 20_000;
    config.assignors = vec![assignor];
    config.enable_auto_commit = false;
    let mut c = GroupConsumer::new(cluster, config);
    c.subscribe(&["t"], Box::new(NoListener));
    c
}

/// What each member last saw: (generation, assignment), and the offsets it read per partition.
#[derive(Default)]
struct Seen {
    state: BTreeMap<usize, (i32, BTreeSet<TopicPartition>)>,
    read: BTreeMap<usize, Vec<(i32, i64)>>,
}

/// Polls `c` until `stop` says so or virtual time passes `deadline_ms`.
async fn poll_until(
    rt: &Rt,
    c: &mut GroupConsumer<Rt>,
    me: usize,
    seen: &RefCell<Seen>,
    stop: &dyn Fn(&Seen) -> bool,
    deadline_ms: u64,
) {
    while rt.monotonic_ms() < deadline_ms && !stop(&seen.borrow()) {
        let polled = c.poll().await;
        let mut s = seen.borrow_mut();
        if let Ok(p) = polled {
            let read = s.read.entry(me).or_default();
            read.extend(p.records.iter().map(|r| (r.record.partition, r.record.offset)));
        }
        s.state.insert(me, (c.generation().1, c.assignment().clone()));
    }
}

/// Every member in one generation, together owning every partition.
fn settled(members: &[usize]) -> impl Fn(&Seen) -> bool + '_ {
    move |s: &Seen| {
        let states: Vec<&(i32, BTreeSet<TopicPartition>)> = members.iter().filter_map(|m| s.state.get(m)).collect();
        let generations: BTreeSet<i32> = states.iter().map(|(g, _)| *g).collect();
        let owned: usize = states.iter().map(|(_, a)| a.len()).sum();
        states.len() == members.len() && generations.len() == 1 && !generations.contains(&-1) && owned == 4
    }
}

fn assert_split(seen: &Seen, members: &[usize]) -> i32 {
    let mut all = BTreeSet::new();
    let mut generation = None;
    for m in members {
        let (g, a) = &seen.state[m];
        assert!(generation.is_none_or(|x| x == *g), "one generation: {:?}", seen.state);
        generation = Some(*g);
        assert!(!a.is_empty(), "member {m} got partitions: {:?}", seen.state);
        for tp in a {
            assert!(all.insert(tp.clone()), "{tp:?} owned twice: {:?}", seen.state);
        }
    }
    assert_eq!(
        all.len(),
        PARTITIONS as usize,
        "every partition owned: {:?}",
        seen.state
    );
    generation.expect("members compared")
}

#[test]
fn two_members_split_the_partitions_and_one_leaving_gives_the_other_all() {
    for assignor in [Assignor::Range, Assignor::RoundRobin] {
        let rt = setup();
        let (mut a, mut b) = (member(&rt, "a", assignor), member(&rt, "b", assignor));
        let seen = RefCell::new(Seen::default());
        let both = settled(&[0, 1]);
        let deadline = rt.monotonic_ms() + 60_000;
        run(
            &rt,
            vec![
                Box::pin(poll_until(&rt, &mut a, 0, &seen, &both, deadline)),
                Box::pin(poll_until(&rt, &mut b, 1, &seen, &both, deadline)),
            ],
        );
        let generation = assert_split(&seen.borrow(), &[0, 1]);
        assert_eq!(
            rt.0.broker.borrow().groups().group("g").map(|g| g.generation),
            Some(generation),
            "the coordinator agrees on the generation"
        );

        // a leaves; b alone owns every partition in a later generation.
        let alone = settled(&[1]);
        let deadline = rt.monotonic_ms() + 60_000;
        seen.borrow_mut().state.clear();
        run(
            &rt,
            vec![
                Box::pin(a.close()),
                Box::pin(poll_until(&rt, &mut b, 1, &seen, &alone, deadline)),
            ],
        );
        let later = assert_split(&seen.borrow(), &[1]);
        assert!(later > generation, "{assignor:?}: {later} after {generation}");
        assert_eq!(a.generation(), ("", -1), "a left");
    }
}

#[test]
fn positions_start_at_the_committed_offset_and_a_fenced_commit_changes_nothing() {
    let rt = setup();
    let mut a = member(&rt, "a", Assignor::Range);
    let seen = RefCell::new(Seen::default());
    let deadline = rt.monotonic_ms() + 60_000;
    run(
        &rt,
        vec![Box::pin(poll_until(&rt, &mut a, 0, &seen, &settled(&[0]), deadline))],
    );
    let (first_member, first_generation) = (a.generation().0.to_string(), a.generation().1);
    let tp0 = TopicPartition::new("t", 0);
    let commit = BTreeMap::from([(tp0.clone(), 3)]);
    let result = RefCell::new(None);
    run(
        &rt,
        vec![Box::pin(async {
            *result.borrow_mut() = Some(a.commit_sync(&commit).await)
        })],
    );
    assert_eq!(result.take(), Some(Ok(())));

    // b joins; the partitions are split again and partition 0 is read from offset 3.
    let mut b = member(&rt, "b", Assignor::Range);
    seen.borrow_mut().read.clear();
    let both = settled(&[0, 1]);
    let deadline = rt.monotonic_ms() + 60_000;
    run(
        &rt,
        vec![
            Box::pin(poll_until(&rt, &mut a, 0, &seen, &both, deadline)),
            Box::pin(poll_until(&rt, &mut b, 1, &seen, &both, deadline)),
        ],
    );
    let second_generation = assert_split(&seen.borrow(), &[0, 1]);
    assert!(second_generation > first_generation);
    let owner_of_0 = if a.assignment().contains(&tp0) { 0 } else { 1 };
    // Poll the owner of partition 0 until it has read it.
    let owner = if owner_of_0 == 0 { &mut a } else { &mut b };
    let got_partition_0 = |s: &Seen| s.read.values().flatten().any(|&(p, _)| p == 0);
    let deadline = rt.monotonic_ms() + 5_000;
    run(
        &rt,
        vec![Box::pin(poll_until(
            &rt,
            owner,
            owner_of_0,
            &seen,
            &got_partition_0,
            deadline,
        ))],
    );
    let offsets_0: Vec<i64> = seen
        .borrow()
        .read
        .values()
        .flatten()
        .filter(|r| r.0 == 0)
        .map(|r| r.1)
        .collect();
    assert_eq!(
        offsets_0,
        [3, 4],
        "read from the committed offset, not from the log start"
    );

    // a commit carrying a's first generation: fenced, nothing changes.
    assert_eq!(
        a.generation().0,
        first_member,
        "a kept its member id across the rebalance"
    );
    a.generation = first_generation;
    let stale = BTreeMap::from([(tp0.clone(), 1)]);
    run(
        &rt,
        vec![Box::pin(async {
            *result.borrow_mut() = Some(a.commit_sync(&stale).await)
        })],
    );
    assert_eq!(
        result.take(),
        Some(Err(ClientError::Broker(ErrorCode::IllegalGeneration)))
    );
    let committed = rt.0.broker.borrow().groups().committed("g", "t", 0).map(|c| c.offset);
    assert_eq!(committed, Some(3), "the fenced commit changed nothing");
    assert!(a.rejoin, "a fenced member rejoins on its next poll");
    assert!(a.assignment().is_empty(), "and its partitions are lost, not revoked");
}

#[test]
fn the_background_heartbeat_keeps_a_slow_member_and_max_poll_interval_removes_it() {
    let rt = setup();
    let mut a = member(&rt, "a", Assignor::Range);
    let seen = RefCell::new(Seen::default());
    let deadline = rt.monotonic_ms() + 60_000;
    run(
        &rt,
        vec![Box::pin(poll_until(&rt, &mut a, 0, &seen, &settled(&[0]), deadline))],
    );
    let (member_id, generation) = (a.generation().0.to_string(), a.generation().1);
    // 15 s of processing without a poll: past session.timeout.ms (10 s), within
    // max.poll.interval.ms (20 s). The heartbeat task keeps the member.
    let sleep = rt.sleep(Duration::from_millis(15_000));
    run(&rt, vec![Box::pin(sleep)]);
    run(&rt, vec![one_poll(&mut a)]);
    assert_eq!(
        a.generation(),
        (member_id.as_str(), generation),
        "still the same member and generation"
    );
    assert_eq!(a.assignment().len(), PARTITIONS as usize);

    // 25 s without a poll: past max.poll.interval.ms, the task leaves the group for it.
    let sleep = rt.sleep(Duration::from_millis(25_000));
    run(&rt, vec![Box::pin(sleep)]);
    assert_eq!(
        rt.0.broker
            .borrow()
            .groups()
            .group("g")
            .map(|g| g.members.len())
            .unwrap_or(0),
        0,
        "the member left"
    );
    run(&rt, vec![one_poll(&mut a)]);
    assert_ne!(a.generation().0, member_id, "it rejoined as a new member");
    assert!(a.generation().1 >= 0, "in a new generation");
}

fn one_poll(c: &mut GroupConsumer<Rt>) -> Task<'_> {
    Box::pin(async move {
        let _ = c.poll().await;
    })
}

/// `poll_with` hands over the records `poll` returns, in the same order, with the same position
/// resets: two members of two groups read the same log, one with each.
#[test]
fn poll_with_hands_over_the_records_poll_returns() {
    let rt = setup();
    // Three records in partition 2 beside setup's five in partition 0: two partitions to read.
    for i in 10..13u8 {
        append(&rt, "t", 2, i);
    }
    let mut a = member(&rt, "a", Assignor::Range);
    let mut b = member(&rt, "b", Assignor::Range);
    b.config.group_id = "h".into();
    type Read = Vec<(String, i32, i64, Option<Vec<u8>>)>;
    let (by_poll, by_with) = (RefCell::new(Read::new()), RefCell::new(Read::new()));
    let (resets_poll, resets_with) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));
    let deadline = rt.monotonic_ms() + 60_000;
    run(
        &rt,
        vec![
            Box::pin(async {
                while rt.monotonic_ms() < deadline && by_poll.borrow().len() < 8 {
                    if let Ok(p) = a.poll().await {
                        let records = p.records.iter().map(|r| {
                            let value = r.record.value.as_deref().map(<[u8]>::to_vec);
                            (r.topic.clone(), r.record.partition, r.record.offset, value)
                        });
                        by_poll.borrow_mut().extend(records);
                        resets_poll.borrow_mut().extend(p.resets);
                    }
                }
            }),
            Box::pin(async {
                while rt.monotonic_ms() < deadline && by_with.borrow().len() < 8 {
                    let polled = b
                        .poll_with(|topic, partition, r| {
                            let value = r.value.map(<[u8]>::to_vec);
                            by_with
                                .borrow_mut()
                                .push((topic.to_string(), partition, r.offset.0, value));
                        })
                        .await;
                    if let Ok(s) = polled {
                        resets_with.borrow_mut().extend(s.resets);
                    }
                }
            }),
        ],
    );
    let by_poll = by_poll.into_inner();
    let by_with = by_with.into_inner();
    let offsets: Vec<(i32, i64)> = by_poll.iter().map(|r| (r.1, r.2)).collect();
    let mut expected: Vec<(i32, i64)> = (0..5).map(|o| (0, o)).chain((0..3).map(|o| (2, o))).collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "poll read both partitions in full, each record once");
    assert_eq!(by_poll[0].3, Some(vec![0]), "with its value");
    assert_eq!(by_with, by_poll, "poll_with handed over what poll returned");
    assert_eq!(resets_with.into_inner(), resets_poll.into_inner());
}

/// A member subscribed to two topics gets one topic's new record without waiting out the other
/// topic's long poll: both topics' Fetches go out together and the poll returns with the first
/// answer. Polling the topics in turn held every poll up by the idle topic's `fetch.max.wait.ms`.
#[test]
fn an_idle_topic_does_not_hold_up_another_topics_records() {
    const WAIT_MS: u64 = 500;
    let rt = setup_with_fetch_wait(WAIT_MS);
    create_idle_topic(&rt);
    let mut a = member(&rt, "a", Assignor::Range);
    a.config.consumer.fetch_max_wait_ms = i32::try_from(WAIT_MS).expect("small");
    // "idle" sorts before "t": a poll that waited for each topic in turn waited for it first.
    a.subscribe(&["t", "idle"], Box::new(NoListener));
    let seen = RefCell::new(Seen::default());
    let everything = |s: &Seen| {
        s.state
            .get(&0)
            .is_some_and(|(g, owned)| *g >= 0 && owned.len() == 2 * PARTITIONS as usize)
            && s.read.get(&0).is_some_and(|r| r.len() == 5)
    };
    let deadline = rt.monotonic_ms() + 60_000;
    run(
        &rt,
        vec![Box::pin(poll_until(&rt, &mut a, 0, &seen, &everything, deadline))],
    );
    assert!(
        everything(&seen.borrow()),
        "settled with both topics, setup's 5 records read: {:?}",
        seen.borrow().state
    );

    // One new record in "t"; the Fetches left in flight are woken as a produce wakes them.
    append(&rt, "t", 1, 42);
    let (started, took, read) = (rt.monotonic_ms(), Cell::new(u64::MAX), RefCell::new(Vec::new()));
    run(
        &rt,
        vec![Box::pin(async {
            while read.borrow().is_empty() && rt.monotonic_ms() < started + 10 * WAIT_MS {
                if let Ok(p) = a.poll().await {
                    let records = p
                        .records
                        .iter()
                        .map(|r| (r.topic.clone(), r.record.partition, r.record.offset));
                    read.borrow_mut().extend(records);
                }
            }
            took.set(rt.monotonic_ms() - started);
        })],
    );
    let (read, took) = (read.into_inner(), took.get());
    println!("read {read:?} {took} ms after it was written (fetch.max.wait.ms {WAIT_MS})");
    assert_eq!(read, vec![("t".to_string(), 1, 0)], "the new record, and nothing else");
    assert!(
        took < WAIT_MS / 2,
        "read {took} ms after it was written: held up by the idle topic's long poll ({WAIT_MS} ms)"
    );
}

/// A second topic, "idle", of [`PARTITIONS`] partitions and no records.
fn create_idle_topic(rt: &Rt) {
    let mut disk = rt.0.disk.borrow_mut();
    rt.0.broker
        .borrow_mut()
        .create_topic(
            &mut *disk,
            "idle",
            PARTITIONS,
            1,
            &[],
            TopicId::from_random(2, 2),
            false,
        )
        .expect("create");
}

/// Consumers of two topics polled together ([`Consumer::poll_all_with`], as one Kafka consumer
/// `assign()`ed partitions of both polls) hand over one topic's new record without waiting out
/// the other's long poll, each record with its consumer's place. Polling them in turn held
/// every poll up by the idle topic's `fetch.max.wait.ms`.
#[test]
fn consumers_polled_together_are_not_held_up_by_an_idle_one() {
    const WAIT_MS: u64 = 500;
    let rt = setup_with_fetch_wait(WAIT_MS);
    create_idle_topic(&rt);
    let config = crate::client::consumer::ConsumerConfig {
        fetch_max_wait_ms: i32::try_from(WAIT_MS).expect("small"),
        reset_to_earliest: true,
        ..Default::default()
    };
    let consumer = |topic: &str| {
        let client = ClientConfig {
            client_id: "reader".into(),
            request_timeout_ms: 5_000,
            retry_backoff_ms: 100,
            sasl: None,
        };
        let cluster = Cluster::new(rt.clone(), vec!["loopback:9092".into()], client);
        let mut c = Consumer::new(cluster, config.clone(), topic);
        for p in 0..PARTITIONS {
            c.assign(p, None);
        }
        c
    };
    // "idle" first: polled in turn, its long poll would come first.
    let (mut idle, mut t) = (consumer("idle"), consumer("t"));
    let read = RefCell::new(Vec::new());
    let mut poll_until = |enough: usize, deadline: u64| {
        let (started, took) = (rt.monotonic_ms(), Cell::new(u64::MAX));
        run(
            &rt,
            vec![Box::pin(async {
                while read.borrow().len() < enough && rt.monotonic_ms() < deadline {
                    let mut both = [&mut idle, &mut t];
                    let polled = Consumer::poll_all_with(&mut both, |i, partition, r| {
                        read.borrow_mut().push((i, partition, r.offset.0));
                    });
                    if polled.await.is_err() {
                        rt.sleep(Duration::from_millis(100)).await;
                    }
                }
                took.set(rt.monotonic_ms() - started);
            })],
        );
        took.get()
    };
    poll_until(5, rt.monotonic_ms() + 60_000);
    let setup: Vec<(usize, i32, i64)> = (0..5).map(|o| (1, 0, o)).collect();
    assert_eq!(*read.borrow(), setup, "setup's five records, of t (place 1)");

    // One new record in "t"; the Fetches left in flight are woken as a produce wakes them.
    append(&rt, "t", 1, 42);
    let took = poll_until(6, rt.monotonic_ms() + 10 * WAIT_MS);
    let new = read.borrow()[5..].to_vec();
    println!("read {new:?} {took} ms after it was written (fetch.max.wait.ms {WAIT_MS})");
    assert_eq!(new, vec![(1, 1, 0)], "the new record, and nothing else");
    assert!(
        took < WAIT_MS / 2,
        "read {took} ms after it was written: held up by the idle topic's long poll ({WAIT_MS} ms)"
    );
}
