//! The broker node: one async driver, generic over [`Runtime`], that serves the Kafka protocol
//! from a [`Broker`]. The simulator runs it on madsim, `gregor dev` on real sockets; nothing in it
//! knows which.
//!
//! Per connection, requests are handled one at a time in arrival order and answered in that
//! order, as Kafka does (a waiting Fetch holds back the connection's later requests). Frames are
//! untrusted: a frame that does not decode closes its connection only; other connections and the
//! broker carry on. The broker's state is shared by the node's tasks on one thread
//! (`Rc<RefCell<_>>`); no borrow is held across an `.await`.
//!
//! A Fetch without enough data and an acks=all Produce below the high watermark wait (Kafka's
//! purgatory) until [`watch`] wakes them: appends, follower fetches, replica fetch answers and
//! cluster state changes poke the partitions they touched. They never poll on a short timer.

pub mod acl_sync;
mod auth;
pub mod authz;
pub mod cluster;
pub mod handlers;
pub mod replica_fetcher;
pub mod scram_sync;
pub mod throttle;
pub mod watch;

use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use crate::broker::{Broker, BrokerConfig, BrokerError, TopicId};
use crate::error_code::ErrorCode;
use crate::group::{Reply, OFFSETS_TOPIC};
use crate::protocol::api::api_versions::ApiVersionsResponse;
use crate::protocol::api::{heartbeat, join_group, leave_group, sync_group};
use crate::protocol::{decode_request_bytes_on, encode_response, encode_response_with, DecodeError, Limits, Request};
use crate::runtime::{Connection, FramePart, Listener, NetError, Runtime};
use crate::security::acl::Operation;
use crate::security::{ConnContext, SaslConfig, SaslState};
pub use handlers::Advertised;

/// How a broker node listens and answers.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// `host:port` to listen on.
    pub listen: String,
    pub advertised: Advertised,
    pub broker: BrokerConfig,
    /// Decoder limits (`socket.request.max.bytes` and friends).
    pub limits: Limits,
    /// The longest a Fetch may wait for data, whatever its `max_wait_ms` asks.
    pub fetch_wait_ms_max: u64,
    /// How often a parked JoinGroup or SyncGroup looks for its answer.
    pub fetch_poll_ms: u64,
    /// Whether Fetch responses carry record batches as file regions for the runtime to send
    /// from the segment file ([`Runtime::send_parts`]) rather than copies read here. Off in the
    /// simulator, where a read fault must answer the partition with KAFKA_STORAGE_ERROR, as it
    /// always has; realnet turns it on.
    pub fetch_zero_copy: bool,
    /// A waiting Fetch or acks=all Produce is woken by the partition's change ([`watch`]); this
    /// is the longest it sleeps without one before it looks again anyway. 500 ms, Kafka's
    /// default `fetch.max.wait.ms`, so a waiting Fetch only looks again at its deadline (Kafka's
    /// purgatory has no periodic recheck at all). At 100 ms, the rechecks of the long-polls
    /// were 16% of an idle simulated cluster's instructions.
    pub wait_recheck_ms: u64,
    /// Wakes waiting requests when a partition changes; clones of the config share it.
    pub watch: watch::PartitionWatch,
    /// In cluster mode, where CreateTopics and DeleteTopics go (the coordinator holds topics);
    /// `None` for a single node, whose broker creates and deletes them itself.
    pub admin: Option<cluster::AdminQueue>,
    /// The listener's SASL settings when its security protocol uses SASL (`SASL_PLAINTEXT`,
    /// `SASL_SSL`); `None` serves every connection as `User:ANONYMOUS`.
    pub sasl: Option<Rc<SaslConfig>>,
    /// `authorizer.class.name` set: every request is checked against these ACLs ([`authz`]);
    /// `None` checks nothing.
    pub acls: Option<authz::NodeAcls>,
    /// Cluster mode with SASL: where AlterUserScramCredentials goes (the coordinator holds the
    /// SCRAM users, [`scram_sync`]); `None` on a single node, whose `sasl` is the store.
    pub users: Option<scram_sync::UserAdmin>,
    /// `leader.replication.throttled.rate`: bytes per second this broker, as leader, serves to
    /// the replicas a reassignment is adding that are not in the ISR yet, over all partitions
    /// ([`handlers::fetch_with`]); `None`: unthrottled. Clones of the config share the bucket.
    pub leader_throttle: Option<Rc<RefCell<throttle::Throttle>>>,
}

