//! The group consumer: subscribes to topics and shares their partitions with the other members
//! of a consumer group through the broker's group coordinator, with Kafka's classic (eager)
//! protocol, so Gregor's client and real Kafka clients can be members of one group.
//!
//! Contract, as Kafka's Java consumer:
//! - `poll` drives everything: it finds the coordinator, joins (JoinGroup, rejoining with the id
//!   a MEMBER_ID_REQUIRED answer gives), the leader assigns with the chosen assignor
//!   ([`assignor`]), SyncGroup hands out the assignment. A background task ([`heartbeat`],
//!   spawned on the runtime) heartbeats every `heartbeat.interval.ms`; an answer
//!   REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID makes the next poll rejoin.
//!   An application that does not poll for `max.poll.interval.ms` is made to leave the group by
//!   that task (its partitions are lost, not revoked), as in Kafka.
//! - Before a rejoin gives partitions up, [`RebalanceListener::on_partitions_revoked`] runs
//!   while the old generation is still valid: what it returns is committed then. Partitions
//!   lost without a valid generation (fenced, expired) go to `on_partitions_lost`: no commit is
//!   possible. After SyncGroup, `on_partitions_assigned`; the new partitions start from their
//!   committed offsets (OffsetFetch), else `auto.offset.reset`.
//! - `enable.auto.commit`: every `auto.commit.interval.ms`, `poll` first commits the positions
//!   the previous poll returned up to, before the application processed them (Kafka's
//!   semantics: with processing handed off elsewhere, a crash after the commit loses records),
//!   and again before partitions are revoked and on `close`.
//! - `commit_sync` waits for the answer and reports it; a commit from a fenced generation gets
//!   ILLEGAL_GENERATION (or UNKNOWN_MEMBER_ID) and changes nothing. `commit_async` makes one
//!   attempt and only logs a failure.
//!
//! Fault model: the coordinator may move, die or answer late; every loop here is bounded, and
//! errors come back to the caller of `poll`, who polls again.

pub mod assignor;
pub mod heartbeat;

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

pub use assignor::{Assignor, TopicPartition};

use super::consumer::{Answers, Consumer, ConsumerConfig, ConsumerRecord, Tally};
use super::{
    code, ClientError, Cluster, FIND_COORDINATOR_VERSION, JOIN_GROUP_VERSION, LEAVE_GROUP_VERSION,
    OFFSET_COMMIT_VERSION, OFFSET_FETCH_VERSION, SYNC_GROUP_VERSION,
};
use crate::protocol::api::find_coordinator::{FindCoordinatorRequest, KEY_TYPE_GROUP};
use crate::protocol::api::join_group::{JoinGroupProtocol, JoinGroupRequest, JoinGroupResponse};
use crate::protocol::api::leave_group::{LeaveGroupRequest, MemberIdentity};
use crate::protocol::api::offset_commit::{OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic};
use crate::protocol::api::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest, OffsetFetchTopic};
use crate::protocol::api::sync_group::{SyncGroupAssignment, SyncGroupRequest};
use crate::protocol::{Request, Response};
use crate::record::RecordView;
use crate::runtime::Runtime;
use crate::ErrorCode;

/// The protocol type of consumer groups.
pub const PROTOCOL_TYPE: &str = "consumer";

/// JoinGroup/SyncGroup round trips one `poll` tries before it gives up (and the next poll
/// tries again).
const JOIN_ATTEMPTS_MAX: u32 = 20;

