//! The follower side of replication on a node: one task that, for every partition this broker
//! follows, asks the partition's leader what [`Broker::follower_tasks`] says (OffsetForLeaderEpoch
//! to truncate, then Fetch with `replica_id` = this broker and `current_leader_epoch`, KIP-320)
//! and hands each answer back to the [`Broker`]. The leader's address comes from the cluster view
//! ([`Broker::set_cluster_view`]).
//!
//! Fault model: a leader may be gone, slow, or answer garbage; each failure drops that leader's
//! connection and backs off, the other leaders carry on. Stale answers (the epoch moved on while
//! a request was out) are ignored by the broker. Fencing errors park the partition until new
//! partition state arrives. One task (and connection) per followed partition; a multi-partition
//! Fetch per leader, as Kafka's fetcher threads send, is the next step.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use crate::broker::{FollowerAction, FollowerTask};
use crate::client::conn::KafkaConn;
use crate::client::{code, ClientError};
use crate::error_code::ErrorCode;
use crate::ids::{BrokerId, LeaderEpoch, Offset};
use crate::protocol::api::fetch::{FetchPartition, FetchRequest, FetchTopic};
use crate::protocol::api::offset_for_leader_epoch::{
    OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use crate::protocol::{Request, Response};
use crate::runtime::Runtime;

use super::throttle::Throttle;
use super::watch::PartitionWatch;
use super::SharedBroker;

/// How the fetcher asks.
#[derive(Clone, Debug)]
pub struct ReplicaFetcherConfig {
    pub client_id: String,
    /// `replica.fetch.wait.max.ms`
    pub fetch_wait_max_ms: i32,
    /// `replica.fetch.max.bytes`
    pub fetch_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: the pause after an error, and between looks when idle.
    pub backoff_ms: u64,
    /// `replica.socket.timeout.ms`
    pub request_timeout_ms: u64,
    /// The node's waiting requests, poked after each answer is applied.
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
            fetch_wait_max_ms: 100,
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
/// per followed partition, each with its own connection to its leader, so a leader that is slow
/// or unreachable stalls only its own partitions, and an idle partition's long-polling Fetch
/// never delays a busy one. (Kafka sends one multi-partition Fetch per leader; that is the next
/// step here, fewer connections for the same independence.)
pub async fn run_replica_fetcher<R: Runtime>(rt: R, broker: SharedBroker, config: ReplicaFetcherConfig) {
    let running: Rc<RefCell<BTreeSet<FetchKey>>> = Rc::default();
    loop {
        let keys: BTreeSet<FetchKey> = broker
            .borrow()
            .follower_tasks()
            .iter()
            .map(|t| (t.leader, t.topic.clone(), t.partition))
            .collect();
        for key in keys {
            if running.borrow_mut().insert(key.clone()) {
                rt.spawn(fetch_partition(
                    rt.clone(),
                    broker.clone(),
                    config.clone(),
                    key,
                    running.clone(),
                ));
            }
        }
        rt.sleep(Duration::from_millis(config.backoff_ms.max(1))).await;
    }
}

/// (leader, topic, partition): what one fetcher task serves.
type FetchKey = (BrokerId, String, i32);

/// Follows one partition under one leader, until the broker no longer follows it there.
async fn fetch_partition<R: Runtime>(
    rt: R,
    broker: SharedBroker,
    config: ReplicaFetcherConfig,
    key: FetchKey,
    running: Rc<RefCell<BTreeSet<FetchKey>>>,
) {
    let mut conns: BTreeMap<BrokerId, KafkaConn<R>> = BTreeMap::new();
    loop {
        let task = broker
            .borrow()
            .follower_tasks()
            .into_iter()
            .find(|t| (t.leader, t.topic.as_str(), t.partition) == (key.0, key.1.as_str(), key.2));
        let Some(task) = task else {
            running.borrow_mut().remove(&key);
            return;
        };
        if let Err(why) = step(&rt, &broker, &config, &mut conns, &task).await {
            tracing::debug!(topic = %task.topic, partition = task.partition, leader = task.leader.0, %why, "replica fetch failed");
            rt.sleep(Duration::from_millis(config.backoff_ms.max(1))).await;
        }
    }
}

/// One request for one partition, and its answer applied. `Err` says why to back off.
async fn step<R: Runtime>(
    rt: &R,
    broker: &SharedBroker,
    config: &ReplicaFetcherConfig,
    conns: &mut BTreeMap<BrokerId, KafkaConn<R>>,
    task: &FollowerTask,
) -> Result<(), String> {
    let (me, addr, adding) = {
        let b = broker.borrow();
        let view = b.cluster_view();
        let addr = view
            .and_then(|v| v.brokers.iter().find(|r| r.id == task.leader))
            .map(|r| format!("{}:{}", r.host, r.port));
        let me = b.config().broker_id;
        // Kafka throttles the replicas a reassignment adds; the others carry the ISR.
        let adding = view
            .and_then(|v| v.topics.get(&task.topic))
            .and_then(|(record, _)| record.reassigning.get(&task.partition))
            .is_some_and(|r| r.adding.contains(&me));
        (me, addr, adding)
    };
    let throttle = config.throttle.as_ref().filter(|_| adding);
    let mut fetch_bytes_max = config.fetch_max_bytes;
    if let (Some(throttle), FollowerAction::Fetch { .. }) = (throttle, task.action) {
        let wait_ms = throttle.borrow_mut().wait_ms(rt.monotonic_ms());
        if wait_ms > 0 {
            rt.sleep(Duration::from_millis(wait_ms)).await;
        }
        fetch_bytes_max = fetch_bytes_max.min(throttle.borrow_mut().fetch_bytes_max(rt.monotonic_ms()));
    }
    let addr = addr.ok_or_else(|| format!("leader {} is not in the cluster view", task.leader.0))?;
    if conns.get(&task.leader).is_none_or(|c| c.addr != addr) {
        let mut conn = KafkaConn::connect(rt, &addr, &config.client_id, config.request_timeout_ms)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(creds) = &config.sasl {
            conn.authenticate(creds)
                .await
                .map_err(|e| format!("inter-broker login: {e}"))?;
        }
        conns.insert(task.leader, conn);
    }
    let conn = conns.get_mut(&task.leader).expect("connected above");
    let request = match task.action {
        FollowerAction::Truncate { epoch } => Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
            replica_id: me.0,
            topics: vec![OffsetForLeaderTopic {
                topic: task.topic.clone(),
                partitions: vec![OffsetForLeaderPartition {
                    partition: task.partition,
                    current_leader_epoch: task.leader_epoch.0,
                    leader_epoch: epoch.0,
                }],
            }],
        }),
        FollowerAction::Fetch { offset } => Request::Fetch(FetchRequest {
            replica_id: me.0,
            max_wait_ms: config.fetch_wait_max_ms,
            min_bytes: 1,
            max_bytes: fetch_bytes_max,
            isolation_level: 0,
            session_id: 0,
            session_epoch: -1,
            topics: vec![FetchTopic {
                topic: task.topic.clone(),
                topic_id: crate::protocol::Uuid::ZERO,
                partitions: vec![FetchPartition {
                    partition: task.partition,
                    current_leader_epoch: task.leader_epoch.0,
                    fetch_offset: offset.0,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: fetch_bytes_max,
                }],
            }],
            forgotten_topics: vec![],
            rack_id: String::new(),
        }),
    };
    let version = match task.action {
        FollowerAction::Truncate { .. } => OFFSET_FOR_LEADER_EPOCH_VERSION,
        FollowerAction::Fetch { .. } => FETCH_VERSION,
    };
    let response = match conn.call(&request, version).await {
        Ok(r) => r,
        Err(e) => {
            conns.remove(&task.leader);
            return Err(e.to_string());
        }
    };
    let now = rt.now_ms();
    let mut code_seen = ErrorCode::None;
    let mut throttle_wait_ms = 0;
    let applied = match (task.action, response) {
        (FollowerAction::Truncate { epoch }, Response::OffsetForLeaderEpoch(resp)) => {
            let p = resp
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition == task.partition)
                .ok_or("the leader's answer lacks the partition")?;
            let answer = if p.error_code != 0 {
                code_seen = code(p.error_code);
                Err(code_seen)
            } else {
                Ok((LeaderEpoch(p.leader_epoch), Offset(p.end_offset)))
            };
            rt.with_disk(|disk| {
                broker.borrow_mut().follower_truncate(
                    disk,
                    &task.topic,
                    task.partition,
                    task.leader_epoch,
                    epoch,
                    answer,
                )
            })
        }
        (FollowerAction::Fetch { offset }, Response::Fetch(resp)) => {
            let p = resp
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition_index == task.partition)
                .ok_or("the leader's answer lacks the partition")?;
            let empty = bytes::Bytes::new();
            if let Some(throttle) = throttle {
                let bytes = p.records.as_ref().map_or(0, |r| r.len() as u64);
                throttle_wait_ms = throttle.borrow_mut().fetched(rt.monotonic_ms(), bytes);
            }
            let result = if p.error_code != 0 {
                code_seen = code(p.error_code);
                Err(code_seen)
            } else {
                Ok((&p.records.as_ref().unwrap_or(&empty)[..], Offset(p.high_watermark)))
            };
            rt.with_disk(|disk| {
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
            })
        }
        (_, other) => {
            conns.remove(&task.leader);
            return Err(ClientError::Protocol(format!("unexpected response {}", other.api_key())).to_string());
        }
    };
    config.watch.poke(&broker.borrow(), &task.topic, task.partition);
    applied.map_err(|e| format!("applying the leader's answer: {e}"))?;
    if code_seen != ErrorCode::None {
        return Err(format!("leader answered {code_seen:?}"));
    }
    if throttle_wait_ms > 0 {
        rt.sleep(Duration::from_millis(throttle_wait_ms)).await;
    }
    Ok(())
}