impl NodeConfig {
    pub fn single_node(listen: &str, advertised_host: &str, port: i32, cluster_id: &str) -> NodeConfig {
        NodeConfig {
            listen: listen.to_string(),
            advertised: Advertised {
                host: advertised_host.to_string(),
                port,
                cluster_id: cluster_id.to_string(),
            },
            broker: BrokerConfig::default(),
            limits: Limits::default(),
            fetch_wait_ms_max: 30_000,
            fetch_poll_ms: 5,
            fetch_zero_copy: false,
            wait_recheck_ms: 500,
            watch: watch::PartitionWatch::default(),
            admin: None,
            sasl: None,
            acls: None,
            users: None,
            leader_throttle: None,
        }
    }
}

#[derive(Debug, Error)]
pub enum NodeError {
    #[error("broker: {0}")]
    Broker(#[from] BrokerError),
    #[error("network: {0}")]
    Net(#[from] NetError),
}

/// A running broker's shared state.
pub type SharedBroker = Rc<RefCell<Broker>>;

/// Opens the broker's data and listens. Returns the shared broker once it is listening, and the
/// accept loop to run (spawn it, or await it).
pub async fn start_broker<R: Runtime>(
    rt: R,
    config: NodeConfig,
) -> Result<(SharedBroker, impl std::future::Future<Output = ()>), NodeError> {
    let now = rt.now_ms();
    let broker = rt.with_disk(|disk| Broker::open(disk, config.broker.clone(), now))?;
    for warning in &broker.startup_warnings {
        tracing::warn!(%warning, "broker startup");
    }
    tracing::info!(topics = broker.topics().len(), listen = %config.listen, "broker opened its data");
    let shared = Rc::new(RefCell::new(broker));
    let mut listener = rt.listen(&config.listen).await?;
    rt.spawn(run_timers(rt.clone(), shared.clone(), config.watch.clone()));
    let state = shared.clone();
    let accept_loop = async move {
        loop {
            match listener.accept().await {
                Ok(conn) => rt.spawn(serve_connection(rt.clone(), state.clone(), config.clone(), conn)),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    rt.sleep(Duration::from_millis(10)).await;
                }
            }
        }
    };
    Ok((shared, accept_loop))
}

/// Runs the broker's time-driven work (`flush.ms`, retention) for as long as the node lives.
async fn run_timers<R: Runtime>(rt: R, broker: SharedBroker, watch: watch::PartitionWatch) {
    loop {
        let now = rt.now_ms();
        let deadline = broker.borrow().poll_timeout().unwrap_or(now + 1_000);
        if deadline > now {
            // Wake at least every second: a new flush.ms deadline may have appeared meanwhile.
            rt.sleep(Duration::from_millis((deadline - now).clamp(1, 1_000) as u64))
                .await;
            continue;
        }
        let failures = rt.with_disk(|disk| broker.borrow_mut().handle_timeout(disk, now));
        for (topic, partition, error) in failures {
            tracing::error!(%topic, partition, %error, "partition failed; it answers KAFKA_STORAGE_ERROR from now on");
        }
        // Retention may have moved log starts, a failure may have failed a partition.
        watch.poke_all();
    }
}

/// `offsets.commit.timeout.ms` (Kafka's default): how long a commit waits for its offsets
/// partition's high watermark before it fails COORDINATOR_NOT_AVAILABLE (retriable).
const OFFSETS_COMMIT_TIMEOUT_MS: u64 = 5_000;

/// Cluster mode: loads or drops offsets partitions whose leadership changed, before a group
/// request is answered from them.
fn sync_group_coordination<R: Runtime>(rt: &R, broker: &SharedBroker) {
    rt.with_disk(|disk| broker.borrow_mut().sync_group_coordination(disk));
}

/// What to do after a frame.
pub(crate) enum Outcome {
    Reply(Bytes),
    /// A reply of bytes and file regions (a zero-copy Fetch), header included.
    ReplyParts(Vec<FramePart>),
    NoReply,
    Close(String),
    /// Send the reply, then close (a refused SASL login, as Kafka does).
    ReplyThenClose(Bytes, String),
}

async fn serve_connection<R: Runtime>(rt: R, broker: SharedBroker, config: NodeConfig, mut conn: R::Conn) {
    let peer = conn.peer();
    let mut ctx = ConnContext::new(&peer);
    ctx.sasl = SaslState::for_listener(config.sasl.is_some());
    loop {
        let frame = match conn.recv().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "connection ended");
                break;
            }
        };
        match handle_frame_from(&rt, &broker, &config, &frame, &mut ctx).await {
            Outcome::Reply(bytes) => {
                if let Err(e) = conn.send(bytes).await {
                    tracing::debug!(%peer, error = %e, "send failed");
                    break;
                }
            }
            Outcome::ReplyParts(parts) => {
                if let Err(e) = rt.send_parts(&mut conn, parts).await {
                    tracing::debug!(%peer, error = %e, "send failed");
                    break;
                }
            }
            Outcome::NoReply => {}
            Outcome::Close(why) => {
                tracing::info!(%peer, %why, "closing connection");
                break;
            }
            Outcome::ReplyThenClose(bytes, why) => {
                // Best effort: the connection closes either way.
                let _ = conn.send(bytes).await;
                tracing::info!(%peer, %why, "closing connection");
                break;
            }
        }
    }
}

