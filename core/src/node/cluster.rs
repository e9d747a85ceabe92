//! The broker node in cluster mode: the single-node driver ([`super::start_broker`]) plus one
//! task that ties the broker to the coordinator quorum, and the replica fetcher.
//!
//! What the cluster task does, per coordinator session (a new session after each expiry):
//! 1. creates the persistent parents ([`controller::BOOTSTRAP_PATHS`]) and registers the broker
//!    as the ephemeral `/brokers/ids/{id}` (atomically replacing its previous process's node,
//!    whose session may not have expired yet);
//! 2. repeatedly reads the cluster state (live brokers, topics, partition states with their
//!    versions, deletion requests), with watches, and hands it to the broker: the cluster view
//!    for Metadata, [`Broker::apply_partition_state`] for each partition it hosts (which makes it
//!    leader or follower), [`Broker::remove_replica`] for topics that are gone;
//! 3. runs for the controller office ([`controller::election`]) and, while it holds it, writes
//!    what [`Controller::reconcile`] decides (leader elections, ISR clean-up), every
//!    `leader.imbalance.check.interval.seconds` the preferred leader elections of imbalanced
//!    brokers ([`Controller::leader_imbalance_elections`]), and carries out deletion requests,
//!    every write fenced by the controller epoch;
//! 4. writes the ISR changes the broker proposes as leader ([`Broker::poll_isr_proposals`]) by
//!    compare-and-set on the partition's state znode and reports the result back;
//! 5. serves CreateTopics and DeleteTopics handed over by connections ([`AdminQueue`]): creation
//!    writes the topic and its partitions' initial states in one multi (any broker may; the
//!    coordinator's create refuses a duplicate), deletion writes a request under
//!    `/admin/delete_topics` for the controller, as Kafka's ZooKeeper mode does.
//!
//! 6. serves AlterPartitionReassignments the same way ([`Controller::alter_reassignment`]: one
//!    multi compare-and-setting the topic record and the partition state), and as controller
//!    completes reassignments once their target replicas are in the ISR
//!    ([`Controller::reassignment_steps`]); a broker whose replica a reassignment removed deletes
//!    its log when its view shows the partition's assignment without it.
//!
//! 7. carries out a controlled shutdown when the process asks for one ([`ControlledShutdown`]):
//!    it deletes its own registration, so the controller hands the leadership of its partitions
//!    to other ISR members and removes it from every ISR, as for a dead broker but at once
//!    rather than after the session timeout; [`hand_off`] waits (bounded) until the broker's
//!    view shows that done. It never registers again in this process.
//!
//! The task re-reads sooner on a watch event, an admin request, an ISR proposal or a new
//! coordinator connection (the watches may be gone with a restarted server), and otherwise at
//! least every `refresh_ms`, doubled after each quiet round up to `refresh_quiet_ms_max`.
//! Reads are a full scan: clusters in the simulator hold a few topics.
//!
//! Fault model: the coordinator may be unreachable (ops are retried; the broker keeps serving
//! what it last knew, as a Kafka broker cut off from ZooKeeper does), a write's outcome may be
//! unknown (the next read settles it), and the session may expire (its ephemerals are gone: the
//! controller office and the registration are re-established in a new session).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use crate::broker::{ClusterView as BrokerView, IsrProposal, IsrUpdateResult};
use crate::cluster::{
    broker_path, decode_log_ends, encode_log_ends, log_ends_path, partition_state_path, topic_path, BrokerRegistration,
    LogEndReport, PartitionState, TopicRecord, BROKER_IDS_PATH, CONTROLLER_EPOCH_PATH, CONTROLLER_PATH,
    DELETE_TOPICS_PATH, LOG_ENDS_PATH, TOPICS_PATH,
};
use crate::controller::{
    self, election, ClusterView, Controller, ControllerConfig, CreateTopicDraw, ImbalanceSchedule, TopicView, Versioned,
};
use crate::coord::client::{CoordClient, CoordClientConfig, CoordError};
use crate::coord::tree::{CreateMode, Op, OpResult, TreeError};
use crate::coord::Doorbell;
use crate::error_code::ErrorCode;
use crate::group::{Coordination, OFFSETS_TOPIC};
use crate::ids::{BrokerId, LeaderEpoch};
use crate::protocol::api::alter_partition_reassignments::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ReassignablePartitionResponse,
    ReassignableTopicResponse,
};
use crate::protocol::api::create_topics::{CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse};
use crate::protocol::api::delete_topics::{DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse};
use crate::protocol::api::elect_leaders::{
    ElectLeadersRequest, ElectLeadersResponse, PartitionResult, ReplicaElectionResult, ELECTION_PREFERRED,
};
use crate::runtime::Runtime;

use super::replica_fetcher::{run_replica_fetcher, ReplicaFetcherConfig};
use super::watch::PartitionWatch;
use super::{start_broker, NodeConfig, NodeError, SharedBroker};

/// How a broker joins its cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Every coordinator's address (`host:port`).
    pub coordinators: Vec<String>,
    /// `zookeeper.session.timeout.ms`: how long after its last heartbeat a broker counts as dead.
    pub session_timeout_ms: u64,
    /// The longest the broker goes without re-reading the cluster state after a round that a
    /// change started (a watch, an admin request, a new coordinator connection); also the
    /// re-read interval of the ACL and SCRAM caches.
    pub refresh_ms: u64,
    /// The longest it goes without one while nothing changes: each round that ended by timing
    /// out doubles the wait from `refresh_ms` up to this. The re-read is a backstop: every read
    /// sets a watch, and a new coordinator connection (watches live on the server) starts a
    /// round at once. A scan is ~15 coordinator round trips, most of an idle cluster's traffic.
    pub refresh_quiet_ms_max: u64,
    pub controller: ControllerConfig,
    /// Whether restarts are detected by registration age (KIP-380's broker epoch): the
    /// controller moves leadership off and the ISR away from a restarted broker, and a restarted
    /// broker does not resume leadership from a state that predates it. Always on outside the
    /// simulator; a scenario may turn it off to show what it prevents (a negative control).
    pub detect_restarts: bool,
    /// How groups are coordinated: [`Coordination::Partitioned`] (Kafka's design, the default),
    /// with `offsets.topic.num.partitions` and `offsets.topic.replication.factor`.
    /// [`Coordination::Local`] here is the old bug (every broker coordinates every group, with
    /// unreplicated offsets), kept only for the simulator's negative control.
    pub group_coordination: Coordination,
    /// Set by the process on SIGTERM; read by the cluster task.
    pub shutdown: ControlledShutdown,
    /// How this broker's replica fetchers log in to the other brokers' SASL listeners.
    pub inter_broker_sasl: Option<crate::security::SaslCredentials>,
    /// `follower.replication.throttled.rate`: bytes per second this broker fetches, over all
    /// partitions it is being added to by a reassignment (catch-up); `None`: unthrottled.
    pub follower_throttled_rate_bytes_per_s: Option<u64>,
    /// The cluster secret this broker proves to the coordinators (`coordinator.auth.secret.file`).
    pub coordinator_secret: Option<crate::coord::ClusterSecret>,
}

/// Kafka's controlled shutdown, shared by the process (which asks) and the cluster task (which
/// deregisters the broker). See [`hand_off`].
#[derive(Clone, Debug, Default)]
pub struct ControlledShutdown(Rc<Cell<ShutdownPhase>>, Doorbell);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ShutdownPhase {
    #[default]
    Running,
    Requested,
    Deregistered,
}

impl ControlledShutdown {
    pub fn request(&self) {
        if self.0.get() == ShutdownPhase::Running {
            self.0.set(ShutdownPhase::Requested);
            self.1.ring();
        }
    }

    pub fn is_requested(&self) -> bool {
        self.0.get() != ShutdownPhase::Running
    }

    /// The broker's registration is gone: the controller counts it as stopped.
    pub fn is_deregistered(&self) -> bool {
        self.0.get() == ShutdownPhase::Deregistered
    }
}

/// What a controlled shutdown achieved by the time [`hand_off`] returned, from the broker's own
/// view of the partition states.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandOff {
    pub deregistered: bool,
    /// Partitions this broker still leads, and ISRs it is still in, although another ISR member
    /// could take over: what the wait did not get done.
    pub still_leading: Vec<(String, i32)>,
    pub still_in_isr: Vec<(String, i32)>,
    /// Partitions whose ISR is this broker alone: nobody can take over (offline once it stops).
    pub sole_replica: Vec<(String, i32)>,
    /// Every partition of the view with its leader and ISR, as last seen.
    pub states: Vec<(String, i32, Option<BrokerId>, Vec<BrokerId>)>,
}

impl HandOff {
    pub fn is_done(&self) -> bool {
        self.deregistered && self.still_leading.is_empty() && self.still_in_isr.is_empty()
    }
}

fn hand_off_state(broker: &SharedBroker, shutdown: &ControlledShutdown) -> HandOff {
    let b = broker.borrow();
    let me = b.config().broker_id;
    let mut out = HandOff {
        deregistered: shutdown.is_deregistered(),
        ..HandOff::default()
    };
    let Some(view) = b.cluster_view() else {
        return out;
    };
    for (topic, (_, states)) in &view.topics {
        for (&p, state) in states {
            let key = (topic.clone(), p);
            if state.isr == [me] {
                out.sole_replica.push(key.clone());
            } else if state.leader == Some(me) {
                out.still_leading.push(key.clone());
            } else if state.isr.contains(&me) {
                out.still_in_isr.push(key.clone());
            }
            out.states.push((topic.clone(), p, state.leader, state.isr.clone()));
        }
    }
    out
}

