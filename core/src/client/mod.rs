//! Gregor's own Kafka client, generic over [`Runtime`]: the simulator's workload runs it, and so
//! will the `gregor` CLI. It speaks only the wire protocol, so it works against any Kafka-protocol
//! broker at the versions it picks.
//!
//! - [`conn`]: one connection, correlation ids, timeouts.
//! - [`Cluster`]: bootstrap, metadata cache, a connection per broker.
//! - [`producer`]: sends with acks, retries and a delivery timeout; reports each send as acked,
//!   failed (certainly not written) or unknown (maybe written).
//! - [`batching`]: the batching producer (Kafka's design): `send()` returns at once, records
//!   accumulate per partition by `batch.size` / `linger.ms` in the [`accumulator`], a sender
//!   task pipelines Produce requests per leader.
//! - [`consumer`]: polls assigned partitions from a position, resetting per
//!   `auto.offset.reset` when the position is out of range.

pub mod accumulator;
pub mod batching;
pub mod conn;
pub mod consumer;
pub mod group;
pub mod partition_list;
pub mod partitioner;
pub mod producer;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::name_map::NameMap;
use crate::protocol::api::create_topics::{CreatableTopic, CreateTopicsRequest, TopicConfig};
use crate::protocol::api::metadata::{MetadataRequest, MetadataRequestTopic, MetadataTopic};
use crate::protocol::{Request, Response, Uuid};
use crate::runtime::Runtime;
use crate::short_eq;
use crate::ErrorCode;
pub use conn::{ClientError, KafkaConn};

/// Versions this client speaks (Gregor's broker supports them; so does Kafka 2.8+).
pub const METADATA_VERSION: i16 = 12;
pub const PRODUCE_VERSION: i16 = 9;
pub const FETCH_VERSION: i16 = 12;
pub const LIST_OFFSETS_VERSION: i16 = 7;
pub const CREATE_TOPICS_VERSION: i16 = 7;
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;
pub const FIND_COORDINATOR_VERSION: i16 = 3;
pub const JOIN_GROUP_VERSION: i16 = 7;
pub const SYNC_GROUP_VERSION: i16 = 5;
pub const HEARTBEAT_VERSION: i16 = 4;
pub const LEAVE_GROUP_VERSION: i16 = 4;
pub const OFFSET_COMMIT_VERSION: i16 = 8;
pub const OFFSET_FETCH_VERSION: i16 = 7;

#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub client_id: String,
    /// `request.timeout.ms`
    pub request_timeout_ms: u64,
    /// `retry.backoff.ms`
    pub retry_backoff_ms: u64,
    /// `sasl.mechanism`, `sasl.username`, `sasl.password`: every connection logs in with them
    /// (SaslHandshake + SaslAuthenticate) before its first request; `None` for PLAINTEXT.
    pub sasl: Option<crate::security::SaslCredentials>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "gregor-client".into(),
            request_timeout_ms: 30_000,
            retry_backoff_ms: 100,
            sasl: None,
        }
    }
}

/// Where each partition of a topic is led, as the last Metadata said.
#[derive(Clone, Debug, Default)]
pub struct TopicLayout {
    /// partition → (leader broker id, leader epoch)
    pub leaders: BTreeMap<i32, (i32, i32)>,
}

/// Bootstrap addresses, the metadata cache and one connection per broker.
pub struct Cluster<R: Runtime> {
    pub rt: R,
    pub config: ClientConfig,
    bootstrap: Vec<String>,
    /// Shared (`Arc<str>`): [`leader`](Self::leader) hands each request its leader's address
    /// without copying it (a `String` clone a request before).
    brokers: BTreeMap<i32, Arc<str>>,
    /// By name in a [`NameMap`]: every send looks its topic up here, and a `BTreeMap` compared
    /// the names with a `memcmp` call (~20 instructions more a send).
    topics: NameMap<TopicLayout>,
    /// The newest leader epoch seen per partition, with the topic id it was seen under. It
    /// survives [`Cluster::invalidate`], so that a Metadata answer from a broker that has not yet
    /// heard of a newer leader (one just back from a partition, still leading in its own view)
    /// cannot send the client back to the old leader: the Java client keeps the same guard
    /// (KIP-320). Without it a consumer fetched from the stale leader, whose log ended below its
    /// position, got OFFSET_OUT_OF_RANGE and reset to the log start (a nonmonotonic poll).
    epochs: BTreeMap<(String, i32), (Uuid, i32)>,
    /// Open connections by address: a list searched in order (a client has one a broker it
    /// talks to), where a map's search cost ~250 instructions a request.
    conns: Vec<(String, KafkaConn<R>)>,
    next_bootstrap: usize,
}