/// Group settings, with Kafka's consumer config names.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// `group.id`
    pub group_id: String,
    /// Fetch settings and `auto.offset.reset`.
    pub consumer: ConsumerConfig,
    /// `session.timeout.ms`
    pub session_timeout_ms: i32,
    /// `heartbeat.interval.ms`
    pub heartbeat_interval_ms: u64,
    /// `max.poll.interval.ms` (also the rebalance timeout sent in JoinGroup).
    pub max_poll_interval_ms: i32,
    /// `partition.assignment.strategy`, in preference order.
    pub assignors: Vec<Assignor>,
    /// `enable.auto.commit`
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`
    pub auto_commit_interval_ms: u64,
}

impl GroupConfig {
    pub fn new(group_id: &str) -> GroupConfig {
        GroupConfig {
            group_id: group_id.to_string(),
            consumer: ConsumerConfig::default(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            assignors: vec![Assignor::Range],
            enable_auto_commit: true,
            auto_commit_interval_ms: 5_000,
        }
    }
}

/// Told of assignment changes. The default methods do nothing and commit nothing.
pub trait RebalanceListener {
    /// `revoked` are about to go (the generation is still valid); `positions` are where this
    /// consumer is in each. The offsets returned are committed before they go.
    fn on_partitions_revoked(
        &mut self,
        _revoked: &BTreeSet<TopicPartition>,
        _positions: &BTreeMap<TopicPartition, i64>,
    ) -> BTreeMap<TopicPartition, i64> {
        BTreeMap::new()
    }
    /// `lost` are gone already (this member was fenced or expired): nothing can be committed.
    fn on_partitions_lost(&mut self, _lost: &BTreeSet<TopicPartition>) {}
    /// The new assignment of `generation`.
    fn on_partitions_assigned(&mut self, _assigned: &BTreeSet<TopicPartition>, _generation: i32) {}
}

/// A listener that does nothing.
pub struct NoListener;
impl RebalanceListener for NoListener {}

/// One record, with its topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub topic: String,
    pub record: ConsumerRecord,
}

/// What [`GroupConsumer::poll_with`] read, beside the records it handed over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupPollSummary {
    /// Records handed over.
    pub records: usize,
    /// Positions reset per `auto.offset.reset`: (partition, from, to).
    pub resets: Vec<(TopicPartition, i64, i64)>,
}

/// What a poll returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupPolled {
    pub records: Vec<GroupRecord>,
    /// Positions reset per `auto.offset.reset`: (partition, from, to).
    pub resets: Vec<(TopicPartition, i64, i64)>,
}

/// A topic's fetcher's position resets, (partition, from, to), named by topic and partition.
fn under_topic(topic: &str, resets: Vec<(i32, i64, i64)>) -> impl Iterator<Item = (TopicPartition, i64, i64)> + '_ {
    resets
        .into_iter()
        .map(move |(partition, from, to)| (TopicPartition::new(topic, partition), from, to))
}

pub struct GroupConsumer<R: Runtime> {
    pub config: GroupConfig,
    /// Coordinator calls and metadata.
    cluster: Cluster<R>,
    rt: R,
    topics: Vec<String>,
    coordinator: Option<String>,
    member_id: String,
    generation: i32,
    assignment: BTreeSet<TopicPartition>,
    /// One fetcher per subscribed topic, reading the assigned partitions.
    fetchers: BTreeMap<String, Consumer<R>>,
    /// The next poll must (re)join.
    rejoin: bool,
    /// Shared with the heartbeat task (started at the first join).
    hb: heartbeat::SharedRef,
    hb_started: bool,
    last_auto_commit_ms: u64,
    listener: Box<dyn RebalanceListener>,
    /// Commits the coordinator accepted (auto, on revoke or asked for), until taken.
    accepted_commits: Vec<(u64, BTreeMap<TopicPartition, i64>)>,
}

/// Accepted commits kept for [`GroupConsumer::take_commits`] at most (the oldest go first).
const ACCEPTED_COMMITS_MAX: usize = 10_000;

impl<R: Runtime> GroupConsumer<R> {
    pub fn new(cluster: Cluster<R>, config: GroupConfig) -> Self {
        GroupConsumer {
            config,
            rt: cluster.rt.clone(),
            cluster,
            topics: Vec::new(),
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            assignment: BTreeSet::new(),
            fetchers: BTreeMap::new(),
            rejoin: true,
            hb: Rc::default(),
            hb_started: false,
            last_auto_commit_ms: 0,
            listener: Box::new(NoListener),
            accepted_commits: Vec::new(),
        }
    }

    /// Subscribes to `topics` (replacing any earlier subscription); the next poll joins.
    pub fn subscribe(&mut self, topics: &[&str], listener: Box<dyn RebalanceListener>) {
        let mut topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        topics.sort();
        topics.dedup();
        self.topics = topics;
        self.listener = listener;
        self.rejoin = true;
    }

    /// This member's id and generation (`-1` outside a generation).
    pub fn generation(&self) -> (&str, i32) {
        (&self.member_id, self.generation)
    }

    pub fn assignment(&self) -> &BTreeSet<TopicPartition> {
        &self.assignment
    }

    /// The commits the coordinator accepted since the last call, oldest first, whoever made
    /// them (auto-commit, a revoke, the application): what an observer of the group records.
    /// Each with the runtime's monotonic ms when its answer arrived (a commit made inside
    /// `poll`, on revoke, is older than the poll's return).
    pub fn take_commits(&mut self) -> Vec<(u64, BTreeMap<TopicPartition, i64>)> {
        std::mem::take(&mut self.accepted_commits)
    }

    /// The next offset to read in each assigned partition whose position is known.
    pub fn positions(&self) -> BTreeMap<TopicPartition, i64> {
        self.assignment
            .iter()
            .filter_map(|tp| {
                let pos = self.fetchers.get(&tp.topic)?.position(tp.partition)?;
                Some((tp.clone(), pos))
            })
            .collect()
    }

    /// Joins if needed, heartbeats, auto-commits, then fetches from the assigned partitions, as
    /// [`Consumer::poll`] does, for every subscribed topic at once: the poll returns with the
    /// first answers, whichever topic they are for.
    pub async fn poll(&mut self) -> Result<GroupPolled, ClientError> {
        let mut polled = GroupPolled::default();
        if !self.before_fetch().await? {
            return Ok(polled);
        }
        let mut first_error = None;
        for ((topic, fetcher), (answers, tally)) in self.send_and_wait().await {
            match fetcher.take_answers_as_records(answers, tally).await {
                Ok(p) => {
                    polled.records.extend(p.records.into_iter().map(|record| GroupRecord {
                        topic: topic.clone(),
                        record,
                    }));
                    polled.resets.extend(under_topic(topic, p.resets));
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if polled.records.is_empty() => Err(e),
            _ => Ok(polled),
        }
    }

    /// [`poll`](Self::poll), handing each record to `each` (its topic, its partition, the record
    /// as it lies in the fetched bytes) as [`Consumer::poll_with`] does: no [`GroupRecord`]
    /// built, so no copy of the topic's name and no reference count per record. The same records
    /// in the same order, and the same outcome: an error only when a topic failed and no record
    /// was handed over.
    pub async fn poll_with(
        &mut self,
        mut each: impl FnMut(&str, i32, &RecordView<'_>),
    ) -> Result<GroupPollSummary, ClientError> {
        if !self.before_fetch().await? {
            return Ok(GroupPollSummary::default());
        }
        // The topics' fetchers polled as one consumer assigned all their partitions.
        let (topics, mut fetchers): (Vec<&String>, Vec<&mut Consumer<R>>) = self.fetchers_to_poll().into_iter().unzip();
        let s = Consumer::poll_all_with(&mut fetchers, |i, partition, r| each(topics[i], partition, r)).await?;
        let resets = s.resets.into_iter();
        Ok(GroupPollSummary {
            records: s.records,
            resets: resets
                .map(|(i, partition, from, to)| (TopicPartition::new(topics[i], partition), from, to))
                .collect(),
        })
    }

    /// The fetch of a poll, up to its answers: each topic's fetcher with assigned partitions
    /// sends its Fetches, then one wait for the first answers of any of them. A topic whose
    /// leaders have nothing new holds its Fetches in flight (a long poll of `fetch.max.wait.ms`)
    /// without holding up the others' records. The fetchers of topics with nothing assigned drop
    /// their Fetches.
    async fn send_and_wait(&mut self) -> Vec<((&String, &mut Consumer<R>), (Answers<R>, Tally))> {
        let mut fetchers = self.fetchers_to_poll();
        let answers = {
            let mut consumers: Vec<&mut Consumer<R>> = fetchers.iter_mut().map(|(_, f)| &mut **f).collect();
            Consumer::send_and_wait_all(&mut consumers).await
        };
        fetchers.into_iter().zip(answers).collect()
    }

    /// The fetchers of topics with assigned partitions, with their topics; the others drop their
    /// Fetches.
    fn fetchers_to_poll(&mut self) -> Vec<(&String, &mut Consumer<R>)> {
        let mut fetchers = Vec::new();
        for (topic, fetcher) in self.fetchers.iter_mut() {
            if fetcher.has_assignment() {
                fetchers.push((topic, fetcher));
            } else {
                fetcher.drop_unwanted_fetches();
            }
        }
        fetchers
    }

    /// What a poll does before it fetches: heartbeat news, an auto-commit when due, a join or a
    /// coordinator lookup when needed. `false`: nothing is assigned, and it waited as a fetch
    /// would (so a poll loop does not spin); there is nothing to fetch.
    async fn before_fetch(&mut self) -> Result<bool, ClientError> {
        let now = self.rt.monotonic_ms();
        self.take_heartbeat_news();
        self.hb.borrow_mut().last_poll_ms = now;
        if self.config.enable_auto_commit
            && self.generation >= 0
            && !self.rejoin
            && now.saturating_sub(self.last_auto_commit_ms) >= self.config.auto_commit_interval_ms
        {
            self.last_auto_commit_ms = now;
            let positions = self.positions();
            if !positions.is_empty() {
                self.commit_async(&positions).await;
            }
        }
        if self.rejoin {
            let joined = self.join().await;
            self.share_identity();
            joined?;
        } else if self.coordinator.is_none() && self.generation >= 0 {
            // The coordinator moved or died (NOT_COORDINATOR, a lost connection): look it up
            // again so the heartbeat task reaches the new one, which fences or keeps us.
            if let Err(e) = self.find_coordinator().await {
                tracing::debug!(group = %self.config.group_id, error = %e, "coordinator not found yet");
            }
            self.share_identity();
        }
        if self.assignment.is_empty() {
            let wait = u64::try_from(self.config.consumer.fetch_max_wait_ms.max(1)).unwrap_or(1);
            self.rt.sleep(Duration::from_millis(wait)).await;
            return Ok(false);
        }
        Ok(true)
    }

    /// Commits `offsets` (the next offset to read, per partition) and waits for the answer.
    /// Retriable coordinator errors are retried a few times; a fenced generation is not.
    pub async fn commit_sync(&mut self, offsets: &BTreeMap<TopicPartition, i64>) -> Result<(), ClientError> {
        let mut last = ClientError::Protocol("no commit attempt".into());
        for _attempt in 0..5 {
            match self.commit_once(offsets).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let coordinator_moved = matches!(
                        e,
                        ClientError::Broker(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
                            | ClientError::Net(_)
                            | ClientError::Timeout(_)
                    );
                    if !coordinator_moved {
                        return Err(e);
                    }
                    last = e;
                    self.rt
                        .sleep(Duration::from_millis(self.cluster.config.retry_backoff_ms))
                        .await;
                }
            }
        }
        Err(last)
    }

    /// One commit attempt; a failure is logged, not returned.
    pub async fn commit_async(&mut self, offsets: &BTreeMap<TopicPartition, i64>) {
        if let Err(e) = self.commit_once(offsets).await {
            tracing::info!(group = %self.config.group_id, error = %e, "asynchronous commit failed");
        }
    }

    /// Commits (when auto-commit is on) and leaves the group; the consumer can subscribe again.
    pub async fn close(&mut self) {
        if self.config.enable_auto_commit && self.generation >= 0 {
            let positions = self.positions();
            if !positions.is_empty() {
                if let Err(e) = self.commit_sync(&positions).await {
                    tracing::info!(group = %self.config.group_id, error = %e, "commit on close failed");
                }
            }
        }
        self.revoke_all().await;
        self.leave().await;
        self.rejoin = true;
        self.share_identity();
    }

    async fn commit_once(&mut self, offsets: &BTreeMap<TopicPartition, i64>) -> Result<(), ClientError> {
        let mut topics: BTreeMap<&str, Vec<OffsetCommitPartition>> = BTreeMap::new();
        for (tp, &offset) in offsets {
            topics.entry(&tp.topic).or_default().push(OffsetCommitPartition {
                partition_index: tp.partition,
                committed_offset: offset,
                committed_leader_epoch: -1,
                committed_metadata: Some(String::new()),
            });
        }
        let request = Request::OffsetCommit(OffsetCommitRequest {
            group_id: self.config.group_id.clone(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: None,
            retention_time_ms: -1,
            topics: topics
                .into_iter()
                .map(|(name, partitions)| OffsetCommitTopic {
                    name: name.to_string(),
                    partitions,
                })
                .collect(),
        });
        let Response::OffsetCommit(resp) = self.call_coordinator(&request, OFFSET_COMMIT_VERSION, None).await? else {
            return Err(ClientError::Protocol("OffsetCommit answered with another API".into()));
        };
        let error = resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|&(_, c)| code(c))
            .find(|c| *c != ErrorCode::None);
        match error {
            None => {
                tracing::debug!(group = %self.config.group_id, member = %self.member_id, generation = self.generation,
                    offsets = ?offsets.iter().map(|(tp, o)| (tp.partition, *o)).collect::<Vec<_>>(), "commit accepted");
                if self.accepted_commits.len() >= ACCEPTED_COMMITS_MAX {
                    self.accepted_commits.remove(0);
                }
                self.accepted_commits.push((self.rt.monotonic_ms(), offsets.clone()));
                Ok(())
            }
            Some(c) => {
                self.on_group_error(c);
                Err(ClientError::Broker(c))
            }
        }
    }

    /// What a group error means for membership.
    fn on_group_error(&mut self, c: ErrorCode) {
        match c {
            ErrorCode::RebalanceInProgress => self.rejoin = true,
            ErrorCode::IllegalGeneration => {
                self.rejoin = true;
                self.lose_partitions();
            }
            ErrorCode::UnknownMemberId => {
                self.rejoin = true;
                self.lose_partitions();
                self.member_id.clear();
            }
            ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable => {
                if let Some(addr) = self.coordinator.take() {
                    self.cluster.drop_conn(&addr);
                }
            }
            _ => {}
        }
    }

    /// Acts on what the heartbeat task learnt since the last poll.
    fn take_heartbeat_news(&mut self) {
        let (error, left) = {
            let mut hb = self.hb.borrow_mut();
            (hb.error.take(), std::mem::take(&mut hb.left_for_poll_timeout))
        };
        if left {
            self.lose_partitions();
            self.member_id.clear();
            self.rejoin = true;
        }
        if let Some(c) = error {
            self.on_group_error(c);
        }
        self.share_identity();
    }

    /// Tells the heartbeat task who this member is now.
    fn share_identity(&mut self) {
        let mut hb = self.hb.borrow_mut();
        hb.group_id.clone_from(&self.config.group_id);
        hb.client_id.clone_from(&self.cluster.config.client_id);
        hb.member_id.clone_from(&self.member_id);
        hb.generation = self.generation;
        hb.active = !self.rejoin && self.generation >= 0 && !self.member_id.is_empty();
        hb.coordinator.clone_from(&self.coordinator);
        hb.interval_ms = self.config.heartbeat_interval_ms;
        hb.max_poll_interval_ms = u64::try_from(self.config.max_poll_interval_ms).unwrap_or(0);
        hb.request_timeout_ms = self.cluster.config.request_timeout_ms;
        hb.sasl.clone_from(&self.cluster.config.sasl);
    }

    /// Partitions gone without a valid generation: no commit, the listener is told.
    fn lose_partitions(&mut self) {
        if !self.assignment.is_empty() {
            let lost = std::mem::take(&mut self.assignment);
            self.listener.on_partitions_lost(&lost);
            self.unassign_fetchers();
        }
        self.generation = -1;
    }

    fn unassign_fetchers(&mut self) {
        for fetcher in self.fetchers.values_mut() {
            for p in fetcher.assigned() {
                fetcher.unassign(p);
            }
        }
    }

    /// Eager rebalance: every partition is revoked before rejoining, while the generation is
    /// still valid, so the application (and auto-commit) can commit.
    async fn revoke_all(&mut self) {
        if self.assignment.is_empty() {
            return;
        }
        let positions = self.positions();
        if self.config.enable_auto_commit && self.generation >= 0 && !positions.is_empty() {
            if let Err(e) = self.commit_sync(&positions).await {
                tracing::info!(group = %self.config.group_id, error = %e, "auto-commit before revoke failed");
            }
        }
        let revoked = self.assignment.clone();
        let to_commit = self.listener.on_partitions_revoked(&revoked, &positions);
        if !to_commit.is_empty() && self.generation >= 0 {
            if let Err(e) = self.commit_sync(&to_commit).await {
                tracing::info!(group = %self.config.group_id, error = %e, "commit on revoke failed");
            }
        }
        self.assignment.clear();
        self.unassign_fetchers();
    }

    async fn leave(&mut self) {
        if self.member_id.is_empty() {
            return;
        }
        let request = Request::LeaveGroup(LeaveGroupRequest {
            group_id: self.config.group_id.clone(),
            members: vec![MemberIdentity {
                member_id: self.member_id.clone(),
                group_instance_id: None,
                reason: None,
            }],
        });
        if let Err(e) = self.call_coordinator(&request, LEAVE_GROUP_VERSION, None).await {
            tracing::info!(group = %self.config.group_id, error = %e, "LeaveGroup failed");
        }
        self.member_id.clear();
        self.generation = -1;
        self.rejoin = true;
    }

    async fn find_coordinator(&mut self) -> Result<String, ClientError> {
        if let Some(addr) = &self.coordinator {
            return Ok(addr.clone());
        }
        let request = Request::FindCoordinator(FindCoordinatorRequest {
            key_type: KEY_TYPE_GROUP,
            keys: vec![self.config.group_id.clone()],
        });
        let Response::FindCoordinator(resp) = self.cluster.call_any(&request, FIND_COORDINATOR_VERSION).await? else {
            return Err(ClientError::Protocol(
                "FindCoordinator answered with another API".into(),
            ));
        };
        let c = resp
            .coordinators
            .first()
            .ok_or_else(|| ClientError::Protocol("FindCoordinator answered for no key".into()))?;
        if c.error_code != 0 {
            return Err(ClientError::Broker(code(c.error_code)));
        }
        let addr = format!("{}:{}", c.host, c.port);
        self.coordinator = Some(addr.clone());
        Ok(addr)
    }

    /// Calls the group's coordinator; a network error forgets it (the next call looks it up).
    async fn call_coordinator(
        &mut self,
        request: &Request,
        version: i16,
        timeout_ms: Option<u64>,
    ) -> Result<Response, ClientError> {
        let addr = self.find_coordinator().await?;
        let timeout_ms = timeout_ms.unwrap_or(self.cluster.config.request_timeout_ms);
        let result = match self.cluster.conn(&addr).await {
            Ok(conn) => conn.call_with_timeout(request, version, timeout_ms).await,
            Err(e) => Err(e),
        };
        if result.is_err() {
            self.cluster.drop_conn(&addr);
            self.coordinator = None;
        }
        result
    }

    /// Revokes, then JoinGroup and SyncGroup until this member is in a generation (bounded).
    async fn join(&mut self) -> Result<(), ClientError> {
        if self.topics.is_empty() {
            return Err(ClientError::Protocol("poll before subscribe".into()));
        }
        self.revoke_all().await;
        let mut last = ClientError::Protocol("no join attempt".into());
        for _attempt in 0..JOIN_ATTEMPTS_MAX {
            match self.join_once().await {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(e) => {
                    last = e;
                    self.rt
                        .sleep(Duration::from_millis(self.cluster.config.retry_backoff_ms))
                        .await;
                }
            }
        }
        Err(last)
    }

    /// One JoinGroup (+ SyncGroup): `Ok(true)` in a generation, `Ok(false)` to go again at once.
    async fn join_once(&mut self) -> Result<bool, ClientError> {
        let subscription = assignor::encode_subscription(&self.topics);
        let request = Request::JoinGroup(JoinGroupRequest {
            group_id: self.config.group_id.clone(),
            session_timeout_ms: self.config.session_timeout_ms,
            rebalance_timeout_ms: self.config.max_poll_interval_ms,
            member_id: self.member_id.clone(),
            group_instance_id: None,
            protocol_type: PROTOCOL_TYPE.into(),
            protocols: self
                .config
                .assignors
                .iter()
                .map(|a| JoinGroupProtocol {
                    name: a.name().into(),
                    metadata: subscription.clone(),
                })
                .collect(),
            reason: None,
        });
        // The coordinator holds a JoinGroup until every member rejoined, up to the rebalance
        // timeout: wait that long and a little more, as Kafka's client does.
        let wait_ms = u64::try_from(self.config.max_poll_interval_ms).unwrap_or(0) + 5_000;
        let Response::JoinGroup(join) = self
            .call_coordinator(&request, JOIN_GROUP_VERSION, Some(wait_ms))
            .await?
        else {
            return Err(ClientError::Protocol("JoinGroup answered with another API".into()));
        };
        match code(join.error_code) {
            ErrorCode::None => {}
            ErrorCode::MemberIdRequired => {
                self.member_id = join.member_id;
                return Ok(false);
            }
            ErrorCode::UnknownMemberId => {
                self.member_id.clear();
                return Ok(false);
            }
            ErrorCode::IllegalGeneration | ErrorCode::RebalanceInProgress => return Ok(false),
            c => {
                self.on_group_error(c);
                return Err(ClientError::Broker(c));
            }
        }
        self.member_id = join.member_id.clone();
        let generation = join.generation_id;
        let protocol = join.protocol_name.clone().unwrap_or_default();
        let assignments = if join.leader == join.member_id {
            self.lead(&join, &protocol).await?
        } else {
            Vec::new()
        };
        let request = Request::SyncGroup(SyncGroupRequest {
            group_id: self.config.group_id.clone(),
            generation_id: generation,
            member_id: self.member_id.clone(),
            group_instance_id: None,
            protocol_type: Some(PROTOCOL_TYPE.into()),
            protocol_name: Some(protocol),
            assignments,
        });
        let Response::SyncGroup(sync) = self
            .call_coordinator(&request, SYNC_GROUP_VERSION, Some(wait_ms))
            .await?
        else {
            return Err(ClientError::Protocol("SyncGroup answered with another API".into()));
        };
        match code(sync.error_code) {
            ErrorCode::None => {}
            ErrorCode::UnknownMemberId => {
                self.member_id.clear();
                return Ok(false);
            }
            ErrorCode::IllegalGeneration | ErrorCode::RebalanceInProgress => return Ok(false),
            c => {
                self.on_group_error(c);
                return Err(ClientError::Broker(c));
            }
        }
        let assigned = assignor::decode_assignment(&sync.assignment)?;
        self.generation = generation;
        self.rejoin = false;
        if !self.hb_started {
            self.hb_started = true;
            heartbeat::spawn(&self.rt, &self.hb);
        }
        tracing::info!(group = %self.config.group_id, member = %self.member_id, generation, partitions = ?assigned, "assigned");
        self.assign(assigned).await?;
        Ok(true)
    }

    /// The leader's part: every member's subscription, the partition counts, the assignor.
    async fn lead(
        &mut self,
        join: &JoinGroupResponse,
        protocol: &str,
    ) -> Result<Vec<SyncGroupAssignment>, ClientError> {
        let assignor = Assignor::from_name(protocol)
            .ok_or_else(|| ClientError::Protocol(format!("the group chose assignor {protocol:?}, unknown here")))?;
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in &join.members {
            members.insert(m.member_id.clone(), assignor::decode_subscription(&m.metadata)?);
        }
        let topics: BTreeSet<String> = members.values().flatten().cloned().collect();
        let mut partitions = BTreeMap::new();
        for topic in topics {
            match self.cluster.refresh(&topic).await {
                Ok(layout) => {
                    partitions.insert(topic, layout.leaders.len() as i32);
                }
                Err(ClientError::Broker(ErrorCode::UnknownTopicOrPartition)) => {}
                Err(e) => return Err(e),
            }
        }
        let out = assignor.assign(&members, &partitions);
        Ok(out
            .into_iter()
            .map(|(member_id, set)| SyncGroupAssignment {
                member_id,
                assignment: assignor::encode_assignment(&set),
            })
            .collect())
    }

    /// Takes `assigned`: fetchers for its topics, positions from the committed offsets.
    async fn assign(&mut self, assigned: BTreeSet<TopicPartition>) -> Result<(), ClientError> {
        let committed = self.fetch_committed(&assigned).await;
        let committed = match committed {
            Ok(c) => c,
            Err(e) => {
                // Without committed offsets the positions are unknown: rejoin rather than guess.
                self.rejoin = true;
                self.generation = -1;
                return Err(e);
            }
        };
        for tp in &assigned {
            let rt = self.rt.clone();
            let (bootstrap, client) = (self.cluster.bootstrap().to_vec(), self.cluster.config.clone());
            let config = self.config.consumer.clone();
            let fetcher = self
                .fetchers
                .entry(tp.topic.clone())
                .or_insert_with(|| Consumer::new(Cluster::new(rt, bootstrap, client), config, &tp.topic));
            fetcher.assign(tp.partition, committed.get(tp).copied());
        }
        self.assignment = assigned;
        let generation = self.generation;
        self.listener.on_partitions_assigned(&self.assignment, generation);
        Ok(())
    }

    /// The group's committed offsets for `partitions` (absent: nothing committed).
    pub async fn fetch_committed(
        &mut self,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<BTreeMap<TopicPartition, i64>, ClientError> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            topics.entry(&tp.topic).or_default().push(tp.partition);
        }
        let request = Request::OffsetFetch(OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: self.config.group_id.clone(),
                topics: Some(
                    topics
                        .into_iter()
                        .map(|(name, partition_indexes)| OffsetFetchTopic {
                            name: name.to_string(),
                            partition_indexes,
                        })
                        .collect(),
                ),
            }],
            require_stable: true,
        });
        let Response::OffsetFetch(resp) = self.call_coordinator(&request, OFFSET_FETCH_VERSION, None).await? else {
            return Err(ClientError::Protocol("OffsetFetch answered with another API".into()));
        };
        let group = resp
            .groups
            .first()
            .ok_or_else(|| ClientError::Protocol("OffsetFetch answered for no group".into()))?;
        if group.error_code != 0 {
            let c = code(group.error_code);
            self.on_group_error(c);
            return Err(ClientError::Broker(c));
        }
        let mut out = BTreeMap::new();
        for t in &group.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(ClientError::Broker(code(p.error_code)));
                }
                if p.committed_offset >= 0 {
                    out.insert(TopicPartition::new(&t.name, p.partition_index), p.committed_offset);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