/// Controlled shutdown: asks the cluster task to deregister the broker, then waits until the
/// broker's view shows no partition led by it or with it in the ISR (but those it alone
/// replicates), or until `timeout_ms` passes. The broker keeps serving meanwhile: requests to
/// partitions it no longer leads get NOT_LEADER_OR_FOLLOWER and clients move on. The caller
/// flushes and exits afterwards whatever the result.
pub async fn hand_off<R: Runtime>(
    rt: &R,
    broker: &SharedBroker,
    shutdown: &ControlledShutdown,
    timeout_ms: u64,
) -> HandOff {
    shutdown.request();
    let deadline = rt.monotonic_ms().saturating_add(timeout_ms);
    loop {
        let state = hand_off_state(broker, shutdown);
        if state.is_done() || rt.monotonic_ms() >= deadline {
            return state;
        }
        rt.sleep(Duration::from_millis(20)).await;
    }
}

impl ClusterConfig {
    pub fn new(coordinators: Vec<String>) -> Self {
        ClusterConfig {
            coordinators,
            session_timeout_ms: 6_000,
            refresh_ms: 500,
            // A backstop (every read sets a watch, and a new coordinator connection re-reads at
            // once): `idle_broker_backs_off_its_scans_and_rereads_at_once_after_its_coordinator_restarts`
            // shows a broker with 60 s quiet waits still reacting within a second. Kafka's
            // ZooKeeper-mode controller had no periodic re-read at all.
            refresh_quiet_ms_max: 10_000,
            controller: ControllerConfig::default(),
            detect_restarts: true,
            group_coordination: Coordination::partitioned_default(),
            shutdown: ControlledShutdown::default(),
            inter_broker_sasl: None,
            follower_throttled_rate_bytes_per_s: None,
            coordinator_secret: None,
        }
    }

    /// The settings of this broker's coordinator sessions.
    pub fn coord_client_config(&self) -> CoordClientConfig {
        let mut c = CoordClientConfig::new(self.coordinators.clone());
        c.session_timeout_ms = self.session_timeout_ms;
        c.secret = self.coordinator_secret.clone();
        c
    }
}

/// Admin requests that need the coordinator, handed from a connection to the cluster task.
#[derive(Clone, Default)]
pub struct AdminQueue(Rc<RefCell<VecDeque<AdminJob>>>, AutoCreate, Doorbell);

/// `auto.create.topics.enable` in cluster mode: the partitions of an auto-created topic
/// (`num.partitions`), `None` when off.
#[derive(Clone, Copy, Debug, Default)]
struct AutoCreate(Option<i32>);

/// Admin jobs queued at most; more are refused at once.
const ADMIN_JOBS_MAX: usize = 1_000;

/// Per topic: its name, the error code (`None` for success), a message, and the id of a topic
/// created (CreateTopics answers it from v7).
type AdminResults = Vec<(String, ErrorCode, String, Option<crate::broker::TopicId>)>;

struct AdminJob {
    request: AdminRequest,
    reply: Rc<RefCell<Option<AdminResults>>>,
}

enum AdminRequest {
    Create(CreateTopicsRequest),
    Delete(Vec<String>),
    /// Per partition: topic, index, new replicas (`None` cancels); whether the replication
    /// factor may change. One result per partition, in order.
    Reassign(Vec<(String, i32, Option<Vec<BrokerId>>)>, bool),
    /// Preferred leader elections of these partitions; one result per partition, in order.
    Elect(Vec<(String, i32)>),
}

impl fmt::Debug for AdminQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AdminQueue({} queued)", self.0.borrow().len())
    }
}

impl AdminQueue {
    /// Kafka's auto-creation (ZooKeeper mode): the topics a Metadata request names that the
    /// cluster view lacks, when the request allows it and `auto.create.topics.enable` is on, are
    /// queued for creation (`num.partitions`, replication factor 1, Kafka's
    /// `default.replication.factor`) without waiting. Returns their names: the caller answers
    /// them LEADER_NOT_AVAILABLE, as Kafka does, so clients retry until the topic is there.
    pub fn auto_create(
        &self,
        broker: &SharedBroker,
        req: &crate::protocol::api::metadata::MetadataRequest,
    ) -> Vec<String> {
        let (Some(partitions), true, Some(asked)) = (self.1 .0, req.allow_auto_topic_creation, &req.topics) else {
            return Vec::new();
        };
        let b = broker.borrow();
        let Some(view) = b.cluster_view() else {
            return Vec::new();
        };
        let mut queued = Vec::new();
        for name in asked.iter().filter_map(|t| t.name.as_ref()) {
            if view.topics.contains_key(name)
                || name == OFFSETS_TOPIC
                || crate::broker::topic::validate_name(name).is_err()
                || queued.contains(name)
            {
                continue;
            }
            queued.push(name.clone());
        }
        if queued.is_empty() {
            return queued;
        }
        let pending: BTreeSet<String> = self
            .0
            .borrow()
            .iter()
            .filter_map(|job| match &job.request {
                AdminRequest::Create(r) => Some(r.topics.iter().map(|t| t.name.clone())),
                AdminRequest::Delete(_) | AdminRequest::Reassign(..) | AdminRequest::Elect(_) => None,
            })
            .flatten()
            .collect();
        let fresh: Vec<_> = queued
            .iter()
            .filter(|n| !pending.contains(*n))
            .map(|name| crate::protocol::api::create_topics::CreatableTopic {
                name: name.clone(),
                num_partitions: partitions,
                replication_factor: 1,
                ..Default::default()
            })
            .collect();
        if !fresh.is_empty() && self.0.borrow().len() < ADMIN_JOBS_MAX {
            tracing::info!(target: "cluster", topics = ?fresh.iter().map(|t| &t.name).collect::<Vec<_>>(), "auto-creating topics");
            self.0.borrow_mut().push_back(AdminJob {
                request: AdminRequest::Create(CreateTopicsRequest {
                    topics: fresh,
                    timeout_ms: 30_000,
                    ..Default::default()
                }),
                reply: Rc::new(RefCell::new(None)),
            });
            self.2.ring();
        }
        queued
    }

    /// Queues a CreateTopics and waits for the cluster task's answer, at most `timeout_ms`;
    /// then, as Kafka's DelayedCreatePartitions does, until this broker's view shows every
    /// partition of each created topic with a leader (bounded by the same timeout), so that a
    /// client's Metadata, Produce or describe right after the answer finds the topic.
    pub async fn create_topics<R: Runtime>(
        &self,
        rt: &R,
        broker: &SharedBroker,
        req: &CreateTopicsRequest,
    ) -> CreateTopicsResponse {
        let names: Vec<String> = req.topics.iter().map(|t| t.name.clone()).collect();
        let deadline = view_deadline(rt, req.timeout_ms);
        let results = self
            .submit(rt, AdminRequest::Create(req.clone()), names, req.timeout_ms)
            .await;
        if !req.validate_only {
            let created: Vec<&String> = results
                .iter()
                .filter(|r| r.1 == ErrorCode::None)
                .map(|r| &r.0)
                .collect();
            let led = |name: &String| {
                broker.borrow().cluster_view().is_some_and(|v| {
                    v.topics.get(name).is_some_and(|(record, states)| {
                        record
                            .assignment
                            .keys()
                            .all(|p| states.get(p).is_some_and(|s| s.leader.is_some()))
                    })
                })
            };
            wait_for_view(rt, deadline, || created.iter().all(|n| led(n))).await;
        }
        CreateTopicsResponse {
            throttle_time_ms: 0,
            topics: results
                .into_iter()
                .map(|(name, code, message, id)| CreatableTopicResult {
                    name,
                    topic_id: id.map_or(crate::protocol::Uuid::ZERO, |id| crate::protocol::Uuid(id.0)),
                    error_code: code.code(),
                    error_message: (code != ErrorCode::None).then_some(message),
                    // Unknown here (the cluster task answers before this broker's view has the
                    // topic): -1 and no configs, as Kafka answers when it cannot describe them.
                    // A 0 would make the Java admin client read the configs, and fail on null.
                    num_partitions: -1,
                    replication_factor: -1,
                    configs: None,
                    ..CreatableTopicResult::default()
                })
                .collect(),
        }
    }