impl<R: Runtime> Cluster<R> {
    pub fn new(rt: R, bootstrap: Vec<String>, config: ClientConfig) -> Self {
        assert!(!bootstrap.is_empty(), "a client needs at least one bootstrap address");
        Cluster {
            rt,
            config,
            bootstrap,
            brokers: BTreeMap::new(),
            topics: NameMap::new(),
            epochs: BTreeMap::new(),
            conns: Vec::new(),
            next_bootstrap: 0,
        }
    }

    /// The bootstrap addresses this cluster was made with.
    pub fn bootstrap(&self) -> &[String] {
        &self.bootstrap
    }

    /// A connection to `addr`, reused while it works.
    pub async fn conn(&mut self, addr: &str) -> Result<&mut KafkaConn<R>, ClientError> {
        let at = match self.conn_at(addr) {
            Some(at) => at,
            None => {
                let conn = KafkaConn::connect_as(&self.rt, addr, &self.config).await?;
                self.conns.push((addr.to_string(), conn));
                self.conns.len() - 1
            }
        };
        Ok(&mut self.conns[at].1)
    }

    /// Takes the open connection to `addr` out, for a request that may outlive the borrow of
    /// the cluster (a consumer's Fetch); [`put_conn`](Self::put_conn) gives it back.
    pub fn take_conn(&mut self, addr: &str) -> Option<KafkaConn<R>> {
        let at = self.conn_at(addr)?;
        Some(self.conns.swap_remove(at).1)
    }

    /// Gives back a connection [`take_conn`](Self::take_conn) took, unless another to `addr`
    /// was opened meanwhile (then it is closed: one a broker).
    pub fn put_conn(&mut self, addr: &str, conn: KafkaConn<R>) {
        if self.conn_at(addr).is_none() {
            self.conns.push((addr.to_string(), conn));
        }
    }

    /// Forgets a connection after an error (a late reply must not answer the next request).
    pub fn drop_conn(&mut self, addr: &str) {
        if let Some(at) = self.conn_at(addr) {
            self.conns.swap_remove(at);
        }
    }

    /// Where the open connection to `addr` is in `conns`.
    fn conn_at(&self, addr: &str) -> Option<usize> {
        self.conns.iter().position(|(a, _)| short_eq::same(a, addr))
    }

    /// Calls any broker (bootstrap addresses first, in turn).
    pub async fn call_any(&mut self, request: &Request, version: i16) -> Result<Response, ClientError> {
        let mut addrs: Vec<String> = self.bootstrap.clone();
        addrs.extend(self.brokers.values().map(|a| a.to_string()));
        let start = self.next_bootstrap;
        self.next_bootstrap = self.next_bootstrap.wrapping_add(1);
        let mut last = ClientError::Protocol("no broker to ask".into());
        for i in 0..addrs.len() {
            let addr = addrs[(start + i) % addrs.len()].clone();
            let result = match self.conn(&addr).await {
                Ok(conn) => conn.call(request, version).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(response) => return Ok(response),
                Err(e) => {
                    self.drop_conn(&addr);
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// Refreshes metadata for `topic`, auto-creating it if the broker allows.
    pub async fn refresh(&mut self, topic: &str) -> Result<&TopicLayout, ClientError> {
        let request = Request::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                topic_id: Uuid::ZERO,
                name: Some(topic.to_string()),
            }]),
            allow_auto_topic_creation: true,
            include_cluster_authorized_operations: false,
            include_topic_authorized_operations: false,
        });
        let Response::Metadata(meta) = self.call_any(&request, METADATA_VERSION).await? else {
            return Err(ClientError::Protocol("Metadata answered with another API".into()));
        };
        for b in &meta.brokers {
            self.brokers.insert(b.node_id, format!("{}:{}", b.host, b.port).into());
        }
        let t = meta
            .topics
            .iter()
            .find(|t| t.name.as_deref() == Some(topic))
            .ok_or_else(|| ClientError::Protocol(format!("metadata lacks topic {topic}")))?;
        if t.error_code != 0 {
            return Err(ClientError::Broker(code(t.error_code)));
        }
        let layout = layout_guarded(&mut self.epochs, topic, t);
        self.topics.insert(topic, layout);
        Ok(self.topics.get(topic).expect("inserted above"))
    }

    /// The address of the leader of `topic`/`partition`, from the cache or a refresh.
    pub async fn leader(&mut self, topic: &str, partition: i32) -> Result<(Arc<str>, i32), ClientError> {
        let cached = self.topics.get(topic).and_then(|t| t.leaders.get(&partition)).copied();
        let (leader, epoch) = match cached {
            Some(l) => l,
            None => *self
                .refresh(topic)
                .await?
                .leaders
                .get(&partition)
                .ok_or(ClientError::Broker(ErrorCode::UnknownTopicOrPartition))?,
        };
        let Some(addr) = self.brokers.get(&leader).cloned() else {
            // Offline (leader -1) or a leader the last Metadata did not list: forget the layout
            // so the next call asks again, rather than failing on the cached answer forever.
            self.invalidate(topic);
            return Err(ClientError::Broker(ErrorCode::LeaderNotAvailable));
        };
        Ok((addr, epoch))
    }

    /// The address of the leader of `topic`/`partition` when the cache knows the leader and its
    /// broker: what [`leader`](Self::leader) answers at once, without a request or an error.
    pub fn cached_leader(&self, topic: &str, partition: i32) -> Option<&str> {
        let (leader, _) = self.topics.get(topic)?.leaders.get(&partition)?;
        self.brokers.get(leader).map(|a| &**a)
    }

    /// Forgets what is known of `topic` (after NOT_LEADER and the like).
    pub fn invalidate(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// Creates a topic; `Ok` also when it already exists.
    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(&str, &str)],
    ) -> Result<(), ClientError> {
        let request = Request::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.to_string(),
                num_partitions: partitions,
                replication_factor,
                assignments: vec![],
                configs: configs
                    .iter()
                    .map(|(k, v)| TopicConfig {
                        name: k.to_string(),
                        value: Some(v.to_string()),
                    })
                    .collect(),
            }],
            timeout_ms: 30_000,
            validate_only: false,
        });
        let Response::CreateTopics(resp) = self.call_any(&request, CREATE_TOPICS_VERSION).await? else {
            return Err(ClientError::Protocol("CreateTopics answered with another API".into()));
        };
        match resp.topics.first().map(|t| (t.error_code, t.error_message.clone())) {
            Some((0, _)) => Ok(()),
            Some((c, _)) if c == ErrorCode::TopicAlreadyExists.code() => Ok(()),
            Some((c, message)) => Err(ClientError::Protocol(format!(
                "CreateTopics {name}: error {c}: {}",
                message.unwrap_or_default()
            ))),
            None => Err(ClientError::Protocol("CreateTopics answered for no topic".into())),
        }
    }
}

