//! The follower side of replication on a node: for every leader this broker follows partitions
//! of, one task and one connection (Kafka's `ReplicaFetcherThread` per source broker) that asks
//! the leader what [`Broker::follower_tasks`] says for all of them at once: one
//! OffsetForLeaderEpoch for the partitions that must truncate, then one Fetch (`replica_id` = this
//! broker, `current_leader_epoch` per partition, KIP-320) for the partitions that fetch, and hands
//! each partition's answer back to the [`Broker`]. The leader's address comes from the cluster
//! view ([`Broker::set_cluster_view`]).
//!
//! Fault model: a leader may be gone, slow, or answer garbage; a failed request drops that
//! leader's connection and backs off, the other leaders carry on. A partition the leader answers
//! with an error (or leaves out) sits out the next requests for `replica.fetch.backoff.ms` (Kafka
//! delays such a partition the same way) while the leader's other partitions keep fetching: a
//! leader answers a Fetch at once when any partition has an error, so without the pause one bad
//! partition would spin the whole request. Stale answers (the epoch moved on while a request
//! was out) are ignored by the broker. Fencing errors park the partition until new partition
//! state arrives.
//!
//! Independence: a leader answers the Fetch as soon as any of its partitions has a record
//! (`min_bytes` 1), so an idle partition does not hold back a busy one of the same leader; a
//! partition that starts following a leader joins that leader's next request, after the one in
//! flight (at most `replica.fetch.wait.max.ms`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::broker::partition_key::PartitionKey;
use crate::broker::{FollowerAction, FollowerHosted, FollowerTask};
use crate::client::conn::KafkaConn;
use crate::client::{code, ClientError};
use crate::ids::{BrokerId, LeaderEpoch, Offset};
use crate::log::LogError;
use crate::protocol::api::fetch::{FetchPartition, FetchRequest, FetchTopic};
use crate::protocol::api::offset_for_leader_epoch::{
    OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use crate::protocol::{shared_name, Request, Response};
use crate::runtime::Runtime;
use crate::short_eq;

use super::throttle::Throttle;
use super::watch::PartitionWatch;
use super::SharedBroker;

/// How the fetcher asks.
#[derive(Clone, Debug)]
pub struct ReplicaFetcherConfig {
    pub client_id: String,
    /// `replica.fetch.wait.max.ms` (Kafka's 500 by default): how long an idle follower's fetch
    /// waits at the leader. New data, a high watermark move or a change of leadership answers it
    /// sooner ([`PartitionWatch`]), so this bounds only the idle cost, and how long a partition
    /// sitting out an error waits for the next request.
    pub fetch_wait_max_ms: i32,
    /// `replica.fetch.max.bytes`
    pub fetch_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: the pause after an error. (The manager that starts fetchers
    /// waits for new partition state instead; see [`run_replica_fetcher`].)
    pub backoff_ms: u64,
    /// `replica.socket.timeout.ms`
    pub request_timeout_ms: u64,
    /// The node's waiting requests, poked after each answer is applied. The fetcher manager
    /// waits on it for the poke that follows new partition state, so it must be the watch the
    /// node's cluster task pokes (with another, fetchers start only at the manager's recheck).
    pub watch: PartitionWatch,
    /// The login on a leader's SASL listener (inter-broker credentials).
    pub sasl: Option<crate::security::SaslCredentials>,
    /// `follower.replication.throttled.rate`, shared by every task of this broker: caps the
    /// fetches of partitions a reassignment is adding this broker to (and only those).
    pub throttle: Option<Rc<RefCell<Throttle>>>,
}

impl Default for ReplicaFetcherConfig {
    fn default() -> Self {
        ReplicaFetcherConfig {
            client_id: "replica-fetcher".into(),
            fetch_wait_max_ms: 500,
            fetch_max_bytes: 1 << 20,
            backoff_ms: 50,
            // Below Kafka's 30 s: a request stuck on a dead leader delays this leader's task
            // until it gives up, and a partition whose leadership returns to it waits as long.
            request_timeout_ms: 10_000,
            watch: PartitionWatch::default(),
            sasl: None,
            throttle: None,
        }
    }
}

/// The Fetch version the fetcher speaks (names topics; v13 would name them by id).
const FETCH_VERSION: i16 = 12;
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;

/// Runs the replica fetcher for as long as the node lives (spawn it in cluster mode): one task
/// per leader this broker follows partitions of, each with its own connection, so a leader that
/// is slow or unreachable stalls only its own partitions.
pub async fn run_replica_fetcher<R: Runtime>(rt: R, broker: SharedBroker, config: ReplicaFetcherConfig) {
    let running: Rc<RefCell<BTreeSet<BrokerId>>> = Rc::default();
    loop {
        let leaders = broker.borrow().followed_leaders();
        for leader in leaders {
            if running.borrow_mut().insert(leader) {
                rt.spawn(fetch_from_leader(
                    rt.clone(),
                    broker.clone(),
                    config.clone(),
                    leader,
                    running.clone(),
                ));
            }
        }
        // This broker starts following a leader only when it applies partition state, and the
        // cluster task pokes every waiter right after each state it applies: woken then, as
        // Kafka's fetcher manager adds fetchers when a LeaderAndIsr or metadata change arrives,
        // rather than looking every `replica.fetch.backoff.ms` (50 ms: a batched seed of the
        // benchmark woke this loop ~2,500 times, 2.4% of its instructions; BENCHMARKS.md). The
        // recheck is a backstop for a path that changes roles without a poke.
        config
            .watch
            .wait(Vec::new(), rt.sleep(Duration::from_millis(MANAGER_RECHECK_MS)))
            .await;
    }
}

/// The longest the fetcher manager waits without a poke before it looks at the leaders again.
const MANAGER_RECHECK_MS: u64 = 1_000;

/// (topic, partition).
type PartitionName = (String, i32);

/// One leader's fetcher: its connection, the partitions sitting out after an error, and the
/// turn of the throttled partitions.
struct LeaderFetcher<R: Runtime> {
    leader: BrokerId,
    conn: Option<KafkaConn<R>>,
    /// The leader's registered (host, port) that `conn` was opened to.
    conn_to: (String, i32),
    /// Partition -> the monotonic ms before which it is left out of requests.
    delayed: BTreeMap<PartitionName, u64>,
    /// Which throttled partition goes next (one per request, see [`LeaderFetcher::fetch`]).
    throttled_turn: usize,
    /// The topic name the last request carried, shared by the next (see [`shared_name`]).
    topic_name: Option<Arc<str>>,
}

/// Pokes the node's waiters for `task`'s partition after the broker applied the leader's answer
/// to it: a follower's log end or high watermark may have moved. The broker said whether it has
/// the partition (a failed apply was of one it has), so the poke asks it nothing when nobody
/// waits on the partition.
fn poke(
    config: &ReplicaFetcherConfig,
    broker: &SharedBroker,
    task: &FollowerTask,
    applied: &Result<FollowerHosted, LogError>,
) {
    let hosted = applied.as_ref().map_or(true, |h| h.0);
    config
        .watch
        .poke_hosted(&broker.borrow(), &task.topic, task.partition, hosted);
}

/// Follows every partition this broker follows under `leader`, until it follows none there.
async fn fetch_from_leader<R: Runtime>(
    rt: R,
    broker: SharedBroker,
    config: ReplicaFetcherConfig,
    leader: BrokerId,
    running: Rc<RefCell<BTreeSet<BrokerId>>>,
) {
    let mut fetcher = LeaderFetcher {
        leader,
        conn: None,
        conn_to: (String::new(), 0),
        delayed: BTreeMap::new(),
        throttled_turn: 0,
        topic_name: None,
    };
    // Refilled every round (see `follower_tasks_into`).
    let mut ready: Vec<FollowerTask> = Vec::new();
    loop {
        broker.borrow().follower_tasks_into(Some(leader), &mut ready);
        if ready.is_empty() {
            running.borrow_mut().remove(&leader);
            return;
        }
        let now = rt.monotonic_ms();
        fetcher.delayed.retain(|_, until| *until > now);
        // The tasks less those sitting out, in place: a list of the rest was an allocation a
        // request, for nearly always all of them.
        if !fetcher.delayed.is_empty() {
            ready.retain(|t| {
                !fetcher
                    .delayed
                    .contains_key(&(t.topic.as_str(), t.partition) as &dyn PartitionKey)
            });
        }
        if ready.is_empty() {
            let next = fetcher.delayed.values().min().copied().unwrap_or(now + 1);
            rt.sleep(Duration::from_millis(next.saturating_sub(now).max(1))).await;
            continue;
        }
        if let Err(why) = fetcher.step(&rt, &broker, &config, &ready).await {
            tracing::debug!(leader = leader.0, partitions = ready.len(), %why, "replica fetch failed");
            rt.sleep(Duration::from_millis(config.backoff_ms.max(1))).await;
        }
    }
}

impl<R: Runtime> LeaderFetcher<R> {
    /// One request for the ready partitions (truncation first: OffsetForLeaderEpoch for those
    /// that must truncate, else Fetch for the others), and its answers applied. `Err` says why the
    /// whole leader backs off.
    async fn step(
        &mut self,
        rt: &R,
        broker: &SharedBroker,
        config: &ReplicaFetcherConfig,
        ready: &[FollowerTask],
    ) -> Result<(), String> {
        let (me, moved) = {
            let b = broker.borrow();
            let to = b
                .cluster_view()
                .and_then(|v| v.brokers.iter().find(|r| r.id == self.leader))
                .map(|r| (r.host.as_str(), r.port))
                .ok_or_else(|| format!("leader {} is not in the cluster view", self.leader.0))?;
            // A registration that moved drops the connection; the address is compared with
            // the one the connection was opened to, not formatted (or parsed) for every request.
            let same = self.conn.is_some() && self.conn_to.1 == to.1 && self.conn_to.0 == to.0;
            if !same {
                self.conn_to = (to.0.to_string(), to.1);
            }
            (b.config().broker_id, (!same).then(|| format!("{}:{}", to.0, to.1)))
        };
        if let Some(addr) = moved {
            self.conn = None;
            let mut conn = KafkaConn::connect(rt, &addr, &config.client_id, config.request_timeout_ms)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(creds) = &config.sasl {
                conn.authenticate(creds)
                    .await
                    .map_err(|e| format!("inter-broker login: {e}"))?;
            }
            self.conn = Some(conn);
        }
        let truncating: Vec<&FollowerTask> = ready
            .iter()
            .filter(|t| matches!(t.action, FollowerAction::Truncate { .. }))
            .collect();
        if truncating.is_empty() {
            self.fetch(rt, broker, config, me, ready).await
        } else {
            self.truncate(rt, broker, config, me, &truncating).await
        }
    }

    /// Sends `request` on the connection; a failed call drops the connection.
    async fn call(&mut self, request: &Request, version: i16) -> Result<Response, String> {
        let conn = self.conn.as_mut().ok_or("not connected")?;
        match conn.call(request, version).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.conn = None;
                Err(e.to_string())
            }
        }
    }

    /// Leaves a partition out of the next requests for the backoff.
    fn delay(&mut self, rt: &R, config: &ReplicaFetcherConfig, task: &FollowerTask, why: &str) {
        tracing::debug!(topic = %task.topic, partition = task.partition, leader = self.leader.0, why, "replica fetch of a partition failed");
        let until = rt.monotonic_ms().saturating_add(config.backoff_ms.max(1));
        self.delayed.insert((task.topic.clone(), task.partition), until);
    }

    async fn truncate(
        &mut self,
        rt: &R,
        broker: &SharedBroker,
        config: &ReplicaFetcherConfig,
        me: BrokerId,
        tasks: &[&FollowerTask],
    ) -> Result<(), String> {
        let mut topics: Vec<OffsetForLeaderTopic> = Vec::new();
        for task in tasks {
            let FollowerAction::Truncate { epoch } = task.action else {
                continue;
            };
            let partition = OffsetForLeaderPartition {
                partition: task.partition,
                current_leader_epoch: task.leader_epoch.0,
                leader_epoch: epoch.0,
            };
            match topics.last_mut().filter(|t| short_eq::same(&t.topic, &task.topic)) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(OffsetForLeaderTopic {
                    topic: task.topic.clone(),
                    partitions: vec![partition],
                }),
            }
        }
        let request = Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
            replica_id: me.0,
            topics,
        });
        let resp = match self.call(&request, OFFSET_FOR_LEADER_EPOCH_VERSION).await? {
            Response::OffsetForLeaderEpoch(resp) => resp,
            other => {
                self.conn = None;
                return Err(ClientError::Protocol(format!("unexpected response {}", other.api_key())).to_string());
            }
        };
        for task in tasks {
            let FollowerAction::Truncate { epoch } = task.action else {
                continue;
            };
            let Some(p) = resp
                .topics
                .iter()
                .filter(|t| short_eq::same(&t.topic, &task.topic))
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition == task.partition)
            else {
                self.delay(rt, config, task, "the leader's answer lacks the partition");
                continue;
            };
            let answer = if p.error_code != 0 {
                Err(code(p.error_code))
            } else {
                Ok((LeaderEpoch(p.leader_epoch), Offset(p.end_offset)))
            };
            let applied = rt.with_disk(|disk| {
                broker.borrow_mut().follower_truncate(
                    disk,
                    &task.topic,
                    task.partition,
                    task.leader_epoch,
                    epoch,
                    answer,
                )
            });
            poke(config, broker, task, &applied);
            if let Err(e) = applied {
                self.delay(rt, config, task, &format!("applying the leader's answer: {e}"));
            } else if let Err(code) = answer {
                self.delay(rt, config, task, &format!("leader answered {code:?}"));
            }
        }
        Ok(())
    }

    /// One Fetch for every ready partition. Of the partitions a reassignment is adding this
    /// broker to (throttled by `follower.replication.throttled.rate`), at most one rides each
    /// request, first in it (so the leader returns at least one whole batch of it, KIP-74), asking
    /// what the bucket holds; none while the bucket is in debt. The others are never throttled:
    /// they carry the ISR and the producers' acks=all.
    async fn fetch(
        &mut self,
        rt: &R,
        broker: &SharedBroker,
        config: &ReplicaFetcherConfig,
        me: BrokerId,
        ready: &[FollowerTask],
    ) -> Result<(), String> {
        // The partitions a reassignment adds here, when adding is throttled (else none).
        let mut throttled: Vec<&FollowerTask> = Vec::new();
        if config.throttle.is_some() {
            let b = broker.borrow();
            let view = b.cluster_view();
            for task in ready {
                let adding = view
                    .and_then(|v| v.topics.get(&task.topic))
                    .and_then(|(record, _)| record.reassigning.get(&task.partition))
                    .is_some_and(|r| r.adding.contains(&me));
                if adding {
                    throttled.push(task);
                }
            }
        }
        // (task, partition_max_bytes), the throttled one (if any) first.
        let mut asked: Vec<(&FollowerTask, i32)> = Vec::with_capacity(ready.len());
        let mut throttle_wait_ms = 0;
        if let (Some(throttle), false) = (&config.throttle, throttled.is_empty()) {
            let mut bucket = throttle.borrow_mut();
            throttle_wait_ms = bucket.wait_ms(rt.monotonic_ms());
            if throttle_wait_ms == 0 {
                let task = throttled[self.throttled_turn % throttled.len()];
                self.throttled_turn = self.throttled_turn.wrapping_add(1);
                let max = config.fetch_max_bytes.min(bucket.fetch_bytes_max(rt.monotonic_ms()));
                asked.push((task, max));
            }
        }
        // The others, in order (no list of them first: an allocation a request).
        let plain = ready.iter().filter(|t| !throttled.iter().any(|x| std::ptr::eq(*x, *t)));
        asked.extend(plain.map(|t| (t, config.fetch_max_bytes)));
        if asked.is_empty() {
            // Only throttled partitions, and the bucket is in debt.
            rt.sleep(Duration::from_millis(throttle_wait_ms.max(1))).await;
            return Ok(());
        }
        let throttled_task = (!throttled.is_empty() && throttle_wait_ms == 0).then(|| asked[0].0);
        // Nearly always one topic: room for it from the start (growing from empty cost a call
        // into the allocator's slow path a request).
        let mut topics: Vec<FetchTopic> = Vec::with_capacity(1);
        for (task, max) in &asked {
            let FollowerAction::Fetch { offset } = task.action else {
                continue;
            };
            let partition = FetchPartition {
                partition: task.partition,
                current_leader_epoch: task.leader_epoch.0,
                fetch_offset: offset.0,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: *max,
            };
            match topics.last_mut().filter(|t| short_eq::same(&t.topic, &task.topic)) {
                Some(t) => t.partitions.push(partition),
                None => {
                    // Room for the rest of the asked partitions: a leader's partitions are
                    // mostly of one topic (a `vec![partition]` grew at the second).
                    let mut partitions = Vec::with_capacity(asked.len());
                    partitions.push(partition);
                    topics.push(FetchTopic {
                        topic: shared_name(&mut self.topic_name, &task.topic),
                        topic_id: crate::protocol::Uuid::ZERO,
                        partitions,
                    });
                }
            }
        }
        let request = Request::Fetch(FetchRequest {
            replica_id: me.0,
            max_wait_ms: config.fetch_wait_max_ms,
            min_bytes: 1,
            max_bytes: config.fetch_max_bytes,
            isolation_level: 0,
            session_id: 0,
            session_epoch: -1,
            topics,
            forgotten_topics: vec![],
            rack_id: String::new(),
        });
        let resp = match self.call(&request, FETCH_VERSION).await? {
            Response::Fetch(resp) => resp,
            other => {
                self.conn = None;
                return Err(ClientError::Protocol(format!("unexpected response {}", other.api_key())).to_string());
            }
        };
        let now = rt.now_ms();
        let empty = bytes::Bytes::new();
        for (task, _) in &asked {
            let FollowerAction::Fetch { offset } = task.action else {
                continue;
            };
            let Some(p) = resp
                .topics
                .iter()
                .filter(|t| short_eq::same(&t.topic, &task.topic))
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition_index == task.partition)
            else {
                self.delay(rt, config, task, "the leader's answer lacks the partition");
                continue;
            };
            if let (Some(throttle), Some(t)) = (&config.throttle, throttled_task) {
                if std::ptr::eq(t, *task) {
                    let bytes = p.records.as_ref().map_or(0, |r| r.len() as u64);
                    throttle.borrow_mut().fetched(rt.monotonic_ms(), bytes);
                }
            }
            let result = if p.error_code != 0 {
                Err(code(p.error_code))
            } else {
                Ok((&p.records.as_ref().unwrap_or(&empty)[..], Offset(p.high_watermark)))
            };
            let applied = rt.with_disk(|disk| {
                broker.borrow_mut().follower_fetched(
                    disk,
                    &task.topic,
                    task.partition,
                    task.leader_epoch,
                    offset,
                    result,
                    Offset(p.log_start_offset),
                    now,
                )
            });
            poke(config, broker, task, &applied);
            if let Err(e) = applied {
                self.delay(rt, config, task, &format!("applying the leader's answer: {e}"));
            } else if p.error_code != 0 {
                let why = format!("leader answered {:?}", code(p.error_code));
                self.delay(rt, config, task, &why);
            }
        }
        Ok(())
    }
}