    /// Queues a DeleteTopics (topics named by name, or by an id this broker's view knows) and
    /// waits for the cluster task's answer: the deletion is requested under
    /// `/admin/delete_topics` and carried out by the controller. Then, as Kafka's
    /// DelayedDeleteTopics does, waits until this broker's view no longer shows each topic whose
    /// deletion was requested (bounded by the request's timeout, at least 1 s), so that a
    /// Metadata right after the answer does not list it; a topic still shown at the deadline
    /// answers REQUEST_TIMED_OUT, and its deletion goes on.
    pub async fn delete_topics_request<R: Runtime>(
        &self,
        rt: &R,
        broker: &SharedBroker,
        req: &DeleteTopicsRequest,
    ) -> DeleteTopicsResponse {
        let mut names = Vec::new();
        let mut refused = Vec::new();
        for t in &req.topics {
            match super::handlers::delete_topics::topic_name(&broker.borrow(), t) {
                Ok(name) => names.push(name),
                Err((code, message)) => refused.push(DeletableTopicResult {
                    name: t.name.clone(),
                    topic_id: t.topic_id,
                    error_code: code.code(),
                    error_message: Some(message),
                }),
            }
        }
        let deadline = view_deadline(rt, req.timeout_ms);
        let results = self
            .submit(rt, AdminRequest::Delete(names.clone()), names, req.timeout_ms)
            .await;
        // The ids before the topics leave this broker's view.
        let ids: Vec<crate::protocol::Uuid> = results
            .iter()
            .map(|(name, ..)| {
                broker
                    .borrow()
                    .topic(name)
                    .map_or(crate::protocol::Uuid::ZERO, |m| crate::protocol::Uuid(m.id.0))
            })
            .collect();
        let shown = |name: &String| {
            broker
                .borrow()
                .cluster_view()
                .is_none_or(|v| v.topics.contains_key(name))
        };
        let requested = || results.iter().filter(|r| r.1 == ErrorCode::None).map(|r| &r.0);
        wait_for_view(rt, deadline, || !requested().any(shown)).await;
        let mut responses: Vec<DeletableTopicResult> = results
            .into_iter()
            .zip(ids)
            .map(|((name, code, message, _), topic_id)| {
                let (code, message) = if code == ErrorCode::None && shown(&name) {
                    (
                        ErrorCode::RequestTimedOut,
                        format!(
                            "deletion of {name} requested; not finished within the request's timeout ({} ms)",
                            req.timeout_ms
                        ),
                    )
                } else {
                    (code, message)
                };
                DeletableTopicResult {
                    topic_id,
                    name: Some(name),
                    error_code: code.code(),
                    error_message: (code != ErrorCode::None).then_some(message),
                }
            })
            .collect();
        responses.extend(refused);
        DeleteTopicsResponse {
            throttle_time_ms: 0,
            responses,
        }
    }

    /// Queues an AlterPartitionReassignments and waits for the cluster task's answer.
    pub async fn alter_reassignments<R: Runtime>(
        &self,
        rt: &R,
        req: &AlterPartitionReassignmentsRequest,
    ) -> AlterPartitionReassignmentsResponse {
        let mut items = Vec::new();
        for t in &req.topics {
            for p in &t.partitions {
                let target = p.replicas.as_ref().map(|r| r.iter().map(|&b| BrokerId(b)).collect());
                items.push((t.name.clone(), p.partition_index, target));
            }
        }
        let names = items.iter().map(|(t, _, _)| t.clone()).collect();
        let results = self
            .submit(
                rt,
                AdminRequest::Reassign(items.clone(), req.allow_replication_factor_change),
                names,
                req.timeout_ms,
            )
            .await;
        let mut responses: Vec<ReassignableTopicResponse> = Vec::new();
        for ((topic, p, _), (_, code, message, _)) in items.iter().zip(results) {
            let answer = ReassignablePartitionResponse {
                partition_index: *p,
                error_code: code.code(),
                error_message: (code != ErrorCode::None).then_some(message),
            };
            match responses.iter_mut().find(|r| r.name == *topic) {
                Some(r) => r.partitions.push(answer),
                None => responses.push(ReassignableTopicResponse {
                    name: topic.clone(),
                    partitions: vec![answer],
                }),
            }
        }
        AlterPartitionReassignmentsResponse {
            allow_replication_factor_change: req.allow_replication_factor_change,
            responses,
            ..AlterPartitionReassignmentsResponse::default()
        }
    }

    /// Queues an ElectLeaders (preferred elections only; a null list means every partition this
    /// broker's view knows) and waits for the cluster task's answer.
    pub async fn elect_leaders<R: Runtime>(
        &self,
        rt: &R,
        broker: &SharedBroker,
        req: &ElectLeadersRequest,
    ) -> ElectLeadersResponse {
        let items: Vec<(String, i32)> = match &req.topic_partitions {
            Some(topics) => topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |&p| (t.topic.clone(), p)))
                .collect(),
            None => broker.borrow().cluster_view().map_or_else(Vec::new, |v| {
                v.topics
                    .iter()
                    .flat_map(|(name, (record, _))| record.assignment.keys().map(move |&p| (name.clone(), p)))
                    .collect()
            }),
        };
        let results: AdminResults = if req.election_type != ELECTION_PREFERRED {
            let why = "only preferred elections; unclean ones follow unclean.leader.election.enable";
            items
                .iter()
                .map(|(t, _)| (t.clone(), ErrorCode::InvalidRequest, why.to_string(), None))
                .collect()
        } else {
            let names = items.iter().map(|(t, _)| t.clone()).collect();
            self.submit(rt, AdminRequest::Elect(items.clone()), names, req.timeout_ms)
                .await
        };
        let mut out: Vec<ReplicaElectionResult> = Vec::new();
        for ((topic, p), (_, code, message, _)) in items.iter().zip(results) {
            let answer = PartitionResult {
                partition_id: *p,
                error_code: code.code(),
                error_message: (code != ErrorCode::None).then_some(message),
            };
            match out.iter_mut().find(|r| r.topic == *topic) {
                Some(r) => r.partition_result.push(answer),
                None => out.push(ReplicaElectionResult {
                    topic: topic.clone(),
                    partition_result: vec![answer],
                }),
            }
        }
        ElectLeadersResponse {
            replica_election_results: out,
            ..ElectLeadersResponse::default()
        }
    }

    async fn submit<R: Runtime>(
        &self,
        rt: &R,
        request: AdminRequest,
        names: Vec<String>,
        timeout_ms: i32,
    ) -> AdminResults {
        let fail =
            |code: ErrorCode, why: &str| names.iter().map(|n| (n.clone(), code, why.to_string(), None)).collect();
        if self.0.borrow().len() >= ADMIN_JOBS_MAX {
            return fail(ErrorCode::RequestTimedOut, "too many admin requests queued");
        }
        let reply = Rc::new(RefCell::new(None));
        self.0.borrow_mut().push_back(AdminJob {
            request,
            reply: reply.clone(),
        });
        self.2.ring();
        let deadline = rt
            .monotonic_ms()
            .saturating_add(u64::try_from(timeout_ms.max(1_000)).unwrap_or(30_000));
        while rt.monotonic_ms() < deadline {
            if let Some(results) = reply.borrow_mut().take() {
                return results;
            }
            rt.sleep(Duration::from_millis(5)).await;
        }
        fail(ErrorCode::RequestTimedOut, "the coordinator did not answer in time")
    }

    fn pop(&self) -> Option<AdminJob> {
        self.0.borrow_mut().pop_front()
    }

    fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }

    /// Rung when a job is queued (and when a FindCoordinator wants the offsets topic): the
    /// cluster task waits on it between rounds.
    pub fn doorbell(&self) -> &Doorbell {
        &self.2
    }
}