/// The layout a Metadata answer gives `topic`, except that a partition whose leader epoch is older
/// than the newest seen for it (same topic id) is offline (leader -1) rather than sent back to an
/// old leader; `epochs` keeps the newest epoch per partition.
fn layout_guarded(epochs: &mut BTreeMap<(String, i32), (Uuid, i32)>, topic: &str, t: &MetadataTopic) -> TopicLayout {
    let mut leaders = BTreeMap::new();
    for p in &t.partitions {
        let key = (topic.to_string(), p.partition_index);
        let stale = match epochs.get(&key) {
            // A recreated topic (another id) starts its epochs again.
            Some(&(id, newest)) => id == t.topic_id && p.leader_epoch < newest,
            None => false,
        };
        if stale {
            // Offline until a broker that knows the newer leader answers (the next refresh asks
            // another broker first).
            tracing::debug!(
                topic,
                partition = p.partition_index,
                epoch = p.leader_epoch,
                "stale metadata: an older leader epoch than already seen"
            );
            leaders.insert(p.partition_index, (-1, p.leader_epoch));
            continue;
        }
        if p.leader_epoch >= 0 {
            epochs.insert(key, (t.topic_id, p.leader_epoch));
        }
        leaders.insert(p.partition_index, (p.leader_id, p.leader_epoch));
    }
    TopicLayout { leaders }
}

/// An error code off the wire as [`ErrorCode`] (unknown codes become UNKNOWN_SERVER_ERROR).
pub fn code(raw: i16) -> ErrorCode {
    ErrorCode::from_code(raw).unwrap_or(ErrorCode::UnknownServerError)
}

#[cfg(test)]
mod metadata_guard_tests {
    use super::*;
    use crate::protocol::api::metadata::MetadataPartition;

    fn topic(id: u8, partitions: &[(i32, i32, i32)]) -> MetadataTopic {
        MetadataTopic {
            name: Some("t".into()),
            topic_id: Uuid([id; 16]),
            partitions: partitions
                .iter()
                .map(|&(partition_index, leader_id, leader_epoch)| MetadataPartition {
                    partition_index,
                    leader_id,
                    leader_epoch,
                    ..MetadataPartition::default()
                })
                .collect(),
            ..MetadataTopic::default()
        }
    }