#[cfg(test)]
pub(crate) async fn handle_frame<R: Runtime>(
    rt: &R,
    broker: &SharedBroker,
    config: &NodeConfig,
    frame: &Bytes,
) -> Outcome {
    handle_frame_from(rt, broker, config, frame, &mut ConnContext::new("")).await
}

/// Kafka's spelling of a member's host in DescribeGroups: `/` and the peer's address, no port.
fn client_host(peer: &str) -> String {
    let host = peer.rsplit_once(':').map_or(peer, |(h, _)| h);
    format!("/{}", host.trim_start_matches('[').trim_end_matches(']'))
}

/// The longest a cluster broker holds a Metadata request that arrived before its first read of
/// the cluster state; then it answers LEADER_NOT_AVAILABLE, which clients retry.
const FIRST_SCAN_WAIT_MS_MAX: u64 = 10_000;

/// KRaft brokers do not serve before they caught up with the metadata: a cluster broker that
/// has not read the cluster state yet (it just started) holds a Metadata request until it has
/// (the cluster task pokes every waiter after each scan), at most [`FIRST_SCAN_WAIT_MS_MAX`].
/// Answered at once, the client saw its topics without partitions (a confluent-kafka producer
/// then took a topic for empty).
async fn wait_for_first_scan<R: Runtime>(rt: &R, broker: &SharedBroker, config: &NodeConfig) {
    let deadline = rt.monotonic_ms().saturating_add(FIRST_SCAN_WAIT_MS_MAX);
    loop {
        let now = rt.monotonic_ms();
        if broker.borrow().cluster_view().is_some() || now >= deadline {
            return;
        }
        let recheck = config.wait_recheck_ms.min(deadline - now).max(1);
        config
            .watch
            .wait(Vec::new(), rt.sleep(Duration::from_millis(recheck)))
            .await;
    }
}