/// Waits until any of the four completes.
async fn first_of(
    a: impl Future<Output = ()>,
    b: impl Future<Output = ()>,
    c: impl Future<Output = ()>,
    d: impl Future<Output = ()>,
) {
    let (mut a, mut b, mut c, mut d) = (pin!(a), pin!(b), pin!(c), pin!(d));
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready()
            || b.as_mut().poll(cx).is_ready()
            || c.as_mut().poll(cx).is_ready()
            || d.as_mut().poll(cx).is_ready()
        {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Until when an admin request waits for this broker's view to show its outcome: its timeout,
/// at least 1 s.
fn view_deadline<R: Runtime>(rt: &R, timeout_ms: i32) -> u64 {
    rt.monotonic_ms()
        .saturating_add(u64::try_from(timeout_ms.max(1_000)).unwrap_or(30_000))
}

/// Waits until `done` (a look at this broker's view, which the cluster task updates) or the
/// deadline, looking every 5 ms.
async fn wait_for_view<R: Runtime>(rt: &R, deadline: u64, done: impl Fn() -> bool) {
    while !done() && rt.monotonic_ms() < deadline {
        rt.sleep(Duration::from_millis(5)).await;
    }
}

/// Starts a broker that belongs to a cluster: the Kafka listener, the replica fetcher and the
/// cluster task. Returns as [`start_broker`] does.
pub async fn start_cluster_broker<R: Runtime>(
    rt: R,
    mut config: NodeConfig,
    cluster: ClusterConfig,
) -> Result<(SharedBroker, impl std::future::Future<Output = ()>), NodeError> {
    let auto_create = config.broker.auto_create_topics.then_some(config.broker.num_partitions);
    let admin = AdminQueue(Rc::default(), AutoCreate(auto_create), Doorbell::default());
    config.admin = Some(admin.clone());
    // Topics exist only through the coordinator: never auto-created locally (auto-creation goes
    // through the coordinator: `AdminQueue::auto_create`).
    config.broker.auto_create_topics = false;
    config.broker.group.coordination = cluster.group_coordination;
    let registration = BrokerRegistration {
        id: config.broker.broker_id,
        host: config.advertised.host.clone(),
        port: config.advertised.port,
        rack: None,
        // Filled in at each registration from the broker (`Session::register`).
        intact_since: None,
    };
    // With an authorizer, the ACLs live in the coordinator and the cache follows them.
    let acl_sync = config.acls.as_mut().map(|acls| {
        let admin = super::acl_sync::AclAdmin::default();
        acls.admin = Some(admin.clone());
        (acls.clone(), admin)
    });
    // With SASL, the SCRAM users live in the coordinator and the listener's cache follows them.
    let user_sync = config.sasl.clone().map(|sasl| {
        let admin = super::scram_sync::UserAdmin::default();
        config.users = Some(admin.clone());
        (sasl, admin)
    });
    let watch = config.watch.clone();
    let (broker, accept_loop) = start_broker(rt.clone(), config).await?;
    if let Some((sasl, admin)) = user_sync {
        let client_config = cluster.coord_client_config();
        rt.spawn(super::scram_sync::run_user_sync(
            rt.clone(),
            client_config,
            cluster.refresh_ms,
            sasl,
            admin,
        ));
    }
    if let Some((acls, admin)) = acl_sync {
        let client_config = cluster.coord_client_config();
        rt.spawn(super::acl_sync::run_acl_sync(
            rt.clone(),
            client_config,
            cluster.refresh_ms,
            acls,
            admin,
        ));
    }
    rt.spawn(run_replica_fetcher(
        rt.clone(),
        broker.clone(),
        ReplicaFetcherConfig {
            watch: watch.clone(),
            sasl: cluster.inter_broker_sasl.clone(),
            throttle: cluster
                .follower_throttled_rate_bytes_per_s
                .map(|rate| Rc::new(RefCell::new(super::throttle::Throttle::new(rate)))),
            ..ReplicaFetcherConfig::default()
        },
    ));
    rt.spawn(cluster_main(
        rt.clone(),
        broker.clone(),
        cluster,
        registration,
        admin,
        watch,
    ));
    Ok((broker, accept_loop))
}

/// Why a session's loop ended.
enum End {
    Expired,
}

type Step<T> = Result<T, End>;

/// Maps a coordinator error to the session's fate: expiry ends it, anything else is retried.
fn fatal(e: &CoordError) -> bool {
    matches!(
        e,
        CoordError::SessionExpired | CoordError::Tree(TreeError::SessionExpired)
    )
}

/// Writes the broker's ISR proposals in turn, each by compare-and-set (`write` returns the
/// znode's new version), and answers the broker for every one of them, as
/// [`crate::broker::Broker::poll_isr_proposals`] requires: an unanswered proposal stays in flight,
/// and its leader proposes nothing more for that partition until a newer state arrives, which
/// may never happen (nothing else need write it). A write whose outcome is unknown (a timeout,
/// a coordinator failover, the session expiring under it) is answered `Unknown`: it may still
/// apply, so it stays in flight and is sent again. When the session expires, every proposal not
/// sent yet is answered `Unknown` as well (it may resend an earlier write of unknown outcome), so
/// the next session sends it.
async fn write_isr_proposals<W, F>(
    broker: &SharedBroker,
    watch: &PartitionWatch,
    proposals: Vec<IsrProposal>,
    mut write: W,
) -> Step<()>
where
    W: FnMut(&IsrProposal) -> F,
    F: Future<Output = Result<i32, CoordError>>,
{
    if !proposals.is_empty() {
        watch.poke_all();
    }
    let mut pending = proposals.into_iter();
    while let Some(p) = pending.next() {
        let result = match write(&p).await {
            Ok(zk_version) => {
                tracing::info!(target: "replication", topic = %p.topic, partition = p.partition,
                    isr = ?p.new_state.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
                    epoch = p.new_state.leader_epoch.0, "ISR changed");
                IsrUpdateResult::Committed { zk_version }
            }
            Err(e) if fatal(&e) => {
                let mut b = broker.borrow_mut();
                // It may have applied before the session ended: unknown, sent again.
                b.isr_update_result(&p.topic, p.partition, IsrUpdateResult::Unknown);
                for unsent in pending {
                    tracing::debug!(target: "replication", topic = %unsent.topic, partition = unsent.partition,
                        "ISR change not sent: the session expired");
                    // Not sent now, but it may be the resend of a write whose outcome is still
                    // unknown: kept in flight and sent in the next session.
                    b.isr_update_result(&unsent.topic, unsent.partition, IsrUpdateResult::Unknown);
                }
                return Err(End::Expired);
            }
            Err(e @ (CoordError::MultiFailed { .. } | CoordError::Tree(_))) => {
                tracing::debug!(target: "replication", topic = %p.topic, partition = p.partition, error = %e,
                    "ISR change not written; re-reading");
                IsrUpdateResult::Conflict
            }
            Err(e) => {
                tracing::debug!(target: "replication", topic = %p.topic, partition = p.partition, error = %e,
                    "ISR change's outcome unknown; kept in flight and sent again");
                IsrUpdateResult::Unknown
            }
        };
        broker.borrow_mut().isr_update_result(&p.topic, p.partition, result);
        watch.poke_all();
    }
    Ok(())
}

async fn cluster_main<R: Runtime>(
    rt: R,
    broker: SharedBroker,
    cluster: ClusterConfig,
    registration: BrokerRegistration,
    admin: AdminQueue,
    watch: PartitionWatch,
) {
    let client_config = cluster.coord_client_config();
    loop {
        let client = match CoordClient::connect(rt.clone(), client_config.clone()).await {
            Ok(client) => client,
            Err(e) => {
                tracing::info!(target: "cluster", error = %e, "no coordinator session yet; retrying");
                rt.sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        tracing::info!(target: "cluster", broker = registration.id.0, session = ?client.session(), "coordinator session opened");
        let mut session = Session {
            rt: rt.clone(),
            broker: broker.clone(),
            cluster: cluster.clone(),
            registration: registration.clone(),
            admin: admin.clone(),
            watch: watch.clone(),
            client,
            controller: None,
            balanced_for: None,
            log_ends_written: None,
            imbalance_schedule: None,
            registrations: ClusterView::default(),
            refresh_wait_ms: cluster.refresh_ms,
            connections_seen: 0,
        };
        let End::Expired = session.run().await;
        tracing::warn!(target: "cluster", broker = registration.id.0, "coordinator session expired; opening a new one");
    }
}

struct Session<R: Runtime> {
    rt: R,
    broker: SharedBroker,
    cluster: ClusterConfig,
    registration: BrokerRegistration,
    admin: AdminQueue,
    /// Woken requests re-check leadership, ISR and high watermarks after a change applied here.
    watch: PartitionWatch,
    client: CoordClient<R>,
    controller: Option<Controller>,
    /// `auto.rebalance.enable`: the live brokers this controller last saw balanced; it balances
    /// again when they change (`None`: not yet, e.g. just elected).
    balanced_for: Option<BTreeSet<BrokerId>>,
    /// What this session last wrote to `/brokers/log_ends/{id}` (`None`: nothing yet).
    log_ends_written: Option<BTreeMap<(String, i32), LogEndReport>>,
    /// `leader.imbalance.check.interval.seconds`: when this controller next checks the leader
    /// imbalance (`None`: not controller).
    imbalance_schedule: Option<ImbalanceSchedule>,
    /// The brokers' registrations (creation indexes) as the last scan read them; only
    /// `registered_at` is set. This leader's ISR writes check them.
    registrations: ClusterView,
    /// How long the next wait lasts without a reason to scan: `refresh_ms` after a change,
    /// doubled by each quiet round up to `refresh_quiet_ms_max`.
    refresh_wait_ms: u64,
    /// The client's `connections_opened` when the last scan started: a new connection may be
    /// to a restarted server, without this session's watches.
    connections_seen: u64,
}

/// Everything read in one scan.
struct Scan {
    controller_view: ClusterView,
    broker_view: BrokerView,
    /// `/controller`: its broker id and whether this session owns it.
    controller: Option<(BrokerId, bool)>,
}

impl<R: Runtime> Session<R> {
    fn me(&self) -> BrokerId {
        self.registration.id
    }

    /// The controller's settings, with the brokers' default `min.insync.replicas`.
    fn controller_config(&self) -> ControllerConfig {
        ControllerConfig {
            min_insync_replicas_default: self.broker.borrow().config().min_insync_replicas,
            ..self.cluster.controller
        }
    }

    async fn run(&mut self) -> End {
        if let Err(end) = self.register().await {
            return end;
        }
        loop {
            if let Err(end) = self.round().await {
                self.broker.borrow_mut().set_acting_controller_epoch(None);
                if let Some(c) = self.controller.take() {
                    tracing::warn!(target: "controller", broker = c.id.0, epoch = c.epoch, "controller resigns: its session ended");
                }
                return end;
            }
        }
    }

    async fn register(&mut self) -> Step<()> {
        if self.cluster.shutdown.is_requested() {
            // A broker in controlled shutdown stays away (a session that expired meanwhile).
            self.cluster.shutdown.0.set(ShutdownPhase::Deregistered);
            return Ok(());
        }
        for path in controller::BOOTSTRAP_PATHS {
            self.create_retrying(path, Vec::new(), CreateMode::Persistent).await?;
        }
        let path = broker_path(self.me());
        // What this process knows of its log's history (a clean start's marker, or its first
        // registration): a re-registration after a session expiry is not a restart.
        let registration = BrokerRegistration {
            intact_since: self.broker.borrow().intact_since(),
            ..self.registration.clone()
        };
        let data = registration.encode();
        loop {
            match self.client.create(&path, &data, CreateMode::Ephemeral).await {
                Ok(_) => {
                    tracing::info!(target: "cluster", broker = self.me().0, "registered");
                    return Ok(());
                }
                // The node of this broker's previous process (its session has not expired yet):
                // replace it in one multi, so that the controller never sees the broker absent
                // and a quick restart keeps its ISR membership, as a broker that never left.
                // Two live processes with one broker id would fight here: ids are unique by
                // configuration, as in Kafka.
                Err(CoordError::Tree(TreeError::NodeExists)) => {
                    let replace = vec![
                        Op::Delete {
                            path: path.clone(),
                            expected_version: None,
                        },
                        Op::Create {
                            path: path.clone(),
                            data: data.clone(),
                            mode: CreateMode::Ephemeral,
                        },
                    ];
                    match self.client.multi(replace).await {
                        Ok(_) => {
                            tracing::info!(target: "cluster", broker = self.me().0, "registered, replacing the previous process's registration");
                            return Ok(());
                        }
                        Err(e) if fatal(&e) => return Err(End::Expired),
                        Err(e) => tracing::debug!(target: "cluster", error = %e, "re-registration failed; retrying"),
                    }
                }
                Err(e) if fatal(&e) => return Err(End::Expired),
                Err(e) => tracing::debug!(target: "cluster", error = %e, "registration failed; retrying"),
            }
            self.rt.sleep(Duration::from_millis(200)).await;
        }
    }

    /// Controlled shutdown: deletes this broker's registration; the controller (maybe this
    /// very session) then moves its leaderships and shrinks it out of the ISRs.
    async fn deregister(&mut self) -> Step<()> {
        match self.client.delete(&broker_path(self.me()), None).await {
            Ok(()) | Err(CoordError::Tree(TreeError::NoNode)) => {
                tracing::info!(target: "cluster", broker = self.me().0, "controlled shutdown: deregistered");
                self.cluster.shutdown.0.set(ShutdownPhase::Deregistered);
                Ok(())
            }
            Err(e) if fatal(&e) => Err(End::Expired),
            Err(e) => {
                tracing::debug!(target: "cluster", error = %e, "deregistration failed; retrying");
                Ok(())
            }
        }
    }

    /// Creates a persistent node, treating NodeExists as done.
    async fn create_retrying(&self, path: &str, data: Vec<u8>, mode: CreateMode) -> Step<()> {
        loop {
            match self.client.create(path, &data, mode).await {
                Ok(_) | Err(CoordError::Tree(TreeError::NodeExists)) => return Ok(()),
                Err(e) if fatal(&e) => return Err(End::Expired),
                Err(e) => {
                    tracing::debug!(target: "cluster", path, error = %e, "create failed; retrying");
                    self.rt.sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// One round: scan, apply, act as controller, answer admin requests, then wait for a reason
    /// to scan again.
    async fn round(&mut self) -> Step<()> {
        self.connections_seen = self.client.connections_opened();
        let scan = match self.scan().await {
            Ok(scan) => scan,
            Err(e) if fatal(&e) => return Err(End::Expired),
            Err(e) => {
                tracing::debug!(target: "cluster", error = %e, "reading the cluster state failed; retrying");
                self.rt.sleep(Duration::from_millis(100)).await;
                return Ok(());
            }
        };
        self.apply(&scan);
        self.registrations.registered_at = scan.controller_view.registered_at.clone();
        self.watch.poke_all();
        self.report_log_ends(&scan).await?;
        if self.broker.borrow_mut().take_offsets_topic_wanted() {
            self.create_offsets_topic(&scan).await?;
        }
        let duties = self.controller_duties(&scan).await;
        let epoch = self.controller.as_ref().map(|c| c.epoch);
        self.broker.borrow_mut().set_acting_controller_epoch(epoch);
        duties?;
        while let Some(job) = self.admin.pop() {
            let results = self.admin_job(&scan, &job.request).await?;
            *job.reply.borrow_mut() = Some(results);
        }
        self.wait().await
    }

    /// Waits until the refresh interval passes, a watch fires, an admin request arrives, a new
    /// coordinator connection answers or the controller's imbalance check is due; meanwhile
    /// writes the broker's ISR proposals. A wait that times out doubles the next one (up to
    /// `refresh_quiet_ms_max`); any other reason resets it to `refresh_ms`.
    ///
    /// Watch events reach the client only with answers, so a wait longer than `refresh_ms`
    /// pings the coordinator every `refresh_ms` to collect them: one round trip where a scan
    /// costs ~15, and a change is still seen within `refresh_ms` (plus a round trip), as when
    /// every wait was a `refresh_ms` one.
    async fn wait(&mut self) -> Step<()> {
        let start = self.rt.monotonic_ms();
        let mut poll_at = start.saturating_add(self.cluster.refresh_ms);
        let mut deadline = start.saturating_add(self.refresh_wait_ms);
        let imbalance_due = self
            .imbalance_schedule
            .as_ref()
            .filter(|_| self.cluster.controller.auto_leader_rebalance)
            .map(ImbalanceSchedule::next_ms);
        if let Some(due) = imbalance_due {
            // A check already due waits at most `refresh_ms`, as every wait did before the
            // quiet doubling: the round that runs it may end early (a failed write) and must
            // not start again at once.
            deadline = deadline.min(due.max(start.saturating_add(self.cluster.refresh_ms)));
        }
        while self.rt.monotonic_ms() < deadline {
            let proposed = self.isr_proposals().await?;
            if self.cluster.shutdown.0.get() == ShutdownPhase::Requested {
                return self.deregister().await;
            }
            // What rings or arrives from here on ends the sleep below at once (no await
            // between these readings and the checks that follow them).
            let rung = (
                self.admin.doorbell().rings(),
                self.cluster.shutdown.1.rings(),
                self.client.activity().rings(),
            );
            let mut changed = proposed
                || !self.admin.is_empty()
                || self.broker.borrow().offsets_topic_wanted()
                || self.client.connections_opened() != self.connections_seen
                || self.client.is_expired();
            while let Some(event) = self.client.try_next_watch_event() {
                tracing::trace!(target: "cluster", path = %event.path, kind = ?event.kind, "watch fired");
                changed = true;
            }
            if changed {
                self.refresh_wait_ms = self.cluster.refresh_ms;
                return Ok(());
            }
            let now = self.rt.monotonic_ms();
            if now >= poll_at && now < deadline {
                poll_at = now.saturating_add(self.cluster.refresh_ms);
                match self.client.ping().await {
                    Err(e) if fatal(&e) => return Err(End::Expired),
                    // Unreachable: the heartbeat task and the next scan deal with it.
                    Err(_) | Ok(()) => continue,
                }
            }
            // Often while an ISR may grow (acks=all and min.insync.replicas wait on it): a
            // follower's catching up shows only in the broker. Otherwise until the next thing
            // due (the ping, the end of the wait, the first ISR member that could fall out of
            // sync), or sooner when the node's other tasks ring (an admin request, the offsets
            // topic, a shutdown) or the client brings something (watch events, a new
            // connection, expiry). Polling every 50 ms instead was ~2,250 wake-ups a seed of
            // the benchmark for nothing (BENCHMARKS.md).
            let sleep_ms = if self.broker.borrow().isr_expansion_pending() {
                10
            } else {
                let due = poll_at.min(deadline).saturating_sub(now);
                let shrink_in = self.broker.borrow().next_isr_check_ms().map(|at| {
                    let wall_now = self.rt.now_ms();
                    u64::try_from(at.saturating_sub(wall_now)).unwrap_or(0)
                });
                due.min(shrink_in.unwrap_or(u64::MAX)).max(1)
            };
            let sleep = self.rt.sleep(Duration::from_millis(sleep_ms));
            let admin = self.admin.doorbell().rung_since(rung.0);
            let shutdown = self.cluster.shutdown.1.rung_since(rung.1);
            let activity = self.client.activity();
            let client = activity.rung_since(rung.2);
            first_of(sleep, admin, shutdown, client).await;
        }
        self.refresh_wait_ms = self.refresh_wait_ms.saturating_mul(2).clamp(
            self.cluster.refresh_ms,
            self.cluster.refresh_quiet_ms_max.max(self.cluster.refresh_ms),
        );
        Ok(())
    }

    /// Writes the broker's ISR proposals; tells whether there were any.
    async fn isr_proposals(&mut self) -> Step<bool> {
        let now = self.rt.now_ms();
        let proposals = self.broker.borrow_mut().poll_isr_proposals(now);
        let proposed = !proposals.is_empty();
        let client = &self.client;
        let registrations = &self.registrations;
        write_isr_proposals(&self.broker, &self.watch, proposals, |p| {
            let path = partition_state_path(&p.topic, p.partition);
            // Checked against the registrations of the last scan, as the controller's writes are
            // (ClusterView::registration_checks): a named member that registered again since then
            // may have lost unsynced records, and this write would hide its restart.
            let mut ops = vec![Op::SetData {
                path,
                data: p.new_state.encode(),
                expected_version: Some(p.expected_zk_version),
            }];
            ops.extend(
                registrations
                    .registration_checks(&[], &p.new_state)
                    .iter()
                    .map(to_coord_op),
            );
            async move {
                match client.multi(ops).await?.first() {
                    Some(OpResult::SetData { stat }) => Ok(stat.version),
                    _ => Err(CoordError::Unknown),
                }
            }
        })
        .await?;
        Ok(proposed)
    }

    /// Tells the controller this broker's log end for each offline partition it hosts a replica
    /// of, once the broker applied that offline state: the controller elects the longest log
    /// among them ([`crate::controller`]'s KIP-966 recovery), and waits for every live replica's
    /// report. A replica this broker could not create (a disk error while applying the state)
    /// reports an empty log, so that the controller is not kept waiting for it. Written only
    /// when it changed; the node is ephemeral, so a dead broker's reports go with it.
    async fn report_log_ends(&mut self, scan: &Scan) -> Step<()> {
        let me = self.me();
        let mut reports = BTreeMap::new();
        {
            let b = self.broker.borrow();
            for (name, t) in &scan.controller_view.topics {
                for (&p, state) in &t.partitions {
                    let s = &state.value;
                    let hosted = t.record.assignment.get(&p).is_some_and(|r| r.contains(&me));
                    if s.leader.is_some() || !hosted {
                        continue;
                    }
                    if let Some(r) = b.offline_log_end(name, p, s.leader_epoch) {
                        reports.insert((name.clone(), p), r);
                    } else if b.log(name, p).is_none() {
                        reports.insert(
                            (name.clone(), p),
                            LogEndReport {
                                offline_epoch: s.leader_epoch,
                                last_epoch: LeaderEpoch(-1),
                                log_end: 0,
                            },
                        );
                    }
                }
            }
        }
        if self.log_ends_written.as_ref() == Some(&reports) || (self.log_ends_written.is_none() && reports.is_empty()) {
            return Ok(());
        }
        let path = log_ends_path(me);
        let data = encode_log_ends(&reports);
        let session = self.client.session();
        let written = match self.client.set_data(&path, &data, None).await {
            Ok(stat) if stat.ephemeral_owner == Some(session) => Ok(()),
            Ok(stat) => {
                // The node of this broker's previous process, whose session has not expired yet:
                // it would vanish with that session, taking this report along while
                // `log_ends_written` says it is there, and the partition would stay offline.
                // Replace it by one this session owns.
                match self.client.delete(&path, Some(stat.version)).await {
                    Ok(()) | Err(CoordError::Tree(TreeError::NoNode)) => self
                        .client
                        .create(&path, &data, CreateMode::Ephemeral)
                        .await
                        .map(|_| ()),
                    Err(e) => Err(e),
                }
            }
            Err(CoordError::Tree(TreeError::NoNode)) => {
                // A cluster started before these reports existed lacks the parent.
                self.create_retrying(LOG_ENDS_PATH, Vec::new(), CreateMode::Persistent)
                    .await?;
                self.client
                    .create(&path, &data, CreateMode::Ephemeral)
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => {
                tracing::info!(target: "replication", reports = %String::from_utf8_lossy(&data).trim().replace('\n', " "),
                    "offline partitions' log ends reported");
                self.log_ends_written = Some(reports);
            }
            Err(e) if fatal(&e) => return Err(End::Expired),
            Err(e) => tracing::debug!(target: "replication", error = %e, "log end report not written; retrying"),
        }
        Ok(())
    }

    /// Reads the whole cluster state, registering watches on what the controller and the
    /// brokers react to.
    async fn scan(&self) -> Result<Scan, CoordError> {
        let c = &self.client;
        let mut live_brokers = BTreeSet::new();
        let mut registrations = Vec::new();
        let mut registered_at = BTreeMap::new();
        let mut intact_since = BTreeMap::new();
        let mut state_written_at = BTreeMap::new();
        for child in c.children(BROKER_IDS_PATH, true, false).await? {
            let Ok(id) = child.parse::<i32>() else { continue };
            match c.get(&broker_path(BrokerId(id)), false, false).await {
                Ok((data, stat)) => {
                    if let Some(reg) = BrokerRegistration::decode(&data) {
                        live_brokers.insert(reg.id);
                        if reg.id == self.me() && stat.ephemeral_owner == Some(c.session()) {
                            // This process's registration: its log is intact from here on.
                            self.broker.borrow_mut().note_registered(stat.czxid);
                        }
                        if self.cluster.detect_restarts {
                            registered_at.insert(reg.id, stat.czxid);
                            if let Some(since) = reg.intact_since {
                                intact_since.insert(reg.id, since);
                            }
                        }
                        registrations.push(reg);
                    }
                }
                Err(CoordError::Tree(TreeError::NoNode)) => {}
                Err(e) => return Err(e),
            }
        }
        let controller = match c.get(CONTROLLER_PATH, true, false).await {
            Ok((data, stat)) => {
                election::parse_controller(&data).map(|id| (id, stat.ephemeral_owner == Some(c.session())))
            }
            Err(CoordError::Tree(TreeError::NoNode)) => {
                // Watch for its creation.
                c.exists(CONTROLLER_PATH, true, false).await?;
                None
            }
            Err(e) => return Err(e),
        };
        let mut topics = BTreeMap::new();
        for name in c.children(TOPICS_PATH, true, false).await? {
            let (record, record_version) = match c.get(&topic_path(&name), true, false).await {
                Ok((data, stat)) => match TopicRecord::decode(&data) {
                    Some(record) => (record, stat.version),
                    None => {
                        tracing::warn!(target: "cluster", topic = %name, "topic record does not decode; ignored");
                        continue;
                    }
                },
                Err(CoordError::Tree(TreeError::NoNode)) => continue,
                Err(e) => return Err(e),
            };
            let mut partitions = BTreeMap::new();
            for &p in record.assignment.keys() {
                match c.get(&partition_state_path(&name, p), true, false).await {
                    Ok((data, stat)) => {
                        if self.cluster.detect_restarts {
                            state_written_at.insert((name.clone(), p), stat.mzxid);
                        }
                        if let Some(value) = PartitionState::decode(&data) {
                            partitions.insert(
                                p,
                                Versioned {
                                    value,
                                    version: stat.version,
                                },
                            );
                        }
                    }
                    Err(CoordError::Tree(TreeError::NoNode)) => {}
                    Err(e) => return Err(e),
                }
            }
            topics.insert(
                name,
                TopicView {
                    record,
                    record_version,
                    partitions,
                },
            );
        }
        let delete_requests = c.children(DELETE_TOPICS_PATH, true, false).await?.into_iter().collect();
        let mut log_ends = BTreeMap::new();
        let reporters = match c.children(LOG_ENDS_PATH, true, false).await {
            Ok(children) => children,
            Err(CoordError::Tree(TreeError::NoNode)) => Vec::new(),
            Err(e) => return Err(e),
        };
        for child in reporters {
            let Ok(id) = child.parse::<i32>() else { continue };
            if !live_brokers.contains(&BrokerId(id)) {
                continue;
            }
            match c.get(&log_ends_path(BrokerId(id)), true, false).await {
                Ok((data, _)) => match decode_log_ends(&data) {
                    Some(reports) => {
                        log_ends.insert(BrokerId(id), reports);
                    }
                    None => tracing::warn!(target: "cluster", broker = id, "log end report does not decode; ignored"),
                },
                Err(CoordError::Tree(TreeError::NoNode)) => {}
                Err(e) => return Err(e),
            }
        }
        let broker_view = BrokerView {
            brokers: registrations,
            controller: controller.map(|(id, _)| id),
            topics: topics
                .iter()
                .map(|(name, t)| {
                    let states = t.partitions.iter().map(|(p, v)| (*p, v.value.clone())).collect();
                    (name.clone(), (t.record.clone(), states))
                })
                .collect(),
        };
        Ok(Scan {
            controller_view: ClusterView {
                live_brokers,
                topics,
                registered_at,
                intact_since,
                state_written_at,
                delete_requests,
                log_ends,
            },
            broker_view,
            controller,
        })
    }

    /// Hands the scan to the broker: Metadata's view, the states of the partitions it hosts,
    /// and the removal of topics that are gone.
    fn apply(&self, scan: &Scan) {
        let me = self.me();
        let now = self.rt.now_ms();
        self.rt.with_disk(|disk| {
            let mut b = self.broker.borrow_mut();
            b.set_cluster_view(scan.broker_view.clone());
            for (name, t) in &scan.controller_view.topics {
                for (p, replicas) in &t.record.assignment {
                    if !replicas.contains(&me) {
                        continue;
                    }
                    let Some(state) = t.partitions.get(p) else { continue };
                    // A state naming this broker leader but written before its registration was
                    // meant for its previous process, whose unsynced writes may be gone: wait
                    // for the controller to write a state for this one (KIP-380's broker epoch).
                    // A session expiry or a clean restart lost nothing: no wait (nor would the
                    // controller write a new state).
                    let written_at = scan.controller_view.state_written_at.get(&(name.clone(), *p));
                    let restarted = written_at.is_some_and(|&w| scan.controller_view.restarted_since(me, w));
                    if state.value.leader == Some(me) && restarted {
                        tracing::debug!(target: "replication", topic = %name, partition = p,
                            "state names this broker leader but predates its registration; waiting");
                        continue;
                    }
                    if let Err(e) = b.apply_partition_state(disk, name, &t.record, *p, &state.value, state.version, now) {
                        tracing::error!(target: "replication", topic = %name, partition = p, error = %e,
                            "could not apply the partition's state");
                    }
                    if state.value.leader == Some(me) {
                        let held = Controller::isr_restarted(&scan.controller_view, name, *p, &state.value);
                        b.hold_isr_changes(name, *p, held);
                    }
                }
            }
            // Offsets partitions gained or lost: load or drop their groups now, so parked
            // JoinGroup/SyncGroup requests of a lost partition are answered NOT_COORDINATOR.
            b.sync_group_coordination(disk);
            let gone: Vec<(String, i32)> = b
                .topics()
                .iter()
                .filter(|(name, _)| !scan.controller_view.topics.contains_key(*name))
                .flat_map(|(name, meta)| (0..meta.partitions).map(move |p| (name.clone(), p)))
                .collect();
            // Replicas a reassignment moved off this broker (the assignment no longer names it).
            let moved_off: Vec<(String, i32)> = b
                .topics()
                .iter()
                .filter_map(|(name, meta)| Some((name, meta, scan.controller_view.topics.get(name)?)))
                .flat_map(|(name, meta, t)| {
                    (0..meta.partitions)
                        .filter(|p| t.record.assignment.get(p).is_some_and(|r| !r.contains(&me)))
                        .map(move |p| (name.clone(), p))
                })
                .collect();
            for (name, p) in moved_off {
                if b.log(&name, p).is_some() {
                    tracing::info!(target: "cluster", topic = %name, partition = p, "reassigned away: replica removed");
                    if let Err(e) = b.remove_replica(disk, &name, p) {
                        tracing::error!(target: "cluster", topic = %name, partition = p, error = %e, "replica removal failed");
                    }
                }
            }
            for (name, p) in gone {
                if b.log(&name, p).is_some() {
                    tracing::info!(target: "cluster", topic = %name, partition = p, "topic deleted: replica removed");
                    if let Err(e) = b.remove_replica(disk, &name, p) {
                        tracing::error!(target: "cluster", topic = %name, partition = p, error = %e, "replica removal failed");
                    }
                }
            }
        });
    }

    /// Runs for the office when it is vacant; while holding it, writes the controller's
    /// decisions.
    async fn controller_duties(&mut self, scan: &Scan) -> Step<()> {
        match scan.controller {
            None => {
                let claim = election::claim(self.me());
                match self.execute(&claim.ops).await {
                    Ok(()) => {
                        tracing::info!(target: "controller", broker = self.me().0, "claimed the controller office");
                        self.elect().await?;
                    }
                    Err(e) if fatal(&e) => return Err(End::Expired),
                    Err(_) => {} // someone else won, or the outcome is unknown: the next scan tells
                }
                return Ok(());
            }
            Some((_, false)) => {
                if let Some(c) = self.controller.take() {
                    tracing::warn!(target: "controller", broker = c.id.0, epoch = c.epoch, "controller resigns: another broker holds the office");
                }
                return Ok(());
            }
            Some((_, true)) if self.controller.is_none() => {
                // We hold the office (a claim whose answer was lost, or a failed bump): elect.
                self.elect().await?;
                return Ok(());
            }
            Some((_, true)) => {}
        }
        let Some(controller) = self.controller.clone() else {
            return Ok(());
        };
        let view = &scan.controller_view;
        for change in controller.reconcile(view) {
            let before_leader = change.before.leader.map_or(-1, |b| b.0);
            let after_leader = change.after.leader.map_or(-1, |b| b.0);
            match self.execute(&change.write.ops).await {
                Ok(()) => tracing::info!(target: "controller", topic = %change.topic, partition = change.partition,
                    leader = after_leader, previous_leader = before_leader, epoch = change.after.leader_epoch.0,
                    isr = ?change.after.isr.iter().map(|b| b.0).collect::<Vec<_>>(), unclean = change.unclean,
                    previous_isr = ?change.before.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
                    what = %change.write.what, "partition state changed"),
                Err(e) => return self.write_failed(e, &change.write.what),
            }
        }
        let imbalance_due = controller.config.auto_leader_rebalance
            && self
                .imbalance_schedule
                .as_mut()
                .is_some_and(|s| s.due(self.rt.monotonic_ms()));
        if imbalance_due {
            for change in controller.leader_imbalance_elections(view) {
                match self.execute(&change.write.ops).await {
                    Ok(()) => {
                        tracing::info!(target: "controller", what = %change.write.what, "preferred leader elected")
                    }
                    Err(e) => return self.write_failed(e, &change.write.what),
                }
            }
        }
        for write in controller.reassignment_steps(view) {
            match self.execute(&write.ops).await {
                Ok(()) => tracing::info!(target: "controller", what = %write.what, "reassignment step"),
                Err(e) => return self.write_failed(e, &write.what),
            }
        }
        if controller.config.auto_rebalance && self.balanced_for.as_ref() != Some(&view.live_brokers) {
            match controller.auto_rebalance_step(view) {
                controller::AutoRebalance::Balanced => {
                    tracing::info!(target: "controller", live = ?view.live_brokers.iter().map(|b| b.0).collect::<Vec<_>>(),
                        "auto rebalance: balanced");
                    self.balanced_for = Some(view.live_brokers.clone());
                }
                controller::AutoRebalance::Wait(why) => {
                    tracing::debug!(target: "controller", why = %why, "auto rebalance waits");
                }
                controller::AutoRebalance::Move(write) => match self.execute(&write.ops).await {
                    Ok(()) => tracing::info!(target: "controller", what = %write.what, "auto rebalance: move written"),
                    Err(e) => return self.write_failed(e, &write.what),
                },
            }
        }
        for name in &view.delete_requests {
            let request = format!("{DELETE_TOPICS_PATH}/{name}");
            let ops = match controller.delete_topic(view, name) {
                Some(write) => write.ops,
                None => vec![
                    controller.fence(),
                    controller::Op::Delete {
                        path: request,
                        expected_version: None,
                    },
                ],
            };
            match self.execute(&ops).await {
                Ok(()) => tracing::info!(target: "controller", topic = %name, "topic deleted"),
                Err(e) => return self.write_failed(e, &format!("delete topic {name}")),
            }
        }
        Ok(())
    }

    /// A controller write failed: on the fence, the office is lost; otherwise the next scan
    /// shows what changed.
    fn write_failed(&mut self, e: CoordError, what: &str) -> Step<()> {
        if fatal(&e) {
            return Err(End::Expired);
        }
        if let CoordError::MultiFailed { index: 0, .. } = e {
            if let Some(c) = self.controller.take() {
                tracing::warn!(target: "controller", broker = c.id.0, epoch = c.epoch, "controller fenced: a newer controller epoch exists");
            }
        } else {
            tracing::debug!(target: "controller", error = %e, what, "controller write failed; re-reading");
        }
        Ok(())
    }

    /// Step 2 of the election: bump `/controller_epoch`.
    async fn elect(&mut self) -> Step<()> {
        let current = match self.client.get(CONTROLLER_EPOCH_PATH, false, true).await {
            Ok((data, stat)) => match election::parse_epoch(&data) {
                Some(epoch) => Some((epoch, stat.version)),
                None => {
                    tracing::error!(target: "controller", "/controller_epoch does not decode");
                    return Ok(());
                }
            },
            Err(CoordError::Tree(TreeError::NoNode)) => None,
            Err(e) if fatal(&e) => return Err(End::Expired),
            Err(_) => return Ok(()),
        };
        let (bump, epoch) = election::bump_epoch(current);
        match self.execute(&bump.ops).await {
            Ok(()) => {
                let c = election::elected(self.me(), current, self.controller_config());
                tracing::info!(target: "controller", broker = self.me().0, controller_epoch = epoch, "became controller");
                self.controller = Some(c);
                self.balanced_for = None;
                let interval_ms = self.cluster.controller.leader_imbalance_check_interval_ms;
                self.imbalance_schedule = Some(ImbalanceSchedule::new(self.rt.monotonic_ms(), interval_ms));
            }
            Err(e) if fatal(&e) => return Err(End::Expired),
            Err(e) => {
                tracing::info!(target: "controller", broker = self.me().0, error = %e, "epoch bump failed; resigning");
                let _ = self.client.delete(CONTROLLER_PATH, None).await;
            }
        }
        Ok(())
    }

    /// Runs a controller write as one multi.
    async fn execute(&self, ops: &[controller::Op]) -> Result<(), CoordError> {
        let ops = ops.iter().map(to_coord_op).collect();
        self.client.multi(ops).await.map(|_| ())
    }

    /// Creates `__consumer_offsets` as Kafka does on the first FindCoordinator: the configured
    /// partitions, the replication factor capped at the live brokers, the cluster's min ISR.
    /// Any broker may; a concurrent creation by another wins and this one is refused.
    async fn create_offsets_topic(&mut self, scan: &Scan) -> Step<()> {
        let Coordination::Partitioned {
            partitions,
            replication_factor,
        } = self.cluster.group_coordination
        else {
            return Ok(());
        };
        if scan.controller_view.topics.contains_key(OFFSETS_TOPIC) {
            return Ok(());
        }
        let live = i32::try_from(scan.controller_view.live_brokers.len()).unwrap_or(i32::MAX);
        let rf = i32::from(replication_factor).min(live).max(1);
        let creator = Controller::new(self.me(), 0, 0, self.controller_config());
        let draw = CreateTopicDraw {
            topic_id: crate::broker::TopicId::from_random(self.rt.random_u64(), self.rt.random_u64()),
            start_index: self.rt.random_u64() as usize,
            replica_shift: self.rt.random_u64() as usize,
        };
        let write = match creator.create_topic(
            &scan.controller_view,
            OFFSETS_TOPIC,
            partitions,
            rf,
            &BTreeMap::new(),
            draw,
        ) {
            Ok((_, write)) => write,
            Err(e) => {
                tracing::warn!(target: "groups", error = %e.message, "offsets topic not created");
                return Ok(());
            }
        };
        let ops: Vec<controller::Op> = write
            .ops
            .into_iter()
            .filter(|op| !matches!(op, controller::Op::Check { .. }))
            .collect();
        match self.execute(&ops).await {
            Ok(()) => {
                tracing::info!(target: "groups", partitions, replication_factor = rf, "offsets topic created");
                Ok(())
            }
            Err(e) if fatal(&e) => Err(End::Expired),
            Err(e) => {
                tracing::debug!(target: "groups", error = %e, "offsets topic not created (another broker may have)");
                Ok(())
            }
        }
    }

    async fn admin_job(&mut self, scan: &Scan, request: &AdminRequest) -> Step<AdminResults> {
        let mut results = Vec::new();
        match request {
            AdminRequest::Create(req) => {
                // Creation conflicts only with itself: any broker may write it, unfenced.
                let creator = Controller::new(self.me(), 0, 0, self.controller_config());
                for t in &req.topics {
                    let configs: BTreeMap<String, String> = t
                        .configs
                        .iter()
                        .filter_map(|c| c.value.clone().map(|v| (c.name.clone(), v)))
                        .collect();
                    // The controller checks the replication keys itself; the rest are the log's.
                    let mut log_configs = configs.clone();
                    log_configs.remove("unclean.leader.election.enable");
                    if let Err(why) = self.broker.borrow().check_topic_configs(&log_configs) {
                        results.push((t.name.clone(), ErrorCode::InvalidConfig, why, None));
                        continue;
                    }
                    let topic_id = crate::broker::TopicId::from_random(self.rt.random_u64(), self.rt.random_u64());
                    let draw = CreateTopicDraw {
                        topic_id,
                        start_index: self.rt.random_u64() as usize,
                        replica_shift: self.rt.random_u64() as usize,
                    };
                    let partitions = if t.num_partitions == -1 { 1 } else { t.num_partitions };
                    let rf = if t.replication_factor == -1 {
                        1
                    } else {
                        i32::from(t.replication_factor)
                    };
                    let write =
                        match creator.create_topic(&scan.controller_view, &t.name, partitions, rf, &configs, draw) {
                            Ok((_, write)) => write,
                            Err(e) => {
                                results.push((t.name.clone(), e.code, e.message, None));
                                continue;
                            }
                        };
                    if req.validate_only {
                        results.push((t.name.clone(), ErrorCode::None, String::new(), None));
                        continue;
                    }
                    let ops: Vec<controller::Op> = write
                        .ops
                        .into_iter()
                        .filter(|op| !matches!(op, controller::Op::Check { .. }))
                        .collect();
                    let result = match self.execute(&ops).await {
                        Ok(()) => {
                            tracing::info!(target: "controller", topic = %t.name, partitions, replication_factor = rf, "topic created");
                            (t.name.clone(), ErrorCode::None, String::new(), Some(topic_id))
                        }
                        Err(e) if fatal(&e) => return Err(End::Expired),
                        Err(CoordError::MultiFailed {
                            error: TreeError::NodeExists,
                            ..
                        }) => (
                            t.name.clone(),
                            ErrorCode::TopicAlreadyExists,
                            format!("topic {} already exists", t.name),
                            None,
                        ),
                        Err(e) => (t.name.clone(), ErrorCode::RequestTimedOut, e.to_string(), None),
                    };
                    results.push(result);
                }
            }
            AdminRequest::Reassign(items, allow_rf_change) => {
                let mut view = scan.controller_view.clone();
                for (topic, p, target) in items {
                    let result = self
                        .reassign_one(&mut view, topic, *p, target.as_deref(), *allow_rf_change)
                        .await?;
                    results.push((topic.clone(), result.0, result.1, None));
                }
            }
            AdminRequest::Elect(items) => {
                // The controller elects fenced; another broker writes by compare-and-set on the
                // state version alone, as for a reassignment.
                let fenced = self.controller.is_some();
                let deciding = self
                    .controller
                    .clone()
                    .unwrap_or_else(|| Controller::new(self.me(), 0, 0, self.controller_config()));
                let view = &scan.controller_view;
                let changes = deciding.preferred_leader_elections(view);
                for (topic, p) in items {
                    let state = view.topics.get(topic).and_then(|t| t.partitions.get(p));
                    let preferred = view
                        .topics
                        .get(topic)
                        .and_then(|t| t.record.assignment.get(p))
                        .and_then(|r| r.first().copied());
                    let result = match (state, changes.iter().find(|c| c.topic == *topic && c.partition == *p)) {
                        (None, _) => (ErrorCode::UnknownTopicOrPartition, format!("no partition {topic}-{p}")),
                        (Some(_), Some(change)) => {
                            let ops: Vec<controller::Op> = change
                                .write
                                .ops
                                .iter()
                                .filter(|op| fenced || !matches!(op, controller::Op::Check { path, .. } if path == CONTROLLER_EPOCH_PATH))
                                .cloned()
                                .collect();
                            match self.execute(&ops).await {
                                Ok(()) => {
                                    tracing::info!(target: "controller", what = %change.write.what, "preferred leader elected (ElectLeaders)");
                                    (ErrorCode::None, String::new())
                                }
                                Err(e) if fatal(&e) => return Err(End::Expired),
                                Err(e) => (ErrorCode::RequestTimedOut, e.to_string()),
                            }
                        }
                        (Some(s), None) if s.value.leader.is_some() && s.value.leader == preferred => {
                            (ErrorCode::ElectionNotNeeded, String::new())
                        }
                        (Some(_), None) => (
                            ErrorCode::PreferredLeaderNotAvailable,
                            format!("{topic}-{p}: the preferred replica is not live and in sync"),
                        ),
                    };
                    results.push((topic.clone(), result.0, result.1, None));
                }
            }
            AdminRequest::Delete(names) => {
                for name in names {
                    if !scan.controller_view.topics.contains_key(name) {
                        results.push((
                            name.clone(),
                            ErrorCode::UnknownTopicOrPartition,
                            format!("no topic {name}"),
                            None,
                        ));
                        continue;
                    }
                    let path = format!("{DELETE_TOPICS_PATH}/{name}");
                    match self.client.create(&path, &[], CreateMode::Persistent).await {
                        Ok(_) | Err(CoordError::Tree(TreeError::NodeExists)) => {
                            results.push((name.clone(), ErrorCode::None, String::new(), None))
                        }
                        Err(e) if fatal(&e) => return Err(End::Expired),
                        Err(e) => results.push((name.clone(), ErrorCode::RequestTimedOut, e.to_string(), None)),
                    }
                }
            }
        }
        Ok(results)
    }
}

impl<R: Runtime> Session<R> {
    /// One partition of an AlterPartitionReassignments: decide on `view`, write; a lost race
    /// (another write moved the topic or state version) re-reads and decides again, bounded.
    async fn reassign_one(
        &mut self,
        view: &mut ClusterView,
        topic: &str,
        p: i32,
        target: Option<&[BrokerId]>,
        allow_rf_change: bool,
    ) -> Step<(ErrorCode, String)> {
        const ATTEMPTS_MAX: usize = 5;
        if let (false, Some(target), Some(t)) = (allow_rf_change, target, view.topics.get(topic)) {
            let original = t.record.original_replicas(p);
            if !original.is_empty() && original.len() != target.len() {
                return Ok((
                    ErrorCode::InvalidReplicationFactor,
                    format!("{topic}-{p}: {} replicas now, {} asked", original.len(), target.len()),
                ));
            }
        }
        // Any broker may write it: both znodes are compare-and-set, which orders it against the
        // controller's and the leaders' writes (as topic creation).
        let deciding = Controller::new(self.me(), 0, 0, self.controller_config());
        for _ in 0..ATTEMPTS_MAX {
            let write = match deciding.alter_reassignment(view, topic, p, target) {
                Ok(Some(write)) => write,
                Ok(None) => return Ok((ErrorCode::None, String::new())),
                Err(e) => return Ok((e.code, e.message)),
            };
            // Unfenced: drop the controller-epoch check, keep the state's version check.
            let ops: Vec<controller::Op> = write
                .ops
                .into_iter()
                .filter(|op| !matches!(op, controller::Op::Check { path, .. } if path == CONTROLLER_EPOCH_PATH))
                .collect();
            match self.execute(&ops).await {
                Ok(()) => {
                    tracing::info!(target: "controller", what = %write.what, "reassignment written");
                    return Ok((ErrorCode::None, String::new()));
                }
                Err(e) if fatal(&e) => return Err(End::Expired),
                Err(e) => {
                    tracing::debug!(target: "controller", error = %e, "reassignment write lost a race; re-reading");
                    match self.scan().await {
                        Ok(scan) => *view = scan.controller_view,
                        Err(e) if fatal(&e) => return Err(End::Expired),
                        Err(_) => {}
                    }
                }
            }
        }
        Ok((
            ErrorCode::RequestTimedOut,
            format!("{topic}-{p}: concurrent changes; try again"),
        ))
    }
}

fn to_coord_op(op: &controller::Op) -> Op {
    match op {
        controller::Op::Create { path, data, mode } => Op::Create {
            path: path.clone(),
            data: data.clone(),
            mode: match mode {
                controller::CreateMode::Persistent => CreateMode::Persistent,
                controller::CreateMode::Ephemeral => CreateMode::Ephemeral,
            },
        },
        controller::Op::Set {
            path,
            data,
            expected_version,
        } => Op::SetData {
            path: path.clone(),
            data: data.clone(),
            expected_version: *expected_version,
        },
        controller::Op::Delete { path, expected_version } => Op::Delete {
            path: path.clone(),
            expected_version: *expected_version,
        },
        controller::Op::Check { path, version } => Op::Check {
            path: path.clone(),
            expected_version: Some(*version),
        },
        controller::Op::CheckCreated { path, czxid } => Op::CheckCreated {
            path: path.clone(),
            czxid: *czxid,
        },
        controller::Op::CheckAbsent { path } => Op::CheckAbsent { path: path.clone() },
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