    #[test]
    fn an_older_leader_epoch_never_takes_a_client_back_to_an_old_leader() {
        let mut epochs = BTreeMap::new();
        let first = layout_guarded(&mut epochs, "t", &topic(1, &[(0, 1, 3), (1, 2, 0)]));
        assert_eq!(first.leaders, BTreeMap::from([(0, (1, 3)), (1, (2, 0))]));
        // Broker 0 comes back from a partition still believing it leads partition 0 at epoch 2.
        let stale = layout_guarded(&mut epochs, "t", &topic(1, &[(0, 0, 2), (1, 2, 0)]));
        println!("stale answer gives {:?}", stale.leaders);
        assert_eq!(stale.leaders.get(&0), Some(&(-1, 2)), "the stale leader is not used");
        assert_eq!(
            stale.leaders.get(&1),
            Some(&(2, 0)),
            "partitions without news are unaffected"
        );
        // A newer (or the same) epoch is taken.
        let newer = layout_guarded(&mut epochs, "t", &topic(1, &[(0, 2, 4)]));
        assert_eq!(newer.leaders.get(&0), Some(&(2, 4)));
        let same = layout_guarded(&mut epochs, "t", &topic(1, &[(0, 2, 4)]));
        assert_eq!(same.leaders.get(&0), Some(&(2, 4)));
        // The topic deleted and created again (another id) starts from epoch 0.
        let recreated = layout_guarded(&mut epochs, "t", &topic(2, &[(0, 0, 0)]));
        assert_eq!(recreated.leaders.get(&0), Some(&(0, 0)));
    }
}

#[cfg(test)]
mod batching_tests;
#[cfg(test)]
mod loopback_tests;

/// A future kept with what it is for, polled by [`take_ready`].
pub(crate) type Pending<M, O> = (M, Pin<Box<dyn Future<Output = O>>>);

/// Polls each of `pending` once, in the list's order, with the caller's context, and takes out
/// every one done, with its output, in that order; the others stay in the list, to be polled
/// again when the task wakes. Polling in order (core has no `futures` crate) makes the order of
/// their steps a function of the wake-ups alone: runs stay deterministic.
pub(crate) fn take_ready<M, O>(pending: &mut Vec<Pending<M, O>>, cx: &mut Context<'_>) -> Vec<(M, O)> {
    let mut done = Vec::new();
    let mut at = 0;
    while at < pending.len() {
        match pending[at].1.as_mut().poll(cx) {
            Poll::Ready(out) => {
                let (meta, _) = pending.remove(at);
                done.push((meta, out));
            }
            Poll::Pending => at += 1,
        }
    }
    done
}

#[cfg(test)]
mod take_ready_tests {
    use std::cell::Cell;
    use std::future::Future;
    use std::pin::Pin;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};

    use super::{take_ready, Pending};

    /// Ready with `value` at its `polls`-th poll, logging each poll; wakes itself until then.
    struct After {
        polls: u32,
        value: char,
        log: Rc<Cell<u32>>,
    }

    impl Future for After {
        type Output = char;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<char> {
            self.log.set(self.log.get() + 1);
            self.polls -= 1;
            if self.polls == 0 {
                Poll::Ready(self.value)
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    /// Polls the list with `take_ready` until something is done, as a task woken each round
    /// would; what came out and the rounds it took.
    fn run(pending: &mut Vec<Pending<usize, char>>) -> (Vec<(usize, char)>, u32) {
        let mut cx = Context::from_waker(Waker::noop());
        for rounds in 1..=100 {
            let done = take_ready(pending, &mut cx);
            if !done.is_empty() {
                return (done, rounds);
            }
        }
        panic!("nothing done in 100 rounds");
    }

    /// Done with the first to finish (and every other done in the same round), the rest kept
    /// for the next call; each polled until it is done and never after.
    #[test]
    fn the_first_done_come_out_the_rest_stay_for_later() {
        let log: Vec<Rc<Cell<u32>>> = (0..4).map(|_| Rc::new(Cell::new(0))).collect();
        let mut pending: Vec<Pending<usize, char>> = [(3, 'a'), (2, 'b'), (5, 'c'), (2, 'd')]
            .into_iter()
            .enumerate()
            .map(|(i, (polls, value))| -> Pending<usize, char> {
                let log = log[i].clone();
                (i, Box::pin(After { polls, value, log }))
            })
            .collect();
        let (out, rounds) = run(&mut pending);
        assert_eq!(
            out,
            vec![(1, 'b'), (3, 'd')],
            "both done in round 2, in the list's order"
        );
        assert_eq!(rounds, 2, "done when the quickest is");
        assert_eq!(pending.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 2]);
        let (out, rounds) = run(&mut pending);
        assert_eq!((out, rounds), (vec![(0, 'a')], 1), "the rest go on where they were");
        let (out, rounds) = run(&mut pending);
        assert_eq!((out, rounds), (vec![(2, 'c')], 2));
        assert!(pending.is_empty());
        let polls: Vec<u32> = log.iter().map(|l| l.get()).collect();
        assert_eq!(polls, vec![3, 2, 5, 2], "none polled after it finished");
    }
}