/// One request frame on the connection `ctx` (its peer, its principal) to its outcome.
pub(crate) async fn handle_frame_from<R: Runtime>(
    rt: &R,
    broker: &SharedBroker,
    config: &NodeConfig,
    frame: &Bytes,
    ctx: &mut ConnContext,
) -> Outcome {
    if ctx.sasl.expects_bare_token() {
        return auth::bare_token(rt, config, frame, ctx).await;
    }
    let (header, request) = match decode_request_bytes_on(frame, config.limits, &mut ctx.client_id, &mut ctx.topic) {
        Ok(decoded) => decoded,
        // KIP-511: an ApiVersions of a version we do not know still gets a v0 answer listing
        // what we speak, so the client can pick a version.
        Err(DecodeError::UnsupportedVersion { header }) if header.api_key == 18 => {
            let body = ApiVersionsResponse {
                api_keys: handlers::api_versions().api_keys,
                ..ApiVersionsResponse::unsupported_version()
            };
            return Outcome::Reply(encode_response(&header, &body.encode(0)));
        }
        Err(e) => return Outcome::Close(format!("undecodable request: {e}")),
    };
    if let Some(outcome) = auth::gate(rt, config, &header, &request, ctx).await {
        return outcome;
    }
    let version = header.api_version;
    let now = rt.now_ms();
    let new_id = || TopicId::from_random(rt.random_u64(), rt.random_u64());
    let gate = authz::Gate::new(config.acls.as_ref(), ctx);
    // The checks split a request into the part the principal may make and the refused rest.
    let mut request = request;
    if matches!(request, Request::Metadata(_)) && config.admin.is_some() {
        wait_for_first_scan(rt, broker, config).await;
    }
    let body = match &mut request {
        Request::ApiVersions(_) => handlers::api_versions().encode(version),
        Request::Metadata(req) if config.admin.is_some() && broker.borrow().cluster_view().is_none() => {
            let me = broker.borrow().config().broker_id;
            handlers::metadata_not_ready(req, &config.advertised, me).encode(version)
        }
        Request::Metadata(req) => {
            let refused = gate.screen_metadata(req);
            let creating = config
                .admin
                .as_ref()
                .map(|admin| admin.auto_create(broker, req))
                .unwrap_or_default();
            let mut resp = rt
                .with_disk(|disk| handlers::metadata(&mut broker.borrow_mut(), disk, req, &config.advertised, new_id));
            for t in &mut resp.topics {
                let being_created = t.name.as_ref().is_some_and(|n| creating.contains(n));
                if being_created && t.error_code == crate::error_code::ErrorCode::UnknownTopicOrPartition.code() {
                    t.error_code = crate::error_code::ErrorCode::LeaderNotAvailable.code();
                }
            }
            gate.finish_metadata(&mut resp, refused);
            resp.encode(version)
        }
        Request::Produce(req) => {
            let refused = gate.split_produce(req);
            let (mut resp, mut pending) =
                rt.with_disk(|disk| handlers::produce_parked(&mut broker.borrow_mut(), disk, req, now));
            resp.topics.extend(refused);
            // New records: followers' fetches waiting at the old log end answer now, whatever
            // the acks (Kafka completes delayed fetches after every leader append).
            {
                let b = broker.borrow();
                for t in &req.topics {
                    for p in &t.partitions {
                        config.watch.poke(&b, &t.name, p.index);
                    }
                }
            }
            if req.acks == 0 {
                return Outcome::NoReply;
            }
            // acks=all on a replicated partition: parked until the HW passes the batch, the
            // request's timeout, or a leadership change.
            let timeout_ms = u64::try_from(req.timeout_ms.max(0)).unwrap_or(0);
            // One clock reading serves each pass up to its wait (a pass does not take long; in the
            // simulator the clock only moves across an await).
            let mut now = rt.monotonic_ms();
            let deadline = now.saturating_add(timeout_ms);
            while !pending.is_empty() {
                let interests = pending
                    .iter()
                    .map(|w| watch::Interest::high_watermark_at_least(w.topic(&resp), w.partition, w.end_offset.0));
                let recheck = config.wait_recheck_ms.min(deadline.saturating_sub(now)).max(1);
                config
                    .watch
                    .wait(interests, rt.sleep(Duration::from_millis(recheck)))
                    .await;
                now = rt.monotonic_ms();
                let timed_out = now >= deadline;
                handlers::settle_acks(&broker.borrow(), &mut resp, &mut pending, timed_out);
            }
            // Header and body in one buffer, rather than the body alone then copied.
            return Outcome::Reply(encode_response_with(&header, resp.size_hint(), |w| {
                resp.write(version, w)
            }));
        }
        Request::Fetch(req) => {
            let wait_ms = u64::try_from(req.max_wait_ms.max(0))
                .unwrap_or(0)
                .min(config.fetch_wait_ms_max);
            let deadline = rt.monotonic_ms().saturating_add(wait_ms);
            let min_bytes = u64::try_from(req.min_bytes.max(0)).unwrap_or(0);
            let zero_copy = config.fetch_zero_copy;
            // A follower's fetch waits for the log end, a consumer's for the high watermark.
            let follower = req.replica_id >= 0;
            let refused = gate.split_fetch(&broker.borrow(), req, version);
            let req = &*req;
            let asked: Vec<AskedPartition<'_>> = {
                let b = broker.borrow();
                req.topics
                    .iter()
                    .filter_map(|t| handlers::fetch_topic_name(&b, t, version).map(|n| (n, t)))
                    .flat_map(|(n, t)| {
                        t.partitions
                            .iter()
                            .map(move |p| (n.clone(), p.partition, p.fetch_offset, p.current_leader_epoch))
                    })
                    .collect()
            };
            // Whether a pass may first ask the broker if the answer would be empty, and wait
            // without building it: every partition is named and allowed (else the answer has an
            // error), the request waits for at least a byte, and no leader throttle is charged
            // per read (its bucket counts each read's time).
            let partitions = req.topics.iter().map(|t| t.partitions.len()).sum::<usize>();
            let may_skip =
                refused.is_empty() && min_bytes > 0 && config.leader_throttle.is_none() && asked.len() == partitions;
            let reader = follower.then_some(crate::ids::BrokerId(req.replica_id));
            loop {
                // One clock reading serves this pass up to its wait, as above.
                let now = rt.monotonic_ms();
                let mut quota = config.leader_throttle.as_ref().map(|t| t.borrow_mut());
                let leader_quota = quota.as_deref_mut().map(|t| (t, now));
                let skip = may_skip && now < deadline;
                let (answer, moved) = rt.with_disk(|disk| {
                    let now = rt.now_ms();
                    let b = &mut broker.borrow_mut();
                    let moved = handlers::record_follower_fetches(b, req, version, now);
                    let empty = skip
                        && asked.iter().all(|(topic, partition, offset, epoch)| {
                            b.fetch_is_empty(topic, *partition, reader, crate::ids::Offset(*offset), *epoch)
                        });
                    let answer = (!empty).then(|| handlers::fetch_with(b, disk, req, version, zero_copy, leader_quota));
                    (answer, moved)
                });
                drop(quota);
                // The follower's fetch offsets may have moved high watermarks: a poke of each
                // partition whose HW moved (or that refused the record). The others' watched
                // offsets are unchanged, so their poke would wake nobody.
                if !moved.is_empty() {
                    let b = broker.borrow();
                    for (topic, partition) in &moved {
                        config.watch.poke(&b, topic, *partition);
                    }
                }
                // No answer: the shortcut found it empty, as the full read would have.
                if let Some((mut resp, bytes)) = answer {
                    resp.topics.extend(refused.iter().cloned());
                    let errors = resp
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .any(|p| p.error_code != 0);
                    if bytes >= min_bytes || errors || now >= deadline {
                        if zero_copy {
                            let mut parts = resp.encode_parts(version);
                            let head = encode_response(&header, &[]);
                            parts.insert(0, FramePart::Bytes(head));
                            return Outcome::ReplyParts(parts);
                        }
                        // Header and body in one buffer sized for the records (see
                        // `encode_response_with`), rather than the body alone then copied.
                        let size = resp.size_hint();
                        return Outcome::Reply(encode_response_with(&header, size, |w| resp.write(version, w)));
                    }
                }
                let recheck = config.wait_recheck_ms.min(deadline - now).max(1);
                config
                    .watch
                    .wait(
                        fetch_interests(&asked, follower),
                        rt.sleep(Duration::from_millis(recheck)),
                    )
                    .await;
            }
        }
        Request::ListOffsets(req) => {
            let refused = gate.split_list_offsets(req);
            let mut resp = rt.with_disk(|disk| handlers::list_offsets(&broker.borrow(), disk, req));
            resp.topics.extend(refused);
            resp.encode(version)
        }
        Request::CreateTopics(req) => {
            let refused = gate.split_create_topics(req);
            let mut resp = if req.topics.is_empty() && !refused.is_empty() {
                Default::default()
            } else if let Some(admin) = &config.admin {
                admin.create_topics(rt, broker, req).await
            } else {
                rt.with_disk(|disk| handlers::create_topics(&mut broker.borrow_mut(), disk, req, new_id))
            };
            resp.topics.extend(refused);
            resp.encode(version)
        }
        Request::InitProducerId(req) => match gate.refuse_init_producer_id(req) {
            Some(refusal) => refusal.encode(version),
            None => rt
                .with_disk(|disk| handlers::init_producer_id(&mut broker.borrow_mut(), disk, req))
                .encode(version),
        },
        Request::FindCoordinator(req) => {
            let mut resp = handlers::groups::find_coordinator(&mut broker.borrow_mut(), req, &config.advertised);
            if let Some(admin) = &config.admin {
                // The cluster task creates the offsets topic when asked: wake it.
                if broker.borrow().offsets_topic_wanted() {
                    admin.doorbell().ring();
                }
            }
            gate.finish_find_coordinator(req.key_type, &mut resp);
            resp.encode(version)
        }
        Request::JoinGroup(req) if !gate.may_group(Operation::Read, &req.group_id) => join_group::JoinGroupResponse {
            error_code: ErrorCode::GroupAuthorizationFailed.code(),
            generation_id: -1,
            ..Default::default()
        }
        .encode(version),
        Request::SyncGroup(req) if !gate.may_group(Operation::Read, &req.group_id) => sync_group::SyncGroupResponse {
            error_code: ErrorCode::GroupAuthorizationFailed.code(),
            ..Default::default()
        }
        .encode(version),
        Request::Heartbeat(req) if !gate.may_group(Operation::Read, &req.group_id) => heartbeat::HeartbeatResponse {
            error_code: ErrorCode::GroupAuthorizationFailed.code(),
            ..Default::default()
        }
        .encode(version),
        Request::LeaveGroup(req) if !gate.may_group(Operation::Read, &req.group_id) => {
            leave_group::LeaveGroupResponse {
                error_code: ErrorCode::GroupAuthorizationFailed.code(),
                ..Default::default()
            }
            .encode(version)
        }
        Request::JoinGroup(req) => {
            sync_group_coordination(rt, broker);
            let client_id = header.client_id.as_deref().unwrap_or_default();
            let nonce = rt.random_u64();
            let reply =
                handlers::groups::join_group(broker.borrow_mut().groups_mut(), req, version, client_id, nonce, now);
            let resp = match reply {
                Reply::Now(resp) => resp,
                Reply::Parked(ticket) => loop {
                    rt.sleep(Duration::from_millis(config.fetch_poll_ms.max(1))).await;
                    let taken = broker.borrow_mut().groups_mut().take_join(ticket);
                    if let Some(resp) = taken {
                        break resp;
                    }
                },
            };
            if resp.error_code == 0 && !ctx.peer.is_empty() {
                let host = client_host(&ctx.peer);
                broker
                    .borrow_mut()
                    .groups_mut()
                    .set_client_host(&req.group_id, &resp.member_id, &host);
            }
            resp.encode(version)
        }
        Request::ListGroups(req) => {
            let mut resp = handlers::describe_groups::list_groups(broker.borrow().groups(), req);
            gate.finish_list_groups(&mut resp);
            resp.encode(version)
        }
        Request::DescribeGroups(req) => {
            let mut resp = handlers::describe_groups::describe_groups(broker.borrow().groups(), req);
            gate.finish_describe_groups(&mut resp);
            resp.encode(version)
        }
        Request::SyncGroup(req) => {
            sync_group_coordination(rt, broker);
            let reply = handlers::groups::sync_group(broker.borrow_mut().groups_mut(), req, now);
            // Partitioned mode: the leader's SyncGroup stores the generation (replicated) before
            // any member gets its assignment.
            let store = rt.with_disk(|disk| broker.borrow_mut().begin_group_store(disk, &req.group_id, now));
            if let Some(pending) = store {
                // Appended to the offsets partition: its followers' waiting fetches answer now.
                config.watch.poke(&broker.borrow(), OFFSETS_TOPIC, pending.partition);
                let deadline = rt.monotonic_ms().saturating_add(OFFSETS_COMMIT_TIMEOUT_MS);
                loop {
                    let timed_out = rt.monotonic_ms() >= deadline;
                    if broker.borrow_mut().poll_group_store(&pending, timed_out, rt.now_ms()) {
                        break;
                    }
                    rt.sleep(Duration::from_millis(config.fetch_poll_ms.max(1))).await;
                }
            }
            let resp = match reply {
                Reply::Now(resp) => resp,
                Reply::Parked(ticket) => loop {
                    rt.sleep(Duration::from_millis(config.fetch_poll_ms.max(1))).await;
                    let taken = broker.borrow_mut().groups_mut().take_sync(ticket);
                    if let Some(resp) = taken {
                        break resp;
                    }
                },
            };
            resp.encode(version)
        }
        Request::Heartbeat(req) => {
            sync_group_coordination(rt, broker);
            handlers::groups::heartbeat(broker.borrow_mut().groups_mut(), req, now).encode(version)
        }
        Request::LeaveGroup(req) => {
            sync_group_coordination(rt, broker);
            handlers::groups::leave_group(broker.borrow_mut().groups_mut(), req, version, now).encode(version)
        }
        Request::OffsetCommit(req) if handlers::groups::partitioned(&broker.borrow()) => {
            let refused = gate.split_offset_commit(req);
            let req = &*req;
            let begun =
                rt.with_disk(|disk| handlers::groups::offset_commit_begin(&mut broker.borrow_mut(), disk, req, now));
            let resp = match begun {
                Ok(resp) => resp,
                // Replicated: answered once the HW passes the commit, the leadership is lost, or
                // `offsets.commit.timeout.ms` passes.
                Err(waiting) => {
                    let (request, pending) = *waiting;
                    // Appended to the offsets partition, as above.
                    config.watch.poke(&broker.borrow(), OFFSETS_TOPIC, pending.partition);
                    let deadline = rt.monotonic_ms().saturating_add(OFFSETS_COMMIT_TIMEOUT_MS);
                    loop {
                        let timed_out = rt.monotonic_ms() >= deadline;
                        let settled = broker.borrow_mut().poll_offset_commit(&pending, timed_out);
                        if let Some(results) = settled {
                            break request.answer(&results);
                        }
                        rt.sleep(Duration::from_millis(config.fetch_poll_ms.max(1))).await;
                    }
                }
            };
            let mut resp = resp;
            resp.topics.extend(refused);
            resp.encode(version)
        }
        Request::OffsetCommit(req) => {
            let refused = gate.split_offset_commit(req);
            let mut resp =
                rt.with_disk(|disk| handlers::groups::offset_commit(&mut broker.borrow_mut(), disk, req, now));
            resp.topics.extend(refused);
            resp.encode(version)
        }
        Request::OffsetForLeaderEpoch(req) => {
            let refused = gate.split_offset_for_leader_epoch(req);
            let mut resp = handlers::offset_for_leader_epoch(&broker.borrow(), req);
            resp.topics.extend(refused);
            resp.encode(version)
        }
        Request::OffsetFetch(req) => {
            sync_group_coordination(rt, broker);
            let mut resp = handlers::groups::offset_fetch(broker.borrow().groups(), req);
            gate.finish_offset_fetch(&mut resp);
            resp.encode(version)
        }
        Request::DeleteTopics(req) => {
            let refused = gate.split_delete_topics(&broker.borrow(), req);
            let mut resp = if req.topics.is_empty() && !refused.is_empty() {
                Default::default()
            } else if let Some(admin) = &config.admin {
                admin.delete_topics_request(rt, broker, req).await
            } else {
                rt.with_disk(|disk| handlers::delete_topics::delete_topics(&mut broker.borrow_mut(), disk, req))
            };
            resp.responses.extend(refused);
            resp.encode(version)
        }
        Request::DescribeAcls(req) => {
            let admitted = handlers::acls::admission(gate.enabled(), gate.may_cluster(Operation::Describe));
            let empty = Default::default();
            let acls = config.acls.as_ref().map(|a| a.acls.borrow());
            handlers::acls::describe_acls(acls.as_deref().unwrap_or(&empty), req, admitted).encode(version)
        }
        Request::CreateAcls(req) if config.acls.as_ref().is_some_and(|a| a.admin.is_some()) => {
            let admitted = handlers::acls::admission(gate.enabled(), gate.may_cluster(Operation::Alter));
            let admin = config
                .acls
                .as_ref()
                .and_then(|a| a.admin.as_ref())
                .expect("checked by the guard");
            admin.create_acls_request(rt, req, admitted).await.encode(version)
        }
        Request::DeleteAcls(req) if config.acls.as_ref().is_some_and(|a| a.admin.is_some()) => {
            let admitted = handlers::acls::admission(gate.enabled(), gate.may_cluster(Operation::Alter));
            let admin = config
                .acls
                .as_ref()
                .and_then(|a| a.admin.as_ref())
                .expect("checked by the guard");
            admin.delete_acls_request(rt, req, admitted).await.encode(version)
        }
        Request::CreateAcls(req) => {
            let admitted = handlers::acls::admission(gate.enabled(), gate.may_cluster(Operation::Alter));
            let mut scratch = Default::default();
            let mut acls = config.acls.as_ref().map(|a| a.acls.borrow_mut());
            handlers::acls::create_acls(acls.as_deref_mut().unwrap_or(&mut scratch), req, admitted).encode(version)
        }
        Request::DeleteAcls(req) => {
            let admitted = handlers::acls::admission(gate.enabled(), gate.may_cluster(Operation::Alter));
            let mut scratch = Default::default();
            let mut acls = config.acls.as_ref().map(|a| a.acls.borrow_mut());
            handlers::acls::delete_acls(acls.as_deref_mut().unwrap_or(&mut scratch), req, admitted).encode(version)
        }
        Request::DescribeUserScramCredentials(req) => {
            handlers::users::describe(config.sasl.as_deref(), req, gate.may_cluster(Operation::Describe))
                .encode(version)
        }
        Request::AlterUserScramCredentials(req) => {
            let checked = handlers::users::check_alter(req, gate.may_cluster(Operation::Alter), config.sasl.is_some());
            let job = handlers::users::to_store(&checked);
            let stored = match (&config.users, config.sasl.as_deref()) {
                _ if job.is_empty() => Vec::new(),
                (Some(admin), _) => admin.alter(rt, job).await,
                (None, Some(sasl)) => handlers::users::alter_single_node(sasl, job),
                // check_alter refused every user already.
                (None, None) => Vec::new(),
            };
            handlers::users::alter_response(checked, stored).encode(version)
        }
        Request::DescribeConfigs(req) => {
            handlers::describe_configs::describe_configs(&broker.borrow(), req).encode(version)
        }
        // Kafka: moving partitions and electing leaders need Alter on the Cluster, listing moves
        // Describe; a refused principal gets CLUSTER_AUTHORIZATION_FAILED and nothing changes.
        Request::AlterPartitionReassignments(req) if !gate.may_cluster(Operation::Alter) => {
            let mut resp = handlers::reassignments::alter_refused_single_node(req);
            resp.error_code = ErrorCode::ClusterAuthorizationFailed.code();
            resp.error_message = Some("Alter on the Cluster is required".into());
            for p in resp.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                p.error_code = ErrorCode::ClusterAuthorizationFailed.code();
                p.error_message = None;
            }
            resp.encode(version)
        }
        Request::ElectLeaders(req) if !gate.may_cluster(Operation::Alter) => {
            let mut resp = handlers::reassignments::elect_single_node(req);
            resp.error_code = ErrorCode::ClusterAuthorizationFailed.code();
            for p in resp
                .replica_election_results
                .iter_mut()
                .flat_map(|t| t.partition_result.iter_mut())
            {
                p.error_code = ErrorCode::ClusterAuthorizationFailed.code();
            }
            resp.encode(version)
        }
        Request::ListPartitionReassignments(_) if !gate.may_cluster(Operation::Describe) => {
            crate::protocol::api::list_partition_reassignments::ListPartitionReassignmentsResponse {
                error_code: ErrorCode::ClusterAuthorizationFailed.code(),
                error_message: Some("Describe on the Cluster is required".into()),
                ..Default::default()
            }
            .encode(version)
        }
        Request::AlterPartitionReassignments(req) => match &config.admin {
            Some(admin) => admin.alter_reassignments(rt, req).await.encode(version),
            None => handlers::reassignments::alter_refused_single_node(req).encode(version),
        },
        Request::ElectLeaders(req) => match &config.admin {
            Some(admin) => admin.elect_leaders(rt, broker, req).await.encode(version),
            None => handlers::reassignments::elect_single_node(req).encode(version),
        },
        Request::ListPartitionReassignments(req) => {
            handlers::reassignments::list_partition_reassignments(&broker.borrow(), req).encode(version)
        }
        // Every API the codec speaks is served today; the arm stays for the next one it learns.
        #[allow(unreachable_patterns)]
        _ => return Outcome::Close(format!("api key {} is not served by this node", header.api_key)),
    };
    Outcome::Reply(encode_response(&header, &body))
}

/// A partition a Fetch asks for: (topic, partition, fetch offset, current leader epoch), the
/// topic named even when the request uses ids.
type AskedPartition<'a> = (Cow<'a, str>, i32, i64, i32);

/// What a waiting Fetch waits for on each partition it asked: a follower's for the log end to
/// pass its offset, a consumer's for the high watermark.
fn fetch_interests<'a>(asked: &'a [AskedPartition<'_>], follower: bool) -> impl Iterator<Item = watch::Interest> + 'a {
    asked.iter().map(move |(topic, partition, offset, _)| {
        if follower {
            watch::Interest::log_end_above(topic, *partition, *offset)
        } else {
            watch::Interest::high_watermark_at_least(topic, *partition, offset.saturating_add(1))
        }
    })
}

#[cfg(test)]
mod auth_tests;

#[cfg(test)]
mod driver_tests;

#[cfg(test)]
mod authz_node_tests;

#[cfg(test)]
mod replication_node_tests;

#[cfg(test)]
mod users_node_tests;
