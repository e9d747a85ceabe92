//! The group consumer's background heartbeat (KIP-62): a task spawned on the runtime that sends
//! Heartbeat every `heartbeat.interval.ms` while the member is in a generation, so processing
//! between polls does not cost the session; and that leaves the group when the application has
//! not polled for `max.poll.interval.ms`, as Kafka's heartbeat thread does.
//!
//! Contract: the task and the consumer share one [`Shared`]; the consumer writes who it is, the
//! task writes what the coordinator said (an error the next `poll` acts on). An answer about a
//! member or generation the consumer has since left is dropped. The task holds the state weakly
//! and ends when the consumer is dropped; every wait in it is a sleep or a bounded call.
//!
//! Fault model: the coordinator may be unreachable or slow: a failed heartbeat is logged and
//! tried again next interval (the session timeout decides), the connection is remade.

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use crate::client::conn::{ClientError, KafkaConn};
use crate::client::{code, HEARTBEAT_VERSION, LEAVE_GROUP_VERSION};
use crate::protocol::api::heartbeat::HeartbeatRequest;
use crate::protocol::api::leave_group::{LeaveGroupRequest, MemberIdentity};
use crate::protocol::{Request, Response};
use crate::runtime::Runtime;
use crate::ErrorCode;

/// What the consumer and its heartbeat task share.
#[derive(Clone, Debug, Default)]
pub struct Shared {
    pub group_id: String,
    pub client_id: String,
    pub member_id: String,
    pub generation: i32,
    /// In a generation and not rejoining: heartbeats are due.
    pub active: bool,
    pub coordinator: Option<String>,
    pub interval_ms: u64,
    pub max_poll_interval_ms: u64,
    pub request_timeout_ms: u64,
    /// How connections to the coordinator log in, when the listener uses SASL.
    pub sasl: Option<crate::security::SaslCredentials>,
    pub last_poll_ms: u64,
    /// A group error a heartbeat got, for the next poll.
    pub error: Option<ErrorCode>,
    /// The task left the group: `max.poll.interval.ms` passed without a poll.
    pub left_for_poll_timeout: bool,
}

pub type SharedRef = Rc<RefCell<Shared>>;

/// Starts the heartbeat task of the consumer owning `shared`.
pub fn spawn<R: Runtime>(rt: &R, shared: &SharedRef) {
    let weak = Rc::downgrade(shared);
    rt.spawn(run(rt.clone(), weak));
}

async fn run<R: Runtime>(rt: R, weak: Weak<RefCell<Shared>>) {
    let mut conn: Option<KafkaConn<R>> = None;
    loop {
        let Some(interval) = weak.upgrade().map(|s| s.borrow().interval_ms.max(1)) else {
            return;
        };
        rt.sleep(Duration::from_millis(interval)).await;
        let Some(state) = weak.upgrade() else { return };
        let snapshot = state.borrow().clone();
        drop(state);
        let Some(addr) = snapshot.coordinator.clone() else {
            continue;
        };
        if !snapshot.active || snapshot.member_id.is_empty() {
            continue;
        }
        let now = rt.monotonic_ms();
        let poll_timeout = now.saturating_sub(snapshot.last_poll_ms) > snapshot.max_poll_interval_ms;
        let request = if poll_timeout {
            tracing::warn!(group = %snapshot.group_id, member = %snapshot.member_id, "max.poll.interval.ms exceeded; leaving the group");
            Request::LeaveGroup(LeaveGroupRequest {
                group_id: snapshot.group_id.clone(),
                members: vec![MemberIdentity {
                    member_id: snapshot.member_id.clone(),
                    group_instance_id: None,
                    reason: Some("max.poll.interval.ms exceeded".into()),
                }],
            })
        } else {
            Request::Heartbeat(HeartbeatRequest {
                group_id: snapshot.group_id.clone(),
                generation_id: snapshot.generation,
                member_id: snapshot.member_id.clone(),
                group_instance_id: None,
            })
        };
        let version = if poll_timeout {
            LEAVE_GROUP_VERSION
        } else {
            HEARTBEAT_VERSION
        };
        let result = call(&rt, &mut conn, &addr, &snapshot, &request, version).await;
        let Some(state) = weak.upgrade() else { return };
        let mut s = state.borrow_mut();
        if s.member_id != snapshot.member_id || s.generation != snapshot.generation || !s.active {
            continue; // the consumer moved on meanwhile: this answer is about the past
        }
        if poll_timeout {
            s.left_for_poll_timeout = true;
            s.active = false;
            continue;
        }
        match result {
            Ok(Response::Heartbeat(resp)) => match code(resp.error_code) {
                ErrorCode::None => {}
                c => {
                    tracing::debug!(group = %s.group_id, member = %s.member_id, code = ?c, "heartbeat: rejoin");
                    s.error = Some(c);
                    s.active = false;
                }
            },
            Ok(_) => tracing::info!(group = %s.group_id, "Heartbeat answered with another API"),
            Err(e) => {
                tracing::info!(group = %s.group_id, error = %e, "heartbeat failed");
                conn = None;
                if matches!(e, ClientError::Net(_) | ClientError::Timeout(_)) {
                    // The coordinator is unreachable: the next poll looks it up again (it may
                    // have moved to another broker).
                    s.error = Some(ErrorCode::CoordinatorNotAvailable);
                    s.active = false;
                }
            }
        }
    }
}

async fn call<R: Runtime>(
    rt: &R,
    conn: &mut Option<KafkaConn<R>>,
    addr: &str,
    s: &Shared,
    request: &Request,
    version: i16,
) -> Result<Response, ClientError> {
    if conn.as_ref().is_none_or(|c| c.addr != addr) {
        let mut c = KafkaConn::connect(rt, addr, &s.client_id, s.request_timeout_ms).await?;
        if let Some(creds) = &s.sasl {
            c.authenticate(creds).await?;
        }
        *conn = Some(c);
    }
    let c = conn.as_mut().expect("connected above");
    let result = c.call(request, version).await;
    if result.is_err() {
        *conn = None;
    }
    result
}
